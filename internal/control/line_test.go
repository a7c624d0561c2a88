package control_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/bootstrap"
	"github.com/sandpit-dev/sandpit/internal/control"
	"github.com/sandpit-dev/sandpit/internal/executor"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/sandbox/sandboxtest"
)

// pipeRuntime starts the executor in-process, connected to a line over net.Pipe, running
// the host's /usr/bin/python3 as uids from uidBase up, every run cold. It needs root (to
// switch uids).
func pipeRuntime(t *testing.T, slots int) (*control.Line, func() error) {
	t.Helper()
	return pipeRuntimeWith(t, slots, func(cfg *executor.Config) { cfg.ForkServer = "" })
}

// uidBase reserves a range of 64 host uids from 61000 up for the test's slots, for as long as
// the test runs: the executor kills every process of a slot's uid, so two test processes (go
// test runs packages in parallel, and people run several) must never share one. The range is
// held with a lock on a file in the system's temporary directory.
func uidBase(t *testing.T) int {
	t.Helper()
	for base := 61000; base < 61000+64*200; base += 64 {
		f, err := os.OpenFile(filepath.Join(os.TempDir(), fmt.Sprintf("sandpit-test-uids-%d.lock", base)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			t.Cleanup(func() { f.Close() })
			return base
		}
		f.Close()
	}
	t.Fatal("every test uid range is in use")
	return 0
}

// writeExecutable writes content to path as an executable (mode 0755) through a child process
// (coreutils' install), so that this process never holds the file open for writing: a fork by
// any goroutine of the test binary would inherit that descriptor until its exec, and an exec of
// the file meanwhile fails with "text file busy" (ETXTBSY; golang.org/issue/22315). Seen on CI:
// the executor's copy was written while its runtime's fork server was starting.
func writeExecutable(t *testing.T, path string, content io.Reader) {
	t.Helper()
	cmd := exec.Command("install", "-m", "0755", "/dev/stdin", path)
	cmd.Stdin = content
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("writing the executable %s: %v: %s", path, err, out)
	}
}

// pipeRuntimeWith is pipeRuntime with the executor's configuration changed by mutate; the
// fork server is on (preloading the stdlib's decimal and email.message) unless mutate turns
// it off.
func pipeRuntimeWith(t *testing.T, slots int, mutate func(*executor.Config)) (*control.Line, func() error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the executor needs root to run code as the slot uids; run the tests as root")
	}
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skip("no " + python + " on this machine")
	}
	root := t.TempDir()
	if err := os.Chmod(root, 0o711); err != nil {
		t.Fatal(err)
	}
	// The slot uids must reach their run directories: open the test's own directory (only it).
	if err := os.Chmod(filepath.Dir(root), 0o711); err != nil {
		t.Fatal(err)
	}
	boot, forkServer := filepath.Join(root, "bootstrap.py"), filepath.Join(root, "forkserver.py")
	if err := os.WriteFile(boot, bootstrap.Source, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(forkServer, bootstrap.ForkServer, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := executor.DefaultConfig()
	cfg.Slots, cfg.UIDBase, cfg.Python, cfg.Bootstrap = slots, uidBase(t), python, boot
	cfg.ForkServer, cfg.Preload = forkServer, []string{"decimal", "email.message"}
	cfg.RunRoot = filepath.Join(root, "runs")
	// The runs write to /tmp as in a box; under CI the test's TMPDIR is elsewhere, and both
	// are shared with the host: the executor removes what the slots' uids left in each.
	cfg.TmpDirs = []string{"/tmp"}
	if d := os.TempDir(); d != "/tmp" {
		cfg.TmpDirs = append(cfg.TmpDirs, d)
	}
	mutate(&cfg)

	daemonEnd, executorEnd := net.Pipe()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	served := make(chan error, 1)
	go func() {
		served <- executor.Serve(context.Background(), protocol.NewConn(executorEnd, executorEnd), cfg, log)
		executorEnd.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := control.Start(ctx, daemonEnd, daemonEnd, daemonEnd, log, control.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wait := sync.OnceValue(func() error {
		select {
		case err := <-served:
			return err
		case <-time.After(15 * time.Second):
			t.Error("executor did not stop after the line ended")
			return nil
		}
	})
	t.Cleanup(func() { c.Close(); wait() })
	return c, wait
}

func TestConformancePipe(t *testing.T) {
	hasModule := func(name string) bool {
		return exec.Command("/usr/bin/python3", "-c", "import "+name).Run() == nil
	}
	t.Run("cold", func(t *testing.T) {
		t.Parallel() // each executor has uids of its own (uidBase): the two mostly wait
		c, _ := pipeRuntime(t, 4)
		sandboxtest.Run(t, sandboxtest.Harness{Runtime: c, Slots: 4, HasModule: hasModule, Start: "cold", Close: c.Close})
	})
	t.Run("fork server", func(t *testing.T) {
		t.Parallel()
		c, _ := pipeRuntimeWith(t, 4, func(*executor.Config) {})
		sandboxtest.WaitForStart(t, c, "fork", 30*time.Second)
		sandboxtest.Run(t, sandboxtest.Harness{Runtime: c, Slots: 4, HasModule: hasModule, Start: "fork", Close: c.Close})
	})
}

// TestRunsLoadTheCompiledBootstrap: the executor compiles bootstrap.py once, into a file of
// root's in its run root that no run can change, and both ways a run starts load that code: a
// fresh interpreter runs it as its script, the fork server imports it.
func TestRunsLoadTheCompiledBootstrap(t *testing.T) {
	for _, start := range []sandbox.Start{sandbox.StartCold, sandbox.StartFork} {
		t.Run(string(start), func(t *testing.T) {
			var runRoot string
			c, _ := pipeRuntimeWith(t, 1, func(cfg *executor.Config) {
				if start == sandbox.StartCold {
					cfg.ForkServer = ""
				}
				runRoot = cfg.RunRoot
			})
			compiled := filepath.Join(runRoot, "bootstrap.pyc")
			fi, err := os.Stat(compiled)
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o644 || st.Uid != 0 {
				t.Errorf("%s: mode %v, owner %d, want 0644 and root's", compiled, fi.Mode().Perm(), st.Uid)
			}
			sandboxtest.WaitForStart(t, c, start, 30*time.Second)
			code := fmt.Sprintf(`try:
    open(%q, "ab")
    print("writable")
except PermissionError:
    print("read-only")
print(%q.encode() in open("/proc/self/cmdline", "rb").read().split(b"\0"))
import sys
f = sys._getframe()
while f and not f.f_code.co_filename.endswith("/bootstrap.py"):
    f = f.f_back
print(f.f_globals["__file__"] if f else "-")
`, compiled, compiled)
			res := sandboxtest.Exec(t, c, 0, sandboxtest.Spec(code, 30*time.Second), nil)
			// The command line: a fresh interpreter's script, or the fork server's argument. The
			// bootstrap's frames keep its source's name (tracebacks hide them by it) and say
			// where their code came from.
			want := "read-only\nTrue\n" + compiled + "\n"
			if res.Outcome != sandbox.OutcomeOK || res.Stdout != want {
				t.Errorf("got %s %q (stderr %q), want stdout %q", res.Outcome, res.Stdout, res.Stderr, want)
			}
		})
	}
}

func TestLineEndKillsRunsAndFailsWaiters(t *testing.T) {
	c, wait := pipeRuntime(t, 2)
	errc := make(chan error, 1)
	var res sandbox.Result
	go func() {
		var err error
		res, err = c.Run(context.Background(), 0, sandboxtest.Spec("print('before', flush=True)\nimport time; time.sleep(60)", 60*time.Second), nil)
		errc <- err
	}()
	time.Sleep(500 * time.Millisecond)
	c.Close()
	err := <-errc
	if err == nil {
		t.Fatalf("run survived the line's end: %+v", res)
	}
	// The executor exits (wait returns) well before the run's 60 s sleep would end.
	if werr := wait(); werr != nil {
		t.Fatalf("executor: %v", werr)
	}
	if _, err := c.Run(context.Background(), 0, sandboxtest.Spec("print(1)", time.Second), nil); err == nil {
		t.Fatal("run on an ended line did not fail")
	}
}

func TestExecutorRefusesBadSlots(t *testing.T) {
	c, _ := pipeRuntime(t, 2)
	ctx := context.Background()
	if _, err := c.Run(ctx, 7, sandboxtest.Spec("print(1)", time.Second), nil); err == nil {
		t.Fatal("slot 7 of 2 was accepted")
	}
	if c.Hello().Slots != 2 || c.Hello().Python == "" {
		t.Fatalf("hello %+v", c.Hello())
	}
}

// An executor that greets and then stops reading (stopped, frozen) ends the line.
func TestHungExecutorEndsTheLine(t *testing.T) {
	c, _ := greetedLine(t, control.Options{HeartbeatInterval: 50 * time.Millisecond, HeartbeatTimeout: 300 * time.Millisecond})
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a silent executor kept the line alive")
	}
	if err := c.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "not answered") {
		t.Fatalf("Ready: %v", err)
	}
}

// Ping waits for the executor's answer to its own ping: a frozen executor (it reads, but
// answers nothing) reads as Ready for two heartbeats, and Ping says so within its context
// instead; a live one answers it.
func TestPingAsksNow(t *testing.T) {
	c, end := greetedLine(t, control.Options{HeartbeatInterval: time.Hour, HeartbeatTimeout: time.Hour})
	ex := protocol.NewConn(end, end)
	var answer sync.Mutex
	answer.Lock() // frozen until unlocked
	go func() {
		for {
			m, err := ex.Receive()
			if err != nil {
				return
			}
			answer.Lock()
			answer.Unlock()
			if m.Kind == protocol.KindPing {
				_ = ex.Send(&protocol.Message{Kind: protocol.KindPong, ID: m.ID})
			}
		}
	}()
	if err := c.Ready(context.Background()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err := c.Ping(ctx)
	cancel()
	if !errors.Is(err, sandbox.ErrNotReady) || !strings.Contains(err.Error(), "did not answer a ping") {
		t.Fatalf("Ping of a frozen executor: %v", err)
	}
	answer.Unlock()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("Ping of a live executor: %v", err)
	}
	c.Close()
	if err := c.Ping(ctx); !errors.Is(err, sandbox.ErrNotReady) {
		t.Fatalf("Ping of a closed line: %v", err)
	}
}

// A suspended line (its executor frozen on purpose: a paused session) outlives many heartbeat
// timeouts of silence; once resumed, silence ends it again.
func TestSuspendedLineOutlivesSilence(t *testing.T) {
	c, _ := greetedLine(t, control.Options{HeartbeatInterval: 20 * time.Millisecond, HeartbeatTimeout: 100 * time.Millisecond})
	c.Suspend()
	select {
	case <-c.Done():
		t.Fatalf("a suspended line ended: %v", c.Err())
	case <-time.After(time.Second):
	}
	c.Resume()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a resumed, silent executor kept the line alive")
	}
}

// An executor whose frame is slow to arrive keeps its line while the frame's bytes come, even
// for longer than the heartbeat's timeout (a session's 8 MiB output file over a loaded
// Kubernetes exec stream, CI 2026-12-02); once its bytes stop, silence ends the line again.
// The gaps between the bytes are a twenty-fifth of the timeout: a loaded machine (CI
// 2026-12-05, 88 % busy) stalled a 150 ms timeout's test past its timeout between two writes.
func TestSlowFrameKeepsTheLine(t *testing.T) {
	c, executorEnd := greetedLine(t, control.Options{HeartbeatInterval: 100 * time.Millisecond, HeartbeatTimeout: time.Second})
	go io.Copy(io.Discard, executorEnd) // the pings, unanswered
	var frame bytes.Buffer
	if err := protocol.NewConn(nil, &frame).Send(&protocol.Message{Kind: protocol.KindStdout, ID: "r",
		Data: strings.Repeat("x", 64<<10)}); err != nil {
		t.Fatal(err)
	}
	// 64 KiB, 1 KiB every 40 ms: about 2.6 s, two and a half heartbeat timeouts.
	for b := frame.Bytes(); len(b) > 0; b = b[min(len(b), 1<<10):] {
		if _, err := executorEnd.Write(b[:min(len(b), 1<<10)]); err != nil {
			t.Fatalf("the line ended during the frame: %v (%v)", err, c.Err())
		}
		time.Sleep(40 * time.Millisecond)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("the line ended while the frame's bytes came: %v", err)
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a silent executor kept the line alive after its frame")
	}
}

// A live executor answers pings during long runs: the line survives many timeouts' worth.
func TestLiveExecutorKeepsTheLine(t *testing.T) {
	c, _ := pipeRuntime(t, 1) // default heartbeat: every 2 s
	res := sandboxtest.Exec(t, c, 0, sandboxtest.Spec("import time; time.sleep(5); print('ok')", 10*time.Second), nil)
	if res.Outcome != sandbox.OutcomeOK || c.Ready(context.Background()) != nil {
		t.Fatalf("%+v %v", res, c.Ready(context.Background()))
	}
}

// forkServerPID returns the pid of the fork server that forked a run in slot 0 (its parent),
// and how the run started.
func forkServerPID(t *testing.T, rt sandbox.Runtime) (int, string) {
	t.Helper()
	res := sandboxtest.Exec(t, rt, 0, sandboxtest.Spec("import os; print(os.getppid())", 10*time.Second), nil)
	if res.Outcome != sandbox.OutcomeOK {
		t.Fatalf("%s: %s %s", res.Outcome, res.Reason, res.Stderr)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
	if err != nil {
		t.Fatal(err)
	}
	return pid, string(res.Start)
}

func TestForkServerIsReplacedAfterMaxRuns(t *testing.T) {
	c, _ := pipeRuntimeWith(t, 2, func(cfg *executor.Config) { cfg.ForkServerMaxRuns = 3 })
	sandboxtest.WaitForStart(t, c, "fork", 30*time.Second)
	servers := map[int]bool{}
	for deadline := time.Now().Add(30 * time.Second); len(servers) < 2; {
		pid, start := forkServerPID(t, c)
		if start == "fork" {
			servers[pid] = true
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s of runs, forked only by %v", servers)
		}
	}
}

func TestForkServerDeathFailsItsRunsAndIsReplaced(t *testing.T) {
	c, _ := pipeRuntimeWith(t, 2, func(*executor.Config) {})
	sandboxtest.WaitForStart(t, c, "fork", 30*time.Second)
	pid, _ := forkServerPID(t, c)

	// The fork server is killed once the run has printed, not after a fixed wait: under load
	// (CI 2026-12-05) a run had not printed 500 ms after it was sent.
	done, started := make(chan sandbox.Result, 1), make(chan struct{})
	var once sync.Once
	go func() {
		done <- sandboxtest.Exec(t, c, 1, sandboxtest.Spec("print('started', flush=True)\nimport time; time.sleep(30)", 60*time.Second),
			func(e sandbox.Event) {
				if e.Stream == sandbox.StreamStdout {
					once.Do(func() { close(started) })
				}
			})
	}()
	select {
	case <-started:
	case res := <-done:
		t.Fatalf("the run ended before its fork server was killed: %+v", res)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		if res.Outcome != sandbox.OutcomeSandboxError || !strings.Contains(res.Reason, "fork server died") || res.Stdout != "started\n" {
			t.Fatalf("run whose fork server died: %s (%s) %q", res.Outcome, res.Reason, res.Stdout)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the run outlived its fork server by 10 s")
	}
	// Runs go on (cold meanwhile), then fork from a new server.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		next, start := forkServerPID(t, c)
		if start == "fork" && next != pid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no new fork server after 30 s")
		}
	}
}

// A run whose installed dependencies hold a module the fork server looked for in vain while
// preloading (as pandas probes for numexpr) starts cold, so that it is found; others fork.
func TestForkServerLeavesProbedDependenciesCold(t *testing.T) {
	c, _ := pipeRuntimeWith(t, 2, func(cfg *executor.Config) {
		cfg.Preload = []string{"decimal", "sandpit_probe_missing"}
	})
	sandboxtest.WaitForStart(t, c, "fork", 30*time.Second)
	deps := t.TempDir()
	if err := os.Chmod(deps, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sandpit_probe_missing.py", "tinypkg.py"} {
		if err := os.WriteFile(filepath.Join(deps, name), []byte("VALUE = 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		module string
		start  sandbox.Start
	}{{"tinypkg", "fork"}, {"sandpit_probe_missing", "cold"}} {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(filepath.Join(deps, tc.module+".py"), filepath.Join(dir, tc.module+".py")); err != nil {
			t.Fatal(err)
		}
		spec := sandboxtest.Spec("import "+tc.module+"; print("+tc.module+".VALUE)", 10*time.Second)
		spec.Paths = []string{dir}
		res := sandboxtest.Exec(t, c, 0, spec, nil)
		if res.Outcome != sandbox.OutcomeOK || res.Stdout != "1\n" || res.Start != tc.start {
			t.Errorf("%s: %s (%s) %q started %q, want ok and %s", tc.module, res.Outcome, res.Reason, res.Stdout+res.Stderr, res.Start, tc.start)
		}
	}
}

// liveChildren counts this process's children, zombies aside, whose command line contains s.
func liveChildren(s string) int {
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		stat, statErr := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil || statErr != nil || !strings.Contains(string(cmdline), s) {
			continue
		}
		// stat: pid (comm) state ppid ...
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) > 1 && f[0] != "Z" && f[1] == strconv.Itoa(os.Getpid()) {
			n++
		}
	}
	return n
}

// Replacing the fork server after every run keeps at most two servers alive (one serving, one
// waiting for its children), however many runs there are.
func TestForkServerReplacementKeepsTwoServersAtMost(t *testing.T) {
	var script string
	c, _ := pipeRuntimeWith(t, 2, func(cfg *executor.Config) {
		cfg.ForkServerMaxRuns = 1
		script = cfg.ForkServer
	})
	sandboxtest.WaitForStart(t, c, "fork", 30*time.Second)
	servers := map[int]bool{}
	most := 0
	for range 20 {
		var wg sync.WaitGroup
		for slot := range 2 {
			wg.Go(func() {
				res := sandboxtest.Exec(t, c, slot, sandboxtest.Spec("import os, time; time.sleep(0.05); print(os.getppid())", 10*time.Second), nil)
				if res.Outcome != sandbox.OutcomeOK {
					t.Errorf("%s: %s %s", res.Outcome, res.Reason, res.Stderr)
				}
			})
		}
		most = max(most, liveChildren(script))
		wg.Wait()
		if pid, start := forkServerPID(t, c); start == "fork" {
			servers[pid] = true
		}
	}
	if most > 2 {
		t.Errorf("%d fork servers alive at once, want at most 2", most)
	}
	if len(servers) < 3 {
		t.Errorf("runs were forked by %d servers in 20 rounds with max runs 1, want replacements", len(servers))
	}
}

// After a run the executor forks the slot's next program ahead: the next run's process was
// made before its request came (its age, from its start time in /proc, covers a pause
// between runs), and it is still fresh: its own session, nothing of the last run.
func TestSlotsNextProgramIsForkedAhead(t *testing.T) {
	c, _ := pipeRuntimeWith(t, 1, func(*executor.Config) {})
	sandboxtest.WaitForStart(t, c, "fork", 30*time.Second)
	const age = `import os, time
with open("/proc/self/stat") as f:
    started = int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
with open("/proc/uptime") as f:
    now = float(f.read().split()[0])
print(round(now - started, 2), os.getsid(0) == os.getpid(), "leftover" in globals())
leftover = 1`
	exec := func() (float64, string) {
		t.Helper()
		res := sandboxtest.Exec(t, c, 0, sandboxtest.Spec(age, 10*time.Second), nil)
		if res.Outcome != sandbox.OutcomeOK || res.Start != "fork" {
			t.Fatalf("%s (start %q): %s %s", res.Outcome, res.Start, res.Reason, res.Stderr)
		}
		secs, rest, _ := strings.Cut(strings.TrimSpace(res.Stdout), " ")
		f, err := strconv.ParseFloat(secs, 64)
		if err != nil {
			t.Fatalf("output %q: %v", res.Stdout, err)
		}
		return f, rest
	}
	exec() // its start leaves a child forked for the next
	time.Sleep(1500 * time.Millisecond)
	got, rest := exec()
	if got < 0.5 {
		t.Errorf("the run's process was %.2f s old when it ran, after a pause of 1.5 s: it was forked on request, not ahead", got)
	}
	if rest != "True False" {
		t.Errorf("the program forked ahead: session leader, no state of the last run = %q, want True False", rest)
	}
}

// A cold run whose code is not valid Python, and holds none of IPython's syntax, fails with
// its SyntaxError without importing IPython (which would have made it valid, with a magic):
// that import cost a cold run under gVisor seconds, and a syntax error passed its 10 s
// timeout on a loaded machine (CI, three times). Seen through the interpreter's -X importtime.
func TestColdSyntaxErrorSkipsIPython(t *testing.T) {
	if exec.Command("python3", "-c", "import IPython").Run() != nil {
		t.Skip("python3 has no IPython here: nothing to skip")
	}
	wrapper := filepath.Join(t.TempDir(), "python-importtime")
	writeExecutable(t, wrapper, strings.NewReader("#!/bin/sh\nexec /usr/bin/python3 -X importtime \"$@\"\n"))
	if err := os.Chmod(filepath.Dir(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	c, _ := pipeRuntimeWith(t, 1, func(cfg *executor.Config) { cfg.Python, cfg.ForkServer = wrapper, "" })
	for _, tc := range []struct {
		code    string
		ipython bool
	}{
		{"x = 1\nif True print(2)\n", false},
		{"x = 1\n%time y = 2\nprint(x + y)", true}, // IPython's syntax: the transform is tried
	} {
		res := sandboxtest.Exec(t, c, 0, sandboxtest.Spec(tc.code, 30*time.Second), nil)
		imported := regexp.MustCompile(`(?m)\|\s+IPython$`).MatchString(res.Stderr)
		if imported != tc.ipython || !strings.Contains(res.Stderr, "import time:") {
			t.Errorf("%q: IPython imported %v, want %v (%s, stderr %.300q)", tc.code, imported, tc.ipython, res.Outcome, res.Stderr)
		}
		if !tc.ipython && (res.Outcome != sandbox.OutcomeError || !strings.Contains(res.Stderr, "SyntaxError")) {
			t.Errorf("%q: %s, stderr %.300q; want its SyntaxError", tc.code, res.Outcome, res.Stderr)
		}
	}
}

// A fork server whose interpreter has a second thread after the preload refuses to serve
// (forking would copy that thread's locks in whatever state they are in): runs start cold.
func TestForkServerWithThreadsIsNotUsed(t *testing.T) {
	wrapper := filepath.Join(t.TempDir(), "python-with-a-thread")
	// Called as WRAPPER -u -I -X utf8 SCRIPT ARGS...: starts a thread, then runs SCRIPT (a
	// source file, or compiled code as the executor makes of the bootstrap).
	script := `#!/bin/sh
[ "$1" = -u ] || exec /usr/bin/python3 "$@"
shift 4
exec /usr/bin/python3 -u -I -X utf8 -c '
import runpy, sys, threading, time
threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
' "$@"
`
	writeExecutable(t, wrapper, strings.NewReader(script))
	if err := os.Chmod(filepath.Dir(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	var forkServer string
	c, _ := pipeRuntimeWith(t, 2, func(cfg *executor.Config) { cfg.Python, forkServer = wrapper, cfg.ForkServer })
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		res := sandboxtest.Exec(t, c, i%2, sandboxtest.Spec("print(1)", 10*time.Second), nil)
		if res.Outcome != sandbox.OutcomeOK || res.Start != "cold" {
			t.Fatalf("run %d: %s (%s) started %q, want ok and cold", i, res.Outcome, res.Reason+res.Stderr, res.Start)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Not merely slow to start: it refused and ended.
	if n := liveChildren(forkServer); n != 0 {
		t.Fatalf("%d fork servers still alive", n)
	}
}

// A run whose home cannot be seeded (here: the run directories' filesystem is too small for
// the matplotlib cache) does not start: it ends sandbox_error naming the directory, and the
// slot serves the next run once the cache fits again.
func TestUnseedableHomeStopsTheRun(t *testing.T) {
	for _, start := range []string{"cold", "fork"} {
		t.Run(start, func(t *testing.T) {
			cache := t.TempDir()
			if err := os.WriteFile(filepath.Join(cache, "fontlist-v330.json"), bytes.Repeat([]byte("x"), 1<<20), 0o644); err != nil {
				t.Fatal(err)
			}
			c, _ := pipeRuntimeWith(t, 1, func(cfg *executor.Config) {
				if start == "cold" {
					cfg.ForkServer = ""
				}
				cfg.MatplotlibCache = cache
				if err := os.MkdirAll(cfg.RunRoot, 0o711); err != nil {
					t.Fatal(err)
				}
				if err := syscall.Mount("tmpfs", cfg.RunRoot, "tmpfs", 0, "size=256k,mode=0711"); err != nil {
					t.Skipf("cannot mount a small tmpfs here: %v", err)
				}
				t.Cleanup(func() { _ = syscall.Unmount(cfg.RunRoot, syscall.MNT_DETACH) })
			})
			res := sandboxtest.Exec(t, c, 0, sandboxtest.Spec("print('ran')", 10*time.Second), nil)
			if res.Outcome != sandbox.OutcomeSandboxError || res.Stdout != "" || !strings.Contains(res.Reason, "matplotlib directory") {
				t.Fatalf("outcome %q reason %q stdout %q: want sandbox_error naming the matplotlib directory, nothing run",
					res.Outcome, res.Reason, res.Stdout)
			}
			if err := os.Truncate(filepath.Join(cache, "fontlist-v330.json"), 10); err != nil {
				t.Fatal(err)
			}
			next := sandboxtest.Exec(t, c, 0, sandboxtest.Spec("import os; print(sorted(os.listdir(os.environ['MPLCONFIGDIR'])))", 10*time.Second), nil)
			if next.Outcome != sandbox.OutcomeOK || next.Stdout != "['fontlist-v330.json']\n" {
				t.Fatalf("next run: %+v", next)
			}
		})
	}
}

// A session's home is its working directory, whose new files are its calls' output files: the
// interpreter's own state (IPython's profile, matplotlib's directory) stays out of it, so the
// call that makes IPython's shell lists no output file, and the home holds only what the
// session made (its user site directory, .local).
func TestSessionHomeHoldsOnlyTheUsersFiles(t *testing.T) {
	c, _ := pipeRuntimeWith(t, 1, func(cfg *executor.Config) {
		cfg.ForkServer = ""
		cfg.SessionHome = filepath.Join(filepath.Dir(cfg.RunRoot), "home")
	})
	spec := sandboxtest.Spec("display(1)\nimport os\nsorted(os.listdir())", sandboxtest.HeavyImportTimeout)
	spec.Session = true
	res := sandboxtest.Exec(t, c, 0, spec, nil)
	if n := len(res.Results); res.Outcome != sandbox.OutcomeOK || n != 2 || res.Results[n-1].Text() != "['.local']" || len(res.Files) != 0 {
		t.Fatalf("outcome %s, results %+v, files %+v, stderr %q: want the home to hold .local alone and no output file",
			res.Outcome, res.Results, res.Files, res.Stderr)
	}
}

// A session's env (Spec.Env) is in os.environ before its code, its secrets' placeholders over
// it; a call's own change to one of its variables persists while the env sent is the same, and
// a different env (a warm session adopted) is set again.
func TestSessionEnvIsSetOnceAndAgainWhenItChanges(t *testing.T) {
	c, _ := pipeRuntimeWith(t, 1, func(cfg *executor.Config) { cfg.ForkServer = "" })
	call := func(code string, env, secrets map[string]string) string {
		t.Helper()
		spec := sandboxtest.Spec(code, 30*time.Second)
		spec.Session, spec.Env, spec.SecretEnv = true, env, secrets
		res := sandboxtest.Exec(t, c, 0, spec, nil)
		if res.Outcome != sandbox.OutcomeOK {
			t.Fatalf("%q: %s %s %s", code, res.Outcome, res.Reason, res.Stderr)
		}
		return res.Stdout
	}
	env := map[string]string{"GREETING": "hi", "TOKEN": "from env"}
	show := "import os; print(os.environ.get('GREETING'), os.environ.get('TOKEN'))"
	if got := call(show, env, map[string]string{"TOKEN": "sandpit-secret:TOKEN"}); got != "hi sandpit-secret:TOKEN\n" {
		t.Errorf("first call: %q, want the env with the secret's placeholder over it", got)
	}
	call("import os; os.environ['GREETING'] = 'mine'", env, nil)
	if got := call(show, env, nil); got != "mine sandpit-secret:TOKEN\n" {
		t.Errorf("after the call's own change: %q, want it kept", got)
	}
	if got := call(show, map[string]string{"GREETING": "adopted"}, nil); got != "adopted sandpit-secret:TOKEN\n" {
		t.Errorf("with another env: %q, want it set", got)
	}
}

// Output files become file events with their bytes, in order before the result; a file whose
// bytes do not match its size and SHA-256 is dropped, and the result names it as skipped.
func TestFileMessagesBecomeEvents(t *testing.T) {
	c, ex := fakeExecutor(t)
	good, bad := []byte("\x89PNG chart"), []byte("damaged")
	file := func(name string, content []byte, sum [32]byte) *sandbox.File {
		return &sandbox.File{Name: name, SizeBytes: int64(len(content)), MediaType: "image/png", SHA256: hex.EncodeToString(sum[:])}
	}
	go func() {
		for {
			m, err := ex.Receive()
			if err != nil {
				return
			}
			if m.Kind != protocol.KindRun {
				continue
			}
			ex.Send(&protocol.Message{Kind: protocol.KindFile, ID: m.ID, File: file("a.png", good, sha256.Sum256(good)), FileContent: good})
			ex.Send(&protocol.Message{Kind: protocol.KindFile, ID: m.ID, File: file("b.png", bad, sha256.Sum256(good)), FileContent: bad})
			ex.Send(&protocol.Message{Kind: protocol.KindResult, ID: m.ID, Result: &sandbox.Result{Outcome: sandbox.OutcomeOK,
				Files: []sandbox.File{*file("a.png", good, sha256.Sum256(good)), *file("b.png", bad, sha256.Sum256(good))}}})
		}
	}()
	var events []sandbox.Event
	res, err := c.Run(context.Background(), 0, sandboxtest.Spec("print(1)", time.Second), func(e sandbox.Event) { events = append(events, e) })
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Stream != sandbox.StreamFile || events[0].File.Name != "a.png" || !bytes.Equal(events[0].Content, good) {
		t.Fatalf("events %+v", events)
	}
	if len(res.Files) != 1 || res.Files[0].Name != "a.png" || len(res.FilesSkipped) != 1 || res.FilesSkipped[0].Name != "b.png" ||
		!strings.Contains(res.FilesSkipped[0].Reason, "did not arrive intact") {
		t.Fatalf("files %+v skipped %+v", res.Files, res.FilesSkipped)
	}
}

// A cancelled run whose executor confirms its end after a slow kill (3 s: within the
// executor's own KillTimeout of 5 s, as a fork bomb on a loaded node takes) is answered with the executor's result, not as unconfirmed.
func TestSlowKillIsConfirmed(t *testing.T) {
	c, ex := fakeExecutor(t)
	go func() {
		for {
			m, err := ex.Receive()
			if err != nil {
				return
			}
			if m.Kind == protocol.KindCancel {
				id := m.ID
				time.AfterFunc(3*time.Second, func() {
					ex.Send(&protocol.Message{Kind: protocol.KindResult, ID: id, Result: &sandbox.Result{Outcome: sandbox.OutcomeTimeout}})
				})
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	res, err := c.Run(ctx, 0, sandboxtest.Spec("import os\nwhile True: os.fork()", time.Second), func(sandbox.Event) {})
	if (err != nil && strings.Contains(err.Error(), "did not confirm")) || res.Outcome != sandbox.OutcomeTimeout {
		t.Fatalf("a cancelled run confirmed after 3 s: %+v, %v", res, err)
	}
}

// greetedLine is a line with opts to an executor of one slot that greets, over a pipe whose
// executor end it returns: the test speaks for the executor there, or stays silent. Both end
// with the test.
func greetedLine(t *testing.T, opts control.Options) (*control.Line, net.Conn) {
	t.Helper()
	daemonEnd, executorEnd := net.Pipe()
	t.Cleanup(func() { executorEnd.Close() })
	go protocol.NewConn(executorEnd, executorEnd).Send(&protocol.Message{Kind: protocol.KindHello,
		Hello: &protocol.Hello{Version: protocol.Version, Slots: 1}})
	c, err := control.Start(context.Background(), daemonEnd, daemonEnd, daemonEnd, slog.New(slog.DiscardHandler), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, executorEnd
}

// fakeExecutor is a line to a fake executor of one slot over a pipe: the test speaks the
// executor's side through ex. Both end with the test.
func fakeExecutor(t *testing.T) (*control.Line, *protocol.Conn) {
	t.Helper()
	c, end := greetedLine(t, control.Options{})
	return c, protocol.NewConn(end, end)
}

// A session's first call in a slot whose last run has just ended starts its interpreter while
// the executor forks the slot's next program, and both clear and seed the slot's directories:
// the interpreter's start must end that program first, not race it. Seen on CI (Kubernetes,
// gVisor): "seeding the run's matplotlib directory: chown .../fontlist-v330.json: no such file
// or directory", the next program's clear having removed the file the session had just seeded.
// A matplotlib cache of many files widens the window the race needs.
func TestSessionStartWaitsForTheSlotsNextProgram(t *testing.T) {
	cache := t.TempDir()
	for i := range 200 {
		if err := os.WriteFile(filepath.Join(cache, fmt.Sprintf("cache-%03d.json", i)), bytes.Repeat([]byte("x"), 4096), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	seeded := "import os; print(len(os.listdir(os.environ['MPLCONFIGDIR'])))"
	for i := range 5 { // each on an executor of its own: a run after a session's call ends the session
		c, wait := pipeRuntimeWith(t, 1, func(cfg *executor.Config) { cfg.MatplotlibCache = cache })
		sandboxtest.WaitForStart(t, c, "fork", 30*time.Second)
		run := sandboxtest.Exec(t, c, 0, sandboxtest.Spec(seeded, 10*time.Second), nil)
		spec := sandboxtest.Spec(seeded, 10*time.Second)
		spec.Session = true
		call := sandboxtest.Exec(t, c, 0, spec, nil)
		for _, r := range []struct {
			what string
			res  sandbox.Result
		}{{"the run", run}, {"the session's first call", call}} {
			if r.res.Outcome != sandbox.OutcomeOK || r.res.Stdout != "200\n" {
				t.Fatalf("round %d, %s: %s (%s), stdout %q stderr %q; want ok and the 200 seeded files", i, r.what,
					r.res.Outcome, r.res.Reason, r.res.Stdout, r.res.Stderr)
			}
		}
		c.Close() // the slots' uids are the next executor's
		if err := wait(); err != nil {
			t.Fatal(err)
		}
	}
}
