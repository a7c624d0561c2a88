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

	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// The error codes of the JSON error body.
const (
	CodeInvalidRequest   = "invalid_request"
	CodeTooLarge         = "too_large"
	CodeBusy             = "busy"
	CodeNotReady         = "not_ready"
	CodeInternal         = "internal"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeForbidden        = "forbidden"
	CodeUnsupportedMedia = "unsupported_media_type"
	CodeConflict         = "conflict"
	CodeUnauthorized     = "unauthorized"
	CodeInvalidInput     = "invalid_input"
	CodeQuotaExceeded    = "quota_exceeded"
	CodeGone             = "gone"
	CodeSessionLimit     = "session_limit"
)

// StatusClientClosedRequest is the status StatusOf gives when the client went away (its
// request's context ended). Nothing is written for it: there is nobody left to read it.
const StatusClientClosedRequest = 499

// errorDetail is the "error" object of an error body or stream line.
type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	// Violations lists, for invalid_input, each way the input breaks the input schema.
	Violations []library.Violation `json:"violations,omitempty"`
}

// errorBody is the JSON body of every error answer.
type errorBody struct {
	Error errorDetail `json:"error"`
}

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
	detail     errorDetail
}

// classify maps an error to its HTTP answer. It is the only place that does.
func classify(err error) classified {
	var (
		reqErr   *requestError
		fieldErr *sandbox.FieldError
		busyErr  *sandbox.BusyError
		maxErr   *http.MaxBytesError
		inErr    *library.InputError
		verErr   *store.VersionConflictError
		useErr   *store.InUseError
		quotaErr *store.QuotaError
	)
	if c, ok := classifySession(err); ok {
		return c
	}
	switch {
	case errors.As(err, &inErr):
		return classified{status: http.StatusBadRequest,
			detail: errorDetail{Code: CodeInvalidInput, Message: err.Error(), Field: "input", Violations: inErr.Violations}}
	case errors.As(err, &quotaErr):
		return classified{status: http.StatusRequestEntityTooLarge, detail: errorDetail{Code: CodeQuotaExceeded, Message: err.Error()}}
	case errors.Is(err, store.ErrEvicted):
		return classified{status: http.StatusGone, detail: errorDetail{Code: CodeGone, Message: err.Error() +
			": the quota on all runs' files (files_max_bytes) made room for newer runs' files"}}
	case errors.Is(err, store.ErrNotFound):
		return classified{status: http.StatusNotFound, detail: errorDetail{Code: CodeNotFound, Message: err.Error()}}
	case errors.As(err, &useErr):
		// force is the parameter that deletes it all the same.
		return classified{status: http.StatusConflict, detail: errorDetail{Code: CodeConflict, Message: err.Error(), Field: "force"}}
	case errors.Is(err, store.ErrExists), errors.As(err, &verErr):
		return classified{status: http.StatusConflict, detail: errorDetail{Code: CodeConflict, Message: err.Error()}}
	case errors.Is(err, store.ErrInvalidCursor):
		return classified{status: http.StatusBadRequest, detail: errorDetail{Code: CodeInvalidRequest, Message: err.Error(), Field: "cursor"}}
	case errors.As(err, &reqErr):
		return classified{status: reqErr.status,
			detail: errorDetail{Code: reqErr.code, Message: reqErr.msg, Field: reqErr.field}}
	case errors.As(err, &maxErr):
		return classified{status: http.StatusRequestEntityTooLarge,
			detail: errorDetail{Code: CodeTooLarge, Message: fmt.Sprintf(
				"the request body is over the limit of %d bytes; send a smaller body (GET /v1/limits lists the limits; knowledge imports take up to 64 MiB: import in parts)",
				maxErr.Limit)}}
	case errors.As(err, &fieldErr):
		status, code := http.StatusBadRequest, CodeInvalidRequest
		if fieldErr.TooLarge {
			status, code = http.StatusRequestEntityTooLarge, CodeTooLarge
		}
		return classified{status: status,
			detail: errorDetail{Code: code, Message: fieldErr.Error(), Field: fieldErr.Field}}
	case errors.As(err, &busyErr):
		return classified{status: http.StatusTooManyRequests, retryAfter: max(busyErr.RetryAfter, time.Second),
			detail: errorDetail{Code: CodeBusy, Message: err.Error()}}
	case errors.Is(err, sandbox.ErrNotReady):
		return classified{status: http.StatusServiceUnavailable, retryAfter: time.Second,
			detail: errorDetail{Code: CodeNotReady, Message: err.Error()}}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return classified{status: StatusClientClosedRequest,
			detail: errorDetail{Code: CodeInternal, Message: err.Error()}}
	default:
		return classified{status: http.StatusInternalServerError,
			detail: errorDetail{Code: CodeInternal, Message: "internal error: " + err.Error()}}
	}
}

// writeError answers err as a JSON error body. For StatusClientClosedRequest it writes nothing.
func writeError(w http.ResponseWriter, err error) {
	e := classify(err)
	if e.status == StatusClientClosedRequest {
		return
	}
	setRetryAfter(w, e.retryAfter)
	writeJSON(w, e.status, errorBody{Error: e.detail})
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
	b, err := marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = marshal(errorBody{Error: errorDetail{Code: CodeInternal,
			Message: "internal error: encoding the answer: " + err.Error()}})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
