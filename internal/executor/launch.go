package executor

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// launch is a slot's program, started and waiting for its init line, with the executor's ends
// of its descriptors.
type launch struct {
	slot    int
	proc    process
	start   sandbox.Start // startFork or startCold
	server  *forkServer   // the fork server that forked it; nil when cold
	stdout  *os.File      // read ends of its stdout and stderr
	stderr  *os.File
	control net.Conn // its control line (descriptor 3)
}

// close closes the executor's ends of the program's descriptors.
func (l *launch) close() {
	l.stdout.Close()
	l.stderr.Close()
	l.control.Close()
}

// exited reports whether the program has already ended (a fork whose server died, or that the
// OOM killer took while it waited).
func (l *launch) exited() bool {
	child, ok := l.proc.(*forkChild)
	if !ok {
		return false
	}
	select {
	case r, ok := <-child.exited:
		if ok {
			child.exited <- r // put back for wait
		}
		return true
	default:
		return false
	}
}

// discard kills a program that will not run and closes its descriptors; the slot's files are
// left to the next clearing.
func (e *Executor) discard(l *launch) {
	uid := e.cfg.UIDBase + l.slot
	if err := e.killAndWait(uid, e.cfg.KillTimeout); err != nil {
		e.log.Warn("discarding a ready program", "slot", l.slot, "error", err)
	}
	l.close()
	done := make(chan struct{})
	go func() {
		_, _ = l.proc.wait() // reaps a cold one; a fork's server reaps its own
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(e.cfg.KillTimeout):
		e.log.Warn("a discarded program did not end", "slot", l.slot)
	}
}

// launchProgram clears slot (every process of its uid, its directories), gives it a fresh
// working directory and home and starts its program there, which then waits for its init
// line: forked from s when s is not nil (or, if that fork fails and cold is true, started
// cold), else cold. id names the fork in the server's reports. A home that cannot be seeded
// is an error: the program does not start.
func (e *Executor) launchProgram(slot int, s *forkServer, cold bool, id string) (*launch, error) {
	uid := e.cfg.UIDBase + slot
	dir, home := e.slotDir(slot), e.homeDir(slot)
	if dir == e.cfg.SessionHome {
		// A session's interpreter: the home is the session's, with what its commands made.
		if _, err := e.sessionHome(slot); err != nil {
			return nil, err
		}
		return e.launchIn(slot, s, cold, id, uid, dir, home)
	}
	if err := e.clearSlot(uid, dir, home, e.stateDir(slot)); err != nil {
		return nil, err
	}
	return e.launchIn(slot, s, cold, id, uid, dir, home)
}

// launchIn starts slot's program in dir with home (see launchProgram).
func (e *Executor) launchIn(slot int, s *forkServer, cold bool, id string, uid int, dir, home string) (*launch, error) {
	env := runEnvironment(home, e.stateDir(slot), e.cfg.proxyEnv())

	// The program's ends are closed here once it has them (a fork server's copies when it
	// has forked), so that the pipes end when the run's processes are gone.
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("creating the control line: %w", err)
	}
	parentSock, childSock := os.NewFile(uintptr(fds[0]), "control"), os.NewFile(uintptr(fds[1]), "control-child")
	defer childSock.Close()
	control, err := net.FileConn(parentSock) // a duplicate of parentSock
	parentSock.Close()
	if err != nil {
		return nil, fmt.Errorf("opening the control line: %w", err)
	}
	l := &launch{slot: slot, control: control}
	var stdoutW, stderrW *os.File
	if l.stdout, stdoutW, err = os.Pipe(); err != nil {
		control.Close()
		return nil, fmt.Errorf("creating the stdout pipe: %w", err)
	}
	defer stdoutW.Close()
	if l.stderr, stderrW, err = os.Pipe(); err != nil {
		control.Close()
		l.stdout.Close()
		return nil, fmt.Errorf("creating the stderr pipe: %w", err)
	}
	defer stderrW.Close()

	if s != nil {
		e.changingUID.Lock()
		child, err := s.fork(id, uid, dir, env, stdoutW, stderrW, childSock) // answers once the child is uid's
		e.changingUID.Unlock()
		if err == nil {
			e.forks.forked(s)
			l.proc, l.start, l.server = child, startFork, s
			return l, nil
		}
		if _, refused := errors.AsType[*forkRefusedError](err); !refused {
			e.forks.failed(s)
		}
		if !cold {
			l.close()
			return nil, err
		}
		e.log.Warn("starting the run cold", "slot", slot, "error", err)
	}
	cmd, err := e.startCold(slot, uid, dir, env, stdoutW, stderrW, childSock)
	if err != nil {
		l.close()
		return nil, err
	}
	l.proc, l.start = coldProcess{cmd}, startCold
	return l, nil
}

// clearSlot kills every process of uid and gives the slot a fresh, empty working directory
// dir, home and seeded state directory, all uid's. A state directory that cannot be seeded is
// an error.
func (e *Executor) clearSlot(uid int, dir, home, state string) error {
	if err := e.killAndWait(uid, e.cfg.KillTimeout); err != nil {
		return fmt.Errorf("clearing the slot: %w", err)
	}
	for _, d := range []string{dir, home, state} {
		if err := freshDir(d, uid); err != nil {
			return fmt.Errorf("the run's directory: %w", err)
		}
	}
	return e.seedState(uid, state)
}

// startCold starts the bootstrap in a fresh interpreter as uid in dir, with env, its stdout
// and stderr on the given ends and the control line's end as descriptor 3, and makes it the
// OOM killer's first choice.
func (e *Executor) startCold(slot, uid int, dir string, env []string, stdoutW, stderrW, childSock *os.File) (*exec.Cmd, error) {
	cmd := exec.Command(e.cfg.Python, "-u", "-I", "-X", "utf8", e.cfg.Bootstrap)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = stdoutW, stderrW
	cmd.ExtraFiles = []*os.File{childSock} // descriptor 3
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid:     true,
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}},
	}
	e.changingUID.Lock()
	err := cmd.Start() // returns once the program has become uid and exec'd
	e.changingUID.Unlock()
	if err != nil {
		return nil, fmt.Errorf("starting python: %w", err)
	}
	// Before the code arrives over the control line, the run becomes the OOM killer's first
	// choice. (An executor with CAP_SYS_RESOURCE would also pin it there; the engines this
	// targets cannot always grant that capability, so a run may lower its score again.) A
	// forked child does this itself.
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", cmd.Process.Pid), []byte("1000"), 0); err != nil {
		e.log.Warn("raising the run's oom_score_adj", "slot", slot, "error", err)
	}
	return cmd, nil
}

// Ready programs. After each run, while nothing else can use its slot, the executor forks the
// slot's next program from the fork server: a child that has become the slot's uid in a
// fresh directory and waits for its init line. The next run in the slot takes it (waiting for
// it if it is still being forked) and only sends its code: the fork is off the request path.

// nextProgram is a slot's next program: being forked, then ready (done closed, l set; nil
// when the fork failed).
type nextProgram struct {
	server *forkServer
	done   chan struct{}
	l      *launch
}

// reserveNext reserves slot's next program, to be made by prepareNext; nil when there is no
// fork server to make it with (or the executor is stopping). It is called while the slot is
// still busy.
func (e *Executor) reserveNext(slot int) *nextProgram {
	s, _ := e.forks.server(nil)
	if s == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopping {
		return nil
	}
	n := &nextProgram{server: s, done: make(chan struct{})}
	e.next[slot] = n
	return n
}

// prepareNext forks slot's next program.
func (e *Executor) prepareNext(slot int, n *nextProgram) {
	l, err := e.launchProgram(slot, n.server, false, "next-"+strconv.Itoa(slot))
	if err != nil {
		e.log.Warn("forking a slot's next program", "slot", slot, "error", err)
	}
	n.l = l
	close(n.done)
}

// takeNext returns slot's next program, waiting for it while it is being forked; nil when
// there is none (or it died waiting, or its server was replaced meanwhile: it is discarded).
func (e *Executor) takeNext(slot int) *launch {
	e.mu.Lock()
	n := e.next[slot]
	delete(e.next, slot)
	e.mu.Unlock()
	if n == nil {
		return nil
	}
	<-n.done
	l := n.l
	if l != nil && (l.exited() || l.server.isRetired()) {
		e.discard(l)
		return nil
	}
	return l
}

// dropNext ends the ready programs forked by s, a server that takes no more runs, so that it
// can end (it waits for its children). It touches nothing else of their slots: a program still
// being forked is discarded by the run that takes it.
func (e *Executor) dropNext(s *forkServer) {
	e.mu.Lock()
	var drop []*launch
	for slot, n := range e.next {
		select {
		case <-n.done:
			if n.l != nil && n.server == s {
				drop = append(drop, n.l)
				delete(e.next, slot)
			}
		default:
		}
	}
	e.mu.Unlock()
	for _, l := range drop {
		s.killChild(l.proc.(*forkChild))
		l.close()
	}
}

// discardNext discards every slot's ready program (the executor is stopping: stopAll has set
// stopping, so no more are reserved).
func (e *Executor) discardNext() {
	e.mu.Lock()
	next := e.next
	e.next = map[int]*nextProgram{}
	e.mu.Unlock()
	for _, n := range next {
		<-n.done
		if n.l != nil {
			e.discard(n.l)
		}
	}
}
