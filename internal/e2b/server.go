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
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
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

// Sessions is what the API needs of the engine's sessions (engine.Sessions).
type Sessions interface {
	Create(ctx context.Context, req sandbox.SessionRequest) (sandbox.SessionInfo, error)
	Pause(ctx context.Context, agent, id string) (sandbox.SessionInfo, error)
	Resume(ctx context.Context, agent, id string) (sandbox.SessionInfo, error)
	Get(ctx context.Context, agent, id string) (sandbox.SessionInfo, error)
	Close(ctx context.Context, agent, id string) (sandbox.SessionInfo, error)
	Execute(ctx context.Context, id string, req sandbox.Request, wait bool, emit func(sandbox.Event)) (sandbox.Result, error)
}

// Engine is what the API needs of the engine (engine.Sessions): sessions and their
// workspaces.
type Engine interface {
	Sessions
	Workspace
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
	// Pool is how many warm sandboxes (sessions with their interpreter started) are kept
	// ready for POST /sandboxes (e2b_pool; 0: none).
	Pool int
}

// Server serves the E2B API. It is safe for concurrent use; Close ends its sandboxes'
// timers (the sessions themselves end with the engine).
type Server struct {
	cfg       Config
	sessions  Sessions
	workspace Workspace
	keys      Keys
	warmer    Warmer // nil: no pool
	pool      chan warmSession
	taken     chan struct{}
	log       *slog.Logger
	control   http.Handler
	interp    http.Handler
	envd      http.Handler

	mu    sync.Mutex
	boxes map[string]*box
}

// box is one sandbox: a session and what E2B says of it.
type box struct {
	id, agent, template string
	token               string
	metadata, env       map[string]string
	allowInternet       *bool
	network             *networkConfig
	netAllow            []string // nil: the daemon's policy; else narrowed to these
	started             time.Time
	autoPause           bool // pause at the timeout instead of ending
	autoResume          bool // traffic to it while paused resumes it

	// guarded by Server.mu
	lifeEnd  time.Time // the session's maximum lifetime: no timeout passes it
	endAt    time.Time
	timer    *time.Timer
	contexts map[string]*codeContext
	runs     int // number_of_executions of the default context
	warmRuns int // the session's calls before it was handed on (its warm-up)
	procs    map[uint32]*proc
	tags     map[string]uint32
}

// New returns the server. log may be nil.
func New(cfg Config, eng Engine, keys Keys, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, sessions: eng, workspace: eng, keys: keys, log: log, boxes: map[string]*box{},
		pool: make(chan warmSession, max(cfg.Pool, 0)), taken: make(chan struct{}, 1)}
	s.warmer, _ = eng.(Warmer)
	s.control = s.controlRoutes()
	s.interp = s.interpreterRoutes()
	s.envd = s.envdRoutes()
	return s
}

// ServeHTTP routes a request whose path has the mount prefix removed: sandbox traffic by its
// E2b-Sandbox-Id and E2b-Sandbox-Port headers, anything else to the control plane.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("E2b-Sandbox-Id")
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
		writeError(w, http.StatusBadGateway, fmt.Sprintf("E2b-Sandbox-Port %q is not served: sandpit serves envd on %s and the code interpreter on %s; "+
			"a sandbox's other ports are not reachable from outside", port, EnvdPort, InterpreterPort))
		return
	}
	b, status, msg := s.sandboxFor(r, id)
	if b == nil {
		if port == EnvdPort && isConnect(r) {
			writeConnectError(w, status, msg)
		} else {
			writeError(w, status, msg)
		}
		return
	}
	next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), boxKey{}, b)))
}

type boxKey struct{}

func boxOf(ctx context.Context) *box { return ctx.Value(boxKey{}).(*box) }

// sandboxFor checks a sandbox request's access token: it returns the sandbox, or the status
// and message that refuse it.
func (s *Server) sandboxFor(r *http.Request, id string) (*box, int, string) {
	s.mu.Lock()
	b := s.boxes[id]
	s.mu.Unlock()
	given := r.Header.Get("X-Access-Token")
	if given == "" {
		given = r.Header.Get("E2B-Traffic-Access-Token")
	}
	state := ""
	if b != nil {
		state = s.state(r.Context(), b)
	}
	if state == "" {
		return nil, http.StatusNotFound, fmt.Sprintf("sandbox %q is not running: it was killed, timed out, or never existed (E2b-Sandbox-Id)", id)
	}
	if given == "" {
		return nil, http.StatusUnauthorized, "this sandbox requires its access token: send the envdAccessToken that created it as X-Access-Token"
	}
	if subtle.ConstantTimeCompare([]byte(given), []byte(b.token)) != 1 {
		return nil, http.StatusUnauthorized, "the access token is not this sandbox's: send the envdAccessToken returned when it was created or connected to"
	}
	if state == "paused" {
		if !b.autoResume {
			return nil, http.StatusConflict, fmt.Sprintf("sandbox %q is paused: resume it first (POST /sandboxes/%s/connect, or Sandbox.connect in the SDKs)", id, id)
		}
		if _, err := s.resume(r.Context(), b, defaultTimeout); err != nil {
			return nil, statusOf(err), "resuming the paused sandbox: " + err.Error()
		}
	}
	return b, 0, ""
}

// state is b's state in E2B's words: "running", "paused" (paused or hibernated), or "" for a
// sandbox that has ended, which is then forgotten.
func (s *Server) state(ctx context.Context, b *box) string {
	info, err := s.sessions.Get(ctx, b.agent, b.id)
	if err == nil {
		switch info.State {
		case sandbox.SessionActive:
			return "running"
		case sandbox.SessionPaused, sandbox.SessionHibernated:
			return "paused"
		}
	}
	s.forget(b)
	return ""
}

// live reports whether b's session is there, running or paused.
func (s *Server) live(ctx context.Context, b *box) bool { return s.state(ctx, b) != "" }

// resume resumes paused b with a timeout of seconds from now, within its maximum lifetime
// as the session counts it (a pause stops that clock).
func (s *Server) resume(ctx context.Context, b *box, seconds int64) (sandbox.SessionInfo, error) {
	info, err := s.sessions.Resume(ctx, b.agent, b.id)
	if err != nil {
		return info, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if info.ExpiresAt != nil {
		b.lifeEnd = *info.ExpiresAt
	}
	b.endAt = time.Now().Add(time.Duration(seconds) * time.Second)
	if b.endAt.After(b.lifeEnd) {
		b.endAt = b.lifeEnd
	}
	b.timer.Reset(max(time.Until(b.endAt), 0))
	return info, nil
}

// forget drops b and stops its timer.
func (s *Server) forget(b *box) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.boxes[b.id] == b {
		delete(s.boxes, b.id)
		b.timer.Stop()
	}
}

// Close ends the sandboxes and their contexts: they live in this server's memory (tokens,
// metadata, timeouts), so their sessions must not outlive it (hibernated at the daemon's
// stop, they could never be reached again).
func (s *Server) Close() {
	s.mu.Lock()
	boxes := make([]*box, 0, len(s.boxes))
	for id, b := range s.boxes {
		b.timer.Stop()
		delete(s.boxes, id)
		boxes = append(boxes, b)
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, b := range boxes {
		s.closeContexts(ctx, b, s.takeContexts(b))
		if _, err := s.sessions.Close(ctx, b.agent, b.id); err != nil {
			s.log.Warn("ending an e2b sandbox as the daemon stops", "sandbox", b.id, "error", err)
		}
	}
	s.drain()
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

// statusOf maps an engine error to its HTTP status.
func statusOf(err error) int {
	switch errclass.Of(err) {
	case errclass.Invalid:
		return http.StatusBadRequest
	case errclass.NotFound, errclass.Gone:
		return http.StatusNotFound
	case errclass.Conflict:
		return http.StatusConflict
	case errclass.TooLarge:
		return http.StatusRequestEntityTooLarge
	case errclass.Busy:
		return http.StatusTooManyRequests
	case errclass.Unavailable:
		return http.StatusServiceUnavailable
	case errclass.Forbidden:
		return http.StatusForbidden
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
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
