package control_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/executor"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// TestSessionCommandForkStormFailsInside: a session's commands ran without the per-run limits
// (about 96 000 processes, 20 000 open files), and under gVisor a fork storm in one ended the
// whole session (issue 51, 7). A command runs under its processes and open files limits now
// (through the executor's LimitedExec): its forks past the cap fail inside it, and the
// executor serves the next command.
func TestSessionCommandForkStormFailsInside(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var bin string
	c, _ := pipeRuntimeWith(t, 1, func(cfg *executor.Config) {
		// A copy the session's uid may run (the test's binary is in a directory of root's),
		// written before the executor starts.
		bin = filepath.Join(filepath.Dir(cfg.Bootstrap), "sandpit-executor")
		cfg.Self = bin
		in, err := os.Open(self)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		writeExecutable(t, bin, in)
	})

	run := func(id, script string) (stdout, stderr string, end sandbox.ProcessEnd) {
		t.Helper()
		var mu sync.Mutex
		var o, e strings.Builder
		done := make(chan sandbox.ProcessEnd, 1)
		spec := sandbox.CommandSpec{Argv: []string{"bash", "-c", script}, TimeoutMS: 30_000, Processes: 8, OpenFiles: 32}
		if _, err := c.StartCommand(t.Context(), id, protocol.Command{Spec: spec}, func(ev sandbox.ProcessEvent) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case ev.End != nil:
				done <- *ev.End
			case ev.Stream == sandbox.StreamStderr:
				e.WriteString(ev.Data)
			default:
				o.WriteString(ev.Data)
			}
		}); err != nil {
			t.Fatalf("starting %s: %v", id, err)
		}
		select {
		case end = <-done:
		case <-time.After(60 * time.Second):
			t.Fatalf("%s did not end", id)
		}
		mu.Lock()
		defer mu.Unlock()
		return o.String(), e.String(), end
	}
	stdout, stderr, end := run("pr_storm", "ulimit -u; ulimit -n; for i in $(seq 40); do sleep 2 & done; wait; echo survived")
	if f := strings.Fields(stdout); len(f) < 2 || f[0] != "8" || f[1] != "32" {
		t.Errorf("the command's limits of processes and open files: %q; want 8 and 32", stdout)
	}
	if !strings.Contains(stderr, "fork") {
		t.Errorf("40 forks past a cap of 8 processes: stderr %q, end %+v; want forks refused inside the command", stderr, end)
	}
	if stdout, _, end := run("pr_after", "echo next"); strings.TrimSpace(stdout) != "next" || end.Outcome != sandbox.OutcomeOK {
		t.Errorf("the command after the storm: %q, %+v", stdout, end)
	}
}
