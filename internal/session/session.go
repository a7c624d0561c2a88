package session

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/template"
)

// Session is one session's handle, from its creation to its end: active, paused, hibernated
// (no sandbox; its files on disk) or ended. Its methods are the session's verbs; every one of
// them on an ended session is a *sandbox.SessionEndedError. It is safe for concurrent use.
type Session struct {
	r  *Registry
	id string

	// turn holds the token while no call runs and the session is neither paused nor
	// hibernated (a pause or hibernation keeps it). Whoever holds it gives it back with
	// releaseTurn, which hands it to the call that has waited longest (waiters, under mu).
	turn chan struct{}
	// thaw is held by whatever thaws a paused session's box for a while (a resume, a
	// hibernation, a fork's copy), so that two never thaw it at once: a resume during a fork's
	// copy met the engine's "is not paused" (trial, 2 December 2026). Taken before mu.
	thaw sync.Mutex

	mu   sync.Mutex
	info sandbox.SessionInfo
	// waiters are the calls waiting for the turn, in the order they came (info.Waiting
	// counts them): each gets the token through its own channel (of capacity 1).
	waiters []chan struct{}
	life    clock
	cur     *held // its sandbox: nil while hibernated and once ended
	paths   []string
	env     map[string]string
	// secrets are its secrets (nil: none), opened from info.Secrets for all its calls and
	// commands (see Registry.openSecrets).
	secrets engine.SecretsRun
	timer   *time.Timer
	// waking is closed when the wake from hibernation under way ends (nil when none runs).
	waking chan struct{}
	// done is closed when the session ends.
	done chan struct{}
	// fromPool: claimed from the warm pool (see pool.go).
	fromPool bool
	// calls counts the calls that wait on the session's processes (a foreground command, an
	// attached stream, a wait): the session is not idle while one goes on (see inCall).
	calls int
}

// held is what a session holds while it has a sandbox: the box, its commands' egress and its
// commands. A wake from hibernation gives the session a new one.
type held struct {
	box sandbox.SessionBox
	// template is the template the box was started from (nil: the daemon's own image).
	template *template.Template
	// started: its interpreter runs (see startInterpreter); read and set under the turn.
	started bool
	// startEnded is closed when the template's start command ends (nil: it has none, or has
	// not been started); a warm session whose command ended is not handed out (pool.go).
	startEnded <-chan struct{}
	// egress is the dialer of the session's commands (network "allowlist"), closed with it.
	egress sandbox.EgressRun
	// ws holds its commands (see commands.go), made at first use.
	wsOnce sync.Once
	ws     *workspace
	// ending says why the box is being removed on purpose (see close).
	ending atomic.Pointer[string]
	// ports are its port connections open (see ports.go); portsClosed refuses more while
	// it is paused or going.
	portsMu     sync.Mutex
	ports       map[*portConn]struct{}
	portsClosed bool
	// cpuWeight is box's CPU weight (see shareCPU): sandbox.DefaultCPUWeight, a new box's,
	// until it is weighed. Read and set under the registry's cpuMu.
	cpuWeight int64
}

// clock is a live session's run clock: its lifetime counts only the time it ran.
type clock struct {
	paused   bool
	runStart time.Time     // when it last started running (created or resumed)
	ran      time.Duration // time run before runStart
}

func newSession(r *Registry, info sandbox.SessionInfo) *Session {
	return &Session{r: r, id: info.ID, info: info, turn: make(chan struct{}, 1), done: make(chan struct{})}
}

// giveEgress gives h's box the dialer of its commands' connections (network "allowlist").
func (h *held) giveEgress(e sandbox.EgressRun) {
	if e != nil {
		h.egress = e
		h.box.SetEgress(e)
	}
}

// close removes the box and ends its commands' egress. why says why, for the commands still
// running, which end with it (see processEvent).
func (h *held) close(ctx context.Context, why string) error {
	h.ending.Store(&why)
	h.closePorts()
	err := h.box.Close(ctx)
	if h.egress != nil {
		h.egress.Close()
	}
	return err
}

// ID returns the session's ID ("se_…").
func (s *Session) ID() string { return s.id }

// Agent returns the agent the session belongs to.
func (s *Session) Agent() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info.Agent
}

// Info returns the session's state as shown now.
func (s *Session) Info() sandbox.SessionInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshot()
}

// snapshot is the session's info as shown now. Called with s.mu held.
func (s *Session) snapshot() sandbox.SessionInfo {
	info := s.info
	if info.State == sandbox.SessionActive || info.State == sandbox.SessionPaused {
		info.RanMS = s.ranFor(time.Now()).Milliseconds()
		if !s.life.paused {
			at := s.expiresAt()
			info.ExpiresAt = &at
		}
	}
	info.History = slices.Clone(info.History)
	info.Dependencies = slices.Clone(info.Dependencies)
	info.NetworkAllow = slices.Clone(info.NetworkAllow)
	info.Secrets = slices.Clone(info.Secrets)
	return info
}

// Env returns the environment the session's commands get (a copy).
func (s *Session) Env() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.env)
}

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// LatestDeadline is the latest deadline the session may have: the end of its maximum lifetime
// if it runs from now on (paused time does not count).
func (s *Session) LatestDeadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latestDeadline()
}

// latestDeadline is LatestDeadline. Called with s.mu held.
func (s *Session) latestDeadline() time.Time {
	if s.life.paused || s.info.State == sandbox.SessionHibernated {
		return time.Now().Add(time.Duration(s.info.MaxLifetimeMS)*time.Millisecond - s.life.ran)
	}
	return s.lifeEnd()
}

// SetDeadline moves the session's deadline to at (see SessionInfo.Deadline): within its
// maximum lifetime, as its run clock counts it, else a *FieldError naming the latest. A paused
// or hibernated session gets its deadline too; it counts once it runs.
func (s *Session) SetDeadline(at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.endedErr(); err != nil {
		return err
	}
	if latest := s.latestDeadline(); at.After(latest) {
		return &sandbox.FieldError{Field: "deadline", Message: fmt.Sprintf("is %s; this session may run at most until %s, %d seconds from now (its maximum lifetime counts from its creation, paused time left out)",
			at.UTC().Format(time.RFC3339), latest.UTC().Format(time.RFC3339), int64(time.Until(latest)/time.Second))}
	}
	at = at.UTC()
	s.info.Deadline = &at
	if s.timer != nil && s.cur != nil && !s.life.paused {
		s.timer.Reset(s.untilExpiry(time.Now()))
	}
	return nil
}

// SetAutoPause sets whether the session pauses instead of ending at its idle timeout or
// deadline (auto_pause).
func (s *Session) SetAutoPause(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info.AutoPause = on
}

// startLife sets a new session's lifecycle options and clock. Called before it is live.
func (s *Session) startLife(opts sandbox.SessionOptions, now time.Time) {
	s.info.AutoResume = opts.AutoResume
	s.info.AutoPause = s.r.cfg.Lifecycle.AutoPause
	if opts.AutoPause != nil {
		s.info.AutoPause = *opts.AutoPause
	}
	s.life.runStart = now
	s.info.AddEvent(now, "created", "")
}

// ranFor is how long s has run by now. Called with s.mu held.
func (s *Session) ranFor(now time.Time) time.Duration {
	if s.life.paused || s.life.runStart.IsZero() {
		return s.life.ran
	}
	return s.life.ran + now.Sub(s.life.runStart)
}

// lifeEnd is when s reaches its maximum lifetime if it keeps running. Called with s.mu held.
func (s *Session) lifeEnd() time.Time {
	start := s.life.runStart
	if start.IsZero() {
		start = s.info.CreatedAt
	}
	return start.Add(time.Duration(s.info.MaxLifetimeMS)*time.Millisecond - s.life.ran)
}

// expiresAt is when s ends if no call comes: the earliest of its idle timeout, lifetime and
// deadline. Called with s.mu held.
func (s *Session) expiresAt() time.Time {
	at := s.info.LastUsedAt.Add(time.Duration(s.info.IdleTimeoutMS) * time.Millisecond)
	if life := s.lifeEnd(); life.Before(at) {
		at = life
	}
	if d := s.info.Deadline; d != nil && d.Before(at) {
		at = *d
	}
	return at
}

// untilExpiry is how long from now s may stay without a call. Called with s.mu held.
func (s *Session) untilExpiry(now time.Time) time.Duration {
	return max(s.expiresAt().Sub(now), 0)
}

// isPaused reports whether s is paused.
func (s *Session) isPaused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.life.paused
}

// idleWarm reports whether s is a warm session that could be closed to make room.
func (s *Session) idleWarm() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info.Agent == WarmAgent && !s.info.Busy && s.info.State == sandbox.SessionActive
}

// inCall marks a call that waits on the session's processes as going on until the returned
// func runs: the session does not idle out under it (a foreground `sleep 20` was killed by an
// idle timeout of 10 s, a new user, 7 December 2026), and its idle time counts from the end.
func (s *Session) inCall() (end func()) {
	s.mu.Lock()
	s.calls++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.calls--
		s.mu.Unlock()
		s.touch()
	}
}

// touch marks the session used now (a command or file operation keeps it from idling out).
func (s *Session) touch() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info.LastUsedAt = time.Now().UTC()
	if s.cur != nil && !s.info.Busy && !s.life.paused {
		s.timer.Reset(s.untilExpiry(time.Now()))
	}
}

// endedErr is the *SessionEndedError of an ended session, nil otherwise. Called with s.mu
// held.
func (s *Session) endedErr() error {
	if s.info.State == sandbox.SessionEnded {
		return &sandbox.SessionEndedError{Info: s.info}
	}
	return nil
}

// stateErr says why s cannot take work now: ended, paused or hibernated (nil when active).
func (s *Session) stateErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.endedErr(); err != nil {
		return err
	}
	switch s.info.State {
	case sandbox.SessionHibernated, sandbox.SessionPaused:
		return &sandbox.SessionPausedError{ID: s.id, Agent: s.info.Agent, State: s.info.State}
	}
	if s.cur == nil {
		return fmt.Errorf("%w: session %s has no sandbox now", sandbox.ErrNotReady, s.id)
	}
	return nil
}

// record writes info's state to the ledger (logged on failure: the session goes on).
func (r *Registry) record(ctx context.Context, info sandbox.SessionInfo) {
	if r.ledger == nil {
		return
	}
	if err := r.ledger.UpdateSession(context.WithoutCancel(ctx), info); err != nil {
		r.log.Warn("the ledger could not record a session's state", "session", info.ID, "state", info.State, "error", err)
	}
}

// callable returns s's sandbox ready for work: a paused or hibernated session is resumed when
// it was created with auto_resume, and is a *SessionPausedError otherwise.
func (s *Session) callable(ctx context.Context) (*held, error) {
	for {
		s.mu.Lock()
		state, auto, paused, cur := s.info.State, s.info.AutoResume, s.life.paused, s.cur
		ended := s.endedErr()
		s.mu.Unlock()
		switch {
		case ended != nil:
			return nil, ended
		case state == sandbox.SessionHibernated || paused:
			if !auto {
				return nil, &sandbox.SessionPausedError{ID: s.id, Agent: s.Agent(), State: state}
			}
			if _, err := s.Resume(ctx); err != nil {
				return nil, err
			}
			continue
		case cur == nil:
			return nil, fmt.Errorf("%w: session %s has no sandbox now", sandbox.ErrNotReady, s.id)
		}
		return cur, nil
	}
}

// active returns s's sandbox while s is active, else the error that says why not (ended,
// paused or hibernated), touching nothing: for someone looking on.
func (s *Session) active() (*held, error) {
	if err := s.stateErr(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return nil, fmt.Errorf("%w: session %s has no sandbox now", sandbox.ErrNotReady, s.id)
	}
	return s.cur, nil
}
