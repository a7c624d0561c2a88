package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// bodySlack is what a request body may hold beyond its code and input: the field names, JSON
// escaping of short strings, timeout_ms and agent.
const bodySlack = 64 << 10

// writeTimeout bounds each write of an execution's answer, so that a client that stops reading
// cannot hold a run's handler forever. It applies per write, not to the whole (possibly long)
// run.
const writeTimeout = time.Minute

// maxBodyBytes is the largest request body POST /v1/executions (and a saved-code run) reads:
// code and input at their caps, input files at theirs in base64, and the rest.
func maxBodyBytes(cfg engine.Config) int64 {
	return int64(cfg.MaxCodeBytes) + int64(cfg.MaxInputBytes) + filesBodyBytes(cfg) + bodySlack
}

// tooLargeHint says what a run's body may hold, for a 413.
func tooLargeHint(cfg engine.Config) string {
	return fmt.Sprintf(" (code at most %d bytes, input at most %d bytes as JSON, input files at most %d bytes together, "+
		"which base64 makes 4/3 as many); send less code, a smaller input or smaller files", cfg.MaxCodeBytes, cfg.MaxInputBytes, cfg.MaxInputFilesBytes)
}

var (
	runFieldNames  = []string{"files", "charts", "inline_files"}
	runFieldExpect = map[string]string{
		"files":        filesExpect,
		"charts":       "must be true or false (false: figures and shown images are not saved as output files)",
		"inline_files": "must be true or false (true: output files of at most 1 MiB, 4 MiB in all, come back in base64 as content_base64)",
	}
)

// withRunFields returns expect with the run fields' expectations added.
func withRunFields(expect map[string]string) map[string]string {
	out := maps.Clone(expect)
	maps.Copy(out, runFieldExpect)
	return out
}

// executeBody is the JSON body of POST /v1/executions: apitype.ExecuteRequest, with its files
// in the body's form, checked one by one by decodeFiles.
type executeBody struct {
	apitype.ExecuteRequest
	Files runFiles `json:"files"` // decoded by readRunBody
}

// secretsExpect is what a body's "secrets" must be.
const secretsExpect = `must be a list of secrets' names such as ["OPENAI_API_KEY"] (GET /v1/secrets lists them)`

var executeShape = shape{
	fields: append([]string{"code", "input", "timeout_ms", "agent", "template", "dependencies", "network_allow", "secrets"}, runFieldNames...),
	expect: withRunFields(map[string]string{
		"code":          "must be a string holding the Python source",
		"timeout_ms":    "must be an integer number of milliseconds",
		"agent":         "must be a string",
		"template":      "must be a string: a template's name (GET /v1/agents/{agent}/templates lists them)",
		"dependencies":  `must be a list of requirement strings such as ["pandas>=2"]`,
		"network_allow": `must be a list of hosts and CIDRs such as ["api.example.com:443"], within the server's network_allow`,
		"secrets":       secretsExpect,
	}),
	example: `{"code": "print(1)"}`,
}

func (a *api) execute(w http.ResponseWriter, r *http.Request) {
	release, ok := a.admit(w, r, a.answering)
	if !ok {
		return
	}
	defer release()
	cfg := a.ex.Config()
	var b executeBody
	files, ok := readRunBody(w, r, cfg, &b, executeShape)
	if !ok {
		return
	}
	req := sandbox.Request{Code: b.Code, Input: b.Input, TimeoutMS: b.TimeoutMS, Agent: b.Agent,
		Dependencies: b.Dependencies, Origin: sandbox.Origin{Source: sourceOf(r)}, Files: files, Charts: b.Charts,
		NetworkAllow: b.NetworkAllow, Secrets: b.Secrets}
	if b.Template != "" {
		if a.sessions == nil {
			writeError(w, &sandbox.FieldError{Field: "template", Message: "this daemon serves no sessions, which a template's runs need"})
			return
		}
		// A template's run is a session of it, made for the run and closed after it.
		req.Template = b.Template
		a.run(w, r, b.InlineFiles, func(ctx context.Context, emit func(sandbox.Event)) (sandbox.Result, error) {
			return a.sessions.RunOnce(ctx, req, emit)
		})
		return
	}
	a.run(w, r, b.InlineFiles, func(ctx context.Context, emit func(sandbox.Event)) (sandbox.Result, error) {
		return a.ex.Execute(ctx, req, emit)
	})
}

func sourceOf(r *http.Request) sandbox.Source {
	switch s := sandbox.Source(r.Header.Get(apitype.SourceHeader)); s {
	case sandbox.SourceCLI, sandbox.SourceMCP:
		return s
	}
	return sandbox.SourceAPI
}

// admit takes one of tokens (a.answering, or the sessions' own) for a request that starts a
// run, before its body is read: a run that would be refused as busy is refused without reading
// (and holding) its body. It answers 429 and returns false when none is free; else call release
// once the answer is written. The body of a refused request is read into nothing (see
// refuseUnread).
func (a *api) admit(w http.ResponseWriter, r *http.Request, tokens chan struct{}) (release func(), ok bool) {
	select {
	case tokens <- struct{}{}:
		return func() { <-tokens }, true
	default:
		cfg := a.ex.Config()
		refuseUnread(w, r, &sandbox.BusyError{Slots: cfg.Slots, Queue: cfg.QueueLength, RetryAfter: time.Second})
		return nil, false
	}
}

// run answers an execution made by exec, admitted by admit: as one JSON result, or as an
// NDJSON stream when the client accepts it; with inline, its output files' bytes are in the
// answer (see answerOf).
func (a *api) run(w http.ResponseWriter, r *http.Request, inline bool, exec func(ctx context.Context, emit func(sandbox.Event)) (sandbox.Result, error)) {
	rc := http.NewResponseController(w)
	// A run may take minutes (and wait for a slot before that): drop any server-wide write
	// timeout and bound each write instead (see writeTimeout). Clearing is harmless for later
	// requests on the connection: the server sets its own deadline again for each request.
	_ = rc.SetWriteDeadline(time.Time{})
	a.answerRun(w, r, rc, inline, exec)
	// Push the answer out while the last write deadline holds, then clear it. (Not deferred: after
	// a panic nothing may be written, so that the 500 can still be.)
	_ = rc.Flush()
	_ = rc.SetWriteDeadline(time.Time{})
}

func (a *api) answerRun(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, inline bool, exec func(ctx context.Context, emit func(sandbox.Event)) (sandbox.Result, error)) {
	if !acceptsNDJSON(r.Header.Values("Accept")) {
		res, err := exec(r.Context(), nil)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		out := a.answerOf(r.Context(), res, inline)
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		writeJSON(w, http.StatusOK, &out)
		return
	}

	s := newStreamer(w, rc)
	go s.run()
	defer s.close() // also when exec panics: the writer must stop before anyone else writes
	res, err := exec(r.Context(), s.emit)
	s.close()
	switch {
	case err == nil:
		out := a.answerOf(r.Context(), res, inline)
		s.writeLine(apitype.StreamLine{Type: apitype.StreamResult, Result: &out})
	case !s.started:
		// Refused before any output: an ordinary error answer, not a 200 stream.
		a.fail(w, r, err)
	default:
		a.logFailure(r, err)
		if e := classify(err); e.status != StatusClientClosedRequest {
			s.writeLine(apitype.StreamLine{Type: apitype.StreamError, Error: &e.detail})
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

// acceptsNDJSON reports whether the Accept header values ask for application/x-ndjson (with a
// non-zero quality).
func acceptsNDJSON(values []string) bool {
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil || !strings.EqualFold(mt, apitype.NDJSONContentType) {
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
			s.writeLine(eventLine(ev))
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
// startStream writes the 200 header of an NDJSON stream.
func startStream(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", apitype.NDJSONContentType)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // ask reverse proxies not to buffer the stream
	w.WriteHeader(http.StatusOK)
}

func (s *streamer) writeLine(v any) {
	if s.writeErr != nil {
		return
	}
	b, err := marshal(v)
	if err != nil {
		b, _ = marshal(apitype.StreamLine{Type: apitype.StreamError, Error: &apitype.ErrorDetail{Code: apitype.CodeInternal,
			Message: "internal error: encoding a stream line: " + err.Error()}})
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if !s.started {
		s.started = true
		startStream(s.w)
	}
	if _, err := s.w.Write(b); err != nil {
		s.writeErr = err
		return
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.writeErr = err
	}
}

// readRunBody reads the body of a request that starts a run into v, whose field files is a
// runFiles, and decodes its files: readBody's answers, with a 413 that says how to send less,
// and decodeFiles'. The files are decoded from the body's own bytes, one at a time: a file is
// held as sent and as decoded, never the body thrice. On an error it has answered the request
// and returns false.
func readRunBody(w http.ResponseWriter, r *http.Request, cfg engine.Config, v any, sh shape) ([]sandbox.InputFile, bool) {
	sh.flat = true // a run body's only nested objects are its files, checked by decodeFileObject
	body, err := readBodyBytes(w, r, maxBodyBytes(cfg), sh)
	if err == nil {
		err = decodeBody(body, v, sh)
	}
	if err != nil {
		if e, ok := err.(*requestError); ok && e.status == http.StatusRequestEntityTooLarge {
			e.msg += tooLargeHint(cfg)
		}
		writeError(w, err)
		return nil, false
	}
	var text []byte
	eachMember(bytes.TrimSpace(body), func(key string, value []byte) bool {
		if key == "files" {
			text = value
		}
		return text == nil
	})
	files, err := decodeFilesText(text)
	if err != nil {
		writeError(w, err)
		return nil, false
	}
	return files, true
}

// answerOf returns res as answered, with its files' bytes from a.files when inline (each file
// of at most apitype.MaxInlineFileBytes, up to apitype.MaxInlineBytes in all).
func (a *api) answerOf(ctx context.Context, res sandbox.Result, inline bool) apitype.Result {
	out := ResultOf(res)
	var inlined int64
	for i, f := range out.Files {
		if inline && a.files != nil && f.SizeBytes <= apitype.MaxInlineFileBytes && inlined+f.SizeBytes <= apitype.MaxInlineBytes {
			inlined += f.SizeBytes
			if b, err := a.readFile(ctx, res.ID, f.Name); err == nil {
				out.Files[i].ContentBase64 = base64.StdEncoding.EncodeToString(b)
			} else {
				a.log.Warn("an output file could not be read back for the answer", "id", res.ID, "error", err)
			}
		}
	}
	return out
}
