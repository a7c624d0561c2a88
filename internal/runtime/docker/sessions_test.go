package docker_test

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// sessionEnv is a one-slot pool with sessions over it.
type sessionEnv struct {
	rt  *docker.Runtime
	cfg docker.Config
	svc *engine.Service
	m   *engine.Sessions
}

func startSessions(t *testing.T, scfg engine.SessionConfig, mutate ...func(*docker.Config)) *sessionEnv {
	t.Helper()
	rt, cfg := startRuntime(t, func(c *docker.Config) {
		c.Slots = 1
		c.ForkServer.Enabled = false
		for _, m := range mutate {
			m(c)
		}
	})
	scfgDefault := engine.DefaultSessionConfig()
	if scfg.IdleTimeout == 0 {
		scfg.IdleTimeout = scfgDefault.IdleTimeout
	}
	if scfg.MaxLifetime == 0 {
		scfg.MaxLifetime = scfgDefault.MaxLifetime
	}
	if scfg.MaxPerAgent == 0 {
		scfg.MaxPerAgent = scfgDefault.MaxPerAgent
	}
	if scfg.MaxTotal == 0 {
		scfg.MaxTotal = scfgDefault.MaxTotal
	}
	svcCfg := engine.DefaultConfig()
	svcCfg.Slots = 1
	svc := engine.NewService(rt, engine.Hooks{}, svcCfg, testenv.Logger())
	m := engine.NewSessions(svc, rt, nil, scfg, testenv.Logger())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		m.Shutdown(ctx)
	})
	return &sessionEnv{rt: rt, cfg: cfg, svc: svc, m: m}
}

func (e *sessionEnv) create(t *testing.T, agent string, mutate func(*sandbox.SessionRequest)) sandbox.SessionInfo {
	t.Helper()
	req := sandbox.SessionRequest{Agent: agent}
	if mutate != nil {
		mutate(&req)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	info, err := e.m.Create(ctx, req)
	if err != nil {
		t.Fatalf("creating a session: %v", err)
	}
	t.Cleanup(func() { _, _ = e.m.Close(context.Background(), info.Agent, info.ID) })
	return info
}

func (e *sessionEnv) call(t *testing.T, agent, id, code string, timeout time.Duration) (sandbox.Result, error) {
	t.Helper()
	ms := timeout.Milliseconds()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	return e.m.Execute(ctx, id, sandbox.Request{Agent: agent, Code: code, TimeoutMS: &ms}, true, nil)
}

func (e *sessionEnv) mustCall(t *testing.T, agent, id, code string) sandbox.Result {
	t.Helper()
	res, err := e.call(t, agent, id, code, 30*time.Second)
	if err != nil {
		t.Fatalf("call %q: %v", code, err)
	}
	if res.Outcome != sandbox.OutcomeOK {
		t.Fatalf("call %q: outcome %s (%s); stderr: %s", code, res.Outcome, res.Reason, res.Stderr)
	}
	return res
}

// sessionContainers waits up to a minute until the data directory has want session
// containers, and fails the test if it never does.
func (e *sessionEnv) waitContainers(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ids, err := e.rt.SessionContainers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d session containers, want %d", len(ids), want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func output(t *testing.T, res sandbox.Result) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(res.Output, &v); err != nil {
		t.Fatalf("OUTPUT %s: %v", res.Output, err)
	}
	return v
}

// TestSessions proves sessions on the real engine, sharing one runtime between cases that
// leave it as they found it.
func TestSessions(t *testing.T) {
	e := startSessions(t, engine.SessionConfig{MaxPerAgent: 2, MaxTotal: 3})

	t.Run("state persists across calls", func(t *testing.T) {
		s := e.create(t, "alice", nil)
		if s.State != sandbox.SessionActive || !sandbox.ValidSessionID(s.ID) {
			t.Fatalf("new session: %+v", s)
		}
		e.waitContainers(t, 1)
		first := e.mustCall(t, "alice", s.ID, "import statistics\nx = 41\nprint('first')\nopen('kept.txt', 'w').write('hi')\nOUTPUT = INPUT")
		if first.Stdout != "first\n" || first.SessionID != s.ID {
			t.Fatalf("first call: stdout %q, session %q", first.Stdout, first.SessionID)
		}
		if len(first.Files) != 1 || first.Files[0].Name != "kept.txt" {
			t.Fatalf("first call's output files: %+v", first.Files)
		}
		second := e.mustCall(t, "alice", s.ID, "print('second')\nOUTPUT = {'x': x + 1, 'mean': statistics.mean([1, 3]), 'file': open('kept.txt').read(), 'had_output': 'OUTPUT' in globals()}")
		got, _ := json.Marshal(output(t, second))
		if string(got) != `{"file":"hi","had_output":false,"mean":2,"x":42}` {
			t.Fatalf("second call's OUTPUT: %s", got)
		}
		if second.Stdout != "second\n" || len(second.Files) != 0 {
			t.Fatalf("second call: stdout %q (only its own), files %+v (none changed)", second.Stdout, second.Files)
		}
		info, err := e.m.Get(context.Background(), "alice", s.ID)
		if err != nil || info.Calls != 2 || info.State != sandbox.SessionActive {
			t.Fatalf("session after two calls: %+v, %v", info, err)
		}

		// Another agent's session, and a one-shot run, see none of it.
		other := e.create(t, "bob", nil)
		res := e.mustCall(t, "bob", other.ID, "import os\nOUTPUT = ['x' in globals(), os.path.exists('kept.txt'), sorted(os.listdir('.'))]")
		if got, _ := json.Marshal(output(t, res)); strings.Contains(string(got), "true") {
			t.Fatalf("bob's session sees alice's state: %s", got)
		}
		if _, err := e.call(t, "bob", s.ID, "print(x)", 10*time.Second); !errors.Is(err, sandbox.ErrSessionNotFound) {
			t.Fatalf("bob calling alice's session: %v, want ErrSessionNotFound", err)
		}
		ms := int64(30000)
		run, err := e.svc.Execute(context.Background(), sandbox.Request{Agent: "alice", Code: "import os\nOUTPUT = os.path.exists('kept.txt') or os.path.exists('/sandbox/slot-0/kept.txt')", TimeoutMS: &ms}, nil)
		if err != nil || string(run.Output) != "false" {
			t.Fatalf("a one-shot run: %s, %v", run.Output, err)
		}

		if _, err := e.m.Close(context.Background(), "", other.ID); !errors.Is(err, sandbox.ErrSessionNotFound) {
			t.Fatalf("closing bob's session as agent default: %v, want ErrSessionNotFound", err)
		}
		if info, err := e.m.Close(context.Background(), "alice", s.ID); err != nil || info.EndReason != sandbox.EndClosed {
			t.Fatalf("closing: %+v, %v", info, err)
		}
		if info, err := e.m.Close(context.Background(), "bob", other.ID); err != nil || info.EndReason != sandbox.EndClosed {
			t.Fatalf("closing: %+v, %v", info, err)
		}
		e.waitContainers(t, 0)
		_, err = e.call(t, "alice", s.ID, "print(x)", 10*time.Second)
		if ended, ok := errors.AsType[*sandbox.SessionEndedError](err); !ok || ended.Info.EndReason != sandbox.EndClosed {
			t.Fatalf("a call after the close: %v, want a SessionEndedError (closed)", err)
		}
	})

	t.Run("timeout interrupts and keeps state; a stuck call ends the session", func(t *testing.T) {
		s := e.create(t, "carol", nil)
		e.mustCall(t, "carol", s.ID, "y = 7")
		res, err := e.call(t, "carol", s.ID, "import time\ny = 8\ntime.sleep(60)", time.Second)
		if err != nil || res.Outcome != sandbox.OutcomeTimeout || res.SessionEnded != "" || !strings.Contains(res.Stderr, "KeyboardInterrupt") {
			t.Fatalf("sleeping call: %v, %s (%s), ended %q, stderr %q", err, res.Outcome, res.Reason, res.SessionEnded, res.Stderr)
		}
		if got := output(t, e.mustCall(t, "carol", s.ID, "OUTPUT = y")); got != float64(8) {
			t.Fatalf("state after the interrupt: %v, want 8", got)
		}
		res, err = e.call(t, "carol", s.ID, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass", time.Second)
		if err != nil || res.Outcome != sandbox.OutcomeTimeout || res.SessionEnded != sandbox.EndKilled {
			t.Fatalf("stuck call: %v, %s (%s), ended %q", err, res.Outcome, res.Reason, res.SessionEnded)
		}
		_, err = e.call(t, "carol", s.ID, "OUTPUT = y", 10*time.Second)
		if ended, ok := errors.AsType[*sandbox.SessionEndedError](err); !ok || ended.Info.EndReason != sandbox.EndKilled {
			t.Fatalf("a call after the kill: %v, want a SessionEndedError (killed)", err)
		}
		e.waitContainers(t, 0)
	})

	t.Run("memory exhaustion ends the session", func(t *testing.T) {
		s := e.create(t, "dave", nil)
		res, err := e.call(t, "dave", s.ID, "keep = []\nwhile True:\n    keep.append(bytearray(32 << 20))", 30*time.Second)
		if err != nil || res.Outcome != sandbox.OutcomeMemoryLimit || res.SessionEnded != sandbox.EndMemoryLimit {
			t.Fatalf("memory call: %v, %s (%s), ended %q", err, res.Outcome, res.Reason, res.SessionEnded)
		}
		if _, err := e.call(t, "dave", s.ID, "print(1)", 10*time.Second); !isEnded(err, sandbox.EndMemoryLimit) {
			t.Fatalf("a call after: %v", err)
		}
		e.waitContainers(t, 0)
	})

	t.Run("calls queue in order; no wait is 409", func(t *testing.T) {
		s := e.create(t, "erin", nil)
		e.mustCall(t, "erin", s.ID, "order = []")
		var wg sync.WaitGroup
		wg.Go(func() { e.mustCall(t, "erin", s.ID, "import time\ntime.sleep(3)\norder.append('a')") })
		waitBusy(t, e.m, "erin", s.ID)
		ms := int64(10000)
		if _, err := e.m.Execute(context.Background(), s.ID, sandbox.Request{Agent: "erin", Code: "1", TimeoutMS: &ms}, false, nil); !isBusy(err) {
			t.Fatalf("a call that does not wait: %v, want a SessionBusyError", err)
		}
		for _, name := range []string{"b", "c", "d"} {
			wg.Go(func() { e.mustCall(t, "erin", s.ID, "order.append('"+name+"')") })
			waitWaiting(t, e.m, "erin", s.ID, int(name[0]-'a'))
		}
		wg.Wait()
		if got, _ := json.Marshal(output(t, e.mustCall(t, "erin", s.ID, "OUTPUT = order"))); string(got) != `["a","b","c","d"]` {
			t.Fatalf("order: %s", got)
		}
		e.m.Close(context.Background(), "erin", s.ID)
		e.waitContainers(t, 0)
	})

	t.Run("caps", func(t *testing.T) {
		a := e.create(t, "frank", nil)
		b := e.create(t, "frank", nil)
		if _, err := e.m.Create(context.Background(), sandbox.SessionRequest{Agent: "frank"}); !isLimit(err, true) {
			t.Fatalf("third session of one agent: %v, want the per-agent cap", err)
		}
		c := e.create(t, "grace", nil)
		if _, err := e.m.Create(context.Background(), sandbox.SessionRequest{Agent: "heidi"}); !isLimit(err, false) {
			t.Fatalf("fourth session: %v, want the total cap", err)
		}
		for _, s := range []sandbox.SessionInfo{a, b, c} {
			e.m.Close(context.Background(), s.Agent, s.ID)
		}
		e.waitContainers(t, 0)
	})

	t.Run("idle expiry", func(t *testing.T) {
		idle := int64(1500)
		s := e.create(t, "ivan", func(r *sandbox.SessionRequest) { r.IdleTimeoutMS = &idle })
		e.mustCall(t, "ivan", s.ID, "z = 1")
		deadline := time.Now().Add(time.Minute)
		for {
			info, err := e.m.Get(context.Background(), "ivan", s.ID)
			if err != nil {
				t.Fatal(err)
			}
			if info.State == sandbox.SessionEnded {
				if info.EndReason != sandbox.EndIdleTimeout {
					t.Fatalf("ended %s, want idle_timeout", info.EndReason)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the idle session never expired")
			}
			time.Sleep(200 * time.Millisecond)
		}
		e.waitContainers(t, 0)
	})

	t.Run("the container killed under a session", func(t *testing.T) {
		s := e.create(t, "judy", nil)
		e.mustCall(t, "judy", s.ID, "w = 1")
		ids, _ := e.rt.SessionContainers(context.Background())
		if len(ids) != 1 {
			t.Fatalf("%d session containers", len(ids))
		}
		if out, err := exec.Command("docker", "kill", ids[0]).CombinedOutput(); err != nil {
			t.Fatalf("docker kill: %v: %s", err, out)
		}
		deadline := time.Now().Add(time.Minute)
		for {
			_, err := e.call(t, "judy", s.ID, "OUTPUT = w", 10*time.Second)
			if isEnded(err, sandbox.EndSandboxError) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a call after the kill: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		e.waitContainers(t, 0)
	})
}

// TestSessionsRestart proves that a new runtime on the data directory removes the session
// containers an earlier daemon left.
func TestSessionsRestart(t *testing.T) {
	e := startSessions(t, engine.SessionConfig{})
	s := e.create(t, "kim", nil)
	e.mustCall(t, "kim", s.ID, "v = 1")
	e.waitContainers(t, 1)
	e.rt.Close() // as a crash leaves it: the session container stays
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rt, err := docker.Start(ctx, api, e.cfg, testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ids, err := rt.SessionContainers(ctx)
	if err != nil || len(ids) != 0 {
		t.Fatalf("session containers after the restart: %v, %v", ids, err)
	}
}

// TestStrayContainersAreSwept: a session container of the data directory made after the
// runtime started, which no live session holds (as when the engine finishes the request of a
// daemon killed while it made a session's container), is removed by the runtime's sweep,
// while a live session's container stays and its session answers.
func TestStrayContainersAreSwept(t *testing.T) {
	e := startSessions(t, engine.SessionConfig{}, func(c *docker.Config) { c.StraySweep = 200 * time.Millisecond })
	s := e.create(t, "kim", nil)
	e.mustCall(t, "kim", s.ID, "v = 1")
	labels := map[string]string{"dev.sandpit.managed": "1", "dev.sandpit.data-dir": e.cfg.DataDir, "dev.sandpit.session": sandbox.NewSessionID()}
	stray, err := api.ContainerCreate(t.Context(), client.ContainerCreateOptions{
		Config: &container.Config{Image: e.rt.Image().Tag, Cmd: []string{"true"}, Labels: labels}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = api.ContainerRemove(context.Background(), stray.ID, client.ContainerRemoveOptions{Force: true})
	})
	e.waitContainers(t, 1)
	if _, err := api.ContainerInspect(t.Context(), stray.ID, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Fatalf("the stray container after the sweep: %v", err)
	}
	if res := e.mustCall(t, "kim", s.ID, "print(v)"); res.Stdout != "1\n" {
		t.Fatalf("the live session after the sweep: %+v", res)
	}
}

func isEnded(err error, reason string) bool {
	ended, ok := errors.AsType[*sandbox.SessionEndedError](err)
	return ok && ended.Info.EndReason == reason
}

func isBusy(err error) bool {
	_, ok := errors.AsType[*sandbox.SessionBusyError](err)
	return ok
}

func isLimit(err error, perAgent bool) bool {
	l, ok := errors.AsType[*sandbox.SessionLimitError](err)
	return ok && l.PerAgent == perAgent
}

func waitBusy(t *testing.T, m *engine.Sessions, agent, id string) {
	t.Helper()
	waitInfo(t, m, agent, id, func(i sandbox.SessionInfo) bool { return i.Busy })
}

func waitWaiting(t *testing.T, m *engine.Sessions, agent, id string, n int) {
	t.Helper()
	waitInfo(t, m, agent, id, func(i sandbox.SessionInfo) bool { return i.Waiting >= n })
}

func waitInfo(t *testing.T, m *engine.Sessions, agent, id string, ok func(sandbox.SessionInfo) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		info, err := m.Get(context.Background(), agent, id)
		if err != nil {
			t.Fatal(err)
		}
		if ok(info) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session never reached the state: %+v", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSessionIdleMemory measures what an idle session costs: its container's memory (cgroup
// usage, as docker stats shows it) after a call of print(1), and after one that imports
// pandas and keeps a 1-million-row DataFrame. It logs the figures (docs/sessions.md states
// them) and asserts only that the session still answers.
func TestSessionIdleMemory(t *testing.T) {
	e := startSessions(t, engine.SessionConfig{})
	s := e.create(t, "mem", nil)
	stats := func(what string) {
		ids, _ := e.rt.SessionContainers(context.Background())
		if len(ids) != 1 {
			t.Fatalf("%d session containers", len(ids))
		}
		time.Sleep(2 * time.Second) // settle
		out, err := exec.Command("docker", "stats", "--no-stream", "--format", "{{.MemUsage}}", ids[0]).CombinedOutput()
		if err != nil {
			t.Fatalf("docker stats: %v: %s", err, out)
		}
		t.Logf("idle session memory %s: %s", what, strings.TrimSpace(string(out)))
	}
	stats("before any call (executor only)")
	e.mustCall(t, "mem", s.ID, "print(1)")
	stats("after print(1)")
	e.mustCall(t, "mem", s.ID, "import pandas as pd, numpy as np\ndf = pd.DataFrame({'a': np.arange(1_000_000), 'b': np.random.rand(1_000_000)})")
	stats("holding pandas and a 1e6-row DataFrame")
	res := e.mustCall(t, "mem", s.ID, "OUTPUT = float(df['a'].sum())")
	if got := output(t, res); got != float64(499999500000) {
		t.Fatalf("sum: %v", got)
	}
	t.Logf("a call summing the kept DataFrame's column: %d ms in the program", res.DurationMS)
	var walls []time.Duration
	for range 20 {
		began := time.Now()
		e.mustCall(t, "mem", s.ID, "print(1)")
		walls = append(walls, time.Since(began))
	}
	slices.Sort(walls)
	t.Logf("20 calls of print(1) through engine.Sessions: p50 %s, max %s", walls[len(walls)/2], walls[len(walls)-1])
}

// TestSessionsRunsc proves the session interpreter under gVisor, where the memory limit is one
// of address space and the box's memory is watched: state persists, an interrupt keeps it, a
// stuck call and memory exhaustion end the session.
func TestSessionsRunsc(t *testing.T) {
	name := testenv.ContainerRuntime(t, "runsc")
	e := startSessions(t, engine.SessionConfig{}, func(c *docker.Config) { c.Box.Runtime, c.Box.Network = name, "none" })
	s := e.create(t, "rita", nil)
	e.mustCall(t, "rita", s.ID, "import json\nv = [1, 2]")
	res, err := e.call(t, "rita", s.ID, "import time\nv.append(3)\ntime.sleep(60)", time.Second)
	if err != nil || res.Outcome != sandbox.OutcomeTimeout || res.SessionEnded != "" {
		t.Fatalf("sleeping call: %v, %s (%s), ended %q", err, res.Outcome, res.Reason, res.SessionEnded)
	}
	if got, _ := json.Marshal(output(t, e.mustCall(t, "rita", s.ID, "OUTPUT = json.loads(json.dumps(v))"))); string(got) != "[1,2,3]" {
		t.Fatalf("state after the interrupt: %s", got)
	}
	res, err = e.call(t, "rita", s.ID, "keep = []\nwhile True:\n    keep.append(bytearray(32 << 20))", 60*time.Second)
	if err != nil || res.Outcome != sandbox.OutcomeMemoryLimit || res.SessionEnded != sandbox.EndMemoryLimit {
		t.Fatalf("memory call: %v, %s (%s), ended %q", err, res.Outcome, res.Reason, res.SessionEnded)
	}
	s = e.create(t, "rita", nil)
	res, err = e.call(t, "rita", s.ID, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass", time.Second)
	if err != nil || res.Outcome != sandbox.OutcomeTimeout || res.SessionEnded != sandbox.EndKilled {
		t.Fatalf("stuck call: %v, %s (%s), ended %q", err, res.Outcome, res.Reason, res.SessionEnded)
	}
	e.waitContainers(t, 0)
}
