// Package connlimit shares the daemon's connections (max_connections) among its agents: the
// listener keeps a few places beyond the limit for health checks, and long-lived streams (an
// E2B sandbox's Connect streams, a REST process's output) are capped per sandbox, per agent
// and in all, well below the limit, so one agent's streams never take the places every other
// agent's requests need.
package connlimit

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/errclass"
)

// HealthReserve is how many connections the listener holds beyond max_connections for
// GET /healthz alone.
const HealthReserve = 8

// Listener returns ln holding at most limit+HealthReserve connections at once (more wait in
// the kernel's backlog). A connection accepted while limit are open takes a reserve place for
// its life: Reserved (through the server's ConnContext) tells its requests so, and
// HealthOnly answers them 503 unless they are health checks.
func Listener(ln net.Listener, limit int) net.Listener {
	return &listener{Listener: ln, limit: limit, places: make(chan struct{}, limit+HealthReserve)}
}

type listener struct {
	net.Listener
	limit  int
	places chan struct{} // one token per open connection

	mu   sync.Mutex
	open int
}

func (l *listener) Accept() (net.Conn, error) {
	l.places <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.places
		return nil, err
	}
	l.mu.Lock()
	l.open++
	reserve := l.open > l.limit
	l.mu.Unlock()
	return &conn{Conn: c, l: l, reserve: reserve}, nil
}

type conn struct {
	net.Conn
	l       *listener
	reserve bool
	once    sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		c.l.mu.Unlock()
		<-c.l.places
	})
	return err
}

type reservedKey struct{}

// ConnContext is an http.Server's ConnContext for a Listener's connections: it marks those in
// a reserve place.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*conn); ok && lc.reserve {
		return context.WithValue(ctx, reservedKey{}, true)
	}
	return ctx
}

// Reserved reports whether r came on a connection in one of the reserve places.
func Reserved(r *http.Request) bool {
	v, _ := r.Context().Value(reservedKey{}).(bool)
	return v
}

// HealthOnly serves next, except that a request on a reserve connection other than
// GET /healthz is answered 503 and its connection closed.
func HealthOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if Reserved(r) && (r.URL.Path != "/healthz" || r.Method != http.MethodGet) {
			h := w.Header()
			h.Set("Connection", "close")
			h.Set("Retry-After", "1")
			h.Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(apitype.ErrorBody{Error: apitype.ErrorDetail{Code: apitype.CodeNotReady,
				Message: "the daemon holds max_connections connections; this one is kept for GET /healthz: retry once others have closed"}})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Caps are the caps of long-lived streams.
type Caps struct {
	Total, PerAgent, PerSandbox int
}

// CapsFor returns the caps of long-lived streams for a listener of maxConnections: in all
// three quarters of it (the rest stays for short requests), an eighth per agent, a sixteenth
// per sandbox (each at least 1).
func CapsFor(maxConnections int) Caps {
	return Caps{Total: max(maxConnections*3/4, 1), PerAgent: max(maxConnections/8, 1), PerSandbox: max(maxConnections/16, 1)}
}

// Streams counts the long-lived streams open under its caps. It is safe for concurrent use;
// a nil *Streams admits every stream.
type Streams struct {
	caps Caps

	mu        sync.Mutex
	n         int
	agents    map[string]int
	sandboxes map[string]int
}

// NewStreams returns streams under caps.
func NewStreams(caps Caps) *Streams {
	return &Streams{caps: caps, agents: map[string]int{}, sandboxes: map[string]int{}}
}

// Open admits a stream of agent's sandbox (a session; "" for none) and returns the function
// that ends it; at a cap, an error of class busy naming it.
func (s *Streams) Open(agent, sandbox string) (done func(), err error) {
	if s == nil {
		return func() {}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case sandbox != "" && s.sandboxes[sandbox] >= s.caps.PerSandbox:
		return nil, errclass.Wrap(errclass.Busy, fmt.Errorf("sandbox %s has %d long-lived streams open, the most one sandbox may "+
			"(a sixteenth of max_connections): close one (a watch, an attached process's output) first", sandbox, s.caps.PerSandbox))
	case s.agents[agent] >= s.caps.PerAgent:
		return nil, errclass.Wrap(errclass.Busy, fmt.Errorf("agent %q has %d long-lived streams open, the most one agent may "+
			"(an eighth of max_connections): close one (a watch, an attached process's output) first", agent, s.caps.PerAgent))
	case s.n >= s.caps.Total:
		return nil, errclass.Wrap(errclass.Busy, fmt.Errorf("the daemon has %d long-lived streams open, the most it keeps "+
			"(three quarters of max_connections, the rest for other requests): retry once some have closed", s.caps.Total))
	}
	s.n++
	s.agents[agent]++
	if sandbox != "" {
		s.sandboxes[sandbox]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.n--
			if s.agents[agent]--; s.agents[agent] == 0 {
				delete(s.agents, agent)
			}
			if sandbox != "" {
				if s.sandboxes[sandbox]--; s.sandboxes[sandbox] == 0 {
					delete(s.sandboxes, sandbox)
				}
			}
		})
	}, nil
}

// WriteStall is how long an answer's write may make no progress before it ends: a client
// that stops reading cannot hold its connection, nor what the answer holds, for longer.
const WriteStall = time.Minute

// writePiece is how much of an answer Write writes under one deadline.
const writePiece = 256 << 10

// Write writes data to w in pieces, each under a write deadline of WriteStall from its start,
// so an answer read slowly still completes while one not read at all ends with an error. The
// deadline is lifted again when it returns.
func Write(w http.ResponseWriter, data []byte) error { return write(w, data, WriteStall) }

func write(w http.ResponseWriter, data []byte, stall time.Duration) error {
	rc := http.NewResponseController(w)
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	for len(data) > 0 {
		n := min(len(data), writePiece)
		_ = rc.SetWriteDeadline(time.Now().Add(stall))
		if _, err := w.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return rc.Flush()
}
