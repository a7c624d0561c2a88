package docker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
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
