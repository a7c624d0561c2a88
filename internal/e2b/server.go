package e2b

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sandpit-dev/sandpit/internal/connlimit"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/ports"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
)

// The ports the SDKs name in E2b-Sandbox-Port.
const (
	EnvdPort        = "49983"
	InterpreterPort = "49999"
)

// EnvdVersion is the envd version sandboxes report: the SDKs turn features on by it (0.5.7:
// raw uploads, CloseStdin, default user). Features of later versions (file metadata) are not
// served.
const EnvdVersion = "0.5.7"

// Sessions is what the API needs of the sessions (*session.Registry): a sandbox is a session,
// and its properties (network narrowing, environment, deadline, auto_pause, auto_resume) are
// the session's own. Create claims a warm session from the registry's pool, every door's,
// when one is ready.
type Sessions interface {
	Create(ctx context.Context, req sandbox.SessionRequest) (*session.Session, error)
	Get(ctx context.Context, agent, id string) (*session.Session, error)
}

// Keys resolves API keys to their agents (store.Store).
type Keys interface {
	// APIKeyAgent returns key's agent, or an error of class errclass.Forbidden for a key that
	// was never issued or is revoked.
	APIKeyAgent(ctx context.Context, key string) (string, error)
}

// Config is what the daemon's configuration says of E2B sandboxes.
type Config struct {
	// Templates are the templateIDs served; each is the daemon's sandbox image.
	Templates []string
	// MaxLifetime caps a sandbox's timeout, counted from its creation (the sessions'
	// session_max_lifetime_ms).
	MaxLifetime time.Duration
	// ExecTimeout bounds one run_code (the daemon's max_timeout_ms).
	ExecTimeout time.Duration
	// Network is the daemon's network mode (sandbox.NetworkNone, NetworkAllowlist, NetworkFull):
	// a sandbox's network settings may only narrow it.
	Network string
	// CPUs, MemoryMB and DiskMB describe each sandbox in GET /sandboxes/{id}.
	CPUs, MemoryMB, DiskMB int
	// Domain is the sandboxes' domain (the daemon's public_host): a sandbox's port has the
	// host name {port}-{sandboxID}.{Domain}, which get_host composes; "" gives none.
	Domain string
	// Streams caps the sandboxes' long-lived Connect streams (watches, processes' output and
	// input) per sandbox and per agent; nil: no caps.
	Streams *connlimit.Streams
}

// Server serves the E2B API. It is safe for concurrent use; Close ends its sandboxes (their
// tokens live in its memory).
type Server struct {
	cfg      Config
	sessions Sessions
	keys     Keys
	log      *slog.Logger
	ports    *ports.Proxy
	control  http.Handler
	interp   http.Handler
	envd     http.Handler

	tmpl *templateState

	mu        sync.Mutex
	boxes     map[string]*box
	templates Templates // nil: the runtime builds none
}

// box is one sandbox: its session, and what only E2B says of it.
type box struct {
	sess                *session.Session
	id, agent, template string
	token               string
	metadata            map[string]string
	// env is the envVars set in its interpreter and its contexts' (its commands get them as
	// the session's environment).
	env map[string]string
	// allowInternet and network are the settings it was created with, as E2B shows them (the
	// session enforces their narrowing).
	allowInternet *bool
	network       *networkConfig
	// watchFS, when set (by a test), is what its watchers list instead of sess.
	watchFS watchFS

	// guarded by Server.mu
	contexts map[string]*codeContext
	runs     int // number_of_executions of the default context
	procs    map[uint32]*proc
	tags     map[string]uint32
}

// New returns the server; proxy serves the sandboxes' own ports (nil: none). log may be nil.
func New(cfg Config, sessions Sessions, keys Keys, proxy *ports.Proxy, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, sessions: sessions, keys: keys, ports: proxy, log: log, boxes: map[string]*box{}, tmpl: newTemplateState()}
	s.control = s.controlRoutes()
	s.interp = s.interpreterRoutes()
	s.envd = s.envdRoutes()
	return s
}

// ServeHTTP routes a request whose path has the mount prefix removed: sandbox traffic by its
// E2b-Sandbox-Id and E2b-Sandbox-Port headers, anything else to the control plane.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("E2b-Sandbox-Id")
	if id == "" && signedFiles(r) {
		s.serveSigned(w, r)
		return
	}
	if id == "" {
		s.control.ServeHTTP(w, r)
		return
	}
	port := r.Header.Get("E2b-Sandbox-Port")
	var next http.Handler
	switch port {
	case EnvdPort:
		next = s.envd
	case InterpreterPort:
		next = s.interp
	default:
		s.servePort(w, r, id, port)
		return
	}
	b, status, msg := s.sandboxFor(r, id, true)
	if b == nil {
		// E2B answers envd's health 502 for a sandbox that is not running (paused, ended):
		// the SDKs' is_running() reads that as false and any other error as a failure.
		if port == EnvdPort && r.Method == http.MethodGet && r.URL.Path == "/health" &&
			(status == http.StatusNotFound || status == http.StatusConflict) {
			status = http.StatusBadGateway
		}
		if port == EnvdPort && isConnect(r) {
			writeConnectError(w, status, msg)
		} else {
			writeError(w, status, msg)
		}
		return
	}
	next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), boxKey{}, b)))
}

// AgentOf returns the agent a request acts for, for the shares of the daemon's budgets: its
// sandbox's (E2b-Sandbox-Id, with that sandbox's access token), else its API key's
// (X-API-Key); "" when it proves neither.
func (s *Server) AgentOf(r *http.Request) string {
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		s.mu.Lock()
		b := s.boxes[id]
		s.mu.Unlock()
		given := r.Header.Get("X-Access-Token")
		if given == "" {
			given = r.Header.Get("E2B-Traffic-Access-Token")
		}
		if b == nil || subtle.ConstantTimeCompare([]byte(given), []byte(b.token)) != 1 {
			return ""
		}
		return b.agent
	}
	if key := r.Header.Get("X-API-Key"); key != "" {
		if agent, err := s.keys.APIKeyAgent(r.Context(), key); err == nil {
			return agent
		}
	}
	return ""
}

type boxKey struct{}

// openStream admits a long-lived stream of the sandbox ctx names under Config.Streams: call
// done when it ends; at a cap, a Connect error resource_exhausted naming it.
func (s *Server) openStream(ctx context.Context) (done func(), err error) {
	b := boxOf(ctx)
	done, err = s.cfg.Streams.Open(b.agent, b.id)
	return done, connectError(err)
}

func boxOf(ctx context.Context) *box { return ctx.Value(boxKey{}).(*box) }

// sandboxFor checks a sandbox request's access token (when needToken): it returns the
// sandbox, or the status and message that refuse it.
func (s *Server) sandboxFor(r *http.Request, id string, needToken bool) (*box, int, string) {
	s.mu.Lock()
	b := s.boxes[id]
	s.mu.Unlock()
	given := r.Header.Get("X-Access-Token")
	if given == "" {
		given = r.Header.Get("E2B-Traffic-Access-Token")
	}
	state := ""
	if b != nil {
		state = s.state(b)
	}
	if state == "" {
		return nil, http.StatusNotFound, fmt.Sprintf("sandbox %q is not running: it was killed, timed out, or never existed (E2b-Sandbox-Id)", id)
	}
	if !needToken {
		given = b.token
	}
	if given == "" && r.Header.Get("E2b-Sandbox-Port") == EnvdPort && signedFiles(r) {
		if why := checkSignature(r, b.token, time.Now()); why != "" {
			return nil, http.StatusUnauthorized, why
		}
		given = b.token
	}
	if given == "" {
		return nil, http.StatusUnauthorized, "this sandbox requires its access token: send the envdAccessToken that created it as X-Access-Token"
	}
	if subtle.ConstantTimeCompare([]byte(given), []byte(b.token)) != 1 {
		return nil, http.StatusUnauthorized, "the access token is not this sandbox's: send the envdAccessToken returned when it was created or connected to"
	}
	if state == "paused" {
		if !b.sess.Info().AutoResume {
			return nil, http.StatusConflict, fmt.Sprintf("sandbox %q is paused: resume it first (POST /sandboxes/%s/connect, or Sandbox.connect in the SDKs)", id, id)
		}
		if err := s.resume(r.Context(), b, defaultTimeout); err != nil {
			return nil, statusOf(err), "resuming the paused sandbox: " + err.Error()
		}
	}
	return b, 0, ""
}

// state is b's state in E2B's words: "running", "paused" (paused or hibernated), or "" for a
// sandbox that has ended, which is then forgotten.
func (s *Server) state(b *box) string {
	switch b.sess.Info().State {
	case sandbox.SessionActive:
		return "running"
	case sandbox.SessionPaused, sandbox.SessionHibernated:
		return "paused"
	}
	s.forget(b)
	return ""
}

// resume resumes paused b with a timeout of seconds from now, within its maximum lifetime
// as the session counts it (a pause stops that clock).
func (s *Server) resume(ctx context.Context, b *box, seconds int64) error {
	// The new deadline first: a resumed session past its old one would pause (or end) at once.
	if err := b.sess.SetDeadline(endAfter(b.sess, seconds)); err != nil {
		return err
	}
	_, err := b.sess.Resume(ctx)
	return err
}

// cutOff reports whether b was ended or put away from outside while a call ran (killed,
// timed out, hibernated, the daemon stopping), not by what the call did. E2B's streams then
// break, and the SDKs, asking /health (502), raise a timeout ("the sandbox was killed"): the
// call's answer is aborted (panic(http.ErrAbortHandler)) for them to do so.
func cutOff(b *box) bool {
	select {
	case <-b.sess.Done():
	default:
		return b.sess.Info().State == sandbox.SessionHibernated
	}
	switch b.sess.Info().EndReason {
	case sandbox.EndClosed, sandbox.EndDeadline, sandbox.EndIdleTimeout, sandbox.EndMaxLifetime, sandbox.EndDaemonStopped:
		return true
	}
	return false
}

// forget drops b.
func (s *Server) forget(b *box) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.boxes[b.id] == b {
		delete(s.boxes, b.id)
	}
}

// watch forgets b and ends its code contexts once its session has ended (killed, timed out,
// closed by another door).
func (s *Server) watch(b *box) {
	<-b.sess.Done()
	s.forget(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.closeContexts(ctx, b, s.takeContexts(b))
	s.log.Info("e2b sandbox ended", "sandbox", b.id, "agent", b.agent, "end_reason", b.sess.Info().EndReason)
}

// Close ends the sandboxes and their contexts: they live in this server's memory (tokens,
// metadata), so their sessions must not outlive it (hibernated at the daemon's stop, they
// could never be reached again).
func (s *Server) Close() {
	s.tmpl.close()
	s.mu.Lock()
	boxes := make([]*box, 0, len(s.boxes))
	for id, b := range s.boxes {
		delete(s.boxes, id)
		boxes = append(boxes, b)
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, b := range boxes {
		s.closeContexts(ctx, b, s.takeContexts(b))
		if _, err := b.sess.Close(ctx); err != nil {
			s.log.Warn("ending an e2b sandbox as the daemon stops", "sandbox", b.id, "error", err)
		}
	}
}

// Active returns how many sandboxes are running.
func (s *Server) Active() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.boxes)
}

// apiError is E2B's error body.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Code: status, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// classes maps each error class to its answer on E2B's two wire shapes: the HTTP status of
// the control plane, the code interpreter and envd's plain routes, and the Connect code of
// envd's services. The one place E2B's errors are decided (with statusOf and connectCode).
var classes = map[error]struct {
	status int
	code   connect.Code
}{
	errclass.Invalid:     {http.StatusBadRequest, connect.CodeInvalidArgument},
	errclass.NotFound:    {http.StatusNotFound, connect.CodeNotFound},
	errclass.Gone:        {http.StatusNotFound, connect.CodeNotFound},
	errclass.Conflict:    {http.StatusConflict, connect.CodeFailedPrecondition},
	errclass.TooLarge:    {http.StatusRequestEntityTooLarge, connect.CodeResourceExhausted},
	errclass.Busy:        {http.StatusTooManyRequests, connect.CodeResourceExhausted},
	errclass.Unavailable: {http.StatusServiceUnavailable, connect.CodeUnavailable},
	errclass.Forbidden:   {http.StatusForbidden, connect.CodePermissionDenied},
}

// statusOf maps an error to its HTTP status.
func statusOf(err error) int {
	if c, ok := classes[errclass.Of(err)]; ok {
		return c.status
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// connectCode maps an error to its Connect code.
func connectCode(err error) connect.Code {
	switch {
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded
	}
	if c, ok := classes[errclass.Of(err)]; ok {
		return c.code
	}
	return connect.CodeInternal
}

// writeEngineError answers err as E2B's error, naming what failed.
func writeEngineError(w http.ResponseWriter, what string, err error) {
	writeError(w, statusOf(err), what+": "+err.Error())
}

// newToken returns a sandbox's access token: 32 random bytes in hex.
func newToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// unsupported answers 501 naming the feature.
func unsupported(feature string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotImplemented, feature+" are not supported by sandpit's E2B API; see docs/e2b.md for what is")
	}
}

// decodeBody reads r's JSON body (at most 1 MiB) into v; an empty body leaves v as it is.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("the request body is not the JSON expected: %v", err)
	}
	return nil
}

func isConnect(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return strings.HasPrefix(ct, "application/connect") || strings.HasPrefix(ct, "application/proto") ||
		(strings.HasPrefix(ct, "application/json") && r.Method == http.MethodPost && strings.Count(r.URL.Path, "/") == 2 && strings.Contains(r.URL.Path, "."))
}

// servePort forwards sandbox traffic for any port but envd's and the interpreter's to the
// server the sandbox runs there (E2B's get_host). As on E2B, it is public unless the sandbox
// was created with network.allowPublicTraffic false: then it needs the sandbox's
// trafficAccessToken as E2b-Traffic-Access-Token.
func (s *Server) servePort(w http.ResponseWriter, r *http.Request, id, port string) {
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("E2b-Sandbox-Port %q is not a port: give a TCP port, 1 to 65535", port))
		return
	}
	if s.ports == nil {
		writeError(w, http.StatusBadGateway, fmt.Sprintf("E2b-Sandbox-Port %d is not served: this daemon serves no sandbox's own ports", p))
		return
	}
	s.mu.Lock()
	known := s.boxes[id]
	s.mu.Unlock()
	private := known != nil && known.network != nil && known.network.AllowPublicTraffic != nil && !*known.network.AllowPublicTraffic
	if private && r.Header.Get("E2b-Traffic-Access-Token") == "" {
		writeError(w, http.StatusForbidden, fmt.Sprintf("sandbox %q was created with network.allowPublicTraffic false: "+
			"send its trafficAccessToken as the E2b-Traffic-Access-Token header", id))
		return
	}
	b, status, msg := s.sandboxFor(r, id, private)
	if b == nil {
		writeError(w, status, msg)
		return
	}
	path := r.URL.EscapedPath()
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	if r.URL.RawQuery != "" {
		path += "?" + r.URL.RawQuery
	}
	t := ports.Target{Session: b.sess, SessionID: b.id, Agent: b.agent, Port: p, Path: path,
		DaemonHosts: []string{s.cfg.Domain},
		Client:      r.RemoteAddr, Fail: func(w http.ResponseWriter, err error) {
			if pe, ok := errors.AsType[*ports.Error](err); ok {
				writeError(w, pe.Status, pe.Msg)
				return
			}
			writeError(w, statusOf(err), err.Error())
		}}
	// Reached by its own host name ({port}-{id}.{domain}), the server sees that name.
	if host := strings.ToLower(r.Host); strings.HasPrefix(host, port+"-"+strings.ToLower(id)+".") {
		t.Host = r.Host
	} else {
		t.DaemonHosts = append(t.DaemonHosts, r.Host) // the header form is sent to the daemon's own host
	}
	s.ports.Serve(w, r, t)
}

// Serves says id is one of this server's sandboxes (its ports' host names are E2B's).
func (s *Server) Serves(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.boxes[id] != nil
}

// endAfter is the end of a timeout of seconds from now for sess, cut to the latest its
// maximum lifetime allows.
func endAfter(sess interface{ LatestDeadline() time.Time }, seconds int64) time.Time {
	end := time.Now().Add(time.Duration(seconds) * time.Second)
	if latest := sess.LatestDeadline(); end.After(latest) {
		return latest
	}
	return end
}
