package cli

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestSessionProcessCommands: a background command's pr_ ID can be listed, signalled and
// waited for from the command line (a trial found only REST could), wait exits with the
// command's status, and an ID that is no process ID is refused before any request.
func TestSessionProcessCommands(t *testing.T) {
	s, p, killed := "se_"+strings.Repeat("a", 26), "pr_"+strings.Repeat("b", 26), "pr_"+strings.Repeat("c", 26)
	base := "/v1/agents/default/sessions/" + s + "/processes"
	var signalled string
	answers := map[string]string{
		"GET " + base: `{"processes": [{"id": "` + p + `", "session_id": "` + s + `", "pid": 41, "command": "sleep 300", "argv": ["sleep", "300"],
			"state": "running", "started_at": "2026-12-02T10:00:00Z"}]}`,
		"POST " + base + "/" + p + "/signal": `{}`,
		"POST " + base + "/" + p + "/wait": `{"id": "` + p + `", "session_id": "` + s + `", "pid": 41, "command": "sleep 300", "state": "ended",
			"started_at": "2026-12-02T10:00:00Z", "end": {"exit_code": 3, "outcome": "error", "duration_ms": 1200}}`,
		"POST " + base + "/" + killed + "/wait": `{"id": "` + killed + `", "session_id": "` + s + `", "pid": 42, "command": "sleep 300", "state": "ended",
			"started_at": "2026-12-02T10:00:00Z", "end": {"exit_code": -1, "signal": "SIGKILL", "outcome": "killed", "duration_ms": 274}}`,
	}
	srv := cannedDaemon(answers, func(r *http.Request) int {
		if strings.HasSuffix(r.URL.Path, "/signal") {
			body, _ := io.ReadAll(r.Body)
			signalled = string(body)
		}
		return 200
	})
	defer srv.Close()
	dir := t.TempDir()
	run := func(args ...string) (int, string, string) {
		var stdout, stderr strings.Builder
		code := Main(context.Background(), append(args, "--url", srv.URL), Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
			Lookup: func(k string) (string, bool) { return dir, k == "SANDPIT_DATA_DIR" }})
		return code, stdout.String(), stderr.String()
	}
	if code, out, errOut := run("session", "ps", s); code != 0 || !strings.Contains(out, p) || !strings.Contains(out, "running") || !strings.Contains(out, "sleep 300") {
		t.Fatalf("session ps: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := run("session", "kill", s, p, "--signal", "SIGKILL"); code != 0 || !strings.Contains(signalled, `"SIGKILL"`) {
		t.Fatalf("session kill: %d %q %q, sent %q", code, out, errOut, signalled)
	}
	if code, _, errOut := run("session", "wait", s, p); code != 3 || !strings.Contains(errOut, "exit 3") {
		t.Fatalf("session wait: exit %d, stderr %q; want the command's 3", code, errOut)
	}
	// Killed by SIGKILL: 137, as a run killed so exits (it exited 130, a trial of the CLI).
	if code, _, errOut := run("session", "wait", s, killed); code != 137 || !strings.Contains(errOut, "exit 137") {
		t.Fatalf("session wait of a killed command: exit %d, stderr %q; want 137", code, errOut)
	}
	if code, _, errOut := run("session", "new", "--idle", "5ms"); code != exitUsage || !strings.Contains(errOut, "--idle 5ms: give at least 1s") {
		t.Fatalf("session new --idle 5ms: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := run("session", "kill", s, "../x"); code != exitUsage || !strings.Contains(errOut, "is not a process ID") {
		t.Fatalf("session kill of no process ID: exit %d, stderr %q", code, errOut)
	}
}

// TestSessionWaitTimeout: session wait --timeout stops waiting for a command that runs on and
// exits 124, as timeout(1); a negative one is refused before any request.
func TestSessionWaitTimeout(t *testing.T) {
	s, p := "se_"+strings.Repeat("a", 26), "pr_"+strings.Repeat("b", 26)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/wait") {
			<-r.Context().Done() // the command never ends
			return
		}
		_, _ = io.WriteString(w, `{"status": "ok"}`)
	}))
	defer srv.Close()
	dir := t.TempDir()
	run := func(args ...string) (int, string) {
		var stdout, stderr strings.Builder
		code := Main(context.Background(), append(args, "--url", srv.URL), Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
			Lookup: func(k string) (string, bool) { return dir, k == "SANDPIT_DATA_DIR" }})
		return code, stderr.String()
	}
	start := time.Now()
	code, errOut := run("session", "wait", s, p, "--timeout", "200ms")
	if code != exitTimeout || !strings.Contains(errOut, "still runs after --timeout 200ms") || !strings.Contains(errOut, "sandpit session kill "+s+" "+p) {
		t.Fatalf("session wait --timeout 200ms: exit %d, stderr %q; want 124 and how to end it", code, errOut)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("session wait --timeout 200ms returned after %s", d)
	}
	if code, errOut := run("session", "wait", s, p, "--timeout", "-1s"); code != exitUsage || !strings.Contains(errOut, "--timeout -1s") {
		t.Fatalf("session wait --timeout -1s: exit %d, stderr %q", code, errOut)
	}
}
