package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// startDaemon runs app.Serve until stop is called (or the test ends) and returns its URL.
// What the tests need of the machine (the engine, the base image) is checked before, by
// testConfig; a daemon whose start makes no progress (no line of output, such as the image
// build's) for daemonStall fails the test with its last lines rather than waiting on.
func startDaemon(t testing.TB, cfg config.Config) (url string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	progress := &tail{}
	go func() {
		done <- app.Serve(ctx, cfg, testVersion, testenv.Logger(), progress, func(a string) { addr <- a })
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}
	t.Cleanup(stop)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case a := <-addr:
			if host, port, _ := net.SplitHostPort(a); net.ParseIP(host).IsUnspecified() {
				a = net.JoinHostPort("127.0.0.1", port) // listening on every address: reach it on loopback
			}
			return "http://" + a, stop
		case err := <-done:
			t.Fatalf("serve: %v", err)
			return "", stop
		case <-tick.C:
			if quiet := progress.quiet(); quiet > daemonStall {
				t.Fatalf("the daemon has not listened, nor said anything for %v; its last progress:\n%s", quiet.Round(time.Second), progress.String())
			}
		}
	}
}

// testVersion is the build version the test daemons are given.
const testVersion = "1.2.3-test"

// daemonStall is how long a test daemon's start may go without progress: an image build step
// on a loaded machine, or starting the first container.
const daemonStall = 3 * time.Minute

// tail keeps the last 2 KiB written to it, and when it was last written.
type tail struct {
	mu    sync.Mutex
	buf   []byte
	since time.Time
}

func (w *tail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if len(w.buf) > 2048 {
		w.buf = w.buf[len(w.buf)-2048:]
	}
	w.since = time.Now()
	return len(p), nil
}

// quiet returns how long ago the last write was (or the first call, before any).
func (w *tail) quiet() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.since.IsZero() {
		w.since = time.Now()
	}
	return time.Since(w.since)
}

func (w *tail) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}

func call(t *testing.T, method, url, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, b)
		}
	}
	return resp.StatusCode
}

func history(t *testing.T, url, agent, job string) []apitype.Fire {
	t.Helper()
	var h struct{ Fires []apitype.Fire }
	if st := call(t, "GET", url+"/v1/agents/"+agent+"/jobs/"+job+"/history?limit=500", "", &h); st != 200 {
		t.Fatalf("history: %d", st)
	}
	for i, j := 0, len(h.Fires)-1; i < j; i, j = i+1, j-1 {
		h.Fires[i], h.Fires[j] = h.Fires[j], h.Fires[i]
	}
	return h.Fires
}

// Saved code and jobs against the real engine: save, update, run with validated input and
// output; a job @every 10s fires on schedule into the ledger across a daemon restart with no
// fire lost or doubled; a job whose run outlasts its interval skips instead of piling up (H23).
func TestSavedCodeAndJobsEndToEnd(t *testing.T) {
	cfg := testConfig(t)
	url, stop := startDaemon(t, cfg)
	base := url + "/v1/agents/e2e"

	save := `{"name": "nap", "code": "import time\ntime.sleep(INPUT['sleep'])\nOUTPUT = {'slept': INPUT['sleep']}",
		"input_schema": {"type": "object", "required": ["sleep"], "properties": {"sleep": {"type": "number", "minimum": 0}}},
		"output_schema": {"type": "object", "required": ["slept"], "properties": {"slept": {"type": "integer"}}}}`
	if st := call(t, "POST", base+"/code", save, nil); st != 201 {
		t.Fatalf("save: %d", st)
	}
	var code apitype.Code
	if st := call(t, "PATCH", base+"/code/nap", `{"description": "sleeps", "expected_version": 1}`, &code); st != 200 || code.Version != 2 {
		t.Fatalf("update: %d %+v", st, code)
	}
	var res struct {
		ID, Outcome, Reason, CodeName string
		CodeVersion                   int `json:"code_version"`
		Output                        json.RawMessage
	}
	if st := call(t, "POST", base+"/code/nap/run", `{"input": {"sleep": 0}}`, &res); st != 200 || res.Outcome != "ok" || string(res.Output) != `{"slept":0}` || res.CodeVersion != 2 {
		t.Fatalf("run: %d %+v", st, res)
	}
	var bad struct{ Error struct{ Code, Field string } }
	if st := call(t, "POST", base+"/code/nap/run", `{"input": {"sleep": -1}}`, &bad); st != 400 || bad.Error.Code != "invalid_input" {
		t.Fatalf("invalid input: %d %+v", st, bad)
	}
	// 0.0 passes the input schema (a number) but OUTPUT's 0.0 is no integer... it is, in JSON
	// Schema; 0.5 is not.
	if st := call(t, "POST", base+"/code/nap/run", `{"input": {"sleep": 0.5}}`, &res); st != 200 || res.Outcome != "output_invalid" || !strings.Contains(res.Reason, "/slept") {
		t.Fatalf("invalid output: %d %+v", st, res)
	}

	var steady, slow struct {
		ID        string
		NextFires []time.Time `json:"next_fires"`
	}
	if st := call(t, "POST", base+"/jobs", `{"code_name": "nap", "schedule": "@every 10s", "input": {"sleep": 0}}`, &steady); st != 201 || len(steady.NextFires) != 5 {
		t.Fatalf("create steady job: %d %+v", st, steady)
	}
	if st := call(t, "POST", base+"/jobs", `{"code_name": "nap", "schedule": "@every 10s", "input": {"sleep": 25}, "timeout_ms": 60000}`, &slow); st != 201 {
		t.Fatalf("create slow job: %d", st)
	}
	time.Sleep(time.Until(steady.NextFires[2].Add(2 * time.Second))) // three fires
	stop()                                                           // interrupts the slow job's run after the 10 s grace

	url, _ = startDaemon(t, cfg)
	time.Sleep(25 * time.Second)

	fires := history(t, url, "e2e", steady.ID)
	if len(fires) < 5 {
		t.Fatalf("steady job: %d fires, want at least 5: %+v", len(fires), fires)
	}
	for i, f := range fires {
		if f.Status != store.FireStarted {
			t.Errorf("steady fire %d: %+v", i, f)
		}
		if i > 0 && f.ScheduledAt.Sub(fires[i-1].ScheduledAt) != 10*time.Second {
			t.Errorf("steady fires %d and %d are %v apart (lost or doubled)", i-1, i, f.ScheduledAt.Sub(fires[i-1].ScheduledAt))
		}
		var rec apitype.Execution
		if st := call(t, "GET", url+"/v1/executions/"+f.ExecutionID, "", &rec); st != 200 || rec.Source != "job" || rec.JobID != steady.ID ||
			rec.CodeName != "nap" || (rec.Status == store.StatusFinished && rec.Outcome != "ok") {
			t.Errorf("steady fire %d's execution: %d %+v", i, st, rec)
		}
	}

	slowFires := history(t, url, "e2e", slow.ID)
	var runs []apitype.Execution
	skipped := 0
	for _, f := range slowFires {
		switch f.Status {
		case store.FireSkipped:
			skipped++
		case store.FireStarted:
			var rec apitype.Execution
			call(t, "GET", url+"/v1/executions/"+f.ExecutionID, "", &rec)
			runs = append(runs, rec)
		}
	}
	if skipped == 0 || len(runs) == 0 {
		t.Fatalf("slow job: %d runs, %d skipped; want both: %+v", len(runs), skipped, slowFires)
	}
	for i := 1; i < len(runs); i++ {
		prev := runs[i-1]
		if prev.EndedAt != nil && runs[i].StartedAt.Before(*prev.EndedAt) {
			t.Errorf("slow job's runs overlap: %s ended %v, %s started %v", prev.ID, prev.EndedAt, runs[i].ID, runs[i].StartedAt)
		}
	}
}
