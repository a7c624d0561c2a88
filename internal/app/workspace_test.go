package app_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// TestWorkspaceREST drives a session's commands and files through the REST API of a real
// daemon, with the errors each interface promises (400 naming the path and the rule, 404, 409,
// 413 naming the limit, 404 for an unknown process, 400 for an unknown signal).
func TestWorkspaceREST(t *testing.T) {
	dir := t.TempDir()
	testenv.RemoveContainers(t, dir)
	url, _ := sessionDaemon(t, dir)
	status, body := httpCall(t, "POST", url+"/v1/agents/walt/sessions", "")
	var s apitype.Session
	if status != 201 || json.Unmarshal(body, &s) != nil {
		t.Fatalf("create: %d %s", status, body)
	}
	base := url + "/v1/agents/walt/sessions/" + s.ID

	status, body = httpCall(t, "POST", base+"/commands", `{"cmd": "echo hi; echo oops >&2; exit 2"}`)
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
	if status, body = httpCall(t, "POST", base+"/files", `{"path": "bin.dat", "content_base64": "AAEC"}`); status != 200 {
		t.Fatalf("write base64: %d %s", status, body)
	}
	if status, body = httpCall(t, "GET", base+"/files?path=bin.dat&format=json", ""); status != 200 || !bytes.Contains(body, []byte(`"content_base64":"AAEC"`)) {
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
	if status, body = httpCall(t, "GET", base+"/files?path=big.bin", ""); status != 413 || !bytes.Contains(body, []byte("33554432")) {
		t.Fatalf("a read over the cap: %d %.300s", status, body)
	}
	if status, body = httpCall(t, "GET", base+"/files?path=big.bin&offset=100&length=5", ""); status != 200 || string(body) != "zzzzz" {
		t.Fatalf("a range of it: %d %.300s", status, body)
	}
	if status, body = httpCall(t, "POST", base+"/executions", `{"code": "OUTPUT = open('bin.dat', 'rb').read().hex()"}`); status != 200 || !bytes.Contains(body, []byte(`"output":"000102"`)) {
		t.Fatalf("the interpreter reads a written file: %d %s", status, body)
	}
}
