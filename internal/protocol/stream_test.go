package protocol

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// tcpPair returns both ends of a loopback TCP connection (they have CloseWrite).
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := make(chan net.Conn, 1)
	go func() {
		a, _ := ln.Accept()
		c <- a
	}()
	b, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return <-c, b
}

// TestStreamCarriesBothWays sends more than the window each way through two Streams linked
// by a pair of Conns, with half-closes, and checks the bytes and that both sides end.
func TestStreamCarriesBothWays(t *testing.T) {
	ar, bw := io.Pipe()
	br, aw := io.Pipe()
	a, b := NewConn(ar, aw), NewConn(br, bw)
	clientApp, clientLocal := tcpPair(t) // the program's end, the executor's end
	serverLocal, serverApp := tcpPair(t) // the daemon's end, the destination's end
	var done sync.WaitGroup
	done.Add(2)
	sa := NewStream(a, "ex_1", 7, clientLocal, func(error) { done.Done() })
	sb := NewStream(b, "ex_1", 7, serverLocal, func(error) { done.Done() })
	for _, p := range []struct {
		c *Conn
		s *Stream
	}{{a, sa}, {b, sb}} {
		go func() {
			for {
				m, err := p.c.Receive()
				if err != nil {
					return
				}
				p.s.Handle(m)
			}
		}()
	}
	sa.Start()
	sb.Start()

	up, down := make([]byte, 3*EgressWindow+123), make([]byte, 2*EgressWindow+7)
	_, _ = rand.Read(up)
	_, _ = rand.Read(down)
	var gotUp, gotDown []byte
	var wg sync.WaitGroup
	wg.Add(4)
	go func() { defer wg.Done(); _, _ = clientApp.Write(up); _ = clientApp.(*net.TCPConn).CloseWrite() }()
	go func() { defer wg.Done(); gotUp, _ = io.ReadAll(serverApp) }()
	go func() { defer wg.Done(); _, _ = serverApp.Write(down); _ = serverApp.(*net.TCPConn).CloseWrite() }()
	go func() { defer wg.Done(); gotDown, _ = io.ReadAll(clientApp) }()
	wg.Wait()
	if !bytes.Equal(gotUp, up) || !bytes.Equal(gotDown, down) {
		t.Fatalf("carried %d of %d bytes up, %d of %d down (or they differ)", len(gotUp), len(up), len(gotDown), len(down))
	}
	done.Wait()
}

// TestStreamAbortReachesPeer: aborting one side closes the other's local connection.
func TestStreamAbortReachesPeer(t *testing.T) {
	ar, bw := io.Pipe()
	br, aw := io.Pipe()
	a, b := NewConn(ar, aw), NewConn(br, bw)
	clientApp, clientLocal := tcpPair(t)
	serverLocal, _ := tcpPair(t)
	ended := make(chan error, 2)
	sa := NewStream(a, "ex_1", 1, clientLocal, func(err error) { ended <- err })
	sb := NewStream(b, "ex_1", 1, serverLocal, func(err error) { ended <- err })
	go func() {
		for {
			m, err := a.Receive()
			if err != nil {
				return
			}
			sa.Handle(m)
		}
	}()
	go func() {
		for {
			m, err := b.Receive()
			if err != nil {
				return
			}
			sb.Handle(m)
		}
	}()
	sa.Start()
	sb.Start()
	sb.Abort(io.ErrUnexpectedEOF)
	if _, err := io.ReadAll(clientApp); err != nil && err != io.EOF {
		t.Logf("client read: %v", err)
	}
	<-ended
	<-ended
}

// TestStreamAcksInQuarters carries two windows and more one way and counts the receiver's
// acks: one per EgressAckEvery bytes passed on, not one per chunk, and the sender never
// stalls on one held back (the transfer ends).
func TestStreamAcksInQuarters(t *testing.T) {
	ar, bw := io.Pipe()
	br, aw := io.Pipe()
	a, b := NewConn(ar, aw), NewConn(br, bw)
	clientApp, clientLocal := tcpPair(t)
	serverLocal, serverApp := tcpPair(t)
	var done sync.WaitGroup
	done.Add(2)
	sa := NewStream(a, "ex_1", 3, clientLocal, func(error) { done.Done() })
	sb := NewStream(b, "ex_1", 3, serverLocal, func(error) { done.Done() })
	var acks atomic.Int64
	go func() {
		for {
			m, err := a.Receive()
			if err != nil {
				return
			}
			sa.Handle(m)
		}
	}()
	go func() {
		for {
			m, err := b.Receive()
			if err != nil {
				return
			}
			if m.Kind == KindEgressAck {
				acks.Add(1)
			}
			sb.Handle(m)
		}
	}()
	sa.Start()
	sb.Start()
	down := make([]byte, 2*EgressWindow+7)
	_, _ = rand.Read(down)
	_ = clientApp.(*net.TCPConn).CloseWrite()
	go func() { _, _ = serverApp.Write(down); _ = serverApp.(*net.TCPConn).CloseWrite() }()
	got, _ := io.ReadAll(clientApp)
	if !bytes.Equal(got, down) {
		t.Fatalf("carried %d of %d bytes (or they differ)", len(got), len(down))
	}
	done.Wait()
	if n := acks.Load(); n < 1 || n > int64(len(down)/EgressAckEvery) {
		t.Errorf("%d acks for %d bytes; want from 1 to %d (one per %d bytes)", n, len(down), len(down)/EgressAckEvery, EgressAckEvery)
	}
}

// A data message travels as a binary frame and comes back as it was sent; a binary frame
// shorter than its header is an error, not a panic.
func TestDataFrame(t *testing.T) {
	var buf bytes.Buffer
	c := NewConn(&buf, &buf)
	payload := []byte("\x00{not json}\xff")
	if err := c.Send(&Message{Kind: KindEgressData, ID: "ex_1", Egress: &Egress{Stream: 1 << 40}, Bytes: payload}); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 4+9+len(payload) {
		t.Fatalf("frame of %d bytes, want %d (binary, no JSON)", buf.Len(), 4+9+len(payload))
	}
	m, err := c.Receive()
	if err != nil || m.Kind != KindEgressData || m.Egress.Stream != 1<<40 || !bytes.Equal(m.Bytes, payload) {
		t.Fatalf("received %+v, %v", m, err)
	}
	buf.Write([]byte{0, 0, 0, 3, 0, 1, 2})
	if _, err := c.Receive(); err == nil {
		t.Fatal("a short data frame was accepted")
	}
}
