package executor

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// A session's commands run under the per-run limits of processes (RLIMIT_NPROC, for the
// session's uid) and open files (RLIMIT_NOFILE), as its calls do: a fork storm in a command
// fails inside it. The executor cannot set another process's limits before it runs (rlimits
// are the whole process's, and its own must stay), so a command starts as the executor's
// binary in the mode LimitedExec, which lowers its limits, as the command's uid, and execs
// the command (nothing of the command has run before). Under gVisor, which does not enforce
// RLIMIT_NPROC, a command whose own processes reach the cap is stopped with all of them
// (watchCommand), before a fork storm exhausts the sandbox's host threads and ends the
// session.

// rlimitNPROC is RLIMIT_NPROC on Linux's amd64 and arm64 (package syscall does not name it).
const rlimitNPROC = 6

// IdleMode is the executor's argument for the mode that waits until it is signalled: a Docker
// box's own process (boxspec.IdleArg names it on the daemon's side).
const IdleMode = "idle"

// LimitedExec is the executor's argument for the mode that execs a command under limits:
// sandpit-executor exec-limited PROCESSES OPEN_FILES PROGRAM ARGV0 ARGS...
const LimitedExec = "exec-limited"

// ExecLimited is the mode LimitedExec: it sets args' limits (0: left as they are) and execs
// the program; it returns only on failure, with the exit status to exit with (127, as a shell
// does for a command it cannot run).
func ExecLimited(args []string) int {
	runtime.LockOSThread()
	if len(args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: sandpit-executor "+LimitedExec+" PROCESSES OPEN_FILES PROGRAM ARGV0 [ARGS...]")
		return 127
	}
	for i, res := range []int{rlimitNPROC, syscall.RLIMIT_NOFILE} {
		n, err := strconv.ParseUint(args[i], 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "sandpit-executor: limit %q is not a number\n", args[i])
			return 127
		}
		if n == 0 {
			continue
		}
		if err := syscall.Setrlimit(res, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
			fmt.Fprintf(os.Stderr, "sandpit-executor: setting the command's limit %s: %v\n", args[i], err)
			return 127
		}
	}
	err := syscall.Exec(args[2], args[3:], os.Environ())
	fmt.Fprintf(os.Stderr, "%s: %v\n", args[3], err)
	return 127
}

// limited returns the program and arguments that run prog with argv under c's limits
// (through LimitedExec), or prog and argv themselves when it sets none.
func (e *Executor) limited(prog string, argv []string, processes, openFiles int64) (string, []string) {
	if processes <= 0 && openFiles <= 0 || e.cfg.Self == "" {
		return prog, argv
	}
	args := []string{"sandpit-executor", LimitedExec, strconv.FormatInt(max(processes, 0), 10), strconv.FormatInt(max(openFiles, 0), 10), prog}
	return e.cfg.Self, append(args, argv...)
}

// watchCommand stops p, under gVisor, once its own processes reach its cap of processes (see
// the comment at the top of the file), until it ends.
func (p *proc) watchCommand() {
	tick := time.NewTicker(watchInterval)
	defer tick.Stop()
	for {
		select {
		case <-p.exited:
			return
		case <-tick.C:
		}
		if int64(len(p.e.gidProcesses(p.gid))) >= p.spec.Processes {
			p.stop(stopProcessLimit)
			return
		}
	}
}
