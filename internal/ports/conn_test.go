package ports

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// A metered connection carries at most its bytes, both ways together: a read or a write past
// them gives what is left and then errTooMuch, never a buffer's worth more (a hostile server
// with a 1 MiB cap got 16 KiB past it through the proxy).
func TestMeteredConnStopsAtItsBytes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write int // bytes the conn's own Write sends first
	}{{"a write", 0}, {"a write after another", 60}} {
		t.Run(tc.name, func(t *testing.T) {
			near, far := net.Pipe()
			defer far.Close()
			go func() { _, _ = io.Copy(io.Discard, far) }()
			m := newMeteredConn(near, time.Minute, 100)
			defer m.Close()
			if tc.write > 0 {
				if n, err := m.Write(make([]byte, tc.write)); n != tc.write || err != nil {
					t.Fatalf("a write within the bytes: %d, %v", n, err)
				}
			}
			if n, err := m.Write(make([]byte, 1000)); n != 100-tc.write || !errors.Is(err, errTooMuch) {
				t.Fatalf("a write past the bytes: %d, %v; want %d and errTooMuch", n, err, 100-tc.write)
			}
		})
	}
	near, far := net.Pipe()
	go func() {
		for {
			if _, err := far.Write(make([]byte, 1000)); err != nil {
				return
			}
		}
	}()
	m := newMeteredConn(near, time.Minute, 100)
	defer m.Close()
	n, err := io.Copy(io.Discard, struct{ io.Reader }{m})
	if n != 100 || !errors.Is(err, errTooMuch) {
		t.Fatalf("reading an endless stream: %d bytes, %v; want 100 and errTooMuch", n, err)
	}
}
