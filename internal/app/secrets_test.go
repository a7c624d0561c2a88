package app_test

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/secrets"
	"github.com/sandpit-dev/sandpit/internal/testenv/pyindex"
)

// TestSecretReachesOnlyItsHost runs a real box: a run naming a secret sees only its
// placeholder, requests (trusting the box's bundle with the daemon's CA) sends it to the bound
// host, which gets the value from the daemon's side of the proxy (verified against
// secrets_trust_ca_file) and whose echo comes back as the placeholder; the placeholder in a
// query string stays one; the box holds no CA key.
func TestSecretReachesOnlyItsHost(t *testing.T) {
	host := pyindex.New(t).Host() // the bridge gateway's address: the host's, as the daemon dials it
	hostCA, err := secrets.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen []string
	)
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.RequestURI()+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = io.WriteString(w, "echo: "+r.Header.Get("Authorization"))
	}), TLSConfig: &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return hostCA.Leaf(host) }}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	cfg := testConfig(t)
	cfg.Slots = 1
	cfg.Preload = []string{"requests"}
	cfg.NetworkAllow = []string{fmt.Sprintf("%s:%d", host, port)}
	caFile := filepath.Join(t.TempDir(), "host-ca.pem")
	if err := os.WriteFile(caFile, hostCA.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.SecretsTrustCAFile = caFile
	url, stop := startDaemon(t, cfg)
	defer stop()
	const value = "tok-VALUE-3141592"
	req, _ := http.NewRequest("PUT", url+"/v1/secrets/TOKEN", strings.NewReader(fmt.Sprintf(`{"value": %q, "hosts": [%q]}`, value, host)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("setting the secret: %v %v", resp, err)
	}
	resp.Body.Close()
	warm(t, url, cfg.Slots)

	code := fmt.Sprintf(`
import os, requests
tok = os.environ["TOKEN"]
print("env", tok)
r = requests.get("https://%[1]s:%[2]d/bound", headers={"Authorization": "Bearer " + tok}, timeout=30)
print(r.status_code, r.text)
r = requests.get("https://%[1]s:%[2]d/query?key=" + tok, timeout=30)
print(r.status_code, r.text)
# urllib sends Connection: close: the proxy's answer must reach the run whole (the body was
# lost when the proxy closed its side while the box still wrote; bench, 5 December).
import urllib.request
with urllib.request.urlopen(urllib.request.Request("https://%[1]s:%[2]d/urllib", headers={"Authorization": "Bearer " + tok}), timeout=30) as r:
    print("urllib", r.status, r.read().decode())
found = []
for d, subs, files in os.walk("/"):
    subs[:] = [s for s in subs if os.path.join(d, s) not in ("/proc", "/sys", "/dev")]
    found += [os.path.join(d, f) for f in files if f in ("secrets-ca-key.pem", "secrets.key")]
print("keys", found)
`, host, port)
	body, _ := json.Marshal(map[string]any{"code": code, "secrets": []string{"TOKEN"}})
	_, b := post(t, url, string(body))
	var res sandbox.Result
	_ = json.Unmarshal(b, &res)
	mu.Lock()
	got := strings.Join(seen, "|")
	mu.Unlock()
	want := "/bound Bearer " + value + "|/query?key=" + secrets.Placeholder("TOKEN") + " |/urllib Bearer " + value
	if got != want {
		t.Errorf("the host saw %q, want %q; the run: %s", got, want, b)
	}
	ph := secrets.Placeholder("TOKEN")
	for _, line := range []string{"env " + ph, "200 echo: Bearer " + ph, "200 echo: \n", "urllib 200 echo: Bearer " + ph + "\n", "keys []"} {
		if !strings.Contains(res.Stdout, line) {
			t.Errorf("stdout lacks %q: %s", line, b)
		}
	}
	if strings.Contains(string(b), value) {
		t.Errorf("the value reached the run's answer: %s", b)
	}
	// The run's record keeps its uses: the bound requests' values added, the query's not.
	if len(res.SecretUses) != 3 || !res.SecretUses[0].Added || !res.SecretUses[2].Added || res.SecretUses[0].Status != 200 || res.SecretUses[1].Added ||
		res.SecretUses[0].Secret != "TOKEN" || res.SecretUses[0].Host != host {
		t.Errorf("the run's secret uses: %+v", res.SecretUses)
	}
	if st, rec := httpCall(t, "GET", url+"/v1/executions/"+res.ID, ""); st != 200 || !strings.Contains(string(rec), `"secret_uses":[{"secret":"TOKEN"`) || strings.Contains(string(rec), value) {
		t.Errorf("the run's record: %d %s", st, rec)
	}
	// A run that names a secret no one set is refused, naming it.
	body, _ = json.Marshal(map[string]any{"code": "1", "secrets": []string{"NOPE"}})
	if r, b := post(t, url, string(body)); r.StatusCode != 400 || !strings.Contains(string(b), "NOPE") {
		t.Errorf("an unknown secret: %d %s", r.StatusCode, b)
	}

	// Saved code's run names secrets as a run does.
	save, _ := json.Marshal(map[string]any{"name": "fetch", "code": fmt.Sprintf(`import os, requests
print(requests.get("https://%s:%d/saved", headers={"Authorization": "Bearer " + os.environ["TOKEN"]}, timeout=30).text)`, host, port)})
	if st, b := httpCall(t, "POST", url+"/v1/agents/default/code", string(save)); st != 201 {
		t.Fatalf("saving code: %d %s", st, b)
	}
	st, b := httpCall(t, "POST", url+"/v1/agents/default/code/fetch/run", `{"secrets": ["TOKEN"]}`)
	mu.Lock()
	got = strings.Join(seen, "|")
	mu.Unlock()
	if st != 200 || !strings.Contains(string(b), "echo: Bearer "+ph) || !strings.Contains(got, "/saved Bearer "+value) {
		t.Errorf("saved code run with a secret: %d %s; the host saw %q", st, b, got)
	}

	// A session's calls and commands use the secret too: its code sees the placeholder,
	// the host gets the value (issue 47: sessions named no secrets, and a session call's
	// "secrets" was silently dropped).
	sessionUsesTheSecret(t, url, host, port, value, func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(seen, "|")
	})
}

// sessionUsesTheSecret: a session created with secret TOKEN (bound to host, set to value)
// sends it from a call and from a command (a client trusting the daemon's CA through the
// bundle's variables), the host (seen: what it got) getting the value each time, and records
// its name, never the value; an unknown name, or a name that is not a list, is refused.
func sessionUsesTheSecret(t *testing.T, url, host string, port int, value string, seen func() string) {
	t.Helper()
	ph := secrets.Placeholder("TOKEN")
	for _, bad := range []string{`{"secrets": ["NOPE"]}`, `{"secrets": "TOKEN"}`} {
		if st, b := httpCall(t, "POST", url+"/v1/agents/alice/sessions", bad); st != 400 || !strings.Contains(string(b), "secrets") {
			t.Errorf("a session naming %s: %d %s", bad, st, b)
		}
	}
	st, b := httpCall(t, "POST", url+"/v1/agents/alice/sessions", `{"secrets": ["TOKEN"]}`)
	var sess struct {
		ID      string   `json:"id"`
		Secrets []string `json:"secrets"`
	}
	if err := json.Unmarshal(b, &sess); st != 201 || err != nil || len(sess.Secrets) != 1 || sess.Secrets[0] != "TOKEN" {
		t.Fatalf("creating a session with a secret: %d %s", st, b)
	}
	base := url + "/v1/agents/alice/sessions/" + sess.ID
	defer httpCall(t, "DELETE", base, "")
	fetch := fmt.Sprintf(`import os, requests; r = requests.get("https://%s:%d/session", headers={"Authorization": "Bearer " + os.environ["TOKEN"]}, timeout=30); print(r.status_code, r.text)`, host, port)
	call, _ := json.Marshal(map[string]any{"code": fetch})
	st, b = httpCall(t, "POST", base+"/executions", string(call))
	if want := "200 echo: Bearer " + ph; st != 200 || !strings.Contains(string(b), want) {
		t.Errorf("a session call: %d %s, want %q in its stdout", st, b, want)
	}
	// A command: no interpreter of the daemon's in between, only the command's environment.
	cmd, _ := json.Marshal(map[string]any{"cmd": "echo env=$TOKEN; python3 -c '" + strings.ReplaceAll(fetch, "'", `'"'"'`) + "'"})
	st, b = httpCall(t, "POST", base+"/commands", string(cmd))
	if want := `env=` + ph + `\n200 echo: Bearer ` + ph; st != 200 || !strings.Contains(string(b), want) {
		t.Errorf("a session command: %d %s, want %q in its stdout", st, b, want)
	}
	if strings.Contains(string(b), value) {
		t.Errorf("the value reached the command's answer: %s", b)
	}
	if got, want := strings.Count(seen(), "/session Bearer "+value), 2; got != want {
		t.Errorf("the host got the value %d times from the session, want %d: %s", got, want, seen())
	}
}
