package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/suggest"
)

// bodySlack is what a request body may hold beyond its code and input: the field names, JSON
// escaping of short strings, timeout_ms and agent.
const bodySlack = 64 << 10

// writeTimeout bounds each write of an execution's answer, so that a client that stops reading
// cannot hold a run's handler forever. It applies per write, not to the whole (possibly long)
// run.
const writeTimeout = time.Minute

// maxBodyBytes is the largest request body POST /v1/executions reads.
func maxBodyBytes(cfg sandbox.Config) int64 {
	return int64(cfg.MaxCodeBytes) + int64(cfg.MaxInputBytes) + bodySlack
}

// executeBody is the JSON body of POST /v1/executions.
type executeBody struct {
	Code      string          `json:"code"`
	Input     json.RawMessage `json:"input"`
	TimeoutMS *int64          `json:"timeout_ms"`
	Agent     string          `json:"agent"`
}

var knownFields = []string{"code", "input", "timeout_ms", "agent"}

// fieldExpectations says what each field must be, for type errors.
var fieldExpectations = map[string]string{
	"code":       "must be a string holding the Python source",
	"timeout_ms": "must be an integer number of milliseconds",
	"agent":      "must be a string",
}

const bodyExample = `{"code": "print(1)"}`

// Stream lines of an NDJSON answer.
type (
	eventLine struct {
		Type string `json:"type"` // "stdout" or "stderr"
		Data string `json:"data"`
	}
	resultLine struct {
		Type   string          `json:"type"` // "result"
		Result *sandbox.Result `json:"result"`
	}
	errorLine struct {
		Type  string      `json:"type"` // "error"
		Error errorDetail `json:"error"`
	}
)

func (a *api) execute(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	// A run may take minutes (and wait for a slot before that): drop any server-wide write
	// timeout and bound each write instead (see writeTimeout). Clearing is harmless for later
	// requests on the connection: the server sets its own deadline again for each request.
	_ = rc.SetWriteDeadline(time.Time{})
	a.serveExecution(w, r, rc)
	// Push the answer out while the last write deadline holds, then clear it. (Not deferred: after
	// a panic nothing may be written, so that the 500 can still be.)
	_ = rc.Flush()
	_ = rc.SetWriteDeadline(time.Time{})
}

func (a *api) serveExecution(w http.ResponseWriter, r *http.Request, rc *http.ResponseController) {
	cfg := a.ex.Config()
	limit := maxBodyBytes(cfg)
	if r.ContentLength > limit {
		// Answer before reading anything; the server closes the connection afterwards.
		w.Header().Set("Connection", "close")
		writeError(w, &requestError{status: http.StatusRequestEntityTooLarge, code: CodeTooLarge,
			msg: fmt.Sprintf("the request body is %d bytes; the limit is %d bytes (code at most %d bytes, input at most %d bytes as JSON); send less code or a smaller input",
				r.ContentLength, limit, cfg.MaxCodeBytes, cfg.MaxInputBytes)})
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		// Only JSON: a web page can send text/plain or a form without asking first, but not JSON.
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			writeError(w, &requestError{status: http.StatusUnsupportedMediaType, code: CodeUnsupportedMedia, msg: fmt.Sprintf(
				"Content-Type %q is not accepted; send the body as JSON with Content-Type: application/json", ct)})
			return
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)

	req, err := decodeExecuteBody(r.Body)
	if err != nil {
		writeError(w, err)
		return
	}

	if !acceptsNDJSON(r.Header.Values("Accept")) {
		res, err := a.ex.Execute(r.Context(), req, nil)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		writeJSON(w, http.StatusOK, &res)
		return
	}

	s := newStreamer(w, rc)
	go s.run()
	defer s.close() // also when Execute panics: the writer must stop before anyone else writes
	res, err := a.ex.Execute(r.Context(), req, s.emit)
	s.close()
	switch {
	case err == nil:
		s.writeLine(resultLine{Type: "result", Result: &res})
	case !s.started:
		// Refused before any output: an ordinary error answer, not a 200 stream.
		a.fail(w, r, err)
	default:
		a.logFailure(r, err)
		if e := classify(err); e.status != StatusClientClosedRequest {
			s.writeLine(errorLine{Type: "error", Error: e.detail})
		}
	}
}

// fail logs err when it is the server's fault or the client's departure, and answers it.
func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	a.logFailure(r, err)
	writeError(w, err)
}

func (a *api) logFailure(r *http.Request, err error) {
	switch classify(err).status {
	case http.StatusInternalServerError:
		a.log.Error("execution failed", "method", r.Method, "path", r.URL.Path, "error", err)
	case StatusClientClosedRequest:
		a.log.Info("client went away before the execution answered", "method", r.Method,
			"path", r.URL.Path, "error", err)
	}
}

// decodeExecuteBody reads and checks the JSON body of POST /v1/executions. Its errors are
// *requestError or *http.MaxBytesError.
func decodeExecuteBody(body io.Reader) (sandbox.Request, error) {
	dec := json.NewDecoder(body)
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return sandbox.Request{}, bodyError(err)
	}
	// Anything but white space after the object is an error (and may be the body's excess).
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("more JSON follows it")
		}
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return sandbox.Request{}, maxErr
		}
		return sandbox.Request{}, invalid("", "the request body must hold exactly one JSON object, but data follows the object (%v)", err)
	}
	if !utf8.Valid(raw) {
		return sandbox.Request{}, invalid("", "the request body is not valid UTF-8; JSON text must be UTF-8")
	}
	if raw[0] != '{' {
		return sandbox.Request{}, invalid("", "the request body must be a JSON object such as %s, not %s", bodyExample, jsonKind(raw[0]))
	}

	if err := checkKeys(raw); err != nil {
		return sandbox.Request{}, err
	}
	strict := json.NewDecoder(bytes.NewReader(raw))
	strict.DisallowUnknownFields()
	var b executeBody
	if err := strict.Decode(&b); err != nil {
		return sandbox.Request{}, bodyError(err)
	}
	return sandbox.Request{Code: b.Code, Input: b.Input, TimeoutMS: b.TimeoutMS, Agent: b.Agent}, nil
}

// checkKeys refuses what encoding/json lets through: a key given twice (it keeps the last) and
// a key in other letter case (it matches "Code" to code).
func checkKeys(object json.RawMessage) error {
	dec := json.NewDecoder(bytes.NewReader(object))
	if _, err := dec.Token(); err != nil { // {
		return bodyError(err)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bodyError(err)
		}
		key, _ := tok.(string)
		if seen[key] {
			return invalid(key, "field %q is given twice; give each field once", key)
		}
		seen[key] = true
		if !slices.Contains(knownFields, key) {
			return bodyError(fmt.Errorf("json: unknown field %q", key))
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return bodyError(err)
		}
	}
	return nil
}

// bodyError turns a JSON decoding error into the request error to answer.
func bodyError(err error) error {
	var (
		maxErr    *http.MaxBytesError
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &maxErr):
		return maxErr
	case err == io.EOF:
		return invalid("", "the request body is empty; it must be a JSON object such as %s", bodyExample)
	case err == io.ErrUnexpectedEOF:
		return invalid("", "the request body ends in the middle of its JSON; it must be a complete JSON object such as %s", bodyExample)
	case errors.As(err, &syntaxErr):
		return invalid("", "the request body is not valid JSON (%v at byte %d); it must be a JSON object such as %s",
			syntaxErr, syntaxErr.Offset, bodyExample)
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return invalid("", "the request body must be a JSON object such as %s, not %s", bodyExample, typeErr.Value)
		}
		want := fieldExpectations[typeErr.Field]
		if want == "" {
			want = "has the wrong type"
		}
		return invalid(typeErr.Field, "%s: %s, not %s", typeErr.Field, want, typeErr.Value)
	}
	if name, ok := unknownField(err); ok {
		msg := fmt.Sprintf("unknown field %q", name)
		if near := suggest.Nearest(name, knownFields, 2); near != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", near)
		}
		return invalid(name, "%s; known fields are %s", msg, strings.Join(knownFields, ", "))
	}
	return invalid("", "the request body could not be decoded (%v); it must be a JSON object such as %s", err, bodyExample)
}

func invalid(field, format string, args ...any) *requestError {
	return &requestError{status: http.StatusBadRequest, code: CodeInvalidRequest, field: field,
		msg: fmt.Sprintf(format, args...)}
}

// unknownField extracts the name from encoding/json's DisallowUnknownFields error, which has no
// type of its own: `json: unknown field "name"`.
func unknownField(err error) (string, bool) {
	const prefix = "json: unknown field "
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		return "", false
	}
	name, uerr := strconv.Unquote(strings.TrimPrefix(msg, prefix))
	if uerr != nil {
		return "", false
	}
	return name, true
}

// jsonKind names the kind of JSON value that starts with c.
func jsonKind(c byte) string {
	switch c {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// acceptsNDJSON reports whether the Accept header values ask for application/x-ndjson (with a
// non-zero quality).
func acceptsNDJSON(values []string) bool {
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil || !strings.EqualFold(mt, NDJSONContentType) {
				continue
			}
			if q, ok := params["q"]; ok {
				if f, err := strconv.ParseFloat(q, 64); err == nil && f <= 0 {
					continue
				}
			}
			return true
		}
	}
	return false
}

// streamer writes an execution's events as NDJSON lines. The runtime's emit must not block, so
// emit only queues the event; a goroutine of the streamer writes and flushes. The queue is
// bounded by the run's stdout and stderr caps.
//
// The 200 header is written with the first line, so a run refused before any output can still
// be answered with its error status.
type streamer struct {
	w  http.ResponseWriter
	rc *http.ResponseController

	mu     sync.Mutex
	queue  []sandbox.Event
	closed bool

	wake chan struct{} // buffered (1): something to do
	done chan struct{} // closed when run returns

	// Owned by run's goroutine until done is closed, then by the handler.
	started  bool  // the 200 header is written
	writeErr error // the first write error; later lines are dropped
}

func newStreamer(w http.ResponseWriter, rc *http.ResponseController) *streamer {
	return &streamer{w: w, rc: rc, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// emit queues ev for writing. It never blocks for long.
func (s *streamer) emit(ev sandbox.Event) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.queue = append(s.queue, ev)
	s.mu.Unlock()
	s.signal()
}

func (s *streamer) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run writes queued events until close is called and the queue is empty.
func (s *streamer) run() {
	defer close(s.done)
	for range s.wake {
		s.mu.Lock()
		batch, closed := s.queue, s.closed
		s.queue = nil
		s.mu.Unlock()
		for _, ev := range batch {
			s.writeLine(eventLine{Type: ev.Stream, Data: ev.Data})
		}
		if closed {
			return
		}
	}
}

// close stops taking events and waits until the queued ones are written. It may be called
// more than once.
func (s *streamer) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.signal()
	<-s.done
}

// writeLine writes v as one NDJSON line (starting the 200 answer if needed) and flushes it.
func (s *streamer) writeLine(v any) {
	if s.writeErr != nil {
		return
	}
	b, err := marshal(v)
	if err != nil {
		b, _ = marshal(errorLine{Type: "error", Error: errorDetail{Code: CodeInternal,
			Message: "internal error: encoding a stream line: " + err.Error()}})
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if !s.started {
		s.started = true
		h := s.w.Header()
		h.Set("Content-Type", NDJSONContentType)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Accel-Buffering", "no") // ask reverse proxies not to buffer the stream
		s.w.WriteHeader(http.StatusOK)
	}
	if _, err := s.w.Write(b); err != nil {
		s.writeErr = err
		return
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.writeErr = err
	}
}
