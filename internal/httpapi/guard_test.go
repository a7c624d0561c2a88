package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

func TestGuardRefusesForeignHostsAndOrigins(t *testing.T) {
	srv := httptest.NewServer(Guard(NewHandler(Backend{Executor: newFake()}, discardLog()), []string{"sandpit.internal"}))
	defer srv.Close()
	cases := []struct {
		name, host, origin string
		want               int
	}{
		{"loopback address", "", "", 200},
		{"localhost", "localhost:8765", "", 200},
		{"ipv6 loopback", "[::1]:8765", "", 200},
		{"allowed name", "sandpit.internal:8765", "", 200},
		{"rebinding name", "attacker.example", "", 403},
		{"private address", "192.168.1.5:8765", "", 403},
		{"page on another site", "", "http://evil.example", 403},
		{"null origin", "", "null", 403},
		{"page on localhost", "", "http://localhost:3000", 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", srv.URL+"/v1/executions", strings.NewReader(`{"code":"print(1)"}`))
			if c.host != "" {
				req.Host = c.host
			}
			if c.origin != "" {
				req.Header.Set("Origin", c.origin)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.want)
			}
		})
	}
	open := httptest.NewServer(Guard(NewHandler(Backend{Executor: newFake()}, discardLog()), []string{"*"}))
	defer open.Close()
	req, _ := http.NewRequest("GET", open.URL+"/healthz", nil)
	req.Host = "anything.example"
	resp, err := open.Client().Do(req)
	if err != nil {
		t.Fatalf("allowed_hosts *: %v", err)
	}
	// Closed, or its connection's read and write loops outlive the test (goleak).
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("allowed_hosts * still refused: %v", resp.Status)
	}
}

func TestExecuteRefusesNonJSONContentTypes(t *testing.T) {
	srv := newServer(t, newFake())
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
		a := do(t, srv, "POST", "/v1/executions", `{"code":"print(1)"}`, "Content-Type", ct)
		if a.status != http.StatusUnsupportedMediaType || !strings.Contains(a.errorDetail(t).Message, "application/json") {
			t.Errorf("%s: %d %s", ct, a.status, a.body)
		}
	}
	if a := do(t, srv, "POST", "/v1/executions", `{"code":"print(1)"}`, "Content-Type", "application/json; charset=utf-8"); a.status != 200 {
		t.Errorf("application/json with charset: %d %s", a.status, a.body)
	}
}

func TestExecuteRefusesRepeatedAndMiscasedKeys(t *testing.T) {
	srv := newServer(t, newFake())
	cases := []struct{ body, field, says string }{
		{`{"code":"print(1)","code":"print(2)"}`, "code", "given twice"},
		{`{"code":"print(1)","Code":"print(2)"}`, "Code", `did you mean "code"`},
		{`{"code":"x","timeout_ms":1000,"TIMEOUT_MS":100000}`, "TIMEOUT_MS", "unknown field"},
	}
	for _, c := range cases {
		a := do(t, srv, "POST", "/v1/executions", c.body)
		d := a.errorDetail(t)
		if a.status != 400 || d.Field != c.field || !strings.Contains(d.Message, c.says) {
			t.Errorf("%s: %d %+v", c.body, a.status, d)
		}
	}
}

// A run longer than the server's ReadTimeout keeps its context (the daemon sets a ReadTimeout
// against clients that never finish their body; it must not end long runs).
func TestLongRunOutlivesServerReadTimeout(t *testing.T) {
	fake := newFake()
	fake.Fn = func(ctx context.Context, _ sandbox.Request, _ func(sandbox.Event)) (sandbox.Result, error) {
		select {
		case <-time.After(600 * time.Millisecond):
			return sampleResult("done\n"), nil
		case <-ctx.Done():
			return sandbox.Result{}, ctx.Err()
		}
	}
	srv := httptest.NewUnstartedServer(NewHandler(Backend{Executor: fake}, discardLog()))
	srv.Config.ReadTimeout = 200 * time.Millisecond
	srv.Start()
	defer srv.Close()
	if a := do(t, srv, "POST", "/v1/executions", `{"code":"x"}`); a.status != 200 || !strings.Contains(string(a.body), "done") {
		t.Fatalf("status %d body %s", a.status, a.body)
	}
}

func TestRequireToken(t *testing.T) {
	h := RequireToken(NewHandler(Backend{Executor: newFake()}, nil), "s3cret-token")
	for _, c := range []struct {
		path, auth string
		want       int
	}{
		{"/healthz", "", 200},
		{"/readyz", "", 401},
		{"/v1/limits", "Bearer wrong", 401},
		{"/v1/limits", "bearer s3cret-token", 200},
		{"/v1/limits", "Basic s3cret-token", 401},
		{"/v1/limits", "Bearer s3cret-token-and-more", 401},
		{"/v1/limits", "Bearer s3cret-token", 200},
	} {
		req := httptest.NewRequest("GET", c.path, nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want || (c.want == 401 && (rec.Header().Get("WWW-Authenticate") == "" || !strings.Contains(rec.Body.String(), "token"))) {
			t.Errorf("%s with %q: %d %s", c.path, c.auth, rec.Code, rec.Body)
		}
	}
}
