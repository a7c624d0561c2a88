package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// TestKeysREST: the E2B API's keys are made, listed and revoked over REST (the CLI wrote them
// into whichever database its data directory named, not the daemon's at SANDPIT_URL), behind
// the daemon's token; a key is given once, and no listing shows it.
func TestKeysREST(t *testing.T) {
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv := httptest.NewServer(httpapi.RequireToken(httpapi.NewHandler(httpapi.Backend{Keys: st}, nil), "s3cret"))
	defer srv.Close()
	call := func(method, path, body, token string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, token := range []string{"", "wrong"} {
		if code, body := call("POST", "/v1/keys", `{"agent": "alice"}`, token); code != 401 {
			t.Fatalf("POST /v1/keys with token %q: %d %s", token, code, body)
		}
		if code, body := call("GET", "/v1/keys", "", token); code != 401 {
			t.Fatalf("GET /v1/keys with token %q: %d %s", token, code, body)
		}
	}
	code, body := call("POST", "/v1/keys", `{"agent": "alice", "name": "ci"}`, "s3cret")
	var made apitype.APIKeyCreated
	if code != 201 || json.Unmarshal([]byte(body), &made) != nil || !strings.HasPrefix(made.Key, "e2b_") || made.Agent != "alice" || made.Name != "ci" ||
		!strings.HasPrefix(made.Key, made.Prefix) {
		t.Fatalf("create: %d %s", code, body)
	}
	if code, body := call("POST", "/v1/keys", `{"agent": "bob"}`, "s3cret"); code != 201 {
		t.Fatalf("create bob's: %d %s", code, body)
	}
	for path, want := range map[string]int{"/v1/keys": 2, "/v1/keys?agent=alice": 1, "/v1/keys?agent=carol": 0} {
		code, body := call("GET", path, "", "s3cret")
		var list apitype.APIKeyList
		if code != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list.Keys) != want || strings.Contains(body, made.Key) {
			t.Fatalf("GET %s: %d %s; want %d keys, none whole", path, code, body, want)
		}
	}
	for _, c := range []struct {
		method, path, body, field string
		code                      int
	}{
		{"POST", "/v1/keys", `{}`, "agent", 400},
		{"POST", "/v1/keys", `{"agent": "../x"}`, "agent", 400},
		{"POST", "/v1/keys", `{"agent": "alice", "scope": "all"}`, "scope", 400},
		{"GET", "/v1/keys?agent=Bad", "", "agent", 400},
		{"GET", "/v1/keys?owner=alice", "", "owner", 400},
		{"POST", "/v1/keys/revoke", `{}`, "key", 400},
		{"POST", "/v1/keys/revoke", `{"key": "key_nosuch"}`, "", 404},
	} {
		code, body := call(c.method, c.path, c.body, "s3cret")
		if code != c.code || c.field != "" && !strings.Contains(body, `"field":"`+c.field+`"`) {
			t.Errorf("%s %s %s: %d %s; want %d naming %q", c.method, c.path, c.body, code, body, c.code, c.field)
		}
	}
	// By the key itself (in the body, never in a URL), or by its ID.
	code, body = call("POST", "/v1/keys/revoke", `{"key": "`+made.Key+`"}`, "s3cret")
	var revoked apitype.APIKey
	if code != 200 || json.Unmarshal([]byte(body), &revoked) != nil || revoked.ID != made.ID || revoked.RevokedAt == nil {
		t.Fatalf("revoke: %d %s", code, body)
	}
}
