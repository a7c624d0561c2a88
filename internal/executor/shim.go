package executor

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The command shim. Each command of a session runs under a shim of its own: the executor's
// binary started as `sandpit-executor shim`, as root, which makes itself a child subreaper
// (PR_SET_CHILD_SUBREAPER) and starts the command as the session's uid in a session of its
// own. Every process the command starts stays its descendant, and one that daemonises (a
// double fork, setsid) is reparented to the shim, not to the box's init: when the shim is
// told to stop (SIGTERM from the executor; the session's uid cannot signal it), it kills every
// descendant, those reparented to it since included, until none is left. That is how a
// foreground command past its timeout is killed with every process it started, while the
// session's interpreter and its other commands, of the same uid, live on.
//
// The shim reports on descriptor 3: "pid N" once the command runs (or "error TEXT"), then
// "exit STATUS" (the wait status) when the command's own process ends. It stays while
// descendants of the command live, and exits when none is left.

// prSetChildSubreaper is prctl's option that makes orphaned descendants the caller's children.
const prSetChildSubreaper = 36

// Shim is the command shim's main (args after "shim"); it returns the exit status.
func Shim(args []string) int {
	fs := flag.NewFlagSet("shim", flag.ContinueOnError)
	uid := fs.Int("uid", 0, "the command's uid and gid")
	dir := fs.String("dir", "", "the command's working directory")
	tty := fs.Bool("tty", false, "standard input is a terminal: make it the command's controlling terminal")
	if err := fs.Parse(args); err != nil || *uid <= 0 || fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: sandpit-executor shim -uid N [-dir D] [-tty] -- argv... (started by the executor)")
		return 2
	}
	status := os.NewFile(3, "status")
	report := func(format string, a ...any) { fmt.Fprintf(status, format+"\n", a...) }
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		report("error becoming the command's subreaper: %v", e)
		return 1
	}
	argv := fs.Args()
	prog := argv[0]
	if !strings.Contains(prog, "/") {
		p, err := exec.LookPath(prog)
		if err != nil {
			report("error %s: command not found (PATH is %s)", prog, os.Getenv("PATH"))
			return 127
		}
		prog = p
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	attr := &syscall.SysProcAttr{Setsid: true, Setctty: *tty, Ctty: 0,
		Credential: &syscall.Credential{Uid: uint32(*uid), Gid: uint32(*uid), Groups: []uint32{}}}
	p, err := os.StartProcess(prog, argv, &os.ProcAttr{Dir: *dir, Env: os.Environ(), Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}, Sys: attr})
	if err != nil {
		report("error starting %s: %v", argv[0], err)
		return 126
	}
	// The pipes and the terminal now belong to the command alone: they end when its
	// processes are gone.
	os.Stdin.Close()
	os.Stdout.Close()
	os.Stderr.Close()
	report("pid %d", p.Pid)
	go func() {
		<-stop
		killDescendants()
	}()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil { // ECHILD: nothing of the command is left
			return 0
		}
		if pid == p.Pid {
			report("exit %d", uint32(ws))
		}
	}
}

// killDescendants kills the shim's children until it has none: a killed child's own children
// become the shim's (it is their subreaper) and are killed in the next round.
func killDescendants() {
	self := os.Getpid()
	for {
		kids := childrenOf(self)
		if len(kids) == 0 {
			return
		}
		for _, pid := range kids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(time.Millisecond)
	}
}

// childrenOf lists the live (not zombie) processes whose parent is ppid, from /proc.
func childrenOf(ppid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var kids []int
	buf := make([]byte, 512)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := readProcFile("/proc/"+e.Name()+"/stat", buf)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses; the last ')' ends it.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		if pp, _ := strconv.Atoi(f[1]); pp == ppid {
			kids = append(kids, pid)
		}
	}
	return kids
}

// shimReport is one line of a shim's status descriptor.
type shimReport struct {
	pid    int
	status *syscall.WaitStatus
	err    string
}

// readShimReports passes the shim's status lines to fn until the descriptor ends.
func readShimReports(f *os.File, fn func(shimReport)) {
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		word, rest, _ := strings.Cut(sc.Text(), " ")
		switch word {
		case "pid":
			pid, _ := strconv.Atoi(rest)
			fn(shimReport{pid: pid})
		case "exit":
			n, _ := strconv.ParseUint(rest, 10, 32)
			ws := syscall.WaitStatus(uint32(n))
			fn(shimReport{status: &ws})
		case "error":
			fn(shimReport{err: rest})
		}
	}
}
