package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/requirement"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// endedKept is how many ended sessions stay in memory, for their 410s and listings; older
// ones are answered from the ledger.
const endedKept = 1000

// Registry keeps the daemon's sessions. It is safe for concurrent use.
type Registry struct {
	svc      *engine.Service
	opener   sandbox.SessionOpener
	ledger   sandbox.SessionLedger
	cfg      Config
	log      *slog.Logger
	commands sandbox.CommandRecorder
	egress   sandbox.SessionEgressRecorder
	reads    *readBudget
	pool     *pool // nil: none
	// templatePools are the templates' warm pools, by OWNER/NAME (pool.go).
	templatePools map[string]*pool
	// templates resolves the templates sessions start from (nil: none; see SetTemplates).
	templates Templates

	mu         sync.Mutex
	live       map[string]*Session // active and paused: each holds its sandbox
	hibernated map[string]*Session // hibernated: its files on disk, no sandbox
	opening    map[string]int      // by agent: sessions being created, forked or woken
	ended      map[string]sandbox.SessionInfo
	writing    int64    // bytes of hibernated_max_bytes taken by files being written (budgetWriter)
	order      []string // ended IDs, oldest first
	closed     bool
	closing    sync.WaitGroup
	// cpuMu is held while an agent's sessions are weighed (shareCPU).
	cpuMu sync.Mutex
}

// New returns the registry of sessions whose calls run through svc (its limits, ledger,
// callbacks and file store apply to every call) in sandboxes that opener starts. ledger may
// be nil (nothing outlives the daemon; hibernation needs it); log may be nil.
func New(svc *engine.Service, opener sandbox.SessionOpener, ledger sandbox.SessionLedger, cfg Config, log *slog.Logger) *Registry {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Registry{svc: svc, opener: opener, ledger: ledger, cfg: cfg, log: log, reads: newReadBudget(cfg.ReadsMaxBytes),
		pool: newPool(cfg.Pool, cfg.MaxPerAgent, cfg.MaxTotal), templatePools: templatePools(cfg),
		live: map[string]*Session{}, hibernated: map[string]*Session{}, opening: map[string]int{}, ended: map[string]sandbox.SessionInfo{}}
}

// Config returns the session limits.
func (r *Registry) Config() Config { return r.cfg }

// SetCommandRecorder sets the ledger of commands (call before serving).
func (r *Registry) SetCommandRecorder(c sandbox.CommandRecorder) { r.commands = c }

// SetEgressRecorder sets the ledger of the connections of sessions' commands (call before
// serving).
func (r *Registry) SetEgressRecorder(e sandbox.SessionEgressRecorder) { r.egress = e }

// maxEgressRecords bounds the connections the ledger records of one sandbox of a session: its
// commands' dialer refuses past egress_max_connections, and a refusal is recorded too.
const maxEgressRecords = 4096

// workspaceEgress returns the dialer of s's commands under allow, whose connections go to the
// ledger as each ends.
func (r *Registry) workspaceEgress(s *Session, allow []string) sandbox.EgressRun {
	var record func(sandbox.EgressConnection)
	if e := r.egress; e != nil {
		var n atomic.Int64
		record = func(c sandbox.EgressConnection) {
			if k := n.Add(1); k > maxEgressRecords {
				if k == maxEgressRecords+1 {
					r.log.Warn("a session's sandbox asked for more connections than the ledger records of one; the rest are not recorded",
						"session", s.id, "recorded", maxEgressRecords)
				}
				return
			}
			s.mu.Lock()
			agent := s.info.Agent // a warm session's changes when it is adopted
			s.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := e.RecordSessionEgress(ctx, agent, s.id, c); err != nil {
				r.log.Warn("the ledger could not record a session command's connection", "session", s.id, "host", c.Host, "error", err)
			}
		}
	}
	gate := r.svc.WorkspaceEgress(allow, record)
	s.mu.Lock()
	sec := s.secrets
	s.mu.Unlock()
	if sec != nil && gate != nil {
		sec.Attach(gate)
	}
	return gate
}

// openSecrets opens s's secrets (info.Secrets) again, for a session that did not start here:
// one woken after the daemon's restart, or a fork. A secret removed since is left out, and
// said in the log: the session goes on without it, its placeholder unset.
func (r *Registry) openSecrets(ctx context.Context, s *Session) {
	s.mu.Lock()
	agent, names := s.info.Agent, slices.Clone(s.info.Secrets)
	s.mu.Unlock()
	sec, err := r.svc.OpenSecrets(ctx, agent, names)
	if err != nil {
		var kept []string
		for _, name := range names {
			if _, err := r.svc.OpenSecrets(ctx, agent, []string{name}); err != nil {
				r.log.Warn("a session's secret cannot be opened; the session goes on without it", "session", s.id, "secret", name, "error", err)
				continue
			}
			kept = append(kept, name)
		}
		sec, err = r.svc.OpenSecrets(ctx, agent, kept)
	}
	if err != nil {
		r.log.Warn("a session's secrets cannot be opened; the session goes on without them", "session", s.id, "error", err)
		return
	}
	s.mu.Lock()
	s.secrets = sec
	s.mu.Unlock()
}

// Create starts a session: its sandbox, then its dependencies. Errors: a *FieldError, a
// *SessionLimitError, an error wrapping ErrNotReady, or the dependencies' failure.
func (r *Registry) Create(ctx context.Context, req sandbox.SessionRequest) (*Session, error) {
	agent := req.Agent
	if agent == "" {
		agent = "default"
	}
	if !sandbox.ValidAgent(agent) && !(agent == WarmAgent && warm(ctx)) { // see warm.go
		return nil, &sandbox.FieldError{Field: "agent", Message: fmt.Sprintf(
			"%q is not a valid agent name: use 1 to 64 lowercase letters, digits, '-' or '_', starting with a letter or digit", agent)}
	}
	if _, err := requirement.ParseList(req.Dependencies, r.svc.Config().MaxDependencies); err != nil {
		return nil, &sandbox.FieldError{Field: "dependencies", Message: err.Error()}
	}
	idle, err := r.duration("idle_timeout_ms", req.IdleTimeoutMS, r.cfg.IdleTimeout)
	if err != nil {
		return nil, err
	}
	life, err := r.duration("max_lifetime_ms", req.MaxLifetimeMS, r.cfg.MaxLifetime)
	if err != nil {
		return nil, err
	}
	if err := r.checkProperties(req, time.Now().Add(life)); err != nil {
		return nil, err
	}
	tmpl, err := r.resolveTemplate(ctx, agent, req.Template)
	if err != nil {
		return nil, err
	}
	sec, err := r.svc.OpenSecrets(ctx, agent, req.Secrets)
	if err != nil {
		return nil, err
	}
	if p := r.poolOf(tmpl); p != nil && !warm(ctx) && fitsWarm(req, tmpl) { // see pool.go
		if s, err := r.claim(ctx, p, tmpl, agent, req, sec, idle, life); s != nil || err != nil {
			return s, err
		}
	}
	if err := r.reserve(ctx, agent); err != nil {
		return nil, err
	}
	defer r.unreserve(agent)

	id := sandbox.NewSessionID()
	box, err := r.openBox(ctx, id, tmpl)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC() // its clocks start once its sandbox is there
	s := newSession(r, sandbox.SessionInfo{ID: id, Agent: agent, Template: req.Template, State: sandbox.SessionActive, IdleTimeoutMS: idle.Milliseconds(),
		MaxLifetimeMS: life.Milliseconds(), Limits: r.svc.Config().Limits, CreatedAt: now, LastUsedAt: now,
		NetworkAllow: slices.Clone(req.NetworkAllow), Secrets: slices.Clone(req.Secrets), Deadline: req.Deadline})
	s.env, s.secrets = templateEnv(tmpl, req.Env), sec
	s.startLife(req.SessionOptions, now)
	h := &held{box: box, template: tmpl, cpuWeight: sandbox.DefaultCPUWeight}
	fail := func(err error) (*Session, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if cerr := box.Close(cctx); cerr != nil {
			r.log.Warn("removing a session's sandbox that did not start", "session", id, "error", cerr)
		}
		if h.egress != nil {
			h.egress.Close()
		}
		return nil, err
	}
	if len(req.Dependencies) > 0 {
		// The same install as a run's: the daemon's pip settings, and the egress gate that
		// lets pip reach the package index under network "allowlist".
		deps, _, err := r.svc.InstallWith(ctx, req.Dependencies, nil, box.Install)
		if err != nil {
			return fail(fmt.Errorf("installing the session's dependencies: %w", err))
		}
		if failed := deps.Failed(); len(failed) > 0 {
			return fail(&sandbox.FieldError{Field: "dependencies", Message: fmt.Sprintf("%s could not be installed, so the session was not created: %s",
				failed[0].Requirement, failed[0].Error)})
		}
		s.paths = deps.Paths
		s.info.Dependencies = deps.Dependencies
	}
	if err := r.startTemplate(ctx, s, h); err != nil {
		return fail(err)
	}
	if r.ledger != nil {
		if err := r.ledger.BeginSession(ctx, s.info); err != nil {
			return fail(fmt.Errorf("%w: the ledger could not record the session (%v); check that the data directory's disk has space and is writable", sandbox.ErrNotReady, err))
		}
	}
	if err := r.goLive(s, h); err != nil {
		return fail(err)
	}
	r.log.Info("session created", "session", id, "agent", agent, "idle_timeout_ms", idle.Milliseconds(), "max_lifetime_ms", life.Milliseconds(), "warm", false)
	return s, nil
}

// checkProperties checks what req says of a session's properties: its network narrowing
// (within the daemon's network_allow), its environment beside its secrets, and its deadline (from now until
// latest, the end of its lifetime).
func (r *Registry) checkProperties(req sandbox.SessionRequest, latest time.Time) error {
	if err := r.svc.CheckNetworkAllow(req.NetworkAllow); err != nil {
		return err
	}
	if err := sandbox.CheckEnv("env", req.Env); err != nil {
		return err
	}
	for _, name := range req.Secrets {
		if _, ok := req.Env[name]; ok {
			return &sandbox.FieldError{Field: "secrets", Message: fmt.Sprintf("names %s, which env sets too: the session's commands would see env's value, not the secret's placeholder; leave it out of one", name)}
		}
	}
	if d := req.Deadline; d != nil && (d.Before(time.Now()) || d.After(latest)) {
		return &sandbox.FieldError{Field: "deadline", Message: fmt.Sprintf("is %s; it must lie between now and the end of the session's maximum lifetime (%s)",
			d.UTC().Format(time.RFC3339), latest.UTC().Format(time.RFC3339))}
	}
	return nil
}

// duration resolves a session limit given in milliseconds.
func (r *Registry) duration(field string, ms *int64, def time.Duration) (time.Duration, error) {
	if ms == nil {
		return def, nil
	}
	if *ms < 1000 || *ms > r.cfg.MaxLifetime.Milliseconds() {
		return 0, &sandbox.FieldError{Field: field, Message: fmt.Sprintf("is %d; allowed range is 1000 to %d milliseconds (omit it for the default of %d)",
			*ms, r.cfg.MaxLifetime.Milliseconds(), def.Milliseconds())}
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

// goLive makes s live with its sandbox h: its commands' egress, its turn, its expiry timer
// and the watch on its sandbox. It fails (ErrNotReady) once the registry has shut down.
func (r *Registry) goLive(s *Session, h *held) error {
	s.mu.Lock()
	allow := s.info.NetworkAllow
	s.mu.Unlock()
	if h.egress == nil { // a template's start command may have had it already
		h.giveEgress(r.workspaceEgress(s, allow))
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		if h.egress != nil {
			h.egress.Close()
		}
		return fmt.Errorf("%w: %w", sandbox.ErrNotReady, engine.ErrInterrupted)
	}
	delete(r.hibernated, s.id)
	r.live[s.id] = s
	s.mu.Lock()
	s.cur = h
	s.timer = time.AfterFunc(s.untilExpiry(time.Now()), func() { r.expire(s) })
	s.mu.Unlock()
	r.mu.Unlock()
	s.releaseTurn()
	go r.watch(s, h)
	r.shareCPU(s.Agent())
	return nil
}

// reserve counts a session being created against the caps, or says which cap it passes.
func (r *Registry) reserve(ctx context.Context, agent string) error {
	id, err := r.tryReserve(agent)
	if id != "" {
		// At sessions_max with a warm session idle (see warm.go): a session asked for now
		// comes first, and the pool makes another when there is room.
		if _, cerr := r.closeWarm(ctx, id); cerr == nil {
			_, err = r.tryReserve(agent)
		}
	}
	return err
}

// tryReserve is reserve's step under r.mu. At the daemon's cap it also returns a warm
// session's ID that could make room, for any agent but WarmAgent.
func (r *Registry) tryReserve(agent string) (warmID string, _ error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return "", fmt.Errorf("%w: %w", sandbox.ErrNotReady, engine.ErrInterrupted)
	}
	total, mine := 0, r.opening[agent]
	for _, n := range r.opening {
		total += n
	}
	for _, s := range r.live {
		total++
		if s.Agent() == agent {
			mine++
		}
	}
	if total >= r.cfg.MaxTotal {
		if agent != WarmAgent {
			for id, s := range r.live {
				if s.idleWarm() {
					warmID = id
					break
				}
			}
		}
		return warmID, &sandbox.SessionLimitError{Agent: agent, Limit: r.cfg.MaxTotal}
	}
	// Warm sessions are no agent's: each pool is held within sessions_per_agent (newPool),
	// all of them together only by sessions_max, where a creation ends one to make room.
	if mine >= r.cfg.MaxPerAgent && agent != WarmAgent {
		return "", &sandbox.SessionLimitError{Agent: agent, Limit: r.cfg.MaxPerAgent, PerAgent: true}
	}
	r.opening[agent]++
	r.closing.Add(1) // Shutdown waits for a session being made too (unreserve is its Done)
	return "", nil
}

func (r *Registry) unreserve(agent string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.opening[agent]--; r.opening[agent] <= 0 {
		delete(r.opening, agent)
	}
	r.closing.Done()
}

// Get returns agent's session id: active, paused or hibernated. Errors: a
// *SessionEndedError for one that has ended, else ErrSessionNotFound (or, when another daemon
// sharing the ledger holds it, an error of class not found that names that daemon).
func (r *Registry) Get(ctx context.Context, agent, id string) (*Session, error) {
	if agent == "" {
		agent = "default"
	}
	notFound := fmt.Errorf("%w: agent %q has no session %q (each agent sees only its own sessions: name the agent it was created for); POST /v1/agents/%s/sessions creates a new one", sandbox.ErrSessionNotFound, agent, id, agent)
	if !sandbox.ValidSessionID(id) || (agent == WarmAgent && !warm(ctx)) { // see warm.go
		return nil, notFound
	}
	r.mu.Lock()
	s := r.live[id]
	if s == nil {
		s = r.hibernated[id]
	}
	ended, isEnded := r.ended[id]
	r.mu.Unlock()
	switch {
	case s != nil && s.Agent() == agent:
		return s, nil
	case s != nil:
		return nil, notFound
	case isEnded && ended.Agent == agent:
		return nil, &sandbox.SessionEndedError{Info: ended}
	case isEnded:
		return nil, notFound
	}
	if r.ledger != nil {
		info, err := r.ledger.LookupSession(ctx, id)
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

// Owner returns the agent of session id while it is active, paused or hibernated here, and
// "" otherwise (a port's host name names the session alone).
func (r *Registry) Owner(id string) string {
	r.mu.Lock()
	s := r.live[id]
	if s == nil {
		s = r.hibernated[id]
	}
	r.mu.Unlock()
	if s == nil {
		return ""
	}
	return s.Agent()
}

// Info returns agent's session id as it is now, ended ones included (from the ledger once
// they are no longer in memory). Errors: those of Get but *SessionEndedError.
func (r *Registry) Info(ctx context.Context, agent, id string) (sandbox.SessionInfo, error) {
	s, err := r.Get(ctx, agent, id)
	if ended, ok := errors.AsType[*sandbox.SessionEndedError](err); ok {
		return ended.Info, nil
	}
	if err != nil {
		return sandbox.SessionInfo{}, err
	}
	return s.Info(), nil
}

// List returns agent's sessions that are active, paused or hibernated, and those that ended
// while this daemon ran (the most recent endedKept of all agents'), newest first.
func (r *Registry) List(agent string) []sandbox.SessionInfo {
	if agent == "" {
		agent = "default"
	}
	if agent == WarmAgent { // see warm.go
		return []sandbox.SessionInfo{}
	}
	r.mu.Lock()
	held := slices.Collect(maps.Values(r.live))
	held = append(held, slices.Collect(maps.Values(r.hibernated))...)
	list := []sandbox.SessionInfo{}
	for _, info := range r.ended {
		if info.Agent == agent {
			list = append(list, info)
		}
	}
	r.mu.Unlock()
	for _, s := range held {
		if info := s.Info(); info.Agent == agent && info.State != sandbox.SessionEnded {
			list = append(list, info)
		}
	}
	slices.SortFunc(list, func(a, b sandbox.SessionInfo) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	return list
}

// Agents returns the agents that have sessions List shows (held, or ended while this daemon
// ran), sorted.
func (r *Registry) Agents() []string {
	r.mu.Lock()
	held := slices.Collect(maps.Values(r.live))
	held = append(held, slices.Collect(maps.Values(r.hibernated))...)
	seen := map[string]bool{}
	for _, info := range r.ended {
		seen[info.Agent] = true
	}
	r.mu.Unlock()
	for _, s := range held {
		if info := s.Info(); info.State != sandbox.SessionEnded {
			seen[info.Agent] = true
		}
	}
	delete(seen, WarmAgent)
	return slices.Sorted(maps.Keys(seen))
}

// expire ends s when it has passed its lifetime or deadline, or its idle timeout with no call
// running (pausing it instead with auto_pause); otherwise it looks again when it next could.
func (r *Registry) expire(s *Session) {
	if !r.isLive(s) {
		return
	}
	s.mu.Lock()
	if s.life.paused {
		s.mu.Unlock()
		r.expirePaused(s)
		return
	}
	now := time.Now()
	life := s.lifeEnd()
	idle := s.info.LastUsedAt.Add(time.Duration(s.info.IdleTimeoutMS) * time.Millisecond)
	deadline := s.info.Deadline
	quiet := !s.info.Busy && s.info.Waiting == 0 && s.calls == 0
	info := s.info
	switch {
	case !now.Before(life):
		s.mu.Unlock()
		r.end(s, nil, sandbox.EndMaxLifetime, fmt.Sprintf("it reached its maximum lifetime of %d ms", info.MaxLifetimeMS))
	case deadline != nil && !now.Before(*deadline) && info.AutoPause:
		s.mu.Unlock()
		r.autoPause(s, "auto_pause: its deadline passed")
	case deadline != nil && !now.Before(*deadline):
		s.mu.Unlock()
		r.end(s, nil, sandbox.EndDeadline, fmt.Sprintf("it reached its deadline (%s)", deadline.UTC().Format(time.RFC3339)))
	case !now.Before(idle) && quiet && info.AutoPause:
		s.mu.Unlock()
		r.autoPause(s, "auto_pause: idle for its idle timeout")
	case !now.Before(idle) && quiet:
		s.mu.Unlock()
		r.end(s, nil, sandbox.EndIdleTimeout, fmt.Sprintf("it had no call for its idle timeout of %d ms", info.IdleTimeoutMS))
	default:
		next := s.untilExpiry(now)
		if next == 0 { // busy: look again once the call may have ended
			next = time.Second
		}
		s.timer.Reset(next)
		s.mu.Unlock()
	}
}

// watch ends s when its sandbox h stops by itself.
func (r *Registry) watch(s *Session, h *held) {
	<-h.box.Done()
	r.end(s, h, sandbox.EndSandboxError, h.stopReason())
}

// stopReason is a session's end reason when its sandbox h stopped by itself: the box's own
// reason (its node lost, its container killed) when it gives one.
func (h *held) stopReason() string {
	reason := "the session's sandbox stopped"
	if err := h.box.Err(); err != nil {
		reason += ": " + err.Error()
	}
	return reason
}

// isLive reports whether s is live (active or paused) in r.
func (r *Registry) isLive(s *Session) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.live[s.id] == s
}

// end ends live session s (when h is not nil: only while h is still its sandbox) with code
// and reason, and removes its sandbox in the background. It returns the session's info as it
// ended, and false if it was not live.
func (r *Registry) end(s *Session, h *held, code, reason string) (sandbox.SessionInfo, bool) {
	r.mu.Lock()
	if r.live[s.id] != s {
		r.mu.Unlock()
		return sandbox.SessionInfo{}, false
	}
	s.mu.Lock()
	if h != nil && s.cur != h {
		s.mu.Unlock()
		r.mu.Unlock()
		return sandbox.SessionInfo{}, false
	}
	cur := s.cur
	delete(r.live, s.id)
	s.timer.Stop()
	now := time.Now().UTC()
	s.info.State, s.info.EndReason, s.info.Reason, s.info.EndedAt = sandbox.SessionEnded, code, reason, &now
	s.info.AddEvent(now, "ended", code)
	s.cur = nil
	info := s.info
	close(s.done)
	s.mu.Unlock()
	info.Busy, info.Waiting = false, 0
	r.remember(info)
	r.closing.Add(1)
	r.mu.Unlock()
	r.log.Info("session ended", "session", s.id, "agent", info.Agent, "end_reason", code, "reason", reason, "calls", info.Calls)
	r.shareCPU(info.Agent)
	go func() {
		defer r.closing.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cur.close(ctx, "the session ended ("+code+")"); err != nil {
			r.log.Warn("removing an ended session's sandbox", "session", s.id, "error", err)
		}
		if r.ledger != nil {
			if err := r.ledger.EndSession(ctx, info); err != nil {
				r.log.Warn("the ledger could not record a session's end", "session", s.id, "error", err)
			}
		}
	}()
	return info, true
}

// remember keeps ended session info for its 410s, dropping the oldest past endedKept. Called
// with r.mu held.
func (r *Registry) remember(info sandbox.SessionInfo) {
	r.ended[info.ID] = info
	r.order = append(r.order, info.ID)
	if len(r.order) > endedKept {
		delete(r.ended, r.order[0])
		r.order = r.order[1:]
	}
}

// Shutdown hibernates every session that takes no call (with HibernateOnStop) and ends the
// others (reason daemon_stopped), and waits, up to ctx, until their sandboxes are removed.
// New sessions are refused from now on.
func (r *Registry) Shutdown(ctx context.Context) {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	why := "the daemon stopped and the session was not hibernated (session_hibernate_on_stop is off)"
	var failed map[string]error
	if r.cfg.Lifecycle.HibernateOnStop && r.cfg.Lifecycle.Dir != "" {
		var n int
		if n, failed = r.hibernateAll(ctx); n > 0 {
			r.log.Info("sessions hibernated as the daemon stops; it resumes them on demand when it starts again", "sessions", n)
		}
		why = "the daemon stopped and the session was not hibernated"
	}
	r.mu.Lock()
	live := slices.Collect(maps.Values(r.live))
	r.mu.Unlock()
	for _, s := range live {
		reason := why
		if err := failed[s.id]; err != nil {
			reason += ": " + err.Error()
		}
		r.end(s, nil, sandbox.EndDaemonStopped, reason)
	}
	done := make(chan struct{})
	go func() {
		r.closing.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// Active returns how many sessions are active or paused.
func (r *Registry) Active() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live)
}

// Stats counts the live, paused and hibernated sessions.
func (r *Registry) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := Stats{Active: len(r.live), PausedBytes: r.pausedBytes()}
	for _, s := range r.live {
		if s.isPaused() {
			st.Paused++
		}
	}
	st.Hibernated = len(r.hibernated)
	st.HibernatedBytes = r.hibernatedBytes()
	return st
}
