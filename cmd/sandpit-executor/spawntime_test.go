package main

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestParseSpawnTime(t *testing.T) {
	a, err := parseSpawnTime([]string{"-n", "3", "-uid", "65534", "--", "python3", "-c", "print(1)"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if a.n != 3 || a.uid != 65534 || !slices.Equal(a.argv, []string{"python3", "-c", "print(1)"}) {
		t.Errorf("parsed %+v", a)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "3", "-uid", "65534"}, "no program"},
		{[]string{"-n", "0", "-uid", "65534", "--", "true"}, "-n 0 is out of range"},
		{[]string{"-n", "1", "--", "true"}, "-uid 0"},
		{[]string{"-n", "1", "-uid", "-5", "--", "true"}, "-uid -5"},
		{[]string{"-x", "--", "true"}, "not defined"},
	} {
		if _, err := parseSpawnTime(bad.args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("parseSpawnTime(%q) = %v, want an error containing %q", bad.args, err, bad.want)
		}
	}
}

func TestSpawnTimeUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := spawnTime([]string{"-n", "2"}, &stdout, &stderr); code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "usage: sandpit-executor spawn-time") || stdout.Len() != 0 {
		t.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}
}

// requireRoot skips a test that switches uids unless it runs as root.
func requireRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching to another uid needs root")
	}
}

func TestSpawnTimeRuns(t *testing.T) {
	requireRoot(t)
	dir, err := os.MkdirTemp("", "spawn-time-") // not t.TempDir: its parent is closed to other users
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	// Each run appends its uid, gid, groups, environment and directory to a file the test
	// reads, and fails if its stdin is not empty.
	script := `set -e; echo "$(id -u) $(id -g) [$(id -G)] $HOME $LANG $OPENBLAS_NUM_THREADS $(pwd)" >> ` + dir + `/runs; if read -r line; then exit 9; fi`
	var stdout, stderr bytes.Buffer
	if code := spawnTime([]string{"-n", "3", "-uid", "65534", "--", "sh", "-c", script}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var out struct {
		DurationsNS []int64 `json:"durations_ns"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("output %q: %v", stdout.String(), err)
	}
	if len(out.DurationsNS) != 3 {
		t.Fatalf("%d durations, want 3", len(out.DurationsNS))
	}
	for _, d := range out.DurationsNS {
		if d <= 0 {
			t.Errorf("duration %d ns", d)
		}
	}
	runs, err := os.ReadFile(dir + "/runs")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("65534 65534 [65534] /tmp C.UTF-8 1 /\n", 3)
	if string(runs) != want {
		t.Errorf("the runs saw:\n%s\nwant:\n%s", runs, want)
	}
}

func TestSpawnTimeFailingRun(t *testing.T) {
	requireRoot(t)
	var stdout, stderr bytes.Buffer
	code := spawnTime([]string{"-n", "5", "-uid", "65534", "--", "sh", "-c", "echo boom >&2; exit 3"}, &stdout, &stderr)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if stdout.Len() != 0 || !strings.Contains(stderr.String(), "run 1 of sh") || !strings.Contains(stderr.String(), "exit status 3") ||
		!strings.Contains(stderr.String(), "boom") {
		t.Errorf("stdout %q, stderr %q; want no result and the run's stderr", stdout.String(), stderr.String())
	}
}
