package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/cli"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// httpCall sends method url with body (JSON, when not empty) and returns the status and body.
func httpCall(t *testing.T, method, url, body string, header ...string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// cliAt returns a function that runs the sandpit command with args against the daemon at url,
// and returns its exit code, stdout and stderr.
func cliAt(url string) func(args ...string) (int, string, string) {
	return func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		env := cli.Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
			Lookup: func(k string) (string, bool) {
				if k == "SANDPIT_URL" {
					return url, true
				}
				return os.LookupEnv(k)
			}}
		code := cli.Main(context.Background(), args, env)
		return code, stdout.String(), stderr.String()
	}
}

// sessionDaemon serves one slot without a fork server on dataDir until stop is called (or the
// test ends) and returns its URL.
func sessionDaemon(t *testing.T, dataDir string) (string, func()) {
	t.Helper()
	cfg := testConfigAt(t, dataDir)
	cfg.Slots, cfg.ForkServer = 1, false
	return startDaemon(t, cfg)
}

// TestSessionsREST drives a session through the REST API of a real daemon: created, called
// (JSON and NDJSON), listed, in the ledger, closed (410 afterwards), and ended by a restart.
func TestSessionsREST(t *testing.T) {
	dir := t.TempDir()
	url, stop := sessionDaemon(t, dir)

	status, body := httpCall(t, "GET", url+"/v1/limits", "")
	if status != 200 || !bytes.Contains(body, []byte(`"sessions":{"session_idle_timeout_ms":600000,"session_max_lifetime_ms":3600000,"sessions_per_agent":8,"sessions_max":16,`)) {
		t.Fatalf("limits: %d %s", status, body)
	}
	status, body = httpCall(t, "POST", url+"/v1/agents/alice/sessions", `{"idle_timeout_ms": 60000}`)
	var s sandbox.SessionInfo
	if status != 201 || json.Unmarshal(body, &s) != nil || s.State != "active" || s.IdleTimeoutMS != 60000 {
		t.Fatalf("create: %d %s", status, body)
	}
	exec := url + "/v1/agents/alice/sessions/" + s.ID + "/executions"
	status, body = httpCall(t, "POST", exec, `{"code": "import math\nx = 20\nprint('set')\nagent.log('from a session')\nagent.store_result('k', x)", "input": {"a": 1}}`)
	var res sandbox.Result
	if status != 200 || json.Unmarshal(body, &res) != nil || res.Outcome != "ok" || res.Stdout != "set\n" || res.SessionID != s.ID ||
		len(res.Logs) != 1 || res.Logs[0].Message != "from a session" || len(res.Calls) != 2 {
		t.Fatalf("first call: %d %s", status, body)
	}
	inLedger(t, url, body)
	status, body = httpCall(t, "POST", exec, `{"code": "print(INPUT)\nOUTPUT = x + math.floor(INPUT)", "input": 22.5}`, "Accept", "application/x-ndjson")
	if status != 200 || !bytes.Contains(body, []byte(`{"type":"stdout","data":"22.5`)) || !bytes.Contains(body, []byte(`"stdout":"22.5\n"`)) || !bytes.Contains(body, []byte(`"output":42`)) {
		t.Fatalf("second call (streamed): %d %s", status, body)
	}
	inLedger(t, url, body)
	status, body = httpCall(t, "GET", url+"/v1/executions/"+res.ID, "")
	if status != 200 || !bytes.Contains(body, []byte(`"session_id":"`+s.ID+`"`)) {
		t.Fatalf("the ledger's record does not name its session: %d %s", status, body)
	}
	status, body = httpCall(t, "GET", url+"/v1/agents/alice/sessions", "")
	if status != 200 || !bytes.Contains(body, []byte(`"id":"`+s.ID+`"`)) || !bytes.Contains(body, []byte(`"calls":2`)) {
		t.Fatalf("list: %d %s", status, body)
	}
	if status, body = httpCall(t, "GET", url+"/v1/agents/bob/sessions/"+s.ID, ""); status != 404 {
		t.Fatalf("another agent's GET: %d %s", status, body)
	}
	if status, body = httpCall(t, "POST", url+"/v1/agents/alice/sessions", `{"idle_timeout_ms": 5}`); status != 400 || !bytes.Contains(body, []byte(`"field":"idle_timeout_ms"`)) {
		t.Fatalf("a bad idle timeout: %d %s", status, body)
	}
	if status, body = httpCall(t, "POST", exec, `{"code": "1", "dependencies": ["x"]}`); status != 400 {
		t.Fatalf("a call with dependencies: %d %s", status, body)
	}
	if status, body = httpCall(t, "DELETE", url+"/v1/agents/alice/sessions/"+s.ID, ""); status != 200 || !bytes.Contains(body, []byte(`"end_reason":"closed"`)) {
		t.Fatalf("delete: %d %s", status, body)
	}
	if status, body = httpCall(t, "POST", exec, `{"code": "print(x)"}`); status != 410 || !bytes.Contains(body, []byte(`"code":"gone"`)) || !bytes.Contains(body, []byte("closed")) {
		t.Fatalf("a call after the close: %d %s", status, body)
	}

	// The CLI: session new, run (state kept, exit status), ls, rm.
	sandpit := cliAt(url)
	code, out, errOut := sandpit("session", "new", "--agent", "carl")
	id := strings.TrimSpace(out)
	if code != 0 || !sandbox.ValidSessionID(id) {
		t.Fatalf("session new: %d %q %q", code, out, errOut)
	}
	if code, out, errOut = sandpit("session", "run", id, "--agent", "carl", "-c", "n = 6"); code != 0 {
		t.Fatalf("session run: %d %q %q", code, out, errOut)
	}
	if code, out, errOut = sandpit("session", "run", id, "--agent", "carl", "-c", "import sys\nprint(n * 7)\nsys.exit(4)"); code != 4 || out != "42\n" {
		t.Fatalf("session run (second call): %d %q %q", code, out, errOut)
	}
	if code, out, errOut = sandpit("session", "ls", "--agent", "carl"); code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "active") {
		t.Fatalf("session ls: %d %q %q", code, out, errOut)
	}
	if code, out, errOut = sandpit("session", "rm", id, "--agent", "carl"); code != 0 || !strings.Contains(out, "ended") {
		t.Fatalf("session rm: %d %q %q", code, out, errOut)
	}
	if code, out, errOut = sandpit("session", "run", id, "--agent", "carl", "-c", "print(n)"); code == 0 || !strings.Contains(errOut, "closed") {
		t.Fatalf("session run after rm: %d %q %q", code, out, errOut)
	}

	// MCP: create_session, run_in_session twice (state kept), close_session.
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: url + "/mcp?agent=mona"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tool := func(name string, args map[string]any) (*mcp.CallToolResult, string) {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		text := ""
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		return res, text
	}
	res1, text := tool("create_session", map[string]any{})
	var ms sandbox.SessionInfo
	if b, _ := json.Marshal(res1.StructuredContent); res1.IsError || json.Unmarshal(b, &ms) != nil || ms.Agent != "mona" {
		t.Fatalf("create_session: %v %q %+v", res1.IsError, text, res1.StructuredContent)
	}
	if r, text := tool("run_in_session", map[string]any{"id": ms.ID, "code": "k = 5"}); r.IsError {
		t.Fatalf("run_in_session: %q", text)
	}
	if r, text := tool("run_in_session", map[string]any{"id": ms.ID, "code": "print(k * 2)"}); r.IsError || !strings.Contains(text, "stdout:\n10") {
		t.Fatalf("run_in_session (second): %v %q", r.IsError, text)
	}
	if r, text := tool("close_session", map[string]any{"id": ms.ID}); r.IsError {
		t.Fatalf("close_session: %q", text)
	}
	if r, text := tool("run_in_session", map[string]any{"id": ms.ID, "code": "print(k)"}); !r.IsError || !strings.Contains(text, "closed") {
		t.Fatalf("run_in_session after close: %v %q", r.IsError, text)
	}
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}

	// A restart hibernates the sessions: the next daemon has no container of theirs, answers a
	// call with 409 saying how to resume, and resumes one with its files and a new interpreter.
	status, body = httpCall(t, "POST", url+"/v1/agents/alice/sessions", ``)
	if status != 201 || json.Unmarshal(body, &s) != nil {
		t.Fatalf("create: %d %s", status, body)
	}
	exec = url + "/v1/agents/alice/sessions/" + s.ID + "/executions"
	if status, body = httpCall(t, "POST", exec, `{"code": "y = 1\nopen('kept.txt', 'w').write('yes')"}`); status != 200 {
		t.Fatalf("call: %d %s", status, body)
	}
	stop()
	url, _ = sessionDaemon(t, dir)
	if n := len(testenv.Containers(t, dir)); n != 1 {
		t.Fatalf("%d containers after the restart, want the pool's 1 (no session container)", n)
	}
	exec = url + "/v1/agents/alice/sessions/" + s.ID + "/executions"
	if status, body = httpCall(t, "POST", exec, `{"code": "print(y)"}`); status != 409 || !bytes.Contains(body, []byte("/resume")) {
		t.Fatalf("a call after the restart: %d %s", status, body)
	}
	if status, body = httpCall(t, "POST", url+"/v1/agents/alice/sessions/"+s.ID+"/resume", ""); status != 200 || !bytes.Contains(body, []byte(`"memory":"lost"`)) {
		t.Fatalf("resume after the restart: %d %s", status, body)
	}
	if status, body = httpCall(t, "POST", exec, `{"code": "print(open('kept.txt').read(), 'y' in globals())"}`); status != 200 || !bytes.Contains(body, []byte(`"stdout":"yes False\n"`)) {
		t.Fatalf("a call after the resume: %d %s", status, body)
	}
}
