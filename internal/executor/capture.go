package executor

import (
	"strings"
	"unicode/utf8"
)

// capture turns a stream's raw bytes into valid UTF-8 chunks and enforces the stream's byte
// cap. Invalid bytes become U+FFFD; a multi-byte character split across reads is held back
// until its end arrives. When the cap is passed, the chunk is cut at the last whole character
// within the cap, truncated is set and onLimit is called once; later bytes are dropped.
// It is used from one goroutine.
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
