package app_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/e2b/e2bclient"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// e2bDaemon serves a daemon for the E2B API and returns a client of it for each of the
// agents, each with a key of its own.
func e2bDaemon(t *testing.T, agents ...string) map[string]*e2bclient.Client {
	t.Helper()
	dcfg := testConfig(t)
	dcfg.Slots, dcfg.ForkServer, dcfg.E2BPool = 1, false, 1
	base, _ := startDaemon(t, dcfg)
	st, err := app.OpenKeys(t.Context(), dcfg, testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	clients := map[string]*e2bclient.Client{}
	for _, a := range agents {
		key, _, err := st.CreateAPIKey(t.Context(), a, "test")
		if err != nil {
			t.Fatal(err)
		}
		clients[a] = &e2bclient.Client{APIURL: base + app.E2BPrefix, SandboxURL: base + app.E2BPrefix, APIKey: key}
	}
	return clients
}

// TestE2BConformance walks an E2B SDK's session against a real daemon and Docker: create,
// run_code, files, commands, timeout and kill, with another agent refused at every step.
func TestE2BConformance(t *testing.T) {
	c := e2bDaemon(t, "alice", "bob")
	alice, bob := c["alice"], c["bob"]
	ctx := t.Context()

	// Keys: none, a wrong one, and templates.
	noKey := *alice
	noKey.APIKey = ""
	if _, err := noKey.Create(ctx, map[string]any{"templateID": "base"}); e2bclient.StatusOf(err) != http.StatusUnauthorized {
		t.Fatalf("create without a key: %v", err)
	}
	badKey := *alice
	badKey.APIKey = "e2b_" + strings.Repeat("0", 40)
	if _, err := badKey.Create(ctx, map[string]any{"templateID": "base"}); e2bclient.StatusOf(err) != http.StatusUnauthorized {
		t.Fatalf("create with a key never issued: %v", err)
	}
	if _, err := alice.Create(ctx, map[string]any{"templateID": "nope"}); e2bclient.StatusOf(err) != http.StatusBadRequest ||
		!strings.Contains(err.Error(), "code-interpreter-v1") {
		t.Fatalf("an unknown template: %v", err)
	}

	sb, err := alice.Create(ctx, map[string]any{"templateID": "code-interpreter-v1", "timeout": 300,
		"metadata": map[string]string{"app": "conformance"}, "envVars": map[string]string{"GREETING": "hello"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.SandboxID == "" || sb.EnvdAccessToken == "" || sb.EnvdVersion == "" || sb.ClientID == "" {
		t.Fatalf("created: %+v", sb)
	}
	// Long enough to outlive the test on a loaded machine: its end is checked below.
	other, err := bob.Create(ctx, map[string]any{"templateID": "base", "timeout": 300})
	if err != nil {
		t.Fatal(err)
	}
	conn := alice.Conn(sb.SandboxID, sb.EnvdAccessToken)
	// bob's own token on alice's sandbox, and no token at all.
	intruders := map[string]*e2bclient.Conn{"bob's token": bob.Conn(sb.SandboxID, other.EnvdAccessToken), "no token": alice.Conn(sb.SandboxID, "")}
	refused := func(step string, call func(*e2bclient.Conn) error) {
		t.Helper()
		for who, ic := range intruders {
			if err := call(ic); e2bclient.StatusOf(err) != http.StatusUnauthorized {
				t.Errorf("%s with %s: %v, want 401", step, who, err)
			}
		}
	}

	// Control plane: alice sees it, filtered by metadata; bob does not.
	var detail map[string]any
	if _, err := alice.Control(ctx, "GET", "/sandboxes/"+sb.SandboxID, nil, &detail); err != nil || detail["state"] != "running" ||
		detail["metadata"].(map[string]any)["app"] != "conformance" {
		t.Fatalf("get: %v %v", detail, err)
	}
	var list []map[string]any
	if _, err := alice.Control(ctx, "GET", "/v2/sandboxes?metadata=app%3Dconformance&state=running", nil, &list); err != nil || len(list) != 1 {
		t.Fatalf("list by metadata: %v %v", list, err)
	}
	if _, err := alice.Control(ctx, "GET", "/v2/sandboxes?metadata=app%3Dother", nil, &list); err != nil || len(list) != 0 {
		t.Fatalf("list by other metadata: %v %v", list, err)
	}
	for _, step := range []struct{ method, path string }{
		{"GET", "/sandboxes/" + sb.SandboxID}, {"POST", "/sandboxes/" + sb.SandboxID + "/timeout"},
		{"POST", "/sandboxes/" + sb.SandboxID + "/connect"}, {"DELETE", "/sandboxes/" + sb.SandboxID},
	} {
		if _, err := bob.Control(ctx, step.method, step.path, map[string]any{"timeout": 60}, nil); e2bclient.StatusOf(err) != http.StatusNotFound {
			t.Errorf("bob's %s %s: %v, want 404", step.method, step.path, err)
		}
	}
	if _, err := bob.Control(ctx, "GET", "/v2/sandboxes", nil, &list); err != nil || len(list) != 1 || list[0]["sandboxID"] != other.SandboxID {
		t.Errorf("bob's list: %v %v", list, err)
	}
	// The template builder and its tags are served (alice has built none); updates are not.
	var templates []map[string]any
	if _, err := alice.Control(ctx, "GET", "/templates", nil, &templates); err != nil || len(templates) != 0 {
		t.Errorf("templates: %v %v, want none", templates, err)
	}
	if _, err := alice.Control(ctx, "GET", "/templates/my-env/tags", nil, nil); e2bclient.StatusOf(err) != http.StatusNotFound ||
		!strings.Contains(err.Error(), "my-env") {
		t.Errorf("the tags of a template alice lacks: %v, want 404 naming it", err)
	}
	if _, err := alice.Control(ctx, "PATCH", "/templates/my-env", map[string]any{"public": true}, nil); e2bclient.StatusOf(err) != http.StatusNotImplemented ||
		!strings.Contains(err.Error(), "updates") {
		t.Errorf("a template update: %v, want 501 naming updates", err)
	}

	// run_code: output, envVars, state kept, an error, and env_vars for one run.
	ex, err := conn.RunCode(ctx, "import os\nx = 41\nprint(os.environ['GREETING'])", "", nil)
	// Its first call is number 1, though the pool started its interpreter and the daemon set
	// its envVars with calls of its own (41.14: it said 2).
	if err != nil || strings.Join(ex.Stdout, "") != "hello\n" || ex.Error != nil || !ex.Ended || ex.ExecutionCount != 1 {
		t.Fatalf("run_code: %+v %v", ex, err)
	}
	ex, err = conn.RunCode(ctx, "print(x + 1, os.environ.get('ONCE'))", "", map[string]string{"ONCE": "yes"})
	if err != nil || strings.Join(ex.Stdout, "") != "42 yes\n" {
		t.Fatalf("run_code with env_vars: %+v %v", ex, err)
	}
	ex, err = conn.RunCode(ctx, "from IPython.display import display, HTML\ndisplay(HTML('<b>hi</b>'))\nx + 1", "", nil)
	if err != nil || len(ex.Results) != 2 || ex.Results[0]["html"] != "<b>hi</b>" || ex.Results[0]["is_main_result"] != false ||
		ex.Text() != "42" || ex.Error != nil {
		t.Fatalf("run_code with a display and a value: %+v %v", ex, err)
	}
	if ex, err = conn.RunCode(ctx, "'quoted'", "", nil); err != nil || ex.Text() != "quoted" {
		t.Fatalf("a string's value: %+v %v", ex, err)
	}
	ex, err = conn.RunCode(ctx, "print(os.environ.get('ONCE'))\nraise ValueError('bad value')", "", nil)
	if err != nil || strings.Join(ex.Stdout, "") != "None\n" || ex.Error == nil || ex.Error.Name != "ValueError" ||
		ex.Error.Value != "bad value" || !strings.Contains(ex.Error.Traceback, "Traceback") || !ex.Ended ||
		len(ex.Stderr) != 0 { // the traceback is the error line's alone, as E2B's kernel sends it
		t.Fatalf("run_code raising: %+v %+v %v", ex, ex.Error, err)
	}
	refused("run_code", func(ic *e2bclient.Conn) error { _, err := ic.RunCode(ctx, "print(1)", "", nil); return err })
	var contexts []map[string]any
	traffic := alice.Conn(sb.SandboxID, sb.TrafficAccessToken)
	traffic.TrafficToken = true
	if err := traffic.Interpreter(ctx, "GET", "/contexts", nil, &contexts); err != nil || len(contexts) != 1 || contexts[0]["language"] != "python" {
		t.Errorf("contexts with the traffic token: %v %v", contexts, err)
	}
	if err := traffic.Interpreter(ctx, "POST", "/contexts", map[string]any{"language": "r"}, nil); e2bclient.StatusOf(err) != http.StatusBadRequest ||
		!strings.Contains(err.Error(), "Python only") {
		t.Errorf("a context in R: %v", err)
	}
	refused("contexts", func(ic *e2bclient.Conn) error { return ic.Interpreter(ctx, "GET", "/contexts", nil, nil) })

	// Files: a raw and a multipart upload, read back, listed; a missing file is 404.
	if err := conn.Health(ctx); err != nil {
		t.Fatal(err)
	}
	if out, err := conn.WriteFile(ctx, "data/raw.txt", []byte("raw bytes"), false); err != nil || len(out) != 1 || out[0]["path"] != "/home/user/data/raw.txt" {
		t.Fatalf("octet-stream upload: %v %v", out, err)
	}
	if _, err := conn.WriteFile(ctx, "/home/user/data/form.txt", []byte("form bytes"), true); err != nil {
		t.Fatalf("multipart upload: %v", err)
	}
	for path, want := range map[string]string{"data/raw.txt": "raw bytes", "/home/user/data/form.txt": "form bytes"} {
		if got, err := conn.ReadFile(ctx, path); err != nil || string(got) != want {
			t.Errorf("read %s: %q %v", path, got, err)
		}
	}
	if _, err := conn.ReadFile(ctx, "data/none.txt"); e2bclient.StatusOf(err) != http.StatusNotFound {
		t.Errorf("reading a missing file: %v", err)
	}
	var ls struct {
		Entries []struct{ Name, Type, Path string } `json:"entries"`
	}
	if err := conn.Unary(ctx, "/filesystem.Filesystem/ListDir", map[string]any{"path": "data", "depth": 1}, &ls); err != nil || len(ls.Entries) != 2 ||
		ls.Entries[0].Type != "FILE_TYPE_FILE" {
		t.Errorf("ListDir: %+v %v", ls, err)
	}
	if err := conn.Unary(ctx, "/filesystem.Filesystem/Stat", map[string]any{"path": "data/none.txt"}, &struct{}{}); e2bclient.StatusOf(err) != http.StatusNotFound {
		t.Errorf("Stat of a missing file: %v", err)
	}
	refused("files", func(ic *e2bclient.Conn) error { _, err := ic.ReadFile(ctx, "data/raw.txt"); return err })
	refused("ListDir", func(ic *e2bclient.Conn) error {
		return ic.Unary(ctx, "/filesystem.Filesystem/ListDir", map[string]any{"path": "data"}, &struct{}{})
	})

	// Commands: exit 0 with the sandbox's envVars, exit 3, a background process killed by a signal.
	res, err := conn.Run(ctx, "echo $GREETING from $(pwd); echo oops >&2", nil, nil)
	if err != nil || res.Stdout != "hello from /home/user\n" || res.Stderr != "oops\n" || res.ExitCode != 0 || !res.Exited || res.PID == 0 {
		t.Fatalf("commands.run: %+v %v", res, err)
	}
	if res, err = conn.Run(ctx, "exit 3", nil, nil); err != nil || res.ExitCode != 3 || !res.Exited || res.Status != "exit status 3" {
		t.Fatalf("exit 3: %+v %v", res, err)
	}
	started := make(chan uint32, 1)
	var (
		bg    e2bclient.CommandResult
		bgErr error
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		bg, bgErr = conn.Run(ctx, "echo waiting; touch waiting; sleep 300", nil, func(pid uint32) { started <- pid })
	})
	var pid uint32
	select {
	case pid = <-started:
	case <-time.After(time.Minute):
		t.Fatal("the background command did not start")
	}
	var procs struct {
		Processes []struct {
			PID    uint32 `json:"pid"`
			Config struct {
				Cmd  string   `json:"cmd"`
				Args []string `json:"args"`
			} `json:"config"`
		} `json:"processes"`
	}
	if err := conn.Unary(ctx, "/process.Process/List", map[string]any{}, &procs); err != nil || len(procs.Processes) != 1 ||
		procs.Processes[0].PID != pid || procs.Processes[0].Config.Cmd != "/bin/bash" {
		t.Errorf("List: %+v %v", procs, err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) { // it has written its line
		if err := conn.Unary(ctx, "/filesystem.Filesystem/Stat", map[string]any{"path": "waiting"}, &struct{}{}); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the background command did not touch its file: %v", err)
		}
	}
	refused("SendSignal", func(ic *e2bclient.Conn) error { return ic.Signal(ctx, pid, "SIGNAL_SIGKILL") })
	if err := conn.Signal(ctx, pid, "SIGNAL_SIGKILL"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if bgErr != nil || bg.Exited || !strings.Contains(bg.Status, "signal") || bg.Stdout != "waiting\n" {
		t.Errorf("the killed background command: %+v %v", bg, bgErr)
	}
	refused("commands.run", func(ic *e2bclient.Conn) error { _, err := ic.Run(ctx, "true", nil, nil); return err })

	// Timeout: a second sandbox set to end in a second ends; the first is killed.
	short, err := alice.Create(ctx, map[string]any{"templateID": "base", "timeout": 60})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Control(ctx, "POST", "/sandboxes/"+short.SandboxID+"/timeout", map[string]any{"timeout": 1}, nil); err != nil {
		t.Fatal(err)
	}
	waitGone(t, alice, short.SandboxID)
	if _, err := alice.Conn(short.SandboxID, short.EnvdAccessToken).RunCode(ctx, "1", "", nil); e2bclient.StatusOf(err) != http.StatusNotFound {
		t.Errorf("run_code in a timed-out sandbox: %v", err)
	}
	if err := alice.Kill(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if err := alice.Kill(ctx, sb.SandboxID); e2bclient.StatusOf(err) != http.StatusNotFound {
		t.Errorf("killing it again: %v", err)
	}
	if _, err := conn.RunCode(ctx, "1", "", nil); e2bclient.StatusOf(err) != http.StatusNotFound {
		t.Errorf("run_code after kill: %v", err)
	}
	if err := bob.Kill(ctx, other.SandboxID); err != nil {
		t.Fatal(err)
	}
}

// waitGone waits up to a minute for sandbox id to answer 404.
func waitGone(t *testing.T, c *e2bclient.Client, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		_, err := c.Control(ctx, "GET", "/sandboxes/"+id, nil, nil)
		if e2bclient.StatusOf(err) == http.StatusNotFound {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("sandbox %s is still there: %v", id, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestE2BPauseResume pauses a sandbox through the E2B API: its traffic is refused while
// paused, connect resumes it with its interpreter's state, and the listing filters by state.
func TestE2BPauseResume(t *testing.T) {
	alice := e2bDaemon(t, "alice")["alice"]
	ctx := t.Context()
	sb, err := alice.Create(ctx, map[string]any{"templateID": "base", "timeout": 120})
	if err != nil {
		t.Fatal(err)
	}
	conn := alice.Conn(sb.SandboxID, sb.EnvdAccessToken)
	if _, err := conn.RunCode(ctx, "kept = 7", "", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Control(ctx, "POST", "/sandboxes/"+sb.SandboxID+"/pause", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Control(ctx, "POST", "/sandboxes/"+sb.SandboxID+"/pause", nil, nil); e2bclient.StatusOf(err) != http.StatusConflict {
		t.Errorf("pausing it again: %v", err)
	}
	var list []map[string]any
	if _, err := alice.Control(ctx, "GET", "/v2/sandboxes?state=paused", nil, &list); err != nil || len(list) != 1 || list[0]["state"] != "paused" {
		t.Errorf("paused ones: %v %v", list, err)
	}
	if _, err := alice.Control(ctx, "GET", "/v2/sandboxes?state=running", nil, &list); err != nil || len(list) != 0 {
		t.Errorf("running ones: %v %v", list, err)
	}
	if _, err := conn.RunCode(ctx, "kept", "", nil); e2bclient.StatusOf(err) != http.StatusConflict {
		t.Errorf("run_code while paused: %v", err)
	}
	var again e2bclient.Sandbox
	if _, err := alice.Control(ctx, "POST", "/sandboxes/"+sb.SandboxID+"/connect", map[string]any{"timeout": 60}, &again); err != nil || again.EnvdAccessToken != sb.EnvdAccessToken {
		t.Fatalf("connect: %+v %v", again, err)
	}
	if ex, err := conn.RunCode(ctx, "kept", "", nil); err != nil || ex.Text() != "7" {
		t.Errorf("run_code after resume: %+v %v", ex, err)
	}
	if err := alice.Kill(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
}
