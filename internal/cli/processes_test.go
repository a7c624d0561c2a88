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

// TestSessionLogs: session logs prints what the daemon kept of a background command's output
// (stdout and stderr each on its own) and returns; with --follow it goes on to the command's
// end. A foreground command's output is not kept, which it says. (No verb read the output:
// only REST could.)
func TestSessionLogs(t *testing.T) {
	s, bg, fg := "se_"+strings.Repeat("a", 26), "pr_"+strings.Repeat("b", 26), "pr_"+strings.Repeat("c", 26)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pid := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/agents/default/sessions/"+s+"/processes/"), "/output")
		switch {
		case r.URL.Path == "/healthz":
			_, _ = io.WriteString(w, `{"status": "ok"}`)
			return
		case !strings.HasSuffix(r.URL.Path, "/output") || r.URL.Query().Get("tail") != "true":
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		line := func(l string) {
			_, _ = io.WriteString(w, l+"\n")
			w.(http.Flusher).Flush()
		}
		proc := `"id": "` + pid + `", "session_id": "` + s + `", "pid": 9, "command": "srv", "argv": ["srv"], "started_at": "2026-12-02T10:00:00Z"`
		if pid == fg {
			line(`{"type": "start", "process": {` + proc + `, "state": "running", "background": false, "stdout_bytes": 5}}`)
		} else {
			line(`{"type": "start", "process": {` + proc + `, "state": "running", "background": true, "stdout_bytes": 9, "stderr_bytes": 9}}`)
			line(`{"type": "stdout", "data": "kept out\n"}`)
			line(`{"type": "stderr", "data": "kept err\n"}`)
		}
		select { // what it writes later
		case <-time.After(300 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		line(`{"type": "stdout", "data": "live\n"}`)
		line(`{"type": "end", "process": {` + proc + `, "state": "ended", "background": true, "end": {"exit_code": 0, "outcome": "ok", "duration_ms": 1}}}`)
	}))
	defer srv.Close()
	dir := t.TempDir()
	run := func(args ...string) (int, string, string) {
		var stdout, stderr strings.Builder
		code := Main(context.Background(), append(args, "--url", srv.URL), Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
			Lookup: func(k string) (string, bool) { return dir, k == "SANDPIT_DATA_DIR" }})
		return code, stdout.String(), stderr.String()
	}
	if code, out, errOut := run("session", "logs", s, bg); code != 0 || out != "kept out\n" || errOut != "kept err\n" {
		t.Errorf("session logs: exit %d, stdout %q, stderr %q; want what was kept, and no more", code, out, errOut)
	}
	if code, out, errOut := run("session", "logs", s, bg, "--follow"); code != 0 || out != "kept out\nlive\n" || errOut != "kept err\n" {
		t.Errorf("session logs --follow: exit %d, stdout %q, stderr %q; want what was kept, then the rest", code, out, errOut)
	}
	if code, out, errOut := run("session", "logs", s, fg); code != 0 || out != "" || !strings.Contains(errOut, "is a foreground command") {
		t.Errorf("session logs of a foreground command: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
