package boxspec

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/testenv/logbuf"
)

func TestLineLoggerForwardsExecutorRecords(t *testing.T) {
	var out bytes.Buffer
	l := NewLineLogger(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	})))
	l.Write([]byte(`{"level":"WARN","msg":"killing a stale executor","pid":8,"data_bytes":44126208}` + "\n" + `plain te`))
	l.Write([]byte("xt\n"))
	l.Flush()
	got := out.String()
	for _, want := range []string{`level=WARN msg="killing a stale executor" data_bytes=44126208 pid=8`, `level=INFO msg="plain text"`} {
		if !strings.Contains(got, want) {
			t.Errorf("log %q lacks %q", got, want)
		}
	}
}

// TestLineLoggerWriteAndFlushRace: an exec stream's stderr copier may still write while the
// stream's caller flushes (a race the race detector caught in the Kubernetes runtime); every
// line still comes out whole, once.
func TestLineLoggerWriteAndFlushRace(t *testing.T) {
	var out logbuf.Buffer
	l := NewLineLogger(slog.New(slog.NewTextHandler(&out, nil)))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			_, _ = l.Write([]byte("line\n"))
		}
	}()
	for range 200 {
		l.Flush()
	}
	<-done
	l.Flush()
	if n := strings.Count(out.String(), "msg=line"); n != 200 {
		t.Errorf("%d lines logged, want 200", n)
	}
}
