package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/bench"
	"github.com/sandpit-dev/sandpit/internal/cli"
	"github.com/sandpit-dev/sandpit/internal/datadir"
	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// serveEnv, set to 1, makes this test binary act as `sandpit`: sandpit bench starts its daemon
// as its own executable with `serve ...`, which here is the test binary.
const serveEnv = "BENCH_TEST_ACT_AS_SANDPIT"

func TestMain(m *testing.M) {
	if os.Getenv(serveEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Main(ctx, os.Args[1:], cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Lookup: os.LookupEnv, Version: "test"})
		stop()
		os.Exit(code)
	}
	os.Exit(testenv.Main(m))
}

// TestBenchAgainstTheEngine runs the whole `sandpit bench`, with tiny counts, against the real
// Docker engine, and checks the report and that nothing of the bench is left.
func TestBenchAgainstTheEngine(t *testing.T) {
	api := testenv.DockerClient(t)
	if testing.Short() {
		t.Skip("the whole bench takes half a minute")
	}
	t.Setenv(serveEnv, "1")
	t.Setenv("SANDPIT_EXECUTOR_PATH", testenv.Executor(t))
	t.Setenv("SANDPIT_BASE_IMAGE", testenv.BaseImage(t))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute) // the first test to need the image builds it; the fork floors and the cold analysis take minutes on a busy machine
	defer cancel()

	// What a bench killed outright left: a container of a bench data directory no daemon
	// holds (its directory already gone). This bench removes it.
	stale := filepath.Join(os.TempDir(), "sandpit-bench-stale-test")
	if canon, err := datadir.Canonical(os.TempDir()); err == nil {
		stale = filepath.Join(canon, "sandpit-bench-stale-test")
	}
	created, err := api.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{Image: testenv.BaseImage(t), Cmd: []string{"true"},
			Labels: map[string]string{"dev.sandpit.managed": "1", "dev.sandpit.data-dir": stale}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = api.ContainerRemove(context.Background(), created.ID, client.ContainerRemoveOptions{Force: true})
	})

	var stdout, stderr bytes.Buffer
	code := cli.Main(ctx, []string{"bench", "--runs=3", "--slow-runs=2", "--warmup=1", "--duration=500ms", "--compare=single", "--json"},
		cli.Env{Stdin: &bytes.Buffer{}, Stdout: &stdout, Stderr: &stderr, Lookup: os.LookupEnv})
	t.Logf("progress:\n%s", stderr.String())
	if code != 0 {
		t.Fatalf("sandpit bench exited %d", code)
	}
	var rep bench.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("the report is not JSON: %v\n%s", err, stdout.String())
	}

	if len(rep.Latency) != 22 {
		t.Fatalf("%d latency rows, want 22: %+v", len(rep.Latency), rep.Latency)
	}
	for _, l := range rep.Latency {
		want := 2
		switch l.Name {
		case bench.LatencyRESTPrint, bench.LatencySpawnPrint, bench.LatencySessionPrint,
			bench.LatencySessionEcho, bench.LatencySessionFile, bench.LatencySessionList,
			bench.LatencySessionPause, bench.LatencySessionResume, bench.LatencySessionHibernate, bench.LatencySessionWake,
			bench.LatencyE2BCreate, bench.LatencyE2BFirstRun, bench.LatencyE2BCommand, bench.LatencyE2BFile, bench.LatencyE2BKill:
			want = 3
		case bench.LatencySessionSum:
			want = 20
		}
		if l.Runs != want || !(l.P50MS > 0) || l.P50MS > l.P95MS || l.P95MS > l.P99MS || !(l.RunsPerSec > 0) {
			t.Errorf("%s: %+v", l.Name, l)
		}
		session := strings.HasPrefix(l.Name, "session_") || strings.HasPrefix(l.Name, "e2b_") // in its own container, not the pool's
		if rest := l.Baseline == "" && !session; rest != (l.BoxCPUMSPerRun > 0) {
			t.Errorf("%s: box CPU per run %v (only the pool's REST rows have one)", l.Name, l.BoxCPUMSPerRun)
		}
	}
	// The preload's cost, in slot 0's box: its fork server, and the fork floors of the default
	// preload, the small one and none, every module imported.
	p := rep.Preload
	if p.Server == nil || p.Server.RSS <= 0 || p.Server.Anon <= 0 || len(p.ForkFloors) != 3 {
		t.Fatalf("preload: %+v", p)
	}
	for i, f := range p.ForkFloors {
		if f.Forks != 3 || !(f.CPUMSPerFork > 0) || !(f.WallP50MS > 0) || f.RSS <= 0 || len(f.Skipped) != 0 || len(f.Preloaded) != len(f.Modules) {
			t.Errorf("fork floor %d: %+v", i, f)
		}
	}
	if none, def := p.ForkFloors[2], p.ForkFloors[0]; len(none.Modules) != 0 || def.RSS <= none.RSS || def.Mappings <= none.Mappings {
		t.Errorf("the default preload's floor (%+v) is not above no preload's (%+v)", def, none)
	}
	if len(rep.Throughput) != 3 {
		t.Fatalf("%d throughput rows, want 3", len(rep.Throughput))
	}
	for _, th := range rep.Throughput {
		if th.OK == 0 || th.NotOK != 0 || th.Errors != 0 || th.Seconds < 0.5 {
			t.Errorf("throughput at %d clients: %+v", th.Clients, th)
		}
	}
	m := rep.Memory
	if m.DaemonIdleRSS <= 0 || m.DaemonLoadPeakRSS <= 0 || m.BoxIdle <= 0 || m.BoxLoadPeak <= 0 || m.ExecutorIdleRSS <= 0 || m.ExecutorPeakRSS <= 0 {
		t.Errorf("memory: %+v", m)
	}
	if len(rep.Targets) != 23 || rep.Image == "" || rep.CPUs < 1 || rep.ElapsedSeconds <= 0 || rep.Slots != 4 || !(rep.ReadySeconds > 0) {
		t.Errorf("report: %+v", rep)
	}
	// The pool compared with one container, measured in the same run.
	if len(rep.Variants) != 1 {
		t.Fatalf("variants %+v, want the single container", rep.Variants)
	}
	if v := rep.Variants[0]; v.Name != bench.VariantSingle || v.Slots != 1 || !(v.ReadySeconds > 0) || v.BoxIdle <= 0 ||
		v.RESTPrint.Runs != 3 || v.RESTPandas.Runs != 2 || !(v.RESTPrint.P50MS > 0) {
		t.Errorf("single-container variant: %+v", v)
	}

	if ids := testenv.Containers(t, stale); len(ids) != 0 {
		t.Errorf("the stale bench's container is still there: %v", ids)
	}

	// Nothing of the bench is left, of either daemon: containers, volume, data directory.
	found := regexp.MustCompile(`with data directory (\S+);`).FindAllStringSubmatch(stderr.String(), -1)
	if len(found) != 2 {
		t.Fatalf("the progress names %d data directories, want 2 (the pool and the single container)", len(found))
	}
	for _, f := range found {
		dir := f[1]
		if ids := testenv.Containers(t, dir); len(ids) != 0 {
			t.Errorf("containers left for %s: %v", dir, ids)
		}
		if _, err := api.VolumeInspect(ctx, docker.VolumeName(dir), client.VolumeInspectOptions{}); err == nil {
			t.Errorf("volume %s left", docker.VolumeName(dir))
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("data directory %s left: %v", dir, err)
		}
	}
}
