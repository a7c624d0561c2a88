package docker_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/session"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// waitWarm waits up to two minutes until the runtime holds one warm session container other
// than those of not, and returns it.
func waitWarm(t *testing.T, rt *docker.Runtime, not ...string) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ids := rt.WarmSessionContainers()
		if len(ids) == 1 && !slices.Contains(not, ids[0]) {
			return ids[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("warm session containers %v, want one other than %v", ids, not)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func exists(t *testing.T, id string) bool {
	t.Helper()
	_, err := api.ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
	if err != nil && !cerrdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// TestSessionWarmContainers: with one warm session container, a new session, its resume from
// hibernation (100 MiB of files) and a fork each claim the warm container that was ready
// before, and the pool makes another; the session keeps its files; the closed session's
// container goes while the warm one stays; the runtime's Close removes the warm one.
func TestSessionWarmContainers(t *testing.T) {
	dir := t.TempDir()
	e := lifecycleSessions(t, dir, func(c *docker.Config) { c.WarmSessions = 1 })
	ctx := t.Context()
	claimed := func(warm string) {
		t.Helper()
		ids, err := e.rt.SessionContainers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(ids, warm) {
			t.Fatalf("session containers %v, want the warm container %s among them", ids, warm[:12])
		}
		if slices.Contains(e.rt.WarmSessionContainers(), warm) {
			t.Fatalf("the claimed container %s is still offered as warm", warm[:12])
		}
	}

	warm := waitWarm(t, e.rt)
	s := e.create(t, "wes", nil)
	claimed(warm)
	// Renamed after the session, as a container made for it is named (docker ps shows it).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got, err := api.ContainerInspect(ctx, warm, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(got.Container.Name, "-"+s.ID()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the claimed warm container is named %s, want it to end with the session's ID %s", got.Container.Name, s.ID())
		}
	}
	e.waitContainers(t, 1)
	warm = waitWarm(t, e.rt, warm) // refilled
	e.mustCall(t, s, fmt.Sprintf("import os\nfor i in range(4):\n    open(f'data{i}.bin', 'wb').write(os.urandom(%d << 20))\ng = 1", 100/4))
	sum := output(t, e.mustCall(t, s, sumFiles))

	if _, err := s.Hibernate(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitContainers(t, 0)
	began := time.Now()
	if _, err := s.Resume(ctx); err != nil {
		t.Fatalf("resume from hibernation: %v", err)
	}
	got := output(t, e.mustCall(t, s, sumFiles))
	t.Logf("resume from hibernation (100 MiB) to the first answered call, from a warm container: %s", time.Since(began))
	claimed(warm)
	if fmt.Sprint(got) != fmt.Sprint(sum) {
		t.Fatalf("files after the resume: %v, want %v", got, sum)
	}
	warm = waitWarm(t, e.rt, warm)

	if _, err := s.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	fork, err := s.Fork(ctx)
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	claimed(warm)
	if got := output(t, e.mustCall(t, fork, sumFiles)); fmt.Sprint(got) != fmt.Sprint(sum) {
		t.Fatalf("the fork's files: %v, want %v", got, sum)
	}
	warm = waitWarm(t, e.rt, warm)
	for _, sess := range []*session.Session{fork, s} {
		if _, err := sess.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	e.waitContainers(t, 0)
	if !exists(t, warm) {
		t.Fatal("closing the sessions removed the warm container")
	}
	if err := e.rt.Close(); err != nil {
		t.Fatal(err)
	}
	if exists(t, warm) {
		t.Fatal("the runtime's Close left its warm container")
	}
}

// sumFiles is a call whose OUTPUT is the SHA-256 of each data file, by name.
const sumFiles = `import hashlib, glob
OUTPUT = {f: hashlib.sha256(open(f, "rb").read()).hexdigest() for f in sorted(glob.glob("data*.bin"))}`

// TestSessionWarmOff: with warm_sessions 0 no warm container is made, and a session gets a
// container made for it.
func TestSessionWarmOff(t *testing.T) {
	e := lifecycleSessions(t, t.TempDir(), func(c *docker.Config) { c.WarmSessions = 0 })
	s := e.create(t, "wo", nil)
	e.mustCall(t, s, "x = 1")
	e.waitContainers(t, 1)
	if ids := e.rt.WarmSessionContainers(); len(ids) != 0 {
		t.Fatalf("warm session containers with warm sessions 0: %v", ids)
	}
	list, err := docker.Containers(t.Context(), api, e.cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list {
		if c.Labels["dev.sandpit.warm-session"] != "" {
			t.Fatalf("a warm container %s with warm sessions 0", c.ID[:12])
		}
	}
}

// TestStrayWarmContainers: the warm session containers a dead daemon left on the data
// directory are removed at the runtime's start and by its sweep, while its own warm container
// outlives the sweeps and serves a session.
func TestStrayWarmContainers(t *testing.T) {
	testConfig(t, t.TempDir()) // the package's engine client, when this test runs alone
	dataDir := t.TempDir()
	stray := func() string {
		t.Helper()
		labels := map[string]string{"dev.sandpit.managed": "1", "dev.sandpit.data-dir": dataDir, "dev.sandpit.warm-session": "deaddaemon0000"}
		c, err := api.ContainerCreate(context.Background(), client.ContainerCreateOptions{
			Config: &container.Config{Image: testenv.BaseImage(t), Cmd: []string{"sleep", "infinity"}, Labels: labels}})
		if err != nil {
			t.Fatal(err)
		}
		// A sweep may take it between its creation and its start: then it is gone already.
		if _, err := api.ContainerStart(context.Background(), c.ID, client.ContainerStartOptions{}); err != nil && exists(t, c.ID) &&
			!strings.Contains(err.Error(), "marked for removal") {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = api.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true})
		})
		return c.ID
	}
	before := stray()
	e := startSessions(t, session.Config{}, func(c *docker.Config) {
		c.DataDir, c.WarmSessions, c.StraySweep = dataDir, 1, 200*time.Millisecond
	})
	if exists(t, before) {
		t.Fatal("a dead daemon's warm container outlived the runtime's start")
	}
	warm := waitWarm(t, e.rt)
	after := stray()
	deadline := time.Now().Add(time.Minute)
	for exists(t, after) {
		if time.Now().After(deadline) {
			t.Fatal("the sweep never removed a dead daemon's warm container")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // five more sweeps
	if !exists(t, warm) || !slices.Contains(e.rt.WarmSessionContainers(), warm) {
		t.Fatal("the sweep removed the runtime's own warm container")
	}
	s := e.create(t, "sw", nil)
	time.Sleep(time.Second) // five sweeps with the claimed warm container
	if res := e.mustCall(t, s, "print(2)"); res.Stdout != "2\n" {
		t.Fatalf("a session in the warm container: %+v", res)
	}
	ids, err := e.rt.SessionContainers(t.Context())
	if err != nil || !slices.Contains(ids, warm) {
		t.Fatalf("session containers %v, %v: want the warm one %s", ids, err, warm[:12])
	}
}

// TestWarmContainerWhoseExecutorEnds: a warm container holds its executor started, as a
// session uid; one whose executor ends while it waits (here its container is killed) leaves
// the pool and is removed, and the pool makes another, on which a session runs as a session
// uid of its own.
func TestWarmContainerWhoseExecutorEnds(t *testing.T) {
	e := lifecycleSessions(t, t.TempDir(), func(c *docker.Config) { c.WarmSessions = 1 })
	warm := waitWarm(t, e.rt)
	top, err := api.ContainerTop(t.Context(), warm, client.ContainerTopOptions{Arguments: []string{"-eo", "pid,args"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fmt.Sprint(top.Processes), "sandpit-executor") {
		t.Fatalf("the warm container runs %v, want its executor started", top.Processes)
	}
	if _, err := api.ContainerKill(t.Context(), warm, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	next := waitWarm(t, e.rt, warm)
	deadline := time.Now().Add(time.Minute)
	for exists(t, warm) {
		if time.Now().After(deadline) {
			t.Fatal("the killed warm container was never removed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	s := e.create(t, "wk", nil)
	res := e.mustCall(t, s, "import os; print(os.getuid())")
	if uid, _ := strconv.Atoi(strings.TrimSpace(res.Stdout)); uid < e.cfg.UIDBlock.Session(0) || uid >= e.cfg.UIDBlock.Session(docker.MaxSessions) {
		t.Fatalf("the session runs as uid %q, want a session uid", res.Stdout)
	}
	ids, err := e.rt.SessionContainers(t.Context())
	if err != nil || !slices.Contains(ids, next) {
		t.Fatalf("session containers %v, %v: want the new warm one %s", ids, err, next[:12])
	}
}

// TestFrozenWarmContainerIsNotHandedOut: a warm container frozen behind the runtime's back
// (docker pause) still read as ready until its heartbeat noticed (about 5 s), and a session
// created meanwhile got it and its first call hung. The claim now pings the executor: the
// session gets a container of its own, and its call answers.
func TestFrozenWarmContainerIsNotHandedOut(t *testing.T) {
	e := lifecycleSessions(t, t.TempDir(), func(c *docker.Config) {
		c.WarmSessions = 1
		c.Control.HeartbeatInterval, c.Control.HeartbeatTimeout = 2*time.Second, time.Minute
	})
	ctx := t.Context()
	warm := waitWarm(t, e.rt)
	if _, err := api.ContainerPause(ctx, warm, client.ContainerPauseOptions{}); err != nil {
		t.Fatal(err)
	}
	s := e.create(t, "fay", nil)
	ids, err := e.rt.SessionContainers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(ids, warm) {
		t.Fatalf("the frozen warm container %s was handed to session %s", warm[:12], s.ID())
	}
	res, err := call(s, "print(6 * 7)", 10*time.Second)
	if err != nil || !strings.Contains(res.Stdout, "42") {
		t.Fatalf("the session's first call: %+v, %v", res, err)
	}
	for deadline := time.Now().Add(time.Minute); exists(t, warm); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the frozen warm container %s was not removed", warm[:12])
		}
	}
}
