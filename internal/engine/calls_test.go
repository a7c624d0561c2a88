package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// callingRuntime makes calls through spec.Calls while "running", and keeps the function to
// call again after the run.
type callingRuntime struct {
	calls []sandbox.Call
	errs  []error
	after func(context.Context, sandbox.Call) (json.RawMessage, error)
}

func (r *callingRuntime) Ready(context.Context) error { return nil }

func (r *callingRuntime) Run(ctx context.Context, _ int, spec sandbox.Spec, _ func(sandbox.Event)) (sandbox.Result, error) {
	for _, c := range r.calls {
		_, err := spec.Calls(ctx, c)
		r.errs = append(r.errs, err)
	}
	r.after = spec.Calls
	return sandbox.Result{Outcome: sandbox.OutcomeOK}, nil
}

type echoCallbacks struct{ scopes []sandbox.CallScope }

func (e *echoCallbacks) Call(_ context.Context, scope sandbox.CallScope, call sandbox.Call) (json.RawMessage, error) {
	e.scopes = append(e.scopes, scope)
	if call.Method == "get_documents" {
		return json.RawMessage(`"` + strings.Repeat("x", 2048) + `"`), nil
	}
	return json.RawMessage(`[]`), nil
}

func TestCallsAreScopedCappedAndEnd(t *testing.T) {
	cfg := testConfig()
	cfg.MaxCalls, cfg.MaxCallBytes = 3, 1024
	cb := &echoCallbacks{}
	rt := &callingRuntime{calls: []sandbox.Call{
		{Method: "get_facts", Args: json.RawMessage(`{}`)},
		{Method: "drop_tables", Args: json.RawMessage(`{}`)},
		{Method: "get_facts", Args: json.RawMessage(`{"x": "` + strings.Repeat("y", 2000) + `"}`)},
		{Method: "get_facts", Args: json.RawMessage(`{}`)}, // the fourth: over the cap
	}}
	s := NewService(rt, Hooks{Callbacks: cb}, cfg, nil)
	res, err := s.Execute(context.Background(), sandbox.Request{Code: "x", Agent: "alice"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rt.errs[0] != nil || rt.errs[1] == nil || !strings.Contains(rt.errs[2].Error(), "the limit is 1024") || !strings.Contains(rt.errs[3].Error(), "limit") {
		t.Fatalf("errors: %v", rt.errs)
	}
	if len(cb.scopes) != 1 || cb.scopes[0] != (sandbox.CallScope{Agent: "alice", ExecutionID: res.ID}) {
		t.Fatalf("the handler saw %v", cb.scopes)
	}
	if len(res.Calls) != 4 || !res.Calls[0].OK || res.Calls[1].OK || res.Calls[0].Method != "get_facts" {
		t.Fatalf("audit: %+v", res.Calls)
	}
	if _, err := rt.after(context.Background(), sandbox.Call{Method: "get_facts", Args: json.RawMessage(`{}`)}); !errors.Is(err, sandbox.ErrRunEnded) {
		t.Fatalf("a call after the run: %v", err)
	}

	rt = &callingRuntime{calls: []sandbox.Call{{Method: "get_documents", Args: json.RawMessage(`{}`)}}}
	s = NewService(rt, Hooks{Callbacks: cb}, cfg, nil)
	if _, err := s.Execute(context.Background(), sandbox.Request{Code: "x"}, nil); err != nil {
		t.Fatal(err)
	}
	if rt.errs[0] == nil || !strings.Contains(rt.errs[0].Error(), "answer to get_documents") {
		t.Fatalf("an oversized answer: %v", rt.errs[0])
	}
}

func TestLogLinesAreBoundedAndKept(t *testing.T) {
	big := strings.Repeat("x", sandbox.MaxLogMessage)
	var calls []sandbox.Call
	calls = append(calls, sandbox.Call{Method: "log", Args: json.RawMessage(`{"message": "no level"}`)})
	calls = append(calls, sandbox.Call{Method: "log", Args: json.RawMessage(`{"message": "` + big + `x", "level": "info"}`)})
	for range sandbox.MaxLogBytes/sandbox.MaxLogMessage + 1 {
		calls = append(calls, sandbox.Call{Method: "log", Args: json.RawMessage(`{"message": "` + big + `", "level": "info"}`)})
	}
	rt := &callingRuntime{calls: calls}
	var events []sandbox.Event
	cfg := testConfig()
	cfg.MaxCallBytes = 1 << 20
	s := NewService(rt, Hooks{Callbacks: &echoCallbacks{}}, cfg, nil)
	res, err := s.Execute(context.Background(), sandbox.Request{Code: "x"}, func(e sandbox.Event) { events = append(events, e) })
	if err != nil {
		t.Fatal(err)
	}
	if rt.errs[0] == nil || rt.errs[1] == nil || !strings.Contains(rt.errs[1].Error(), "the limit is 65536") {
		t.Fatalf("a bad level and an oversized message: %v, %v", rt.errs[0], rt.errs[1])
	}
	last := rt.errs[len(rt.errs)-1]
	if last == nil || !strings.Contains(last.Error(), "per run") {
		t.Fatalf("past the run's log budget: %v", last)
	}
	if len(res.Logs) != sandbox.MaxLogBytes/sandbox.MaxLogMessage || len(events) != len(res.Logs) {
		t.Fatalf("%d lines kept, %d streamed; want %d of each (refused lines are neither)", len(res.Logs), len(events), sandbox.MaxLogBytes/sandbox.MaxLogMessage)
	}
}

// countingRecorder counts the ledger's calls; Finish fails the first failFinish times.
type countingRecorder struct {
	mu                        sync.Mutex
	begun, finished, discards int
	failFinish                int
}

func (c *countingRecorder) Begin(context.Context, sandbox.Spec, sandbox.Result) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.begun++
	return nil
}

func (c *countingRecorder) Finish(context.Context, sandbox.Result) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failFinish > 0 {
		c.failFinish--
		return errors.New("database or disk is full")
	}
	c.finished++
	return nil
}

func (c *countingRecorder) Discard(context.Context, string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.discards++
	return nil
}

type notReadyRuntime struct{}

func (notReadyRuntime) Ready(context.Context) error { return sandbox.ErrNotReady }

func (notReadyRuntime) Run(context.Context, int, sandbox.Spec, func(sandbox.Event)) (sandbox.Result, error) {
	return sandbox.Result{}, fmt.Errorf("%w: cannot reach the Docker engine", sandbox.ErrNotReady)
}

// A run refused because the sandbox is not ready leaves no record; a result the ledger could
// not take is recorded once it can.
func TestLedgerKeepsOnlyRunsThatRan(t *testing.T) {
	rec := &countingRecorder{}
	s := NewService(notReadyRuntime{}, Hooks{Recorder: rec}, testConfig(), nil)
	if _, err := s.Execute(context.Background(), sandbox.Request{Code: "x"}, nil); !errors.Is(err, sandbox.ErrNotReady) {
		t.Fatalf("err %v", err)
	}
	if rec.begun != 1 || rec.discards != 1 || rec.finished != 0 {
		t.Fatalf("begun %d, discarded %d, finished %d; want 1, 1, 0", rec.begun, rec.discards, rec.finished)
	}

	synctest.Test(t, func(t *testing.T) {
		rec := &countingRecorder{failFinish: 2}
		s := NewService(&callingRuntime{}, Hooks{Recorder: rec}, testConfig(), nil)
		if _, err := s.Execute(context.Background(), sandbox.Request{Code: "x"}, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * finishRetryEvery)
		synctest.Wait()
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if rec.finished != 1 {
			t.Fatalf("the result was recorded %d times after the ledger recovered, want 1", rec.finished)
		}
		s.Interrupt()
	})
}

// TestLogLinesInTheDaemonLogAreBounded: the daemon's own log repeats a run's first
// maxLoggedLines agent.log lines and says once that the rest are in the record (runs filled a
// daemon's log with 20 MB of them).
func TestLogLinesInTheDaemonLogAreBounded(t *testing.T) {
	var calls []sandbox.Call
	for range 3 * maxLoggedLines {
		calls = append(calls, sandbox.Call{Method: "log", Args: json.RawMessage(`{"message": "hi", "level": "info"}`)})
	}
	var buf bytes.Buffer
	s := NewService(&callingRuntime{calls: calls}, Hooks{Callbacks: &echoCallbacks{}}, testConfig(), slog.New(slog.NewTextHandler(&buf, nil)))
	res, err := s.Execute(context.Background(), sandbox.Request{Code: "x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Logs) != 3*maxLoggedLines {
		t.Fatalf("the record keeps %d lines, want %d", len(res.Logs), 3*maxLoggedLines)
	}
	if n, more := strings.Count(buf.String(), `msg="agent log" `), strings.Count(buf.String(), "further lines are in its record only"); n != maxLoggedLines || more != 1 {
		t.Errorf("the daemon's log holds %d lines and %d notes, want %d and 1", n, more, maxLoggedLines)
	}
}

// countingCallbacks records how many calls it answers at once.
type countingCallbacks struct {
	mu        sync.Mutex
	now, most int
}

func (c *countingCallbacks) Call(context.Context, sandbox.CallScope, sandbox.Call) (json.RawMessage, error) {
	c.mu.Lock()
	c.now++
	c.most = max(c.most, c.now)
	c.mu.Unlock()
	time.Sleep(time.Millisecond) // let others try to overlap
	c.mu.Lock()
	c.now--
	c.mu.Unlock()
	return json.RawMessage(`[]`), nil
}

// A program that writes many calls without waiting for answers gets them answered one at a
// time: a run keeps at most one call of the daemon's busy.
func TestCallsOfARunAreAnsweredOneAtATime(t *testing.T) {
	cb := &countingCallbacks{}
	var errs []error
	var mu sync.Mutex
	rt := &fakeRuntime{}
	rt.run = func(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				_, err := spec.Calls(ctx, sandbox.Call{Method: "query_graph", Args: json.RawMessage(`{}`)})
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			})
		}
		wg.Wait()
		return sandbox.Result{Outcome: sandbox.OutcomeOK}, nil
	}
	s := NewService(rt, Hooks{Callbacks: cb}, testConfig(), nil)
	if _, err := s.Execute(t.Context(), sandbox.Request{Code: "x"}, nil); err != nil {
		t.Fatal(err)
	}
	if len(errs) != 20 || cb.most != 1 {
		t.Fatalf("%d calls answered, at most %d at once; want 20, one at a time (errors %v)", len(errs), cb.most, errs)
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestFailedPipIsTheProgramsError: a %pip install that fails is the program's exception, with
// no dependency event of its failure beside it (the CLI printed "could not install" and then
// the traceback said it again); an installed requirement is still streamed.
func TestFailedPipIsTheProgramsError(t *testing.T) {
	rt := &answerInstaller{answer: sandbox.DependencyStatus{Status: sandbox.DependencyFailed, Error: "no index"}}
	var callErr error
	rt.run = func(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
		_, callErr = spec.Calls(ctx, sandbox.Call{Method: pipInstall, Args: json.RawMessage(`{"requirements": ["tinypkg==1.0"]}`)})
		return sandbox.Result{Outcome: sandbox.OutcomeOK}, nil
	}
	s := NewService(rt, Hooks{}, testConfig(), nil)
	var deps []sandbox.DependencyStatus
	if _, err := s.Execute(t.Context(), sandbox.Request{Code: "x"}, func(e sandbox.Event) {
		if e.Dependency != nil {
			deps = append(deps, *e.Dependency)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if callErr == nil || !strings.Contains(callErr.Error(), "tinypkg==1.0: no index") || len(deps) != 0 {
		t.Fatalf("the call's error %v, the dependency events %+v: want the error naming the requirement, no event", callErr, deps)
	}
}
