package docker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/internal/testenv/pyindex"
)

// TestSessionPool: on the real engine under network "allowlist", with a warm pool of 2 (at
// most 3; sessions_max 4):
//   - a burst of creations claims the warm sessions, whose interpreter has imported the
//     preload already (its modules in sys.modules, no name bound in the agent's namespace);
//   - a claimed session takes the request's network narrowing: its call cannot reach the
//     host the daemon's network_allow opens, while an unnarrowed claimed one can;
//   - a session with dependencies is made fresh, with them installed;
//   - the pool refills, and never passes sessions_max.
func TestSessionPool(t *testing.T) {
	idx := pyindex.New(t)
	idx.AddWheel("tinypkg", "1.0", `VALUE = "1.0"`)
	rt, _ := startRuntime(t, func(cfg *docker.Config) {
		cfg.Slots, cfg.Box.Network, cfg.ForkServer.Enabled, cfg.WarmSessions = 1, "allowlist", false, 0
		cfg.Pip = protocol.PipOptions{IndexURL: idx.URL(), TrustedHosts: []string{idx.Host()}}
	})
	allow, err := egress.New(egress.Config{Allow: []string{idx.Host()}, IndexURLs: []string{idx.URL()}, Limits: egress.DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	svcCfg := engine.DefaultConfig()
	svcCfg.Slots = 1
	svc := engine.NewService(rt, engine.Hooks{Egress: allow}, svcCfg, testenv.Logger())
	scfg := session.DefaultConfig()
	scfg.MaxTotal, scfg.MaxPerAgent = 4, 4
	scfg.Pool = session.PoolConfig{Base: 2, Max: 3, Code: session.WarmCode([]string{"json", "numpy", "pandas", "no_such_module"})}
	reg := session.New(svc, rt, nil, scfg, testenv.Logger())
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { reg.FillPool(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		reg.Shutdown(sctx)
	})
	e := &sessionEnv{rt: rt, svc: svc, reg: reg}
	waitPool := func(n int) {
		t.Helper()
		deadline := time.Now().Add(4 * time.Minute)
		for reg.PoolStats().Ready < n {
			if time.Now().After(deadline) {
				t.Fatalf("the pool holds %+v, want %d ready", reg.PoolStats(), n)
			}
			if reg.Active() > scfg.MaxTotal {
				t.Fatalf("%d sessions live past sessions_max", reg.Active())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitPool(2)

	open := e.create(t, "ann", nil)
	narrow := e.create(t, "ann", func(r *sandbox.SessionRequest) { r.NetworkAllow = []string{} })
	for _, s := range []*session.Session{open, narrow} {
		if !s.FromPool() {
			t.Fatal("a creation of the burst was not served from the pool")
		}
	}
	got := output(t, e.mustCall(t, open, `import sys
OUTPUT = [m in sys.modules for m in ("numpy", "pandas")] + [n for n in ("numpy", "pandas", "_sandpit_warm", "importlib") if n in globals()]`))
	if fmt.Sprint(got) != "[true true]" {
		t.Errorf("the claimed session's interpreter: preloaded and bound %v, want [true true] (imported, nothing bound)", got)
	}
	if info := open.Info(); info.Calls != 1 || info.Agent != "ann" {
		t.Errorf("the claimed session counts %d calls (agent %q), want only ann's one", info.Calls, info.Agent)
	}
	fetch := fmt.Sprintf(`import urllib.request
try:
    OUTPUT = urllib.request.urlopen("%s", timeout=20).status
except Exception as e:
    OUTPUT = type(e).__name__ + ": " + str(e)`, idx.URL())
	if got := output(t, e.mustCall(t, open, fetch)); got != float64(200) {
		t.Errorf("an unnarrowed claimed session reaching network_allow: %v", got)
	}
	if got := output(t, e.mustCall(t, narrow, fetch)); got == float64(200) || !strings.Contains(fmt.Sprint(got), "403") {
		t.Errorf("a claimed session narrowed to nothing reached %s: %v", idx.Host(), got)
	}

	deps := e.create(t, "bo", func(r *sandbox.SessionRequest) { r.Dependencies = []string{"tinypkg==1.0"} })
	if deps.FromPool() {
		t.Error("a session with dependencies was served from the pool")
	}
	if got := output(t, e.mustCall(t, deps, "import tinypkg, sys\nOUTPUT = [tinypkg.VALUE, 'pandas' in sys.modules]")); fmt.Sprint(got) != "[1.0 false]" {
		t.Errorf("the fresh session with dependencies: %v", got)
	}
	// Three live of the agents', so the pool has one place left under sessions_max.
	waitPool(1)
	if st := reg.PoolStats(); reg.Active() > scfg.MaxTotal || st.Claims != 2 {
		t.Errorf("%d live (sessions_max %d), pool %+v", reg.Active(), scfg.MaxTotal, st)
	}
}
