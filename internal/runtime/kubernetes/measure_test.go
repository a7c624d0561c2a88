package kubernetes_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/runtime/boxspec"
	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/runtime/kubernetes"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/sandbox/sandboxtest"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// p50 returns the median of ds (sorted in place) and its max, for the log.
func p50(ds []time.Duration) string {
	slices.Sort(ds)
	return fmt.Sprintf("p50 %s max %s (n=%d)", ds[len(ds)/2].Round(100*time.Microsecond), ds[len(ds)-1].Round(100*time.Microsecond), len(ds))
}

// timeRuns runs print(1) n times in slot 0 of rt and returns each run's wall time.
func timeRuns(t *testing.T, rt sandbox.Runtime, n int) []time.Duration {
	t.Helper()
	var ds []time.Duration
	for range n {
		began := time.Now()
		res := sandboxtest.Exec(t, rt, 0, sandboxtest.Spec("print(1)", 30*time.Second), nil)
		ds = append(ds, time.Since(began))
		if res.Outcome != sandbox.OutcomeOK || res.Stdout != "1\n" {
			t.Fatalf("print(1): %+v", res)
		}
	}
	return ds
}

// TestMeasureKubernetes measures, and logs (it asserts no time): a slot pod's creation until
// its executor answers, a warm pod's print(1) beside the Docker runtime's in the same run
// (both forked from a fork server with the default preload), and a session's opening from
// the warm pool.
//
// It runs only with SANDPIT_TEST_MEASURE=1: it proves nothing the suites do not, its figures
// are sandpit bench's (--kubernetes-config), and it cost CI minutes of its longest package.
func TestMeasureKubernetes(t *testing.T) {
	if os.Getenv("SANDPIT_TEST_MEASURE") != "1" {
		t.Skip("a measurement: set SANDPIT_TEST_MEASURE=1 to run it (sandpit bench --kubernetes-config measures the same)")
	}
	e := newEnv(t)
	ctx := context.Background()

	var creates []time.Duration
	for i := range 5 {
		cfg := e.config(fmt.Sprintf("measure-create-%d", i))
		cfg.Slots = 1
		began := time.Now()
		rt, err := kubernetes.Start(ctx, cfg, testenv.Logger())
		if err != nil {
			t.Fatal(err)
		}
		creates = append(creates, time.Since(began))
		rt.Close() // the slot's pod stays (for the daemon's restart): delete it, to leave room
		zero := int64(0)
		if err := e.client.CoreV1().Pods(e.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
			metav1.ListOptions{LabelSelector: kubernetes.LabelDaemon + "=" + rt.Daemon()}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Minute, "the pod to go", func() bool { return len(e.pods(t, kubernetes.LabelDaemon+"="+rt.Daemon())) == 0 })
	}
	t.Logf("slot pod create → executor ready (Start, 1 slot, new daemon): %s", p50(creates))

	rt := e.start(t, e.config("measure"), func(c *kubernetes.Config) {
		c.Slots, c.WarmSessions = 1, 3
		c.ForkServer.Enabled = true
		c.Box.NanoCPUs = 4e8 // the slot's pod and 3 warm ones on the test cluster's 2 CPUs
	})
	sandboxtest.WaitForStartInSlots(t, rt, 1, sandbox.StartFork, 3*time.Minute)
	timeRuns(t, rt, 5) // warm up
	t.Logf("kubernetes: Run print(1) on a warm pod, forked: %s", p50(timeRuns(t, rt, 40)))

	waitFor(t, 3*time.Minute, "3 warm session pods", func() bool {
		w, _ := rt.WarmSessionPods(ctx)
		return len(w) == 3
	})
	var opens []time.Duration
	for i := range 12 {
		waitFor(t, 3*time.Minute, "the warm pool to refill", func() bool {
			w, _ := rt.WarmSessionPods(ctx)
			return len(w) == 3
		})
		began := time.Now()
		box, err := rt.OpenSession(ctx, fmt.Sprintf("se_measure_%d", i))
		if err != nil {
			t.Fatal(err)
		}
		opens = append(opens, time.Since(began))
		box.Close(ctx)
	}
	t.Logf("kubernetes: session open from the warm pool (claim + executor hello): %s", p50(opens))

	api := testenv.DockerClient(t)
	dcfg := docker.Config{
		DataDir: t.TempDir(),
		Recipe: docker.Recipe{BaseImage: testenv.BaseImage(t), Repository: "sandpit-sandbox", ExecutorPath: testenv.Executor(t),
			Packages: []string{"pandas", "numpy", "matplotlib", "scipy", "requests", "beautifulsoup4", "Pillow"}},
		Box: docker.Box{MemoryBytes: 512 << 20, MemorySwapBytes: 512 << 20, NanoCPUs: 4e8, PidsLimit: 512,
			TmpBytes: 256 << 20, RunDirBytes: 256 << 20, Network: "full"},
		Slots: 1, UIDBlock: testenv.UIDBlock(t), ReadyWait: 30 * time.Second,
		ForkServer: boxspec.ForkServer{Enabled: true, Preload: config.DefaultPreload(), MaxRuns: 1000},
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	drt, err := docker.Start(dctx, api, dcfg, testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	testenv.RemoveContainers(t, dcfg.DataDir)
	t.Cleanup(func() { drt.Close() })
	sandboxtest.WaitForStartInSlots(t, drt, 1, sandbox.StartFork, 3*time.Minute)
	timeRuns(t, drt, 5)
	t.Logf("docker: Run print(1) on a warm container, forked: %s", p50(timeRuns(t, drt, 40)))
}
