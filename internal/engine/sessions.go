package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/requirement"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// SessionConfig bounds sessions.
type SessionConfig struct {
	// IdleTimeout and MaxLifetime are the defaults of a session's limits; MaxLifetime is also
	// the most either may be.
	IdleTimeout, MaxLifetime time.Duration
	// MaxPerAgent caps an agent's active sessions; MaxTotal all of them (0: sessions are off).
	MaxPerAgent, MaxTotal int
	// Lifecycle bounds pauses and hibernations (see lifecycle.go).
	Lifecycle LifecycleConfig
	// ReadsMaxBytes is the daemon-wide budget of file-read bytes in flight (see reads.go);
	// 0 is DefaultReadsMaxBytes, and it is raised to hold the largest read.
	ReadsMaxBytes int64
}

// DefaultSessionConfig: 10 minutes idle, 1 hour at most, 2 per agent, 4 in all.
func DefaultSessionConfig() SessionConfig {
	return SessionConfig{IdleTimeout: 10 * time.Minute, MaxLifetime: time.Hour, MaxPerAgent: 2, MaxTotal: 4}
}

// endedKept is how many ended sessions stay in memory, for their 410s and listings; older
// ones are answered from the ledger.
const endedKept = 1000

// sessionInterruptGrace is added to a session call's deadline in the daemon: the executor
// gives an interrupted call that long before it kills the interpreter.
const sessionInterruptGrace = 2 * time.Second

// Sessions keeps the daemon's sessions. It is safe for concurrent use.
type Sessions struct {
	svc    *Service
	opener sandbox.SessionOpener
	ledger sandbox.SessionLedger
	cfg    SessionConfig
	log    *slog.Logger

	// commands records each command in the ledger (nil: none).
	commands CommandRecorder

	mu      sync.Mutex
	live    map[string]*liveSession
	opening map[string]int // by agent: sessions being created
	ended   map[string]sandbox.SessionInfo
	order   []string // ended IDs, oldest first
	closed  bool
	closing sync.WaitGroup
	lc      lifecycle // paused and hibernated sessions (see lifecycle.go)
	reads   *readBudget
}

type liveSession struct {
	info  sandbox.SessionInfo // guarded by Sessions.mu
	box   sandbox.SessionBox
	paths []string
	turn  chan struct{} // holds the token while no call runs (nor is it paused); waiters receive in order
	timer *time.Timer
	// egress is the dialer of the session's commands (network "allowlist"), closed at its end.
	egress sandbox.EgressRun
	// workspace holds the session's commands (see workspace.go), made at first use.
	wsOnce    sync.Once
	workspace *workspace
	life      liveLife // guarded by Sessions.mu (see lifecycle.go)
	// thaw is held by whatever thaws a paused session's box for a while (a resume, a
	// hibernation, a fork's copy), so that two never thaw it at once: a resume during a fork's
	// copy met the engine's "is not paused" (trial, 2 December 2026). Taken before Sessions.mu.
	thaw sync.Mutex
	// ending says why its box is being removed on purpose (see close).
	ending atomic.Pointer[string]
}

// giveEgress gives ls's box the dialer of its commands' connections (network "allowlist"):
// every new box, created, resumed from hibernation or forked.
func (m *Sessions) giveEgress(ls *liveSession) {
	if m.svc.net != nil {
		ls.egress = m.svc.net.ForWorkspace()
		ls.box.SetEgress(ls.egress)
	}
}

// close removes the session's sandbox and ends its commands' egress. why says why, for the
// commands still running, which end with it (see processEvent).
func (ls *liveSession) close(ctx context.Context, why string) error {
	ls.ending.Store(&why)
	err := ls.box.Close(ctx)
	if ls.egress != nil {
		ls.egress.Close()
	}
	return err
}

// NewSessions returns the session keeper over svc (its limits, ledger, callbacks and file
// store apply to every call). ledger may be nil (nothing outlives the daemon); log may be nil.
func NewSessions(svc *Service, opener sandbox.SessionOpener, ledger sandbox.SessionLedger, cfg SessionConfig, log *slog.Logger) *Sessions {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sessions{svc: svc, opener: opener, ledger: ledger, cfg: cfg, log: log,
		reads: newReadBudget(cfg.ReadsMaxBytes), live: map[string]*liveSession{}, opening: map[string]int{}, ended: map[string]sandbox.SessionInfo{},
		lc: lifecycle{hibernated: map[string]sandbox.SessionInfo{}, waking: map[string]chan struct{}{}}}
}

// Config returns the session limits.
func (m *Sessions) Config() SessionConfig { return m.cfg }

// Create starts a session: its sandbox, then its dependencies. Errors: a *FieldError, a
// *SessionLimitError, an error wrapping ErrNotReady, or the dependencies' failure.
func (m *Sessions) Create(ctx context.Context, req sandbox.SessionRequest) (sandbox.SessionInfo, error) {
	agent := req.Agent
	if agent == "" {
		agent = "default"
	}
	if !sandbox.ValidAgent(agent) && !(agent == WarmAgent && warm(ctx)) { // see warm.go
		return sandbox.SessionInfo{}, &sandbox.FieldError{Field: "agent", Message: fmt.Sprintf(
			"%q is not a valid agent name: use 1 to 64 lowercase letters, digits, '-' or '_', starting with a letter or digit", agent)}
	}
	if _, err := requirement.ParseList(req.Dependencies, m.svc.cfg.MaxDependencies); err != nil {
		return sandbox.SessionInfo{}, &sandbox.FieldError{Field: "dependencies", Message: err.Error()}
	}
	idle, err := m.duration("idle_timeout_ms", req.IdleTimeoutMS, m.cfg.IdleTimeout)
	if err != nil {
		return sandbox.SessionInfo{}, err
	}
	life, err := m.duration("max_lifetime_ms", req.MaxLifetimeMS, m.cfg.MaxLifetime)
	if err != nil {
		return sandbox.SessionInfo{}, err
	}
	if err := m.reserve(ctx, agent); err != nil {
		return sandbox.SessionInfo{}, err
	}
	defer m.unreserve(agent)

	id := sandbox.NewSessionID()
	box, err := m.opener.OpenSession(ctx, id)
	if err != nil {
		return sandbox.SessionInfo{}, err
	}
	now := time.Now().UTC()
	ls := &liveSession{box: box, turn: make(chan struct{}, 1), info: sandbox.SessionInfo{
		ID: id, Agent: agent, State: sandbox.SessionActive, IdleTimeoutMS: idle.Milliseconds(), MaxLifetimeMS: life.Milliseconds(),
		Limits: m.svc.cfg.Limits, CreatedAt: now, LastUsedAt: now}}
	m.startLife(ls, req.SessionOptions, now)
	fail := func(err error) (sandbox.SessionInfo, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if cerr := box.Close(cctx); cerr != nil {
			m.log.Warn("removing a session's sandbox that did not start", "session", id, "error", cerr)
		}
		return sandbox.SessionInfo{}, err
	}
	if len(req.Dependencies) > 0 {
		// The same install as a run's: the daemon's pip settings, and the egress gate that
		// lets pip reach the package index under network "allowlist".
		deps, _, err := m.svc.installWith(ctx, req.Dependencies, nil, box.Install)
		if err != nil {
			return fail(fmt.Errorf("installing the session's dependencies: %w", err))
		}
		if failed := deps.Failed(); len(failed) > 0 {
			return fail(&sandbox.FieldError{Field: "dependencies", Message: fmt.Sprintf("%s could not be installed, so the session was not created: %s",
				failed[0].Requirement, failed[0].Error)})
		}
		ls.paths = deps.Paths
		for _, d := range deps.Dependencies {
			ls.info.Dependencies = append(ls.info.Dependencies, markSkipped(d))
		}
	}
	if m.ledger != nil {
		if err := m.ledger.BeginSession(ctx, ls.info); err != nil {
			return fail(fmt.Errorf("%w: the ledger could not record the session (%v); check that the data directory's disk has space and is writable", sandbox.ErrNotReady, err))
		}
	}
	m.giveEgress(ls)
	ls.turn <- struct{}{}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return fail(fmt.Errorf("%w: %w", sandbox.ErrNotReady, ErrInterrupted))
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
		return 0, &sandbox.FieldError{Field: field, Message: fmt.Sprintf("is %d; allowed range is 1000 to %d milliseconds (omit it for the default of %d)",
			*ms, m.cfg.MaxLifetime.Milliseconds(), def.Milliseconds())}
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

// reserve counts a session being created against the caps, or says which cap it passes.
func (m *Sessions) reserve(ctx context.Context, agent string) error {
	id, err := m.tryReserve(agent)
	if id != "" {
		// At sessions_max with a warm session idle (see warm.go): a session asked for now
		// comes first, and the pool makes another when there is room.
		if _, cerr := m.CloseWarm(ctx, id); cerr == nil {
			_, err = m.tryReserve(agent)
		}
	}
	return err
}

// tryReserve is reserve's step under m.mu. At the daemon's cap it also returns a warm
// session's ID that could make room, for any agent but WarmAgent.
func (m *Sessions) tryReserve(agent string) (warmID string, _ error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return "", fmt.Errorf("%w: %w", sandbox.ErrNotReady, ErrInterrupted)
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
		if agent != WarmAgent {
			for id, ls := range m.live {
				if ls.info.Agent == WarmAgent && !ls.info.Busy && ls.info.State == sandbox.SessionActive {
					warmID = id
					break
				}
			}
		}
		return warmID, &sandbox.SessionLimitError{Agent: agent, Limit: m.cfg.MaxTotal}
	}
	if mine >= m.cfg.MaxPerAgent {
		return "", &sandbox.SessionLimitError{Agent: agent, Limit: m.cfg.MaxPerAgent, PerAgent: true}
	}
	m.opening[agent]++
	m.closing.Add(1) // Shutdown waits for a session being made too (unreserve is its Done)
	return "", nil
}

func (m *Sessions) unreserve(agent string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.opening[agent]--; m.opening[agent] <= 0 {
		delete(m.opening, agent)
	}
	m.closing.Done()
}

// untilExpiry is how long from now ls may stay without a call. Called with m.mu held.
func (m *Sessions) untilExpiry(ls *liveSession, now time.Time) time.Duration {
	return max(m.expiresAt(ls).Sub(now), 0)
}

func (m *Sessions) expiresAt(ls *liveSession) time.Time {
	idle := ls.info.LastUsedAt.Add(time.Duration(ls.info.IdleTimeoutMS) * time.Millisecond)
	life := m.lifeEnd(ls)
	if life.Before(idle) {
		return life
	}
	return idle
}

// snapshot is ls's info as shown now. Called with m.mu held.
func (m *Sessions) snapshot(ls *liveSession) sandbox.SessionInfo {
	info := ls.info
	at := m.expiresAt(ls)
	info.ExpiresAt = &at
	info.RanMS = ls.ranFor(time.Now()).Milliseconds()
	if ls.life.paused {
		info.ExpiresAt = nil
	}
	info.History = slices.Clone(info.History)
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
	if ls.life.paused {
		m.expirePaused(id, ls)
		return
	}
	now := time.Now()
	life := m.lifeEnd(ls)
	idle := ls.info.LastUsedAt.Add(time.Duration(ls.info.IdleTimeoutMS) * time.Millisecond)
	switch {
	case !now.Before(life):
		m.mu.Unlock()
		m.end(id, sandbox.EndMaxLifetime, fmt.Sprintf("it reached its maximum lifetime of %d ms", ls.info.MaxLifetimeMS))
	case !now.Before(idle) && !ls.info.Busy && ls.info.Waiting == 0 && ls.info.AutoPause:
		m.mu.Unlock()
		m.autoPause(id, ls)
	case !now.Before(idle) && !ls.info.Busy && ls.info.Waiting == 0:
		m.mu.Unlock()
		m.end(id, sandbox.EndIdleTimeout, fmt.Sprintf("it had no call for its idle timeout of %d ms", ls.info.IdleTimeoutMS))
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
func (m *Sessions) watch(id string, box sandbox.SessionBox) {
	<-box.Done()
	reason := "the session's sandbox stopped"
	if err := box.Err(); err != nil {
		reason += ": " + err.Error()
	}
	m.end(id, sandbox.EndSandboxError, reason)
}

// end ends session id (if it is live) with code and reason, and removes its sandbox in the
// background. It returns the session's info as it ended, and false if it was not live.
func (m *Sessions) end(id, code, reason string) (sandbox.SessionInfo, bool) {
	m.mu.Lock()
	ls := m.live[id]
	if ls == nil {
		m.mu.Unlock()
		return sandbox.SessionInfo{}, false
	}
	delete(m.live, id)
	ls.timer.Stop()
	now := time.Now().UTC()
	ls.info.State, ls.info.EndReason, ls.info.Reason, ls.info.EndedAt = sandbox.SessionEnded, code, reason, &now
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
		if err := ls.close(ctx, "the session ended ("+code+")"); err != nil {
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
	notFound := fmt.Errorf("%w: agent %q has no session %q (each agent sees only its own sessions: name the agent it was created for); POST /v1/agents/%s/sessions creates a new one", sandbox.ErrSessionNotFound, agent, id, agent)
	if !sandbox.ValidSessionID(id) || (agent == WarmAgent && !warm(ctx)) { // see warm.go
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
		return nil, &sandbox.SessionEndedError{Info: ended}
	case isEnded:
		return nil, notFound
	}
	if m.ledger != nil {
		info, err := m.ledger.LookupSession(ctx, id)
		switch {
		case info.Agent != agent: // none, or another agent's: not found
		case err == nil:
			return nil, &sandbox.SessionEndedError{Info: info}
		case errclass.Of(err) == errclass.NotFound:
			return nil, err // held open by another daemon sharing the ledger: its error names it
		}
	}
	return nil, notFound
}

// Get returns agent's session id, active, paused, hibernated or ended.
func (m *Sessions) Get(ctx context.Context, agent, id string) (sandbox.SessionInfo, error) {
	if info, ok := m.hibernatedOf(agent, id); ok {
		return info, nil
	}
	ls, err := m.lookup(ctx, agent, id)
	if ended, ok := errors.AsType[*sandbox.SessionEndedError](err); ok {
		return ended.Info, nil
	}
	if err != nil {
		return sandbox.SessionInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.snapshot(ls), nil
}

// List returns agent's active sessions and those that ended while this daemon ran (the most
// recent endedKept of all agents'), newest first.
func (m *Sessions) List(agent string) []sandbox.SessionInfo {
	if agent == "" {
		agent = "default"
	}
	if agent == WarmAgent { // see warm.go
		return []sandbox.SessionInfo{}
	}
	m.mu.Lock()
	list := []sandbox.SessionInfo{}
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
	list = append(list, m.hibernatedList(agent)...)
	slices.SortFunc(list, func(a, b sandbox.SessionInfo) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	return list
}

// Close ends agent's session id (reason closed) and removes its sandbox; a call running is
// killed. A session that had already ended is returned as it ended.
func (m *Sessions) Close(ctx context.Context, agent, id string) (sandbox.SessionInfo, error) {
	if info, ok := m.hibernatedOf(agent, id); ok {
		return m.dropHibernated(ctx, info, sandbox.EndClosed, "its client closed it"), nil
	}
	if _, err := m.lookup(ctx, agent, id); err != nil {
		if ended, ok := errors.AsType[*sandbox.SessionEndedError](err); ok {
			return ended.Info, nil
		}
		return sandbox.SessionInfo{}, err
	}
	info, ok := m.end(id, sandbox.EndClosed, "its client closed it")
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
func (m *Sessions) Execute(ctx context.Context, id string, req sandbox.Request, wait bool, emit func(sandbox.Event)) (sandbox.Result, error) {
	s := m.svc
	if len(req.Dependencies) > 0 {
		return sandbox.Result{}, &sandbox.FieldError{Field: "dependencies", Message: "a session's dependencies are given when it is created (POST …/sessions); send the call without them"}
	}
	checked := req
	if req.Agent == WarmAgent && warm(ctx) { // see warm.go
		checked.Agent = ""
	}
	if err := s.Validate(checked); err != nil {
		return sandbox.Result{}, err
	}
	ls, err := m.callable(ctx, req.Agent, id)
	if err != nil {
		return sandbox.Result{}, err
	}
	x := s.prepare(req)
	x.session, x.box, x.grace = id, ls.box, sessionInterruptGrace
	x.spec.Session, x.spec.Paths = true, ls.paths

	if err := m.takeTurn(ctx, ls, x.spec.TimeoutMS, wait); err != nil {
		return sandbox.Result{}, err
	}
	defer m.giveTurn(id, ls)
	m.mu.Lock()
	_, live := m.live[id]
	m.mu.Unlock()
	if !live { // it ended while the call waited
		_, err := m.lookup(ctx, req.Agent, id)
		return sandbox.Result{}, err
	}
	x.accepted = time.Now().UTC()
	if err := s.begin(ctx, x); err != nil {
		return sandbox.Result{}, err
	}
	res, err := s.run(ctx, x, emit)
	if err != nil {
		// It never started: the session's sandbox is gone.
		info, _ := m.end(id, sandbox.EndSandboxError, "the session's sandbox could not take a call: "+err.Error())
		if info.ID == "" {
			_, lerr := m.lookup(ctx, req.Agent, id)
			return sandbox.Result{}, cmpErr(lerr, err)
		}
		return sandbox.Result{}, &sandbox.SessionEndedError{Info: info}
	}
	m.mu.Lock()
	gone, isGone := m.ended[id] // closed (or expired) while the call ran
	m.mu.Unlock()
	switch {
	case isGone:
		res.SessionEnded = gone.EndReason
	case res.Outcome == sandbox.OutcomeSandboxError && res.SessionEnded == "":
		res.SessionEnded = sandbox.EndSandboxError
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
		return &sandbox.SessionBusyError{ID: ls.info.ID}
	}
	m.mu.Lock()
	full := ls.info.Waiting >= sandbox.MaxSessionWaiting
	if !full {
		ls.info.Waiting++
	}
	m.mu.Unlock()
	if full {
		return &sandbox.SessionBusyError{ID: ls.info.ID, Full: true}
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
		return &sandbox.SessionBusyError{ID: ls.info.ID, Waited: time.Duration(timeoutMS) * time.Millisecond}
	case <-ls.box.Done():
		m.mark(ls, false, -1)
		return fmt.Errorf("%w: the session's sandbox stopped while the call waited", sandbox.ErrNotReady)
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

// Shutdown hibernates every session that takes no call (with HibernateOnStop) and ends the
// others (reason daemon_stopped), and waits, up to ctx, until their sandboxes are removed.
// New sessions are refused from now on.
func (m *Sessions) Shutdown(ctx context.Context) {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	why := "the daemon stopped and the session was not hibernated (session_hibernate_on_stop is off)"
	var failed map[string]error
	if m.cfg.Lifecycle.HibernateOnStop && m.cfg.Lifecycle.Dir != "" {
		var n int
		if n, failed = m.hibernateAll(ctx); n > 0 {
			m.log.Info("sessions hibernated as the daemon stops; it resumes them on demand when it starts again", "sessions", n)
		}
		why = "the daemon stopped and the session was not hibernated"
	}
	m.mu.Lock()
	ids := make([]string, 0, len(m.live))
	for id := range m.live {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	for _, id := range ids {
		reason := why
		if err := failed[id]; err != nil {
			reason += ": " + err.Error()
		}
		m.end(id, sandbox.EndDaemonStopped, reason)
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
