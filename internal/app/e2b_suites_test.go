package app_test

import (
	"bytes"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/e2b/e2bclient"
)

// waitWarmE2B waits up to a minute for the daemon at base to have a warm E2B sandbox.
func waitWarmE2B(t *testing.T, base string) {
	t.Helper()
	waitMetric(t, base, "\nsandpit_e2b_warm_sandboxes 1", time.Minute)
}

// TestE2BSuiteDifferences: where E2B's own test suites found sandpit answering otherwise than
// E2B (issues 42 and 50), it answers as E2B does.
func TestE2BSuiteDifferences(t *testing.T) {
	alice := e2bDaemon(t, "alice")["alice"]
	base := strings.TrimSuffix(alice.APIURL, app.E2BPrefix)
	ctx := t.Context()

	// 50.2: a sandbox handed over from the warm pool started when it was handed over.
	waitWarmE2B(t, base)
	time.Sleep(1500 * time.Millisecond)
	before := time.Now()
	sb, err := alice.Create(ctx, map[string]any{"templateID": "base", "timeout": 300})
	if err != nil {
		t.Fatal(err)
	}
	var detail struct {
		StartedAt time.Time `json:"startedAt"`
	}
	if _, err := alice.Control(ctx, "GET", "/sandboxes/"+sb.SandboxID, nil, &detail); err != nil ||
		detail.StartedAt.Before(before.Add(-500*time.Millisecond)) || detail.StartedAt.After(time.Now()) {
		t.Errorf("a warm sandbox's startedAt is %s, want when it was created (%s): %v", detail.StartedAt, before, err)
	}
	conn := alice.Conn(sb.SandboxID, sb.EnvdAccessToken)

	// 42.4: removing what is not there succeeds.
	if err := conn.Unary(ctx, "/filesystem.Filesystem/Remove", map[string]any{"path": "no/such/file"}, &struct{}{}); err != nil {
		t.Errorf("removing a missing path: %v, want success", err)
	}

	// 42.5: a link is its target's type, with the target's path (the published proto has no
	// symlink type).
	if res, err := conn.Run(ctx, "echo hi > a.txt && mkdir d && ln -s a.txt link.txt && ln -s d dlink", nil, nil); err != nil || res.ExitCode != 0 {
		t.Fatalf("making links: %+v %v", res, err)
	}
	type entry struct {
		Name, Type, SymlinkTarget string
	}
	for name, want := range map[string]entry{
		"link.txt": {"link.txt", "FILE_TYPE_FILE", "/home/user/a.txt"},
		"dlink":    {"dlink", "FILE_TYPE_DIRECTORY", "/home/user/d"},
		"a.txt":    {"a.txt", "FILE_TYPE_FILE", ""},
	} {
		var st struct{ Entry entry }
		if err := conn.Unary(ctx, "/filesystem.Filesystem/Stat", map[string]any{"path": name}, &st); err != nil || st.Entry != want {
			t.Errorf("Stat %s: %+v %v, want %+v", name, st.Entry, err, want)
		}
	}
	var ls struct{ Entries []entry }
	if err := conn.Unary(ctx, "/filesystem.Filesystem/ListDir", map[string]any{"path": ".", "depth": 1}, &ls); err != nil {
		t.Fatal(err)
	}
	for _, e := range ls.Entries {
		if e.Name == "dlink" && (e.Type != "FILE_TYPE_DIRECTORY" || e.SymlinkTarget != "/home/user/d") {
			t.Errorf("ListDir's dlink: %+v", e)
		}
	}

	// 50.4: a terminal, and a command, may start in any directory the user can enter.
	for name, msg := range map[string]map[string]any{
		"pty":     {"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-c", "pwd"}, "cwd": "/"}, "pty": map[string]any{"size": map[string]any{"rows": 24, "cols": 80}}},
		"command": {"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-c", "pwd"}, "cwd": "/usr"}, "stdin": false},
	} {
		res, err := conn.StartProcess(ctx, msg, nil)
		out := res.Stdout + string(res.PTY)
		if err != nil || res.ExitCode != 0 || !strings.HasPrefix(strings.TrimSpace(out), "/") || strings.Contains(out, "home") {
			t.Errorf("a %s in %v: %+v %q %v", name, msg["process"].(map[string]any)["cwd"], res, out, err)
		}
	}
	// One the user cannot enter is refused.
	if _, err := conn.StartProcess(ctx, map[string]any{"process": map[string]any{"cmd": "/bin/pwd", "cwd": "/root"}}, nil); err == nil {
		t.Errorf("a command in /root started")
	}

	// 50.3: signed file URLs at the sandbox URL's origin name the sandbox by their signature.
	expiry := time.Now().Add(time.Minute).Unix()
	up, _ := conn.FileURL("signed/up.txt", "write", expiry)
	if _, err := alice.FetchURL(ctx, "POST", up, "up.txt", []byte("signed bytes")); err != nil {
		t.Fatalf("upload to %s: %v", up, err)
	}
	// A signed upload URL writes its path only: a part naming another file (a trial's
	// .profile, run by every later command's bash -l) is refused, and not written.
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	for _, part := range [][2]string{{"signed/up.txt", "signed bytes"}, {".profile", "echo PROFILE-PWNED"}} {
		fw, _ := mw.CreateFormFile("file", part[0])
		_, _ = io.WriteString(fw, part[1])
	}
	_ = mw.Close()
	if resp, err := http.Post(up, mw.FormDataContentType(), &form); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "one part") {
			t.Errorf("a signed upload of two parts: %d %s, want 400 naming its one part", resp.StatusCode, b)
		}
	}
	if _, err := conn.ReadFile(ctx, ".profile"); e2bclient.StatusOf(err) != http.StatusNotFound {
		t.Errorf("a signed upload's second part was written to .profile: %v", err)
	}
	down, _ := conn.FileURL("signed/up.txt", "read", 0)
	if got, err := alice.FetchURL(ctx, "GET", down, "", nil); err != nil || string(got) != "signed bytes" {
		t.Errorf("download from %s: %q %v", down, got, err)
	}
	for name, u := range map[string]string{
		"expired":          must(conn.FileURL("signed/up.txt", "read", time.Now().Add(-time.Minute).Unix())),
		"for writing":      must(conn.FileURL("signed/up.txt", "write", 0)),
		"of another token": must(alice.Conn(sb.SandboxID, "0123").FileURL("signed/up.txt", "read", 0)),
	} {
		if _, err := alice.FetchURL(ctx, "GET", u, "", nil); e2bclient.StatusOf(err) != http.StatusUnauthorized {
			t.Errorf("a download with a signature %s: %v, want 401", name, err)
		}
	}
	// The header form takes a signature in place of the token too.
	req, _ := http.NewRequestWithContext(ctx, "GET", alice.SandboxURL+down[strings.Index(down, "/files"):], nil)
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", e2bclient.EnvdPort)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("a signed download by the header form: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// 42.7: envd's health is 502 for a paused sandbox, and for one that ended.
	if _, err := alice.Control(ctx, "POST", "/sandboxes/"+sb.SandboxID+"/pause", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := conn.Health(ctx); e2bclient.StatusOf(err) != http.StatusBadGateway {
		t.Errorf("health of a paused sandbox: %v, want 502", err)
	}
	if _, err := alice.Control(ctx, "POST", "/sandboxes/"+sb.SandboxID+"/connect", map[string]any{"timeout": 300}, nil); err != nil {
		t.Fatal(err)
	}
	if err := conn.Health(ctx); err != nil {
		t.Errorf("health of the resumed sandbox: %v", err)
	}

	// 42.3: killing the sandbox during a command, or a run_code, breaks their streams.
	started := make(chan uint32, 1)
	var (
		cmdErr error
		runErr error
		ex     e2bclient.Execution
		wg     sync.WaitGroup
	)
	wg.Go(func() {
		_, cmdErr = conn.Run(ctx, "sleep 120", nil, func(pid uint32) { started <- pid })
	})
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the command did not start")
	}
	wg.Go(func() {
		ex, runErr = conn.RunCode(ctx, "print('running', flush=True)\nimport time\ntime.sleep(120)", "", nil)
	})
	time.Sleep(2 * time.Second)
	if err := alice.Kill(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	var apiErr *e2bclient.Error
	if cmdErr == nil || errors.As(cmdErr, &apiErr) {
		t.Errorf("a command's stream as its sandbox is killed: %v, want it broken", cmdErr)
	}
	if runErr == nil || ex.Error != nil || strings.Contains(runErr.Error(), "ended unexpectedly") {
		t.Errorf("run_code's stream as its sandbox is killed: %+v %v, want it broken", ex.Error, runErr)
	}
	if err := conn.Health(ctx); e2bclient.StatusOf(err) != http.StatusBadGateway {
		t.Errorf("health of a killed sandbox: %v, want 502", err)
	}
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}
