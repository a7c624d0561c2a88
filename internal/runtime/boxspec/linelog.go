package boxspec

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"sync"
)

// LineLogger logs each line written to it: the executor's JSON log records at their own level
// and with their own attributes, anything else as it is. Its Write never fails. Write and
// Flush may be called from different goroutines (an exec stream's copier may still write
// after the stream's call returned and its caller flushes).
type LineLogger struct {
	log *slog.Logger
	mu  sync.Mutex
	buf []byte
}

// NewLineLogger returns a LineLogger that logs to log.
func NewLineLogger(log *slog.Logger) *LineLogger { return &LineLogger{log: log} }

// Write logs every whole line of what has been written so far.
func (l *LineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.logLine(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 64<<10 {
		l.flush()
	}
	return len(p), nil
}

// Flush logs what is left of an unfinished line.
func (l *LineLogger) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flush()
}

func (l *LineLogger) flush() {
	if len(l.buf) > 0 {
		l.logLine(l.buf)
		l.buf = nil
	}
}

func (l *LineLogger) logLine(line []byte) {
	var rec map[string]any
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber() // integers stay integers (44126208, not 4.4126208e+07)
	if dec.Decode(&rec) != nil {
		l.log.Info(string(line))
		return
	}
	msg, _ := rec[slog.MessageKey].(string)
	var level slog.Level
	if s, ok := rec[slog.LevelKey].(string); !ok || level.UnmarshalText([]byte(s)) != nil {
		level = slog.LevelInfo
	}
	delete(rec, slog.MessageKey)
	delete(rec, slog.LevelKey)
	attrs := make([]any, 0, 2*len(rec))
	for _, k := range slices.Sorted(maps.Keys(rec)) { // in one order, line after line
		attrs = append(attrs, k, rec[k])
	}
	l.log.Log(context.Background(), level, msg, attrs...)
}
