package app_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// engineProxy forwards TCP connections to the Docker engine's socket; Down cuts every
// connection and refuses new ones, Up serves again on the same address.
type engineProxy struct {
	t      *testing.T
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
	socket string
}

func newEngineProxy(t *testing.T) *engineProxy {
	socket := "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); strings.HasPrefix(h, "unix://") {
		socket = strings.TrimPrefix(h, "unix://")
	}
	p := &engineProxy{t: t, socket: socket}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	ln.Close()
	t.Cleanup(p.Down)
	return p
}

func (p *engineProxy) Up() {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("proxy up: %v", err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e, err := net.Dial("unix", p.socket)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, e)
			p.mu.Unlock()
			go func() { io.Copy(e, c); e.(*net.UnixConn).CloseWrite() }()
			go func() { io.Copy(c, e); c.(*net.TCPConn).CloseWrite() }()
		}
	}()
}

func (p *engineProxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func waitReady(t *testing.T, url string, want int, within time.Duration) map[string]any {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var body map[string]any
		st := 0
		if resp, err := http.Get(url + "/readyz"); err == nil { // a starting daemon refuses connections
			json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			st = resp.StatusCode
		}
		if st == want {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz stayed %d (want %d) for %v: %v", st, want, within, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The Docker engine unreachable when the daemon starts, and gone while it runs: /readyz says
// so, requests get 503 at once with a clear message, and the daemon reconnects by itself when
// the engine returns; the run cut short is in the ledger as sandbox_error.
func TestEngineUnreachable(t *testing.T) {
	p := newEngineProxy(t)
	cfg := testConfig(t)
	cfg.DockerHost = "tcp://" + p.addr

	url, _ := startDaemon(t, cfg) // the engine is down: the daemon starts anyway
	body := waitReady(t, url, 503, 5*time.Second)
	if msg, _ := json.Marshal(body); !strings.Contains(string(msg), "cannot reach the Docker engine") {
		t.Fatalf("/readyz while the engine is down: %s", msg)
	}
	// Refused for the engine, not queued for a slot (whose wait would end in another answer).
	resp, b := post(t, url, `{"code": "print(1)"}`)
	if resp.StatusCode != 503 || !strings.Contains(string(b), "cannot reach the Docker engine") {
		t.Fatalf("a run while the engine is down: %d %s", resp.StatusCode, b)
	}
	var refused struct{ Executions []sandbox.Result }
	if call(t, "GET", url+"/v1/executions", "", &refused); len(refused.Executions) != 0 {
		t.Fatalf("a refused request left a record: %+v", refused.Executions)
	}

	p.Up()
	waitReady(t, url, 200, 5*time.Minute) // the first time may build the image
	if resp, b := post(t, url, `{"code": "print(1)"}`); resp.StatusCode != 200 || !strings.Contains(string(b), `"stdout":"1\n"`) {
		t.Fatalf("after the engine came: %d %s", resp.StatusCode, b)
	}

	// The engine goes away during a run.
	done := make(chan sandbox.Result, 1)
	go func() {
		_, b := post(t, url, `{"code": "import time; print('started', flush=True); time.sleep(20)"}`)
		var res sandbox.Result
		json.Unmarshal(b, &res)
		done <- res
	}()
	// Once the run holds its slot (a clock's 2 s was too short on a loaded machine: the engine
	// went before the run was taken, which was then refused 503, CI 7 December 2026), and its
	// program has had a moment to start.
	waitMetric(t, url, "\nsandpit_slots_busy 1\n", time.Minute)
	time.Sleep(time.Second)
	p.Down()
	res := <-done
	if res.Outcome != sandbox.OutcomeSandboxError || !strings.Contains(res.Reason, "connection to the Docker engine was lost") {
		t.Fatalf("the run cut short by the engine's loss: %+v", res)
	}
	waitReady(t, url, 503, 15*time.Second)
	p.Up()
	waitReady(t, url, 200, 5*time.Minute) // the first time may build the image
	if resp, b := post(t, url, `{"code": "print(2)"}`); resp.StatusCode != 200 || !strings.Contains(string(b), `"stdout":"2\n"`) {
		t.Fatalf("after the engine returned: %d %s", resp.StatusCode, b)
	}
}

// killableDaemon returns the URL of a daemon process that serves cfg, every key of it (see
// config.Environ: neither the process's defaults nor the test's environment change it), and
// start, which starts it and waits until it is ready: a process of its own, for tests that
// kill it with SIGKILL. A failed test logs the end of the daemons' output.
func killableDaemon(t *testing.T, cfg config.Config) (string, func() *exec.Cmd) {
	t.Helper()
	bin := buildSandpit(t)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	url := "http://" + addr
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SANDPIT_") {
			env = append(env, kv)
		}
	}
	env = append(env, cfg.Environ()...)
	logPath := filepath.Join(t.TempDir(), "daemon.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("the daemons' output (its end):\n%s", b[max(0, len(b)-16<<10):])
		}
	})
	return url, func() *exec.Cmd {
		cmd := exec.Command(bin, "serve", "--listen", addr)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, logFile, logFile
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		waitReady(t, url, 200, 5*time.Minute)
		return cmd
	}
}

// buildSandpit builds the sandpit command into a temporary directory.
func buildSandpit(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sandpit")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "github.com/sandpit-dev/sandpit/cmd/sandpit")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building sandpit: %v\n%s", err, out)
	}
	return bin
}

// The daemon killed with SIGKILL during a run and started again: the run's record is finalised
// as sandbox_error (interrupted), the warm container is adopted (one, no orphans), and the
// job's fires go on without a lost or doubled one.
func TestDaemonKilled(t *testing.T) {
	cfg := testConfig(t)
	url, start := killableDaemon(t, cfg)
	daemon := start()
	if st := call(t, "POST", url+"/v1/agents/k/code", `{"name": "tick", "code": "print('tick')"}`, nil); st != 201 {
		t.Fatalf("save: %d", st)
	}
	var job struct{ ID string }
	if st := call(t, "POST", url+"/v1/agents/k/jobs", `{"code_name": "tick", "schedule": "@every 10s"}`, &job); st != 201 {
		t.Fatalf("job: %d", st)
	}
	go http.Post(url+"/v1/executions", "application/json", strings.NewReader(`{"code": "import time; time.sleep(60)", "agent": "k"}`))
	time.Sleep(3 * time.Second)
	if err := daemon.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	daemon.Wait()

	start()
	var list struct{ Executions []sandbox.Result }
	call(t, "GET", url+"/v1/executions?agent=k&source=api", "", &list)
	if len(list.Executions) != 1 || list.Executions[0].Outcome != sandbox.OutcomeSandboxError || !strings.Contains(list.Executions[0].Reason, "interrupted") {
		t.Fatalf("the killed daemon's run in the ledger: %+v", list.Executions)
	}
	waitContainers(t, cfg.DataDir, cfg.Slots)
	if ids := testenv.Containers(t, cfg.DataDir); len(ids) != cfg.Slots {
		t.Fatalf("%d containers after the restart, want the %d adopted", len(ids), cfg.Slots)
	}
	var fires []apitype.Fire
	for deadline := time.Now().Add(45 * time.Second); len(fires) < 3 && time.Now().Before(deadline); time.Sleep(time.Second) {
		fires = history(t, url, "k", job.ID)
	}
	seen := map[time.Time]bool{}
	for i, f := range fires {
		if seen[f.ScheduledAt] {
			t.Fatalf("fire at %v doubled: %+v", f.ScheduledAt, fires)
		}
		seen[f.ScheduledAt] = true
		if i > 0 && f.Status != "missed" && fires[i-1].Status != "missed" && f.ScheduledAt.Sub(fires[i-1].ScheduledAt) != 10*time.Second {
			t.Fatalf("a fire was lost between %v and %v: %+v", fires[i-1].ScheduledAt, f.ScheduledAt, fires)
		}
	}
	if len(fires) < 3 {
		t.Fatalf("the job did not go on firing after the restart: %+v", fires)
	}
}

// The data directory's disk full: requests fail with a clear error and run nothing, nothing
// recorded is lost, and the daemon recovers when space returns. (A read-only remount of the
// directory is refused by the kernel while the database is open, so it is not tested here.)
func TestDataDirDiskFull(t *testing.T) {
	cfg := testConfig(t)
	dir := cfg.DataDir
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs as the data directory (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	url, _ := startDaemon(t, cfg)
	resp, b := post(t, url, `{"code": "print('before')"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("before: %d %s", resp.StatusCode, b)
	}
	var before sandbox.Result
	json.Unmarshal(b, &before)

	filler := filepath.Join(dir, "filler")
	exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=64k").Run() // until the disk is full
	resp, b = post(t, url, `{"code": "print('full')"}`)
	if resp.StatusCode != 503 || !strings.Contains(string(b), "the ledger could not record the execution") {
		t.Fatalf("disk full: %d %s", resp.StatusCode, b)
	}
	os.Remove(filler)
	if resp, b := post(t, url, `{"code": "print('after')"}`); resp.StatusCode != 200 {
		t.Fatalf("after space returned: %d %s", resp.StatusCode, b)
	}

	var rec apitype.Execution
	if st := call(t, "GET", url+"/v1/executions/"+before.ID, "", &rec); st != 200 || rec.Stdout != "before\n" {
		t.Fatalf("the record from before: %d %+v", st, rec)
	}
}
