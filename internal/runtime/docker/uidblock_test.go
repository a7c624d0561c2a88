package docker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/sandbox/sandboxtest"
)

// TestForkStormInAnotherRuntimeLeavesForksAlone: two runtimes on one host (two daemons, or a
// daemon beside a Kubernetes node) run their boxes' code as uids of different blocks, so a run
// of one holding its processes at the cap does not make forks fail in the other's. With one
// block for both (as CI's Docker and Kubernetes suites had), slot 0 of each ran as uid 10000,
// Linux counted both boxes' processes against the one RLIMIT_NPROC, and the victim's
// multiprocessing.Pool failed with "Resource temporarily unavailable".
func TestForkStormInAnotherRuntimeLeavesForksAlone(t *testing.T) {
	attacker, acfg := startRuntime(t, func(c *docker.Config) { c.Slots = 1 })
	victim, vcfg := startRuntime(t, func(c *docker.Config) { c.Slots = 1 }) // each takes a block of its own
	if acfg.UIDBlock.Slot(0) == vcfg.UIDBlock.Slot(0) {
		t.Fatal("the two runtimes' slot 0 share a uid")
	}

	// The attacker forks until the kernel refuses, says so, and holds its processes.
	storm := `import os, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
print('held', n, flush=True)
time.sleep(60)
`
	held := make(chan struct{})
	done := make(chan sandbox.Result, 1)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	go func() {
		var once bool
		res, _ := attacker.Run(ctx, 0, sandboxtest.Spec(storm, 30*time.Second), func(ev sandbox.Event) {
			if !once && ev.Stream == sandbox.StreamStdout && strings.Contains(ev.Data, "held") {
				once = true
				close(held)
			}
		})
		done <- res
	}()
	select {
	case <-held:
	case res := <-done:
		t.Fatalf("the attacker's run ended before holding its processes: %+v", res)
	case <-time.After(60 * time.Second):
		t.Fatal("the attacker's run never held its processes")
	}

	victimCode := "import multiprocessing as mp\n\ndef square(x):\n    return x * x\n\nif __name__ == '__main__':\n" +
		"    with mp.get_context('fork').Pool(4) as pool:\n        print(pool.map(square, [1, 2, 3]))\n"
	res := sandboxtest.Exec(t, victim, 0, sandboxtest.Spec(victimCode, 30*time.Second), nil)
	if res.Outcome != sandbox.OutcomeOK || res.Stdout != "[1, 4, 9]\n" {
		t.Fatalf("the victim's forks, while another runtime's run holds its cap: outcome %q, stdout %q, stderr %q", res.Outcome, res.Stdout, res.Stderr)
	}
	stop()
	<-done
}
