package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The body budget admits by Content-Length before reading: a body that does not fit is a 429
// with Retry-After, one over the most a request may send a 413, one without Content-Length
// counts as that most (and is held to it); released bytes admit again.
func TestBodyBudgetAdmitsByContentLength(t *testing.T) {
	b := newBodyBudget(100, 60)
	req := func(n int, chunked bool) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/v1/executions", strings.NewReader(strings.Repeat("x", n)))
		if chunked {
			r.ContentLength = -1
		}
		return r
	}
	admit := func(r *http.Request) (func(), int, string) {
		w := httptest.NewRecorder()
		release, ok := b.admit(w, r, "")
		if ok {
			return release, 0, ""
		}
		return nil, w.Code, w.Header().Get("Retry-After")
	}
	first, code, _ := admit(req(50, false))
	if code != 0 {
		t.Fatalf("the first 50 bytes of a budget of 100: %d", code)
	}
	if _, code, retry := admit(req(51, false)); code != http.StatusTooManyRequests || retry == "" {
		t.Errorf("51 bytes more than 50 free: %d (Retry-After %q), want 429 with Retry-After", code, retry)
	}
	if _, code, _ := admit(req(61, false)); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over the most one request may send: %d, want 413", code)
	}
	if _, code, _ := admit(req(10, true)); code != http.StatusTooManyRequests {
		t.Errorf("a chunked body counts as 60 bytes, over the 50 free: %d, want 429", code)
	}
	first()
	r := req(70, true)
	release, code, _ := admit(r)
	if code != 0 {
		t.Fatalf("a chunked body once the budget is free: %d", code)
	}
	defer release()
	if n, err := io.Copy(io.Discard, r.Body); err == nil || n > 60 {
		t.Errorf("a chunked body of 70 bytes read %d bytes, err %v; want an error at 60", n, err)
	}
	if _, code, _ := admit(req(50, false)); code != http.StatusTooManyRequests {
		t.Errorf("while a chunked body holds 60 of 100: %d, want 429", code)
	}
}

// TestOneAgentsBodiesLeaveTheBudgetToOthers: two slow chunked bodies of one agent (each
// counted as the most one request may send) held the whole of bodies_max_bytes, and every
// other agent's POST got 429 (issue 51, 3). Each agent holds at most its share now: its own
// next body is refused, naming the share, while another agent's and a request naming no agent
// are read.
func TestOneAgentsBodiesLeaveTheBudgetToOthers(t *testing.T) {
	const perBody = 1 << 20
	a := NewHandler(Backend{}, nil).(*api)
	a.bodies = newBodyBudget(2*perBody, perBody)
	read := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]int64{"read": n})
	})
	srv := httptest.NewServer(LimitBodies(a, read, func(r *http.Request) string { return pathAgent(r.URL.Path) }))
	defer srv.Close()

	tr := &http.Transport{}
	client := &http.Client{Transport: tr}
	// Alice's slow bodies: chunked, never ended until the test does.
	var writers []*io.PipeWriter
	slow := make(chan *http.Response, 2)
	defer func() {
		for _, w := range writers {
			_ = w.Close()
		}
		if resp := <-slow; resp != nil { // the one held
			resp.Body.Close()
		}
		tr.CloseIdleConnections()
	}()
	for range 2 {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		go func() {
			resp, err := client.Post(srv.URL+"/v1/agents/alice/code", "application/json", pr)
			if err != nil {
				slow <- nil
				return
			}
			slow <- resp
		}()
		if _, err := pw.Write([]byte("{")); err != nil { // admitted once its first byte is read
			t.Fatal(err)
		}
	}
	// One of alice's is held, the other refused at once for her share.
	var resp *http.Response
	select {
	case resp = <-slow:
	case <-time.After(10 * time.Second):
		t.Fatal("neither of alice's two slow bodies was answered: both are held")
	}
	if resp == nil {
		t.Fatal("alice's second body: the request failed")
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), `agent \"alice\"`) ||
		!strings.Contains(string(body), "share") {
		t.Errorf("alice's second slow body: %d %s; want 429 naming her share", resp.StatusCode, body)
	}
	for _, path := range []string{"/v1/agents/bob/code", "/mcp"} {
		resp, err := client.Post(srv.URL+path, "application/json", strings.NewReader(`{"x": 1}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("POST %s while alice's body is held: %d %s; want 200", path, resp.StatusCode, body)
		}
	}
}
