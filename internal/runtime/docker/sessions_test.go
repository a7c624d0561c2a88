package docker_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
	"github.com/sandpit-dev/sandpit/internal/session/sessiontest"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// sessionEnv is a one-slot pool with sessions over it.
type sessionEnv struct {
	rt  *docker.Runtime
	cfg docker.Config
	svc *engine.Service
	reg *session.Registry
}

func startSessions(t *testing.T, scfg session.Config, mutate ...func(*docker.Config)) *sessionEnv {
	t.Helper()
	rt, cfg := startRuntime(t, func(c *docker.Config) {
		c.Slots = 1
		c.ForkServer.Enabled = false
		for _, m := range mutate {
			m(c)
		}
	})
	d := session.DefaultConfig()
	scfg.IdleTimeout, scfg.MaxLifetime = cmp.Or(scfg.IdleTimeout, d.IdleTimeout), cmp.Or(scfg.MaxLifetime, d.MaxLifetime)
	scfg.MaxPerAgent, scfg.MaxTotal = cmp.Or(scfg.MaxPerAgent, d.MaxPerAgent), cmp.Or(scfg.MaxTotal, d.MaxTotal)
	svcCfg := engine.DefaultConfig()
	svcCfg.Slots = 1
	svc := engine.NewService(rt, engine.Hooks{}, svcCfg, testenv.Logger())
	reg := session.New(svc, rt, nil, scfg, testenv.Logger())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		reg.Shutdown(ctx)
	})
	return &sessionEnv{rt: rt, cfg: cfg, svc: svc, reg: reg}
}

func (e *sessionEnv) create(t *testing.T, agent string, mutate func(*sandbox.SessionRequest)) *session.Session {
	t.Helper()
	req := sandbox.SessionRequest{Agent: agent}
	if mutate != nil {
		mutate(&req)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := e.reg.Create(ctx, req)
	if err != nil {
		t.Fatalf("creating a session: %v", err)
	}
	t.Cleanup(func() { _, _ = s.Close(context.Background()) })
	return s
}

func (e *sessionEnv) mustCall(t *testing.T, s *session.Session, code string) sandbox.Result {
	t.Helper()
	ms := int64(30_000)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := s.Execute(ctx, sandbox.Request{Code: code, TimeoutMS: &ms}, true, nil)
	if err != nil {
		t.Fatalf("call %q: %v", code, err)
	}
	if res.Outcome != sandbox.OutcomeOK {
		t.Fatalf("call %q: outcome %s (%s); stderr: %s", code, res.Outcome, res.Reason, res.Stderr)
	}
	return res
}

// waitContainers waits up to a minute until the data directory has want session containers,
// and fails the test if it never does.
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

// TestSessionSuite runs the session conformance suite (internal/session/sessiontest) on the
// real engine under runc.
func TestSessionSuite(t *testing.T) {
	t.Parallel()
	sessionSuite(t, false)
}

// TestSessionSuiteRunsc is TestSessionSuite under gVisor, where the memory limit is one of
// address space and the box's memory is watched.
func TestSessionSuiteRunsc(t *testing.T) {
	t.Parallel()
	name := testenv.ContainerRuntime(t, "runsc")
	sessionSuite(t, true, func(c *docker.Config) { c.Box.Runtime, c.Box.Network = name, "none" })
}

func sessionSuite(t *testing.T, slow bool, mutate ...func(*docker.Config)) {
	rt, _ := startRuntime(t, func(c *docker.Config) {
		c.Slots, c.ForkServer.Enabled = 1, false
		for _, m := range mutate {
			m(c)
		}
	})
	sessionContainer := func(ctx context.Context, id string) (string, error) {
		list, err := api.ContainerList(ctx, client.ContainerListOptions{Filters: make(client.Filters).Add("label", "dev.sandpit.session="+id)})
		if err != nil || len(list.Items) != 1 {
			return "", fmt.Errorf("the container of session %s: %d found, %v", id, len(list.Items), err)
		}
		return list.Items[0].ID, nil
	}
	sessiontest.Run(t, sessiontest.Harness{
		Runtime:          rt,
		Slow:             slow,
		Sparse:           !slow,
		HeartbeatTimeout: 10 * time.Second, // control.Options' default
		Sandboxes: func(ctx context.Context) (int, error) {
			ids, err := rt.SessionContainers(ctx)
			return len(ids), err
		},
		Kill: func(ctx context.Context, id string) error {
			c, err := sessionContainer(ctx, id)
			if err != nil {
				return err
			}
			_, err = api.ContainerKill(ctx, c, client.ContainerKillOptions{})
			return err
		},
		Frozen: func(ctx context.Context, id string) (bool, error) {
			c, err := sessionContainer(ctx, id)
			if err != nil {
				return false, err
			}
			got, err := api.ContainerInspect(ctx, c, client.ContainerInspectOptions{})
			return err == nil && got.Container.State.Paused, err
		},
	}, testenv.Logger())
}

// TestSessionsRestart proves that a new runtime on the data directory removes the session
// containers an earlier daemon left.
func TestSessionsRestart(t *testing.T) {
	e := startSessions(t, session.Config{})
	s := e.create(t, "kim", nil)
	e.mustCall(t, s, "v = 1")
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
	e := startSessions(t, session.Config{}, func(c *docker.Config) { c.StraySweep = 200 * time.Millisecond })
	s := e.create(t, "kim", nil)
	e.mustCall(t, s, "v = 1")
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
	if res := e.mustCall(t, s, "print(v)"); res.Stdout != "1\n" {
		t.Fatalf("the live session after the sweep: %+v", res)
	}
}

// TestSessionIdleMemory measures what an idle session costs: its container's memory (cgroup
// usage, as docker stats shows it) after a call of print(1), and after one that imports
// pandas and keeps a 1-million-row DataFrame. It logs the figures (docs/sessions.md states
// them) and asserts only that the session still answers.
func TestSessionIdleMemory(t *testing.T) {
	e := startSessions(t, session.Config{})
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
	e.mustCall(t, s, "print(1)")
	stats("after print(1)")
	e.mustCall(t, s, "import pandas as pd, numpy as np\ndf = pd.DataFrame({'a': np.arange(1_000_000), 'b': np.random.rand(1_000_000)})")
	stats("holding pandas and a 1e6-row DataFrame")
	res := e.mustCall(t, s, "OUTPUT = float(df['a'].sum())")
	if got := output(t, res); got != float64(499999500000) {
		t.Fatalf("sum: %v", got)
	}
	t.Logf("a call summing the kept DataFrame's column: %d ms in the program", res.DurationMS)
	var walls []time.Duration
	for range 20 {
		began := time.Now()
		e.mustCall(t, s, "print(1)")
		walls = append(walls, time.Since(began))
	}
	slices.Sort(walls)
	t.Logf("20 calls of print(1) through a session: p50 %s, max %s", walls[len(walls)/2], walls[len(walls)-1])
}
