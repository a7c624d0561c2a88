package sandboxtest

// The cases of the run's limits and its ends: timeouts, memory, processes, signals and
// cancellation (H1, H5–H7, H13, H14).

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// TestH1InfiniteLoopTimesOut: H1 infinite loop times out.
func (s *Suite) TestH1InfiniteLoopTimesOut(t *testing.T) {
	start := time.Now()
	res := Exec(t, s.rt, 0, Spec("while True: pass", 2*time.Second), nil)
	expect(t, res, sandbox.OutcomeTimeout)
	// Not a timing: a kill that waited for something (the run's end, a child) would hang here.
	// The margin is wide because the kill is done by a helper process the executor starts,
	// which under the race detector is a large binary on a loaded machine.
	if d := time.Since(start); d > 12*time.Second {
		t.Fatalf("answered after %s: the run was not killed at its timeout", d)
	}
	if !strings.Contains(res.Reason, "2000 ms") {
		t.Fatalf("reason %q does not name the timeout", res.Reason)
	}
	s.nextRunOK(t)
}

// TestH5AllocationOverTheMemoryLimit: H5 allocation over the memory limit.
func (s *Suite) TestH5AllocationOverTheMemoryLimit(t *testing.T) {
	res := Exec(t, s.rt, 0, Spec("b = bytearray(600 * 2**20)", 20*time.Second), nil)
	expect(t, res, sandbox.OutcomeMemoryLimit)
	s.nextRunOK(t)
}

// TestRunMayAllocateMostOfItsMemoryLimit: a run may allocate most of its memory limit.
func (s *Suite) TestRunMayAllocateMostOfItsMemoryLimit(t *testing.T) {
	spec := Spec("b = bytearray(96 * 2**20); print(len(b) >> 20)", 30*time.Second)
	spec.Limits.MemoryBytes = 128 << 20
	res := Exec(t, s.rt, 0, spec, nil)
	expect(t, res, sandbox.OutcomeOK)
}

// TestH6ThreadsEatingMemory: H6 threads eating memory.
func (s *Suite) TestH6ThreadsEatingMemory(t *testing.T) {
	// Another slot's run, started while slot 0 saturates the box, still completes.
	type answer struct {
		res sandbox.Result
		err error
	}
	other := make(chan answer, 1)
	if s.Slots > 1 {
		go func() {
			time.Sleep(500 * time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			res, err := s.rt.Run(ctx, 1, Spec("print('other slot')", 30*time.Second), nil)
			other <- answer{res, err}
		}()
	}
	res := Exec(t, s.rt, 0, Spec("import threading; [threading.Thread(target=lambda: [0]*10**9).start() for _ in range(4)]", 20*time.Second), nil)
	if res.Outcome != sandbox.OutcomeMemoryLimit && res.Outcome != sandbox.OutcomeTimeout {
		expect(t, res, sandbox.OutcomeMemoryLimit)
	}
	if s.Slots > 1 {
		if o := <-other; o.err != nil || o.res.Outcome != sandbox.OutcomeOK || o.res.Stdout != "other slot\n" {
			t.Fatalf("the other slot's run while slot 0 saturated the box: %+v (error %v)", o.res, o.err)
		}
	}
	s.nextRunOK(t)
}

// TestH13NumpyAllocationOverTheLimit: H13 numpy allocation over the limit.
func (s *Suite) TestH13NumpyAllocationOverTheLimit(t *testing.T) {
	if s.HasModule != nil && !s.HasModule("numpy") {
		t.Skip("numpy is not installed in this box")
	}
	res := Exec(t, s.rt, 0, Spec("import numpy as np; a = np.ones(10**11)", HeavyImportTimeout), nil)
	expect(t, res, sandbox.OutcomeMemoryLimit)
}

// TestH14SegfaultIsKilledWithTheSignalNamed: H14 segfault is killed with the signal named.
func (s *Suite) TestH14SegfaultIsKilledWithTheSignalNamed(t *testing.T) {
	res := Exec(t, s.rt, 0, Spec("import ctypes; ctypes.string_at(0)", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeKilled)
	if res.Signal != 11 || !strings.Contains(res.Reason, "SIGSEGV") {
		t.Fatalf("signal %d reason %q", res.Signal, res.Reason)
	}
	s.nextRunOK(t)
}

// TestSignalTheProgramSendsItselfIsNotALimit: a signal the program sends itself is not a limit.
func (s *Suite) TestSignalTheProgramSendsItselfIsNotALimit(t *testing.T) {
	// SIGXCPU is what the CPU-time limit sends; sent by the program, it is a plain kill.
	res := Exec(t, s.rt, 0, Spec("import os, signal; os.kill(os.getpid(), signal.SIGXCPU)", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeKilled)
	if res.Signal != 24 || !strings.Contains(res.Reason, "SIGXCPU") {
		t.Fatalf("signal %d reason %q", res.Signal, res.Reason)
	}
}

// TestUncaughtKeyboardInterruptEndsTheRunBySIGINT: an uncaught KeyboardInterrupt ends the run as python3 does: by SIGINT.
func (s *Suite) TestUncaughtKeyboardInterruptEndsTheRunBySIGINT(t *testing.T) {
	res := Exec(t, s.rt, 0, Spec("import atexit\natexit.register(print, 'atexit')\nprint('before')\nraise KeyboardInterrupt", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeKilled)
	if res.ExitCode != 130 || res.Signal != 2 || !strings.Contains(res.Reason, "SIGINT") ||
		res.Stdout != "before\natexit\n" || !strings.Contains(res.Stderr, "KeyboardInterrupt") {
		t.Fatalf("exit %d signal %d reason %q stdout %q stderr %q", res.ExitCode, res.Signal, res.Reason, res.Stdout, res.Stderr)
	}
	// Caught, or raised in a thread, it is an ordinary exception.
	res = Exec(t, s.rt, 0, Spec("import threading\ndef f():\n    raise KeyboardInterrupt\nth = threading.Thread(target=f); th.start(); th.join()\ntry:\n    raise KeyboardInterrupt\nexcept KeyboardInterrupt:\n    print('caught')", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeOK)
}

// TestCancelKillsTheRun: cancel kills the run.
func (s *Suite) TestCancelKillsTheRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := s.rt.Run(ctx, 0, Spec("import time; print('a', flush=True); time.sleep(60)", 30*time.Second), nil)
	if time.Since(start) > 5*time.Second {
		t.Fatalf("cancel took %s", time.Since(start))
	}
	if err == nil && res.Outcome != sandbox.OutcomeKilled {
		t.Fatalf("outcome %q after cancel", res.Outcome)
	}
	s.nextRunOK(t)
}

// TestH7ForkBombEndsAndLeavesNothing: H7, a fork bomb ends and leaves no process behind.
func (s *Suite) TestH7ForkBombEndsAndLeavesNothing(t *testing.T) {
	s.forkBomb(t, "import os\nwhile True: os.fork()")
}

// TestH7HiddenForkBombEndsAndLeavesNothing: H7, a fork bomb that first makes itself
// undumpable, which gives its /proc directories to root, must be counted and killed all the
// same.
func (s *Suite) TestH7HiddenForkBombEndsAndLeavesNothing(t *testing.T) {
	s.forkBomb(t, "import ctypes, os\nctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\nwhile True: os.fork()")
}

// TestH44ProcessThatStopsItsUIDIsKilled: H44, a run's process that keeps stopping every
// process and thread it may signal (kill(-1, SIGSTOP), and each thread by its id) does not
// outlive the run's timeout: the executor's kill is nothing the run may signal.
func (s *Suite) TestH44ProcessThatStopsItsUIDIsKilled(t *testing.T) {
	res := Exec(t, s.rt, 0, Spec(stopper, 3*time.Second), nil)
	expect(t, res, sandbox.OutcomeTimeout)
	res = Exec(t, s.rt, 0, Spec(countOwnProcesses, 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeOK)
	if res.Stdout != "1\n" {
		t.Fatalf("processes of the slot's uid after the stopper: %q, want 1 (the counter itself)", res.Stdout)
	}
	s.nextRunOK(t)
}

// Stopper is a Python program that stops, in a loop, every process and thread it may signal
// but itself: kill(-1, SIGSTOP), then each thread by its id (H44).
const Stopper = `import os, signal
me = os.getpid()
while True:
    for _ in range(200):
        try:
            os.kill(-1, signal.SIGSTOP)
        except OSError:
            pass
    for pid in os.listdir('/proc'):
        if pid.isdigit() and int(pid) != me:
            try:
                for tid in os.listdir('/proc/%s/task' % pid):
                    try:
                        os.kill(int(tid), signal.SIGSTOP)
                    except OSError:
                        pass
            except OSError:
                pass
`

// stopper starts Stopper as a process of the run, and waits.
var stopper = "import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', " + strconv.Quote(Stopper) + "])\ntime.sleep(60)"

// forkBomb runs bomb in slot 0 and checks that it ended (not ok, not sandbox_error) and that
// no process of the slot's uid is left.
func (s *Suite) forkBomb(t *testing.T, bomb string) {
	res := Exec(t, s.rt, 0, Spec(bomb, 5*time.Second), nil)
	if res.Outcome == sandbox.OutcomeOK || res.Outcome == sandbox.OutcomeSandboxError {
		t.Fatalf("outcome %q (%s)", res.Outcome, res.Reason)
	}
	// The slot's uid has no process left: a new run in the slot sees only itself.
	res = Exec(t, s.rt, 0, Spec(countOwnProcesses, 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeOK)
	if res.Stdout != "1\n" {
		t.Fatalf("processes of the slot's uid after the fork bomb: %q, want 1 (the counter itself)", res.Stdout)
	}
	s.nextRunOK(t)
}
