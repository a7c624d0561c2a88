package app_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/e2b/e2bclient"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/internal/testenv/pyindex"
)

// TestE2BNarrowingHoldsForEveryPath (H80): an E2B sandbox created with allow_internet_access
// false reaches no host, not even one of the daemon's network_allow, by any path out: its
// interpreter, a command, and a thread a run_code left running. (Before, its commands and the
// threads used the daemon's list: the narrowing held for run_code only.) A sandbox without the
// setting reaches the host by each path. Every sandbox and session here is claimed from the
// warm pool (e2b_pool 1, waited for), whose warm sessions were made without narrowing.
func TestE2BNarrowingHoldsForEveryPath(t *testing.T) {
	idx := pyindex.New(t) // an HTTP server on the host's bridge address, as the daemon dials it
	dcfg := testConfig(t)
	dcfg.Slots, dcfg.ForkServer, dcfg.E2BPool, dcfg.SessionPoolMax = 1, false, 1, 1
	dcfg.NetworkAllow = []string{idx.Host() + "/32"}
	base, _ := startDaemon(t, dcfg)
	st, err := app.OpenKeys(t.Context(), dcfg, testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := st.CreateAPIKey(t.Context(), "nina", "test")
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	c := &e2bclient.Client{APIURL: base + app.E2BPrefix, SandboxURL: base + app.E2BPrefix, APIKey: key}
	ctx := t.Context()
	fetch := fmt.Sprintf("import urllib.request\ntry:\n    print(urllib.request.urlopen(%q, timeout=20).status)\nexcept Exception as e:\n    print('refused', e)", idx.URL())
	thread := fmt.Sprintf(`import threading, time, urllib.request
def later():
    time.sleep(1)
    try:
        r = str(urllib.request.urlopen(%q, timeout=20).status)
    except Exception as e:
        r = 'refused ' + str(e)
    open('/home/user/thread.txt', 'w').write(r)
threading.Thread(target=later).start()`, idx.URL())
	paths := func(body map[string]any) map[string]string {
		t.Helper()
		waitPoolReady(t, base)
		sb, err := c.Create(ctx, body)
		if err != nil {
			t.Fatal(err)
		}
		conn := c.Conn(sb.SandboxID, sb.EnvdAccessToken)
		defer c.Kill(ctx, sb.SandboxID)
		got := map[string]string{}
		ex, err := conn.RunCode(ctx, fetch, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		got["run_code"] = ex.Text() + strings.Join(ex.Stdout, "")
		if _, err := conn.WriteFile(ctx, "/home/user/fetch.py", []byte(fetch), false); err != nil {
			t.Fatal(err)
		}
		res, err := conn.Run(ctx, "python3 fetch.py 2>&1", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		got["command"] = res.Stdout
		if _, err := conn.RunCode(ctx, thread, "", nil); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for {
			b, err := conn.ReadFile(ctx, "/home/user/thread.txt")
			if err == nil && len(b) > 0 {
				got["thread"] = string(b)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the thread wrote nothing: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		return got
	}
	for path, out := range paths(map[string]any{"templateID": "base", "timeout": 300}) {
		if !strings.Contains(out, "200") {
			t.Errorf("a sandbox without narrowing, by its %s: %q, want 200", path, out)
		}
	}
	for path, out := range paths(map[string]any{"templateID": "base", "timeout": 300, "allow_internet_access": false}) {
		if !strings.Contains(out, "refused") || !strings.Contains(out, "403") {
			t.Errorf("a sandbox without internet access, by its %s: %q, want refused by the proxy (403)", path, out)
		}
	}

	// The same property over REST: a session created with network_allow [] shows it, and its
	// commands reach nothing; a narrowing that would widen the daemon's list is refused.
	sessions := base + "/v1/agents/nina/sessions"
	if st, b := httpCall(t, "POST", sessions, `{"network_allow": ["elsewhere.example"]}`); st != 400 || !strings.Contains(string(b), "network_allow") {
		t.Fatalf("a widening narrowing: %d %s", st, b)
	}
	waitPoolReady(t, base)
	st2, b := httpCall(t, "POST", sessions, `{"network_allow": []}`)
	var sess struct {
		ID           string   `json:"id"`
		NetworkAllow []string `json:"network_allow"`
	}
	if err := json.Unmarshal(b, &sess); st2 != 201 || err != nil || sess.NetworkAllow == nil || len(sess.NetworkAllow) != 0 {
		t.Fatalf("a session narrowed to nothing: %d %s", st2, b)
	}
	body, _ := json.Marshal(map[string]any{"argv": []string{"python3", "-c", fetch}})
	if st, b := httpCall(t, "POST", sessions+"/"+sess.ID+"/commands", string(body)); st != 200 || !strings.Contains(string(b), "refused") {
		t.Errorf("a REST session's command: %d %s", st, b)
	}
}

// waitPoolReady waits, up to three minutes, until the daemon at base has a warm session ready.
func waitPoolReady(t *testing.T, base string) {
	t.Helper()
	waitMetric(t, base, "\nsandpit_session_pool_ready 1\n", 3*time.Minute)
}
