package executor

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit/internal/sandbox/sandboxtest"
)

// threadUIDs returns the real uids of this process's threads (/proc/self/task/*/status).
func threadUIDs() []string {
	var uids []string
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	for _, st := range tasks {
		raw, err := os.ReadFile(st)
		if err != nil {
			continue // the thread ended
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					uids = append(uids, f[0])
				}
			}
		}
	}
	return uids
}

// TestKillUIDLeavesTheExecutorsThreadsAlone: the run's uid could signal the executor's
// short-lived kill threads (a thread whose real uid had become the run's to kill(-1) as it),
// and a signal to one thread (SIGSTOP) acts on the whole executor. No thread of the executor
// ever has the run's uid as its real uid now (its kill thread's is killerUID), and the uid's
// processes are gone.
func TestKillUIDLeavesTheExecutorsThreadsAlone(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("killing as another uid needs root; run the tests as root")
	}
	const uid = 64123
	var mu sync.Mutex
	seen := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, u := range threadUIDs() {
				if u == "64123" {
					mu.Lock()
					seen++
					mu.Unlock()
				}
			}
		}
	}()
	for range 50 {
		cmd := exec.Command("sleep", "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if err := killUID(uid); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Fatal("the uid's process outlived killUID")
		}
	}
	close(stop)
	wg.Wait()
	if seen > 0 {
		t.Fatalf("a thread of the executor had the run's uid %d times while killing", seen)
	}
}

// TestConcurrentKillsOfOneUID: a run's timeout and its wait each killed its uid, and when a
// kill was a helper process of the uid, one's kill(-1) killed the other before it had killed
// ("the kill helper of uid 10000 died of signal 9 (killed) before it killed", trial, 2
// December 2026). Concurrent kills all succeed.
func TestConcurrentKillsOfOneUID(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("killing as another uid needs root; run the tests as root")
	}
	const uid = 64124
	for range 20 {
		var cmds []*exec.Cmd
		for range 3 {
			cmd := exec.Command("sleep", "60")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			cmds = append(cmds, cmd)
		}
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- killUID(uid) }()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("a concurrent kill: %v", err)
			}
		}
		for _, cmd := range cmds {
			_ = cmd.Wait()
		}
	}
}

// TestKillUIDOutlastsAStopper: a run's process that stopped every process of its uid stopped
// each kill helper (of its uid) before it killed, and the run's processes outlived every kill
// ("did not finish within 2s", trial, 2 December 2026). The kill is now made by a thread
// whose real and saved uid are no run's: the stopper cannot signal it, and it dies.
func TestKillUIDOutlastsAStopper(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("killing as another uid needs root; run the tests as root")
	}
	const uid = 64126
	var cmds []*exec.Cmd
	for _, argv := range [][]string{{"/usr/bin/python3", "-c", sandboxtest.Stopper}, {"sleep", "60"}} {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	var reaped sync.WaitGroup // as the run's parent does: a zombie still counts
	for _, cmd := range cmds {
		reaped.Go(func() { _ = cmd.Wait() })
	}
	time.Sleep(300 * time.Millisecond) // the stopper is in its loop
	e := &Executor{}
	err := e.killAndWait(uid, 5*time.Second)
	if err != nil {
		_ = killUID(uid)
	}
	reaped.Wait()
	if err != nil {
		t.Fatalf("killing a uid whose process stops its killers: %v", err)
	}
	// The executor (this test binary) was not stopped: its threads all run on.
	if state := procState(t, os.Getpid()); state == "T" {
		t.Fatal("the executor was stopped")
	}
}

// procState is the state letter of process pid (/proc/pid/stat): "T" when stopped.
func procState(t *testing.T, pid int) string {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}

// TestServeRefusesSlotsOnTheKillersUID: a slot whose uid is the kill thread's could not be
// killed (asUID refuses it), so such a layout is refused at start.
func TestServeRefusesSlotsOnTheKillersUID(t *testing.T) {
	cfg := DefaultConfig()
	cfg.UIDBase, cfg.Slots = killerUID-2, 4
	err := Serve(t.Context(), nil, cfg, nil)
	if err == nil || !strings.Contains(err.Error(), "the uid of the executor's kill thread") {
		t.Fatalf("slots over uid %d: %v", killerUID, err)
	}
}

// TestUserThreadIsNoTargetOfTheSessionsUID: a file operation's thread (asUserThread: a
// session's files, watches, a command's cwd) acts as the session's uid by its effective uid
// only; its real and saved uids are killerUID, so a process of the session cannot signal it
// (a red team's background command SIGSTOPped such a thread, found by its Uid line, and so
// the whole executor, until the session ended for an executor that did not answer: H42).
func TestUserThreadIsNoTargetOfTheSessionsUID(t *testing.T) {
	needRoot(t)
	const uid = 64124
	var line string
	err := asUserThread(uid, func() error {
		raw, err := os.ReadFile("/proc/thread-self/status")
		for l := range strings.Lines(string(raw)) {
			if rest, ok := strings.CutPrefix(l, "Uid:"); ok {
				line = strings.Join(strings.Fields(rest), " ")
			}
		}
		return err
	})
	// Real, effective, saved, filesystem.
	if want := strconv.Itoa(killerUID) + " 64124 " + strconv.Itoa(killerUID) + " 64124"; err != nil || line != want {
		t.Errorf("the thread's uids: %q %v, want %q", line, err, want)
	}
	// It still checks access as the session's uid: a directory only root may enter is refused.
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	err = asUserThread(uid, func() error { return unix.Faccessat(unix.AT_FDCWD, dir, unix.R_OK|unix.X_OK, unix.AT_EACCESS) })
	if err == nil {
		t.Errorf("uid %d may enter %s (0700, root's)", uid, dir)
	}
	if err := asUserThread(uid, func() error { return unix.Faccessat(unix.AT_FDCWD, "/", unix.R_OK|unix.X_OK, unix.AT_EACCESS) }); err != nil {
		t.Errorf("uid %d may not enter /: %v", uid, err)
	}
}
