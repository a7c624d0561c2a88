// Package ports serves HTTP and WebSocket traffic to a server a session runs on its box's
// loopback. The box has no network interface but loopback: each connection goes through the
// executor's line (sandbox.Workspace.DialPort), never through a network, so the proxy can
// reach only the named session's own port. The doors (REST, E2B) find the session and check
// who may reach it; this package bounds the traffic (connections per session and per agent,
// bytes per connection, an idle timeout), keeps the daemon's credentials out of the box,
// keeps the box's answers from setting anything on the daemon's own origin, and records each
// request (see docs/ports.md).
package ports

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Dialer connects to a port on a session's loopback (*session.Session): a paused session
// answers its state's error (or is resumed, with auto_resume), a port nothing listens on a
// *sandbox.PortError.
type Dialer interface {
	DialPort(ctx context.Context, port int) (net.Conn, error)
}

// Recorder keeps the ledger of proxied requests (the store); a failure to record is logged,
// never the request's.
type Recorder interface {
	RecordPortRequest(ctx context.Context, rec sandbox.PortRequest) error
}

// Limits bound the proxy's traffic (the daemon's port_* settings).
type Limits struct {
	// PerSession and PerAgent cap the requests in flight (a WebSocket counts until it
	// closes) to one session's ports, and to all of one agent's sessions'.
	PerSession, PerAgent int
	// IdleTimeout ends a connection that carried no byte either way for that long, and a
	// request whose server sends no response header for that long (504).
	IdleTimeout time.Duration
	// MaxBytes caps the bytes one connection to a port carries, both ways together: past it
	// the connection is cut.
	MaxBytes int64
}

// DefaultLimits are the settings' defaults.
func DefaultLimits() Limits {
	return Limits{PerSession: 32, PerAgent: 64, IdleTimeout: 5 * time.Minute, MaxBytes: 1 << 30}
}

// maxResponseHeaderBytes bounds the headers a box's server may answer with (a hostile one
// sends endless ones).
const maxResponseHeaderBytes = 64 << 10

// Proxy forwards requests to sessions' ports. It is safe for concurrent use; Close drops its
// idle connections.
type Proxy struct {
	lim       Limits
	log       *slog.Logger
	rec       Recorder
	transport *http.Transport
	rp        *httputil.ReverseProxy

	mu       sync.Mutex
	sessions map[string]int // requests in flight by session ID
	agents   map[string]int // and by agent
}

// New returns a proxy with lim. rec and log may be nil.
func New(lim Limits, rec Recorder, log *slog.Logger) *Proxy {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{lim: lim, rec: rec, log: log, sessions: map[string]int{}, agents: map[string]int{}}
	p.transport = &http.Transport{
		DialContext:            p.dial,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        30 * time.Second,
		ResponseHeaderTimeout:  lim.IdleTimeout,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		ForceAttemptHTTP2:      false,
		DisableCompression:     true, // the body passes as the server sent it
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        rewrite,
		Transport:      p.transport,
		FlushInterval:  -1, // streamed responses and server-sent events pass at once
		ModifyResponse: modifyResponse,
		ErrorHandler:   p.failed,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return p
}

// Close drops the idle connections to sessions' ports.
func (p *Proxy) Close() { p.transport.CloseIdleConnections() }

// Target is one request's destination and how its door answers.
type Target struct {
	// Session is the session's port dialer; SessionID and Agent name it.
	Session          Dialer
	SessionID, Agent string
	// Port is the port on the session's loopback, 1 to 65535.
	Port int
	// Path is the path on the port's server ("/" and on), the request's query passed as is.
	Path string
	// Prefix is the daemon's path that serves the port (the path form,
	// "/v1/agents/a/sessions/se_…/ports/8000"): the answer is scoped under it (its cookies'
	// Path, its redirects) and sandboxed by CSP, since it shares the daemon's origin. "" for
	// a form whose origin is the port's own (a host name of its own, E2B's headers).
	Prefix string
	// Host is the Host the server sees; "" is localhost:{port}.
	Host string
	// DaemonHosts are the daemon's own host names (host[:port]; the loopback names are one):
	// an answer that redirects there is refused (502), so a session's page cannot send a
	// browser to the daemon's API or console.
	DaemonHosts []string
	// Strip names request headers that carry the daemon's own credentials, removed before
	// the request reaches the box (E2B's headers and tokens, cookies named sandpit_… and a
	// share link's parameter always are).
	Strip []string
	// Client names who sent it, for the ledger (the remote address).
	Client string
	// Fail answers an error in the door's own terms: a session's state (paused, ended), or
	// an *Error of this package with its status.
	Fail func(w http.ResponseWriter, err error)
}

// Error is a request the proxy refused or could not complete; Status is the HTTP status the
// doors answer (400, 429, 502 or 504).
type Error struct {
	Status int
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

type targetKey struct{}

// exchange is one request in flight: its target and what it carried.
type exchange struct {
	t       Target
	started time.Time
	ws      bool
	status  int
	err     error
	in, out counter
}

// Serve forwards r to t's port and answers w with the server's response, or t.Fail's error.
func (p *Proxy) Serve(w http.ResponseWriter, r *http.Request, t Target) {
	if t.Port < 1 || t.Port > 65535 {
		t.Fail(w, &Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("port %d is not a TCP port: give 1 to 65535", t.Port)})
		return
	}
	if err := p.acquire(t); err != nil {
		t.Fail(w, err)
		return
	}
	defer p.release(t)
	x := &exchange{t: t, started: time.Now(), ws: isUpgrade(r)}
	defer p.record(r, x)
	// A long upload or download outlives the server's own deadlines; the idle timeout bounds
	// each read of the client's body and each write of the answer instead (a client that
	// stops reading or sending holds nothing for long).
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	// The connection's next request must not inherit a write deadline (the server sets none).
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &countingBody{ReadCloser: r.Body, n: &x.in, rc: rc, idle: p.lim.IdleTimeout}
	}
	cw := &countingWriter{ResponseWriter: w, x: x, rc: rc, idle: p.lim.IdleTimeout}
	p.rp.ServeHTTP(cw, r.WithContext(context.WithValue(r.Context(), targetKey{}, x)))
}

func exchangeOf(ctx context.Context) *exchange { return ctx.Value(targetKey{}).(*exchange) }

// acquire counts a request in flight against the session's and the agent's caps.
func (p *Proxy) acquire(t Target) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sessions[t.SessionID] >= p.lim.PerSession {
		return &Error{Status: http.StatusTooManyRequests, Msg: fmt.Sprintf(
			"session %s has %d requests to its ports in flight, the most one session may (port_connections_per_session); "+
				"wait for some to end, or close open WebSockets", t.SessionID, p.lim.PerSession)}
	}
	if p.agents[t.Agent] >= p.lim.PerAgent {
		return &Error{Status: http.StatusTooManyRequests, Msg: fmt.Sprintf(
			"agent %q has %d requests to its sessions' ports in flight, the most one agent may (port_connections_per_agent); "+
				"wait for some to end, or close open WebSockets", t.Agent, p.lim.PerAgent)}
	}
	p.sessions[t.SessionID]++
	p.agents[t.Agent]++
	return nil
}

func (p *Proxy) release(t Target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sessions[t.SessionID]--; p.sessions[t.SessionID] <= 0 {
		delete(p.sessions, t.SessionID)
	}
	if p.agents[t.Agent]--; p.agents[t.Agent] <= 0 {
		delete(p.agents, t.Agent)
	}
}

// upstream is the host name a request to session id's port is sent to: the transport pools
// connections by it, so each session's port has its own.
func upstream(id string, port int) string { return strconv.Itoa(port) + "-" + id + ".box" }

// dial connects to the request's session port (addr is its upstream name).
func (p *Proxy) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	x, ok := ctx.Value(targetKey{}).(*exchange)
	if !ok || addr != upstream(x.t.SessionID, x.t.Port)+":80" {
		return nil, fmt.Errorf("ports: a dial of %s without its request", addr)
	}
	c, err := x.t.Session.DialPort(ctx, x.t.Port)
	if err != nil {
		return nil, err
	}
	return newMeteredConn(c, p.lim.IdleTimeout, p.lim.MaxBytes), nil
}

// failed answers a request the transport could not complete: before any of the answer was
// written (the server's own answer is passed as it is).
func (p *Proxy) failed(w http.ResponseWriter, r *http.Request, err error) {
	x := exchangeOf(r.Context())
	x.err = err
	var (
		portErr *sandbox.PortError
		netErr  net.Error
		own     *Error
	)
	switch {
	case errors.Is(r.Context().Err(), context.Canceled):
		return // the client went away
	case errors.As(err, &portErr):
		err = &Error{Status: http.StatusBadGateway, Msg: portErr.Why}
	case errors.As(err, &own):
	case errors.As(err, &netErr) && netErr.Timeout(), strings.Contains(err.Error(), "timeout awaiting response headers"):
		err = &Error{Status: http.StatusGatewayTimeout, Msg: fmt.Sprintf(
			"the server on port %d sent no answer within %s (port_idle_timeout_ms)", x.t.Port, p.lim.IdleTimeout)}
	case errors.Is(err, errTooMuch):
		err = &Error{Status: http.StatusBadGateway, Msg: fmt.Sprintf(
			"the connection to port %d carried more than %d bytes, the most one may (port_connection_max_bytes)", x.t.Port, p.lim.MaxBytes)}
	case isSessionErr(err):
	default:
		err = &Error{Status: http.StatusBadGateway, Msg: fmt.Sprintf("the server on port %d did not answer properly: %v", x.t.Port, err)}
	}
	x.t.Fail(w, err)
}

// isSessionErr says err is the session's (its state, its absence): the door words it.
func isSessionErr(err error) bool {
	var (
		paused *sandbox.SessionPausedError
		ended  *sandbox.SessionEndedError
	)
	return errors.As(err, &paused) || errors.As(err, &ended) || errors.Is(err, sandbox.ErrNotReady)
}

// record logs x and adds it to the ledger.
func (p *Proxy) record(r *http.Request, x *exchange) {
	rec := sandbox.PortRequest{
		SessionID: x.t.SessionID, Agent: x.t.Agent, Port: x.t.Port, Method: r.Method,
		Path: truncate(withoutShare(x.t.Path), 1024), Status: x.status, Client: x.t.Client, WebSocket: x.ws,
		BytesIn: x.in.load(), BytesOut: x.out.load(), StartedAt: x.started.UTC(),
		DurationMS: time.Since(x.started).Milliseconds(),
	}
	if x.err != nil {
		rec.Error = truncate(x.err.Error(), 1024)
	}
	p.log.Debug("port request", "session", rec.SessionID, "port", rec.Port, "method", rec.Method, "status", rec.Status,
		"bytes_in", rec.BytesIn, "bytes_out", rec.BytesOut, "duration_ms", rec.DurationMS)
	if p.rec == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	if err := p.rec.RecordPortRequest(ctx, rec); err != nil {
		p.log.Warn("recording a port request in the ledger", "session", rec.SessionID, "port", rec.Port, "error", err)
	}
}

// withoutShare is a path and query without a share link's secret (the ledger never keeps it).
func withoutShare(p string) string {
	u, err := url.Parse(p)
	if err != nil || !u.Query().Has(ShareParam) {
		return p
	}
	q := u.Query()
	q.Del(ShareParam)
	u.RawQuery = q.Encode()
	return u.RequestURI()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func isUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket") ||
		(r.Header.Get("Upgrade") != "" && headerHasToken(r.Header, "Connection", "upgrade"))
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, part := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(part), token) {
				return true
			}
		}
	}
	return false
}
