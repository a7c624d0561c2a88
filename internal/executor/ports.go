package executor

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A session's ports: the daemon asks for a connection to a port on the box's loopback
// (KindPortOpen) and the executor dials it there and carries its bytes as a stream, as it
// carries the egress proxy's the other way. Nothing in the box listens for the outside: the
// daemon serves the port to its own clients (internal/ports), and the box keeps no network
// interface but loopback.

const (
	// portDialTimeout bounds a connection to a session's port: on loopback it is answered at
	// once, or refused at once, unless the server's backlog is full.
	portDialTimeout = 5 * time.Second
	// maxPortStreams caps the port connections open at once in one box (the daemon caps them
	// per session and per agent, lower).
	maxPortStreams = 1024
)

// ports holds the streams of a session's ports.
type ports struct {
	e       *Executor
	mu      sync.Mutex
	streams map[uint64]*protocol.Stream
	closed  bool
	wg      sync.WaitGroup
}

func newPorts(e *Executor) *ports {
	return &ports{e: e, streams: map[uint64]*protocol.Stream{}}
}

// open answers the daemon's KindPortOpen: it dials the port on its own goroutine and starts
// the stream once the daemon knows it is connected.
func (p *ports) open(m *protocol.Message) {
	if m.Egress == nil {
		return
	}
	id, port := m.Egress.Stream, m.Egress.Port
	refuse := func(why string) {
		p.e.send(&protocol.Message{Kind: protocol.KindPortOpened, ID: protocol.PortOwner,
			Egress: &protocol.Egress{Stream: id, Port: port, Refused: true}, Error: why})
	}
	switch {
	case p.e.cfg.SessionHome == "":
		refuse("this sandbox serves one-off runs, not a session: it has no ports")
		return
	case id&protocol.PortStreamBit == 0:
		refuse(fmt.Sprintf("stream %d is not numbered as a port's", id))
		return
	case port < 1 || port > 65535:
		refuse(fmt.Sprintf("port %d is not a number from 1 to 65535", port))
		return
	case port == p.e.proxyPort():
		refuse(fmt.Sprintf("port %d is sandpit's egress proxy in the sandbox, not a server of the session's", port))
		return
	}
	p.mu.Lock()
	_, taken := p.streams[id]
	full := len(p.streams) >= maxPortStreams
	closed := p.closed
	p.mu.Unlock()
	switch {
	case closed:
		refuse("the sandbox is stopping")
		return
	case taken:
		p.e.log.Warn("the daemon reused a port stream number", "stream", id)
		return
	case full:
		refuse(fmt.Sprintf("the sandbox has %d connections to its ports open, its most", maxPortStreams))
		return
	}
	p.wg.Go(func() {
		c, err := dialLoopback(port)
		if err != nil {
			refuse(err.Error())
			return
		}
		s := protocol.NewStream(p.e.conn, protocol.PortOwner, id, c, func(error) { p.forget(id) })
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			refuse("the sandbox is stopping")
			return
		}
		p.streams[id] = s
		p.mu.Unlock()
		if err := p.e.conn.Send(&protocol.Message{Kind: protocol.KindPortOpened, ID: protocol.PortOwner,
			Egress: &protocol.Egress{Stream: id, Port: port, Address: c.RemoteAddr().String()}}); err != nil {
			s.Abort(err)
		}
		s.Start()
	})
}

// dialLoopback connects to port on the box's loopback: IPv4 first, then IPv6 (a server bound
// to ::1 alone).
func dialLoopback(port int) (net.Conn, error) {
	d := net.Dialer{Timeout: portDialTimeout}
	p := strconv.Itoa(port)
	c, err := d.Dial("tcp", net.JoinHostPort("127.0.0.1", p))
	if err == nil {
		return c, nil
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		if c6, err6 := d.Dial("tcp", net.JoinHostPort("::1", p)); err6 == nil {
			return c6, nil
		}
		return nil, fmt.Errorf("nothing listens on port %d in the session's sandbox (connection refused): "+
			"start a server there that listens on 127.0.0.1 or 0.0.0.0", port)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil, fmt.Errorf("the server on port %d in the session's sandbox accepted no connection within %s (its backlog is full, or it is stopped)", port, portDialTimeout)
	}
	return nil, fmt.Errorf("connecting to port %d in the session's sandbox: %w", port, err)
}

// handle passes the daemon's KindEgressData, KindEgressAck or KindEgressClose message of a
// port's stream to it (never blocking).
func (p *ports) handle(m *protocol.Message) {
	p.mu.Lock()
	s := p.streams[m.Egress.Stream]
	p.mu.Unlock()
	if s != nil {
		s.Handle(m)
	}
}

func (p *ports) forget(id uint64) {
	p.mu.Lock()
	delete(p.streams, id)
	p.mu.Unlock()
}

// close ends every port's stream and refuses new ones.
func (p *ports) close() {
	p.mu.Lock()
	p.closed = true
	open := make([]*protocol.Stream, 0, len(p.streams))
	for _, s := range p.streams {
		open = append(open, s)
	}
	p.mu.Unlock()
	for _, s := range open {
		s.Abort(errors.New("the executor is stopping"))
	}
	p.wg.Wait()
}

// list answers KindPortList: the ports the session's uid listens on, on loopback or every
// address, read from /proc/net/tcp and tcp6.
func (p *ports) list(id string) {
	reply := &protocol.Message{Kind: protocol.KindPortListed, ID: id}
	if p.e.cfg.SessionHome == "" {
		reply.Error = "this sandbox serves one-off runs, not a session: it has no ports"
	} else {
		var err error
		if reply.Ports, err = listening(p.e.cfg.UIDBase); err != nil {
			reply.Error = err.Error()
		}
	}
	p.e.send(reply)
}

// listening returns the TCP ports uid listens on, on a loopback or unspecified address, one
// entry per port (IPv4's address first).
func listening(uid int) ([]sandbox.ListeningPort, error) {
	var out []sandbox.ListeningPort
	read := 0
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		read++
		for line := range strings.SplitSeq(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) < 8 || f[0] == "sl" || f[3] != "0A" || f[7] != strconv.Itoa(uid) { // 0A: LISTEN
				continue
			}
			a, err := procAddr(f[1])
			if err != nil || !(a.Addr().IsLoopback() || a.Addr().IsUnspecified()) {
				continue
			}
			port := int(a.Port())
			if slices.ContainsFunc(out, func(l sandbox.ListeningPort) bool { return l.Port == port }) {
				continue
			}
			out = append(out, sandbox.ListeningPort{Port: port, Address: a.Addr().Unmap().String()})
		}
	}
	if read == 0 {
		return nil, errors.New("the sandbox's kernel lists no TCP sockets (/proc/net/tcp)")
	}
	slices.SortFunc(out, func(a, b sandbox.ListeningPort) int { return a.Port - b.Port })
	return out, nil
}

// proxyPort is the egress proxy's port in the box, 0 without one.
func (e *Executor) proxyPort() int {
	if e.cfg.Proxy == "" {
		return 0
	}
	_, p, err := net.SplitHostPort(e.cfg.Proxy)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}
