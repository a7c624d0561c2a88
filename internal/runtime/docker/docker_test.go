package docker_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/sandbox/sandboxtest"
	"github.com/sandpit-dev/sandpit/internal/session"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

var api client.APIClient

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

func testConfig(t *testing.T, dataDir string) docker.Config {
	api = testenv.Engine(t)
	return docker.Config{
		DataDir: dataDir,
		Recipe: docker.Recipe{
			BaseImage:    testenv.BaseImage(t),
			Packages:     []string{"pandas", "numpy", "matplotlib", "scipy", "requests", "beautifulsoup4", "Pillow"},
			Repository:   "sandpit-sandbox",
			ExecutorPath: testenv.Executor(t),
		},
		Box: docker.Box{
			MemoryBytes: 512 << 20, MemorySwapBytes: 512 << 20, NanoCPUs: 1e9, PidsLimit: 512,
			TmpBytes: 256 << 20, RunDirBytes: 256 << 20, Network: "full", Slots: 4,
		},
		ReadyWait:  30 * time.Second,
		ForkServer: docker.ForkServer{Enabled: true, Preload: config.DefaultPreload(), MaxRuns: 1000},
	}
}

// startRuntime starts a runtime on a fresh data directory and removes its container at the end.
func startRuntime(t *testing.T, mutate func(*docker.Config)) (*docker.Runtime, docker.Config) {
	t.Helper()
	cfg := testConfig(t, t.TempDir())
	if mutate != nil {
		mutate(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rt, err := docker.Start(ctx, api, cfg, testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	testenv.RemoveContainers(t, cfg.DataDir)
	t.Cleanup(func() { rt.Close() })
	return rt, cfg
}

// TestConformanceDocker runs the suite against both ways a run starts: a fresh interpreter,
// and a fork of the fork server with the default preload.
func TestConformanceDocker(t *testing.T) {
	for _, start := range []string{"cold", "fork"} {
		t.Run(start, func(t *testing.T) {
			rt, _ := startRuntime(t, func(cfg *docker.Config) { cfg.ForkServer.Enabled = start == "fork" })
			sandboxtest.WaitForStart(t, rt, start, time.Minute)
			sandboxtest.Run(t, sandboxtest.Harness{
				Runtime:      rt,
				Slots:        4,
				ReadOnlyRoot: true,
				Start:        start,
				HasModule: func(name string) bool {
					res := sandboxtest.Exec(t, rt, 0, sandboxtest.Spec("import "+name, 30*time.Second), nil)
					return res.Outcome == sandbox.OutcomeOK
				},
			})
		})
	}
}

// A child process of the run killed by the box's out-of-memory killer is reported and, in a
// box that serves one slot, wins over the program's exit 0 (issue 21.3): two children build
// 300 MB strings in the 512 MiB box. (A box shared by slots is classify's test.)
func TestChildOOMKillIsReported(t *testing.T) {
	rt, _ := startRuntime(t, func(cfg *docker.Config) { cfg.Box.Slots = 1 })
	code := `import multiprocessing as mp, time
def eat():
    s = "x" * (300 * 2**20)
    time.sleep(3)
if __name__ == "__main__":
    ps = [mp.Process(target=eat) for _ in range(2)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    print(sorted(p.exitcode for p in ps))`
	res := sandboxtest.Exec(t, rt, 0, sandboxtest.Spec(code, 60*time.Second), nil)
	if res.Outcome != sandbox.OutcomeMemoryLimit || res.OOMKills != 1 || res.ExitCode != 0 || res.Stdout != "[-9, 0]\n" ||
		!strings.Contains(res.Reason, "1 process of the run was killed by the box's out-of-memory killer; the program itself ended with exit status 0") {
		t.Fatalf("outcome %q oom_kills %d exit %d reason %q stdout %q stderr %.500q", res.Outcome, res.OOMKills, res.ExitCode, res.Reason, res.Stdout, res.Stderr)
	}
	// The next run counts only the kills during it.
	res = sandboxtest.Exec(t, rt, 0, sandboxtest.Spec("print(1)", 10*time.Second), nil)
	if res.Outcome != sandbox.OutcomeOK || res.OOMKills != 0 || res.Reason != "" {
		t.Fatalf("next run: outcome %q oom_kills %d reason %q", res.Outcome, res.OOMKills, res.Reason)
	}
}

func TestContainerHardening(t *testing.T) {
	rt, cfg := startRuntime(t, nil)
	got, err := api.ContainerInspect(context.Background(), rt.ContainerID(), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := got.Container
	h := c.HostConfig
	checks := []struct {
		name string
		ok   bool
	}{
		{"memory 512 MiB", h.Memory == cfg.Box.MemoryBytes},
		{"swap equal to memory", h.MemorySwap == cfg.Box.MemoryBytes},
		{"1 CPU", h.NanoCPUs == 1e9},
		{"pids limit", h.PidsLimit != nil && *h.PidsLimit == 512},
		{"read-only root", h.ReadonlyRootfs},
		{"tmpfs /tmp capped", strings.Contains(h.Tmpfs["/tmp"], "size=268435456")},
		{"tmpfs /sandbox capped", strings.Contains(h.Tmpfs["/sandbox"], "size=268435456")},
		{"cap-drop ALL", len(h.CapDrop) == 1 && h.CapDrop[0] == "ALL"},
		{"only the executor's caps", len(h.CapAdd) == 6},
		{"no-new-privileges", len(h.SecurityOpt) == 1 && h.SecurityOpt[0] == "no-new-privileges"},
		{"init process", h.Init != nil && *h.Init},
		{"no host mounts: only the package volume", len(h.Binds) == 0 && len(h.Mounts) == 1 && h.Mounts[0].Type == "volume" &&
			h.Mounts[0].Source == docker.VolumeName(cfg.DataDir) && h.Mounts[0].Target == docker.PackagesDir &&
			len(c.Mounts) == 1 && c.Mounts[0].Type == "volume"},
		{"no published ports", len(h.PortBindings) == 0 && !h.PublishAllPorts},
		{"log driver none", h.LogConfig.Type == "none"},
		{"not privileged", !h.Privileged},
		{"labelled with its data dir", c.Config.Labels["dev.sandpit.data-dir"] == cfg.DataDir},
	}
	for _, check := range checks {
		if !check.ok {
			t.Errorf("container lacks %s: %+v", check.name, h)
		}
	}
}

func TestRestartAdoptsTheWarmContainer(t *testing.T) {
	rt, cfg := startRuntime(t, nil)
	first := rt.ContainerID()
	rt.Close()

	ctx := context.Background()
	again, err := docker.Start(ctx, api, cfg, testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again.ContainerID() != first {
		t.Fatalf("restart made container %s instead of adopting %s", again.ContainerID(), first)
	}
	if ids := testenv.Containers(t, cfg.DataDir); len(ids) != 1 {
		t.Fatalf("%d containers for the data directory, want 1", len(ids))
	}
	res := sandboxtest.Exec(t, again, 0, sandboxtest.Spec("print(1)", 10*time.Second), nil)
	if res.Outcome != sandbox.OutcomeOK {
		t.Fatalf("run after adoption: %+v", res)
	}
	again.Close()

	// Other settings: the old container is replaced, not adopted.
	cfg.Box.PidsLimit = 300
	changed, err := docker.Start(ctx, api, cfg, testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	defer changed.Close()
	if changed.ContainerID() == first {
		t.Fatal("a container with other settings was adopted")
	}
	if ids := testenv.Containers(t, cfg.DataDir); len(ids) != 1 {
		t.Fatalf("%d containers after replacement, want 1", len(ids))
	}
}

// H17: the container is killed from outside during a run.
func TestContainerKilledDuringRun(t *testing.T) {
	rt, cfg := startRuntime(t, nil)
	ledger := openLedger(t)
	svc := sandbox.NewService(rt, sandbox.Hooks{Recorder: ledger}, sandbox.DefaultConfig(), testenv.Logger())
	done := make(chan sandbox.Result, 1)
	go func() {
		res, err := svc.Execute(context.Background(), sandbox.Request{Code: "print('before', flush=True)\nimport time; time.sleep(30)"}, nil)
		if err != nil {
			t.Errorf("execute: %v", err)
		}
		done <- res
	}()
	time.Sleep(2 * time.Second)
	if _, err := api.ContainerKill(context.Background(), rt.ContainerID(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	var res sandbox.Result
	select {
	case res = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the run did not end after its container was killed")
	}
	if res.Outcome != sandbox.OutcomeSandboxError || !strings.Contains(res.Reason, "sandbox container stopped") || res.Stdout != "before\n" {
		t.Fatalf("outcome %q reason %q stdout %q, want sandbox_error with a reason and the output so far", res.Outcome, res.Reason, res.Stdout)
	}
	inLedger(t, ledger, res)
	next, err := svc.Execute(context.Background(), sandbox.Request{Code: "print(2)"}, nil)
	if err != nil || next.Outcome != sandbox.OutcomeOK || next.Stdout != "2\n" {
		t.Fatalf("next run: %+v %v", next, err)
	}
	if ids := testenv.Containers(t, cfg.DataDir); len(ids) != 1 {
		t.Fatalf("%d containers after recovery, want 1", len(ids))
	}
}

// The executor process is killed inside the container during a run.
func TestExecutorKilledDuringRun(t *testing.T) {
	rt, _ := startRuntime(t, nil)
	ledger := openLedger(t)
	svc := sandbox.NewService(rt, sandbox.Hooks{Recorder: ledger}, sandbox.DefaultConfig(), testenv.Logger())
	done := make(chan sandbox.Result, 1)
	go func() {
		res, _ := svc.Execute(context.Background(), sandbox.Request{Code: "import time; time.sleep(30)"}, nil)
		done <- res
	}()
	time.Sleep(2 * time.Second)
	out, err := exec.Command("docker", "exec", rt.ContainerID(), "sh", "-c", "kill -9 $(cat /sandbox/executor.pid)").CombinedOutput()
	if err != nil {
		t.Fatalf("killing the executor: %v %s", err, out)
	}
	res := <-done
	if res.Outcome != sandbox.OutcomeSandboxError || !strings.Contains(res.Reason, "executor") {
		t.Fatalf("outcome %q reason %q, want sandbox_error naming the executor", res.Outcome, res.Reason)
	}
	inLedger(t, ledger, res)
	next, err := svc.Execute(context.Background(), sandbox.Request{Code: "import os\nprint(sum(1 for p in os.listdir('/proc') if p.isdigit() and os.stat('/proc/'+p).st_uid >= 10000))"}, nil)
	if err != nil || next.Outcome != sandbox.OutcomeOK || next.Stdout != "1\n" {
		t.Fatalf("next run (counting slot processes): %+v %v", next, err)
	}
}

// H10: with network policy none the code's own exception comes back; with full it is allowed.
func TestNetworkPolicy(t *testing.T) {
	code := "import urllib.request\ntry:\n    urllib.request.urlopen('http://169.254.169.254/', timeout=3)\nexcept Exception as e:\n    print(type(e).__name__)\n    raise\n"
	rt, _ := startRuntime(t, func(c *docker.Config) { c.Box.Network = "none" })
	res := sandboxtest.Exec(t, rt, 0, sandboxtest.Spec(code, 20*time.Second), nil)
	if res.Outcome != sandbox.OutcomeError || !strings.Contains(res.Stderr, "URLError") {
		t.Fatalf("network none: outcome %q stderr %q", res.Outcome, res.Stderr)
	}
	ifaces := sandboxtest.Exec(t, rt, 0, sandboxtest.Spec("import socket; print(sorted(n for _, n in socket.if_nameindex()))", 10*time.Second), nil)
	if ifaces.Stdout != "['lo']\n" {
		t.Fatalf("network none has interfaces %q", ifaces.Stdout)
	}

	// With policy full the attempt is the code's own business: the box has a network interface
	// (whether 169.254.169.254 answers depends on the host's network, not on sandpit).
	full, _ := startRuntime(t, nil)
	ifaces = sandboxtest.Exec(t, full, 0, sandboxtest.Spec("import socket; print(len(socket.if_nameindex()) > 1)", 10*time.Second), nil)
	if ifaces.Stdout != "True\n" {
		t.Fatalf("network full has no interface but lo: %q %q", ifaces.Stdout, ifaces.Stderr)
	}
}

// The image tag follows the recipe: the same recipe gives the same tag, any change a new one.
func TestImageTagFollowsTheRecipe(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	ctx := context.Background()
	tag := func(r docker.Recipe) string {
		img, err := docker.Resolve(ctx, api, r)
		if err != nil {
			t.Fatal(err)
		}
		return img.Tag
	}
	base := tag(cfg.Recipe)
	if again := tag(cfg.Recipe); again != base {
		t.Fatalf("same recipe, tags %s and %s", base, again)
	}
	fewer := cfg.Recipe
	fewer.Packages = []string{"numpy"}
	otherBase := cfg.Recipe
	otherBase.BaseImage = "debian:bookworm"
	for name, r := range map[string]docker.Recipe{"packages": fewer, "base image": otherBase} {
		if tag(r) == base {
			t.Errorf("changing the %s kept the tag %s", name, base)
		}
	}
	if !strings.HasPrefix(base, "sandpit-sandbox:") {
		t.Fatalf("tag %s", base)
	}
	bad := cfg.Recipe
	bad.ExecutorPath = "/no/such/executor"
	if _, err := docker.Resolve(ctx, api, bad); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Fatalf("missing executor: %v", err)
	}
}

// A stopped executor (SIGSTOP: its pipe is open but nobody reads) is detected by the heartbeat,
// readiness says so, and the runtime replaces it.
func TestHungExecutorIsReplaced(t *testing.T) {
	rt, _ := startRuntime(t, func(c *docker.Config) {
		c.Session = session.Options{HeartbeatInterval: 200 * time.Millisecond, HeartbeatTimeout: 2 * time.Second}
	})
	out, err := exec.Command("docker", "exec", rt.ContainerID(), "sh", "-c", "kill -STOP $(cat /sandbox/executor.pid)").CombinedOutput()
	if err != nil {
		t.Fatalf("stopping the executor: %v %s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for rt.Ready(context.Background()) == nil {
		if time.Now().After(deadline) {
			t.Fatal("a stopped executor still reads as ready")
		}
		time.Sleep(100 * time.Millisecond)
	}
	res := sandboxtest.Exec(t, rt, 0, sandboxtest.Spec("print('back')", 10*time.Second), nil)
	if res.Outcome != sandbox.OutcomeOK || res.Stdout != "back\n" {
		t.Fatalf("run after the hang: %+v", res)
	}
}

// openLedger opens a store whose ledger the fault tests check.
func openLedger(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// inLedger checks that res is recorded, finished, with its outcome and reason.
func inLedger(t *testing.T, st *store.Store, res sandbox.Result) {
	t.Helper()
	rec, err := st.GetExecution(context.Background(), res.ID)
	if err != nil || rec.Status != store.StatusFinished || rec.Outcome != res.Outcome || rec.Reason != res.Reason {
		t.Fatalf("the ledger's record of %s: %+v %v", res.ID, rec, err)
	}
}
