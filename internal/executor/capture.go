package executor

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/sandpit-dev/sandpit/internal/protocol"
)

// pumpStreams copies the program's stdout and stderr pipes into their captures until both
// pipes' writers are all gone. One goroutine waits for each pipe; a mutex they share makes
// each read (up to 256 KiB: all a pipe holds, unless the program enlarged it) and the queueing
// of what it read one step, and one goroutine passes the queue on to the captures in order:
// nothing read from one pipe later is passed on before it, and a slow reader of the captures'
// output does not delay the reads (the queue is bounded: when it is full, reading waits, and
// the program's writes with it). The bootstrap's sys.stdout and sys.stderr wait, before a
// write that follows one to the other stream, until the executor has read the other pipe: the
// program's Python-level writes so keep their order across the two streams. Other writes keep
// their order within their stream; across the two, the order is the order they were read in.
//
// q, when not nil, is the queue's door for the control line: what it is given to do (send a
// display) is done in order with the chunks read before it.
func pumpStreams(stdout, stderr *os.File, outCap, errCap *capture, q *passQueue) {
	if q == nil {
		q = &passQueue{}
	}
	q.mu.Lock()
	q.ch = make(chan chunk, 64)
	q.mu.Unlock()
	queue := q.ch
	passed := make(chan struct{})
	go func() {
		defer close(passed)
		for ch := range queue {
			if ch.fn != nil {
				ch.fn()
				continue
			}
			ch.c.write(ch.data)
		}
		outCap.close()
		errCap.close()
	}()
	mu := &q.mu
	buf := make([]byte, 256<<10) // used under mu
	var wg sync.WaitGroup
	for _, pipe := range []struct {
		f *os.File
		c *capture
	}{{stdout, outCap}, {stderr, errCap}} {
		wg.Go(func() {
			rc, err := pipe.f.SyscallConn()
			if err != nil {
				return
			}
			for done := false; !done; {
				err := rc.Read(func(fd uintptr) bool {
					mu.Lock()
					defer mu.Unlock()
					n, err := syscall.Read(int(fd), buf)
					switch {
					case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
						return false // nothing yet: wait until the pipe is readable
					case n > 0:
						queue <- chunk{c: pipe.c, data: bytes.Clone(buf[:n])}
					default: // end of the pipe, or an error
						done = true
					}
					return true
				})
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	mu.Lock()
	q.closed = true
	close(queue)
	mu.Unlock()
	<-passed
}

// chunk is a piece of a stream read from its pipe, or (fn) something to do in order with them.
type chunk struct {
	c    *capture
	data []byte
	fn   func()
}

// passQueue is pumpStreams' queue of what it read, to be passed on in order.
type passQueue struct {
	mu     sync.Mutex // held by a pipe's read and the queueing of what it read
	ch     chan chunk
	closed bool
}

// do has fn called in order with the chunks read so far: at once when the streams have ended
// or have not started.
func (q *passQueue) do(fn func()) {
	q.mu.Lock()
	if q.ch != nil && !q.closed {
		q.ch <- chunk{fn: fn}
		q.mu.Unlock()
		return
	}
	q.mu.Unlock()
	fn()
}

// capture turns a stream's raw bytes into valid UTF-8 chunks and enforces the stream's byte
// cap. Invalid bytes become U+FFFD; a multi-byte character split across reads is held back
// until its end arrives. When the cap is passed, the chunk is cut at the last whole character
// within the cap, truncated is set and onLimit is called once; later bytes are dropped.
// It is used from one goroutine at a time.
type capture struct {
	limit     int64 // bytes of UTF-8 to pass on; 0 means no cap
	emit      func(string)
	onLimit   func()
	sent      int64
	pending   []byte
	truncated bool
}

// write feeds p to the capture.
func (c *capture) write(p []byte) {
	if c.truncated {
		return
	}
	data := append(c.pending, p...)
	cut := completePrefix(data)
	c.pending = append(c.pending[:0:0], data[cut:]...)
	c.pass(data[:cut])
}

// close flushes what is pending at the end of the stream.
func (c *capture) close() {
	if !c.truncated && len(c.pending) > 0 {
		c.pass(c.pending)
	}
	c.pending = nil
}

func (c *capture) pass(raw []byte) {
	if len(raw) == 0 {
		return
	}
	s := strings.ToValidUTF8(string(raw), "\uFFFD")
	if c.limit > 0 && c.sent+int64(len(s)) > c.limit {
		s = cutAtRune(s, int(c.limit-c.sent))
		c.truncated = true
	}
	if s != "" {
		c.sent += int64(len(s))
		c.emit(s)
	}
	if c.truncated && c.onLimit != nil {
		c.onLimit()
	}
}

// completePrefix returns the length of the longest prefix of b that does not end inside an
// incomplete (but so far valid) UTF-8 sequence.
func completePrefix(b []byte) int {
	// A sequence is at most 4 bytes: look at most 3 bytes back for its start.
	for i := len(b) - 1; i >= 0 && i >= len(b)-3; i-- {
		if !utf8.RuneStart(b[i]) {
			continue
		}
		if !utf8.FullRune(b[i:]) {
			return i
		}
		break
	}
	return len(b)
}

// cutAtRune returns the longest prefix of s of at most n bytes that ends on a character boundary.
func cutAtRune(s string, n int) string {
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// partialLineWait is how long a partial line (a prompt, a progress bar's "\r") is held
// waiting for its end before it is sent as it is.
const partialLineWait = 50 * time.Millisecond

// maxHeldLine is the most bytes of a partial line held back; a longer one is sent at once.
const maxHeldLine = 64 << 10

// lines turns a run's stream chunks into events of whole lines: what a chunk holds up to its
// last newline is sent at once, the rest (a partial line) is held until its newline arrives,
// the other stream is written, a display is sent, or partialLineWait has passed. So
// print("Hello"), which Python writes as "Hello" and "\n", arrives as one event, and a partial
// line still streams. One lines serves both streams of a run (or session call), so their
// order is kept; it is safe for concurrent use.
type lines struct {
	mu    sync.Mutex
	send  func(kind protocol.Kind, s string)
	held  []byte
	kind  protocol.Kind // the stream held belongs to
	timer *time.Timer
}

// emit takes a chunk of stream kind, valid UTF-8.
func (l *lines) emit(kind protocol.Kind, s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.held) > 0 && l.kind != kind {
		l.flushLocked()
	}
	l.kind = kind
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		if len(l.held) > 0 {
			l.held = append(l.held, s[:i+1]...)
			l.send(kind, string(l.held))
			l.held = l.held[:0]
		} else {
			l.send(kind, s[:i+1])
		}
		s = s[i+1:]
	}
	l.held = append(l.held, s...)
	switch {
	case len(l.held) >= maxHeldLine:
		l.flushLocked()
	case len(l.held) == 0:
		l.stopTimer()
	case l.timer == nil:
		l.timer = time.AfterFunc(partialLineWait, l.flush)
	}
}

// flush sends the partial line held, if any.
func (l *lines) flush() {
	l.mu.Lock()
	l.flushLocked()
	l.mu.Unlock()
}

// inOrder sends what is held, then calls fn, with no stream chunk between the two.
func (l *lines) inOrder(fn func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked()
	fn()
}

func (l *lines) flushLocked() {
	if len(l.held) > 0 {
		l.send(l.kind, string(l.held))
		l.held = l.held[:0]
	}
	l.stopTimer()
}

func (l *lines) stopTimer() {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
}
