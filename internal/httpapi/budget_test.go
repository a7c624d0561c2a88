package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
		release, ok := b.admit(w, r)
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
