package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/httpapi/httpapitest"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// fakeExec records requests and answers with Fn.
type fakeExec = httpapitest.Executor

func result(stdout string) sandbox.Result {
	return sandbox.Result{
		ID: "ex_bbbbbbbbbbbbbbbbbbbbbbbbbb", Agent: "default", Outcome: sandbox.OutcomeOK, Success: true,
		Stdout: stdout, Output: json.RawMessage(`[1,"二"]`), DurationMS: 7, TimeoutMS: 30000,
		StartedAt: time.Date(2025, 6, 7, 8, 9, 10, 0, time.UTC),
	}
}

// daemon serves the real REST API over ex.
func daemon(t *testing.T, ex httpapi.Executor) *Client {
	t.Helper()
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Backend{Executor: ex}, slog.New(slog.DiscardHandler)))
	t.Cleanup(srv.Close)
	return New(srv.URL+"/", nil)
}

func ptr(v int64) *int64 { return &v }

func TestExecuteJSON(t *testing.T) {
	const text = "测试 😀 <&>"
	fake := &fakeExec{Cfg: engine.DefaultConfig(), Fn: httpapitest.Fixed(result(text+"\n"), nil)}
	c := daemon(t, fake)
	res, err := c.Execute(context.Background(), apitype.ExecuteRequest{
		Code: "print('" + text + "')", Input: json.RawMessage(`{"k": "v"}`), TimeoutMS: ptr(0), Agent: "bot",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := result(text + "\n")
	if res.ID != want.ID || res.Stdout != want.Stdout || string(res.Output) != string(want.Output) ||
		!res.StartedAt.Equal(want.StartedAt) || res.Outcome != apitype.OutcomeOK {
		t.Errorf("result = %+v, want %+v", res, want)
	}
	reqs := fake.Requests()
	if len(reqs) != 1 {
		t.Fatalf("Execute called %d times", len(reqs))
	}
	r := reqs[0]
	if r.Code != "print('"+text+"')" || string(r.Input) != `{"k":"v"}` || r.Agent != "bot" || r.TimeoutMS == nil || *r.TimeoutMS != 0 {
		t.Errorf("daemon got %+v (timeout %v)", r, r.TimeoutMS)
	}
}

func TestExecuteOmitsAbsentFields(t *testing.T) {
	fake := &fakeExec{Cfg: engine.DefaultConfig(), Fn: httpapitest.Fixed(result(""), nil)}
	if _, err := daemon(t, fake).Execute(context.Background(), apitype.ExecuteRequest{Code: "pass"}, nil); err != nil {
		t.Fatal(err)
	}
	if r := fake.Requests()[0]; r.TimeoutMS != nil || r.Input != nil || r.Agent != "" {
		t.Errorf("daemon got %+v, want only code", r)
	}
}

// TestExecuteStreaming holds the run open until onEvent has seen the first chunk.
func TestExecuteStreaming(t *testing.T) {
	firstSeen := make(chan struct{})
	fake := &fakeExec{Cfg: engine.DefaultConfig()}
	fake.Fn = func(ctx context.Context, _ sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error) {
		emit(sandbox.Event{Stream: "stdout", Data: "一\n"})
		select {
		case <-firstSeen:
		case <-ctx.Done():
			return sandbox.Result{}, ctx.Err()
		case <-time.After(10 * time.Second):
			t.Error("onEvent did not get the first chunk while the run was going")
		}
		emit(sandbox.Event{Stream: "stderr", Data: "warning 😀\n"})
		emit(sandbox.Event{Stream: "stdout", Data: "二\n"})
		return result("一\n二\n"), nil
	}
	var got []apitype.Event
	res, err := daemon(t, fake).Execute(context.Background(), apitype.ExecuteRequest{Code: "x"}, func(ev apitype.Event) {
		if len(got) == 0 {
			close(firstSeen)
		}
		got = append(got, ev)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []apitype.Event{{Stream: "stdout", Data: "一\n"}, {Stream: "stderr", Data: "warning 😀\n"}, {Stream: "stdout", Data: "二\n"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events = %+v, want %+v", got, want)
	}
	if res.Stdout != "一\n二\n" || res.ID != result("").ID {
		t.Errorf("result = %+v", res)
	}
}

// TestExecuteStreamingLargeResult checks that a result line of several MiB is read whole.
func TestExecuteStreamingLargeResult(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 6<<20/16) // 6 MiB
	fake := &fakeExec{Cfg: engine.DefaultConfig()}
	fake.Fn = func(_ context.Context, _ sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error) {
		emit(sandbox.Event{Stream: "stdout", Data: big})
		return result(big), nil
	}
	var events int
	res, err := daemon(t, fake).Execute(context.Background(), apitype.ExecuteRequest{Code: "x"}, func(ev apitype.Event) {
		events++
		if ev.Data != big {
			t.Errorf("event of %d bytes, want %d", len(ev.Data), len(big))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if events != 1 || res.Stdout != big {
		t.Errorf("events %d, stdout %d bytes; want 1 and %d", events, len(res.Stdout), len(big))
	}
}

func TestExecuteAPIErrors(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		status     int
		code       string
		field      string
		retryAfter time.Duration
		text       string // the whole Error(), when set
		class      error  // the class the client gives it back (nil: none)
	}{
		{"field", &sandbox.FieldError{Field: "timeout_ms", Message: "is 0; allowed range is 1 to 600000 milliseconds"},
			400, "invalid_request", "timeout_ms", 0, "timeout_ms: is 0; allowed range is 1 to 600000 milliseconds (HTTP 400)", errclass.Invalid},
		{"too large", &sandbox.FieldError{Field: "input", Message: "is 5 bytes of JSON; the limit is 4 bytes", TooLarge: true},
			413, "too_large", "input", 0, "input: is 5 bytes of JSON; the limit is 4 bytes (HTTP 413)", errclass.TooLarge},
		{"busy", &sandbox.BusyError{Slots: 1, Queue: 0, RetryAfter: 2 * time.Second}, 429, "busy", "", 2 * time.Second, "", errclass.Busy},
		{"not ready", sandbox.ErrNotReady, 503, "not_ready", "", time.Second,
			"sandbox is not ready (HTTP 503); retry after 1s", errclass.Unavailable},
		{"not found", fmt.Errorf("code %q: %w", "x", store.ErrNotFound), 404, "not_found", "", 0, "", errclass.NotFound},
		{"conflict", &store.VersionConflictError{Expected: 1, Current: 2}, 409, "conflict", "", 0, "", errclass.Conflict},
		{"gone", fmt.Errorf("file: %w", store.ErrEvicted), 410, "gone", "", 0, "", errclass.Gone},
		{"internal", errors.New("boom"), 500, "internal", "", 0, "internal error: boom (HTTP 500)", nil},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tt.name, stream), func(t *testing.T) {
				c := daemon(t, &fakeExec{Cfg: engine.DefaultConfig(), Fn: httpapitest.Fixed(sandbox.Result{}, tt.err)})
				var onEvent func(apitype.Event)
				if stream {
					onEvent = func(apitype.Event) { t.Error("unexpected event") }
				}
				_, err := c.Execute(context.Background(), apitype.ExecuteRequest{Code: "x"}, onEvent)
				var ae *APIError
				if !errors.As(err, &ae) {
					t.Fatalf("error %v (%T) is not an *APIError", err, err)
				}
				if ae.Status != tt.status || ae.Code != tt.code || ae.Field != tt.field || ae.RetryAfter != tt.retryAfter {
					t.Errorf("APIError = %+v, want status %d code %q field %q retry %s", ae, tt.status, tt.code, tt.field, tt.retryAfter)
				}
				if tt.text != "" && ae.Error() != tt.text {
					t.Errorf("Error() = %q, want %q", ae.Error(), tt.text)
				}
				if got := errclass.Of(err); got != tt.class {
					t.Errorf("class %v, want %v", got, tt.class)
				}
			})
		}
	}
}

// TestExecuteValidationThroughService checks the message a person sees for a real refusal.
func TestExecuteValidationThroughService(t *testing.T) {
	svc := engine.NewService(failRuntime{t}, engine.Hooks{}, engine.DefaultConfig(), slog.New(slog.DiscardHandler))
	_, err := daemon(t, svc).Execute(context.Background(), apitype.ExecuteRequest{Code: "print(1)", TimeoutMS: ptr(864000000)}, nil)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Field != "timeout_ms" || ae.Status != 400 {
		t.Fatalf("error = %#v", err)
	}
	const want = "timeout_ms: is 864000000; allowed range is 1 to 600000 milliseconds (omit it for the default of 30000) (HTTP 400)"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

type failRuntime struct{ t *testing.T }

func (r failRuntime) Run(context.Context, int, sandbox.Spec, func(sandbox.Event)) (sandbox.Result, error) {
	r.t.Error("Runtime.Run called for a request that should have been refused")
	return sandbox.Result{}, errors.New("must not run")
}
func (failRuntime) Ready(context.Context) error { return nil }

func TestExecuteStreamErrorAfterStart(t *testing.T) {
	fake := &fakeExec{Cfg: engine.DefaultConfig()}
	fake.Fn = func(_ context.Context, _ sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error) {
		emit(sandbox.Event{Stream: "stdout", Data: "partial"})
		return sandbox.Result{}, errors.New("executor vanished")
	}
	var got []apitype.Event
	_, err := daemon(t, fake).Execute(context.Background(), apitype.ExecuteRequest{Code: "x"}, func(ev apitype.Event) { got = append(got, ev) })
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 0 || ae.Code != "internal" || !strings.Contains(ae.Message, "executor vanished") {
		t.Fatalf("error = %#v", err)
	}
	if len(got) != 1 || got[0].Data != "partial" {
		t.Errorf("events = %v", got)
	}
}

// rawServer serves h without the REST API, for answers sandpit would not give.
func rawServer(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return New(srv.URL, srv.Client())
}

func TestStreamCutShort(t *testing.T) {
	c := rawServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		io.WriteString(w, `{"type":"stdout","data":"a"}`+"\n"+`{"type":"result","res`)
	})
	var n int
	_, err := c.Execute(context.Background(), apitype.ExecuteRequest{Code: "x"}, func(apitype.Event) { n++ })
	if err == nil || n != 1 {
		t.Fatalf("err %v, events %d; want an error after 1 event", err, n)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("err = %v", err)
	}
}

func TestStreamEndsWithoutResult(t *testing.T) {
	c := rawServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		io.WriteString(w, `{"type":"stdout","data":"a"}`+"\n"+`{"type":"progress","pct":50}`+"\n")
	})
	_, err := c.Execute(context.Background(), apitype.ExecuteRequest{Code: "x"}, func(apitype.Event) {})
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("err = %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestNonSandpitErrorBody(t *testing.T) {
	c := rawServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "7")
		http.Error(w, "upstream connect error", http.StatusBadGateway)
	})
	_, err := c.Execute(context.Background(), apitype.ExecuteRequest{Code: "x"}, nil)
	var ae *APIError
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v", err)
	}
	if ae.Status != 502 || ae.Code != "" || ae.Message != "upstream connect error" || ae.RetryAfter != 7*time.Second {
		t.Errorf("APIError = %+v", ae)
	}
	if got, want := ae.Error(), "upstream connect error (HTTP 502); retry after 7s"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestExecuteRefusesBadInputLocally(t *testing.T) {
	c := rawServer(t, func(w http.ResponseWriter, r *http.Request) { t.Error("request sent") })
	for _, req := range []apitype.ExecuteRequest{{Code: "print('\xff')"}, {Code: "x", Input: json.RawMessage(`{nope`)}} {
		if _, err := c.Execute(context.Background(), req, nil); err == nil {
			t.Errorf("Execute(%+v) succeeded", req)
		}
	}
}

func TestHealth(t *testing.T) {
	c := daemon(t, &fakeExec{Cfg: engine.DefaultConfig(), ReadyErr: sandbox.ErrNotReady})
	if err := c.Health(context.Background()); err != nil {
		t.Errorf("Health of a live daemon = %v", err)
	}

	// Nothing listening: the refused connection's error, not a wait for the context's end.
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := New(url, nil).Health(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Health with no daemon = %v; want the refused connection's error", err)
	}

	// Something else listening.
	other := rawServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"healthy":true}`) })
	if err := other.Health(context.Background()); err == nil {
		t.Error("Health of a foreign server succeeded")
	}
	notFound := rawServer(t, http.NotFound)
	if err := notFound.Health(context.Background()); err == nil {
		t.Error("Health of a 404 server succeeded")
	}
}

func TestReady(t *testing.T) {
	c := daemon(t, &fakeExec{Cfg: engine.DefaultConfig()})
	if err := c.Ready(context.Background()); err != nil {
		t.Errorf("Ready = %v", err)
	}
	c = daemon(t, &fakeExec{Cfg: engine.DefaultConfig(), ReadyErr: fmt.Errorf("image is being pulled: %w", sandbox.ErrNotReady)})
	err := c.Ready(context.Background())
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 503 || ae.Code != "not_ready" || ae.Message != "image is being pulled: sandbox is not ready" || ae.RetryAfter != time.Second {
		t.Errorf("Ready = %#v", err)
	}
}

func TestLimits(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.MaxCodeBytes = 12345
	l, err := daemon(t, &fakeExec{Cfg: cfg}).Limits(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The body fits the code, the input and the input files in base64 (4/3 of their bytes).
	least := int64(12345+cfg.MaxInputBytes) + cfg.MaxInputFilesBytes*4/3
	if l.Slots != 4 || l.MaxCodeBytes != 12345 || l.MaxTimeoutMS != 600000 || l.MaxBodyBytes < least || l.MaxBodyBytes > least+1<<20 ||
		l.Limits != apitype.RunLimits(cfg.Limits) || l.MaxInputFiles != cfg.MaxInputFiles || l.MaxInputFilesBytes != cfg.MaxInputFilesBytes {
		t.Errorf("limits = %+v", l)
	}
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0}, {"3", 3 * time.Second}, {" 1 ", time.Second}, {"-4", 0}, {"soon", 0},
		{time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat), 0},
	}
	for _, tt := range tests {
		if got := retryAfter(tt.in); got != tt.want {
			t.Errorf("retryAfter(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
	future := retryAfter(time.Now().Add(time.Minute).UTC().Format(http.TimeFormat))
	if future < 58*time.Second || future > 61*time.Second {
		t.Errorf("retryAfter(+1m date) = %s", future)
	}
}

// A file of NUL bytes or tabs is valid UTF-8, but JSON text makes it up to six times larger:
// such a file within max_input_file_bytes passed the daemon's body limit as text (a trial found
// 5 MiB of zeros refused). It goes as base64; plain text stays text.
func TestInputFileOfPicksTheSmallerEncoding(t *testing.T) {
	for _, c := range []struct {
		name    string
		content []byte
		want    string
	}{
		{"text", []byte("a,b\n1,2\n"), apitype.EncodingUTF8},
		{"zeros", make([]byte, 1000), apitype.EncodingBase64},
		{"tabs", bytes.Repeat([]byte("\t\t\tx"), 250), apitype.EncodingBase64},
		{"markup", bytes.Repeat([]byte("<a>"), 300), apitype.EncodingBase64},
		{"binary", []byte{0xff, 0xfe, 0}, apitype.EncodingBase64},
	} {
		f := InputFileOf("f", c.content)
		if f.Encoding != c.want {
			t.Errorf("%s: encoding %q, want %q", c.name, f.Encoding, c.want)
		}
		body, _ := json.Marshal(f.Content)
		if c.want == apitype.EncodingUTF8 && len(body) > base64.StdEncoding.EncodedLen(len(c.content))+2 {
			t.Errorf("%s: %d bytes as JSON text, more than base64", c.name, len(body))
		}
	}
}

// TestClassOfForeignAnswers: an error answer that is not a sandpit error body (a proxy's)
// takes the class of its status.
func TestClassOfForeignAnswers(t *testing.T) {
	for status, want := range map[int]error{400: errclass.Invalid, 401: errclass.Forbidden, 404: errclass.NotFound,
		410: errclass.Gone, 413: errclass.TooLarge, 429: errclass.Busy, 502: errclass.Unavailable, 500: nil} {
		c := rawServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			_, _ = io.WriteString(w, "<html>proxy says no</html>")
		})
		_, err := c.Execute(context.Background(), apitype.ExecuteRequest{Code: "x"}, nil)
		if got := errclass.Of(err); got != want {
			t.Errorf("HTTP %d: class %v, want %v (%v)", status, got, want, err)
		}
	}
}

// TestStreamDisplays: a stream's display lines reach the caller (a trial's `sandpit run -c '1+1'`
// through a daemon printed nothing: the client dropped them as a newer client's type).
func TestStreamDisplays(t *testing.T) {
	c := rawServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		io.WriteString(w, `{"type":"display","display":{"data":{"text/plain":"2"},"is_main_result":true}}`+"\n"+
			`{"type":"result","result":{"id":"ex_a","outcome":"ok"}}`+"\n")
	})
	var got []apitype.Event
	if _, err := c.Execute(context.Background(), apitype.ExecuteRequest{Code: "1+1"}, func(ev apitype.Event) { got = append(got, ev) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Stream != apitype.StreamDisplay || got[0].Display == nil || !got[0].Display.IsMainResult {
		t.Fatalf("events %+v, want the display", got)
	}
}
