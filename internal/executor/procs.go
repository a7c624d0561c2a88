package executor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

// killerUID is the real and saved uid of the thread that acts as a slot's uid (asUID): no
// process ever runs as it, so no run's process may signal or trace that thread (the kernel
// lets a process signal one whose real or saved uid is its own real or effective uid, and
// trace one whose three uids are its own), and kill(-1) from it reaches no other process
// than the slot uid's. Within 16 bits, for boxes in a user namespace of 65536 ids, and apart
// from nobody (65534), which the dependency checker runs as.
const killerUID = 65533

// asUID runs fn on a thread whose effective uid (and file-system uid) is uid, and whose real
// and saved uid are killerUID: it is the way the executor, which lacks CAP_IPC_OWNER and must
// not signal by pid (pids race with exits), acts on everything a uid owns. The uids leave the
// thread no capability. The thread is locked and never unlocked, so Go terminates it when the
// goroutine returns and its lowered credentials never run other code.
//
// Its real uid is not uid: a thread whose real uid was the slot's (as the executor's kill
// thread once had, and then a kill helper process started as the uid) could be stopped by the
// run's processes, and a SIGSTOP to one thread acts on the whole executor; the helper was
// stopped before it killed, and a run's processes outlived every kill (trials, December 2026).
func asUID(uid int, fn func() error) error { return onThreadAs(uid, false, fn) }

// onThreadAs is asUID, and asUserThread when withGID is set: the thread then first drops its
// supplementary groups and takes uid as its three gids (while it is still root).
func onThreadAs(uid int, withGID bool, fn func() error) error {
	if uid <= 0 || uid == killerUID {
		return fmt.Errorf("refusing to act as uid %d", uid)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Raw syscalls change only this thread (syscall.Setresuid would change all threads).
		if withGID {
			if _, _, e := syscall.RawSyscall(syscall.SYS_SETGROUPS, 0, 0, 0); e != 0 {
				errc <- fmt.Errorf("dropping groups: %w", e)
				return
			}
			if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESGID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
				errc <- fmt.Errorf("becoming gid %d: %w", uid, e)
				return
			}
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, killerUID, uintptr(uid), killerUID); e != 0 {
			errc <- fmt.Errorf("becoming uid %d: %w", uid, e)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// killUID sends SIGKILL to every process whose real or saved uid is uid, in one atomic step.
//
// It is the technique of isolate: as uid, kill(-1, SIGKILL) reaches every process that uid may
// signal, under the kernel's task-list lock, so a fork bomb cannot outrun it; and it needs no
// new process, which a fork bomb at the box's process limit would deny. The executor's
// threads are one thread group, which kill(-1) skips, and its other threads are root's.
func killUID(uid int) error {
	return asUID(uid, func() error {
		err := syscall.Kill(-1, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return err
	})
}

// killAndWait kills every process of uid until none is left, zombies included (they still
// count against the uid's process limit), or until timeout passes. The error says how many
// were left, and why the last kill failed.
func (e *Executor) killAndWait(uid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var killErr error
	for {
		// None left means none can fork: only the uid's processes make more of them.
		n := e.countProcesses(uid)
		if n == 0 {
			return nil
		}
		// A failed kill is tried again until the deadline.
		killErr = killUID(uid)
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("%d processes of uid %d still alive after %s", n, uid, timeout), killErr)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// countProcesses counts the processes whose real or saved uid is uid (those killUID reaches),
// zombies included. It reads each process's Uid line, not the owner of its /proc directory:
// a process that made itself undumpable has a /proc directory owned by root.
//
// It never runs while a process is being made another uid's (see Executor.changingUID).
func (e *Executor) countProcesses(uid int) int {
	e.changingUID.RLock()
	defer e.changingUID.RUnlock()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	want := []byte(strconv.Itoa(uid))
	var buf [4096]byte // the Uid line is within a status file's first lines
	n := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		data, err := readProcFile("/proc/"+e.Name()+"/status", buf[:])
		if err != nil {
			continue // gone meanwhile
		}
		for line := range bytes.Lines(data) {
			if ids, ok := bytes.CutPrefix(line, []byte("Uid:")); ok {
				// real, effective, saved, filesystem
				if f := bytes.Fields(ids); len(f) >= 3 && (bytes.Equal(f[0], want) || bytes.Equal(f[2], want)) {
					n++
				}
				break
			}
		}
	}
	return n
}

// killGID kills every process whose real, effective or saved gid is gid, round after round
// (a child forked meanwhile has the gid too) until none is left or timeout passes. A session's
// command runs with a gid of its own (see commands.go), which no unprivileged process can
// shed: it marks every process the command started, daemonised ones included.
func (e *Executor) killGID(gid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids := e.gidProcesses(gid)
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d processes of gid %d still alive after %s", len(pids), gid, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// gidProcesses lists the live (not zombie) processes whose real, effective or saved gid is
// gid.
func (e *Executor) gidProcesses(gid int) []int {
	e.changingUID.RLock()
	defer e.changingUID.RUnlock()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := []byte(strconv.Itoa(gid))
	var buf [4096]byte
	var pids []int
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		data, err := readProcFile("/proc/"+ent.Name()+"/status", buf[:])
		if err != nil {
			continue
		}
		zombie := false
		for line := range bytes.Lines(data) {
			if st, ok := bytes.CutPrefix(line, []byte("State:")); ok {
				zombie = bytes.HasPrefix(bytes.TrimSpace(st), []byte("Z"))
			}
			if ids, ok := bytes.CutPrefix(line, []byte("Gid:")); ok {
				if f := bytes.Fields(ids); !zombie && len(f) >= 3 && (bytes.Equal(f[0], want) || bytes.Equal(f[1], want) || bytes.Equal(f[2], want)) {
					pids = append(pids, pid)
				}
				break
			}
		}
	}
	return pids
}

// readProcFile reads the start of a /proc file, up to len(buf) bytes, with three system calls
// (os.ReadFile makes six): the executor reads them in loops while a run ends, and under gVisor
// every system call costs tens of microseconds.
func readProcFile(path string, buf []byte) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	return readFull(fd, buf)
}

// readFull reads fd into buf until buf is full or the file ends, and returns what it read.
func readFull(fd int, buf []byte) ([]byte, error) {
	n := 0
	for n < len(buf) {
		m, err := syscall.Read(fd, buf[n:])
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return buf[:n], nil
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
// to read, or pin the box's memory. It works through asUID, since
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
	return asUID(uid, func() error {
		var errs []error
		for _, o := range objects {
			const ipcRMID = 0
			if _, _, e := syscall.Syscall(o.ctl, uintptr(o.id), ipcRMID, 0); e != 0 && e != syscall.EINVAL && e != syscall.EIDRM {
				errs = append(errs, fmt.Errorf("removing IPC object %d: %w", o.id, e))
			}
		}
		return errors.Join(errs...)
	})
}

// ipcListed reports whether the kernel lists System V IPC objects (/proc/sysvipc), which
// removeIPC reads.
func ipcListed() bool {
	_, err := os.Stat(ipcTables[0].path)
	return err == nil
}

// ipcObjectsLeft returns how many System V shared memory segments, message queues and
// semaphore sets exist in the box, as the kernel counts them (shmctl SHM_INFO's used_ids,
// msgctl MSG_INFO's msgpool, semctl SEM_INFO's semusz). No process of the box but a run's
// makes them, so after removeIPC it should be 0. It is the check that works where the
// objects cannot be listed: gVisor has no /proc/sysvipc, and a run's objects there outlived
// it (found by an attack: the next run of the slot read a segment's secret).
func ipcObjectsLeft() (int, error) {
	const (
		msgInfo = 12 // MSG_INFO
		shmInfo = 14 // SHM_INFO
		semInfo = 19 // SEM_INFO
	)
	var buf [128]byte // struct shm_info, msginfo or seminfo; each fits
	n := 0
	count := func(what string, trap, a1, a2, a3 uintptr, offset int) error {
		clear(buf[:])
		if _, _, e := syscall.Syscall(trap, a1, a2, a3); e != 0 {
			return fmt.Errorf("counting System V %s: %w", what, e)
		}
		n += int(int32(binary.NativeEndian.Uint32(buf[offset:])))
		return nil
	}
	p := uintptr(unsafe.Pointer(&buf[0]))
	if err := count("shared memory segments", syscall.SYS_SHMCTL, 0, shmInfo, p, 0); err != nil {
		return 0, err
	}
	if err := count("message queues", syscall.SYS_MSGCTL, 0, msgInfo, p, 0); err != nil {
		return 0, err
	}
	if _, _, e := syscall.Syscall6(syscall.SYS_SEMCTL, 0, 0, semInfo, p, 0, 0); e != 0 {
		return 0, fmt.Errorf("counting System V semaphore sets: %w", e)
	}
	n += int(int32(binary.NativeEndian.Uint32(buf[7*4:]))) // seminfo.semusz
	return n, nil
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

// cgroupMemoryLimit returns the memory cgroup's limit in bytes (cgroup v2 memory.max, or v1
// memory.limit_in_bytes), and 0 when there is none or neither file can be read.
func cgroupMemoryLimit() int64 {
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(data)), 10, 64)
		if err != nil || n >= 1<<62 { // "max", or v1's page-rounded MaxInt64: no limit
			return 0
		}
		return n
	}
	return 0
}

// memAvailable returns MemAvailable of /proc/meminfo in bytes (under gVisor: what the sandbox
// may still allocate before its container's memory limit), and false when it cannot be read.
func memAvailable() (int64, bool) {
	var buf [4096]byte // MemAvailable is the third line
	data, err := readProcFile("/proc/meminfo", buf[:])
	if err != nil {
		return 0, false
	}
	for line := range bytes.Lines(data) {
		if v, ok := bytes.CutPrefix(line, []byte("MemAvailable:")); ok {
			kb, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

func init() {
	// asUID lowers one locked thread's uid and lets the thread die with its goroutine. The
	// main thread never dies (Go wedges it instead), and its credentials are what /proc shows
	// for the whole process: lock the main goroutine to it for good, so no asUID goroutine
	// can ever run there. (LockOSThread in an init function keeps main on the main thread.)
	runtime.LockOSThread()
}
