package app_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/cli"
)

// TestCLIAgainstADaemon: what new users found of the CLI, against a real daemon of one slot
// with a session: `session cp` into a directory, `session logs` of a background command,
// doctor's count of the warm containers beside a session's, and `keys create` made through
// the daemon (into its database, listed by its REST API).
func TestCLIAgainstADaemon(t *testing.T) {
	dir := t.TempDir()
	url, _ := sessionDaemon(t, dir)
	sandpit := cliAt(url)
	code, out, errOut := sandpit("session", "new", "--agent", "uma")
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("session new: %d %q %q", code, out, errOut)
	}
	t.Setenv("SANDPIT_AGENT", "uma") // every command below names no --agent

	local := filepath.Join(t.TempDir(), "report.csv")
	if err := os.WriteFile(local, []byte("a,b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{id + ":", id + ":in/"} {
		if code, out, errOut := sandpit("session", "cp", "--parents", local, dst); code != 0 {
			t.Fatalf("session cp FILE %s: %d %q %q", dst, code, out, errOut)
		}
	}
	if code, out, errOut := sandpit("session", "cp", local, id+":in"); code != 0 {
		t.Fatalf("session cp FILE ID:in (a directory): %d %q %q", code, out, errOut)
	}
	if code, out, errOut := sandpit("session", "ls", id, "--depth", "2"); code != 0 || !strings.Contains(out, "/home/user/report.csv") ||
		!strings.Contains(out, "/home/user/in/report.csv") {
		t.Fatalf("session ls after cp: %d %q %q", code, out, errOut)
	}

	code, out, errOut = sandpit("session", "exec", id, "--background", "-c", "echo out; echo err >&2; sleep 300")
	pid := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("session exec --background: %d %q %q", code, out, errOut)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		began := time.Now()
		code, out, errOut = sandpit("session", "logs", id, pid)
		if code != 0 || time.Since(began) > 10*time.Second {
			t.Fatalf("session logs: %d %q %q after %s", code, out, errOut, time.Since(began))
		}
		if out == "out\n" && errOut == "err\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session logs: stdout %q, stderr %q; want out and err", out, errOut)
		}
	}
	if code, out, errOut := sandpit("session", "kill", id, pid); code != 0 {
		t.Fatalf("session kill: %d %q %q", code, out, errOut)
	}

	cfg := testConfigAt(t, dir)
	env := cliEnv{"SANDPIT_URL": url, "SANDPIT_DATA_DIR": dir, "SANDPIT_EXECUTOR_PATH": cfg.ExecutorPath, "SANDPIT_BASE_IMAGE": cfg.BaseImage, "SANDPIT_SLOTS": "1"}
	code, out, errOut = env.run("doctor", "--json")
	var doc struct {
		Checks []struct{ Name, Detail string } `json:"checks"`
	}
	if json.Unmarshal([]byte(out), &doc) != nil {
		t.Fatalf("doctor --json: %d %q %q", code, out, errOut)
	}
	found := false
	for _, c := range doc.Checks {
		if c.Name == "warm containers" {
			found = true
			if c.Detail != "1 running, one per slot (besides them, 1 container(s) of sessions)" {
				t.Errorf("doctor's warm containers: %q; want the one slot's, and the session's beside it", c.Detail)
			}
		}
	}
	if !found {
		t.Errorf("doctor has no warm containers check: %s", out)
	}

	code, key, errOut := env.run("keys", "create", "--agent", "uma")
	if code != 0 || !strings.HasPrefix(key, "e2b_") || errOut != "" {
		t.Fatalf("keys create: %d %q %q", code, key, errOut)
	}
	status, body := httpCall(t, "GET", url+"/v1/keys?agent=uma", "")
	var keys apitype.APIKeyList
	if status != 200 || json.Unmarshal(body, &keys) != nil || len(keys.Keys) != 1 || !strings.HasPrefix(key, keys.Keys[0].Prefix) {
		t.Fatalf("the daemon's keys: %d %s; want the key made", status, body)
	}
}

// cliEnv runs the sandpit command in this process with exactly these environment variables.
type cliEnv map[string]string

func (e cliEnv) run(args ...string) (int, string, string) {
	var stdout, stderr strings.Builder
	code := cli.Main(context.Background(), args, cli.Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
		Lookup: func(k string) (string, bool) { v, ok := e[k]; return v, ok }})
	return code, stdout.String(), stderr.String()
}
