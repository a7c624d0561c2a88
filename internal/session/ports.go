package session

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A session's ports: the daemon reaches a server the session runs on its box's loopback
// through the executor (the box has no other network), for internal/ports to serve.

// portTouchEvery is how often a port connection carrying bytes marks its session used.
const portTouchEvery = time.Second

// DialPort connects to port on the session's loopback. A paused or hibernated session is
// resumed when it was created with auto_resume, else the answer is a
// *sandbox.SessionPausedError. The connection keeps the session from idling out while bytes
// flow, and is closed when the session pauses, hibernates or ends. Errors: the session's
// state, or the box's (a *sandbox.PortError when nothing listens there).
func (s *Session) DialPort(ctx context.Context, port int) (net.Conn, error) {
	h, err := s.callable(ctx)
	if err != nil {
		return nil, err
	}
	s.touch()
	c, err := h.box.DialPort(ctx, port)
	if err != nil {
		return nil, s.lostServer(ctx, h, port, err)
	}
	pc := &portConn{Conn: c, s: s, h: h}
	pc.touched.Store(time.Now().UnixNano())
	h.portsMu.Lock()
	if h.portsClosed {
		h.portsMu.Unlock()
		c.Close()
		return nil, s.stateErr()
	}
	if h.ports == nil {
		h.ports = map[*portConn]struct{}{}
	}
	h.ports[pc] = struct{}{}
	h.portsMu.Unlock()
	return pc, nil
}

// lostServer adds to err, a failed dial of port, why its server may be gone: the session's
// sandbox was made by a resume from hibernation or by a fork, which keep files, not processes.
// Only when nothing listens on port (a server that runs but refused is not lost).
func (s *Session) lostServer(ctx context.Context, h *held, port int, err error) error {
	pe, ok := errors.AsType[*sandbox.PortError](err)
	if !ok {
		return err
	}
	s.mu.Lock()
	made := boxMadeBy(s.info.History)
	s.mu.Unlock()
	if made.Event == "" {
		return err
	}
	if listening, lerr := h.box.ListeningPorts(ctx); lerr != nil || slices.ContainsFunc(listening, func(l sandbox.ListeningPort) bool { return l.Port == port }) {
		return err
	}
	why := fmt.Sprintf("the session was hibernated and resumed at %s: servers do not survive hibernation (its files do, not its processes)",
		made.At.UTC().Format(time.DateTime+" UTC"))
	if made.Event == "forked" {
		why = fmt.Sprintf("the session was forked %s at %s: a fork copies files, not processes", made.Detail[:strings.IndexByte(made.Detail+":", ':')],
			made.At.UTC().Format(time.DateTime+" UTC"))
	}
	return &sandbox.PortError{Port: pe.Port, Why: fmt.Sprintf("%s; %s: if a server ran on port %d before, start it again in this session",
		strings.TrimSuffix(pe.Why, "."), why, port)}
}

// boxMadeBy returns the event of history that made the session's present sandbox when that
// kept its files but not its processes (a resume from hibernation, a fork), else the zero
// event.
func boxMadeBy(history []sandbox.SessionEvent) sandbox.SessionEvent {
	for _, e := range slices.Backward(history) {
		switch {
		case e.Event == "forked", e.Event == "resumed" && strings.HasPrefix(e.Detail, "from hibernation"):
			return e
		case e.Event == "created", e.Event == "adopted", e.Event == "hibernated":
			return sandbox.SessionEvent{}
		}
	}
	return sandbox.SessionEvent{}
}

// ListeningPorts lists the ports the session's processes listen on. It touches nothing: a
// paused or hibernated session answers its state's error.
func (s *Session) ListeningPorts(ctx context.Context) ([]sandbox.ListeningPort, error) {
	h, err := s.active()
	if err != nil {
		return nil, err
	}
	return h.box.ListeningPorts(ctx)
}

// closePorts closes h's port connections and refuses new ones until reopenPorts (a pause:
// its clients see the end at once, not a frozen server).
func (h *held) closePorts() {
	h.portsMu.Lock()
	h.portsClosed = true
	open := h.ports
	h.ports = nil
	h.portsMu.Unlock()
	for c := range open {
		c.Conn.Close()
	}
}

// reopenPorts takes port connections again (the session resumed).
func (h *held) reopenPorts() {
	h.portsMu.Lock()
	h.portsClosed = false
	h.portsMu.Unlock()
}

// portConn is a connection to a session's port.
type portConn struct {
	net.Conn
	s       *Session
	h       *held
	touched atomic.Int64 // unix nanoseconds of its last touch of s
	once    sync.Once
}

func (c *portConn) used() {
	now := time.Now().UnixNano()
	if last := c.touched.Load(); now-last >= int64(portTouchEvery) && c.touched.CompareAndSwap(last, now) {
		c.s.touch()
	}
}

func (c *portConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.used()
	}
	return n, err
}

func (c *portConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.used()
	}
	return n, err
}

// CloseWrite ends the sending half (the server reads its end), as TCP's does.
func (c *portConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *portConn) Close() error {
	c.once.Do(func() {
		c.h.portsMu.Lock()
		delete(c.h.ports, c)
		c.h.portsMu.Unlock()
	})
	return c.Conn.Close()
}
