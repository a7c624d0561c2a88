package sandbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/requirement"
)

// Sessions: an interpreter that keeps its globals, imports and working directory from call to
// call, in a sandbox of its own (a dedicated container with a slot's image, hardening and
// limits: sessions of different agents, and sessions and one-shot runs, share nothing
// writable). Calls to one session run one at a time, in the order they came. A call that
// passes its timeout is interrupted and the session lives on; one that does not stop is
// killed and the session ends, as it does on memory exhaustion, when its sandbox dies, when it
// is idle too long or reaches its lifetime, when it is closed, and when the daemon stops.
// Every later call to an ended session gets a SessionEndedError, never a new interpreter.

// SessionBox is one session's own sandbox, running its interpreter.
type SessionBox interface {
	// Run runs spec (with Session set) as the session's next call; see Runtime.Run for the
	// contract (the slot is the box's only one).
	Run(ctx context.Context, spec Spec, emit func(Event)) (Result, error)
	// Install makes requirements importable for the session (see Installer).
	Install(ctx context.Context, req InstallRequest, progress func(DependencyStatus)) (Installed, error)
	// Done is closed when the sandbox has stopped (Err says why).
	Done() <-chan struct{}
	Err() error
	// Close stops the interpreter and removes the sandbox.
	Close(ctx context.Context) error
}

// SessionOpener starts sessions' sandboxes.
type SessionOpener interface {
	// OpenSession starts the sandbox of session id. Errors wrap ErrNotReady when the engine
	// cannot start one now.
	OpenSession(ctx context.Context, id string) (SessionBox, error)
}

// SessionLedger keeps sessions past the daemon's life: which existed, and how each ended.
type SessionLedger interface {
	// BeginSession records a new session; EndSession its end (state ended, EndReason, Reason,
	// EndedAt set).
	BeginSession(ctx context.Context, info SessionInfo) error
	EndSession(ctx context.Context, info SessionInfo) error
	// LookupSession returns the record of session id; an error wrapping ErrSessionNotFound
	// when there is none. When another daemon sharing the ledger holds it open, the record
	// comes with an error of class not found that names that daemon.
	LookupSession(ctx context.Context, id string) (SessionInfo, error)
}

// The states of a session.
const (
	SessionActive = "active"
	SessionEnded  = "ended"
)

// The reasons a session ends (SessionInfo.EndReason); a call's Result.SessionEnded holds one
// of the first four when the call ended its session.
const (
	EndKilled        = "killed"         // a call did not stop after its interrupt and was killed
	EndMemoryLimit   = "memory_limit"   // a call ran out of memory
	EndExited        = "exited"         // the interpreter ended by itself (os._exit, a signal)
	EndSandboxError  = "sandbox_error"  // the session's sandbox failed or stopped
	EndClosed        = "closed"         // its client closed it (DELETE)
	EndIdleTimeout   = "idle_timeout"   // no call for its idle timeout
	EndMaxLifetime   = "max_lifetime"   // it reached its maximum lifetime
	EndDaemonStopped = "daemon_stopped" // the daemon stopped or restarted
)

// SessionInfo is a session as the API shows it. The JSON field names are the public API.
type SessionInfo struct {
	// ID is "se_" and 26 lowercase base32 characters.
	ID    string `json:"id"`
	Agent string `json:"agent"`
	// State is "active" or "ended"; EndReason (one of the End constants) and Reason say why
	// an ended session ended.
	State     string `json:"state"`
	EndReason string `json:"end_reason,omitempty"`
	Reason    string `json:"reason,omitempty"`
	// IdleTimeoutMS and MaxLifetimeMS are the session's limits, in milliseconds.
	IdleTimeoutMS int64 `json:"idle_timeout_ms"`
	MaxLifetimeMS int64 `json:"max_lifetime_ms"`
	// Limits are each call's limits; MemoryBytes holds for the interpreter's whole state.
	Limits Limits `json:"limits"`
	// Dependencies are the requirements installed for the session (absent when none).
	Dependencies []DependencyStatus `json:"dependencies,omitempty"`
	// CreatedAt, LastUsedAt (the last call's end, or the creation) and ExpiresAt (when it
	// ends if no call comes: the earlier of its idle timeout and lifetime) are RFC 3339, UTC;
	// EndedAt is set once it ended.
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt time.Time  `json:"last_used_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	EndedAt    *time.Time `json:"ended_at,omitempty"`
	// Calls counts the calls that ran, the one running now among them (and the one that ended
	// the session); Busy says one runs now; Waiting how many wait.
	Calls   int  `json:"calls"`
	Busy    bool `json:"busy"`
	Waiting int  `json:"waiting"`
}

// SessionRequest asks for a new session.
type SessionRequest struct {
	// Agent owns the session; empty means "default".
	Agent string
	// Dependencies are PEP 508 requirements installed once, when the session is created.
	Dependencies []string
	// IdleTimeoutMS ends the session after that long without a call; nil means
	// SessionConfig.IdleTimeout. MaxLifetimeMS ends it that long after its creation; nil means
	// SessionConfig.MaxLifetime. Both are 1000 ..= SessionConfig.MaxLifetime.
	IdleTimeoutMS *int64
	MaxLifetimeMS *int64
}

// SessionConfig bounds sessions.
type SessionConfig struct {
	// IdleTimeout and MaxLifetime are the defaults of a session's limits; MaxLifetime is also
	// the most either may be.
	IdleTimeout, MaxLifetime time.Duration
	// MaxPerAgent caps an agent's active sessions; MaxTotal all of them (0: sessions are off).
	MaxPerAgent, MaxTotal int
}

// DefaultSessionConfig: 10 minutes idle, 1 hour at most, 2 per agent, 4 in all.
func DefaultSessionConfig() SessionConfig {
	return SessionConfig{IdleTimeout: 10 * time.Minute, MaxLifetime: time.Hour, MaxPerAgent: 2, MaxTotal: 4}
}

// ErrSessionNotFound means no session has the ID for the agent. It is of class
// errclass.NotFound; transports answer 404.
var ErrSessionNotFound = errclass.New(errclass.NotFound, "session not found")

// SessionEndedError is the answer to a call to an ended session. It is of class
// errclass.Gone; transports answer 410.
type SessionEndedError struct{ Info SessionInfo }

// Is makes a SessionEndedError of class errclass.Gone.
func (e *SessionEndedError) Is(target error) bool { return target == errclass.Gone }

func (e *SessionEndedError) Error() string {
	msg := fmt.Sprintf("session %s has ended (%s)", e.Info.ID, e.Info.EndReason)
	if e.Info.Reason != "" {
		msg += ": " + e.Info.Reason
	}
	return msg + "; create a new session (its state is gone)"
}

// SessionBusyError is the answer to a call that asked not to wait while another call of the
// session runs (or found too many waiting, or waited its timeout). It is of class
// errclass.Conflict; transports answer 409.
type SessionBusyError struct {
	ID string
	// Waited is how long the call waited for its turn (its timeout), 0 when it asked not to.
	Waited time.Duration
	// Full says that MaxSessionWaiting calls were waiting already.
	Full bool
}

// Is makes a SessionBusyError of class errclass.Conflict.
func (e *SessionBusyError) Is(target error) bool { return target == errclass.Conflict }

func (e *SessionBusyError) Error() string {
	if e.Full {
		return fmt.Sprintf("session %s already has %d calls waiting for their turn; wait for their answers before sending more", e.ID, MaxSessionWaiting)
	}
	if e.Waited > 0 {
		return fmt.Sprintf("session %s was still running earlier calls after this call waited its timeout_ms (%d ms) for its turn; retry, or give a longer timeout_ms",
			e.ID, e.Waited.Milliseconds())
	}
	return fmt.Sprintf("session %s is running another call; send the call without \"wait\": false to wait for its turn", e.ID)
}

// SessionLimitError is the answer to a new session past a cap. It is of class errclass.Busy;
// transports answer 429.
type SessionLimitError struct {
	Agent    string
	Limit    int
	PerAgent bool
}

// Is makes a SessionLimitError of class errclass.Busy.
func (e *SessionLimitError) Is(target error) bool { return target == errclass.Busy }

func (e *SessionLimitError) Error() string {
	if e.PerAgent {
		return fmt.Sprintf("agent %q has %d active sessions, its limit (sessions_per_agent); close one (DELETE …/sessions/{id}) or let one expire", e.Agent, e.Limit)
	}
	if e.Limit == 0 {
		return "sessions are off on this daemon (sessions_max is 0)"
	}
	return fmt.Sprintf("the daemon has %d active sessions, its limit (sessions_max); close one or retry later", e.Limit)
}

var sessionIDPattern = regexp.MustCompile(`^se_[a-z2-7]{26}$`)

// ValidSessionID reports whether id has the form of a session ID.
func ValidSessionID(id string) bool { return sessionIDPattern.MatchString(id) }

// NewSessionID returns a new session ID: "se_" and 26 lowercase base32 characters.
func NewSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "se_" + strings.ToLower(idEncoding.EncodeToString(b[:]))
}

// MaxSessionWaiting caps the calls that wait for one session's turn; one more gets a
// *SessionBusyError at once.
const MaxSessionWaiting = 8

// endedKept is how many ended sessions stay in memory, for their 410s and listings; older
// ones are answered from the ledger.
const endedKept = 1000

// sessionInterruptGrace is added to a session call's deadline in the daemon: the executor
// gives an interrupted call that long before it kills the interpreter.
const sessionInterruptGrace = 2 * time.Second

// Sessions keeps the daemon's sessions. It is safe for concurrent use.
type Sessions struct {
	svc    *Service
	opener SessionOpener
	ledger SessionLedger
	cfg    SessionConfig
	log    *slog.Logger

	mu      sync.Mutex
	live    map[string]*liveSession
	opening map[string]int // by agent: sessions being created
	ended   map[string]SessionInfo
	order   []string // ended IDs, oldest first
	closed  bool
	closing sync.WaitGroup
}

type liveSession struct {
	info  SessionInfo // guarded by Sessions.mu
	box   SessionBox
	paths []string
	turn  chan struct{} // holds the token while no call runs; waiters receive in order
	timer *time.Timer
}

// NewSessions returns the session keeper over svc (its limits, ledger, callbacks and file
// store apply to every call). ledger may be nil (nothing outlives the daemon); log may be nil.
func NewSessions(svc *Service, opener SessionOpener, ledger SessionLedger, cfg SessionConfig, log *slog.Logger) *Sessions {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sessions{svc: svc, opener: opener, ledger: ledger, cfg: cfg, log: log,
		live: map[string]*liveSession{}, opening: map[string]int{}, ended: map[string]SessionInfo{}}
}

// Config returns the session limits.
func (m *Sessions) Config() SessionConfig { return m.cfg }

// Create starts a session: its sandbox, then its dependencies. Errors: a *FieldError, a
// *SessionLimitError, an error wrapping ErrNotReady, or the dependencies' failure.
func (m *Sessions) Create(ctx context.Context, req SessionRequest) (SessionInfo, error) {
	agent := req.Agent
	if agent == "" {
		agent = "default"
	}
	if !ValidAgent(agent) {
		return SessionInfo{}, &FieldError{Field: "agent", Message: fmt.Sprintf(
			"%q is not a valid agent name: use 1 to 64 lowercase letters, digits, '-' or '_', starting with a letter or digit", agent)}
	}
	if _, err := requirement.ParseList(req.Dependencies, m.svc.cfg.MaxDependencies); err != nil {
		return SessionInfo{}, &FieldError{Field: "dependencies", Message: err.Error()}
	}
	idle, err := m.duration("idle_timeout_ms", req.IdleTimeoutMS, m.cfg.IdleTimeout)
	if err != nil {
		return SessionInfo{}, err
	}
	life, err := m.duration("max_lifetime_ms", req.MaxLifetimeMS, m.cfg.MaxLifetime)
	if err != nil {
		return SessionInfo{}, err
	}
	if err := m.reserve(agent); err != nil {
		return SessionInfo{}, err
	}
	defer m.unreserve(agent)

	id := NewSessionID()
	box, err := m.opener.OpenSession(ctx, id)
	if err != nil {
		return SessionInfo{}, err
	}
	now := time.Now().UTC()
	ls := &liveSession{box: box, turn: make(chan struct{}, 1), info: SessionInfo{
		ID: id, Agent: agent, State: SessionActive, IdleTimeoutMS: idle.Milliseconds(), MaxLifetimeMS: life.Milliseconds(),
		Limits: m.svc.cfg.Limits, CreatedAt: now, LastUsedAt: now}}
	fail := func(err error) (SessionInfo, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if cerr := box.Close(cctx); cerr != nil {
			m.log.Warn("removing a session's sandbox that did not start", "session", id, "error", cerr)
		}
		return SessionInfo{}, err
	}
	if len(req.Dependencies) > 0 {
		// The same install as a run's: the daemon's pip settings, and the egress gate that
		// lets pip reach the package index under network "allowlist".
		deps, _, err := m.svc.installWith(ctx, req.Dependencies, nil, box.Install)
		if err != nil {
			return fail(fmt.Errorf("installing the session's dependencies: %w", err))
		}
		if failed := deps.Failed(); len(failed) > 0 {
			return fail(&FieldError{Field: "dependencies", Message: fmt.Sprintf("%s could not be installed, so the session was not created: %s",
				failed[0].Requirement, failed[0].Error)})
		}
		ls.paths = deps.Paths
		for _, d := range deps.Dependencies {
			ls.info.Dependencies = append(ls.info.Dependencies, markSkipped(d))
		}
	}
	if m.ledger != nil {
		if err := m.ledger.BeginSession(ctx, ls.info); err != nil {
			return fail(fmt.Errorf("%w: the ledger could not record the session (%v); check that the data directory's disk has space and is writable", ErrNotReady, err))
		}
	}
	ls.turn <- struct{}{}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return fail(fmt.Errorf("%w: %w", ErrNotReady, ErrInterrupted))
	}
	m.live[id] = ls
	ls.timer = time.AfterFunc(m.untilExpiry(ls, now), func() { m.expire(id) })
	info := m.snapshot(ls)
	m.mu.Unlock()
	go m.watch(id, box)
	m.log.Info("session created", "session", id, "agent", agent, "idle_timeout_ms", idle.Milliseconds(), "max_lifetime_ms", life.Milliseconds())
	return info, nil
}

// duration resolves a session limit given in milliseconds.
func (m *Sessions) duration(field string, ms *int64, def time.Duration) (time.Duration, error) {
	if ms == nil {
		return def, nil
	}
	if *ms < 1000 || *ms > m.cfg.MaxLifetime.Milliseconds() {
		return 0, &FieldError{Field: field, Message: fmt.Sprintf("is %d; allowed range is 1000 to %d milliseconds (omit it for the default of %d)",
			*ms, m.cfg.MaxLifetime.Milliseconds(), def.Milliseconds())}
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

// reserve counts a session being created against the caps, or says which cap it passes.
func (m *Sessions) reserve(agent string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("%w: %w", ErrNotReady, ErrInterrupted)
	}
	total, mine := 0, m.opening[agent]
	for _, n := range m.opening {
		total += n
	}
	for _, ls := range m.live {
		total++
		if ls.info.Agent == agent {
			mine++
		}
	}
	if total >= m.cfg.MaxTotal {
		return &SessionLimitError{Agent: agent, Limit: m.cfg.MaxTotal}
	}
	if mine >= m.cfg.MaxPerAgent {
		return &SessionLimitError{Agent: agent, Limit: m.cfg.MaxPerAgent, PerAgent: true}
	}
	m.opening[agent]++
	return nil
}

func (m *Sessions) unreserve(agent string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.opening[agent]--; m.opening[agent] <= 0 {
		delete(m.opening, agent)
	}
}

// untilExpiry is how long from now ls may stay without a call. Called with m.mu held.
func (m *Sessions) untilExpiry(ls *liveSession, now time.Time) time.Duration {
	return max(m.expiresAt(ls).Sub(now), 0)
}

func (m *Sessions) expiresAt(ls *liveSession) time.Time {
	idle := ls.info.LastUsedAt.Add(time.Duration(ls.info.IdleTimeoutMS) * time.Millisecond)
	life := ls.info.CreatedAt.Add(time.Duration(ls.info.MaxLifetimeMS) * time.Millisecond)
	if life.Before(idle) {
		return life
	}
	return idle
}

// snapshot is ls's info as shown now. Called with m.mu held.
func (m *Sessions) snapshot(ls *liveSession) SessionInfo {
	info := ls.info
	at := m.expiresAt(ls)
	info.ExpiresAt = &at
	info.Dependencies = slices.Clone(info.Dependencies)
	return info
}

// expire ends session id when it has passed its lifetime, or its idle timeout with no call
// running; otherwise it looks again when it next could.
func (m *Sessions) expire(id string) {
	m.mu.Lock()
	ls := m.live[id]
	if ls == nil {
		m.mu.Unlock()
		return
	}
	now := time.Now()
	life := ls.info.CreatedAt.Add(time.Duration(ls.info.MaxLifetimeMS) * time.Millisecond)
	idle := ls.info.LastUsedAt.Add(time.Duration(ls.info.IdleTimeoutMS) * time.Millisecond)
	switch {
	case !now.Before(life):
		m.mu.Unlock()
		m.end(id, EndMaxLifetime, fmt.Sprintf("it reached its maximum lifetime of %d ms", ls.info.MaxLifetimeMS))
	case !now.Before(idle) && !ls.info.Busy && ls.info.Waiting == 0:
		m.mu.Unlock()
		m.end(id, EndIdleTimeout, fmt.Sprintf("it had no call for its idle timeout of %d ms", ls.info.IdleTimeoutMS))
	default:
		next := m.untilExpiry(ls, now)
		if next == 0 { // busy: look again once the call may have ended
			next = time.Second
		}
		ls.timer.Reset(next)
		m.mu.Unlock()
	}
}

// watch ends session id when its sandbox stops by itself.
func (m *Sessions) watch(id string, box SessionBox) {
	<-box.Done()
	reason := "the session's sandbox stopped"
	if err := box.Err(); err != nil {
		reason += ": " + err.Error()
	}
	m.end(id, EndSandboxError, reason)
}

// end ends session id (if it is live) with code and reason, and removes its sandbox in the
// background. It returns the session's info as it ended, and false if it was not live.
func (m *Sessions) end(id, code, reason string) (SessionInfo, bool) {
	m.mu.Lock()
	ls := m.live[id]
	if ls == nil {
		m.mu.Unlock()
		return SessionInfo{}, false
	}
	delete(m.live, id)
	ls.timer.Stop()
	now := time.Now().UTC()
	ls.info.State, ls.info.EndReason, ls.info.Reason, ls.info.EndedAt = SessionEnded, code, reason, &now
	info := ls.info
	info.Busy, info.Waiting = false, 0
	m.ended[id] = info
	m.order = append(m.order, id)
	if len(m.order) > endedKept {
		delete(m.ended, m.order[0])
		m.order = m.order[1:]
	}
	m.closing.Add(1)
	m.mu.Unlock()
	m.log.Info("session ended", "session", id, "agent", info.Agent, "end_reason", code, "reason", reason, "calls", info.Calls)
	go func() {
		defer m.closing.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := ls.box.Close(ctx); err != nil {
			m.log.Warn("removing an ended session's sandbox", "session", id, "error", err)
		}
		if m.ledger != nil {
			if err := m.ledger.EndSession(ctx, info); err != nil {
				m.log.Warn("the ledger could not record a session's end", "session", id, "error", err)
			}
		}
	}()
	return info, true
}

// lookup returns agent's live session id, or the error that answers for it: a
// *SessionEndedError for one that has ended, or ErrSessionNotFound.
func (m *Sessions) lookup(ctx context.Context, agent, id string) (*liveSession, error) {
	if agent == "" {
		agent = "default"
	}
	notFound := fmt.Errorf("%w: agent %q has no session %q; POST /v1/agents/%s/sessions creates one", ErrSessionNotFound, agent, id, agent)
	if !ValidSessionID(id) {
		return nil, notFound
	}
	m.mu.Lock()
	ls, ended, isEnded := m.live[id], m.ended[id], false
	if ls == nil {
		_, isEnded = m.ended[id]
	}
	m.mu.Unlock()
	switch {
	case ls != nil && ls.info.Agent == agent:
		return ls, nil
	case ls != nil:
		return nil, notFound
	case isEnded && ended.Agent == agent:
		return nil, &SessionEndedError{Info: ended}
	case isEnded:
		return nil, notFound
	}
	if m.ledger != nil {
		info, err := m.ledger.LookupSession(ctx, id)
		switch {
		case info.Agent != agent: // none, or another agent's: not found
		case err == nil:
			return nil, &SessionEndedError{Info: info}
		case errclass.Of(err) == errclass.NotFound:
			return nil, err // held open by another daemon sharing the ledger: its error names it
		}
	}
	return nil, notFound
}

// Get returns agent's session id, active or ended.
func (m *Sessions) Get(ctx context.Context, agent, id string) (SessionInfo, error) {
	ls, err := m.lookup(ctx, agent, id)
	if ended, ok := errors.AsType[*SessionEndedError](err); ok {
		return ended.Info, nil
	}
	if err != nil {
		return SessionInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.snapshot(ls), nil
}

// List returns agent's active sessions and those that ended while this daemon ran (the most
// recent endedKept of all agents'), newest first.
func (m *Sessions) List(agent string) []SessionInfo {
	if agent == "" {
		agent = "default"
	}
	m.mu.Lock()
	list := []SessionInfo{}
	for _, ls := range m.live {
		if ls.info.Agent == agent {
			list = append(list, m.snapshot(ls))
		}
	}
	for _, info := range m.ended {
		if info.Agent == agent {
			list = append(list, info)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(list, func(a, b SessionInfo) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	return list
}

// Close ends agent's session id (reason closed) and removes its sandbox; a call running is
// killed. A session that had already ended is returned as it ended.
func (m *Sessions) Close(ctx context.Context, agent, id string) (SessionInfo, error) {
	if _, err := m.lookup(ctx, agent, id); err != nil {
		if ended, ok := errors.AsType[*SessionEndedError](err); ok {
			return ended.Info, nil
		}
		return SessionInfo{}, err
	}
	info, ok := m.end(id, EndClosed, "its client closed it")
	if !ok {
		return m.Get(ctx, agent, id)
	}
	return info, nil
}

// Execute runs req as the next call of agent's session id, once the calls before it have
// ended; with wait false it fails with a *SessionBusyError instead when a call runs. The wait
// is bounded by the call's own timeout. Errors: those of Service.Execute, ErrSessionNotFound,
// a *SessionEndedError, a *SessionBusyError. A call's failures, its session's end included
// (Result.SessionEnded), are Results.
func (m *Sessions) Execute(ctx context.Context, id string, req Request, wait bool, emit func(Event)) (Result, error) {
	s := m.svc
	if len(req.Dependencies) > 0 {
		return Result{}, &FieldError{Field: "dependencies", Message: "a session's dependencies are given when it is created (POST …/sessions); send the call without them"}
	}
	if err := s.Validate(req); err != nil {
		return Result{}, err
	}
	ls, err := m.lookup(ctx, req.Agent, id)
	if err != nil {
		return Result{}, err
	}
	x := s.prepare(req)
	x.session, x.box, x.grace = id, ls.box, sessionInterruptGrace
	x.spec.Session, x.spec.Paths = true, ls.paths

	if err := m.takeTurn(ctx, ls, x.spec.TimeoutMS, wait); err != nil {
		return Result{}, err
	}
	defer m.giveTurn(id, ls)
	m.mu.Lock()
	_, live := m.live[id]
	m.mu.Unlock()
	if !live { // it ended while the call waited
		_, err := m.lookup(ctx, req.Agent, id)
		return Result{}, err
	}
	x.accepted = time.Now().UTC()
	if err := s.begin(ctx, x); err != nil {
		return Result{}, err
	}
	res, err := s.run(ctx, x, emit)
	if err != nil {
		// It never started: the session's sandbox is gone.
		info, _ := m.end(id, EndSandboxError, "the session's sandbox could not take a call: "+err.Error())
		if info.ID == "" {
			_, lerr := m.lookup(ctx, req.Agent, id)
			return Result{}, cmpErr(lerr, err)
		}
		return Result{}, &SessionEndedError{Info: info}
	}
	m.mu.Lock()
	gone, isGone := m.ended[id] // closed (or expired) while the call ran
	m.mu.Unlock()
	switch {
	case isGone:
		res.SessionEnded = gone.EndReason
	case res.Outcome == OutcomeSandboxError && res.SessionEnded == "":
		res.SessionEnded = EndSandboxError
	}
	res = s.finish(ctx, x, res)
	if res.SessionEnded != "" {
		m.end(id, res.SessionEnded, res.Reason)
	}
	return res, nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// takeTurn waits for the session's turn, in order, for up to the call's timeout; with wait
// false it fails at once when a call runs.
func (m *Sessions) takeTurn(ctx context.Context, ls *liveSession, timeoutMS int64, wait bool) error {
	select {
	case <-ls.turn:
		m.mark(ls, true, 0)
		return nil
	default:
	}
	if !wait {
		return &SessionBusyError{ID: ls.info.ID}
	}
	m.mu.Lock()
	full := ls.info.Waiting >= MaxSessionWaiting
	if !full {
		ls.info.Waiting++
	}
	m.mu.Unlock()
	if full {
		return &SessionBusyError{ID: ls.info.ID, Full: true}
	}
	timer := time.NewTimer(time.Duration(timeoutMS) * time.Millisecond)
	defer timer.Stop()
	select {
	case <-ls.turn:
		m.mark(ls, true, -1)
		return nil
	case <-ctx.Done():
		m.mark(ls, false, -1)
		return fmt.Errorf("waiting for the session's turn: %w", ctx.Err())
	case <-timer.C:
		m.mark(ls, false, -1)
		return &SessionBusyError{ID: ls.info.ID, Waited: time.Duration(timeoutMS) * time.Millisecond}
	case <-ls.box.Done():
		m.mark(ls, false, -1)
		return fmt.Errorf("%w: the session's sandbox stopped while the call waited", ErrNotReady)
	}
}

// mark records a call taking the turn (busy: it is counted now, so that a call that ends the
// session counts among its calls) and a change in the number waiting.
func (m *Sessions) mark(ls *liveSession, busy bool, waiting int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if busy {
		ls.info.Busy = true
		ls.info.Calls++
	}
	ls.info.Waiting += waiting
}

// giveTurn ends a call's turn: the session was used now.
func (m *Sessions) giveTurn(id string, ls *liveSession) {
	m.mu.Lock()
	ls.info.Busy = false
	ls.info.LastUsedAt = time.Now().UTC()
	if _, live := m.live[id]; live {
		ls.timer.Reset(m.untilExpiry(ls, time.Now()))
	}
	m.mu.Unlock()
	ls.turn <- struct{}{}
}

// Shutdown ends every session (reason daemon_stopped) and waits, up to ctx, until their
// sandboxes are removed. New sessions are refused from now on.
func (m *Sessions) Shutdown(ctx context.Context) {
	m.mu.Lock()
	m.closed = true
	ids := make([]string, 0, len(m.live))
	for id := range m.live {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	for _, id := range ids {
		m.end(id, EndDaemonStopped, "the daemon stopped; a session does not outlive it")
	}
	done := make(chan struct{})
	go func() {
		m.closing.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// Active returns how many sessions are active.
func (m *Sessions) Active() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.live)
}
