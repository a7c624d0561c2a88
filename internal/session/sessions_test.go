package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// fakeBox is a session sandbox whose calls block until release is closed (when block is set).
type fakeBox struct {
	// Workspace is nil: these tests use no command or file (commandBox in workspace_test.go
	// runs commands).
	sandbox.Workspace
	mu      sync.Mutex
	calls   []string
	release chan struct{}
	done    chan struct{}
	closed  bool
	// startFails makes the interpreter's start (the daemon's own call) fail with this stderr.
	startFails string
	// lost, when set, is why the box stops by itself at the next call, which it never takes.
	lost error
}

func newFakeBox() *fakeBox { return &fakeBox{release: make(chan struct{}), done: make(chan struct{})} }

func (b *fakeBox) Run(ctx context.Context, spec sandbox.Spec, emit func(sandbox.Event)) (sandbox.Result, error) {
	if !spec.Session {
		return sandbox.Result{}, errors.New("a session's call without Session set")
	}
	b.mu.Lock()
	b.calls = append(b.calls, spec.Code)
	fails, lost := b.startFails, b.lost
	if lost != nil && !b.closed {
		b.closed = true
		close(b.done)
	}
	b.mu.Unlock()
	if lost != nil {
		return sandbox.Result{}, fmt.Errorf("%w: the control line to the executor ended", sandbox.ErrNotReady)
	}
	if spec.Internal && fails != "" {
		return sandbox.Result{Outcome: sandbox.OutcomeTimeout, StartedAt: time.Now(), SessionEnded: sandbox.EndExited,
			Reason: "the run passed its timeout", Stderr: fails}, nil
	}
	if spec.Code == "oom" { // a call that ends the session
		return sandbox.Result{Outcome: sandbox.OutcomeMemoryLimit, StartedAt: time.Now(), SessionEnded: sandbox.EndMemoryLimit, Reason: "out of memory"}, nil
	}
	if spec.Code == "block" {
		select {
		case <-b.release:
		case <-ctx.Done():
			return sandbox.Result{}, ctx.Err()
		}
	}
	return sandbox.Result{Outcome: sandbox.OutcomeOK, StartedAt: time.Now()}, nil
}

func (b *fakeBox) Install(context.Context, sandbox.InstallRequest, func(sandbox.DependencyStatus)) (sandbox.Installed, error) {
	return sandbox.Installed{}, nil
}

func (b *fakeBox) Done() <-chan struct{} { return b.done }

func (b *fakeBox) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lost
}

func (b *fakeBox) Close(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		close(b.done)
	}
	return nil
}

type fakeOpener struct {
	mu    sync.Mutex
	boxes []*fakeBox
}

func (o *fakeOpener) OpenSession(context.Context, string) (sandbox.SessionBox, error) {
	b := newFakeBox()
	o.mu.Lock()
	o.boxes = append(o.boxes, b)
	o.mu.Unlock()
	return b, nil
}

// TestACallThatMeetsALostSandboxSaysWhy: a call that finds its session's sandbox stopped by
// itself ends the session with why it stopped, as the session's end without a call does (a
// helper, 7 December 2026: a pod's node lost as a call came ended its session "sandbox is not
// ready: the control line to the executor ended", not naming the node).
func TestACallThatMeetsALostSandboxSaysWhy(t *testing.T) {
	op := &fakeOpener{}
	m := newKeeper(newService(engine.Hooks{}), op, nil, DefaultConfig())
	defer m.Shutdown(context.Background())
	s, err := m.Create(t.Context(), sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Execute(t.Context(), s.ID, sandbox.Request{Agent: "a", Code: "x = 1"}, true, nil); err != nil {
		t.Fatal(err)
	}
	box := op.boxes[len(op.boxes)-1]
	box.mu.Lock()
	box.lost = errors.New("the sandbox pod's node n2 did not answer")
	box.mu.Unlock()
	_, err = m.Execute(t.Context(), s.ID, sandbox.Request{Agent: "a", Code: "x"}, true, nil)
	if err == nil || !strings.Contains(err.Error(), "node n2 did not answer") {
		t.Fatalf("the call = %v; want the session ended, naming why its sandbox stopped", err)
	}
}

// TestFirstCallStartsTheInterpreter: a session's first call is preceded by the interpreter's
// start, a call of the daemon's own with a timeout of its own (the user's call's timeout
// counted the cold start, and an interrupt in it ended the session); a start that fails ends
// the session saying so, with what the interpreter wrote.
func TestFirstCallStartsTheInterpreter(t *testing.T) {
	svc := newService(engine.Hooks{})
	op := &fakeOpener{}
	m := newKeeper(svc, op, nil, DefaultConfig())
	defer m.Shutdown(context.Background())
	ms := int64(1)
	for _, fails := range []string{"", "Traceback (most recent call last):\nKeyboardInterrupt\n"} {
		s, err := m.Create(t.Context(), sandbox.SessionRequest{Agent: "a"})
		if err != nil {
			t.Fatal(err)
		}
		box := op.boxes[len(op.boxes)-1]
		box.startFails = fails
		for range 2 {
			_, err = m.Execute(t.Context(), s.ID, sandbox.Request{Agent: "a", Code: "x = 1", TimeoutMS: &ms}, true, nil)
		}
		box.mu.Lock()
		calls := box.calls
		box.mu.Unlock()
		if fails == "" {
			if err != nil || !slices.Equal(calls, []string{"pass", "x = 1", "x = 1"}) {
				t.Errorf("calls %q (%v), want the start, then the two calls", calls, err)
			}
			continue
		}
		ended, ok := errors.AsType[*sandbox.SessionEndedError](err)
		if !ok || !slices.Equal(calls, []string{"pass"}) || !strings.Contains(ended.Info.Reason, "the session's interpreter did not start") ||
			!strings.Contains(ended.Info.Reason, "KeyboardInterrupt") {
			t.Errorf("a start that fails: calls %q, %v", calls, err)
		}
	}
}

// opened is how many boxes o has opened.
func (o *fakeOpener) opened() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.boxes)
}

// TestSessionsWaiting: calls wait in order; the ninth waiting call, and one that asks not to
// wait, are refused at once.
func TestSessionsWaiting(t *testing.T) {
	svc := newService(engine.Hooks{})
	op := &fakeOpener{}
	m := newKeeper(svc, op, nil, DefaultConfig())
	defer m.Shutdown(context.Background())
	s, err := m.Create(t.Context(), sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	box := op.boxes[0]
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := m.Execute(context.Background(), s.ID, sandbox.Request{Agent: "a", Code: "block"}, true, nil); err != nil {
			t.Errorf("blocking call: %v", err)
		}
	})
	waitFor(t, func() bool { info, _ := m.Get(t.Context(), "a", s.ID); return info.Busy })
	for i := range sandbox.MaxSessionWaiting {
		code := string(rune('0' + i))
		wg.Go(func() {
			if _, err := m.Execute(context.Background(), s.ID, sandbox.Request{Agent: "a", Code: code}, true, nil); err != nil {
				t.Errorf("call %s: %v", code, err)
			}
		})
		waitFor(t, func() bool { info, _ := m.Get(t.Context(), "a", s.ID); return info.Waiting == i+1 })
	}
	_, err = m.Execute(t.Context(), s.ID, sandbox.Request{Agent: "a", Code: "x"}, true, nil)
	if busy, ok := errors.AsType[*sandbox.SessionBusyError](err); !ok || !busy.Full {
		t.Fatalf("a call past the waiting cap: %v", err)
	}
	if _, err := m.Execute(t.Context(), s.ID, sandbox.Request{Agent: "a", Code: "x"}, false, nil); !isBusy(err) {
		t.Fatalf("a call that does not wait: %v", err)
	}
	close(box.release)
	wg.Wait()
	box.mu.Lock()
	defer box.mu.Unlock()
	want := []string{"pass", "block", "0", "1", "2", "3", "4", "5", "6", "7"}
	if len(box.calls) != len(want) {
		t.Fatalf("calls %v, want %v", box.calls, want)
	}
	for i := range want {
		if box.calls[i] != want[i] {
			t.Fatalf("calls ran in the order %v, want %v", box.calls, want)
		}
	}
}

// TestSessionsWaiterGivesUp: a call that stops waiting (its timeout) leaves the queue; the
// calls behind it keep their places and the turn is not lost. The queue is the session's own
// (CI, 6 December: calls that all waited on one channel ran b before c when b was seen
// waiting first, as a goroutine counted itself waiting before it blocked).
func TestSessionsWaiterGivesUp(t *testing.T) {
	op := &fakeOpener{}
	m := newKeeper(newService(engine.Hooks{}), op, nil, DefaultConfig())
	defer m.Shutdown(context.Background())
	s, err := m.Create(t.Context(), sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	box := op.boxes[0]
	info := func() sandbox.SessionInfo { i, _ := m.Get(t.Context(), "a", s.ID); return i }
	var wg sync.WaitGroup
	call := func(code string, timeoutMS int64) error {
		_, err := m.Execute(context.Background(), s.ID, sandbox.Request{Agent: "a", Code: code, TimeoutMS: &timeoutMS}, true, nil)
		return err
	}
	wg.Go(func() {
		if err := call("block", 30_000); err != nil {
			t.Errorf("blocking call: %v", err)
		}
	})
	waitFor(t, func() bool { return info().Busy })
	gaveUp := make(chan error, 1)
	for i, code := range []string{"0", "quitter", "1"} {
		wg.Go(func() {
			if code == "quitter" {
				gaveUp <- call(code, 300)
				return
			}
			if err := call(code, 30_000); err != nil {
				t.Errorf("call %s: %v", code, err)
			}
		})
		waitFor(t, func() bool { return info().Waiting == i+1 })
	}
	err = <-gaveUp
	if busy, ok := errors.AsType[*sandbox.SessionBusyError](err); !ok || busy.Waited == 0 {
		t.Fatalf("a call whose timeout passed while it waited: %v, want a SessionBusyError after its wait", err)
	}
	if n := info().Waiting; n != 2 {
		t.Fatalf("waiting after one gave up: %d, want 2", n)
	}
	close(box.release)
	wg.Wait()
	if err := call("after", 5_000); err != nil {
		t.Fatalf("a call after the queue emptied: %v", err)
	}
	box.mu.Lock()
	defer box.mu.Unlock()
	if want := []string{"pass", "block", "0", "1", "after"}; !slices.Equal(box.calls, want) {
		t.Fatalf("calls ran in the order %v, want %v", box.calls, want)
	}
	if i := info(); i.Waiting != 0 || i.Busy {
		t.Errorf("the session after: waiting %d, busy %v", i.Waiting, i.Busy)
	}
}

// TestSessionsExpiry: an idle session ends by itself and its box is closed; a call then is a
// *SessionEndedError; sessions of another agent are not found.
func TestSessionsExpiry(t *testing.T) {
	svc := newService(engine.Hooks{})
	op := &fakeOpener{}
	m := newKeeper(svc, op, nil, DefaultConfig())
	defer m.Shutdown(context.Background())
	idle := int64(1000)
	s, err := m.Create(t.Context(), sandbox.SessionRequest{Agent: "a", IdleTimeoutMS: &idle})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Execute(t.Context(), s.ID, sandbox.Request{Agent: "b", Code: "x"}, true, nil); !errors.Is(err, sandbox.ErrSessionNotFound) {
		t.Fatalf("another agent's call: %v", err)
	}
	<-op.boxes[0].Done() // closed when it expires
	_, err = m.Execute(t.Context(), s.ID, sandbox.Request{Agent: "a", Code: "x"}, true, nil)
	if ended, ok := errors.AsType[*sandbox.SessionEndedError](err); !ok || ended.Info.EndReason != sandbox.EndIdleTimeout {
		t.Fatalf("a call after the expiry: %v", err)
	}
}

func isBusy(err error) bool {
	_, ok := errors.AsType[*sandbox.SessionBusyError](err)
	return ok
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("the condition never held")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSessionsCountEndingCall: the call that ends a session counts among its calls (the ended
// session said 1 call after 2).
func TestSessionsCountEndingCall(t *testing.T) {
	svc := newService(engine.Hooks{})
	m := newKeeper(svc, &fakeOpener{}, nil, DefaultConfig())
	defer m.Shutdown(context.Background())
	s, err := m.Create(t.Context(), sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range []string{"x = 1", "oom"} {
		if _, err := m.Execute(t.Context(), s.ID, sandbox.Request{Agent: "a", Code: code}, true, nil); err != nil {
			t.Fatalf("call %q: %v", code, err)
		}
	}
	info, err := m.Get(t.Context(), "a", s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.EndReason != sandbox.EndMemoryLimit || info.Calls != 2 {
		t.Errorf("after 2 calls, the second ending it: end %q, calls %d; want memory_limit, 2", info.EndReason, info.Calls)
	}
	// Its history ends with its end (it stopped at "created": a live session's history).
	if h := info.History; len(h) == 0 || info.EndedAt == nil || h[len(h)-1].Event != "ended" || h[len(h)-1].Detail != sandbox.EndMemoryLimit || !h[len(h)-1].At.Equal(*info.EndedAt) {
		t.Errorf("the ended session's history: %+v; want it to end with ended, memory_limit, at its ended_at", h)
	}
}

// heldLedger is a session ledger whose every session is held open by another daemon.
type heldLedger struct{ agent string }

func (heldLedger) BeginSession(context.Context, sandbox.SessionInfo) error { return nil }

func (heldLedger) EndSession(context.Context, sandbox.SessionInfo) error { return nil }

func (l heldLedger) LookupSession(_ context.Context, id string) (sandbox.SessionInfo, error) {
	return sandbox.SessionInfo{ID: id, Agent: l.agent, State: sandbox.SessionActive},
		errclass.Wrap(errclass.NotFound, errors.New("session "+id+" is held by daemon d1 at 10.0.0.1:8765"))
}

// TestSessionsHeldElsewhere: a session another daemon holds is answered with the ledger's
// error naming that daemon (it was "no session; POST … creates one"), to its own agent only.
func TestSessionsHeldElsewhere(t *testing.T) {
	svc := newService(engine.Hooks{})
	m := newKeeper(svc, &fakeOpener{}, heldLedger{agent: "a"}, DefaultConfig())
	defer m.Shutdown(context.Background())
	id := sandbox.NewSessionID()
	_, err := m.Execute(t.Context(), id, sandbox.Request{Agent: "a", Code: "1"}, true, nil)
	if errclass.Of(err) != errclass.NotFound || err == nil || !strings.Contains(err.Error(), "daemon d1 at 10.0.0.1:8765") {
		t.Errorf("its agent: %v, want not found naming daemon d1", err)
	}
	_, err = m.Execute(t.Context(), id, sandbox.Request{Agent: "b", Code: "1"}, true, nil)
	if err == nil || strings.Contains(err.Error(), "d1") || !errors.Is(err, sandbox.ErrSessionNotFound) {
		t.Errorf("another agent: %v, want a plain not found", err)
	}
}

func (heldLedger) UpdateSession(context.Context, sandbox.SessionInfo) error { return nil }

func (heldLedger) HibernatedSessions(context.Context) ([]sandbox.SessionInfo, error) { return nil, nil }

// slowOpener is a fakeOpener whose sandboxes take a while to start.
type slowOpener struct{ fakeOpener }

func (o *slowOpener) OpenSession(ctx context.Context, id string) (sandbox.SessionBox, error) {
	time.Sleep(300 * time.Millisecond)
	return o.fakeOpener.OpenSession(ctx, id)
}

// TestIdleClockStartsWithTheSandbox: a session's idle timeout counts from when its sandbox is
// there, not from the request: a sandbox that took longer to start than the idle timeout
// ended the session before its first call.
func TestIdleClockStartsWithTheSandbox(t *testing.T) {
	m := newKeeper(newService(engine.Hooks{}), &slowOpener{}, nil, DefaultConfig())
	defer m.Shutdown(context.Background())
	idle := int64(1000)
	s, err := m.Create(t.Context(), sandbox.SessionRequest{Agent: "a", IdleTimeoutMS: &idle})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(800 * time.Millisecond) // 1.1 s after the request, 0.8 s after the sandbox
	if _, err := m.Execute(t.Context(), s.ID, sandbox.Request{Agent: "a", Code: "x"}, true, nil); err != nil {
		t.Fatalf("a call within the idle timeout of the sandbox's start: %v", err)
	}
}

// TestRegistryAgents: Agents lists the agents with sessions, ended ones kept included, for the
// console's agent picker.
func TestRegistryAgents(t *testing.T) {
	svc := newService(engine.Hooks{})
	m := newKeeper(svc, &fakeOpener{}, nil, DefaultConfig())
	defer m.Shutdown(context.Background())
	if got := m.Agents(); len(got) != 0 {
		t.Fatalf("Agents with no sessions = %v", got)
	}
	var closeMe string
	for _, a := range []string{"bob", "alice", "bob"} {
		s, err := m.Create(t.Context(), sandbox.SessionRequest{Agent: a})
		if err != nil {
			t.Fatal(err)
		}
		closeMe = s.ID
	}
	if _, err := m.Close(t.Context(), "bob", closeMe); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(m.Agents()); got != "[alice bob]" {
		t.Fatalf("Agents = %s, want [alice bob]", got)
	}
}
