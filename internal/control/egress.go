package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// maxEgressStreams caps the connections open at once over one line: each run's dialer
// caps its own, and this bounds what a misbehaving executor can make the daemon hold.
const maxEgressStreams = 1024

// maxEgressOpening caps the executor's requests for connections being decided at once; more
// are dropped (the proxy answers its client 504 when no answer comes).
const maxEgressOpening = 256

// openEgress answers the executor's KindEgressOpen: the owner's dialer decides and dials (on
// its own goroutine: resolving and connecting take time), and the stream starts once the
// executor knows the answer.
func (c *Line) openEgress(m *protocol.Message) {
	if m.Egress == nil {
		return
	}
	host, port, id, stream := m.Egress.Host, m.Egress.Port, m.ID, m.Egress.Stream
	c.mu.Lock()
	dialer := c.dialers[id]
	_, taken := c.streams[stream]
	full := len(c.streams) >= maxEgressStreams
	c.mu.Unlock()
	switch {
	case dialer == nil:
		c.refuseEgressLater(id, stream, fmt.Sprintf("sandpit egress: %s is refused: no network access through the proxy is open to %s (network \"allowlist\" "+
			"gives runs the hosts of network_allow, installs the package index, and a session's commands both)", net.JoinHostPort(host, fmt.Sprint(port)), kindOf(id)))
		return
	case taken:
		c.log.Warn("the executor reused an egress stream number", "stream", stream)
		return
	case full:
		c.refuseEgressLater(id, stream, fmt.Sprintf("sandpit egress: %s is refused: the sandbox has %d connections open, the most one sandbox may hold",
			net.JoinHostPort(host, fmt.Sprint(port)), maxEgressStreams))
		return
	}
	if c.opening.Add(1) > maxEgressOpening {
		c.opening.Add(-1)
		c.log.Warn("the executor asked for too many connections at once; dropping one", "stream", stream)
		return
	}
	go func() {
		defer c.opening.Add(-1)
		c.dialEgress(dialer, id, stream, host, port)
	}()
}

// refuseEgress answers the executor that stream (of owner id) is refused, saying why.
func (c *Line) refuseEgress(id string, stream uint64, why string) {
	if err := c.conn.Send(&protocol.Message{Kind: protocol.KindEgressOpened, ID: id,
		Egress: &protocol.Egress{Stream: stream, Refused: true}, Error: why}); err != nil {
		c.fail(fmt.Errorf("%w: answering the egress proxy: %w", ErrClosed, err))
	}
}

// refuseEgressLater sends a refusal decided on the read loop from its own goroutine (the read
// loop must not block on a write), within the cap on requests being decided.
func (c *Line) refuseEgressLater(id string, stream uint64, why string) {
	if c.opening.Add(1) > maxEgressOpening {
		c.opening.Add(-1)
		return
	}
	go func() {
		defer c.opening.Add(-1)
		c.refuseEgress(id, stream, why)
	}()
}

// dialEgress has dialer decide and dial host:port for stream (of owner id) until the line
// ends, then starts the stream once the executor has its answer; a refusal, a failed dial or
// an owner that ended meanwhile is answered as refused.
func (c *Line) dialEgress(dialer sandbox.EgressDialer, id string, stream uint64, host string, port int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	conn, err := dialer.DialEgress(ctx, host, port)
	if err != nil {
		why := err.Error()
		if !strings.HasPrefix(why, "sandpit egress:") {
			why = "sandpit egress: " + why
		}
		c.refuseEgress(id, stream, why)
		return
	}
	s := protocol.NewStream(c.conn, id, stream, conn, func(err error) {
		c.mu.Lock()
		delete(c.streams, stream)
		c.mu.Unlock()
	})
	c.mu.Lock()
	if c.dialers[id] == nil || c.err != nil { // the run ended meanwhile
		c.mu.Unlock()
		conn.Close()
		c.refuseEgress(id, stream, fmt.Sprintf("sandpit egress: %s is refused: the %s has ended", net.JoinHostPort(host, fmt.Sprint(port)), kindOf(id)))
		return
	}
	c.streams[stream] = &egressStream{owner: id, stream: s}
	c.mu.Unlock()
	address := ""
	if a, ok := conn.(interface{ Address() string }); ok {
		address = a.Address()
	}
	if err := c.conn.Send(&protocol.Message{Kind: protocol.KindEgressOpened, ID: id,
		Egress: &protocol.Egress{Stream: stream, Address: address}}); err != nil {
		s.Abort(err)
		c.fail(fmt.Errorf("%w: answering the egress proxy: %w", ErrClosed, err))
	}
	s.Start()
}

func kindOf(id string) string {
	if strings.HasPrefix(id, "in_") {
		return "install"
	}
	if id == sandbox.WorkspaceEgressOwner {
		return "the session's commands"
	}
	return "run"
}

// endEgress forgets id's dialer and ends its streams still open: no connection outlives its
// run or install.
func (c *Line) endEgress(id string) {
	c.mu.Lock()
	delete(c.dialers, id)
	var open []*protocol.Stream
	for _, es := range c.streams {
		if es.owner == id {
			open = append(open, es.stream)
		}
	}
	c.mu.Unlock()
	for _, s := range open {
		s.Abort(errors.New("the run ended"))
	}
}
