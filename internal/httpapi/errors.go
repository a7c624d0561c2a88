package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// StatusClientClosedRequest is the status StatusOf gives when the client went away (its
// request's context ended). Nothing is written for it: there is nobody left to read it.
const StatusClientClosedRequest = 499

// requestError is a problem with the HTTP request itself (its body, route or method), found
// before the sandbox sees it.
type requestError struct {
	status int
	code   string
	field  string
	msg    string
}

func (e *requestError) Error() string { return e.msg }

// classified is an error's HTTP answer.
type classified struct {
	status     int
	retryAfter time.Duration // > 0: send Retry-After
	detail     apitype.ErrorDetail
}

// classify maps an error to its HTTP answer. It is the only place that does: a request's own
// faults (requestError, an over-long body) carry their answer; every other error's class
// (package errclass) gives the status and the error code, and a few error types add the
// field at fault, the schema's violations or when to retry.
func classify(err error) classified {
	var (
		reqErr *requestError
		maxErr *http.MaxBytesError
	)
	if pe, ok := portError(err); ok {
		if pe.status == http.StatusTooManyRequests {
			pe.retryAfter = time.Second
		}
		return pe
	}
	switch {
	case errors.As(err, &reqErr):
		return classified{status: reqErr.status,
			detail: apitype.ErrorDetail{Code: reqErr.code, Message: reqErr.msg, Field: reqErr.field}}
	case errors.As(err, &maxErr):
		return classified{status: http.StatusRequestEntityTooLarge,
			detail: apitype.ErrorDetail{Code: apitype.CodeTooLarge, Message: fmt.Sprintf(
				"the request body is over the limit of %d bytes; send a smaller body (GET /v1/limits lists the limits; knowledge imports take up to 64 MiB: import in parts)",
				maxErr.Limit)}}
	}
	class := errclass.Of(err)
	if class == nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return classified{status: StatusClientClosedRequest,
			detail: apitype.ErrorDetail{Code: apitype.CodeInternal, Message: err.Error()}}
	}
	status, code := statusOf(class)
	out := classified{status: status, detail: apitype.ErrorDetail{Code: code, Message: err.Error()}}
	var (
		fieldErr *sandbox.FieldError
		busyErr  *sandbox.BusyError
		inErr    *library.InputError
		useErr   *store.InUseError
		quotaErr *store.QuotaError

		sessionBusy *sandbox.SessionBusyError
	)
	switch {
	case class == nil:
		out.detail.Message = "internal error: " + err.Error()
	case errors.As(err, &inErr):
		out.detail.Code, out.detail.Field, out.detail.Violations = apitype.CodeInvalidInput, "input", violationsOf(inErr.Violations)
	case errors.As(err, &quotaErr):
		out.detail.Code = apitype.CodeQuotaExceeded
	case errors.As(err, &fieldErr):
		out.detail.Field = fieldErr.Field
	case errors.As(err, &useErr):
		out.detail.Field = "force" // the parameter that deletes it all the same
	case errors.Is(err, store.ErrInvalidCursor):
		out.detail.Field = "cursor"
	case errors.Is(err, store.ErrEvicted):
		out.detail.Message += ": the quota on all runs' files (files_max_bytes) made room for newer runs' files"
	case errors.As(err, &busyErr):
		out.retryAfter = max(busyErr.RetryAfter, time.Second)
	case errors.As(err, &sessionBusy) && sessionBusy.Step == "":
		out.detail.Field = "wait" // the field that says whether a call waits for its turn
	}
	if class == errclass.Unavailable && out.retryAfter == 0 {
		out.retryAfter = time.Second
	}
	return out
}

// statusOf is the HTTP status and error code of an error class; nil (no class) is an internal
// failure.
func statusOf(class error) (int, string) {
	switch class {
	case errclass.Invalid:
		return http.StatusBadRequest, apitype.CodeInvalidRequest
	case errclass.Forbidden:
		return http.StatusForbidden, apitype.CodeForbidden
	case errclass.NotFound:
		return http.StatusNotFound, apitype.CodeNotFound
	case errclass.Conflict:
		return http.StatusConflict, apitype.CodeConflict
	case errclass.Gone:
		return http.StatusGone, apitype.CodeGone
	case errclass.TooLarge:
		return http.StatusRequestEntityTooLarge, apitype.CodeTooLarge
	case errclass.Busy:
		return http.StatusTooManyRequests, apitype.CodeBusy
	case errclass.Unavailable:
		return http.StatusServiceUnavailable, apitype.CodeNotReady
	}
	return http.StatusInternalServerError, apitype.CodeInternal
}

// Status is the HTTP status the API answers for an error of err's class (500 for none): for
// the handlers beside the API (the console's pages) that answer in their own format.
func Status(err error) int {
	status, _ := statusOf(errclass.Of(err))
	return status
}

// WriteError answers err as the API's JSON error body (apitype.ErrorBody), with the status of
// its class (see package errclass): for the handlers beside the API (the MCP endpoint) that
// refuse a request before it reaches them. For a client that went away it writes nothing.
func WriteError(w http.ResponseWriter, err error) { writeError(w, err) }

// writeError answers err as a JSON error body. For StatusClientClosedRequest it writes nothing.
func writeError(w http.ResponseWriter, err error) {
	e := classify(err)
	if e.status == StatusClientClosedRequest {
		return
	}
	setRetryAfter(w, e.retryAfter)
	writeJSON(w, e.status, apitype.ErrorBody{Error: e.detail})
}

// setRetryAfter sets Retry-After to d in whole seconds, rounded up and at least 1; d <= 0 sets
// nothing.
func setRetryAfter(w http.ResponseWriter, d time.Duration) {
	if d <= 0 {
		return
	}
	secs := max(int64(math.Ceil(d.Seconds())), 1)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
}

// marshal encodes v as one line of JSON without HTML escaping, so that text (including
// '<', '>', '&' and any non-ASCII UTF-8) keeps its bytes.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeJSON answers status with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b := answerJSON(w, status, v)
	_, _ = w.Write(b)
}

// answerJSON sets w's headers and status for v as writeJSON does, and returns the body to
// write.
func answerJSON(w http.ResponseWriter, status int, v any) []byte {
	b, err := marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = marshal(apitype.ErrorBody{Error: apitype.ErrorDetail{Code: apitype.CodeInternal,
			Message: "internal error: encoding the answer: " + err.Error()}})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	return b
}
