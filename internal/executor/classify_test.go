package executor

import (
	"io"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// classify decides from what the executor observed; the program's MemoryError mark only
// relabels a failure, and out-of-memory kills win when they are surely the run's.
func TestClassify(t *testing.T) {
	exited := func(code int) syscall.WaitStatus { return syscall.WaitStatus(code << 8) }
	signaled := func(sig syscall.Signal) syscall.WaitStatus { return syscall.WaitStatus(sig) }
	cases := []struct {
		name        string
		slots       int
		status      syscall.WaitStatus
		reason      stopReason
		memoryError bool
		oomKills    int
		output      string
		outcome     sandbox.Outcome
		says        string // in the reason; "" wants no reason
	}{
		{"exit 0", 1, exited(0), stopNone, false, 0, "", sandbox.OutcomeOK, ""},
		{"the mark cannot turn an exit 0 into a limit", 1, exited(0), stopNone, true, 0, "", sandbox.OutcomeOK, ""},
		{"the mark relabels a failure", 1, exited(1), stopNone, true, 0, "", sandbox.OutcomeMemoryLimit, "MemoryError) under its limit of 1 MiB, the daemon's run_memory_bytes"},
		{"the mark does not relabel a signal", 1, signaled(syscall.SIGSEGV), stopNone, true, 0, "", sandbox.OutcomeKilled, "SIGSEGV"},
		{"SIGINT is named", 1, signaled(syscall.SIGINT), stopNone, false, 0, "", sandbox.OutcomeKilled, "KeyboardInterrupt"},
		{"a child's kill in the run's own box wins over exit 0", 1, exited(0), stopNone, false, 1, "", sandbox.OutcomeMemoryLimit,
			"1 process of the run was killed by the box's out-of-memory killer (its memory_bytes, 512 MiB, which its files in /tmp and /dev/shm count against); the program itself ended with exit status 0"},
		{"in a shared box it is named, not decisive", 4, exited(0), stopNone, false, 2, "", sandbox.OutcomeOK,
			"2 processes in the box (this run's or another slot's) were killed"},
		{"the program killed by it", 4, signaled(syscall.SIGKILL), stopNone, false, 1, "", sandbox.OutcomeMemoryLimit, "the box ran out of memory (its memory_bytes, 512 MiB, which its files in /tmp and /dev/shm count against) and its out-of-memory killer stopped the run"},
		{"a timeout stays a timeout, with the kills named", 1, signaled(syscall.SIGKILL), stopTimeout, false, 1, "", sandbox.OutcomeTimeout,
			"timeout of 1000 ms; every process of it was killed; 1 process of the run was killed"},
		{"OUTPUT naming a name twice", 1, exited(0), stopNone, false, 0, `{"a": 1, "a": 2}`, sandbox.OutcomeError, `the name "a" twice`},
		{"OUTPUT that is not JSON", 1, exited(0), stopNone, false, 0, `{"a": `, sandbox.OutcomeError, "not JSON"},
		{"a failure keeps its status over a bad OUTPUT", 1, exited(3), stopNone, false, 0, `{`, sandbox.OutcomeError, "status 3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &run{e: &Executor{cfg: Config{Slots: c.slots}, boxMemory: 512 << 20, log: slog.New(slog.NewTextHandler(io.Discard, nil))},
				spec:   sandbox.Spec{TimeoutMS: 1000, Limits: sandbox.Limits{MemoryBytes: 1 << 20, OutputBytes: 1 << 20}},
				reason: c.reason, memoryError: c.memoryError}
			if c.output != "" {
				r.output = []byte(c.output)
			}
			res := &sandbox.Result{ExitCode: -1, OOMKills: c.oomKills}
			r.classify(res, c.status, nil)
			if res.Outcome != c.outcome || (c.says == "") != (res.Reason == "") || !strings.Contains(res.Reason, c.says) {
				t.Fatalf("outcome %q reason %q, want %q saying %q", res.Outcome, res.Reason, c.outcome, c.says)
			}
		})
	}
}

// SIGXCPU is a timeout only when the kernel sent it: when the process used its CPU-time limit
// (2 s for a 1000 ms timeout). A program that sends it to itself is killed by a signal.
func TestClassifySIGXCPU(t *testing.T) {
	for _, c := range []struct {
		cpu     time.Duration
		outcome sandbox.Outcome
		says    string
	}{
		{2 * time.Second, sandbox.OutcomeTimeout, "CPU time limit of 2 s"},
		{1950 * time.Millisecond, sandbox.OutcomeTimeout, "CPU time limit of 2 s"},
		{30 * time.Millisecond, sandbox.OutcomeKilled, "signal 24 (SIGXCPU"},
	} {
		r := &run{e: &Executor{cfg: Config{Slots: 1}, log: slog.New(slog.NewTextHandler(io.Discard, nil))},
			spec: sandbox.Spec{TimeoutMS: 1000}, cpu: c.cpu}
		res := &sandbox.Result{ExitCode: -1}
		r.classify(res, syscall.WaitStatus(syscall.SIGXCPU), nil)
		if res.Outcome != c.outcome || !strings.Contains(res.Reason, c.says) {
			t.Errorf("cpu %s: outcome %q reason %q, want %q saying %q", c.cpu, res.Outcome, res.Reason, c.outcome, c.says)
		}
	}
}
