package engine

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// fakeRuntime runs nothing: it answers with a function of the spec, optionally blocking.
type fakeRuntime struct {
	mu      sync.Mutex
	calls   []sandbox.Spec
	slots   map[int]bool
	overlap bool // two runs were given the same slot at once
	run     func(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error)
	ready   error
	// emitFiles are emitted as output files (with their content), in emitOrder, after stdout.
	emitFiles map[string][]byte
	emitOrder []string
}

func (f *fakeRuntime) Run(ctx context.Context, slot int, spec sandbox.Spec, emit func(sandbox.Event)) (sandbox.Result, error) {
	f.mu.Lock()
	f.calls = append(f.calls, spec)
	if f.slots == nil {
		f.slots = map[int]bool{}
	}
	if f.slots[slot] {
		f.overlap = true
	}
	f.slots[slot] = true
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.slots, slot)
		f.mu.Unlock()
	}()
	if emit != nil {
		emit(sandbox.Event{Stream: "stdout", Data: "x"})
		for _, n := range f.emitOrder {
			emit(sandbox.Event{Stream: sandbox.StreamFile, File: &sandbox.File{Name: n, SizeBytes: int64(len(f.emitFiles[n]))}, Content: f.emitFiles[n]})
		}
	}
	if f.run != nil {
		return f.run(ctx, spec)
	}
	return sandbox.Result{Outcome: sandbox.OutcomeOK, Stdout: "x"}, nil
}

func (f *fakeRuntime) Ready(context.Context) error { return f.ready }

func testConfig() Config {
	c := DefaultConfig()
	c.Slots, c.QueueLength, c.Grace = 2, 1, 200*time.Millisecond
	return c
}

func ms(v int64) *int64 { return &v }

func TestValidate(t *testing.T) {
	s := NewService(&fakeRuntime{}, Hooks{}, testConfig(), nil)
	cases := []struct {
		name     string
		req      sandbox.Request
		field    string
		tooLarge bool
	}{
		{"ok", sandbox.Request{Code: "print(1)"}, "", false},
		{"no code", sandbox.Request{}, "code", false},
		{"code too large", sandbox.Request{Code: strings.Repeat("x", 1<<20+1)}, "code", true},
		{"code not UTF-8", sandbox.Request{Code: "print('\xff')"}, "code", false},
		{"code with NUL", sandbox.Request{Code: "print(1)\x00"}, "code", false},
		{"input not JSON", sandbox.Request{Code: "1", Input: json.RawMessage("{")}, "input", false},
		{"input too large", sandbox.Request{Code: "1", Input: json.RawMessage(`"` + strings.Repeat("x", 1<<20) + `"`)}, "input", true},
		{"input nested too deep", sandbox.Request{Code: "1", Input: json.RawMessage(strings.Repeat("[", 501) + strings.Repeat("]", 501))}, "input", false},
		{"input nested at the limit", sandbox.Request{Code: "1", Input: json.RawMessage(strings.Repeat("[", 500) + strings.Repeat("]", 500))}, "", false},
		{"brackets inside strings do not nest", sandbox.Request{Code: "1", Input: json.RawMessage(`["` + strings.Repeat("[", 600) + `\"{"]`)}, "", false},
		{"timeout 0", sandbox.Request{Code: "1", TimeoutMS: ms(0)}, "timeout_ms", false},
		{"timeout negative", sandbox.Request{Code: "1", TimeoutMS: ms(-5)}, "timeout_ms", false},
		{"timeout over cap", sandbox.Request{Code: "1", TimeoutMS: ms(864000000)}, "timeout_ms", false},
		{"timeout at cap", sandbox.Request{Code: "1", TimeoutMS: ms(600000)}, "", false},
		{"agent upper case", sandbox.Request{Code: "1", Agent: "Bob"}, "agent", false},
		{"agent too long", sandbox.Request{Code: "1", Agent: strings.Repeat("a", 65)}, "agent", false},
		{"agent ok", sandbox.Request{Code: "1", Agent: "team-a_1"}, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := s.Validate(c.req)
			var fe *sandbox.FieldError
			if c.field == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if !errors.As(err, &fe) || fe.Field != c.field || fe.TooLarge != c.tooLarge || fe.Message == "" {
				t.Fatalf("got %v, want a FieldError on %s (too large %v)", err, c.field, c.tooLarge)
			}
		})
	}
}

func TestExecuteFillsTheResult(t *testing.T) {
	rt := &fakeRuntime{}
	s := NewService(rt, Hooks{}, testConfig(), nil)
	var events []sandbox.Event
	res, err := s.Execute(context.Background(), sandbox.Request{Code: "print(1)", TimeoutMS: ms(1234)}, func(e sandbox.Event) { events = append(events, e) })
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.ID, "ex_") || len(res.ID) != 29 || res.Agent != "default" || !res.Success ||
		res.TimeoutMS != 1234 || string(res.Output) != "null" || len(events) != 1 {
		t.Fatalf("result %+v events %v", res, events)
	}
	if got := rt.calls[0]; got.TimeoutMS != 1234 || string(got.Input) != "null" || got.Limits != testConfig().Limits {
		t.Fatalf("spec %+v", got)
	}
}

func TestSlotsQueueAndBusy(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 10)
	rt := &fakeRuntime{run: func(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
		started <- struct{}{}
		<-release
		return sandbox.Result{Outcome: sandbox.OutcomeOK}, nil
	}}
	s := NewService(rt, Hooks{}, testConfig(), nil) // 2 slots, queue 1
	var wg sync.WaitGroup
	results := make(chan error, 3)
	for range 3 {
		wg.Go(func() {
			_, err := s.Execute(context.Background(), sandbox.Request{Code: "1"}, nil)
			results <- err
		})
	}
	<-started
	<-started
	// Two run, one waits: the fourth is refused at once.
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Waiting != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	_, err := s.Execute(context.Background(), sandbox.Request{Code: "1"}, nil)
	var busy *sandbox.BusyError
	if !errors.As(err, &busy) || busy.RetryAfter <= 0 {
		t.Fatalf("fourth request: %v, want BusyError", err)
	}
	if st := s.Stats(); st.Busy != 2 || st.Waiting != 1 {
		t.Fatalf("stats %+v", st)
	}
	close(release)
	wg.Wait()
	close(results)
	for err := range results {
		if err != nil {
			t.Fatal(err)
		}
	}
	if rt.overlap {
		t.Fatal("two runs shared a slot")
	}
}

func TestDaemonDeadlineEndsAHungRun(t *testing.T) {
	rt := &fakeRuntime{run: func(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
		<-ctx.Done() // the executor never answers
		return sandbox.Result{Stdout: "partial"}, ctx.Err()
	}}
	s := NewService(rt, Hooks{}, testConfig(), nil)
	start := time.Now()
	res, err := s.Execute(context.Background(), sandbox.Request{Code: "1", TimeoutMS: ms(100)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != sandbox.OutcomeSandboxError || res.Stdout != "partial" || !strings.Contains(res.Reason, "did not report") || res.ExitCode != -1 {
		t.Fatalf("result %+v", res)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("gave up after %s, before timeout + grace", d)
	}
}

func TestClientCancelKillsTheRun(t *testing.T) {
	rt := &fakeRuntime{run: func(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
		<-ctx.Done()
		return sandbox.Result{}, ctx.Err()
	}}
	s := NewService(rt, Hooks{}, testConfig(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	res, err := s.Execute(ctx, sandbox.Request{Code: "1"}, nil)
	if err != nil || res.Outcome != sandbox.OutcomeKilled || !strings.Contains(res.Reason, "cancelled") {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestNotReadyIsAnError(t *testing.T) {
	rt := &fakeRuntime{run: func(context.Context, sandbox.Spec) (sandbox.Result, error) {
		return sandbox.Result{}, errors.Join(sandbox.ErrNotReady, errors.New("container starting"))
	}}
	s := NewService(rt, Hooks{}, testConfig(), nil)
	if _, err := s.Execute(context.Background(), sandbox.Request{Code: "1"}, nil); !errors.Is(err, sandbox.ErrNotReady) {
		t.Fatalf("got %v, want ErrNotReady", err)
	}
}

func TestSystemFailureIsAResult(t *testing.T) {
	rt := &fakeRuntime{run: func(context.Context, sandbox.Spec) (sandbox.Result, error) {
		return sandbox.Result{Stdout: "before"}, errors.New("the sandbox stopped during the run")
	}}
	s := NewService(rt, Hooks{}, testConfig(), nil)
	res, err := s.Execute(context.Background(), sandbox.Request{Code: "1"}, nil)
	if err != nil || res.Outcome != sandbox.OutcomeSandboxError || res.Reason != "the sandbox stopped during the run" || res.Stdout != "before" || res.Success {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestInterruptEndsRunningAndQueuedExecutions(t *testing.T) {
	started := make(chan struct{}, 4)
	rt := &fakeRuntime{run: func(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
		started <- struct{}{}
		<-ctx.Done()
		// The executor answers the cancel with its own result, as the real one does.
		return sandbox.Result{Outcome: sandbox.OutcomeKilled, Reason: "cancelled", Stdout: "partial"}, nil
	}}
	cfg := testConfig()
	cfg.Slots, cfg.QueueLength = 1, 1
	s := NewService(rt, Hooks{}, cfg, nil)
	type answer struct {
		res sandbox.Result
		err error
	}
	running, queued := make(chan answer, 1), make(chan answer, 1)
	go func() {
		r, err := s.Execute(context.Background(), sandbox.Request{Code: "1"}, nil)
		running <- answer{r, err}
	}()
	<-started
	go func() {
		r, err := s.Execute(context.Background(), sandbox.Request{Code: "2"}, nil)
		queued <- answer{r, err}
	}()
	for s.Stats().Waiting != 1 {
		time.Sleep(time.Millisecond)
	}
	s.Interrupt()
	a := <-running
	if a.err != nil || a.res.Outcome != sandbox.OutcomeSandboxError || !strings.HasPrefix(a.res.Reason, "interrupted") || a.res.Stdout != "partial" {
		t.Fatalf("running: %+v %v", a.res, a.err)
	}
	if q := <-queued; !errors.Is(q.err, sandbox.ErrNotReady) {
		t.Fatalf("queued: %+v %v", q.res, q.err)
	}
	if _, err := s.Execute(context.Background(), sandbox.Request{Code: "3"}, nil); !errors.Is(err, sandbox.ErrNotReady) {
		t.Fatalf("after Interrupt: %v", err)
	}
}

// slowInstaller is a fakeRuntime that installs in `took`, failing when fail is set.
var (
	_ sandbox.Installer = (*slowInstaller)(nil)
	_ sandbox.Installer = (*answerInstaller)(nil)
)

type slowInstaller struct {
	fakeRuntime
	took time.Duration
	fail bool
}

func (f *slowInstaller) Install(_ context.Context, _ int, req sandbox.InstallRequest, _ func(sandbox.DependencyStatus)) (sandbox.Installed, error) {
	time.Sleep(f.took)
	st := sandbox.DependencyStatus{Requirement: req.Requirements[0], Status: sandbox.DependencyInstalled, Version: "1.0"}
	if f.fail {
		st = sandbox.DependencyStatus{Requirement: req.Requirements[0], Status: sandbox.DependencyFailed, Error: "no such package"}
	}
	return sandbox.Installed{Dependencies: []sandbox.DependencyStatus{st}}, nil
}

// TestStartedAtIsWhenAccepted: an install before the run does not move started_at (it was
// rewritten to the install's end, and for a failed install to the execution's end, with
// duration_ms 0); the install's time is install_ms beside it. In a synctest bubble: time
// moves only by the install's sleep, so the bounds below do not race a loaded machine.
func TestStartedAtIsWhenAccepted(t *testing.T) {
	synctest.Test(t, testStartedAtIsWhenAccepted)
}

func testStartedAtIsWhenAccepted(t *testing.T) {
	const took = 300 * time.Millisecond
	for _, fail := range []bool{false, true} {
		rt := &slowInstaller{took: took, fail: fail}
		rt.run = func(context.Context, sandbox.Spec) (sandbox.Result, error) {
			return sandbox.Result{Outcome: sandbox.OutcomeOK, StartedAt: time.Now().UTC(), DurationMS: 1}, nil // the program's own start
		}
		s := NewService(rt, Hooks{}, testConfig(), nil)
		before := time.Now()
		res, err := s.Execute(context.Background(), sandbox.Request{Code: "import tinypkg", Dependencies: []string{"tinypkg"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		if res.StartedAt.Before(before.Add(-time.Millisecond)) || res.StartedAt.After(before.Add(took/3)) {
			t.Errorf("fail=%t: started_at %s, want when the request was accepted (%s), not after the %s install", fail, res.StartedAt, before.UTC(), took)
		}
		if res.InstallMS < took.Milliseconds() || res.StartedAt.Add(time.Duration(res.InstallMS)*time.Millisecond).After(after) {
			t.Errorf("fail=%t: install_ms %d, want at least %d and within the call", fail, res.InstallMS, took.Milliseconds())
		}
		if want := map[bool]sandbox.Outcome{false: sandbox.OutcomeOK, true: sandbox.OutcomeDependencyError}[fail]; res.Outcome != want {
			t.Errorf("fail=%t: outcome %s, want %s", fail, res.Outcome, want)
		}
	}
}

// answerInstaller is a fakeRuntime whose installs answer `answer` for every requirement.
type answerInstaller struct {
	fakeRuntime
	answer sandbox.DependencyStatus
}

func (f *answerInstaller) Install(_ context.Context, _ int, req sandbox.InstallRequest, progress func(sandbox.DependencyStatus)) (sandbox.Installed, error) {
	var out sandbox.Installed
	for _, r := range req.Requirements {
		d := f.answer
		d.Requirement = r
		if progress != nil {
			progress(d)
		}
		out.Dependencies = append(out.Dependencies, d)
	}
	return out, nil
}

// TestMarkerExcludedIsSkipped: a requirement whose marker is false in the box is answered
// present with no version by the runtime; it is reported skipped, streamed and in the result.
func TestMarkerExcludedIsSkipped(t *testing.T) {
	rt := &answerInstaller{answer: sandbox.DependencyStatus{Status: sandbox.DependencyPresent}}
	s := NewService(rt, Hooks{}, testConfig(), nil)
	var streamed []sandbox.DependencyState
	res, err := s.Execute(context.Background(), sandbox.Request{Code: "pass", Dependencies: []string{`tinypkg; python_version < "3"`}}, func(e sandbox.Event) {
		if e.Dependency != nil {
			streamed = append(streamed, e.Dependency.Status)
		}
	})
	if err != nil || res.Outcome != sandbox.OutcomeOK || len(res.Dependencies) != 1 || res.Dependencies[0].Status != sandbox.DependencySkipped ||
		len(streamed) != 1 || streamed[0] != sandbox.DependencySkipped {
		t.Fatalf("%v %+v, streamed %v; want skipped", err, res, streamed)
	}
}

// TestConflictIsNamed: a requirement that is installed but conflicts is not "could not be
// installed".
func TestConflictIsNamed(t *testing.T) {
	rt := &answerInstaller{answer: sandbox.DependencyStatus{Status: sandbox.DependencyFailed, Version: "1.0", Error: "version 2.0 of tinypkg comes first"}}
	s := NewService(rt, Hooks{}, testConfig(), nil)
	res, err := s.Execute(context.Background(), sandbox.Request{Code: "pass", Dependencies: []string{"tinypkg==1.0", "tinydep"}}, nil)
	want := "dependency tinypkg==1.0 is installed (version 1.0) but conflicts with another requirement, so the code did not run: version 2.0 of tinypkg comes first (failed too: tinydep)"
	if err != nil || res.Outcome != sandbox.OutcomeDependencyError || res.Reason != want {
		t.Fatalf("%v %q\nwant %q", err, res.Reason, want)
	}
}

// TestFieldErrorSaysTheFieldOnce: a message that starts with its field's name is not prefixed
// with it again ("dependencies: dependencies[0] ...", "schedule: schedule ...").
func TestFieldErrorSaysTheFieldOnce(t *testing.T) {
	s := NewService(&fakeRuntime{}, Hooks{}, testConfig(), nil)
	err := s.Validate(sandbox.Request{Code: "pass", Dependencies: []string{"--index-url=x"}})
	if err == nil || !strings.HasPrefix(err.Error(), "dependencies[0] ") || strings.Count(err.Error(), "dependencies") != 1 {
		t.Errorf("%v", err)
	}
	for _, c := range []struct {
		e    sandbox.FieldError
		want string
	}{
		{sandbox.FieldError{Field: "schedule", Message: `schedule "x": expected 5 fields`}, `schedule "x": expected 5 fields`},
		{sandbox.FieldError{Field: "timeout_ms", Message: "is 0"}, "timeout_ms: is 0"},
		{sandbox.FieldError{Field: "code", Message: "code_name is wrong"}, "code: code_name is wrong"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.e, got, c.want)
		}
	}
}

// A failed install's dependencies say what the egress proxy could not reach or refused.
func TestExplainEgress(t *testing.T) {
	out := sandbox.Installed{Dependencies: []sandbox.DependencyStatus{{Requirement: "a", Status: sandbox.DependencyFailed, Error: "pip could not install it"},
		{Requirement: "b", Status: sandbox.DependencyInstalled}}}
	explainEgress(&out, []sandbox.EgressConnection{
		{Host: "10.0.0.1", Port: 9, Allowed: true, Reason: "allowed, but the connection failed: connection refused"},
		{Host: "files.example.com", Port: 443, Reason: "no entry of the package index names files.example.com"},
		{Host: "10.0.0.1", Port: 80, Allowed: true},
	})
	e := out.Dependencies[0].Error
	if !strings.Contains(e, "could not be reached") || !strings.Contains(e, "10.0.0.1:9") || !strings.Contains(e, "refused pip's connections") ||
		!strings.Contains(e, "files.example.com:443") || out.Dependencies[1].Error != "" {
		t.Errorf("explained: %+v", out.Dependencies)
	}
}

// slotRecorder is a fakeRuntime that records the slot of each run.
type slotRecorder struct {
	fakeRuntime
	order []int
}

func (r *slotRecorder) Run(ctx context.Context, slot int, spec sandbox.Spec, emit func(sandbox.Event)) (sandbox.Result, error) {
	r.mu.Lock()
	r.order = append(r.order, slot)
	r.mu.Unlock()
	return r.fakeRuntime.Run(ctx, slot, spec, emit)
}

// TestRunsGoRoundTheSlots: runs one after another take the slot free the longest, so that
// each slot's next program has the others' runs' time to be forked ahead (a hand-out that took
// the slot freed last kept one slot busy forking while the others idled).
func TestRunsGoRoundTheSlots(t *testing.T) {
	rt := &slotRecorder{}
	cfg := testConfig()
	cfg.Slots = 4
	s := NewService(rt, Hooks{}, cfg, nil)
	for range 8 {
		if _, err := s.Execute(context.Background(), sandbox.Request{Code: "print(1)"}, nil); err != nil {
			t.Fatal(err)
		}
		s.Settled()
	}
	if got, want := rt.order, []int{0, 1, 2, 3, 0, 1, 2, 3}; !slices.Equal(got, want) {
		t.Fatalf("slots %v, want %v", got, want)
	}
}

// healthRuntime is a slotRecorder that tells which slots are up (down, under mu).
type healthRuntime struct {
	slotRecorder
	down map[int]bool
}

func (h *healthRuntime) SlotUp(slot int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.down[slot]
}

// TestRunsGoToSlotsThatAreUp: a free slot whose sandbox is lost (its node gone) is passed over
// while another free one is up: the run took it and waited out the runtime's ready wait, then
// failed with not_ready (CI, 6 December, TestKubernetesNodeLost). With none up, runs still
// take a slot (and wait for it, as before).
func TestRunsGoToSlotsThatAreUp(t *testing.T) {
	rt := &healthRuntime{down: map[int]bool{0: true}}
	cfg := testConfig()
	cfg.Slots = 3
	s := NewService(rt, Hooks{}, cfg, nil)
	for range 6 {
		if _, err := s.Execute(t.Context(), sandbox.Request{Code: "print(1)"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	rt.mu.Lock()
	if slices.Contains(rt.order, 0) || len(rt.order) != 6 {
		t.Errorf("runs went to slots %v; want none to slot 0, which is down", rt.order)
	}
	rt.down = map[int]bool{0: true, 1: true, 2: true}
	rt.mu.Unlock()
	if _, err := s.Execute(t.Context(), sandbox.Request{Code: "print(1)"}, nil); err != nil {
		t.Fatalf("a run with every slot down: %v", err)
	}
}
