package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/cli"
	"github.com/sandpit-dev/sandpit/internal/setup"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

func setupEvents(t *testing.T, r io.Reader) []setup.Event {
	t.Helper()
	var events []setup.Event
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var e setup.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		events = append(events, e)
	}
	return events
}

func finals(events []setup.Event) map[string]string {
	m := map[string]string{}
	for _, e := range events {
		if e.Status != setup.Started && e.Status != setup.Progress {
			m[e.Step] = e.Status
		}
	}
	return m
}

// sandpit setup --json on a machine with Docker streams every step and ends with a passing
// health check; a second run reports the steps as skipped. POST /v1/setup does the same
// through a running daemon.
func TestSetup(t *testing.T) {
	cfg := testConfig(t)
	env := map[string]string{"SANDPIT_DATA_DIR": cfg.DataDir, "SANDPIT_BASE_IMAGE": cfg.BaseImage,
		"SANDPIT_EXECUTOR_PATH": cfg.ExecutorPath, "SANDPIT_URL": "http://127.0.0.1:1"}
	run := func() []setup.Event {
		var out, errOut bytes.Buffer
		code := cli.Main(context.Background(), []string{"setup", "--json"}, cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut,
			Lookup: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
		if code != 0 {
			t.Fatalf("sandpit setup exited %d: %s\n%s", code, errOut.String(), out.String())
		}
		return setupEvents(t, &out)
	}
	events := run()
	// Issue 33, item 11: setup says which configuration it checks.
	if e := events[0]; e.Step != "setup" || !strings.Contains(e.Message, "no daemon answers at http://127.0.0.1:1: setting up this machine with this command's configuration") {
		t.Errorf("the first event: %+v", e)
	}
	first := finals(events)
	if first["docker"] != setup.Skipped || first["image"] == "" || first["sandbox"] != setup.Done || first["health"] != setup.Done {
		t.Fatalf("first run: %v", first)
	}
	second := finals(run())
	if second["docker"] != setup.Skipped || second["image"] != setup.Skipped || second["sandbox"] != setup.Skipped || second["health"] != setup.Done {
		t.Fatalf("second run: %v", second)
	}

	url, _ := startDaemon(t, cfg)
	env["SANDPIT_URL"] = url
	if e := run()[0]; !strings.Contains(e.Message, "a daemon answers at "+url+": it runs the checks, with its own configuration") {
		t.Errorf("the first event with a daemon: %+v", e)
	}
	resp, err := http.Post(url+"/v1/setup", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events = setupEvents(t, resp.Body)
	last := events[len(events)-1]
	if got := finals(events); resp.StatusCode != 200 || last.Step != "setup" || last.Status != setup.Done || got["health"] != setup.Done {
		t.Fatalf("POST /v1/setup: %d %v %+v", resp.StatusCode, got, last)
	}
}

func TestDoctor(t *testing.T) {
	cfg := testConfig(t)
	byName := func(checks []app.Check) map[string]app.Check {
		m := map[string]app.Check{}
		for _, c := range checks {
			m[c.Name] = c
		}
		return m
	}
	got := byName(app.Doctor(t.Context(), cfg, app.ConfigSource{Name: "test"}, "http://127.0.0.1:1"))
	for _, name := range []string{"configuration", "executor binary", "data directory", "docker engine", "base image"} {
		if !got[name].OK {
			t.Errorf("%s: %+v", name, got[name])
		}
	}
	if got["daemon"].OK || got["daemon"].Fix == "" {
		t.Errorf("no daemon: %+v", got["daemon"])
	}
	// The ledger's retention shows; on a disk with less free space than its byte budget, a note.
	if c := got["ledger"]; c.Required || !strings.Contains(c.Detail, "keeps 30 days, 100000 records, 2GiB") || !strings.Contains(c.Detail, "ledger_max_bytes") {
		t.Errorf("ledger: %+v", c)
	}
	noBytes := cfg
	noBytes.LedgerMaxBytes = 0
	if c := byName(app.Doctor(t.Context(), noBytes, app.ConfigSource{Name: "test"}, "http://127.0.0.1:1"))["ledger"]; c.OK || c.Required || !strings.Contains(c.Fix, "set ledger_max_bytes") {
		t.Errorf("ledger without a byte limit: %+v", c)
	}
	cfg.DockerHost = "tcp://127.0.0.1:9"
	got = byName(app.Doctor(t.Context(), cfg, app.ConfigSource{Name: "test"}, "http://127.0.0.1:1"))
	if c := got["docker engine"]; c.OK || !c.Required || !strings.Contains(c.Fix, "check the engine address tcp://127.0.0.1:9") {
		t.Errorf("no engine: %+v", c)
	}
}

// doctor reports the seccomp profile in force on the warm containers (sandpit's own, H35) and
// what bounds their socket buffers (cgroup v1: the box's TCP limit, H37).
func TestDoctorReportsTheKernelSurface(t *testing.T) {
	cfg := testConfig(t)
	eng, err := app.Open(t.Context(), cfg, testenv.Logger(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	allReady(t, eng)
	checks := map[string]app.Check{}
	for _, c := range app.Doctor(t.Context(), cfg, app.ConfigSource{Name: "test"}, "http://127.0.0.1:1") {
		checks[c.Name] = c
	}
	if c := checks["seccomp profile"]; !c.OK || !strings.Contains(c.Detail, "AF_VSOCK") || !strings.Contains(c.Detail, "io_uring_setup") ||
		!strings.Contains(c.Detail, fmt.Sprintf("in force on the %d warm containers", cfg.Slots)) {
		t.Errorf("seccomp profile: %+v", c)
	}
	c := checks["socket buffers"]
	if !c.OK || (!strings.Contains(c.Detail, "cgroup v2") && !strings.Contains(c.Detail, "cgroup v1 does not count socket buffers")) {
		t.Errorf("socket buffers: %+v", c)
	}
}
