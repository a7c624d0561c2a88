package executor

import (
	"unicode/utf8"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// ring keeps the latest sandbox.ProcessTailBytes of a background command's stream (valid
// UTF-8, as its capture passes it on) and counts all of it. Its buffer holds at most twice
// that: the older half is dropped in one copy once it is full, so a byte costs a copy or two
// however the stream is chunked. It is used under its command's pumpMu.
type ring struct {
	buf   []byte
	total int64
}

func (r *ring) write(s string) {
	const keep = sandbox.ProcessTailBytes
	r.total += int64(len(s))
	if len(s) >= keep {
		r.buf = append(r.buf[:0], s[len(s)-keep:]...)
		return
	}
	if len(r.buf)+len(s) > 2*keep {
		n := copy(r.buf, r.buf[len(r.buf)-(keep-len(s)):])
		r.buf = r.buf[:n]
	}
	r.buf = append(r.buf, s...)
}

// kept returns the latest output, at most sandbox.ProcessTailBytes, from a character's start.
func (r *ring) kept() string {
	b := r.buf[max(0, len(r.buf)-sandbox.ProcessTailBytes):]
	for i := 0; i < len(b) && i < utf8.UTFMax; i++ {
		if utf8.RuneStart(b[i]) {
			return string(b[i:])
		}
	}
	return string(b)
}
