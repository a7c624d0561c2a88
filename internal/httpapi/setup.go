package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit/internal/setup"
)

// SetupRunner runs setup on the daemon's machine, sending each step's events to emit.
type SetupRunner func(ctx context.Context, emit func(setup.Event)) error

// runSetup streams setup's events as NDJSON, one {step, status, message, progress} per line,
// ending with the step "setup" done or failed.
func (a *api) runSetup(w http.ResponseWriter, r *http.Request) {
	if _, err := mediaType(r, "send no body, or JSON", "application/json"); err != nil {
		writeError(w, err)
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", NDJSONContentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	write := func(e setup.Event) {
		b, _ := marshal(e)
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, _ = w.Write(b)
		_ = rc.Flush()
	}
	err := a.setup(r.Context(), write)
	last := setup.Event{Step: "setup", Status: setup.Done, Message: "the sandbox is ready", Progress: 1}
	if err != nil {
		last = setup.Event{Step: "setup", Status: setup.Failed, Message: err.Error()}
	}
	write(last)
}
