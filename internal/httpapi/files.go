package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"slices"
	"strconv"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// OutputFiles serves the bytes of runs' kept output files; *store.Files satisfies it.
type OutputFiles interface {
	// Open returns the bytes of execution id's output file name; an error wrapping
	// store.ErrEvicted when they are no longer kept.
	Open(ctx context.Context, id, name string) (io.ReadCloser, error)
	// Kept returns the names of execution id's output files whose bytes are kept.
	Kept(ctx context.Context, id string) (map[string]bool, error)
	// Used returns the bytes all kept files take and the quota on them (files_max_bytes).
	Used() (used, quota int64)
}

var _ OutputFiles = (*store.Files)(nil)

// readFile reads execution id's output file name, at most apitype.MaxInlineFileBytes of it.
func (a *api) readFile(ctx context.Context, id, name string) ([]byte, error) {
	rc, err := a.files.Open(ctx, id, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, apitype.MaxInlineFileBytes+1))
	if err == nil && len(b) > apitype.MaxInlineFileBytes {
		err = fmt.Errorf("file %q is over %d bytes", name, apitype.MaxInlineFileBytes)
	}
	return b, err
}

// getExecutionFile answers GET /v1/executions/{id}/files/{name...}: the bytes of an output file
// the record lists, as an attachment (inline for raster images), with its media type, under a
// sandboxing Content-Security-Policy. 404 when the record (of the agent, with ?agent=) does not
// exist or lists no such file; 410 when its bytes were evicted (files_max_bytes).
func (a *api) getExecutionFile(w http.ResponseWriter, r *http.Request) {
	e, err := a.scopedExecution(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	name := r.PathValue("name")
	i := slices.IndexFunc(e.Files, func(f sandbox.File) bool { return f.Name == name })
	if i < 0 {
		writeError(w, &requestError{status: http.StatusNotFound, code: apitype.CodeNotFound, field: "name",
			msg: fmt.Sprintf("execution %s has no output file %q; GET /v1/executions/%s lists its files under \"files\"", e.ID, name, e.ID)})
		return
	}
	f := e.Files[i]
	if a.files == nil {
		writeError(w, gone(e.ID, name, "this server keeps no output files"))
		return
	}
	rc, err := a.files.Open(r.Context(), e.ID, name)
	if errors.Is(err, store.ErrEvicted) {
		writeError(w, gone(e.ID, name, "the quota on all runs' files (files_max_bytes) evicted it to make room for newer runs' files"))
		return
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	defer rc.Close()
	setFileHeaders(w.Header(), f)
	// Bound each write, so that a client that stops reading lets go of the file (and its
	// connection) after writeTimeout instead of holding them for ever.
	w = deadlineWriter{w, http.NewResponseController(w)}
	if rs, ok := rc.(io.ReadSeeker); ok {
		var modified time.Time
		if e.EndedAt != nil {
			modified = *e.EndedAt
		}
		http.ServeContent(w, r, "", modified, rs)
		return
	}
	w.Header().Set("Content-Length", strconv.FormatInt(f.SizeBytes, 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, rc)
}

// deadlineWriter sets a write deadline of writeTimeout from now before each write.
type deadlineWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
}

func (w deadlineWriter) Write(p []byte) (int, error) {
	_ = w.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	return w.ResponseWriter.Write(p)
}

func (w deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// gone is the 410 of an output file whose bytes are no longer kept (class errclass.Gone). It
// names no field: the file's name is in the path, and the message names it.
func gone(id, name, why string) error {
	return errclass.Newf(errclass.Gone, "output file %q of execution %s is no longer kept: %s", name, id, why)
}

// setFileHeaders sets the headers of an output file's bytes: its media type (when it parses;
// else application/octet-stream), never sniffed, as an attachment unless it is a raster image,
// under a Content-Security-Policy that sandboxes it and loads nothing, with its digest as ETag.
func setFileHeaders(h http.Header, f sandbox.File) {
	mt, params, err := mime.ParseMediaType(f.MediaType)
	contentType := mime.FormatMediaType(mt, params)
	if err != nil || contentType == "" {
		mt, contentType = "application/octet-stream", "application/octet-stream"
	}
	h.Set("Content-Type", contentType)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	disposition := "attachment"
	if _, raster := sandbox.RasterImage(mt); raster {
		disposition = "inline"
	}
	if d := mime.FormatMediaType(disposition, map[string]string{"filename": path.Base(f.Name)}); d != "" {
		disposition = d
	}
	h.Set("Content-Disposition", disposition)
	if len(f.SHA256) == 64 {
		h.Set("ETag", `"`+f.SHA256+`"`)
	}
	h.Set("Cache-Control", "private")
}

// scopedExecution returns the record of the path's {id}; with the query parameter agent,
// another agent's record does not exist (as an agent's tools ask).
func (a *api) scopedExecution(r *http.Request) (store.Execution, error) {
	q := r.URL.Query()
	if err := checkQuery(q, "agent"); err != nil {
		return store.Execution{}, err
	}
	e, err := a.ledger.GetExecution(r.Context(), r.PathValue("id"))
	if err == nil && q.Get("agent") != "" && q.Get("agent") != e.Agent {
		err = fmt.Errorf("execution %q of agent %q: %w", r.PathValue("id"), q.Get("agent"), store.ErrNotFound)
	}
	return e, err
}
