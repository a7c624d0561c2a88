package executor

import (
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"unicode/utf8"
)

// pumpStreams copies the program's stdout and stderr pipes into their captures until both
// pipes' writers are all gone. One goroutine waits for each pipe; a mutex they share makes
// each read (up to 256 KiB: all a pipe holds, unless the program enlarged it) and the passing
// on of what it read one step, so that nothing read from one pipe later is passed on before
// it. The bootstrap's sys.stdout and sys.stderr wait, before a write that follows one to the
// other stream, until the executor has read the other pipe: the program's Python-level writes
// so keep their order across the two streams. Other writes keep their order within their
// stream; across the two, the order is the order they were read in.
func pumpStreams(stdout, stderr *os.File, outCap, errCap *capture) {
	var mu sync.Mutex
	buf := make([]byte, 256<<10) // used under mu
	var wg sync.WaitGroup
	for _, p := range []*pipeReader{{f: stdout, c: outCap}, {f: stderr, c: errCap}} {
		wg.Go(func() {
			defer func() {
				mu.Lock()
				p.c.close()
				mu.Unlock()
			}()
			rc, err := p.f.SyscallConn()
			if err != nil {
				return
			}
			for !p.done {
				err := rc.Read(func(fd uintptr) bool {
					mu.Lock()
					defer mu.Unlock()
					return p.passOn(int(fd), buf)
				})
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
}

// pipeReader is one of a run's output pipes (non-blocking) and its capture.
type pipeReader struct {
	f    *os.File
	c    *capture
	done bool // the pipe has ended (or failed)
}

// passOn reads what the pipe (descriptor fd) holds now and passes it to the capture. It
// returns false when the pipe holds nothing yet, true when it read data or found the end.
func (p *pipeReader) passOn(fd int, buf []byte) bool {
	n, err := syscall.Read(fd, buf)
	switch {
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
		return false
	case n > 0:
		p.c.write(buf[:n])
	default: // end of the pipe, or an error
		p.done = true
	}
	return true
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
