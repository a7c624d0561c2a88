package app_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// warmContainers lists the IDs of dataDir's warm session containers, claimed or not.
func warmContainers(t *testing.T, dataDir string) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--no-trunc", "--filter", "label=dev.sandpit.data-dir="+dataDir,
		"--filter", "label=dev.sandpit.warm-session").Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	return strings.Fields(string(out))
}

// waitWarm waits up to two minutes for dataDir to have n warm session containers.
func waitWarm(t *testing.T, dataDir string, n int) []string {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		ids := warmContainers(t, dataDir)
		if len(ids) == n {
			return ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d warm session containers after two minutes, want %d: %v", len(ids), n, ids)
		}
	}
}

// TestWarmSessionREST: a daemon with warm_sessions 1 keeps a session container ready; a
// session created through REST runs in it (closing the session removes that very container),
// and the pool makes another, which outlives the session. A session created while the warm
// container was still starting gets one of its own (and the warm one stays): the test then
// tries again, the warm container ready by then.
func TestWarmSessionREST(t *testing.T) {
	cfg := testConfig(t)
	cfg.Slots, cfg.ForkServer, cfg.WarmSessions = 1, false, 1
	url, _ := startDaemon(t, cfg)
	// The ready warm container is in /readyz's warmth and in /metrics.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		_, b := httpCall(t, "GET", url+"/readyz", "")
		var ready struct{ Warmth apitype.Warmth }
		if json.Unmarshal(b, &ready) == nil && ready.Warmth.WarmSessions == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz after two minutes: %s; want warm_sessions 1", b)
		}
	}
	if _, b := httpCall(t, "GET", url+"/metrics", ""); !strings.Contains(string(b), "\nsandpit_warm_sessions 1\n") {
		t.Fatalf("/metrics has no sandpit_warm_sessions 1:\n%s", b)
	}
	for attempt := 1; ; attempt++ {
		warm := waitWarm(t, cfg.DataDir, 1)[0]
		status, b := httpCall(t, "POST", url+"/v1/agents/w/sessions", "{}")
		var s sandbox.SessionInfo
		if status != 201 || json.Unmarshal(b, &s) != nil {
			t.Fatalf("create: %d %s", status, b)
		}
		body, _ := json.Marshal(map[string]string{"code": "print(6 * 7)"})
		if status, b := httpCall(t, "POST", url+"/v1/agents/w/sessions/"+s.ID+"/executions", string(body)); status != 200 || !strings.Contains(string(b), `"stdout":"42\n"`) {
			t.Fatalf("call: %d %s", status, b)
		}
		if status, b := httpCall(t, "DELETE", url+"/v1/agents/w/sessions/"+s.ID, ""); status != 200 {
			t.Fatalf("close: %d %s", status, b)
		}
		// The session's container goes at its close: if it was the warm one, the pool has made
		// another.
		time.Sleep(time.Second)
		left := waitWarm(t, cfg.DataDir, 1)
		if left[0] != warm {
			return
		}
		if attempt == 3 {
			t.Fatalf("three sessions never ran in the warm container %s", warm)
		}
		t.Logf("attempt %d: the session did not claim warm container %s (it was still starting)", attempt, warm)
	}
}
