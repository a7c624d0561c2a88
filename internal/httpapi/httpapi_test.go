package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/httpapi/httpapitest"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/testenv/logbuf"
)

// fakeExec records requests and answers with Fn.
type fakeExec = httpapitest.Executor

func newFake() *fakeExec {
	return &fakeExec{Cfg: engine.DefaultConfig(), Fn: httpapitest.Fixed(sampleResult("ok\n"), nil)}
}

func sampleResult(stdout string) sandbox.Result {
	return sandbox.Result{
		ID: "ex_aaaaaaaaaaaaaaaaaaaaaaaaaa", Agent: "default", Outcome: sandbox.OutcomeOK, Success: true,
		Stdout: stdout, Output: json.RawMessage(`{"n":1}`), DurationMS: 12, TimeoutMS: 30000,
		StartedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

// failRuntime is a sandbox.Runtime that fails the test if a run reaches it.
type failRuntime struct{ t *testing.T }

func (r failRuntime) Run(context.Context, int, sandbox.Spec, func(sandbox.Event)) (sandbox.Result, error) {
	r.t.Errorf("Runtime.Run called: the request should have been refused before running")
	return sandbox.Result{}, errors.New("must not run")
}
func (r failRuntime) Ready(context.Context) error { return nil }

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newServer(t *testing.T, ex Executor) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(NewHandler(Backend{Executor: ex}, discardLog()))
	t.Cleanup(srv.Close)
	return srv
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) errorDetail(t *testing.T) apitype.ErrorDetail {
	t.Helper()
	if ct := a.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q, want application/json; body %s", ct, a.body)
	}
	var b struct {
		Error *apitype.ErrorDetail `json:"error"`
	}
	if err := json.Unmarshal(a.body, &b); err != nil || b.Error == nil {
		t.Fatalf("error body %s: not {\"error\": {...}} (%v)", a.body, err)
	}
	return *b.Error
}

func do(t *testing.T, srv *httptest.Server, method, path, body string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

func ptr(v int64) *int64 { return &v }

func TestExecuteJSONPassesTheRequest(t *testing.T) {
	tests := []struct {
		name string
		body string
		want sandbox.Request
	}{
		{"all fields", `{"code":"print(1)","input":{"a":[1,2]},"timeout_ms":1500,"agent":"bot-1"}`,
			sandbox.Request{Code: "print(1)", Input: json.RawMessage(`{"a":[1,2]}`), TimeoutMS: ptr(1500), Agent: "bot-1"}},
		{"only code", `{"code":"print(1)"}`, sandbox.Request{Code: "print(1)"}},
		{"timeout zero is not absent", `{"code":"x","timeout_ms":0}`, sandbox.Request{Code: "x", TimeoutMS: ptr(0)}},
		{"input scalar", `{"code":"x","input":"s"}`, sandbox.Request{Code: "x", Input: json.RawMessage(`"s"`)}},
		{"white space around the object", " \n{\"code\":\"x\"}\n\t ", sandbox.Request{Code: "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := newFake()
			srv := newServer(t, fake)
			a := do(t, srv, "POST", "/v1/executions", tt.body, "Content-Type", "application/json")
			if a.status != http.StatusOK {
				t.Fatalf("status %d, body %s", a.status, a.body)
			}
			if ct := a.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			var got sandbox.Result
			if err := json.Unmarshal(a.body, &got); err != nil {
				t.Fatal(err)
			}
			want := sampleResult("ok\n")
			if got.ID != want.ID || got.Stdout != want.Stdout || got.Outcome != want.Outcome ||
				string(got.Output) != string(want.Output) || !got.StartedAt.Equal(want.StartedAt) {
				t.Errorf("result = %+v, want %+v", got, want)
			}
			reqs := fake.Requests()
			if len(reqs) != 1 {
				t.Fatalf("Execute called %d times", len(reqs))
			}
			r := reqs[0]
			if r.Code != tt.want.Code || string(r.Input) != string(tt.want.Input) || r.Agent != tt.want.Agent {
				t.Errorf("request = %+v, want %+v", r, tt.want)
			}
			if (r.Input == nil) != (tt.want.Input == nil) {
				t.Errorf("Input nil = %v, want %v", r.Input == nil, tt.want.Input == nil)
			}
			switch {
			case (r.TimeoutMS == nil) != (tt.want.TimeoutMS == nil):
				t.Errorf("TimeoutMS = %v, want %v", r.TimeoutMS, tt.want.TimeoutMS)
			case r.TimeoutMS != nil && *r.TimeoutMS != *tt.want.TimeoutMS:
				t.Errorf("TimeoutMS = %d, want %d", *r.TimeoutMS, *tt.want.TimeoutMS)
			}
		})
	}
}

func TestFailingProgramIs200(t *testing.T) {
	fake := newFake()
	fake.Fn = func(context.Context, sandbox.Request, func(sandbox.Event)) (sandbox.Result, error) {
		r := sampleResult("")
		r.Outcome, r.Success, r.ExitCode, r.Reason = sandbox.OutcomeError, false, 1, "the program raised ValueError"
		return r, nil
	}
	a := do(t, newServer(t, fake), "POST", "/v1/executions", `{"code":"raise ValueError"}`)
	if a.status != http.StatusOK {
		t.Fatalf("status %d, want 200", a.status)
	}
	var got sandbox.Result
	if err := json.Unmarshal(a.body, &got); err != nil {
		t.Fatal(err)
	}
	if got.Outcome != sandbox.OutcomeError || got.Success || got.ExitCode != 1 {
		t.Errorf("result = %+v", got)
	}
}

// TestValidationThroughService uses the real engine.Service over a runtime that fails the
// test if it is asked to run: every case must be refused before anything runs.
func TestValidationThroughService(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.MaxCodeBytes = 100
	svc := engine.NewService(failRuntime{t}, engine.Hooks{}, cfg, discardLog())
	srv := newServer(t, svc)
	tests := []struct {
		name     string
		body     string
		status   int
		code     string
		field    string
		contains []string
	}{
		{"timeout zero", `{"code":"print(1)","timeout_ms":0}`, 400, apitype.CodeInvalidRequest, "timeout_ms",
			[]string{"is 0", "allowed range is 1 to 600000 milliseconds"}},
		{"timeout negative", `{"code":"print(1)","timeout_ms":-5}`, 400, apitype.CodeInvalidRequest, "timeout_ms",
			[]string{"is -5", "allowed range is 1 to 600000 milliseconds"}},
		{"timeout ten days", `{"code":"print(1)","timeout_ms":864000000}`, 400, apitype.CodeInvalidRequest, "timeout_ms",
			[]string{"is 864000000", "allowed range is 1 to 600000 milliseconds"}},
		{"missing code", `{"input":1}`, 400, apitype.CodeInvalidRequest, "code", []string{"required"}},
		{"empty code", `{"code":""}`, 400, apitype.CodeInvalidRequest, "code", []string{"required"}},
		{"code too large", `{"code":"` + strings.Repeat("x", 101) + `"}`, 413, apitype.CodeTooLarge, "code",
			[]string{"101 bytes", "limit is 100 bytes"}},
		{"bad agent", `{"code":"x","agent":"Bad Agent"}`, 400, apitype.CodeInvalidRequest, "agent", []string{`"Bad Agent"`}},
		{"NUL in code", `{"code":"a\u0000b"}`, 400, apitype.CodeInvalidRequest, "code", []string{"NUL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := do(t, srv, "POST", "/v1/executions", tt.body)
			if a.status != tt.status {
				t.Fatalf("status %d, want %d; body %s", a.status, tt.status, a.body)
			}
			e := a.errorDetail(t)
			if e.Code != tt.code || e.Field != tt.field {
				t.Errorf("error = %+v, want code %q field %q", e, tt.code, tt.field)
			}
			for _, s := range tt.contains {
				if !strings.Contains(e.Message, s) {
					t.Errorf("message %q does not contain %q", e.Message, s)
				}
			}
		})
	}
}

func TestBadBodies(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		field    string
		contains []string
	}{
		{"unknown field", `{"code":"x","tiemout_ms":5}`, "tiemout_ms",
			[]string{`unknown field "tiemout_ms"`, `did you mean "timeout_ms"`, "known fields are code, input, timeout_ms, agent"}},
		{"unknown field prefix", `{"code":"x","timeout":5}`, "timeout", []string{`did you mean "timeout_ms"`}},
		{"unknown field far from any", `{"code":"x","language":"ruby"}`, "language",
			[]string{`unknown field "language"; known fields are code, input, timeout_ms, agent`}},
		{"not JSON", `print("hello")`, "", []string{"not valid JSON", "must be a JSON object"}},
		{"empty body", ``, "", []string{"empty", "must be a JSON object"}},
		{"array", `[{"code":"x"}]`, "", []string{"must be a JSON object", "not an array"}},
		{"null", `null`, "", []string{"must be a JSON object", "not null"}},
		{"string", `"print(1)"`, "", []string{"must be a JSON object", "not a string"}},
		{"truncated", `{"code":"x"`, "", []string{"ends in the middle"}},
		{"trailing object", `{"code":"x"}{"code":"y"}`, "", []string{"exactly one JSON object"}},
		{"trailing garbage", `{"code":"x"} junk`, "", []string{"exactly one JSON object"}},
		{"timeout string", `{"code":"x","timeout_ms":"abc"}`, "timeout_ms", []string{"integer number of milliseconds", "not string"}},
		{"timeout fraction", `{"code":"x","timeout_ms":1.5}`, "timeout_ms", []string{"integer number of milliseconds", "1.5"}},
		{"timeout overflow", `{"code":"x","timeout_ms":1e30}`, "timeout_ms", []string{"integer number of milliseconds"}},
		{"code number", `{"code":5}`, "code", []string{"must be a string"}},
		{"agent bool", `{"code":"x","agent":true}`, "agent", []string{"must be a string"}},
		{"invalid UTF-8", "{\"code\":\"\xff\xfe\"}", "", []string{"not valid UTF-8"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := newFake()
			a := do(t, newServer(t, fake), "POST", "/v1/executions", tt.body)
			if a.status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400; body %s", a.status, a.body)
			}
			e := a.errorDetail(t)
			if e.Code != apitype.CodeInvalidRequest || e.Field != tt.field {
				t.Errorf("error = %+v, want code invalid_request, field %q", e, tt.field)
			}
			for _, s := range tt.contains {
				if !strings.Contains(e.Message, s) {
					t.Errorf("message %q does not contain %q", e.Message, s)
				}
			}
			if n := len(fake.Requests()); n != 0 {
				t.Errorf("Execute called %d times for a bad body", n)
			}
		})
	}
}

// countingBody counts the bytes the handler reads from the request body.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

func smallLimits() engine.Config {
	cfg := engine.DefaultConfig()
	cfg.MaxCodeBytes, cfg.MaxInputBytes = 1000, 2000
	cfg.MaxInputFiles, cfg.MaxInputFileBytes, cfg.MaxInputFilesBytes = 2, 300, 600
	return cfg
}

// smallBodyLimit is the body limit of smallLimits: code, input, two files of 600 bytes together
// in base64 (800) with their names (2 × (2 × 255 + 64)), and the slack.
const smallBodyLimit = 1000 + 2000 + 800 + 2*(2*255+64) + 64<<10

// TestTooLargeByContentLength sends only the head of a request announcing 50 MiB: the answer
// must come back with nothing of the body sent, and the handler must not have read any.
func TestTooLargeByContentLength(t *testing.T) {
	fake := &fakeExec{Cfg: smallLimits()}
	var read atomic.Int64
	h := NewHandler(Backend{Executor: fake}, discardLog())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = countingBody{r.Body, &read}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	const size = 50 << 20
	fmt.Fprintf(conn, "POST /v1/executions HTTP/1.1\r\nHost: sandpit\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", size)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer before the body was sent: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413; body %s", resp.StatusCode, body)
	}
	e := answer{status: resp.StatusCode, header: resp.Header, body: body}.errorDetail(t)
	limit := smallBodyLimit
	for _, s := range []string{"52428800 bytes", fmt.Sprintf("the limit is %d bytes", limit), "code at most 1000 bytes", "input at most 2000 bytes"} {
		if !strings.Contains(e.Message, s) {
			t.Errorf("message %q does not contain %q", e.Message, s)
		}
	}
	if e.Code != apitype.CodeTooLarge {
		t.Errorf("code = %q, want too_large", e.Code)
	}
	if n := read.Load(); n != 0 {
		t.Errorf("handler read %d bytes of the body", n)
	}
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("Execute called %d times", n)
	}
}

// TestTooLargeChunked sends a body without Content-Length (chunked) over the limit.
func TestTooLargeChunked(t *testing.T) {
	fake := &fakeExec{Cfg: smallLimits()}
	srv := newServer(t, fake)
	body := io.MultiReader(strings.NewReader(`{"code":"`), strings.NewReader(strings.Repeat("x", 200<<10)), strings.NewReader(`"}`))
	req, err := http.NewRequest("POST", srv.URL+"/v1/executions", body)
	if err != nil {
		t.Fatal(err)
	}
	if req.ContentLength != 0 && req.ContentLength != -1 {
		t.Fatalf("ContentLength = %d; the test needs a chunked body", req.ContentLength)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413; body %s", resp.StatusCode, b)
	}
	e := answer{status: resp.StatusCode, header: resp.Header, body: b}.errorDetail(t)
	if e.Code != apitype.CodeTooLarge || !strings.Contains(e.Message, fmt.Sprintf("limit of %d bytes", smallBodyLimit)) {
		t.Errorf("error = %+v", e)
	}
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("Execute called %d times", n)
	}
}

func TestExecuteErrors(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		status     int
		code       string
		retryAfter string
	}{
		{"busy", &sandbox.BusyError{Slots: 4, Queue: 16, RetryAfter: time.Second}, 429, apitype.CodeBusy, "1"},
		{"busy rounds up", &sandbox.BusyError{Slots: 4, Queue: 16, RetryAfter: 1500 * time.Millisecond}, 429, apitype.CodeBusy, "2"},
		{"busy at least one second", &sandbox.BusyError{Slots: 4, Queue: 16}, 429, apitype.CodeBusy, "1"},
		{"not ready", fmt.Errorf("container starting: %w", sandbox.ErrNotReady), 503, apitype.CodeNotReady, "1"},
		{"internal", errors.New("disk on fire"), 500, apitype.CodeInternal, ""},
		{"input too large", &sandbox.FieldError{Field: "input", Message: "is big", TooLarge: true}, 413, apitype.CodeTooLarge, ""},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tt.name, stream), func(t *testing.T) {
				fake := newFake()
				fake.Fn = func(context.Context, sandbox.Request, func(sandbox.Event)) (sandbox.Result, error) {
					return sandbox.Result{}, tt.err
				}
				var hdr []string
				if stream {
					hdr = []string{"Accept", apitype.NDJSONContentType}
				}
				a := do(t, newServer(t, fake), "POST", "/v1/executions", `{"code":"x"}`, hdr...)
				if a.status != tt.status {
					t.Fatalf("status %d, want %d; body %s", a.status, tt.status, a.body)
				}
				e := a.errorDetail(t) // checks it is JSON, not an NDJSON stream
				if e.Code != tt.code {
					t.Errorf("code = %q, want %q", e.Code, tt.code)
				}
				if !strings.Contains(e.Message, tt.err.Error()) {
					t.Errorf("message %q does not contain %q", e.Message, tt.err.Error())
				}
				if got := a.header.Get("Retry-After"); got != tt.retryAfter {
					t.Errorf("Retry-After = %q, want %q", got, tt.retryAfter)
				}
			})
		}
	}
}

// TestClassifyStatus: the HTTP status each kind of error is answered with.
func TestClassifyStatus(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{&sandbox.FieldError{Field: "code"}, 400},
		{&sandbox.FieldError{Field: "code", TooLarge: true}, 413},
		{fmt.Errorf("wrapped: %w", &sandbox.FieldError{Field: "agent"}), 400},
		{&sandbox.BusyError{}, 429},
		{sandbox.ErrNotReady, 503},
		{fmt.Errorf("waiting for a free slot: %w", context.Canceled), StatusClientClosedRequest},
		{context.DeadlineExceeded, StatusClientClosedRequest},
		{&http.MaxBytesError{Limit: 10}, 413},
		{errors.New("boom"), 500},
	}
	for _, tt := range tests {
		if got := classify(tt.err).status; got != tt.want {
			t.Errorf("classify(%v).status = %d, want %d", tt.err, got, tt.want)
		}
	}
}

// readLines reads NDJSON lines from r into ch until EOF.
func readLines(r io.Reader, ch chan<- map[string]json.RawMessage, errc chan<- error) {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			var m map[string]json.RawMessage
			if jerr := json.Unmarshal(line, &m); jerr != nil {
				errc <- fmt.Errorf("bad line %q: %v", line, jerr)
				return
			}
			ch <- m
		}
		if err != nil {
			close(ch)
			return
		}
	}
}

func str(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return s
}

// TestStreamOrderAndLiveness holds the run open until the client has seen the first line, so
// the test only passes when events reach the client while the run is still going.
func TestStreamOrderAndLiveness(t *testing.T) {
	release := make(chan struct{})
	runEnded := make(chan struct{})
	fake := newFake()
	fake.Fn = func(ctx context.Context, req sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error) {
		defer close(runEnded)
		emit(sandbox.Event{Stream: "stdout", Data: "first\n"})
		select {
		case <-release:
		case <-ctx.Done():
			return sandbox.Result{}, ctx.Err()
		case <-time.After(10 * time.Second):
			t.Error("the client never saw the first event while the run was going")
		}
		emit(sandbox.Event{Stream: "stderr", Data: "warn\n"})
		emit(sandbox.Event{Stream: "stdout", Data: "second\n"})
		return sampleResult("first\nsecond\n"), nil
	}
	srv := newServer(t, fake)
	req, _ := http.NewRequest("POST", srv.URL+"/v1/executions", strings.NewReader(`{"code":"x"}`))
	req.Header.Set("Accept", "application/json;q=0.5, application/x-ndjson")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != apitype.NDJSONContentType {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := make(chan map[string]json.RawMessage, 10)
	errc := make(chan error, 1)
	go readLines(resp.Body, lines, errc)

	next := func() map[string]json.RawMessage {
		t.Helper()
		select {
		case m, ok := <-lines:
			if !ok {
				t.Fatal("stream ended early")
			}
			return m
		case err := <-errc:
			t.Fatal(err)
		case <-time.After(10 * time.Second):
			t.Fatal("no line within 10s")
		}
		return nil
	}
	first := next()
	select {
	case <-runEnded:
		t.Fatal("the run ended before the client saw the first line")
	default:
	}
	if str(t, first["type"]) != "stdout" || str(t, first["data"]) != "first\n" {
		t.Fatalf("first line = %v", first)
	}
	close(release)
	want := []struct{ typ, data string }{{"stderr", "warn\n"}, {"stdout", "second\n"}}
	for _, w := range want {
		m := next()
		if str(t, m["type"]) != w.typ || str(t, m["data"]) != w.data {
			t.Errorf("line = %v, want %s %q", m, w.typ, w.data)
		}
	}
	last := next()
	if str(t, last["type"]) != "result" {
		t.Fatalf("last line = %v, want result", last)
	}
	var res sandbox.Result
	if err := json.Unmarshal(last["result"], &res); err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "first\nsecond\n" || res.Outcome != sandbox.OutcomeOK {
		t.Errorf("result = %+v", res)
	}
	if _, ok := <-lines; ok {
		t.Error("a line follows the result")
	}
}

func TestStreamErrorAfterStart(t *testing.T) {
	fake := newFake()
	fake.Fn = func(_ context.Context, _ sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error) {
		emit(sandbox.Event{Stream: "stdout", Data: "partial"})
		return sandbox.Result{}, errors.New("executor vanished")
	}
	a := do(t, newServer(t, fake), "POST", "/v1/executions", `{"code":"x"}`, "Accept", apitype.NDJSONContentType)
	if a.status != 200 || a.header.Get("Content-Type") != apitype.NDJSONContentType {
		t.Fatalf("status %d, Content-Type %q", a.status, a.header.Get("Content-Type"))
	}
	lines := strings.Split(strings.TrimSuffix(string(a.body), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("lines = %q, want 2", lines)
	}
	var last struct {
		Type  string              `json:"type"`
		Error apitype.ErrorDetail `json:"error"`
	}
	if err := json.Unmarshal([]byte(lines[1]), &last); err != nil {
		t.Fatal(err)
	}
	if last.Type != "error" || last.Error.Code != apitype.CodeInternal || !strings.Contains(last.Error.Message, "executor vanished") {
		t.Errorf("last line = %+v", last)
	}
}

func TestStreamWithoutEvents(t *testing.T) {
	a := do(t, newServer(t, newFake()), "POST", "/v1/executions", `{"code":"x"}`, "Accept", apitype.NDJSONContentType)
	if a.status != 200 || a.header.Get("Content-Type") != apitype.NDJSONContentType {
		t.Fatalf("status %d, Content-Type %q", a.status, a.header.Get("Content-Type"))
	}
	if !strings.HasPrefix(string(a.body), `{"type":"result","result":{"id":"ex_`) || strings.Count(string(a.body), "\n") != 1 {
		t.Errorf("body = %s", a.body)
	}
}

// TestUTF8ByteExact checks that non-ASCII text and HTML-special characters keep their bytes in
// both directions, in JSON and NDJSON.
func TestUTF8ByteExact(t *testing.T) {
	const text = "测试 😀 <b>&amp;</b> \u00e9"
	codeJSON, _ := json.Marshal("print('" + text + "')")
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			fake := newFake()
			fake.Fn = func(_ context.Context, _ sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error) {
				if emit != nil {
					emit(sandbox.Event{Stream: "stdout", Data: text + "\n"})
				}
				r := sampleResult(text + "\n")
				r.Output = json.RawMessage(`"` + text + `"`)
				return r, nil
			}
			var hdr []string
			if stream {
				hdr = []string{"Accept", apitype.NDJSONContentType}
			}
			a := do(t, newServer(t, fake), "POST", "/v1/executions", `{"code":`+string(codeJSON)+`}`, hdr...)
			if a.status != 200 {
				t.Fatalf("status %d: %s", a.status, a.body)
			}
			if got := fake.Requests()[0].Code; got != "print('"+text+"')" {
				t.Errorf("code reached Execute as %q", got)
			}
			want := 3 // stdout, output (and the event line when streaming)
			if !stream {
				want = 2
			}
			if n := bytes.Count(a.body, []byte(text)); n != want {
				t.Errorf("body holds the raw text %d times, want %d: %s", n, want, a.body)
			}
			if bytes.Contains(a.body, []byte(`\u`)) {
				t.Errorf("body has \\u escapes: %s", a.body)
			}
			body := a.body
			if stream {
				lines := bytes.Split(bytes.TrimSuffix(body, []byte("\n")), []byte("\n"))
				var ev apitype.StreamLine
				if err := json.Unmarshal(lines[0], &ev); err != nil || ev.Data != text+"\n" {
					t.Errorf("event line %s: %+v %v", lines[0], ev, err)
				}
				var rl struct {
					Result json.RawMessage `json:"result"`
				}
				if err := json.Unmarshal(lines[len(lines)-1], &rl); err != nil {
					t.Fatal(err)
				}
				body = rl.Result
			}
			var res sandbox.Result
			if err := json.Unmarshal(body, &res); err != nil {
				t.Fatal(err)
			}
			if res.Stdout != text+"\n" {
				t.Errorf("stdout = %q", res.Stdout)
			}
		})
	}
}

func TestHealthAndReady(t *testing.T) {
	tests := []struct {
		name     string
		path     string
		readyErr error
		status   int
		want     string
	}{
		{"healthz", "/healthz", nil, 200, `{"status":"ok"}`},
		{"healthz while not ready", "/healthz", sandbox.ErrNotReady, 200, `{"status":"ok"}`},
		{"readyz ready", "/readyz", nil, 200, `{"status":"ready"}`},
		{"readyz not ready", "/readyz", fmt.Errorf("container is restarting: %w", sandbox.ErrNotReady), 503,
			`{"status":"not_ready","error":{"code":"not_ready","message":"container is restarting: sandbox is not ready"}}`},
		{"readyz other error", "/readyz", errors.New("docker: cannot connect"), 503,
			`{"status":"not_ready","error":{"code":"not_ready","message":"sandbox is not ready: docker: cannot connect"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := newFake()
			fake.ReadyErr = tt.readyErr
			a := do(t, newServer(t, fake), "GET", tt.path, "")
			if a.status != tt.status || strings.TrimSpace(string(a.body)) != tt.want {
				t.Errorf("got %d %s, want %d %s", a.status, a.body, tt.status, tt.want)
			}
			if a.header.Get("Content-Type") != "application/json" {
				t.Errorf("Content-Type = %q", a.header.Get("Content-Type"))
			}
			if tt.status == 503 && a.header.Get("Retry-After") != "1" {
				t.Errorf("Retry-After = %q, want 1", a.header.Get("Retry-After"))
			}
		})
	}
}

func TestLimits(t *testing.T) {
	fake := &fakeExec{Cfg: smallLimits()}
	srv := httptest.NewServer(NewHandler(Backend{Executor: fake, PackageIndex: PackageIndex{IndexURL: "https://bob:s3cret@mirror.example/simple/",
		ExtraIndexURLs: []string{"http://172.17.0.1:8080/simple/"}, TrustedHosts: []string{"172.17.0.1"}, BinaryOnly: true}}, discardLog()))
	defer srv.Close()
	a := do(t, srv, "GET", "/v1/limits", "")
	if a.status != 200 {
		t.Fatalf("status %d", a.status)
	}
	var got map[string]any
	if err := json.Unmarshal(a.body, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"slots": 4, "queue_length": 16, "executions_per_agent": 11, "default_timeout_ms": 30000, "max_timeout_ms": 600000,
		"max_code_bytes": 1000, "max_input_bytes": 2000, "max_body_bytes": smallBodyLimit,
		"max_input_files": 2, "max_input_file_bytes": 300, "max_input_files_bytes": 600, "output_files": 64,
		"output_file_bytes": 8 << 20, "output_files_bytes": 16 << 20, "max_inline_file_bytes": 1 << 20,
		"install_timeout_ms": 120000, "max_dependencies": 50, "max_calls": 1000, "max_call_bytes": 4 << 20, "call_timeout_ms": 10000}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	limits, _ := got["limits"].(map[string]any)
	if limits["memory_bytes"] != float64(512<<20) || limits["stdout_bytes"] != float64(1<<20) || limits["processes"] != float64(64) {
		t.Errorf("limits = %v", limits)
	}
	// The index settings, without the password in a URL.
	index, _ := json.Marshal(got["package_index"])
	if string(index) != `{"binary_only":true,"extra_index_urls":["http://172.17.0.1:8080/simple/"],"index_url":"https://bob:xxxxx@mirror.example/simple/","trusted_hosts":["172.17.0.1"]}` {
		t.Errorf("package_index = %s", index)
	}
}

// TestLimitsSayTheCapacity: GET /v1/limits carries how many more sandboxes fit when the
// runtime knows (Kubernetes), and nothing of it when it does not.
func TestLimitsSayTheCapacity(t *testing.T) {
	fit := 3
	for _, c := range []struct {
		name     string
		capacity func(context.Context) apitype.Capacity
		want     string
	}{
		{"unknown to the runtime", nil, ""},
		{"known", func(context.Context) apitype.Capacity {
			return apitype.Capacity{Fit: &fit, Bound: "the schedulable nodes (1 of 1 …)"}
		}, `{"fit":3,"bound":"the schedulable nodes (1 of 1 …)"}`},
		{"unreadable", func(context.Context) apitype.Capacity {
			return apitype.Capacity{Error: "listing the nodes: forbidden"}
		}, `{"error":"listing the nodes: forbidden"}`},
	} {
		srv := httptest.NewServer(NewHandler(Backend{Executor: &fakeExec{Cfg: smallLimits()}, Capacity: c.capacity}, discardLog()))
		a := do(t, srv, "GET", "/v1/limits", "")
		srv.Close()
		var got struct {
			Capacity json.RawMessage `json:"capacity"`
		}
		if err := json.Unmarshal(a.body, &got); err != nil || a.status != 200 || string(got.Capacity) != c.want {
			t.Errorf("%s: %d capacity %s (%v), want %s", c.name, a.status, got.Capacity, err, c.want)
		}
	}
}

func TestUnknownRoutes(t *testing.T) {
	tests := []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{"GET", "/nope", 404, apitype.CodeNotFound, ""},
		{"POST", "/v1/execution", 404, apitype.CodeNotFound, ""},
		{"GET", "/v1/executions", 405, apitype.CodeMethodNotAllowed, "POST"},
		{"DELETE", "/healthz", 405, apitype.CodeMethodNotAllowed, "GET, HEAD"},
	}
	srv := newServer(t, newFake())
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			a := do(t, srv, tt.method, tt.path, "")
			if a.status != tt.status {
				t.Fatalf("status %d, want %d: %s", a.status, tt.status, a.body)
			}
			if e := a.errorDetail(t); e.Code != tt.code || !strings.Contains(e.Message, tt.path) {
				t.Errorf("error = %+v", e)
			}
			if got := a.header.Get("Allow"); got != tt.allow {
				t.Errorf("Allow = %q, want %q", got, tt.allow)
			}
		})
	}
}

func TestPanicIsRecovered(t *testing.T) {
	var logs logbuf.Buffer
	fake := newFake()
	fake.Fn = func(context.Context, sandbox.Request, func(sandbox.Event)) (sandbox.Result, error) {
		panic("kaboom")
	}
	srv := httptest.NewServer(NewHandler(Backend{Executor: fake}, slog.New(slog.NewTextHandler(&logs, nil))))
	defer srv.Close()
	for _, stream := range []bool{false, true} {
		var hdr []string
		if stream {
			hdr = []string{"Accept", apitype.NDJSONContentType}
		}
		a := do(t, srv, "POST", "/v1/executions", `{"code":"x"}`, hdr...)
		if a.status != 500 || a.errorDetail(t).Code != apitype.CodeInternal {
			t.Errorf("stream=%v: status %d body %s", stream, a.status, a.body)
		}
	}
	srv.Close()
	if !strings.Contains(logs.String(), "kaboom") {
		t.Errorf("log does not mention the panic: %s", logs.String())
	}
}

func TestLogsNeitherCodeNorInput(t *testing.T) {
	var logs logbuf.Buffer
	srv := httptest.NewServer(NewHandler(Backend{Executor: newFake()}, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	defer srv.Close()
	a := do(t, srv, "POST", "/v1/executions", `{"code":"SECRET_CODE_1","input":"SECRET_INPUT_2"}`)
	if a.status != 200 {
		t.Fatalf("status %d", a.status)
	}
	srv.Close() // waits for the handler, which logs after answering
	out := logs.String()
	if strings.Contains(out, "SECRET") {
		t.Errorf("log holds the code or input: %s", out)
	}
	for _, s := range []string{"method=POST", "path=/v1/executions", "status=200", "duration_ms="} {
		if !strings.Contains(out, s) {
			t.Errorf("log %q lacks %q", out, s)
		}
	}
}

func TestAcceptsNDJSON(t *testing.T) {
	tests := []struct {
		accept []string
		want   bool
	}{
		{nil, false},
		{[]string{"application/json"}, false},
		{[]string{"application/x-ndjson"}, true},
		{[]string{"Application/X-NDJSON; charset=utf-8"}, true},
		{[]string{"application/json, application/x-ndjson;q=0.9"}, true},
		{[]string{"application/x-ndjson;q=0"}, false},
		{[]string{"text/html", "application/x-ndjson"}, true},
		{[]string{"*/*"}, false},
	}
	for _, tt := range tests {
		if got := acceptsNDJSON(tt.accept); got != tt.want {
			t.Errorf("acceptsNDJSON(%q) = %v, want %v", tt.accept, got, tt.want)
		}
	}
}

// TestLongRunOutlivesServerWriteTimeout checks that a run longer than the server's
// WriteTimeout still gets its answer.
func TestLongRunOutlivesServerWriteTimeout(t *testing.T) {
	fake := newFake()
	fake.Fn = func(_ context.Context, _ sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error) {
		if emit != nil {
			emit(sandbox.Event{Stream: "stdout", Data: "tick\n"})
		}
		time.Sleep(600 * time.Millisecond)
		return sampleResult("tick\n"), nil
	}
	srv := httptest.NewUnstartedServer(NewHandler(Backend{Executor: fake}, discardLog()))
	srv.Config.WriteTimeout = 200 * time.Millisecond
	srv.Start()
	defer srv.Close()
	for _, stream := range []bool{false, true} {
		var hdr []string
		if stream {
			hdr = []string{"Accept", apitype.NDJSONContentType}
		}
		a := do(t, srv, "POST", "/v1/executions", `{"code":"x"}`, hdr...)
		if a.status != 200 || !bytes.Contains(a.body, []byte(`"stdout":"tick\n"`)) {
			t.Errorf("stream=%v: status %d, body %s", stream, a.status, a.body)
		}
	}
	// The server's timeout still holds for the next request on the same connection.
	if a := do(t, srv, "GET", "/healthz", ""); a.status != 200 {
		t.Errorf("healthz after a long run: %d", a.status)
	}
}

// A run frees its slot when it ends, but its answer stays in memory until written: a client
// that stops reading must not make the daemon hold answers beyond slots + queue (an attack
// held ~31 MiB per stalled client, without bound). A run past that bound is refused as busy.
func TestAnswersHeldAreBounded(t *testing.T) {
	ex := newFake()
	ex.Cfg.Slots, ex.Cfg.QueueLength = 1, 0
	held, release := make(chan struct{}), make(chan struct{})
	ex.Fn = func(ctx context.Context, req sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error) {
		if req.Code == "hold" {
			close(held)
			<-release
		}
		return sampleResult("ok\n"), nil
	}
	srv := newServer(t, ex)
	first := make(chan int, 1)
	go func() {
		resp, err := http.Post(srv.URL+"/v1/executions", "application/json", strings.NewReader(`{"code":"hold"}`))
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-held
	resp, err := http.Post(srv.URL+"/v1/executions", "application/json", strings.NewReader(`{"code":"print(1)"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a run past slots + queue answers held: %d (Retry-After %q), want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	close(release)
	if code := <-first; code != http.StatusOK {
		t.Fatalf("the held run answered %d, want 200", code)
	}
	// The handler gives its token back once it returns, which the client cannot observe: its
	// answer may arrive a moment before. The token must come back, so a run is admitted again
	// within a few seconds.
	status := 0
	for deadline := time.Now().Add(5 * time.Second); status != http.StatusOK && time.Now().Before(deadline); {
		resp, err = http.Post(srv.URL+"/v1/executions", "application/json", strings.NewReader(`{"code":"print(1)"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if status = resp.StatusCode; status != http.StatusOK {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if status != http.StatusOK {
		t.Errorf("5 s after the held answer was written: %d, want 200", status)
	}
}

// Issue 33, item 12: /readyz says how warm the slots are, and ?warm=true waits (503) until
// every slot starts its runs as forks.
func TestReadyzWarmth(t *testing.T) {
	w := sandbox.Warmth{Slots: 2, Up: 1}
	srv := httptest.NewServer(NewHandler(Backend{Executor: newFake(), Warmth: func() sandbox.Warmth { return w }}, discardLog()))
	defer srv.Close()
	for _, c := range []struct {
		warmth sandbox.Warmth
		path   string
		status int
		want   string
	}{
		{sandbox.Warmth{Slots: 2, Up: 1, Sessions: 3}, "/readyz", 200, `"warmth":{"slots":2,"slots_up":1,"fork_slots":0,"warm":false,"warm_sessions":3}`},
		{sandbox.Warmth{Slots: 2, Up: 1}, "/readyz?warm=true", 503, `1 of 2 slots are up and 0 start runs as forks`},
		{sandbox.Warmth{Slots: 2, Up: 2, Fork: 1}, "/readyz?warm=true", 503, `"fork_slots":1`},
		{sandbox.Warmth{Slots: 2, Up: 2, Fork: 2}, "/readyz?warm=true", 200, `"warm":true`},
		{sandbox.Warmth{Slots: 2, Up: 2, ForkOff: "the fork server is off (fork_server false)"}, "/readyz?warm=true", 200, `"fork_off":"the fork server is off`},
	} {
		w = c.warmth
		a := do(t, srv, "GET", c.path, "")
		if a.status != c.status || !strings.Contains(string(a.body), c.want) {
			t.Errorf("%+v %s: %d %s; want %d and %s", c.warmth, c.path, a.status, a.body, c.status, c.want)
		}
	}
}

// TestEmptySegmentIsANotFound: a path with an empty ID (a trial's POST …/jobs//run) is a JSON
// 404 naming the fault, not the mux's bodiless 307 to another route.
func TestEmptySegmentIsANotFound(t *testing.T) {
	h := NewHandler(Backend{Executor: newFake()}, discardLog())
	for _, p := range []string{"/v1/agents/a/jobs//run", "/v1/executions/./x", "/v1/agents/a/../b/code"} {
		req := httptest.NewRequest(http.MethodPost, p, strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "empty") {
			t.Errorf("POST %s: %d %s, want a JSON 404 naming the empty segment", p, rec.Code, rec.Body.String())
		}
	}
}
