package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/cli"
)

// waltSession starts a session daemon on a fresh data directory and creates a session of
// agent walt through the REST API: it answers the daemon's URL, the session, and the
// session's URL (…/v1/agents/walt/sessions/ID).
func waltSession(t *testing.T) (url string, s apitype.Session, base string) {
	t.Helper()
	dir := t.TempDir()
	url, _ = sessionDaemon(t, dir)
	status, body := httpCall(t, "POST", url+"/v1/agents/walt/sessions", "")
	if status != 201 || json.Unmarshal(body, &s) != nil {
		t.Fatalf("create: %d %s", status, body)
	}
	return url, s, url + "/v1/agents/walt/sessions/" + s.ID
}

// TestWorkspaceREST drives a session's commands and files through the REST API of a real
// daemon, with the errors each interface promises (400 naming the path and the rule, 404, 409,
// 413 naming the limit, 404 for an unknown process, 400 for an unknown signal).
func TestWorkspaceREST(t *testing.T) {
	url, s, base := waltSession(t)

	status, body := httpCall(t, "POST", base+"/commands", `{"cmd": "echo hi; echo oops >&2; exit 2"}`)
	var res apitype.CommandResult
	if status != 200 || json.Unmarshal(body, &res) != nil || res.Stdout != "hi\n" || res.Stderr != "oops\n" || res.Process.End.ExitCode != 2 ||
		res.Process.End.Outcome != "error" || res.Process.PID <= 0 {
		t.Fatalf("command: %d %s", status, body)
	}
	status, body = httpCall(t, "POST", base+"/commands", `{"argv": ["sh", "-c", "echo streamed"]}`, "Accept", "application/x-ndjson")
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	if status != 200 || len(lines) != 3 || !strings.Contains(lines[0], `"type":"start"`) || lines[1] != `{"type":"stdout","data":"streamed\n"}` ||
		!strings.Contains(lines[2], `"type":"end"`) || !strings.Contains(lines[2], `"outcome":"ok"`) {
		t.Fatalf("streamed command: %d %s", status, body)
	}
	if status, body = httpCall(t, "POST", base+"/commands", `{"cmd": "x", "argv": ["y"]}`); status != 400 || !bytes.Contains(body, []byte(`"field":"cmd"`)) {
		t.Fatalf("cmd and argv: %d %s", status, body)
	}
	if status, body = httpCall(t, "POST", base+"/commands", `{"cmd": "pwd", "cwd": "../../etc"}`); status != 400 || !bytes.Contains(body, []byte("/home/user")) {
		t.Fatalf("a cwd outside the home: %d %s", status, body)
	}

	status, body = httpCall(t, "POST", base+"/commands", `{"cmd": "read l; echo got:$l", "background": true}`)
	if status != 201 || json.Unmarshal(body, &res) != nil || res.Process.State != "running" {
		t.Fatalf("background: %d %s", status, body)
	}
	proc := base + "/processes/" + res.Process.ID
	if status, body = httpCall(t, "POST", proc+"/input", `{"data": "yes\n"}`); status != 204 {
		t.Fatalf("input: %d %s", status, body)
	}
	status, body = httpCall(t, "POST", proc+"/wait", "")
	var p apitype.Process
	if status != 200 || json.Unmarshal(body, &p) != nil || p.State != "ended" || p.End.Outcome != "ok" || p.StdoutBytes != int64(len("got:yes\n")) {
		t.Fatalf("wait: %d %s", status, body)
	}
	if status, body = httpCall(t, "GET", proc+"/output", ""); status != 200 || !bytes.Contains(body, []byte(`"type":"end"`)) {
		t.Fatalf("output of an ended process: %d %s", status, body)
	}
	if status, body = httpCall(t, "GET", base+"/processes", ""); status != 200 || !bytes.Contains(body, []byte(res.Process.ID)) {
		t.Fatalf("processes: %d %s", status, body)
	}
	// The ledger's commands: each recorded once it answered, newest first, a page at a time,
	// the agent's own only.
	first := res.Process.ID
	status, body = httpCall(t, "GET", base+"/commands", "")
	var cl apitype.CommandList
	if status != 200 || json.Unmarshal(body, &cl) != nil || len(cl.Commands) != 3 || cl.Commands[0].ID != first || cl.NextCursor != "" ||
		cl.Commands[2].Command != "echo hi; echo oops >&2; exit 2" || cl.Commands[2].End == nil || cl.Commands[2].End.ExitCode != 2 ||
		cl.Commands[1].Command != "sh -c 'echo streamed'" { // argv, shell-quoted
		t.Fatalf("commands: %d %s", status, body)
	}
	var pages []string
	for cursor := ""; ; {
		status, body = httpCall(t, "GET", base+"/commands?limit=2&cursor="+cursor, "")
		var page apitype.CommandList
		if status != 200 || json.Unmarshal(body, &page) != nil || len(pages) > 3 {
			t.Fatalf("a page of commands: %d %s", status, body)
		}
		for _, c := range page.Commands {
			pages = append(pages, c.ID)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if len(pages) != 3 || pages[0] != first || pages[2] != cl.Commands[2].ID {
		t.Fatalf("paged commands: %v", pages)
	}
	for _, c := range []struct {
		url    string
		status int
		says   string
	}{
		{url + "/v1/agents/other/sessions/" + s.ID + "/commands", 404, `agent \"other\" has no session`},
		{base + "/commands?limit=0", 400, `"field":"limit"`},
		{base + "/commands?cursor=nope", 400, "cursor"},
		{base + "/commands?since=1h", 400, `unknown query parameter`},
	} {
		if status, body = httpCall(t, "GET", c.url, ""); status != c.status || !bytes.Contains(body, []byte(c.says)) {
			t.Errorf("GET %s: %d %s, want %d saying %s", c.url, status, body, c.status, c.says)
		}
	}

	if status, body = httpCall(t, "POST", base+"/processes/pr_aaaaaaaaaaaaaaaaaaaaaaaaaa/signal", `{"signal": "SIGTERM"}`); status != 404 {
		t.Fatalf("an unknown process: %d %s", status, body)
	}
	if status, body = httpCall(t, "POST", proc+"/signal", `{"signal": "SIGNOPE"}`); status != 400 || !bytes.Contains(body, []byte("SIGNOPE")) {
		t.Fatalf("an unknown signal: %d %s", status, body)
	}

	put := func(path, content string) (int, []byte) {
		req, _ := http.NewRequest("PUT", base+"/files?parents=true&path="+path, strings.NewReader(content))
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.Bytes()
	}
	if status, body = put("notes/a.txt", "raw body"); status != 200 || !bytes.Contains(body, []byte(`"path":"/home/user/notes/a.txt"`)) {
		t.Fatalf("put: %d %s", status, body)
	}
	if status, body = httpCall(t, "GET", base+"/files?path=/home/user/notes/a.txt", ""); status != 200 || string(body) != "raw body" {
		t.Fatalf("get raw: %d %s", status, body)
	}
	if status, body = httpCall(t, "POST", base+"/files", `{"path": "bin.dat", "content_base64": "/wD+"}`); status != 200 {
		t.Fatalf("write base64: %d %s", status, body)
	}
	// A write with neither content nor content_base64 is refused: it emptied the file (a
	// trial lost its text so).
	if status, body = httpCall(t, "POST", base+"/files", `{"path": "bin.dat"}`); status != 400 || !bytes.Contains(body, []byte(`"field":"content"`)) {
		t.Fatalf("write without content: %d %s, want 400 naming content", status, body)
	}
	if status, body = httpCall(t, "GET", base+"/files?path=bin.dat&format=json", ""); status != 200 || !bytes.Contains(body, []byte(`"content_base64":"/wD+"`)) {
		t.Fatalf("get json: %d %s", status, body)
	}
	if status, body = httpCall(t, "GET", base+"/files/list?depth=2", ""); status != 200 || !bytes.Contains(body, []byte(`"path":"/home/user/notes/a.txt"`)) {
		t.Fatalf("list: %d %s", status, body)
	}
	if status, body = httpCall(t, "POST", base+"/files/mkdir", `{"path": "x/y", "parents": true}`); status != 200 {
		t.Fatalf("mkdir: %d %s", status, body)
	}
	if status, body = httpCall(t, "POST", base+"/files/rename", `{"from": "notes/a.txt", "to": "x/y/a.txt"}`); status != 200 {
		t.Fatalf("rename: %d %s", status, body)
	}
	if status, body = httpCall(t, "GET", base+"/files/stat?path=x/y/a.txt", ""); status != 200 || !bytes.Contains(body, []byte(`"size_bytes":8`)) {
		t.Fatalf("stat: %d %s", status, body)
	}
	for _, c := range []struct {
		method, path string
		status       int
		says         string
	}{
		{"GET", "/files?path=/etc/passwd", 400, `/etc/passwd`},
		{"GET", "/files?path=../x", 400, `must lie under /home/user`},
		{"GET", "/files?path=nothere", 404, `does not exist`},
		{"GET", "/files?path=x", 409, `is a directory`},
		{"DELETE", "/files?path=x", 409, `recursive`},
		{"GET", "/files", 400, `"field":"path"`},
	} {
		if status, body = httpCall(t, c.method, base+c.path, ""); status != c.status || !bytes.Contains(body, []byte(c.says)) {
			t.Errorf("%s %s: %d %s, want %d saying %s", c.method, c.path, status, body, c.status, c.says)
		}
	}
	if status, body = httpCall(t, "DELETE", base+"/files?path=x&recursive=true", ""); status != 204 {
		t.Fatalf("remove: %d %s", status, body)
	}
	if status, body = put("big.bin", strings.Repeat("z", 33<<20)); status != 200 {
		t.Fatalf("put 33 MiB: %d %.300s", status, body)
	}
	// A raw write streams: it is not held to the 64 MiB of a held body (a trial's 100 MiB
	// upload was refused with a message about knowledge imports).
	if status, body = put("huge.bin", strings.Repeat("h", 70<<20)); status != 200 {
		t.Fatalf("put 70 MiB: %d %.300s", status, body)
	}
	if status, body = httpCall(t, "DELETE", base+"/files?path=huge.bin", ""); status != 204 {
		t.Fatalf("delete huge.bin: %d %s", status, body)
	}
	if status, body = httpCall(t, "GET", base+"/files?path=big.bin", ""); status != 413 || !bytes.Contains(body, []byte("33554432")) {
		t.Fatalf("a read over the cap: %d %.300s", status, body)
	}
	if status, body = httpCall(t, "GET", base+"/files?path=big.bin&offset=100&length=5", ""); status != 200 || string(body) != "zzzzz" {
		t.Fatalf("a range of it: %d %.300s", status, body)
	}
	if status, body = httpCall(t, "POST", base+"/executions", `{"code": "OUTPUT = open('bin.dat', 'rb').read().hex()"}`); status != 200 || !bytes.Contains(body, []byte(`"output":"ff00fe"`)) {
		t.Fatalf("the interpreter reads a written file: %d %s", status, body)
	}

	// The CLI: exec (its exit status is the command's), cp both ways, ls ID PATH.
	sandpit := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := cli.Main(t.Context(), args, cli.Env{Stdin: strings.NewReader("from stdin\n"), Stdout: &out, Stderr: &errOut,
			Lookup: func(k string) (string, bool) {
				if k == "SANDPIT_URL" {
					return url, true
				}
				return os.LookupEnv(k)
			}})
		return code, out.String(), errOut.String()
	}
	if code, out, errOut := sandpit("session", "exec", s.ID, "--agent", "walt", "-c", "echo cli; exit 7"); code != 7 || out != "cli\n" {
		t.Fatalf("session exec: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := sandpit("session", "exec", s.ID, "--agent", "walt", "-i", "--", "cat"); code != 0 || out != "from stdin\n" {
		t.Fatalf("session exec -i: %d %q %q", code, out, errOut)
	}
	local := t.TempDir() + "/local.txt"
	if err := os.WriteFile(local, []byte("local bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := sandpit("session", "cp", "--agent", "walt", local, s.ID+":in/local.txt"); code == 0 || !strings.Contains(errOut, "add --parents") {
		t.Fatalf("session cp into a missing directory: %d %q, want a hint at --parents", code, errOut)
	}
	if code, out, errOut := sandpit("session", "cp", "--agent", "walt", "--parents", local, s.ID+":in/local.txt"); code != 0 {
		t.Fatalf("session cp in: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := sandpit("session", "cp", "--agent", "walt", s.ID+":in/local.txt", "-"); code != 0 || out != "local bytes" {
		t.Fatalf("session cp out: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := sandpit("session", "ls", s.ID, "in", "--agent", "walt"); code != 0 || !strings.Contains(out, "/home/user/in/local.txt") {
		t.Fatalf("session ls ID PATH: %d %q %q", code, out, errOut)
	}

	if code, out, errOut := sandpit("session", "commands", s.ID, "--agent", "walt", "--limit", "1"); code != 0 || !strings.Contains(out, "cat") ||
		strings.Contains(out, "exit 7") || !strings.Contains(errOut, "--cursor") {
		t.Fatalf("session commands: %d %q %q", code, out, errOut)
	}

	// MCP: run_command, write_file, read_file, list_files, list_commands.
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: url + "/mcp?agent=walt"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tool := func(name string, args map[string]any) string {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(res.StructuredContent)
		if res.IsError {
			t.Fatalf("%s: %+v", name, res.Content)
		}
		return string(b)
	}
	if got := tool("write_file", map[string]any{"id": s.ID, "path": "mcp/n.txt", "content": "via mcp"}); !strings.Contains(got, `"/home/user/mcp/n.txt"`) {
		t.Fatalf("write_file: %s", got)
	}
	if got := tool("run_command", map[string]any{"id": s.ID, "cmd": "cat mcp/n.txt"}); !strings.Contains(got, `"stdout":"via mcp"`) || !strings.Contains(got, `"exit_code":0`) {
		t.Fatalf("run_command: %s", got)
	}
	if got := tool("read_file", map[string]any{"id": s.ID, "path": "/home/user/mcp/n.txt"}); !strings.Contains(got, `"content":"via mcp"`) {
		t.Fatalf("read_file: %s", got)
	}
	if got := tool("list_files", map[string]any{"id": s.ID, "path": "mcp"}); !strings.Contains(got, `"name":"n.txt"`) {
		t.Fatalf("list_files: %s", got)
	}
	if got := tool("list_commands", map[string]any{"session_id": s.ID, "limit": 1}); !strings.Contains(got, `"command":"cat mcp/n.txt"`) ||
		!strings.Contains(got, `"next_cursor":"`) || strings.Contains(got, `"next_cursor":""`) {
		t.Fatalf("list_commands: %s", got)
	}
}

// TestH83BackgroundOutputKeptInTheBox: a background command's output no one reads stays in
// its sandbox; a client that attaches later gets the last 64 KiB with the count of the bytes
// before them, then the live output; what the command writes after the client left is in the
// tail its end brings.
func TestH83BackgroundOutputKeptInTheBox(t *testing.T) {
	_, _, base := waltSession(t)
	status, body := httpCall(t, "POST", base+"/commands",
		`{"cmd": "seq 1 100000; touch seq.done; while read -r l; do echo got:$l; done", "background": true}`)
	var res apitype.CommandResult
	if status != 201 || json.Unmarshal(body, &res) != nil {
		t.Fatalf("background: %d %s", status, body)
	}
	proc := base + "/processes/" + res.Process.ID
	if status, body = httpCall(t, "POST", base+"/commands", `{"cmd": "while [ ! -e seq.done ]; do sleep 0.05; done"}`); status != 200 {
		t.Fatalf("waiting for seq: %d %s", status, body)
	}
	var seq strings.Builder
	for i := 1; i <= 100000; i++ {
		fmt.Fprintf(&seq, "%d\n", i)
	}
	all := seq.String()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", proc+"/output?tail=true", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("output: %v %v", resp, err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 1<<20)
	next := func() apitype.CommandEvent {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("the output stream ended: %v", lines.Err())
		}
		var ev apitype.CommandEvent
		if err := json.Unmarshal(lines.Bytes(), &ev); err != nil {
			t.Fatalf("%s: %v", lines.Bytes(), err)
		}
		return ev
	}
	if ev := next(); ev.Type != "start" || ev.Process.StdoutBytes != int64(len(all)) {
		t.Fatalf("start: %+v; want the process with the %d bytes seq wrote", ev, len(all))
	}
	ev := next()
	if want := all[len(all)-64<<10:]; ev.Type != "stdout" || ev.Data != want || ev.Dropped != int64(len(all)-len(want)) {
		t.Fatalf("the tail: %s %d bytes, dropped %d; want the last %d bytes, dropped %d", ev.Type, len(ev.Data), ev.Dropped, len(want), len(all)-len(want))
	}
	if status, body = httpCall(t, "POST", proc+"/input", `{"data": "live\n"}`); status != 204 {
		t.Fatalf("input: %d %s", status, body)
	}
	if ev := next(); ev.Type != "stdout" || ev.Data != "got:live\n" || ev.Dropped != 0 {
		t.Fatalf("live: %+v", ev)
	}
	cancel()
	resp.Body.Close()

	if status, body = httpCall(t, "POST", proc+"/input", `{"data": "unread\n", "close": true}`); status != 204 {
		t.Fatalf("input: %d %s", status, body)
	}
	status, body = httpCall(t, "POST", proc+"/wait", "")
	var p apitype.Process
	if want := int64(len(all) + len("got:live\ngot:unread\n")); status != 200 || json.Unmarshal(body, &p) != nil || p.End == nil || p.StdoutBytes != want {
		t.Fatalf("wait: %d %s; want its end, %d bytes written", status, body, want)
	}
	status, body = httpCall(t, "GET", proc+"/output?tail=true", "")
	if status != 200 || !bytes.Contains(body, []byte(`got:live\ngot:unread\n","dropped":`)) || !bytes.Contains(body, []byte(`"type":"end"`)) {
		t.Fatalf("the ended process's output: %d %.300s", status, body[max(0, len(body)-300):])
	}
}
