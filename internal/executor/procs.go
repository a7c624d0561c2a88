package executor

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// killUID sends SIGKILL to every process whose real or saved uid is uid, in one atomic step.
//
// It is the technique of isolate: a thread that has become uid calls kill(-1, SIGKILL), which the
// kernel delivers to every process that uid may signal, under the task-list lock, so a fork bomb
// cannot outrun it. The thread is locked and never unlocked, so Go terminates it when the
// goroutine returns and its lowered credentials never run other code.
func killUID(uid int) error {
	if uid <= 0 {
		return fmt.Errorf("refusing to kill uid %d", uid)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// A raw syscall changes only this thread (syscall.Setresuid would change all threads).
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			errc <- fmt.Errorf("becoming uid %d to kill its processes: %w", uid, e)
			return
		}
		err := syscall.Kill(-1, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			err = nil
		}
		errc <- err
	}()
	return <-errc
}

// killAndWait kills every process of uid until none is left, zombies included (they still
// count against the uid's process limit), or until timeout passes.
func killAndWait(uid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := killUID(uid); err != nil {
			return err
		}
		n := countProcesses(uid)
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d processes of uid %d still alive after %s", n, uid, timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// countProcesses counts the processes of uid.
func countProcesses(uid int) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		info, err := os.Stat(filepath.Join("/proc", e.Name()))
		if err != nil {
			continue
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok || int(st.Uid) != uid {
			continue
		}
		n++
	}
	return n
}

// removeOwned removes the entries directly inside each dir that belong to uid.
func removeOwned(uid int, dirs []string) error {
	var errs []error
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		for _, e := range entries {
			info, err := e.Info()
			if err != nil {
				continue
			}
			if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid {
				if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// ipcTables are the kernel's lists of System V IPC objects, with the columns of an object's id,
// owner uid and creator uid, and the ctl syscall that removes one.
var ipcTables = []struct {
	path                   string
	idCol, uidCol, cuidCol int
	ctl                    uintptr
}{
	{"/proc/sysvipc/shm", 1, 7, 9, syscall.SYS_SHMCTL},
	{"/proc/sysvipc/msg", 1, 7, 9, syscall.SYS_MSGCTL},
	{"/proc/sysvipc/sem", 1, 4, 6, syscall.SYS_SEMCTL},
}

// removeIPC removes the System V shared memory segments, message queues and semaphore sets
// that uid owns or created: they outlive processes, so a run could leave memory for later runs
// to read, or pin the box's memory. It works as uid on a locked thread (as killUID does), since
// the executor has no CAP_IPC_OWNER; the kernel frees a removed segment once the last process
// detaches from it.
func removeIPC(uid int) error {
	type object struct {
		ctl uintptr
		id  int
	}
	var objects []object
	for _, t := range ipcTables {
		data, err := os.ReadFile(t.path)
		if err != nil {
			continue // no System V IPC in this kernel
		}
		for i, line := range bytes.Split(data, []byte("\n")) {
			f := bytes.Fields(line)
			if i == 0 || len(f) <= max(t.idCol, t.uidCol, t.cuidCol) {
				continue
			}
			if string(f[t.uidCol]) != strconv.Itoa(uid) && string(f[t.cuidCol]) != strconv.Itoa(uid) {
				continue
			}
			if id, err := strconv.Atoi(string(f[t.idCol])); err == nil {
				objects = append(objects, object{t.ctl, id})
			}
		}
	}
	if len(objects) == 0 {
		return nil
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see killUID
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			errc <- fmt.Errorf("becoming uid %d to remove its IPC objects: %w", uid, e)
			return
		}
		var errs []error
		for _, o := range objects {
			const ipcRMID = 0
			if _, _, e := syscall.Syscall(o.ctl, uintptr(o.id), ipcRMID, 0); e != 0 && e != syscall.EINVAL && e != syscall.EIDRM {
				errs = append(errs, fmt.Errorf("removing IPC object %d: %w", o.id, e))
			}
		}
		errc <- errors.Join(errs...)
	}()
	return <-errc
}

// oomKills returns the memory cgroup's count of OOM kills (cgroup v2 memory.events, or v1
// memory.oom_control), and false when neither file can be read.
func oomKills() (int64, bool) {
	for _, path := range []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"} {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for line := range bytes.Lines(data) {
			if v, ok := bytes.CutPrefix(line, []byte("oom_kill ")); ok {
				n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}

func init() {
	// killUID lowers one locked thread's uid and lets the thread die with its goroutine. The
	// main thread never dies (Go wedges it instead), and its credentials are what /proc shows
	// for the whole process: lock the main goroutine to it for good, so no killUID goroutine
	// can ever run there. (LockOSThread in an init function keeps main on the main thread.)
	runtime.LockOSThread()
}
