package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

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

// H56: one agent's long runs do not hold every slot. Before, an agent's three runs of ten
// minutes took all three slots, and another agent's print(1) waited until one of them ended
// (4 min 40 s in the attack). Now the agent's long runs take all slots but one, its third waits
// with the last slot free, and the other agent's run starts at once: it waits for none of the
// first agent's runs. A lone agent's short runs (default timeout) still use every slot; with
// the last slot held by one of them, the other agent waits for that short run only, and then
// goes before the first agent's queued long run. Measured in runs waited for, never in time.
func TestLongRunsLeaveASlotForOthers(t *testing.T) {
	rt := newGatedRuntime()
	cfg := testConfig()
	cfg.Slots, cfg.QueueLength, cfg.ExecutionsPerAgent = 3, 8, 8
	s := NewService(&rt.fakeRuntime, Hooks{}, cfg, nil)
	var wg sync.WaitGroup
	defer wg.Wait()
	long := ms(cfg.MaxTimeout.Milliseconds())
	execute := func(agent, code string, timeout *int64) {
		wg.Go(func() {
			if _, err := s.Execute(t.Context(), sandbox.Request{Agent: agent, Code: code, TimeoutMS: timeout}, nil); err != nil {
				t.Errorf("%s: %v", code, err)
			}
		})
	}
	held := func(agent string) int {
		s.slots.mu.Lock()
		defer s.slots.mu.Unlock()
		return s.slots.held[agent]
	}
	longs := map[string]bool{"long1": true, "long2": true, "long3": true}
	for c := range longs {
		execute("mallory", c, long)
	}
	first, second := <-rt.started, <-rt.started
	delete(longs, first)
	delete(longs, second)
	var queued string
	for c := range longs {
		queued = c
	}
	waitFor(t, func() bool { return s.Stats().Waiting == 1 })
	if st := s.Stats(); st.Busy != 2 || held("mallory") != 2 {
		t.Fatalf("mallory's three long runs: stats %+v, mallory holds %d; want 2 slots taken, the third waiting", st, held("mallory"))
	}
	// alice's run starts while all of mallory's long runs go on: none ended for it.
	execute("alice", "print1", nil)
	if got := <-rt.started; got != "print1" {
		t.Fatalf("%s started; want alice's print1, in the slot mallory's long runs leave", got)
	}
	close(rt.gate("print1"))
	waitFor(t, func() bool { return held("alice") == 0 && s.Stats().Busy == 2 })

	// A short run of mallory's may take the last slot (a lone agent uses every slot)...
	execute("mallory", "short", nil)
	if got := <-rt.started; got != "short" {
		t.Fatalf("%s started; want mallory's short run in the last slot", got)
	}
	// ...and alice then waits for that one short run, then goes before mallory's queued long run.
	execute("alice", "print2", nil)
	waitFor(t, func() bool { return s.Stats().Waiting == 2 })
	close(rt.gate("short"))
	if got := <-rt.started; got != "print2" {
		t.Fatalf("after mallory's short run, %s started; want alice's print2 (%s waits for one of mallory's own slots)", got, queued)
	}
	close(rt.gate("print2"))
	close(rt.gate(first))
	if got := <-rt.started; got != queued {
		t.Fatalf("after %s ended, %s started; want %s", first, got, queued)
	}
	close(rt.gate(second))
	close(rt.gate(queued))
}

// waitFor waits up to 10 s for ok to hold, failing t otherwise.
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
