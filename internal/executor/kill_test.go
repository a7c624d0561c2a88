package executor

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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

// H42: the run's uid could signal the executor's short-lived kill threads (a thread that had
// become the uid to kill(-1) as it), and a signal to one thread (SIGSTOP) acts on the whole
// executor. killUID now kills from a forked helper: no thread of the executor ever takes the
// uid, and the uid's processes are gone.
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
		if err := (&Executor{}).killUID(uid); err != nil {
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

// TestKillHelperEndedBySignal: a helper another's signal ended (in a pod over its memory
// limit, the OOM killer's SIGKILL) is reported with the signal's number and name, and one the
// executor ended after killHelperWait as not finishing in time.
func TestKillHelperEndedBySignal(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	err := waitKillHelper(cmd.Process.Pid, 10042)
	if err == nil || !strings.Contains(err.Error(), "uid 10042 died of signal 9 (killed)") {
		t.Fatalf("a helper ended by SIGKILL: %v", err)
	}

	cmd = exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	err = waitKillHelper(cmd.Process.Pid, 10043)
	if err == nil || !strings.Contains(err.Error(), "did not finish within "+killHelperWait.String()) {
		t.Fatalf("a helper that hangs: %v", err)
	}
}

// TestConcurrentKillsOfOneUID: a run's timeout and its wait each killed its uid, and one's
// helper killed the other's before it had killed ("the kill helper of uid 10000 died of signal
// 9 (killed) before it killed", trial, 2 December 2026). The helpers of a uid now take turns:
// concurrent kills all succeed.
func TestConcurrentKillsOfOneUID(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("killing as another uid needs root; run the tests as root")
	}
	const uid = 64124
	e := &Executor{}
	for range 5 { // a helper of a race-built test binary takes a second to start on a loaded machine
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
			go func() { errs <- e.killUID(uid) }()
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
