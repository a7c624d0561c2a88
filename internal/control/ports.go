package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A session's ports over the line (protocol version 7): the daemon opens a stream to a port
// on the box's loopback, numbered with protocol.PortStreamBit, and the executor connects it.

// DialPort connects to port on the box's loopback through the executor (see
// sandbox.Workspace.DialPort). The connection returned is one end of a socket pair whose
// other end the line's stream carries: it has deadlines and half-close (CloseWrite) as a TCP
// connection does. Errors: a *sandbox.PortError when the executor refuses (nothing listens),
// ctx's error, or one wrapping sandbox.ErrNotReady when the line has ended.
func (c *Line) DialPort(ctx context.Context, port int) (net.Conn, error) {
	inner, outer, err := connPair()
	if err != nil {
		return nil, fmt.Errorf("connecting to port %d: %w", port, err)
	}
	id := c.portSeq.Add(1) | protocol.PortStreamBit
	s := protocol.NewStream(c.conn, protocol.PortOwner, id, inner, func(error) {
		c.mu.Lock()
		delete(c.streams, id)
		c.mu.Unlock()
	})
	answer := make(chan *protocol.Message, 1)
	c.mu.Lock()
	switch {
	case c.err != nil:
		err = fmt.Errorf("%w: %w", sandbox.ErrNotReady, c.err)
	case len(c.streams) >= maxEgressStreams:
		err = &sandbox.PortError{Port: port, Why: fmt.Sprintf("the sandbox has %d connections open, the most one sandbox may hold", maxEgressStreams)}
	default:
		c.streams[id] = &egressStream{owner: protocol.PortOwner, stream: s}
		c.portOpening[id] = answer
	}
	c.mu.Unlock()
	if err != nil {
		inner.Close()
		outer.Close()
		return nil, err
	}
	forget := func() {
		c.mu.Lock()
		delete(c.streams, id)
		delete(c.portOpening, id)
		c.mu.Unlock()
		inner.Close()
		outer.Close()
	}
	if err := c.conn.Send(&protocol.Message{Kind: protocol.KindPortOpen, ID: protocol.PortOwner,
		Egress: &protocol.Egress{Stream: id, Port: port}}); err != nil {
		forget()
		c.fail(fmt.Errorf("%w: asking for a port: %w", ErrClosed, err))
		return nil, fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	select {
	case m := <-answer:
		if m.Egress.Refused {
			forget()
			return nil, &sandbox.PortError{Port: port, Why: m.Error}
		}
		s.Start()
		return outer, nil
	case <-ctx.Done():
		forget()
		// The executor may connect it still: the abort ends it there.
		_ = c.conn.Send(&protocol.Message{Kind: protocol.KindEgressClose, ID: protocol.PortOwner,
			Egress: &protocol.Egress{Stream: id, Abort: true}})
		return nil, ctx.Err()
	case <-c.done:
		forget()
		return nil, fmt.Errorf("%w: %w", sandbox.ErrNotReady, c.Err())
	}
}

// portOpened passes the executor's answer to the DialPort waiting for it; a connection
// nobody waits for any more (its caller gave up) is ended.
func (c *Line) portOpened(m *protocol.Message) {
	if m.Egress == nil {
		return
	}
	c.mu.Lock()
	answer := c.portOpening[m.Egress.Stream]
	delete(c.portOpening, m.Egress.Stream)
	c.mu.Unlock()
	if answer != nil {
		answer <- m // capacity 1, one answer
		return
	}
	if !m.Egress.Refused {
		c.abortLater(m.Egress.Stream)
	}
}

// abortLater tells the executor to end stream, from its own goroutine (the read loop must
// not block on a write), within the cap on requests being decided.
func (c *Line) abortLater(stream uint64) {
	if c.opening.Add(1) > maxEgressOpening {
		c.opening.Add(-1)
		return
	}
	go func() {
		defer c.opening.Add(-1)
		_ = c.conn.Send(&protocol.Message{Kind: protocol.KindEgressClose, ID: protocol.PortOwner,
			Egress: &protocol.Egress{Stream: stream, Abort: true}})
	}()
}

// ListeningPorts lists the ports the session's processes listen on (see
// sandbox.Workspace.ListeningPorts).
func (c *Line) ListeningPorts(ctx context.Context) ([]sandbox.ListeningPort, error) {
	r, err := c.request(ctx, "pl_", &protocol.Message{Kind: protocol.KindPortList}, protocol.KindPortListed)
	if err != nil {
		return nil, err
	}
	return r.Ports, nil
}

// connPair returns the two ends of a connected Unix socket pair, as net.Conns.
func connPair() (net.Conn, net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("a socket pair: %w", err)
	}
	conn := func(fd int, name string) (net.Conn, error) {
		f := os.NewFile(uintptr(fd), name)
		defer f.Close() // FileConn holds a duplicate
		return net.FileConn(f)
	}
	a, errA := conn(fds[0], "port-stream")
	b, errB := conn(fds[1], "port-conn")
	if err := errors.Join(errA, errB); err != nil {
		if a != nil {
			a.Close()
		}
		if b != nil {
			b.Close()
		}
		return nil, nil, fmt.Errorf("a socket pair: %w", err)
	}
	return a, b, nil
}
