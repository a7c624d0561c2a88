package docker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/errclass"
)

// flakyFreezer is an engine whose pause fails with fail until it has failed failures times.
type flakyFreezer struct {
	fail             error
	failures         int
	pauses, unpauses int
}

func (f *flakyFreezer) ContainerPause(ctx context.Context, id string, _ client.ContainerPauseOptions) (client.ContainerPauseResult, error) {
	f.pauses++
	if f.pauses <= f.failures {
		return client.ContainerPauseResult{}, f.fail
	}
	return client.ContainerPauseResult{}, nil
}

func (f *flakyFreezer) ContainerUnpause(ctx context.Context, id string, _ client.ContainerUnpauseOptions) (client.ContainerUnpauseResult, error) {
	f.unpauses++
	return client.ContainerUnpauseResult{}, nil
}

func (f *flakyFreezer) ContainerInspect(ctx context.Context, id string, _ client.ContainerInspectOptions) (client.ContainerInspectResult, error) {
	return client.ContainerInspectResult{Container: container.InspectResponse{State: &container.State{}}}, nil
}

// lateEngine is Docker as it records a container's pause: at once when a pause or resume
// answers, and again when containerd's event for it arrives, one event every lag inspections.
type lateEngine struct {
	paused  bool   // the engine's record
	pending []bool // containerd's events not yet recorded
	lag     int
	seen    int
}

func (e *lateEngine) ContainerPause(ctx context.Context, id string, _ client.ContainerPauseOptions) (client.ContainerPauseResult, error) {
	if e.paused {
		return client.ContainerPauseResult{}, fmt.Errorf("Container %s is already paused: %w", id, cerrdefs.ErrConflict)
	}
	e.paused, e.pending = true, append(e.pending, true)
	return client.ContainerPauseResult{}, nil
}

func (e *lateEngine) ContainerUnpause(ctx context.Context, id string, _ client.ContainerUnpauseOptions) (client.ContainerUnpauseResult, error) {
	if !e.paused {
		return client.ContainerUnpauseResult{}, fmt.Errorf("Container %s is not paused", id)
	}
	e.paused, e.pending = false, append(e.pending, false)
	return client.ContainerUnpauseResult{}, nil
}

func (e *lateEngine) ContainerInspect(ctx context.Context, id string, _ client.ContainerInspectOptions) (client.ContainerInspectResult, error) {
	if e.seen++; len(e.pending) > 0 && e.seen >= e.lag {
		e.paused, e.pending, e.seen = e.pending[0], e.pending[1:], 0
	}
	return client.ContainerInspectResult{Container: container.InspectResponse{State: &container.State{Paused: e.paused}}}, nil
}

// TestPauseAndResumeOutlastLateEvents: a resume whose pause's record the last resume's late
// event turned back ("Container … is not paused"; TestSessionSuiteRunsc/PauseAndResume, 4
// December 2026), and a pause whose resume's record the last pause's late event turned back
// ("is already paused"), wait for the engine's record and succeed.
func TestPauseAndResumeOutlastLateEvents(t *testing.T) {
	// Paused; the record reads running; this pause's own event is still to come.
	e := &lateEngine{paused: false, pending: []bool{true}, lag: 3}
	if err := thaw(t.Context(), e, "c0ffee"); err != nil || e.paused {
		t.Fatalf("resume after a late event: %v (record paused %t)", err, e.paused)
	}
	// Running; the record reads paused; this resume's own event is still to come.
	e = &lateEngine{paused: true, pending: []bool{false}, lag: 3}
	if err := freeze(t.Context(), e, "c0ffee", time.Millisecond); err != nil || !e.paused {
		t.Fatalf("pause after a late event: %v (record paused %t)", err, e.paused)
	}
}

// TestFreezeTriesAgain: a freeze the engine could not finish is thawed and tried again, up to
// freezeTries times, and only then answered, as unavailable and in sandpit's words; an error no
// try would mend is answered at once. Before, POST …/pause answered 503 "OCI runtime pause
// failed: unable to freeze" about once in seven tries at load 10.
func TestFreezeTriesAgain(t *testing.T) {
	unable := errors.New("Error response from daemon: Cannot pause container c0ffee: OCI runtime pause failed: unable to freeze: unknown")
	for _, c := range []struct {
		name              string
		fail              error
		failures          int
		wantErr           bool
		pauses, unpauses  int
		wantClass, inText string
	}{
		{"settles on the third try", unable, 2, false, 3, 2, "", ""},
		{"never settles", unable, 99, true, freezeTries, freezeTries, "unavailable", "could not freeze its processes in 5 tries"},
		{"not running", fmt.Errorf("container c0ffee is not running: %w", cerrdefs.ErrConflict), 99, true, 1, 0, "", "is not running"},
		{"gone", fmt.Errorf("no such container: %w", cerrdefs.ErrNotFound), 99, true, 1, 0, "", "no such container"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &flakyFreezer{fail: c.fail, failures: c.failures}
			err := freeze(t.Context(), f, "c0ffee", time.Millisecond)
			if (err != nil) != c.wantErr || f.pauses != c.pauses || f.unpauses != c.unpauses {
				t.Fatalf("freeze: %v after %d pauses and %d thaws; want error %v after %d and %d", err, f.pauses, f.unpauses, c.wantErr, c.pauses, c.unpauses)
			}
			if err == nil {
				return
			}
			if !strings.Contains(err.Error(), c.inText) || !strings.Contains(err.Error(), "pausing session container") {
				t.Errorf("the error %q does not say %q", err, c.inText)
			}
			if c.wantClass != "" && errclass.Of(err) != errclass.Unavailable {
				t.Errorf("the error is of class %v, want unavailable", errclass.Of(err))
			}
		})
	}

	// A request that ends meanwhile stops the tries.
	ctx, cancel := context.WithCancel(t.Context())
	f := &flakyFreezer{fail: unable, failures: 99}
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	if err := freeze(ctx, f, "c0ffee", time.Hour); err == nil || f.pauses != 1 {
		t.Fatalf("freeze with its request ended: %v after %d pauses", err, f.pauses)
	}
}
