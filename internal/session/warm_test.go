package session

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// TestWarmSessionsAreNobodysUntilAdopted: a warm session cannot be made, read, run in, closed
// or used by any client naming its owner (a client that could would plant code in another
// agent's future sandbox); Adopt hands it to one agent, within that agent's cap.
func TestWarmSessionsAreNobodysUntilAdopted(t *testing.T) {
	svc := newService(engine.Hooks{})
	cfg := DefaultConfig()
	m := newKeeper(svc, &fakeOpener{}, nil, cfg)
	defer m.Shutdown(context.Background())
	ctx := t.Context()
	if _, err := m.Create(ctx, sandbox.SessionRequest{Agent: WarmAgent}); !errors.Is(err, errclass.Invalid) {
		t.Fatalf("a client creating a session for %q: %v", WarmAgent, err)
	}
	w, err := m.CreateWarm(ctx, sandbox.SessionRequest{}, "x = 1")
	if err != nil {
		t.Fatal(err)
	}
	if w.Agent != WarmAgent || w.Calls != 1 {
		t.Fatalf("warm session: %+v", w)
	}
	for name, call := range map[string]func() error{
		"Get": func() error { _, err := m.Get(ctx, WarmAgent, w.ID); return err },
		"Execute": func() error {
			_, err := m.Execute(ctx, w.ID, sandbox.Request{Agent: WarmAgent, Code: "x = 2"}, true, nil)
			return err
		},
		"Close": func() error { _, err := m.Close(ctx, WarmAgent, w.ID); return err },
		"Command": func() error {
			_, err := m.Command(ctx, WarmAgent, w.ID, CommandRequest{Cmd: "true"}, nil)
			return err
		},
	} {
		if err := call(); err == nil {
			t.Errorf("%s as %q reached the warm session", name, WarmAgent)
		}
	}
	if got := m.List(WarmAgent); len(got) != 0 {
		t.Errorf("List(%q) hands out %d warm sessions", WarmAgent, len(got))
	}
	if _, err := m.Adopt(ctx, w.ID, "Not Valid"); err == nil {
		t.Error("adopted by an invalid agent name")
	}
	// An agent at its cap cannot take it.
	for range cfg.MaxPerAgent {
		if _, err := m.Create(ctx, sandbox.SessionRequest{Agent: "full"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Adopt(ctx, w.ID, "full"); !errors.Is(err, errclass.Busy) {
		t.Errorf("adopted past the agent's cap: %v", err)
	}
	w2, err := m.CreateWarm(ctx, sandbox.SessionRequest{}, "x = 1")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := m.CloseWarm(ctx, w2.ID); err != nil || info.State != sandbox.SessionEnded {
		t.Errorf("CloseWarm: %+v %v", info, err)
	}
	got, err := m.Adopt(ctx, w.ID, "alice")
	if err != nil || got.Agent != "alice" {
		t.Fatalf("Adopt: %+v %v", got, err)
	}
	if _, err := m.Execute(ctx, w.ID, sandbox.Request{Agent: "alice", Code: "y = 1"}, true, nil); err != nil {
		t.Errorf("alice's call in her adopted session: %v", err)
	}
	if _, err := m.Adopt(ctx, w.ID, "bob"); !errors.Is(err, sandbox.ErrSessionNotFound) {
		t.Errorf("adopted twice: %v", err)
	}
	if _, err := m.Get(ctx, "bob", w.ID); err == nil {
		t.Error("bob reads alice's adopted session")
	}
}

// TestWarmSessionsGiveWayAtTheCap: at sessions_max, a session asked for closes an idle warm
// one instead of answering 429 (a daemon's E2B pool took the last place, and a REST client's
// fourth session was refused with three live).
func TestWarmSessionsGiveWayAtTheCap(t *testing.T) {
	svc := newService(engine.Hooks{})
	cfg := DefaultConfig()
	cfg.MaxTotal = 1
	m := newKeeper(svc, &fakeOpener{}, nil, cfg)
	defer m.Shutdown(context.Background())
	ctx := t.Context()
	w, err := m.CreateWarm(ctx, sandbox.SessionRequest{}, "x = 1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, sandbox.SessionRequest{Agent: "alice"}); err != nil {
		t.Fatalf("alice's session at the cap with a warm one idle: %v", err)
	}
	if _, err := m.Adopt(ctx, w.ID, "bob"); !errors.Is(err, sandbox.ErrSessionNotFound) {
		t.Errorf("the warm session is still there to adopt: %v", err)
	}
	if _, err := m.Create(ctx, sandbox.SessionRequest{Agent: "bob"}); !errors.Is(err, errclass.Busy) {
		t.Errorf("bob's session with no warm one to close: %v, want the cap", err)
	}
}

// agentsRecorder keeps the agents of the ledger's records.
type agentsRecorder struct {
	mu      sync.Mutex
	begun   []string
	results []string
}

func (a *agentsRecorder) Begin(_ context.Context, _ sandbox.Spec, head sandbox.Result) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.begun = append(a.begun, head.Agent)
	return nil
}

func (a *agentsRecorder) Finish(_ context.Context, res sandbox.Result) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.results = append(a.results, res.Agent)
	return nil
}

func (a *agentsRecorder) Discard(context.Context, string) error { return nil }

// TestWarmUpIsNotRecorded: a warm session's warm-up is the daemon's own call in a sandbox no
// agent holds, and the ledger keeps no record of it (a new user found `~warm` executions
// filling `exec list`, and they counted against the ledger's bounds as an agent's); the
// adopting agent's calls are recorded as its own.
func TestWarmUpIsNotRecorded(t *testing.T) {
	rec := &agentsRecorder{}
	m := newKeeper(newService(engine.Hooks{Recorder: rec}), &fakeOpener{}, nil, DefaultConfig())
	defer m.Shutdown(context.Background())
	ctx := t.Context()
	w, err := m.CreateWarm(ctx, sandbox.SessionRequest{}, "x = 1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Adopt(ctx, w.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Execute(ctx, w.ID, sandbox.Request{Agent: "alice", Code: "y = 1"}, true, nil); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !slices.Equal(rec.begun, []string{"alice"}) || !slices.Equal(rec.results, []string{"alice"}) {
		t.Errorf("the ledger recorded calls of %v (results %v), want alice's one", rec.begun, rec.results)
	}
}
