package ports

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// errTooMuch ends a connection past its bytes (Limits.MaxBytes).
var errTooMuch = errors.New("the connection carried more bytes than one may (port_connection_max_bytes)")

// counter counts bytes.
type counter struct{ n atomic.Int64 }

func (c *counter) add(n int)   { c.n.Add(int64(n)) }
func (c *counter) load() int64 { return c.n.Load() }

// countingBody counts a request body's bytes as they are read, each read bounded by idle.
type countingBody struct {
	io.ReadCloser
	n    *counter
	rc   *http.ResponseController
	idle time.Duration
}

func (b *countingBody) Read(p []byte) (int, error) {
	_ = b.rc.SetReadDeadline(time.Now().Add(b.idle))
	n, err := b.ReadCloser.Read(p)
	b.n.add(n)
	return n, err
}

// countingWriter counts the answer's bytes and status; a WebSocket's hijacked connection is
// counted both ways.
type countingWriter struct {
	http.ResponseWriter
	x    *exchange
	rc   *http.ResponseController
	idle time.Duration
}

func (w *countingWriter) WriteHeader(code int) {
	if w.x.status == 0 || w.x.status < 200 {
		w.x.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.x.status == 0 {
		w.x.status = http.StatusOK
	}
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.idle))
	n, err := w.ResponseWriter.Write(p)
	w.x.out.add(n)
	return n, err
}

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack takes the client's connection for a protocol switch (a WebSocket): its bytes are
// counted on it from then on.
func (w *countingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := w.rc.Hijack()
	if err != nil {
		return nil, nil, err
	}
	// The idle timeout of the box's side bounds the WebSocket (a quiet one is closed there).
	_ = c.SetDeadline(time.Time{})
	w.x.status = http.StatusSwitchingProtocols
	return &countingConn{Conn: c, in: &w.x.in, out: &w.x.out}, rw, nil
}

// countingConn counts a client connection's bytes: read from the client is in, written to it
// out.
type countingConn struct {
	net.Conn
	in, out *counter
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.add(n)
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.add(n)
	return n, err
}

// meteredConn is a connection to a port, bounded: it ends after idle without a byte either
// way, and once it has carried max bytes.
type meteredConn struct {
	net.Conn
	idle time.Duration
	max  int64
	used atomic.Int64
	last atomic.Int64 // unix nanoseconds of its last byte
	once sync.Once
}

func newMeteredConn(c net.Conn, idle time.Duration, max int64) *meteredConn {
	m := &meteredConn{Conn: c, idle: idle, max: max}
	m.last.Store(time.Now().UnixNano())
	return m
}

// left is how many more bytes the connection may carry; at none it is cut. A read or a write
// takes at most that many, so the cap holds to the byte (a read and a write at once may pass
// it by one of them, never more).
func (c *meteredConn) left() int64 {
	n := c.max - c.used.Load()
	if n <= 0 {
		c.once.Do(func() { c.Conn.Close() })
	}
	return n
}

// carried counts n bytes.
func (c *meteredConn) carried(n int) {
	if n > 0 {
		c.last.Store(time.Now().UnixNano())
		c.used.Add(int64(n))
	}
}

// Read waits for bytes until the connection has been idle both ways for c.idle: a write
// meanwhile (a client talking to a silent server) keeps it open.
func (c *meteredConn) Read(p []byte) (int, error) {
	for {
		left := c.left()
		if left <= 0 {
			return 0, errTooMuch
		}
		if int64(len(p)) > left {
			p = p[:left]
		}
		_ = c.Conn.SetReadDeadline(time.Unix(0, c.last.Load()).Add(c.idle))
		n, err := c.Conn.Read(p)
		c.carried(n)
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && n == 0 &&
			time.Since(time.Unix(0, c.last.Load())) < c.idle {
			continue
		}
		return n, err
	}
}

func (c *meteredConn) Write(p []byte) (int, error) {
	left := c.left()
	if left <= 0 {
		return 0, errTooMuch
	}
	over := int64(len(p)) > left
	if over {
		p = p[:left]
	}
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	n, err := c.Conn.Write(p)
	c.carried(n)
	if err == nil && over {
		c.left() // cuts it
		err = errTooMuch
	}
	return n, err
}

// CloseWrite passes the half-close on (a WebSocket's end, a request's body done).
func (c *meteredConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
