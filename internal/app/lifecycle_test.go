package app_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// TestSessionLifecycleREST drives pause, resume, hibernate and fork through REST, the CLI and
// MCP of a real daemon: the states and their answers, 409 for a call to a paused session,
// auto_resume, another agent's 404, a fork's files, /v1/limits' counts.
func TestSessionLifecycleREST(t *testing.T) {
	dir := t.TempDir()
	url, _ := sessionDaemon(t, dir)
	base := url + "/v1/agents/alice/sessions/"
	create := func(body string) sandbox.SessionInfo {
		status, b := httpCall(t, "POST", url+"/v1/agents/alice/sessions", body)
		var s sandbox.SessionInfo
		if status != 201 || json.Unmarshal(b, &s) != nil {
			t.Fatalf("create: %d %s", status, b)
		}
		return s
	}
	step := func(id, name string, want int) sandbox.SessionInfo {
		t.Helper()
		status, b := httpCall(t, "POST", base+id+"/"+name, "")
		var s sandbox.SessionInfo
		if status != want || json.Unmarshal(b, &s) != nil {
			t.Fatalf("%s: %d %s", name, status, b)
		}
		return s
	}
	run := func(id, code string) (int, []byte) {
		body, _ := json.Marshal(map[string]string{"code": code})
		return httpCall(t, "POST", base+id+"/executions", string(body))
	}
	s := create(`{}`)
	if status, b := run(s.ID, "x = 1\nopen('f.txt', 'w').write('f')"); status != 200 {
		t.Fatalf("call: %d %s", status, b)
	}
	if status, b := httpCall(t, "POST", url+"/v1/agents/bob/sessions/"+s.ID+"/pause", ""); status != 404 {
		t.Fatalf("another agent's pause: %d %s", status, b)
	}
	if p := step(s.ID, "pause", 200); p.State != sandbox.SessionPaused {
		t.Fatalf("pause: %+v", p)
	}
	if status, b := run(s.ID, "print(x)"); status != 409 || !bytes.Contains(b, []byte("/resume")) || !bytes.Contains(b, []byte("auto_resume")) {
		t.Fatalf("a call to a paused session: %d %s", status, b)
	}
	if status, b := httpCall(t, "GET", url+"/v1/limits", ""); status != 200 || !bytes.Contains(b, []byte(`"paused":1`)) {
		t.Fatalf("limits while paused: %d %s", status, b)
	}
	if r := step(s.ID, "resume", 200); r.State != sandbox.SessionActive || r.Memory != sandbox.MemoryKept {
		t.Fatalf("resume: %+v", r)
	}
	if status, b := run(s.ID, "print(x)"); status != 200 || !bytes.Contains(b, []byte(`"stdout":"1\n"`)) {
		t.Fatalf("after resume: %d %s", status, b)
	}
	if status, b := httpCall(t, "POST", base+s.ID+"/fork", ""); status != 409 || !bytes.Contains(b, []byte("pause it first")) {
		t.Fatalf("fork of a running session: %d %s", status, b)
	}
	if h := step(s.ID, "hibernate", 200); h.State != sandbox.SessionHibernated || h.Hibernation == nil {
		t.Fatalf("hibernate: %+v", h)
	}
	if status, b := httpCall(t, "GET", url+"/v1/limits", ""); status != 200 || !bytes.Contains(b, []byte(`"hibernated":1`)) {
		t.Fatalf("limits while hibernated: %d %s", status, b)
	}
	f := step(s.ID, "fork", 201)
	if f.ForkedFrom != s.ID {
		t.Fatalf("fork: %+v", f)
	}
	if status, b := run(f.ID, "print(open('f.txt').read(), 'x' in globals())"); status != 200 || !bytes.Contains(b, []byte(`"stdout":"f False\n"`)) {
		t.Fatalf("the fork's call: %d %s", status, b)
	}
	httpCall(t, "DELETE", base+f.ID, "")

	// auto_resume: a call resumes a hibernated session.
	a := create(`{"auto_resume": true}`)
	step(a.ID, "hibernate", 200)
	if status, b := run(a.ID, "print('back')"); status != 200 || !bytes.Contains(b, []byte(`"stdout":"back\n"`)) {
		t.Fatalf("a call to a hibernated auto_resume session: %d %s", status, b)
	}
	httpCall(t, "DELETE", base+a.ID, "")

	// The CLI and MCP.
	sandpit := cliAt(url)
	if code, out, errOut := sandpit("session", "pause", s.ID, "--agent", "alice"); code == 0 || !strings.Contains(errOut, "hibernated") && !strings.Contains(out, "hibernated") {
		// Pausing a hibernated session answers it as it is.
		if code != 0 {
			t.Fatalf("session pause of a hibernated session: %d %q %q", code, out, errOut)
		}
	}
	if code, out, errOut := sandpit("session", "resume", s.ID, "--agent", "alice"); code != 0 || !strings.Contains(out, "active") || !strings.Contains(out, "memory lost") {
		t.Fatalf("session resume: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := sandpit("session", "pause", s.ID, "--agent", "alice"); code != 0 || !strings.Contains(out, "paused") {
		t.Fatalf("session pause: %d %q %q", code, out, errOut)
	}
	code, out, errOut := sandpit("session", "fork", s.ID, "--agent", "alice")
	// The new ID alone on stdout, as session new prints it: F=$(sandpit session fork S).
	if fork := strings.TrimSpace(out); code != 0 || !sandbox.ValidSessionID(fork) || !strings.Contains(errOut, fork+" active") ||
		!strings.Contains(errOut, "forked from "+s.ID) {
		t.Fatalf("session fork: %d %q %q", code, out, errOut)
	}
	httpCall(t, "DELETE", base+strings.TrimSpace(out), "")
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: url + "/mcp?agent=alice"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "resume_session", Arguments: map[string]any{"id": s.ID}})
	if err != nil || res.IsError {
		t.Fatalf("resume_session: %v %+v", err, res)
	}
	if b, _ := json.Marshal(res.StructuredContent); !bytes.Contains(b, []byte(`"memory":"kept"`)) {
		t.Fatalf("resume_session answered %s", b)
	}
}

// TestSessionsDaemonKilled: the daemon killed with SIGKILL while one session runs, one is
// paused, one is hibernated and one is being hibernated (100 MiB of files). After the restart
// the hibernated one resumes with its files; each other is either resumable with its files
// or ended with the reason; no session container and no hibernation file is left over.
func TestSessionsDaemonKilled(t *testing.T) {
	cfg := testConfig(t) // e2b_pool 0: no warm session, whose container stays up
	cfg.Slots, cfg.ForkServer, cfg.SessionsPerAgent = 1, false, 4
	url, start := killableDaemon(t, cfg)
	daemon := start()
	base := url + "/v1/agents/k/sessions/"
	ids := map[string]string{}
	for _, name := range []string{"running", "paused", "hibernated", "hibernating"} {
		status, b := httpCall(t, "POST", url+"/v1/agents/k/sessions", `{}`)
		var s sandbox.SessionInfo
		if status != 201 || json.Unmarshal(b, &s) != nil {
			t.Fatalf("create: %d %s", status, b)
		}
		ids[name] = s.ID
		code := `open("mine.txt", "w").write("` + name + `")`
		if name == "hibernating" {
			code += "\nimport os\nfor i in range(2):\n    open(f'big{i}.bin', 'wb').write(os.urandom(50 << 20))"
		}
		body, _ := json.Marshal(map[string]any{"code": code})
		if status, b := httpCall(t, "POST", base+s.ID+"/executions", string(body)); status != 200 || !bytes.Contains(b, []byte(`"outcome":"ok"`)) {
			t.Fatalf("call: %d %s", status, b)
		}
	}
	if status, b := httpCall(t, "POST", base+ids["paused"]+"/pause", ""); status != 200 {
		t.Fatalf("pause: %d %s", status, b)
	}
	if status, b := httpCall(t, "POST", base+ids["hibernated"]+"/hibernate", ""); status != 200 {
		t.Fatalf("hibernate: %d %s", status, b)
	}
	go http.Post(base+ids["hibernating"]+"/hibernate", "application/json", nil)
	time.Sleep(300 * time.Millisecond)
	if err := daemon.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	daemon.Wait()

	start()
	hibDir := filepath.Join(cfg.DataDir, config.HibernationDir)
	for name, id := range ids {
		status, b := httpCall(t, "POST", base+id+"/resume", "")
		switch {
		case status == 200:
			body, _ := json.Marshal(map[string]any{"code": `print(open("mine.txt").read())`})
			if status, out := httpCall(t, "POST", base+id+"/executions", string(body)); status != 200 || !bytes.Contains(out, []byte(`"stdout":"`+name+`\n"`)) {
				t.Fatalf("%s session resumed, but its file: %d %s", name, status, out)
			}
		case status == 410 && name != "hibernated" && bytes.Contains(b, []byte("daemon_stopped")) && bytes.Contains(b, []byte("not hibernated")):
			t.Logf("%s session: ended as expected: %s", name, b)
		default:
			t.Fatalf("%s session after the restart: %d %s", name, status, b)
		}
		httpCall(t, "DELETE", base+id, "")
	}
	// The sessions' containers go as they close: the slots' stay.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if n := len(testenv.Containers(t, cfg.DataDir)); n == cfg.Slots {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("%d containers a minute after the sessions were closed, want the %d of the slots", n, cfg.Slots)
		}
	}
	if entries, _ := os.ReadDir(hibDir); len(entries) != 0 {
		t.Fatalf("hibernation files left over: %v", entries)
	}
}

// TestSessionsHibernateWhenAStopOutlastsARun: a daemon stopped while another agent's run went
// on past ShutdownGrace ended every session without its files (their hibernation was given the
// grace's context, already over: trial, 2 December 2026). The session hibernates, and resumes
// with its file after the restart.
func TestSessionsHibernateWhenAStopOutlastsARun(t *testing.T) {
	dir := t.TempDir()
	url, stop := sessionDaemon(t, dir)
	status, b := httpCall(t, "POST", url+"/v1/agents/alice/sessions", `{}`)
	var s sandbox.SessionInfo
	if status != 201 || json.Unmarshal(b, &s) != nil {
		t.Fatalf("create: %d %s", status, b)
	}
	base := url + "/v1/agents/alice/sessions/" + s.ID
	if status, b := httpCall(t, "POST", base+"/executions", `{"code": "open('keep.txt', 'w').write('alice data')"}`); status != 200 {
		t.Fatalf("call: %d %s", status, b)
	}
	long := make(chan struct{})
	go func() {
		defer close(long)
		status, b := httpCall(t, "POST", url+"/v1/executions", `{"agent": "mallory", "code": "import time; time.sleep(100)", "timeout_ms": 60000}`)
		if !bytes.Contains(b, []byte("shutting down")) {
			t.Errorf("the long run: %d %s, want it interrupted by the stop", status, b)
		}
	}()
	time.Sleep(2 * time.Second) // the run is going
	stop()
	<-long

	url, _ = sessionDaemon(t, dir)
	base = url + "/v1/agents/alice/sessions/" + s.ID
	if status, b := httpCall(t, "GET", base, ""); status != 200 || !bytes.Contains(b, []byte(`"state":"hibernated"`)) {
		t.Fatalf("the session after the stop: %d %s", status, b)
	}
	if status, b := httpCall(t, "POST", base+"/resume", ""); status != 200 {
		t.Fatalf("resume: %d %s", status, b)
	}
	if status, b := httpCall(t, "POST", base+"/executions", `{"code": "print(open('keep.txt').read())"}`); status != 200 || !bytes.Contains(b, []byte(`"stdout":"alice data\n"`)) {
		t.Fatalf("the file after the resume: %d %s", status, b)
	}
}
