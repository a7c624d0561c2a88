package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/template"
)

// The warm pool: every door's session creation (REST, MCP, the CLI through REST, the E2B
// API's sandboxes and contexts) claims a warm session when one is ready, its interpreter
// started and the preload imported by its first call (PoolConfig.Code), so that a new
// session answers at once and its first call costs what later ones do. Warm sessions belong
// to WarmAgent until claimed (see warm.go). A claim gives the session the request's
// properties (limits, network narrowing, environment, deadline, lifecycle options): none of
// them is in the box before its first call of the agent's, since a warm session has run
// nothing but the daemon's own warm-up code, and each is enforced outside the interpreter
// (the egress gate reads a call's narrowing per call; commands get the environment per
// command). A request with dependencies is made fresh (Create's own path): they are
// installed before the interpreter starts, and an interpreter that has already imported
// the preload could hold another version of a module they replace.
//
// The pool keeps a target number ready, from PoolConfig.Base. A creation that finds it empty
// (creates came faster than it refills) raises the target by one, up to PoolConfig.Max
// (held within sessions_per_agent and below sessions_max), and only while the host has
// PoolConfig.MemoryFloor available; after poolDecay without such a miss it falls by one, back
// to Base, closing a surplus warm session. Warm sessions count against sessions_max, and a
// session asked for at the cap closes one to make room (reserve).
//
// A template's pool (Config.TemplatePools) keeps a fixed number of warm sessions of one
// template, OWNER/NAME: its filler resolves the template's ready version and starts warm
// sessions from its image, each with its start command run (with the template's env alone)
// and its interpreter warmed (the spec's preload imported, else the daemon's). A creation naming the template, by any agent that may start
// it, claims one of the version it resolves to whose start command still runs, unless it
// gives env, secrets or network_allow, which the start command would not have had
// (fitsWarm); a rebuild's warm sessions replace the older version's, and a template that
// cannot start any more (removed, its image gone) loses its warm sessions.

// PoolConfig is the warm pool's (see above). A zero Base turns it off.
type PoolConfig struct {
	// Base is how many warm sessions are kept ready when creations are few (e2b_pool).
	Base int
	// Max is the most the target rises to while creations outrun the pool
	// (session_pool_max); at least Base, at most sessions_per_agent and sessions_max - 1.
	Max int
	// Code is each warm session's first call: it starts the interpreter (see WarmCode).
	Code string
	// MemoryFloor: the pool grows past Base only while the host's available memory
	// (MemAvailable) is at least this (0: no check).
	MemoryFloor int64
}

// The filler's timings (variables: tests shorten them).
var (
	// poolRetry is how long the filler waits after a warm session could not be made (the
	// caps are reached, the engine is not ready).
	poolRetry = 5 * time.Second
	// poolTick is how often the filler looks at the pool unasked: warm sessions that ended
	// (their lifetime, a lost sandbox) and the target's decay.
	poolTick = 2 * time.Second
	// poolDecay is how long the target stays raised after the last miss, per step back down.
	poolDecay = 2 * time.Minute
)

// pool is a warm pool: the registry's, or a template's.
type pool struct {
	cfg PoolConfig
	// template is the OWNER/NAME of the template whose sessions it keeps ("": the daemon's
	// own image).
	template string
	kick     chan struct{}

	mu    sync.Mutex
	ready []*Session // warm sessions, oldest first
	// claiming counts the warm sessions taken by claims not yet decided: they are still the
	// pool's (a refused claim puts its session back), so the filler makes none in their place.
	claiming int
	target   int
	missed   time.Time // the last miss, or the last step down
	decay    time.Duration
	stats    PoolStats
}

// PoolStats counts the warm pool's work (for /metrics and the bench).
type PoolStats struct {
	Ready, Target  int
	Claims, Misses int64 // creations served from the pool, and those that found it empty
}

// newPool returns the pool of cfg for caps maxPerAgent and maxTotal, nil when it is off.
func newPool(cfg PoolConfig, maxPerAgent, maxTotal int) *pool {
	if cfg.Base <= 0 {
		return nil
	}
	cfg.Base = min(cfg.Base, maxPerAgent, maxTotal-1)
	cfg.Max = max(cfg.Base, min(cfg.Max, maxPerAgent, maxTotal-1))
	if cfg.Base <= 0 {
		return nil
	}
	if cfg.Code == "" {
		cfg.Code = "pass"
	}
	return &pool{cfg: cfg, kick: make(chan struct{}, 1), target: cfg.Base, decay: poolDecay}
}

// poke wakes the filler.
func (p *pool) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// take pops the oldest warm session that has not ended and started from template t's version
// (a template pool's; nil for the registry's) for a claim, which settle then decides; nil
// (and the target raised, the filler woken) when there is none.
func (p *pool) take(t *template.Template) *Session {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ready = dropEnded(p.ready)
	for i, s := range p.ready {
		if s.warmOf(t) {
			p.ready = slices.Delete(p.ready, i, i+1)
			p.claiming++
			return s
		}
	}
	p.stats.Misses++
	p.missed = time.Now()
	if p.target < p.cfg.Max {
		p.target++
	}
	p.poke()
	return nil
}

// claimEnd is how the claim of a warm session ended (see settle).
type claimEnd int

const (
	claimTaken   claimEnd = iota // the agent has it
	claimRefused                 // not the warm session's fault (the agent's cap, a field): it stays
	claimGone                    // it ended, or was closed to make room, meanwhile
)

// settle ends the claim of s, which take returned: taken or gone, it leaves the pool and the
// filler makes another; refused, it goes back to the pool's front.
func (p *pool) settle(s *Session, end claimEnd) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.claiming--
	switch end {
	case claimRefused:
		p.ready = append([]*Session{s}, p.ready...)
		return
	case claimTaken:
		p.stats.Claims++
	}
	p.poke()
}

// ended reports whether s has ended.
func (s *Session) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// fitsWarm reports whether a creation of req, of template t (nil: the daemon's image), may
// claim a warm session: one without dependencies (they are installed before the
// interpreter starts), and, for a template with a start command, one without env, secrets
// or network_allow too: that command, run before the claim, would not have had them (and a
// narrowing given at the claim would cut the connections it opened).
func fitsWarm(req sandbox.SessionRequest, t *template.Template) bool {
	if len(req.Dependencies) > 0 {
		return false
	}
	return t == nil || t.Spec.Start == nil || len(req.Env) == 0 && len(req.Secrets) == 0 && req.NetworkAllow == nil
}

// warmOf reports whether warm session s may be handed out for a creation of template t (nil:
// the daemon's image; see take): its sandbox started from t's version (its image, and the
// spec its start command and preload came from), and its start command, if any, still runs.
func (s *Session) warmOf(t *template.Template) bool {
	s.mu.Lock()
	h := s.cur
	s.mu.Unlock()
	if h == nil {
		return false
	}
	if h.template == nil || t == nil {
		return h.template == nil && t == nil
	}
	if w := h.template; w.Agent != t.Agent || w.Name != t.Name || w.Version != t.Version || w.Image != t.Image {
		return false
	}
	select {
	case <-h.startEnded: // nil (no start command) never ends
		return false
	default:
		return true
	}
}

// poolOf returns the warm pool a creation of template t claims from (nil for none).
func (r *Registry) poolOf(t *template.Template) *pool {
	if t == nil {
		return r.pool
	}
	return r.templatePools[t.Agent+"/"+t.Name]
}

// PoolStats returns the warm pool's counts (zero without a pool); templates' pools apart.
func (r *Registry) PoolStats() PoolStats {
	if r.pool == nil {
		return PoolStats{}
	}
	return r.pool.counts()
}

// TemplatePoolStats returns the counts of each template's warm pool, by OWNER/NAME.
func (r *Registry) TemplatePoolStats() map[string]PoolStats {
	out := make(map[string]PoolStats, len(r.templatePools))
	for key, p := range r.templatePools {
		out[key] = p.counts()
	}
	return out
}

// counts returns p's counts now.
func (p *pool) counts() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stats
	st.Ready, st.Target = len(p.ready), p.target
	return st
}

// claim hands a warm session of p, of template t (nil: the daemon's image), to agent with
// req's properties and limits idle and life; nil with no error when p has none ready.
// Errors: a *SessionLimitError when agent is at its cap (the warm session stays in the
// pool), a *FieldError.
func (r *Registry) claim(ctx context.Context, p *pool, t *template.Template, agent string, req sandbox.SessionRequest, sec engine.SecretsRun, idle, life time.Duration) (*Session, error) {
	for {
		w := p.take(t)
		if w == nil {
			return nil, nil
		}
		s, err := r.adopt(ctx, w, agent, req, t, sec, idle, life)
		if err == nil {
			p.settle(w, claimTaken)
			return s, nil
		}
		if !errors.Is(err, sandbox.ErrSessionNotFound) {
			p.settle(w, claimRefused)
			return nil, err
		}
		// It ended (or was closed to make room) since: the next.
		p.settle(w, claimGone)
	}
}

// FillPool keeps the warm pools (the registry's and the templates') at their targets until
// ctx is done, then ends the warm sessions they hold. Without a pool it returns at once.
func (r *Registry) FillPool(ctx context.Context) {
	var wg sync.WaitGroup
	if r.pool != nil {
		wg.Go(func() { r.fill(ctx, r.pool) })
	}
	for _, p := range r.templatePools {
		wg.Go(func() { r.fill(ctx, p) })
	}
	wg.Wait()
}

// fill keeps p at its target until ctx is done, then ends its warm sessions.
func (r *Registry) fill(ctx context.Context, p *pool) {
	defer r.drainPool(p)
	said := ""  // the last error told at level Warn, for a template's pool
	failed := 0 // warm sessions of a template whose sandbox failed to start, in a row
	for {
		wait := poolTick
		made, err := r.fillOne(ctx, p)
		var start *warmStartError
		switch {
		case made:
			failed = 0
			continue
		case p.template != "" && errors.As(err, &start):
			// A template's sandbox that cannot start (its image gone from the nodes) fails
			// again: each try makes and removes a box, so the tries are spaced out, up to a
			// minute apart (poolRetry doubled each time). The registry's own pool keeps its
			// pace: its failures pass (a runtime still starting).
			failed++
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.log.Debug("making a warm session; trying again", "template", p.template, "error", err, "retry", poolRetry)
			if p.template != "" && err.Error() != said {
				// A pool of a template not built yet, or named wrongly, says so once.
				said = err.Error()
				r.log.Warn("template_pools: no warm session of the template can be made now; trying again", "template", p.template, "error", err)
			}
			wait = poolRetry
			if failed > 0 {
				wait = min(poolRetry<<min(failed-1, 4), 12*poolRetry)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		case <-time.After(wait):
		}
	}
}

// fillOne resolves p's template, steps its target down when due, and makes one warm session
// when p wants one; made reports whether it did. Errors: the template's (p waits for it),
// those of createWarm.
func (r *Registry) fillOne(ctx context.Context, p *pool) (made bool, err error) {
	t, err := r.poolTemplate(ctx, p)
	if err != nil {
		return false, err
	}
	r.shrinkPool(ctx, p)
	if !r.poolWants(p) {
		return false, nil
	}
	code := p.cfg.Code
	if t != nil && len(t.Spec.Preload) > 0 {
		code = WarmCode(t.Spec.Preload)
	}
	s, err := r.createWarm(ctx, r.warmRequest(), code, t)
	if err != nil {
		return false, &warmStartError{err}
	}
	p.mu.Lock()
	p.ready = append(p.ready, s)
	p.mu.Unlock()
	return true, nil
}

// warmStartError is fillOne's error when a warm session's sandbox did not start.
type warmStartError struct{ err error }

func (e *warmStartError) Error() string { return e.err.Error() }
func (e *warmStartError) Unwrap() error { return e.err }

// warmRequest is a warm session's: it lives until a claim gives it its own limits (its idle
// timeout is its lifetime), and never pauses.
func (r *Registry) warmRequest() sandbox.SessionRequest {
	ms, off := r.cfg.MaxLifetime.Milliseconds(), false
	req := sandbox.SessionRequest{IdleTimeoutMS: &ms, MaxLifetimeMS: &ms}
	req.AutoPause = &off
	return req
}

// poolTemplate resolves the template of p (nil for the registry's own pool) as its owner
// would, and ends p's warm sessions of another version or whose start command ended; when
// the template cannot start (not built, removed, its image gone), it ends them all and
// returns why: p waits for it.
func (r *Registry) poolTemplate(ctx context.Context, p *pool) (*template.Template, error) {
	if p.template == "" {
		return nil, nil
	}
	if r.templates == nil {
		return nil, errors.New(noTemplates)
	}
	owner, name, _ := strings.Cut(p.template, "/")
	t, err := r.templates.Resolve(ctx, owner, name)
	if err != nil {
		switch errclass.Of(err) {
		case errclass.NotFound, errclass.Invalid, errclass.Unavailable: // it cannot start
			t.Image = "" // no warm session of it may be handed out
		default: // the store did not answer: keep what is there
			return nil, err
		}
	}
	p.mu.Lock()
	var stale []*Session
	keep := p.ready[:0]
	for _, s := range p.ready {
		if t.Image != "" && s.warmOf(&t) {
			keep = append(keep, s)
		} else {
			stale = append(stale, s)
		}
	}
	p.ready = keep
	p.mu.Unlock()
	for _, s := range stale {
		if _, err := r.closeWarm(ctx, s.ID()); err != nil {
			r.log.Debug("ending a warm session its template no longer fits", "session", s.ID(), "error", err)
		}
	}
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// poolWants reports whether p should make another warm session now: it holds fewer than its
// target, and past its base the host has the memory.
func (r *Registry) poolWants(p *pool) bool {
	p.mu.Lock()
	p.ready = dropEnded(p.ready)
	have, target := len(p.ready)+p.claiming, p.target
	p.mu.Unlock()
	if have >= target {
		return false
	}
	if have < p.cfg.Base || p.cfg.MemoryFloor <= 0 {
		return true
	}
	avail, ok := memAvailable()
	return !ok || avail >= p.cfg.MemoryFloor
}

// shrinkPool steps p's raised target down once poolDecay has passed without a miss, and ends
// a warm session the lower target leaves over.
func (r *Registry) shrinkPool(ctx context.Context, p *pool) {
	p.mu.Lock()
	var surplus *Session
	if p.target > p.cfg.Base && time.Since(p.missed) >= p.decay {
		p.target--
		p.missed = time.Now()
		if n := len(p.ready); n > p.target {
			surplus, p.ready = p.ready[n-1], p.ready[:n-1]
		}
	}
	p.mu.Unlock()
	if surplus != nil {
		if _, err := r.closeWarm(ctx, surplus.ID()); err != nil {
			r.log.Debug("ending a surplus warm session", "session", surplus.ID(), "error", err)
		}
	}
}

// drainPool ends p's warm sessions (the registry's Shutdown ends them too).
func (r *Registry) drainPool(p *pool) {
	p.mu.Lock()
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range ready {
		if _, err := r.closeWarm(ctx, s.ID()); err != nil {
			r.log.Warn("ending a warm session", "session", s.ID(), "error", err)
		}
	}
}

// dropEnded removes the sessions that have ended.
func dropEnded(list []*Session) []*Session {
	out := list[:0]
	for _, s := range list {
		if !s.ended() {
			out = append(out, s)
		}
	}
	return out
}

// memAvailable is the host's MemAvailable (/proc/meminfo), false when it cannot be read.
var memAvailable = func() (int64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		rest, ok := bytes.CutPrefix(line, []byte("MemAvailable:"))
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(rest)), " kB"), 10, 64)
		if err != nil {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}

// WarmCode is a warm session's first call for a daemon whose fork servers import preload:
// the same modules imported (those missing skipped) and warmed as a fork server warms them
// (forkserver.py's _warm: matplotlib's first figure and PNG, PIL's plugins, pandas' first
// groupby), binding no name in the session's namespace and leaving no figure open; then, as a
// fork server does, what it built is moved out of the collector's way (gc.freeze), so that
// the agent's calls do not walk the preload's objects in every full collection. A failure
// costs only the speed-up.
func WarmCode(preload []string) string {
	names := make([]string, len(preload))
	for i, m := range preload {
		names[i] = strconv.Quote(m) // dotted module names (config checks them): valid Python
	}
	return fmt.Sprintf(`def _sandpit_warm(names):
    import importlib
    got = set()
    for n in names:
        try:
            importlib.import_module(n)
            got.add(n)
        except Exception:
            pass
    try:
        if "matplotlib.pyplot" in got:
            import io
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots(figsize=(2, 2))
            ax.bar(["a", "b"], [1, 2])
            ax.plot([0, 1], [1, 0])
            ax.set_title("warm")
            fig.savefig(io.BytesIO(), format="png", dpi=36)
            plt.close("all")
        if "PIL.Image" in got:
            from PIL import Image
            Image.preinit()
        if "pandas" in got:
            import pandas as pd
            pd.DataFrame({"k": ["a", "b"], "v": [1, 2]}).groupby("k")["v"].mean()
    except Exception:
        pass
    import gc
    gc.collect()
    gc.freeze()
_sandpit_warm([%s])
del _sandpit_warm
`, strings.Join(names, ", "))
}

// templatePools returns the templates' warm pools of cfg: a fixed size each, warmed with the
// registry pool's code unless the template's spec names its own preload (fillOne).
func templatePools(cfg Config) map[string]*pool {
	pools := map[string]*pool{}
	for key, n := range cfg.TemplatePools {
		pc := cfg.Pool
		pc.Base, pc.Max, pc.MemoryFloor = n, n, 0
		if p := newPool(pc, cfg.MaxPerAgent, cfg.MaxTotal); p != nil {
			p.template = key
			pools[key] = p
		}
	}
	return pools
}
