package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/testenv/pyindex"
)

// TestEgressAllowlistREST runs the daemon with network "allowlist" (the default) and a
// network_allow naming the package index's address by CIDR: a run fetches from it through
// the proxy, a request may narrow the list but not widen it, and the ledger's record and
// /metrics show the connections.
func TestEgressAllowlistREST(t *testing.T) {
	idx := pyindex.New(t) // on the bridge gateway's address: the host's, as the daemon dials it
	idx.AddWheel("tinypkg", "1.0", `VALUE = "1.0"`)
	cfg := testConfig(t)
	if cfg.Network != "allowlist" {
		t.Fatalf("the default network is %q", cfg.Network)
	}
	cfg.Slots = 1
	cfg.IndexURL, cfg.TrustedHosts = idx.URL(), []string{idx.Host()}
	cfg.Preload = []string{"requests"}
	cfg.NetworkAllow = []string{idx.Host() + "/32"}
	url, stop := startDaemon(t, cfg)
	defer stop()
	warm(t, url, cfg.Slots)

	code := fmt.Sprintf(`
import requests
try:
    r = requests.get(%q, timeout=30)
    print(r.status_code)
    print(r.text[:300])
except requests.exceptions.RequestException as e:
    print("error", e)
`, idx.URL())
	run := func(extra string) (int, sandbox.Result, []byte) {
		body, _ := json.Marshal(map[string]any{"code": code})
		if extra != "" {
			body = []byte(strings.TrimSuffix(string(body), "}") + "," + extra + "}")
		}
		resp, b := post(t, url, string(body))
		var res sandbox.Result
		_ = json.Unmarshal(b, &res)
		return resp.StatusCode, res, b
	}

	st, res, b := run("")
	if st != 200 || !strings.HasPrefix(res.Stdout, "200\n") {
		t.Fatalf("a fetch from an allowed address: %d %s", st, b)
	}
	if len(res.Egress) != 1 || !res.Egress[0].Allowed || res.Egress[0].Address != idx.Host() || res.Egress[0].BytesReceived == 0 ||
		res.Egress[0].Rule != idx.Host()+"/32" {
		t.Errorf("the result's egress: %+v", res.Egress)
	}
	// The ledger's record holds the same connections.
	resp, err := http.Get(url + "/v1/executions/" + res.ID)
	if err != nil {
		t.Fatal(err)
	}
	var rec sandbox.Result
	_ = json.NewDecoder(resp.Body).Decode(&rec)
	resp.Body.Close()
	if len(rec.Egress) != 1 || rec.Egress[0] != res.Egress[0] {
		t.Errorf("the ledger's egress %+v, want %+v", rec.Egress, res.Egress)
	}

	// Narrowed to nothing: refused, and the answer says which setting refused it.
	st, res, b = run(`"network_allow": []`)
	if st != 200 || !strings.HasPrefix(res.Stdout, "403\n") || !strings.Contains(res.Stdout, "network_allow in the request") {
		t.Errorf("a run that narrowed the list to nothing: %d %s", st, b)
	}
	if len(res.Egress) != 1 || res.Egress[0].Allowed || res.Egress[0].Reason == "" {
		t.Errorf("the refused connection's record: %+v", res.Egress)
	}
	// Widening is refused before anything runs.
	st, _, b = run(`"network_allow": ["10.0.0.0/8"]`)
	if st != 400 || !strings.Contains(string(b), "network_allow") || !strings.Contains(string(b), "10.0.0.0/8") {
		t.Errorf("a request that widens the list: %d %s", st, b)
	}
	// GET /v1/limits shows the policy; /metrics counts the connections.
	resp, err = http.Get(url + "/v1/limits")
	if err != nil {
		t.Fatal(err)
	}
	lb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(lb), `"network":"allowlist"`) || !strings.Contains(string(lb), `"network_allow":["`+idx.Host()+`/32"]`) {
		t.Errorf("limits: %s", lb)
	}
	resp, err = http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`sandpit_egress_connections_total{result="allowed"} 1`, `sandpit_egress_connections_total{result="refused"} 1`} {
		if !strings.Contains(string(mb), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Installs reach the package index through the proxy; runs do not need it in the list.
	body := `{"code": "import tinypkg; print(tinypkg.VALUE)", "dependencies": ["tinypkg==1.0"]}`
	resp2, b := post(t, url, body)
	_ = json.Unmarshal(b, &res)
	if resp2.StatusCode != 200 || res.Stdout != "1.0\n" {
		t.Errorf("an install through the proxy: %d %s", resp2.StatusCode, b)
	}
	if len(res.Egress) == 0 || !res.Egress[0].Install || !res.Egress[0].Allowed || res.Egress[0].Address != idx.Host() {
		t.Errorf("the install's connections in the result: %+v", res.Egress)
	}
	// A session's calls go through the same proxy and policy, in the session's own container.
	status, sb := httpCall(t, "POST", url+"/v1/agents/alice/sessions", `{}`)
	var sess struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(sb, &sess); status != 201 && status != 200 || err != nil || sess.ID == "" {
		t.Fatalf("creating a session: %d %s", status, sb)
	}
	defer httpCall(t, "DELETE", url+"/v1/agents/alice/sessions/"+sess.ID, "")
	call, _ := json.Marshal(map[string]any{"code": code})
	status, sb = httpCall(t, "POST", url+"/v1/agents/alice/sessions/"+sess.ID+"/executions", string(call))
	var sres sandbox.Result
	_ = json.Unmarshal(sb, &sres)
	if status != 200 || !strings.HasPrefix(sres.Stdout, "200\n") || len(sres.Egress) != 1 || !sres.Egress[0].Allowed {
		t.Errorf("a fetch from a session: %d %s", status, sb)
	}
	sessionEgressRecorded(t, url+"/v1/agents/alice/sessions/"+sess.ID, idx.URL(), idx.Host())
}

// sessionEgressRecorded: the connections of a session's command, and of a thread a call left
// running, are in the ledger (GET …/egress), as a call's are in its record (issue 51, item 5:
// they were recorded nowhere). base is the session's REST path, target a URL it may fetch
// from host.
func sessionEgressRecorded(t *testing.T, base, target, host string) {
	t.Helper()
	cmd, _ := json.Marshal(map[string]any{"cmd": fmt.Sprintf(`python3 -c 'import requests; print(requests.get(%q, timeout=30).status_code)'`, target+"?from=command")})
	if status, b := httpCall(t, "POST", base+"/commands", string(cmd)); status != 200 || !strings.Contains(string(b), `"stdout":"200\n"`) {
		t.Fatalf("a fetch from a session's command: %d %s", status, b)
	}
	left, _ := json.Marshal(map[string]any{"code": fmt.Sprintf(`
import threading, time, requests
def later():
    time.sleep(0.5)
    requests.get(%q, timeout=30)
threading.Thread(target=later).start()
`, target+"?from=thread")})
	if status, b := httpCall(t, "POST", base+"/executions", string(left)); status != 200 {
		t.Fatalf("a call that leaves a thread: %d %s", status, b)
	}
	var list struct {
		Connections []sandbox.EgressConnection `json:"connections"`
	}
	for deadline := time.Now().Add(30 * time.Second); len(list.Connections) < 2; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the session's egress records: %+v; want the command's and the thread's", list.Connections)
		}
		status, b := httpCall(t, "GET", base+"/egress", "")
		if status != 200 || json.Unmarshal(b, &list) != nil {
			t.Fatalf("GET …/egress: %d %s", status, b)
		}
	}
	for _, c := range list.Connections {
		if !c.Allowed || c.Address != host || c.BytesReceived == 0 {
			t.Errorf("a recorded connection: %+v", c)
		}
	}
}

// TestEgressNeverReachesTheDaemonsAPI: with the host's whole loopback in network_allow, a
// run that asks the proxy for the daemon's own API is refused (a trial had followed an old
// refusal's hint, 127.0.0.1/32, and read another agent's records through the API).
func TestEgressNeverReachesTheDaemonsAPI(t *testing.T) {
	cfg := testConfig(t)
	cfg.Slots = 1
	cfg.Preload = nil
	cfg.NetworkAllow = []string{"127.0.0.0/8"}
	url, stop := startDaemon(t, cfg)
	defer stop()
	warm(t, url, cfg.Slots)
	code := fmt.Sprintf(`
import http.client, os, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
conn = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=30)
conn.request("GET", %q)  # absolute-form, as a proxy gets it
r = conn.getresponse()
print("refused" if r.status == 403 else "fetched", r.status, r.read()[:300])
`, url+"/v1/executions?agent=default")
	body, _ := json.Marshal(map[string]any{"code": code})
	resp, b := post(t, url, string(body))
	var res sandbox.Result
	_ = json.Unmarshal(b, &res)
	if resp.StatusCode != 200 || !strings.HasPrefix(res.Stdout, "refused 403") || !strings.Contains(res.Stdout, "sandpit's own API") {
		t.Fatalf("a fetch of the daemon's API from a run: %d %s", resp.StatusCode, b)
	}
	if len(res.Egress) != 1 || res.Egress[0].Allowed {
		t.Errorf("the refused connection's record: %+v", res.Egress)
	}
}
