package httpapi_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/httpapi/httpapitest"
	"github.com/sandpit-dev/sandpit/internal/secrets"
	"github.com/sandpit-dev/sandpit/internal/store"
)

func testCipher(t *testing.T) *secrets.Cipher {
	t.Helper()
	c, err := secrets.NewCipher(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSecretsREST: secrets are set, listed and removed over REST behind the daemon's token;
// no answer holds a value, and a bad field is a 400 naming it.
func TestSecretsREST(t *testing.T) {
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	k := secrets.NewKeeper(st, testCipher(t))
	srv := httptest.NewServer(httpapi.RequireToken(httpapi.NewHandler(httpapi.Backend{Secrets: k}, nil), "tok"))
	defer srv.Close()
	var all strings.Builder
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
		all.Write(b)
		return resp.StatusCode, string(b)
	}
	if code, body := call("GET", "/v1/secrets", "", ""); code != 401 {
		t.Fatalf("without the token: %d %s", code, body)
	}
	if code, body := call("PUT", "/v1/secrets/GH_TOKEN", `{"value": "ghp-value-77", "hosts": ["*.github.com"], "header": "X-Token"}`, "tok"); code != 200 ||
		!strings.Contains(body, `"format":"{{secret}}"`) || !strings.Contains(body, `"header":"X-Token"`) {
		t.Fatalf("set shared: %d %s", code, body)
	}
	if code, body := call("PUT", "/v1/secrets/OPENAI", `{"agent": "alice", "value": "sk-value-99", "hosts": ["api.openai.com"]}`, "tok"); code != 200 {
		t.Fatalf("set alice's: %d %s", code, body)
	}
	for _, bad := range []struct{ path, body, field string }{
		{"/v1/secrets/PATH", `{"value": "v", "hosts": ["a.example"]}`, `"field":"name"`},
		{"/v1/secrets/K", `{"value": "v", "hosts": []}`, `"field":"hosts"`},
		{"/v1/secrets/K", `{"value": "", "hosts": ["a.example"]}`, `"field":"value"`},
		{"/v1/secrets/K", `{"value": "v\n", "hosts": ["a.example"]}`, `"field":"value"`},
		{"/v1/secrets/K", `{"value": "v", "hosts": ["a.example"], "format": "Bearer x"}`, `"field":"format"`},
		{"/v1/secrets/K", `{"value": "v", "hosts": ["a.example"], "agent": "Bad Agent"}`, `"field":"agent"`},
		{"/v1/secrets/K", `{"value": "v", "hosts": ["a.example"], "vaule": 1}`, `vaule`},
	} {
		if code, body := call("PUT", bad.path, bad.body, "tok"); code != 400 || !strings.Contains(body, bad.field) {
			t.Errorf("PUT %s %s: %d %s, want 400 naming %s", bad.path, bad.body, code, body, bad.field)
		}
	}
	if code, body := call("GET", "/v1/secrets?agent=bob", "", "tok"); code != 200 || !strings.Contains(body, "GH_TOKEN") || strings.Contains(body, "OPENAI") {
		t.Fatalf("bob's list: %d %s", code, body)
	}
	if code, body := call("GET", "/v1/secrets", "", "tok"); code != 200 || !strings.Contains(body, "GH_TOKEN") || !strings.Contains(body, `"agent":"alice"`) {
		t.Fatalf("every list: %d %s", code, body)
	}
	if code, body := call("DELETE", "/v1/secrets/OPENAI", "", "tok"); code != 404 {
		t.Fatalf("removing alice's as shared: %d %s", code, body)
	}
	if code, body := call("DELETE", "/v1/secrets/OPENAI?agent=alice", "", "tok"); code != 200 {
		t.Fatalf("remove: %d %s", code, body)
	}
	if strings.Contains(all.String(), "value-") {
		t.Fatalf("an answer held a value: %s", all.String())
	}
}

// TestSecretSetWarnsOfHostsNoRunReaches: a secret whose hosts the daemon's network_allow does
// not reach, or set on a daemon whose runs bypass the egress proxy, is kept, and the answer
// says why its value would never be sent (a new user's secret silently did nothing).
func TestSecretSetWarnsOfHostsNoRunReaches(t *testing.T) {
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	k := secrets.NewKeeper(st, testCipher(t))
	for _, c := range []struct {
		network string
		allow   []string
		hosts   string
		want    []string // in the warnings, in order; none for nil
	}{
		{"allowlist", []string{"api.openai.com", "*.github.com"}, `["api.openai.com", "api.github.com"]`, nil},
		{"allowlist", []string{"api.openai.com"}, `["api.openai.com", "api.anthropic.com", "*.github.com"]`,
			[]string{"api.anthropic.com is not reached by the daemon's network_allow", "*.github.com is not reached"}},
		{"full", nil, `["api.openai.com"]`, []string{`network is \"full\"`, `set network to \"allowlist\"`}},
		{"none", nil, `["api.openai.com"]`, []string{`network is \"none\"`}},
	} {
		cfg := engine.DefaultConfig()
		cfg.Network, cfg.NetworkAllow = c.network, c.allow
		srv := httptest.NewServer(httpapi.NewHandler(httpapi.Backend{Executor: &httpapitest.Executor{Cfg: cfg}, Secrets: k}, nil))
		req, _ := http.NewRequest("PUT", srv.URL+"/v1/secrets/KEY", strings.NewReader(`{"value": "v-1", "hosts": `+c.hosts+`}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		body := string(b)
		if resp.StatusCode != 200 {
			t.Fatalf("network %s, hosts %s: %d %s, want the secret kept", c.network, c.hosts, resp.StatusCode, body)
		}
		if c.want == nil && strings.Contains(body, "warnings") {
			t.Errorf("network %s allowing %v, hosts %s: %s, want no warning", c.network, c.allow, c.hosts, body)
		}
		rest := body
		for _, w := range c.want {
			i := strings.Index(rest, w)
			if i < 0 {
				t.Errorf("network %s allowing %v, hosts %s: %s, want a warning with %q", c.network, c.allow, c.hosts, body, w)
				break
			}
			rest = rest[i+len(w):]
		}
	}
}
