package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// gatedRuntime runs each program until its code's gate is closed, and says on started which
// code began.
type gatedRuntime struct {
	fakeRuntime
	mu      sync.Mutex
	gates   map[string]chan struct{}
	started chan string
}

func newGatedRuntime() *gatedRuntime {
	g := &gatedRuntime{gates: map[string]chan struct{}{}, started: make(chan string, 64)}
	g.run = func(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
		g.started <- spec.Code
		select {
		case <-g.gate(spec.Code):
		case <-ctx.Done():
		}
		return sandbox.Result{Outcome: sandbox.OutcomeOK}, nil
	}
	return g
}

func (g *gatedRuntime) gate(code string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates[code] == nil {
		g.gates[code] = make(chan struct{})
	}
	return g.gates[code]
}

// An agent with many runs cannot take every place: past executions_per_agent (running plus
// queued) it gets a BusyError naming it, the limit and the key, while another agent still
// finds a place in the queue; and a freed slot goes to the agent that holds none before the
// first agent's earlier requests.
func TestExecutionsPerAgent(t *testing.T) {
	rt := newGatedRuntime()
	cfg := testConfig()
	cfg.Slots, cfg.QueueLength, cfg.ExecutionsPerAgent = 2, 4, 4
	s := NewService(&rt.fakeRuntime, Hooks{}, cfg, nil)
	var wg sync.WaitGroup
	defer wg.Wait()
	errs := make(chan error, 16)
	execute := func(agent, code string) {
		wg.Go(func() {
			_, err := s.Execute(t.Context(), sandbox.Request{Agent: agent, Code: code}, nil)
			errs <- err
		})
	}
	execute("a", "a1")
	execute("a", "a2")
	<-rt.started
	<-rt.started
	execute("a", "a3")
	waitFor(t, func() bool { return s.Stats().Waiting == 1 })
	execute("a", "a4")
	waitFor(t, func() bool { return s.Stats().Waiting == 2 })

	_, err := s.Execute(t.Context(), sandbox.Request{Agent: "a", Code: "a5"}, nil)
	var busy *sandbox.BusyError
	if !errors.As(err, &busy) || busy.Agent != "a" || busy.PerAgent != 4 || busy.RetryAfter <= 0 {
		t.Fatalf("a's fifth execution: %v; want a BusyError for agent a, limit 4", err)
	}
	for _, want := range []string{`agent "a"`, "4 executions", "executions_per_agent"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// b still has a place in the queue, behind a's two.
	execute("b", "b1")
	waitFor(t, func() bool { return s.Stats().Waiting == 3 })
	close(rt.gate("a1"))
	if got := <-rt.started; got != "b1" {
		t.Fatalf("the freed slot went to %s; want b1 (agent b holds no slot, a holds one)", got)
	}
	// b holds one slot and a one: the next freed slot goes to a's first queued request.
	close(rt.gate("b1"))
	if got := <-rt.started; got != "a3" {
		t.Fatalf("the next freed slot went to %s; want a3", got)
	}
	for _, c := range []string{"a2", "a3", "a4"} {
		close(rt.gate(c))
	}
	for range 5 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if st := s.Stats(); st.Busy != 0 || st.Waiting != 0 || len(s.slots.held) != 0 || len(s.slots.queue) != 0 {
		t.Fatalf("after every run: stats %+v, held %v, queue %v; want all zero", st, s.slots.held, s.slots.queue)
	}
}

// A lone agent may use every slot (the cap leaves room for others, it does not idle slots),
// and a request that gives up while queued leaves no count behind.
func TestLoneAgentUsesEverySlot(t *testing.T) {
	rt := newGatedRuntime()
	cfg := testConfig()
	cfg.Slots, cfg.QueueLength = 3, 4
	cfg.ExecutionsPerAgent = DefaultExecutionsPerAgent(cfg.Slots, cfg.QueueLength) // 2 + 2
	s := NewService(&rt.fakeRuntime, Hooks{}, cfg, nil)
	var wg sync.WaitGroup
	for _, c := range []string{"1", "2", "3"} {
		wg.Go(func() { _, _ = s.Execute(t.Context(), sandbox.Request{Code: c}, nil) })
	}
	for range 3 {
		<-rt.started
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { _, err := s.Execute(ctx, sandbox.Request{Code: "4"}, nil); done <- err }()
	waitFor(t, func() bool { return s.Stats().Waiting == 1 })
	if _, err := s.Execute(t.Context(), sandbox.Request{Code: "5"}, nil); !errors.As(err, new(*sandbox.BusyError)) {
		t.Fatalf("fifth execution of agent default: %v; want BusyError (limit 4)", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled queued execution: %v", err)
	}
	s.slots.mu.Lock()
	if s.slots.waiting("default") != 0 || s.slots.held["default"] != 3 {
		t.Errorf("held %v, queued %v; want default holding 3, none queued", s.slots.held, s.slots.waiting("default"))
	}
	s.slots.mu.Unlock()
	for _, c := range []string{"1", "2", "3"} {
		close(rt.gate(c))
	}
	wg.Wait()
}
