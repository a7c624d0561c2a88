package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
		{"conflict over REST", nil, &client.APIError{Status: 409, Code: "conflict"}, 64},
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
