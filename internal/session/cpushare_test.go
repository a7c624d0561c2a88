package session

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/testenv/logbuf"
)

// weighedBox is a fakeBox that records the CPU weight it is given, and how many times. Once
// closed it refuses a weight, as the engine refuses to update a container being removed; with
// gate set, a weighing says so on entered and waits for gate first; with refuse set, the
// engine refuses it.
type weighedBox struct {
	*fakeBox
	weight  int64
	sets    int
	gate    chan struct{}
	entered chan struct{}
	refuse  bool
}

func (b *weighedBox) SetCPUWeight(_ context.Context, shares int64) error {
	b.mu.Lock()
	gate, entered := b.gate, b.entered
	b.mu.Unlock()
	if gate != nil {
		entered <- struct{}{}
		<-gate
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return errors.New(`Error response from daemon: container is marked for removal and cannot be "update"`)
	case b.refuse:
		return errors.New("the engine refused the update")
	}
	b.weight = shares
	b.sets++
	return nil
}

func (b *weighedBox) weighings() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sets
}

func (b *weighedBox) cpuWeight() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.weight
}

type weighingOpener struct{ boxes chan *weighedBox }

func (o *weighingOpener) OpenSession(context.Context, string) (sandbox.SessionBox, error) {
	b := &weighedBox{fakeBox: newFakeBox(), weight: sandbox.DefaultCPUWeight} // as a new container
	o.boxes <- b
	return b, nil
}

// TestAgentsShareTheCPUFairly: an agent's live sessions together weigh one slot's CPU (each
// sandbox.DefaultCPUWeight/n), whatever another agent has, and the share grows back as its
// sessions end: two of one agent's busy sessions weighed twice another agent's run, and made it
// 3× slower (issue 51, item 8). A lone session keeps its box's first weight without an
// engine call, which would only compete with its first call.
func TestAgentsShareTheCPUFairly(t *testing.T) {
	op := &weighingOpener{boxes: make(chan *weighedBox, 8)}
	m := newKeeper(newService(engine.Hooks{}), op, nil, DefaultConfig())
	defer m.Shutdown(context.Background())
	create := func(agent string) (sandbox.SessionInfo, *weighedBox) {
		t.Helper()
		s, err := m.Create(t.Context(), sandbox.SessionRequest{Agent: agent})
		if err != nil {
			t.Fatal(err)
		}
		return s, <-op.boxes
	}
	a1, box1 := create("alice")
	_, box2 := create("alice")
	_, box3 := create("bob")
	waitFor(t, func() bool { return box1.cpuWeight() == 512 && box2.cpuWeight() == 512 && box3.cpuWeight() == 1024 })
	if _, err := m.Close(t.Context(), "alice", a1.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return box2.cpuWeight() == 1024 })
	if w := box3.cpuWeight(); w != 1024 {
		t.Fatalf("bob's session weighs %d after alice's closed one, want 1024", w)
	}
	if n := box3.weighings(); n != 0 {
		t.Errorf("bob's lone session was weighed %d times; its box already had a slot's weight", n)
	}
}

// TestWeighingABoxGoneIsNoFault: a weighing that meets a session's box its session let go
// meanwhile (the session ended, the engine removing its container) is no fault and logs no
// warning (a new user's daemon warned "weighing a session's CPU ... marked for removal" at
// every close of one of two sessions); a box its session still holds that the engine refuses
// still does.
func TestWeighingABoxGoneIsNoFault(t *testing.T) {
	logs := &logbuf.Buffer{}
	op := &weighingOpener{boxes: make(chan *weighedBox, 8)}
	m := &keeper{New(newService(engine.Hooks{}), op, nil, DefaultConfig(), slog.New(slog.NewTextHandler(logs, nil)))}
	defer m.Shutdown(context.Background())
	create := func() (sandbox.SessionInfo, *weighedBox) {
		t.Helper()
		s, err := m.Create(t.Context(), sandbox.SessionRequest{Agent: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		return s, <-op.boxes
	}
	a1, box1 := create()
	a2, box2 := create()
	waitFor(t, func() bool { return box1.cpuWeight() == 512 && box2.cpuWeight() == 512 })

	// a1 closes: the weighing of a2's box to 1024 waits while a2 closes too.
	box2.mu.Lock()
	box2.gate, box2.entered = make(chan struct{}), make(chan struct{})
	box2.mu.Unlock()
	if _, err := m.Close(t.Context(), "alice", a1.ID); err != nil {
		t.Fatal(err)
	}
	<-box2.entered
	if _, err := m.Close(t.Context(), "alice", a2.ID); err != nil {
		t.Fatal(err)
	}
	<-box2.Done()
	close(box2.gate)

	// A held box the engine refuses is still a warning.
	a3, box3 := create()
	_, box4 := create()
	waitFor(t, func() bool { return box3.cpuWeight() == 512 && box4.cpuWeight() == 512 })
	box4.mu.Lock()
	box4.refuse = true
	box4.mu.Unlock()
	if _, err := m.Close(t.Context(), "alice", a3.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Contains(logs.String(), "the engine refused the update") })
	if n := strings.Count(logs.String(), "weighing a session's CPU"); n != 1 {
		t.Errorf("%d warnings of a weighing, want 1 (the held box the engine refused):\n%s", n, logs.String())
	}
}
