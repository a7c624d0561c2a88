package httpapi

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/setup"
)

// SetupRunner runs setup on the daemon's machine, sending each step's events to emit.
type SetupRunner func(ctx context.Context, emit func(setup.Event)) error

// runSetup streams setup's events as NDJSON, one {step, status, message, progress} per line,
// ending with the step "setup" done or failed.
func (a *api) runSetup(w http.ResponseWriter, r *http.Request) {
	if err := readNoFields(w, r); err != nil {
		writeError(w, err)
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", apitype.NDJSONContentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	write := func(e setup.Event) {
		b, _ := marshal(SetupEventOf(e))
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

// maxEmptyBody is the largest body readNoFields reads.
const maxEmptyBody = 4 << 10

// readNoFields checks the body of a request that takes no fields: none, white space or an
// empty JSON object; anything else is a 400 naming what was sent (an unknown field, say), as
// every other endpoint refuses unknown fields. Errors are answered by writeError.
func readNoFields(w http.ResponseWriter, r *http.Request) error {
	if _, err := mediaType(r, "send no body, or {} as JSON", "application/json"); err != nil {
		return err
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxEmptyBody))
	if err != nil {
		return bodyError(err, shape{example: "{}"})
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	return decodeBody(b, &struct{}{}, shape{example: "{}"})
}
