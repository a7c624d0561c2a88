package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/template"
)

// filling starts m's pool filler and stops it (its warm sessions ended) when the test ends,
// before the registry's Shutdown.
func filling(t *testing.T, m *keeper) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { m.FillPool(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		m.Shutdown(context.Background())
	})
}

func waitReady(t *testing.T, m *keeper, n int) {
	t.Helper()
	waitFor(t, func() bool { return m.PoolStats().Ready == n })
}

// claimed returns agent's new session and whether the pool served it.
func claimed(t *testing.T, m *keeper, req sandbox.SessionRequest) (*Session, bool) {
	t.Helper()
	s, err := m.Registry.Create(t.Context(), req)
	if err != nil {
		t.Fatalf("creating %+v: %v", req, err)
	}
	return s, s.FromPool()
}

// TestPoolServesABurst: a burst of creations claims the warm sessions, each already past its
// warm-up call (the interpreter started), handed to the agent as new (no calls, its own
// record); the pool then refills to its target.
func TestPoolServesABurst(t *testing.T) {
	op := &fakeOpener{}
	cfg := DefaultConfig()
	cfg.Pool = PoolConfig{Base: 3, Max: 3, Code: "warm up"}
	m := newKeeper(newService(engine.Hooks{}), op, nil, cfg)
	filling(t, m)
	waitReady(t, m, 3)
	if op.opened() != 3 {
		t.Fatalf("%d boxes opened for a pool of 3", op.opened())
	}
	for i := range 3 {
		s, warm := claimed(t, m, sandbox.SessionRequest{Agent: "alice"})
		if !warm {
			t.Fatalf("creation %d of the burst was not served from the pool", i)
		}
		info := s.Info()
		if info.Agent != "alice" || info.Calls != 0 || !slices.ContainsFunc(info.History, func(e sandbox.SessionEvent) bool { return e.Event == "adopted" }) {
			t.Errorf("claimed session: %+v", info)
		}
	}
	op.mu.Lock()
	for _, b := range op.boxes[:3] {
		if b.calls[0] != "warm up" {
			t.Errorf("a warm box's first call: %q", b.calls)
		}
	}
	op.mu.Unlock()
	waitReady(t, m, 3) // refilled
	if st := m.PoolStats(); st.Claims != 3 || st.Misses != 0 || st.Target != 3 {
		t.Errorf("pool stats after the burst: %+v", st)
	}
	if n := len(m.List(WarmAgent)); n != 0 {
		t.Errorf("the warm sessions are listed: %d", n)
	}
}

// TestPoolGivesTheRequestsOptions: a claimed session takes the request's limits, environment,
// deadline and lifecycle options; one asking for dependencies is made fresh (they install
// before the interpreter starts), with its dependencies; a bad request is refused as a fresh
// one would be, leaving the warm session in the pool.
func TestPoolGivesTheRequestsOptions(t *testing.T) {
	op := &fakeOpener{}
	cfg := DefaultConfig()
	cfg.Pool = PoolConfig{Base: 1, Max: 1, Code: "warm up"}
	m := newKeeper(newService(engine.Hooks{}), op, nil, cfg)
	filling(t, m)
	waitReady(t, m, 1)

	idle, life := int64(5000), int64(60_000)
	on := true
	deadline := time.Now().Add(30 * time.Second).UTC()
	req := sandbox.SessionRequest{Agent: "bob", IdleTimeoutMS: &idle, MaxLifetimeMS: &life, Env: map[string]string{"K": "v"}, Deadline: &deadline}
	req.AutoPause, req.AutoResume = &on, true
	s, warm := claimed(t, m, req)
	if !warm {
		t.Fatal("not served from the pool")
	}
	info := s.Info()
	if info.IdleTimeoutMS != idle || info.MaxLifetimeMS != life || !info.AutoPause || !info.AutoResume ||
		info.Deadline == nil || !info.Deadline.Equal(deadline) || s.Env()["K"] != "v" {
		t.Errorf("the claimed session's options: %+v env %v", info, s.Env())
	}
	if info.ExpiresAt == nil || time.Until(*info.ExpiresAt) > 6*time.Second {
		t.Errorf("the claimed session expires at %v, not within its idle timeout", info.ExpiresAt)
	}

	waitReady(t, m, 1)
	opened := op.opened()
	d, warm := claimed(t, m, sandbox.SessionRequest{Agent: "bob", Dependencies: []string{"tinypkg==1.0"}})
	if warm || op.opened() != opened+1 {
		t.Errorf("a session with dependencies: from the pool %v, boxes opened %d → %d", warm, opened, op.opened())
	}
	if d.Info().Agent != "bob" {
		t.Errorf("the session with dependencies: %+v", d.Info())
	}
	if m.PoolStats().Ready != 1 {
		t.Error("a session with dependencies took the warm one")
	}

	bad := int64(10)
	if _, err := m.Registry.Create(t.Context(), sandbox.SessionRequest{Agent: "bob", IdleTimeoutMS: &bad}); !errors.Is(err, errclass.Invalid) {
		t.Errorf("a bad idle timeout: %v", err)
	}
	if _, err := m.Registry.Create(t.Context(), sandbox.SessionRequest{Agent: "bob", Env: map[string]string{"": "x"}}); !errors.Is(err, errclass.Invalid) {
		t.Errorf("a bad environment: %v", err)
	}
	if m.PoolStats().Ready != 1 || m.PoolStats().Claims != 1 {
		t.Errorf("refused requests touched the pool: %+v", m.PoolStats())
	}
}

// TestPoolGrowsWithinTheCaps: creations that find the pool empty raise its target, up to its
// Max held below sessions_max and within sessions_per_agent; the pool never takes a place a
// session asks for (one at the cap closes a warm one), an agent at its cap keeps the warm one
// in the pool, and a quiet pool falls back to its base.
func TestPoolGrowsWithinTheCaps(t *testing.T) {
	tick, retry := poolTick, poolRetry
	poolTick, poolRetry = 10*time.Millisecond, 10*time.Millisecond
	t.Cleanup(func() { poolTick, poolRetry = tick, retry })
	op := &fakeOpener{}
	cfg := DefaultConfig()
	cfg.MaxTotal, cfg.MaxPerAgent = 4, 4
	cfg.Pool = PoolConfig{Base: 1, Max: 10, Code: "warm up"}
	m := newKeeper(newService(engine.Hooks{}), op, nil, cfg)
	if p := m.pool; p.cfg.Max != 3 {
		t.Fatalf("the pool's max is %d, want 3 (below sessions_max of 4)", p.cfg.Max)
	}
	// Misses before the filler runs: each raises the target, to 3 at most.
	var mine []*Session
	for range 4 {
		s, warm := claimed(t, m, sandbox.SessionRequest{Agent: "carol"})
		if warm {
			t.Fatal("served from a pool not filled yet")
		}
		mine = append(mine, s)
	}
	if st := m.PoolStats(); st.Target != 3 || st.Misses != 4 {
		t.Fatalf("after four misses: %+v", st)
	}
	filling(t, m)
	time.Sleep(50 * time.Millisecond)
	if m.Active() != 4 || m.PoolStats().Ready != 0 {
		t.Fatalf("at sessions_max the pool made warm sessions: %d live, %+v", m.Active(), m.PoolStats())
	}
	for _, s := range mine[:3] {
		if _, err := s.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	waitReady(t, m, 3) // its raised target, now there is room
	if m.Active() != 4 {
		t.Fatalf("%d live, want 4 (sessions_max)", m.Active())
	}
	// carol's fourth: at the cap the warm sessions would close to make room, but she claims one.
	for range 3 {
		if _, warm := claimed(t, m, sandbox.SessionRequest{Agent: "carol"}); !warm {
			t.Error("carol's session was not served from the pool")
		}
	}
	if _, err := m.Registry.Create(t.Context(), sandbox.SessionRequest{Agent: "carol"}); !errors.Is(err, errclass.Busy) {
		t.Errorf("carol's fifth session: %v, want her cap", err)
	}
	if m.Active() > cfg.MaxTotal {
		t.Errorf("%d live past sessions_max", m.Active())
	}
	// A quiet pool steps back down to its base, ending what the lower target leaves over.
	mine[3].Close(t.Context())
	waitReady(t, m, 1)
	m.pool.mu.Lock()
	m.pool.decay = time.Millisecond
	m.pool.mu.Unlock()
	waitFor(t, func() bool { st := m.PoolStats(); return st.Target == 1 && st.Ready == 1 })
}

// TestPoolGivesWayAtTheCap: at sessions_max with warm sessions idle, an agent at its own cap
// is refused and the warm session stays; another agent's session with dependencies (which
// the pool cannot give) closes a warm one to make room.
func TestPoolGivesWayAtTheCap(t *testing.T) {
	op := &fakeOpener{}
	cfg := DefaultConfig()
	cfg.MaxTotal, cfg.MaxPerAgent = 3, 1
	cfg.Pool = PoolConfig{Base: 1, Max: 1, Code: "warm up"}
	m := newKeeper(newService(engine.Hooks{}), op, nil, cfg)
	if m.pool.cfg.Base != 1 {
		t.Fatalf("base %d", m.pool.cfg.Base)
	}
	filling(t, m)
	waitReady(t, m, 1)
	if _, warm := claimed(t, m, sandbox.SessionRequest{Agent: "dan"}); !warm {
		t.Fatal("dan's session was not served from the pool")
	}
	waitReady(t, m, 1)
	if _, err := m.Registry.Create(t.Context(), sandbox.SessionRequest{Agent: "dan"}); !errors.Is(err, errclass.Busy) {
		t.Fatalf("dan's second session: %v, want his cap", err)
	}
	if m.PoolStats().Ready != 1 {
		t.Fatal("a refused claim took the warm session")
	}
	if _, warm := claimed(t, m, sandbox.SessionRequest{Agent: "eve", Dependencies: []string{"x"}}); warm {
		t.Fatal("a session with dependencies came from the pool")
	}
	if m.Active() != 3 {
		t.Fatalf("%d live", m.Active())
	}
	// At the cap now (dan's, eve's, the warm one): frank's fresh session closes the warm one.
	if _, err := m.Registry.Create(t.Context(), sandbox.SessionRequest{Agent: "frank", Dependencies: []string{"x"}}); err != nil {
		t.Fatalf("frank's session at the cap with a warm one idle: %v", err)
	}
	if m.Active() > cfg.MaxTotal {
		t.Errorf("%d live past sessions_max", m.Active())
	}
}

// TestClaimedSessionIsThePoolsUntilSettled: while a claim is decided, its warm session counts
// as the pool's, so the filler makes no other in its place (a refused claim left the pool over
// its target, and CI's TestPoolGivesWayAtTheCap saw two ready where one was wanted); a refused
// claim puts it back, a taken one makes room for the next.
func TestClaimedSessionIsThePoolsUntilSettled(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxTotal, cfg.MaxPerAgent = 3, 2
	cfg.Pool = PoolConfig{Base: 1, Max: 1, Code: "warm up"}
	m := newKeeper(newService(engine.Hooks{}), &fakeOpener{}, nil, cfg)
	filling(t, m)
	waitReady(t, m, 1)

	w := m.pool.take(nil)
	if w == nil {
		t.Fatal("the pool gave no warm session")
	}
	if m.poolWants(m.pool) {
		t.Fatal("the filler would make a warm session in place of one a claim is deciding")
	}
	m.pool.settle(w, claimRefused)
	if st := m.PoolStats(); st.Ready != 1 || st.Claims != 0 {
		t.Fatalf("after a refused claim: %+v, want its session ready again and no claim counted", st)
	}

	if w = m.pool.take(nil); w == nil {
		t.Fatal("the refused claim's session was not taken again")
	}
	m.pool.settle(w, claimTaken)
	if st := m.PoolStats(); st.Claims != 1 {
		t.Fatalf("after a taken claim: %+v, want one claim counted", st)
	}
	waitReady(t, m, 1) // the filler made the next
	m.pool.mu.Lock()
	next := m.pool.ready[0]
	m.pool.mu.Unlock()
	if next == w {
		t.Fatal("the taken session is still in the pool")
	}
}

// TestWarmCode: the warm-up call names each preloaded module and binds nothing but what it
// deletes.
func TestWarmCode(t *testing.T) {
	code := WarmCode([]string{"numpy", "matplotlib.pyplot"})
	for _, want := range []string{`"numpy", "matplotlib.pyplot"`, "del _sandpit_warm"} {
		if !strings.Contains(code, want) {
			t.Errorf("WarmCode lacks %q:\n%s", want, code)
		}
	}
}

// imageOpener is a fakeOpener that also starts boxes from a template's image, remembering it.
type imageOpener struct {
	fakeOpener
	images map[sandbox.SessionBox]string // guarded by fakeOpener.mu
}

func (o *imageOpener) OpenSessionImage(ctx context.Context, id, image string) (sandbox.SessionBox, error) {
	b, _ := o.OpenSession(ctx, id)
	o.mu.Lock()
	o.images[b] = image
	o.mu.Unlock()
	return b, nil
}

func (o *imageOpener) count(image string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, im := range o.images {
		if im == image {
			n++
		}
	}
	return n
}

// oneTemplate resolves alice's template tools, shared with nobody, at its current version.
type oneTemplate struct {
	mu      sync.Mutex
	cur     template.Template
	removed bool
}

func (o *oneTemplate) Resolve(_ context.Context, agent, ref string) (template.Template, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if agent != "alice" || ref != "tools" && ref != "alice/tools" || o.removed {
		return template.Template{}, errclass.Newf(errclass.NotFound, "template %q not found", ref)
	}
	return o.cur, nil
}

func (o *oneTemplate) set(version int, image string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.cur.Version, o.cur.Image = version, image
}

// templatePool is a keeper whose sandboxes op opens, with alice's template tools at version 1
// (tools:1) and a pool of one warm session of it, filling until the test ends.
func templatePool(t *testing.T, op sandbox.SessionOpener) (*keeper, *oneTemplate) {
	t.Helper()
	tmpl := &oneTemplate{cur: template.Template{Agent: "alice", Name: "tools", Status: "ready"}}
	tmpl.set(1, "tools:1")
	cfg := DefaultConfig()
	cfg.TemplatePools = map[string]int{"alice/tools": 1}
	m := newKeeper(newService(engine.Hooks{}), op, nil, cfg)
	m.SetTemplates(tmpl)
	filling(t, m)
	return m, tmpl
}

// TestTemplatePools: a template's pool keeps warm sessions of its ready version, claimed
// only by creations naming it (by an agent that may start it), handed on with the name the
// creation gave; a rebuild's version replaces the older one's warm sessions.
func TestTemplatePools(t *testing.T) {
	tick, retry := poolTick, poolRetry
	poolTick, poolRetry = 10*time.Millisecond, 10*time.Millisecond
	t.Cleanup(func() { poolTick, poolRetry = tick, retry })
	op := &imageOpener{images: map[sandbox.SessionBox]string{}}
	m, tmpl := templatePool(t, op)
	ready := func() int { // the warm sessions in the template's pool, past their warm-up
		p := m.templatePools["alice/tools"]
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.ready)
	}
	waitFor(t, func() bool { return ready() == 1 })

	if _, warm := claimed(t, m, sandbox.SessionRequest{Agent: "alice"}); warm {
		t.Error("a creation of the daemon's image claimed a template's warm session")
	}
	if _, err := m.Registry.Create(t.Context(), sandbox.SessionRequest{Agent: "bob", Template: "alice/tools"}); !errors.Is(err, errclass.NotFound) {
		t.Errorf("bob, who may not start alice's template: %v", err)
	}
	s, warm := claimed(t, m, sandbox.SessionRequest{Agent: "alice", Template: "tools"})
	if !warm || s.Info().Template != "tools" || s.templateImage() != "tools:1 v1" {
		t.Fatalf("alice's creation of tools: warm %v, %+v, image %q", warm, s.Info(), s.templateImage())
	}
	waitFor(t, func() bool { return op.count("tools:1") == 2 && ready() == 1 }) // refilled

	// A rebuild: the pool's warm session of version 1 is ended, one of version 2 made, and a
	// creation gets that.
	tmpl.set(2, "tools:2")
	warmImages := func() []string {
		m.mu.Lock()
		defer m.mu.Unlock()
		var images []string
		for _, s := range m.live {
			if s.Agent() == WarmAgent {
				images = append(images, s.templateImage())
			}
		}
		return images
	}
	waitFor(t, func() bool { return slices.Equal(warmImages(), []string{"tools:2 v2"}) && ready() == 1 })
	s, warm = claimed(t, m, sandbox.SessionRequest{Agent: "alice", Template: "alice/tools"})
	if !warm || s.templateImage() != "tools:2 v2" || s.Info().Template != "alice/tools" {
		t.Errorf("after the rebuild: warm %v, image %q, %+v", warm, s.templateImage(), s.Info())
	}
	// A rebuild of another start command or preload from the cache: the same image, a new
	// version, whose warm sessions replace the older version's.
	waitFor(t, func() bool { return ready() == 1 })
	tmpl.set(3, "tools:2")
	waitFor(t, func() bool { return slices.Equal(warmImages(), []string{"tools:2 v3"}) && ready() == 1 })
	if s, warm = claimed(t, m, sandbox.SessionRequest{Agent: "alice", Template: "tools"}); !warm || s.templateImage() != "tools:2 v3" {
		t.Errorf("after a cached rebuild: warm %v, %q, want version 3", warm, s.templateImage())
	}

	// Removed: its warm sessions end, none is made.
	waitFor(t, func() bool { return ready() == 1 })
	tmpl.mu.Lock()
	tmpl.removed = true
	tmpl.mu.Unlock()
	waitFor(t, func() bool { return len(warmImages()) == 0 })
}

// TestFitsWarm: what a warm session's start command could not have had keeps a creation off
// it.
func TestFitsWarm(t *testing.T) {
	started := &template.Template{Spec: template.Spec{Start: &template.Start{Cmd: "serve"}}}
	plain := &template.Template{}
	env, sec, deps := map[string]string{"A": "1"}, []string{"TOKEN"}, []string{"tinypkg"}
	for _, c := range []struct {
		req  sandbox.SessionRequest
		t    *template.Template
		want bool
	}{
		{sandbox.SessionRequest{}, nil, true},
		{sandbox.SessionRequest{Env: env, Secrets: sec}, nil, true},
		{sandbox.SessionRequest{Dependencies: deps}, nil, false},
		{sandbox.SessionRequest{Env: env, Secrets: sec}, plain, true},
		{sandbox.SessionRequest{}, started, true},
		{sandbox.SessionRequest{Env: env}, started, false},
		{sandbox.SessionRequest{Secrets: sec}, started, false},
		{sandbox.SessionRequest{NetworkAllow: []string{}}, started, false},
		{sandbox.SessionRequest{NetworkAllow: []string{"pypi.org"}}, plain, true},
		{sandbox.SessionRequest{Dependencies: deps}, plain, false},
	} {
		if got := fitsWarm(c.req, c.t); got != c.want {
			t.Errorf("fitsWarm(%+v, %+v) = %v, want %v", c.req, c.t, got, c.want)
		}
	}
}

// templateImage is the image of the template s's sandbox started from ("" for the daemon's
// own, or when it has none now).
func (s *Session) templateImage() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil || s.cur.template == nil {
		return ""
	}
	return fmt.Sprintf("%s v%d", s.cur.template.Image, s.cur.template.Version)
}

// failingImageOpener starts no template's sandbox, counting the tries.
type failingImageOpener struct {
	fakeOpener
	tries atomic.Int64
}

func (o *failingImageOpener) OpenSessionImage(context.Context, string, string) (sandbox.SessionBox, error) {
	o.tries.Add(1)
	return nil, errors.New("ErrImageNeverPull: the image is not on the node")
}

// A template pool whose sandboxes cannot start (the image gone from Kubernetes' nodes) spaces
// its tries out, doubling the wait: it made and removed a pod every few seconds, without end.
func TestTemplatePoolSpacesOutFailingStarts(t *testing.T) {
	tick, retry := poolTick, poolRetry
	poolTick, poolRetry = 10*time.Millisecond, 20*time.Millisecond
	t.Cleanup(func() { poolTick, poolRetry = tick, retry })
	op := &failingImageOpener{}
	templatePool(t, op)
	time.Sleep(1500 * time.Millisecond)
	// At a fixed 20 ms, about 75 tries; doubling to 240 ms, about 10.
	if n := op.tries.Load(); n < 2 || n > 20 {
		t.Errorf("%d tries to start the template's sandbox in 1.5 s, want a few, spaced out", n)
	}
}
