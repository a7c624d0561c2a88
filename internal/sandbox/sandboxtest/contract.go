package sandboxtest

// The cases of the runtime's contract as sandbox.Runtime states it, beyond running Python:
// Ready, the fields of a Result it fills and those it leaves to its caller, the order of its
// events, ErrNotReady for a run that never started, and the optional sandbox.Installer and
// sandbox.Settler.

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// TestReadyAnswersAtOnceWhileRunsGo: Ready returns nil for a ready runtime, within a second,
// also while every slot runs a program and after a run that killed itself.
func (s *Suite) TestReadyAnswersAtOnceWhileRunsGo(t *testing.T) {
	ready := func(when string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		if err := s.Runtime.Ready(ctx); err != nil {
			t.Fatalf("Ready %s: %v, want nil", when, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Ready %s took %s, want it at once", when, d)
		}
	}
	ready("before any run")

	var wg sync.WaitGroup
	for slot := range s.Slots {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res, err := s.rt.Run(ctx, slot, Spec("import time; time.sleep(1.5)", 10*time.Second), nil)
			if err != nil || res.Outcome != sandbox.OutcomeOK {
				t.Errorf("slot %d: outcome %q (%s), error %v", slot, res.Outcome, res.Reason, err) // not Fatal: another goroutine
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	ready("while every slot runs")
	wg.Wait()

	res := Exec(t, s.rt, 0, Spec("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeKilled)
	ready("after a run that killed itself")
	s.nextRunOK(t)
}

// TestResultLeavesTheCallersFieldsEmpty: Run fills what the run decided (outcome, exit code,
// signal, streams, OUTPUT, duration, start time, how it started) and leaves ID, Agent, Success,
// TimeoutMS and the origin to its caller, whatever the spec says.
func (s *Suite) TestResultLeavesTheCallersFieldsEmpty(t *testing.T) {
	before := time.Now()
	spec := Spec("import sys\nprint('out')\nprint('err', file=sys.stderr)\nOUTPUT = {'a': 1}", 10*time.Second)
	res := Exec(t, s.rt, 0, spec, nil)
	after := time.Now()
	expect(t, res, sandbox.OutcomeOK)
	if res.ExitCode != 0 || res.Signal != 0 || res.Reason != "" || res.Stdout != "out\n" || res.Stderr != "err\n" ||
		res.StdoutTruncated || res.StderrTruncated || !sameJSON(res.Output, `{"a": 1}`) {
		t.Fatalf("the run's own fields: exit %d signal %d reason %q stdout %q stderr %q truncated %v/%v output %s",
			res.ExitCode, res.Signal, res.Reason, res.Stdout, res.Stderr, res.StdoutTruncated, res.StderrTruncated, res.Output)
	}
	if res.StartedAt.Before(before.Add(-time.Second)) || res.StartedAt.After(after) || res.DurationMS < 0 ||
		time.Duration(res.DurationMS)*time.Millisecond > after.Sub(before) {
		t.Fatalf("started at %s and ran %d ms, want within the call (%s to %s)", res.StartedAt, res.DurationMS, before, after)
	}
	if res.Start != "fork" && res.Start != "cold" {
		t.Fatalf("start %q, want fork or cold for a run that started", res.Start)
	}
	if res.ID != "" || res.Agent != "" || res.Success || res.TimeoutMS != 0 || res.Origin != (sandbox.Origin{}) {
		t.Fatalf("the runtime filled the caller's fields: id %q agent %q success %v timeout_ms %d origin %+v; the Service fills them",
			res.ID, res.Agent, res.Success, res.TimeoutMS, res.Origin)
	}

	// A program that fails: the exit status and a reason naming it.
	res = Exec(t, s.rt, 0, Spec("import sys; sys.exit(3)", 10*time.Second), nil)
	expect(t, res, sandbox.OutcomeError)
	if res.ExitCode != 3 || res.Signal != 0 || res.Reason == "" || !noOutput(res) {
		t.Fatalf("exit %d signal %d reason %q output %s, want exit 3 with a reason", res.ExitCode, res.Signal, res.Reason, res.Output)
	}
}

// TestEventsComeInOrderBeforeTheResult: emit receives the program's output in order, on the
// goroutine that called Run, one call at a time, and never after Run has returned; the events
// of each stream add up to the Result's.
func (s *Suite) TestEventsComeInOrderBeforeTheResult(t *testing.T) {
	caller := goroutineID()
	var (
		mu             sync.Mutex
		stdout, stderr strings.Builder
		streams        = map[sandbox.Stream]int{}
		problems       []string
		inEmit         atomic.Int32
		returned       atomic.Bool
	)
	problem := func(p string) {
		mu.Lock()
		defer mu.Unlock()
		if len(problems) < 5 {
			problems = append(problems, p)
		}
	}
	emit := func(e sandbox.Event) {
		if inEmit.Add(1) > 1 {
			problem("emit was called while another call of it was running")
		}
		defer inEmit.Add(-1)
		if returned.Load() {
			problem("emit was called after Run returned")
		}
		if id := goroutineID(); id != caller {
			problem("emit was called on goroutine " + id + ", not on Run's caller, goroutine " + caller)
		}
		mu.Lock()
		defer mu.Unlock()
		streams[e.Stream]++
		switch e.Stream {
		case sandbox.StreamStdout:
			stdout.WriteString(e.Data)
		case sandbox.StreamStderr:
			stderr.WriteString(e.Data)
		}
	}
	code := "import sys, time\nfor i in range(50):\n    print('out', i)\n    print('err', i, file=sys.stderr)\n    if i % 10 == 0:\n        time.sleep(0.02)"
	res := Exec(t, s.rt, 0, Spec(code, 10*time.Second), emit)
	returned.Store(true)
	time.Sleep(200 * time.Millisecond) // an emit that was still on its way
	expect(t, res, sandbox.OutcomeOK)

	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
	if stdout.String() != res.Stdout || stderr.String() != res.Stderr {
		t.Errorf("the events add up to stdout %q and stderr %q, want the result's %q and %q", stdout.String(), stderr.String(), res.Stdout, res.Stderr)
	}
	if !strings.HasPrefix(res.Stdout, "out 0\nout 1\n") || !strings.HasSuffix(res.Stdout, "out 49\n") {
		t.Errorf("stdout %q, want out 0 to out 49 in order", res.Stdout)
	}
	for stream, n := range streams {
		if stream != sandbox.StreamStdout && stream != sandbox.StreamStderr {
			t.Errorf("%d events of stream %q from a program that only printed", n, stream)
		}
	}
}

// TestInstallerReportsEachRequirement: a runtime that is a sandbox.Installer answers every
// requirement, in the request's order and to progress as well: present with its version when
// the box has it, present without a version when its marker is false in the box, and failed at
// once with a reason when it is missing and the request is offline (pip never starts).
func (s *Suite) TestInstallerReportsEachRequirement(t *testing.T) {
	inst, ok := s.Runtime.(sandbox.Installer)
	if !ok {
		t.Skipf("%T does not install dependencies (not a sandbox.Installer)", s.Runtime)
	}
	if s.HasModule == nil || !s.HasModule("numpy") {
		t.Skip("numpy is not installed in this box")
	}
	reqs := []string{"numpy", `numpy; python_version < "3"`, "sandpit-no-such-package-xyz"}
	var mu sync.Mutex
	var progress []sandbox.DependencyStatus
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	got, err := inst.Install(ctx, 0, sandbox.InstallRequest{Requirements: reqs, Timeout: 30 * time.Second, Offline: true},
		func(d sandbox.DependencyStatus) {
			mu.Lock()
			defer mu.Unlock()
			progress = append(progress, d)
		})
	if err != nil {
		t.Fatalf("Install: system error: %v", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("an offline install took %s: it should not have tried the network", d)
	}
	if len(got.Dependencies) != len(reqs) {
		t.Fatalf("%d statuses for %d requirements: %+v", len(got.Dependencies), len(reqs), got.Dependencies)
	}
	for i, d := range got.Dependencies {
		if d.Requirement != reqs[i] {
			t.Errorf("status %d is for %q, want %q (the request's order)", i, d.Requirement, reqs[i])
		}
	}
	if d := got.Dependencies[0]; d.Status != sandbox.DependencyPresent || d.Version == "" || d.Error != "" {
		t.Errorf("numpy, which the box has: %+v, want present with its version", d)
	}
	if d := got.Dependencies[1]; d.Status != sandbox.DependencyPresent || d.Version != "" {
		t.Errorf("a requirement whose marker is false: %+v, want present without a version", d)
	}
	if d := got.Dependencies[2]; d.Status != sandbox.DependencyFailed || d.Version != "" || !strings.Contains(d.Error, "network") {
		t.Errorf("a missing package, offline: %+v, want failed with a reason naming the network policy", d)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(progress) != len(got.Dependencies) {
		t.Fatalf("progress received %d statuses, want %d: %+v", len(progress), len(got.Dependencies), progress)
	}
	for i := range progress {
		if progress[i] != got.Dependencies[i] {
			t.Errorf("progress %d is %+v, want the answer's %+v", i, progress[i], got.Dependencies[i])
		}
	}
	s.nextRunOK(t)
}

// TestSettleReturnsOnceTheSlotIsClean: a runtime that is a sandbox.Settler settles a slot
// after its run, and then returns at once for a slot with nothing pending.
func (s *Suite) TestSettleReturnsOnceTheSlotIsClean(t *testing.T) {
	st, ok := s.Runtime.(sandbox.Settler)
	if !ok {
		t.Skipf("%T has no work after a run (not a sandbox.Settler)", s.Runtime)
	}
	expect(t, Exec(t, s.rt, 0, Spec("open('left-behind', 'w').write('x' * 100000)", 10*time.Second), nil), sandbox.OutcomeOK)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.Settle(ctx, 0); err != nil {
		t.Fatalf("Settle after a run: %v", err)
	}
	start := time.Now()
	if err := st.Settle(ctx, 0); err != nil {
		t.Fatalf("Settle again: %v", err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("Settle of a settled slot took %s, want it at once", d)
	}
	s.nextRunOK(t)
}

// closedRuntimeRefusesRuns: once Harness.Close has closed the runtime, Ready and Run (and
// Install) return errors wrapping sandbox.ErrNotReady, within seconds, and the run never
// started: no event, no outcome, no start. It runs after every case, so it is not named Test….
func (s *Suite) closedRuntimeRefusesRuns(t *testing.T) {
	if err := s.Close(); err != nil {
		t.Fatalf("closing the runtime: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Runtime.Ready(ctx); !errors.Is(err, sandbox.ErrNotReady) {
		t.Errorf("Ready of a closed runtime: %v, want an error wrapping sandbox.ErrNotReady", err)
	}
	start := time.Now()
	var events atomic.Int32
	res, err := s.Runtime.Run(ctx, 0, Spec("print(1)", 10*time.Second), func(sandbox.Event) { events.Add(1) })
	if !errors.Is(err, sandbox.ErrNotReady) {
		t.Errorf("Run on a closed runtime: %v, want an error wrapping sandbox.ErrNotReady", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Run on a closed runtime took %s to refuse", d)
	}
	if res.Outcome != "" || res.Start != "" || res.Stdout != "" || events.Load() != 0 {
		t.Errorf("a run that never started has outcome %q, start %q, stdout %q and %d events, want none", res.Outcome, res.Start, res.Stdout, events.Load())
	}
	if inst, ok := s.Runtime.(sandbox.Installer); ok {
		_, err := inst.Install(ctx, 0, sandbox.InstallRequest{Requirements: []string{"numpy"}, Timeout: 10 * time.Second, Offline: true}, nil)
		if !errors.Is(err, sandbox.ErrNotReady) {
			t.Errorf("Install on a closed runtime: %v, want an error wrapping sandbox.ErrNotReady", err)
		}
	}
}

// goroutineID returns the number of the calling goroutine, from the first line of its stack
// ("goroutine 42 [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	return id
}
