package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// maxHelloBytes caps what a connection may send before its TLS ClientHello has been read
// whole: a ClientHello fits one record (16 KiB) unless a client splits it on purpose.
const maxHelloBytes = 64 << 10

// errHelloRead stops the TLS server that reads a ClientHello once it has it.
var errHelloRead = errors.New("egress: ClientHello read")

// readServerName reads the server name (SNI) of the TLS ClientHello at the start of b, with
// crypto/tls's own parser. It returns more=true when b holds only part of it, and an error
// when b is not a ClientHello.
func readServerName(b []byte) (name string, more bool, err error) {
	var got *tls.ClientHelloInfo
	in := &helloConn{r: bytes.NewReader(b)}
	err = tls.Server(in, &tls.Config{GetConfigForClient: func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		got = hi
		return nil, errHelloRead
	}}).Handshake()
	switch {
	case got != nil:
		return got.ServerName, false, nil
	case in.eof:
		return "", true, nil
	default:
		return "", false, err
	}
}

// helloConn is a net.Conn that reads a buffered ClientHello, saying when it ran out, and
// discards what the TLS server writes (its alerts).
type helloConn struct {
	r   *bytes.Reader
	eof bool
}

func (c *helloConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if errors.Is(err, io.EOF) {
		c.eof = true
	}
	return n, err
}
func (c *helloConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *helloConn) Close() error                     { return nil }
func (c *helloConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *helloConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *helloConn) SetDeadline(time.Time) error      { return nil }
func (c *helloConn) SetReadDeadline(time.Time) error  { return nil }
func (c *helloConn) SetWriteDeadline(time.Time) error { return nil }

// checkServerName refuses a TLS server name that the gate's policies do not allow at port: a
// tunnel to an allowed host:port must not carry a handshake with another server behind the
// same address (a CDN's front end serves many). A name equal to the host asked for, or
// allowed by name at the port by every policy, passes; so does a handshake without one.
func (g *Gate) checkServerName(asked, name string, port int) error {
	if name == "" {
		return nil
	}
	n, err := NormalizeHost(name)
	if err != nil {
		return fmt.Errorf("its TLS server name %q %v", name, err)
	}
	if a, err := NormalizeHost(asked); err == nil && a == n {
		return nil
	}
	for _, p := range g.policies {
		if _, ok := p.hostRule(n, port); !ok {
			return fmt.Errorf("its TLS server name %s (the ClientHello's SNI) is not the host it asked for, %s, and no entry of %s names it at port %d",
				n, asked, p.Setting, port)
		}
	}
	return nil
}

// writeHello holds the connection's first bytes until its TLS ClientHello is whole, checks
// its server name (checkServerName) and then sends them; bytes that do not start a TLS
// handshake are sent as they are. It returns whether p was dealt with (sent, held, or the
// connection ended) and what Write returns then.
func (c *Conn) writeHello(p []byte) (bool, int, error) {
	c.mu.Lock()
	if c.helloDone {
		c.mu.Unlock()
		return false, 0, nil
	}
	c.hello = append(c.hello, p...)
	buf := c.hello
	if buf[0] != 0x16 { // not a TLS handshake record
		c.helloDone, c.hello = true, nil
		c.mu.Unlock()
		return c.sendHeld(buf, len(p))
	}
	name, more, err := readServerName(buf)
	if more && len(buf) <= maxHelloBytes {
		c.mu.Unlock()
		return true, len(p), nil
	}
	c.helloDone, c.hello = true, nil
	c.mu.Unlock()
	switch {
	case more:
		err = fmt.Errorf("it sent %d bytes of a TLS handshake without a whole ClientHello", len(buf))
	case err != nil:
		err = fmt.Errorf("it sent a TLS handshake record that is not a ClientHello: %v", err)
	default:
		err = c.gate.checkServerName(c.rec.Host, name, c.rec.Port)
	}
	if err != nil {
		c.end(err.Error())
		return true, 0, &Refusal{Host: c.rec.Host, Port: c.rec.Port, Why: err.Error()}
	}
	return c.sendHeld(buf, len(p))
}

// sendHeld sends the held bytes buf, of which the latest Write gave n, and answers for that
// Write: all of n, or none with the error that stopped buf.
func (c *Conn) sendHeld(buf []byte, n int) (bool, int, error) {
	if _, err := c.send(buf); err != nil {
		return true, 0, err
	}
	return true, n, nil
}
