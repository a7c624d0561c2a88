package session

import (
	"context"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// weighedBox is a fakeBox that records the CPU weight it is given, and how many times.
type weighedBox struct {
	*fakeBox
	weight int64
	sets   int
}

func (b *weighedBox) SetCPUWeight(_ context.Context, shares int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
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
