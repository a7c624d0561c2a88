package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/datadir"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

func TestExitCode(t *testing.T) {
	cases := []struct {
		name string
		res  *apitype.Result
		err  error
		want int
	}{
		{"ok", &apitype.Result{Outcome: apitype.OutcomeOK}, nil, 0},
		{"error keeps the status", &apitype.Result{Outcome: apitype.OutcomeError, ExitCode: 3}, nil, 3},
		{"error without a status", &apitype.Result{Outcome: apitype.OutcomeError, ExitCode: -1}, nil, 1},
		{"timeout", &apitype.Result{Outcome: apitype.OutcomeTimeout, Signal: 9}, nil, 124},
		{"memory", &apitype.Result{Outcome: apitype.OutcomeMemoryLimit}, nil, 137},
		{"output", &apitype.Result{Outcome: apitype.OutcomeOutputLimit}, nil, 125},
		{"segfault", &apitype.Result{Outcome: apitype.OutcomeKilled, Signal: 11}, nil, 139},
		{"sandbox error", &apitype.Result{Outcome: apitype.OutcomeSandboxError}, nil, 70},
		{"bad request over REST", nil, &client.APIError{Status: 400}, 64},
		{"too large over REST", nil, &client.APIError{Status: 413}, 64},
		{"busy over REST", nil, &client.APIError{Status: 429}, 75},
		{"not ready over REST", nil, &client.APIError{Status: 503}, 69},
		{"not found over REST", nil, &client.APIError{Status: 404, Code: "not_found"}, 64},
		{"conflict over REST", nil, &client.APIError{Status: 409, Code: "conflict"}, 79},
		{"conflict without a sandpit body", nil, &client.APIError{Status: 409}, 79},
		{"busy session cap over REST", nil, &client.APIError{Status: 429, Code: "busy"}, 75},
		{"evicted file over REST", nil, fmt.Errorf("fetching output file: %w", &client.APIError{Status: 410, Code: "gone"}), 66},
		{"refused token over REST", nil, &client.APIError{Status: 401, Code: "unauthorized"}, 77},
		{"internal over REST", nil, &client.APIError{Status: 500, Code: "internal"}, 70},
		{"stream error after the start", nil, &client.APIError{Code: "internal"}, 70},
		{"usage", nil, usageErrorf("bad flag"), 64},
		{"no daemon", nil, &NoDaemonError{URL: "http://x", Err: errors.New("refused")}, 69},
		{"reported run", nil, reportedRun(apitype.Result{Outcome: apitype.OutcomeTimeout}), 124},
		{"reported failure", nil, reported(fmt.Errorf("step: %w", sandbox.ErrNotReady)), 69},
		{"reported interrupt", nil, reported(context.Canceled), 130},
		{"bad request locally", nil, &sandbox.FieldError{Field: "code"}, 64},
		{"busy locally", nil, &sandbox.BusyError{}, 75},
		{"data dir in use", nil, fmt.Errorf("opening: %w", &datadir.LockedError{Dir: "/d"}), 75},
		{"not ready locally", nil, fmt.Errorf("x: %w", sandbox.ErrNotReady), 69},
		{"interrupted", nil, context.Canceled, 130},
		{"anything else", nil, errors.New("boom"), 70},
	}
	for _, c := range cases {
		if got := ExitCode(c.res, c.err); got != c.want {
			t.Errorf("%s: exit %d, want %d", c.name, got, c.want)
		}
	}
}

func TestRunRefusesBadArguments(t *testing.T) {
	cases := []struct {
		args []string
		says string
	}{
		{[]string{"run"}, "no code"},
		{[]string{"run", "-c", "print(1)", "file.py"}, "not both"},
		{[]string{"run", "-c", "print(1)", "--input", "{nope"}, "--input is not valid JSON"},
		{[]string{"run", "-c", "print(1)", "--timeout", "0s"}, "--timeout 0s is too short"},
		{[]string{"run", "/no/such/file.py"}, "reading the code"},
		{[]string{"run", "-c", "1", "--network", "sideways", "--local"}, "network"},
		{[]string{"run", "/bin/true"}, "not UTF-8 text"},
		{[]string{"run", "-c", "1", "--input", ""}, "--input is empty"},
		{[]string{"run", "-c", "1", "--no-such-flag"}, "unknown flag"},
	}
	for _, c := range cases {
		var stderr bytes.Buffer
		code := Main(context.Background(), c.args, Env{Stdin: strings.NewReader(""), Stdout: &bytes.Buffer{}, Stderr: &stderr,
			Lookup: func(string) (string, bool) { return "", false }})
		if code != 64 || !strings.Contains(stderr.String(), c.says) {
			t.Errorf("%v: exit %d, stderr %q, want it to say %q", c.args, code, stderr.String(), c.says)
		}
	}
}

func TestArgumentCountIsAUsageError(t *testing.T) {
	for _, args := range [][]string{{"code", "show"}, {"job", "create"}, {"exec", "show", "a", "b"}, {"sandbox", "status", "x"}} {
		var stderr strings.Builder
		code := Main(context.Background(), args, Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr,
			Lookup: func(string) (string, bool) { return "", false }})
		if code != 64 || !strings.Contains(stderr.String(), "usage: sandpit") {
			t.Errorf("%v: exit %d, %q", args, code, stderr.String())
		}
	}
}

// TestLocalEngineIsAnnounced: without a daemon, `sandpit run` says in one line on stderr that
// it runs the engine in its own process, and on which data directory (it did so silently);
// with --local, asked for, it does not.
func TestLocalEngineIsAnnounced(t *testing.T) {
	dir := t.TempDir()
	lookup := func(k string) (string, bool) {
		switch k {
		case "SANDPIT_DATA_DIR":
			return dir, true
		case "SANDPIT_EXECUTOR_PATH":
			return "/nonexistent/sandpit-executor", true // the engine stops there, before Docker
		}
		return "", false
	}
	for _, local := range []bool{false, true} {
		args := []string{"run", "-c", "print(1)", "--url", "http://127.0.0.1:1"}
		if local {
			args = append(args, "--local")
		}
		var stderr strings.Builder
		Main(context.Background(), args, Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr, Lookup: lookup})
		said := strings.Count(stderr.String(), "running the engine in this process on "+dir)
		if want := map[bool]int{false: 1, true: 0}[local]; said != want {
			t.Errorf("--local=%t: stderr %q says it %d times, want %d", local, stderr.String(), said, want)
		}
		if !local && !strings.Contains(stderr.String(), "no daemon answers at http://127.0.0.1:1") {
			t.Errorf("stderr %q does not name the daemon's address", stderr.String())
		}
	}
}

// TestDaemonURLWithoutScheme: a --url or SANDPIT_URL without its scheme is a usage error that
// gives the URL with it, before anything runs (it read as no daemon, and run then started an
// engine of its own beside the daemon: a new user, 7 December 2026).
func TestDaemonURLWithoutScheme(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"run", "-c", "print(1)", "--url", "localhost:18752"}, "", `--url "localhost:18752" is not a daemon's URL: give its scheme, as http://localhost:18752`},
		{[]string{"session", "ls"}, "127.0.0.1:18752", `SANDPIT_URL "127.0.0.1:18752" is not a daemon's URL: give its scheme, as http://127.0.0.1:18752`},
		{[]string{"exec", "list", "--url", "ftp://x"}, "", `--url "ftp://x" is not a daemon's URL: give it as http://HOST:PORT`},
	} {
		lookup := func(k string) (string, bool) {
			switch {
			case k == "SANDPIT_DATA_DIR":
				return dir, true
			case k == "SANDPIT_URL" && c.env != "":
				return c.env, true
			}
			return "", false
		}
		var stderr strings.Builder
		code := Main(context.Background(), c.args, Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr, Lookup: lookup})
		if code != exitUsage || !strings.Contains(stderr.String(), c.want) || strings.Contains(stderr.String(), "running the engine") {
			t.Errorf("%q (SANDPIT_URL %q): exit %d, stderr %q; want a usage error saying %q", c.args, c.env, code, stderr.String(), c.want)
		}
	}
}

// Issue 33, items 7 and 8: doctor with a configuration that does not load prints its table,
// the configuration as a failed check naming the file, and exits 69 (it printed one line and
// exited 64); the table's details start in one column however long a check's name.
func TestDoctorReportsABadConfiguration(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"slots": "two"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := sandpit(t, "http://127.0.0.1:1", "doctor", "--config", bad)
	if code != 69 || !strings.Contains(out, "FAIL  configuration") || !strings.Contains(out, "config file "+bad) ||
		!strings.Contains(out, "slots") || !strings.Contains(out, "daemon") || !strings.Contains(out, "fix: ") {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// TestUnknownEnvWarnsOnlyOfSettings: a misspelt setting is warned of, with the setting it is
// nearest (a new user, 7 December 2026, had only "sandpit --help"); the variables of the
// tests and of the test cluster's script (SANDPIT_KUBE_*, which its env exports) are not (a
// helper, 7 December 2026: 16 warnings on every command of the Kubernetes workflow).
func TestUnknownEnvWarnsOnlyOfSettings(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"slots": "two"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	environ := []string{"SANDPIT_SLTOS=2", "SANDPIT_KUBE_DIR=/tmp/k", "SANDPIT_KUBE_BRIDGE=k0", "SANDPIT_TEST_KUBECONFIG=/tmp/k/admin",
		"SANDPIT_REQUIRE_KUBERNETES=1", "SANDPIT_URL=http://127.0.0.1:1", "HOME=/root"}
	var stdout, stderr bytes.Buffer
	Main(context.Background(), []string{"doctor", "--config", bad}, Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
		Lookup: func(string) (string, bool) { return "", false }, Environ: func() []string { return environ }})
	if got := strings.Count(stderr.String(), "is not a sandpit setting"); got != 1 || !strings.Contains(stderr.String(), "SANDPIT_SLTOS is not a sandpit setting and is ignored (did you mean SANDPIT_SLOTS?)") {
		t.Fatalf("%d warnings, want one, of SANDPIT_SLTOS with its nearest setting:\n%s", got, stderr.String())
	}
}

// TestDoctorNotesIgnoredSettings: doctor said "valid" with a misspelt setting set (a new user,
// 7 December 2026): the variable is a note in its table, with the setting it is nearest.
func TestDoctorNotesIgnoredSettings(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"SANDPIT_DATA_DIR": dir, "SANDPIT_SLTOS": "2", "SANDPIT_URL": "http://127.0.0.1:1"}
	var stdout, stderr bytes.Buffer
	Main(context.Background(), []string{"doctor"}, Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
		Lookup: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		Environ: func() []string {
			return []string{"SANDPIT_DATA_DIR=" + dir, "SANDPIT_SLTOS=2", "SANDPIT_URL=http://127.0.0.1:1"}
		}})
	if !strings.Contains(stdout.String(), "ok    configuration") || !regexp.MustCompile(`note  ignored settings +SANDPIT_SLTOS is not a sandpit setting and is ignored \(did you mean SANDPIT_SLOTS\?\)`).MatchString(stdout.String()) {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
}

func TestPrintChecksAligns(t *testing.T) {
	var b strings.Builder
	printChecks(&b, []app.Check{{Name: "ok", OK: true, Detail: "first"}, {Name: "a much longer check name", Detail: "second", Fix: "do it"},
		{Name: "x", Required: true, Detail: "third", Fix: "fix it"}})
	col := -1
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		i := strings.IndexAny(line, "fst") // first, second, third, fix:
		for _, w := range []string{"first", "second", "third", "fix: "} {
			if j := strings.Index(line, w); j >= 0 {
				i = j
			}
		}
		if col < 0 {
			col = i
		}
		if i != col {
			t.Fatalf("misaligned at %q (column %d, want %d):\n%s", line, i, col, b.String())
		}
	}
}

// TestUnknownCommandIsAUsageError: a word that names no command of its group exits 64 with a
// "did you mean" (`session exce ID` printed the group's help and exited 0; `sandpit exce`
// exited 70), at every level and for help; a group given no word prints its help.
func TestUnknownCommandIsAUsageError(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"session", "exce", "se_aaaaaaaaaaaaaaaaaaaaaaaaaa"}, `unknown command "exce" for "sandpit session"; did you mean "exec"?`},
		{[]string{"exce"}, `unknown command "exce" for "sandpit"; did you mean "exec"?`},
		{[]string{"keys", "craete"}, `unknown command "craete" for "sandpit keys"; did you mean "create"?`},
		{[]string{"help", "sesion"}, `unknown command "sesion" for "sandpit"; did you mean "session"?`},
		{[]string{"help", "session", "lgos"}, `unknown command "lgos" for "sandpit session"; did you mean "logs"?`},
		{[]string{"session", "zzzzzz"}, `unknown command "zzzzzz" for "sandpit session" (`},
		{[]string{"completion", "bsh"}, `unknown command "bsh" for "sandpit completion"; did you mean "bash"?`},
		// A misspelt flag gets the command's nearest (a new user, 7 December 2026, had none).
		{[]string{"run", "--tiemout", "3s", "-c", "1"}, "unknown flag: --tiemout; did you mean --timeout? (`sandpit run --help` lists its flags)"},
		{[]string{"session", "ls", "--jsno"}, "unknown flag: --jsno; did you mean --json?"},
		{[]string{"run", "--zzzzzzz"}, "unknown flag: --zzzzzzz (`sandpit run --help` lists its flags)"},
		// An unknown short flag gets the command's short flags (a red team, 7 December 2026).
		{[]string{"run", "-x", "-c", "1"}, "unknown shorthand flag: 'x' in -x: the short flags of `sandpit run` are -c (--code), "},
		{[]string{"version", "-x"}, "unknown shorthand flag: 'x' in -x: the short flags of `sandpit version` are -h (--help), -v (--verbose) ("},
	} {
		var stdout, stderr strings.Builder
		code := Main(context.Background(), c.args, Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
			Lookup: func(string) (string, bool) { return "", false }})
		if code != 64 || !strings.Contains(stderr.String(), c.want) || stdout.Len() > 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 64 and %q", c.args, code, stdout.String(), stderr.String(), c.want)
		}
	}
	for _, args := range [][]string{{"session"}, {"help", "session"}, {}} {
		var stdout strings.Builder
		code := Main(context.Background(), args, Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: io.Discard,
			Lookup: func(string) (string, bool) { return "", false }})
		if code != 0 || !strings.Contains(stdout.String(), "Available Commands:") {
			t.Errorf("%v: exit %d, stdout %q; want its help and 0", args, code, stdout.String())
		}
	}
}

// TestConflictHasItsOwnExit: a script tells a paused session (409) and a full one (429) from
// a typo (64) by the exit status; a "not found" said as the agent "default" says that the
// session may be another agent's.
func TestConflictHasItsOwnExit(t *testing.T) {
	const s = "se_aaaaaaaaaaaaaaaaaaaaaaaaaa"
	srv := cannedDaemon(map[string]string{
		"POST /v1/agents/default/sessions/" + s + "/executions": `{"error": {"code": "conflict", "message": "session ` + s + ` is paused: resume it first"}}`,
		"POST /v1/agents/default/sessions":                      `{"error": {"code": "busy", "message": "agent default has 2 active sessions, its limit (sessions_per_agent)"}}`,
		"GET /v1/agents/default/sessions/" + s:                  `{"error": {"code": "not_found", "message": "no session ` + s + `"}}`,
		"GET /v1/agents/bob/sessions/" + s:                      `{"error": {"code": "not_found", "message": "no session ` + s + `"}}`,
		"GET /v1/agents/default/sessions/" + s + "/processes":   `{"error": {"code": "not_found", "message": "no session ` + s + `: give the --agent it was created with"}}`,
	}, func(r *http.Request) int {
		switch {
		case r.Method == "GET":
			return 404
		case r.URL.Path == "/v1/agents/default/sessions":
			return 429
		}
		return 409
	})
	defer srv.Close()
	dir := t.TempDir()
	for _, c := range []struct {
		args     []string
		code     int
		want     string
		not      string
		agentEnv string
	}{
		{args: []string{"session", "run", s, "-c", "1"}, code: 79, want: "is paused"},
		{args: []string{"session", "new"}, code: 75, want: "sessions_per_agent"},
		{args: []string{"session", "show", s}, code: 64, want: "it may be another agent's: give --agent NAME, or set SANDPIT_AGENT"},
		{args: []string{"session", "show", s, "--agent", "bob"}, code: 64, want: "no session", not: "another agent's"},
		{args: []string{"session", "ps", s}, code: 64, want: "created with (HTTP 404); SANDPIT_AGENT gives --agent to every command", not: "another agent's"},
		{args: []string{"session", "show", s}, code: 64, want: "no session", not: "another agent's", agentEnv: "bob"},
	} {
		env := map[string]string{"SANDPIT_DATA_DIR": dir, "SANDPIT_AGENT": c.agentEnv}
		var stderr strings.Builder
		code := Main(context.Background(), append(c.args, "--url", srv.URL), Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr,
			Lookup: func(k string) (string, bool) { v := env[k]; return v, v != "" }})
		if code != c.code || !strings.Contains(stderr.String(), c.want) || c.not != "" && strings.Contains(stderr.String(), c.not) {
			t.Errorf("%v (SANDPIT_AGENT %q): exit %d, stderr %q; want %d, %q and not %q", c.args, c.agentEnv, code, stderr.String(), c.code, c.want, c.not)
		}
	}
}

// TestExecShowIsReadable: exec show prints a record for a person (it printed the raw JSON,
// with the charts' base64 inline), the run's text escaped; --json keeps the raw form.
func TestExecShowIsReadable(t *testing.T) {
	png := strings.Repeat("iVBORw0KGgo", 20)
	record := `{"id": "ex_a", "agent": "alice", "status": "finished", "outcome": "error", "exit_code": 1, "signal": 0,
		"reason": "the program exited with status 1", "stdout": "rows: 3\n\u001b[2Jdone\n", "stderr": "Traceback\nValueError: bad\n",
		"output": {"n": 3}, "duration_ms": 12, "timeout_ms": 30000, "started_at": "2026-11-30T10:00:00Z", "start": "fork",
		"source": "cli", "code_sha256": "0123", "code": "print('rows: 3')\n", "input": [1, 2], "ended_at": "2026-11-30T10:00:01Z",
		"results": [{"data": {"text/plain": "\"<Figure>\"", "image/png": "\"` + png + `\""}, "is_main_result": false}],
		"files": [{"name": "figure-1.png", "size_bytes": 18740, "media_type": "image/png", "sha256": "ab"}],
		"error": {"name": "ValueError", "value": "bad", "traceback": "Traceback"}}`
	srv := cannedDaemon(map[string]string{"GET /v1/executions/ex_a": record}, func(*http.Request) int { return 200 })
	defer srv.Close()
	dir := t.TempDir()
	run := func(args ...string) (int, string) {
		var stdout, stderr strings.Builder
		code := Main(context.Background(), append(args, "--url", srv.URL), Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
			Lookup: func(k string) (string, bool) { return dir, k == "SANDPIT_DATA_DIR" }})
		return code, stdout.String()
	}
	code, out := run("exec", "show", "ex_a")
	for _, want := range []string{"execution:  ex_a", "agent:      alice (source cli)", "outcome:    error, exit 1", "error:      ValueError: bad",
		`output:     {"n": 3}`, "  rows: 3", `  \x1b[2Jdone`, "display:    image/png, text/plain: \"<Figure>\"", "file:       figure-1.png (image/png, 18.3 KiB)",
		"sandpit exec files ex_a --output-dir DIR", "  ValueError: bad", "  print('rows: 3')"} {
		if !strings.Contains(out, want) {
			t.Errorf("exec show: stdout lacks %q:\n%s", want, out)
		}
	}
	if code != 0 || strings.Contains(out, png) || strings.ContainsRune(out, '\x1b') {
		t.Errorf("exec show: exit %d, stdout holds the base64 or an escape:\n%s", code, out)
	}
	if code, out := run("exec", "show", "ex_a", "--json"); code != 0 || !strings.Contains(out, png) || !strings.Contains(out, `"outcome": "error"`) {
		t.Errorf("exec show --json: exit %d, stdout %.300s", code, out)
	}
}

// TestNotFoundInsideASession: a missing path, process or share of a session the agent has is
// said as the daemon names it, without the hint that the session may be another agent's (a
// trial's `session cp` of a missing path was told to give --agent).
func TestNotFoundInsideASession(t *testing.T) {
	const s, gone = "se_aaaaaaaaaaaaaaaaaaaaaaaaaa", "se_bbbbbbbbbbbbbbbbbbbbbbbbbb"
	base := "/v1/agents/default/sessions/" + s
	srv := cannedDaemon(map[string]string{
		"GET " + base:                 `{"id": "` + s + `", "agent": "default", "state": "active"}`,
		"GET " + base + "/files/stat": `{"error": {"code": "not_found", "message": "/home/user/nothere.txt does not exist"}}`,
		"GET " + base + "/files/list": `{"error": {"code": "not_found", "message": "/home/user/nothere does not exist"}}`,
		"POST " + base + "/processes/pr_" + strings.Repeat("c", 26) + "/wait": `{"error": {"code": "not_found", "message": "session ` + s + ` has no process"}}`,
		"DELETE " + base + "/shares/sh_" + strings.Repeat("d", 26):            `{"error": {"code": "not_found", "message": "session ` + s + ` has no share"}}`,
		"GET /v1/agents/default/sessions/" + gone + "/files/stat":             `{"error": {"code": "not_found", "message": "no session ` + gone + `"}}`,
	}, func(r *http.Request) int {
		if r.Method == "GET" && r.URL.Path == base {
			return 200
		}
		return 404
	})
	defer srv.Close()
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	for _, c := range []struct {
		args []string
		want string
		hint bool
	}{
		{args: []string{"session", "cp", s + ":nothere.txt", out}, want: "/home/user/nothere.txt does not exist"},
		{args: []string{"session", "cp", s + ":nothere.txt", "-"}, want: "/home/user/nothere.txt does not exist"},
		{args: []string{"session", "ls", s, "nothere"}, want: "/home/user/nothere does not exist"},
		{args: []string{"session", "wait", s, "pr_" + strings.Repeat("c", 26)}, want: "has no process"},
		{args: []string{"session", "unshare", s, "sh_" + strings.Repeat("d", 26)}, want: "has no share"},
		{args: []string{"session", "cp", gone + ":x", out}, want: "no session " + gone, hint: true},
	} {
		var stderr strings.Builder
		code := Main(context.Background(), append(c.args, "--url", srv.URL), Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr,
			Lookup: func(k string) (string, bool) { return dir, k == "SANDPIT_DATA_DIR" }})
		if code == 0 || !strings.Contains(stderr.String(), c.want) || strings.Contains(stderr.String(), "another agent's") != c.hint {
			t.Errorf("%v: exit %d, stderr %q; want %q, the agent hint %v", c.args, code, stderr.String(), c.want, c.hint)
		}
	}
}
