package slotpool

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/control"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// failing is a backend whose every connect fails; down is what Unreachable says.
type failing struct {
	connects atomic.Int64
	down     error
}

func (f *failing) Connect(context.Context, int, bool, *slog.Logger) (*control.Line, string, error) {
	f.connects.Add(1)
	return nil, "", errors.New("the image is missing")
}

func (f *failing) Unreachable(context.Context) error { return f.down }

func newPool(b Backend, readyWait time.Duration) *Pool {
	return New(Config{Slots: 2, ReadyWait: readyWait, SettleTimeout: time.Second, ConnectTimeout: time.Second},
		b, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func TestCurrentOfASlotThatDoesNotExist(t *testing.T) {
	p := newPool(&failing{}, time.Second)
	defer p.Close()
	_, _, err := p.Current(context.Background(), 2)
	if !errors.Is(err, sandbox.ErrNotReady) || !strings.Contains(err.Error(), "slots 0 to 1") {
		t.Fatalf("Current(2) = %v, want ErrNotReady naming slots 0 to 1", err)
	}
	if err := p.Settle(context.Background(), -1); err == nil {
		t.Fatal("Settle(-1) succeeded")
	}
}

// While the engine does not answer and no slot is up, a run is refused at once with the
// engine's error, not after ReadyWait.
func TestUnreachableEngineFailsAtOnce(t *testing.T) {
	b := &failing{down: errors.New("cannot reach the engine")}
	p := newPool(b, time.Minute)
	defer p.Close()
	p.Supervise()
	deadline := time.Now().Add(10 * time.Second)
	for b.connects.Load() < 2 && time.Now().Before(deadline) { // it retries with backoff
		time.Sleep(10 * time.Millisecond)
	}
	if n := b.connects.Load(); n < 2 {
		t.Fatalf("%d connects in 10 s, want retries", n)
	}
	start := time.Now()
	_, _, err := p.Current(context.Background(), 1)
	if !errors.Is(err, sandbox.ErrNotReady) || !strings.Contains(err.Error(), "cannot reach the engine") {
		t.Fatalf("Current = %v, want ErrNotReady with the engine's error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Current took %v with the engine down, want at once", d)
	}
	if err := p.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "cannot reach the engine") {
		t.Fatalf("Ready = %v, want the engine's error", err)
	}
}

// An engine that answers while a slot's sandbox cannot be made: a run waits ReadyWait, then
// gets the connect's error.
func TestConnectErrorAfterReadyWait(t *testing.T) {
	p := newPool(&failing{}, 300*time.Millisecond)
	defer p.Close()
	p.Supervise()
	_, _, err := p.Current(context.Background(), 0)
	for i := 0; err != nil && !strings.Contains(err.Error(), "the image is missing") && i < 20; i++ {
		_, _, err = p.Current(context.Background(), 0) // the first may come before the first failure
	}
	if !errors.Is(err, sandbox.ErrNotReady) || !strings.Contains(err.Error(), "the image is missing") {
		t.Fatalf("Current = %v, want ErrNotReady with the connect's error", err)
	}
	if w := p.Warmth(); w.Slots != 2 || w.Up != 0 {
		t.Fatalf("Warmth = %+v, want 2 slots, none up", w)
	}
	if p.Up(0) || p.Up(1) || p.Up(2) {
		t.Fatalf("Up: slot 0 %v, 1 %v, 2 (none) %v; want none up", p.Up(0), p.Up(1), p.Up(2))
	}
}
