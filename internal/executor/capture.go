package executor

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"unicode/utf8"
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
func pumpStreams(stdout, stderr *os.File, outCap, errCap *capture) {
	type chunk struct {
		c    *capture
		data []byte
	}
	queue := make(chan chunk, 64)
	passed := make(chan struct{})
	go func() {
		defer close(passed)
		for ch := range queue {
			ch.c.write(ch.data)
		}
		outCap.close()
		errCap.close()
	}()
	var mu sync.Mutex
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
						queue <- chunk{pipe.c, bytes.Clone(buf[:n])}
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
	close(queue)
	<-passed
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
