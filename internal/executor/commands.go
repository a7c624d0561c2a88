package executor

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A session's commands (KindCommand). Each runs as the session's uid, in its home, with a
// minimal environment (nothing of the executor's), the egress proxy's settings and pip's (the
// daemon's index and trust settings, installing into the session's own site directory, which
// its interpreter has on its path). A foreground command's stdout and stderr (or its terminal)
// go to the daemon as chunks under the command's caps; a command that passes a cap is killed
// with every process it started (outcome output_limit), as is one past its timeout (outcome
// timeout). A background command's output has no cap: the box keeps its latest bytes (a ring
// per stream) and sends chunks only while the daemon has a reader attached (KindProcAttach), so
// output no one reads never crosses the line (H83: eight background `yes` had the daemon
// decode 132 MB each in 8 s, and slowed other sessions' calls). The command's end is its own process's: what it left running
// (a server started with &) lives on until the session ends, without its output.
//
// Every process a command starts is marked: the command runs with a group of its own (gid
// commandGID, the session's gid as its supplementary group, so its files stay the session's
// user's), which an unprivileged process can neither drop nor change, through fork, setsid
// or a double fork. Killing "the command with every process it started" is killing every
// process of that gid (killGID), while the interpreter and the other commands of the same uid
// live on. (A subreaper would need prctl's PR_SET_CHILD_SUBREAPER, which gVisor lacks.)

// proc is one command of the session.
type proc struct {
	e      *Executor
	id     string
	slot   int
	gid    int // the command's own group (see the comment at the top of the file)
	spec   sandbox.CommandSpec
	cmd    *exec.Cmd
	pid    int
	start  time.Time
	exited chan struct{} // closed once its own process has ended (status set)
	status syscall.WaitStatus

	stdin    *os.File      // the write end of its stdin pipe, or the terminal's master; nil once closed
	tty      *os.File      // the terminal's master (PTY mode)
	ttyRead  chan struct{} // closed when the terminal's pump has read all it will (PTY mode)
	stdout   *os.File      // read ends (stdout is the master in PTY mode; stderr then nil)
	stderr   *os.File
	inputMu  sync.Mutex // serialises writes to stdin
	pumpMu   sync.Mutex // held while a chunk is read and passed on (see interp.pump)
	out, err *capture   // nil once detached
	// A background command's latest output (stdout, stderr) and the daemon's readers
	// attached to it (KindProcAttach), under pumpMu: its chunks are sent while there is one.
	ring    [2]ring
	readers map[string]bool

	mu     sync.Mutex
	reason stopReason
	ended  bool
}

// sessionHome returns slot's session home (its working directory: Config.SessionHome when
// set), made the first time a session's command, file or call needs it, with the session's
// user site directory (pip's --user target) in it; its state directory (outside the home) is
// made and seeded then too, as a run's is.
func (e *Executor) sessionHome(slot int) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	home := e.slotDir(slot)
	if e.homesReady[slot] {
		return home, nil
	}
	uid := e.cfg.UIDBase + slot
	if err := os.MkdirAll(home, 0o700); err != nil {
		return "", fmt.Errorf("making the session's home %s: %w", home, err)
	}
	if err := os.Chown(home, uid, uid); err != nil {
		return "", fmt.Errorf("giving the session's home to uid %d: %w", uid, err)
	}
	if err := os.Chmod(home, 0o700); err != nil {
		return "", err
	}
	state := e.stateDir(slot)
	if err := freshDir(state, uid); err != nil {
		return "", fmt.Errorf("the session's state directory: %w", err)
	}
	if err := e.seedState(uid, state); err != nil {
		return "", err
	}
	if err := asUserThread(uid, func() error { return os.MkdirAll(e.userSite(slot), 0o755) }); err != nil {
		return "", fmt.Errorf("making the session's site directory: %w", err)
	}
	e.homesReady[slot] = true
	return home, nil
}

// userBase is the session's PYTHONUSERBASE; userSite its site directory, where `pip install`
// in a command installs.
func (e *Executor) userBase(slot int) string { return filepath.Join(e.slotDir(slot), ".local") }

func (e *Executor) userSite(slot int) string {
	v := e.pythonVersion
	if parts := strings.SplitN(v, ".", 3); len(parts) >= 2 {
		v = parts[0] + "." + parts[1]
	}
	return filepath.Join(e.userBase(slot), "lib", "python"+v, "site-packages")
}

// commandEnv is a command's environment: a run's minimal one with the session's home, the
// proxy's and pip's settings, the secrets' trust bundle, then the request's own variables.
func (e *Executor) commandEnv(slot int, c protocol.Command) ([]string, error) {
	home := e.slotDir(slot)
	env := runEnvironment(home, e.stateDir(slot), e.cfg.proxyEnv())
	env = append(env, "USER=user", "LOGNAME=user", "SHELL=/bin/bash", "PWD="+home, "TERM=xterm-256color",
		"PYTHONUSERBASE="+e.userBase(slot), "PIP_USER=1", "PIP_BREAK_SYSTEM_PACKAGES=1", "PIP_NO_INPUT=1",
		"PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_WARN_SCRIPT_LOCATION=1")
	env[0] = "PATH=" + e.userBase(slot) + "/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	if c.Pip.IndexURL != "" {
		env = append(env, "PIP_INDEX_URL="+c.Pip.IndexURL)
	}
	if len(c.Pip.ExtraIndexURLs) > 0 {
		env = append(env, "PIP_EXTRA_INDEX_URL="+strings.Join(c.Pip.ExtraIndexURLs, " "))
	}
	if len(c.Pip.TrustedHosts) > 0 {
		env = append(env, "PIP_TRUSTED_HOST="+strings.Join(c.Pip.TrustedHosts, " "))
	}
	if c.Pip.BinaryOnly {
		env = append(env, "PIP_ONLY_BINARY=:all:")
	}
	if c.Spec.SecretCA != "" {
		vars, err := e.secretCAEnv(c.Spec.SecretCA)
		if err != nil {
			return nil, err
		}
		env = append(env, vars...)
	}
	for _, k := range slices.Sorted(maps.Keys(c.Spec.Env)) {
		env = append(env, k+"="+c.Spec.Env[k])
	}
	return env, nil
}

// startCommand starts process id (see the comment at the top of the file) and reports it
// started (or why not), then serves it until it ends.
func (e *Executor) startCommand(slot int, id string, c protocol.Command) {
	p, err := e.launchCommand(slot, id, c)
	if err != nil {
		msg := err.Error()
		class := ""
		if fe, ok := errors.AsType[*fileError](err); ok {
			class = fe.class.Error()
		}
		e.send(&protocol.Message{Kind: protocol.KindProcStarted, ID: id, Error: msg, ErrorClass: class})
		return
	}
	e.send(&protocol.Message{Kind: protocol.KindProcStarted, ID: id, ProcStarted: &protocol.ProcStarted{PID: p.pid}})
	e.wg.Go(func() { p.serve() })
}

// commandDir is the box's directory of a command's cwd (the session's view) and its view: under
// SessionHome, the session's home's; elsewhere, with anyCwd, that directory of the box (the
// caller checks the session's user may enter it), else refused.
func commandDir(home, cwd string, anyCwd bool) (dir, view string, err error) {
	if anyCwd && !strings.ContainsRune(cwd, 0) {
		abs := cwd
		if !strings.HasPrefix(abs, "/") {
			abs = sandbox.SessionHome + "/" + abs
		}
		if clean := path.Clean(abs); clean != sandbox.SessionHome && !strings.HasPrefix(clean, sandbox.SessionHome+"/") {
			return clean, clean, nil
		}
	}
	p, err := resolvePath("cwd", cwd)
	if err != nil {
		return "", "", err
	}
	return filepath.Join(append([]string{home}, p.parts...)...), p.view, nil
}

func (e *Executor) launchCommand(slot int, id string, c protocol.Command) (*proc, error) {
	if len(c.Spec.Argv) == 0 || c.Spec.Argv[0] == "" {
		return nil, fileErr(errclass.Invalid, "the command is empty: give cmd or argv")
	}
	e.mu.Lock()
	dup := e.procs[id] != nil
	e.mu.Unlock()
	if dup {
		return nil, fileErr(errclass.Conflict, "process %s exists already", id)
	}
	home, err := e.sessionHome(slot)
	if err != nil {
		return nil, err
	}
	uid := e.cfg.UIDBase + slot
	dir := home
	if c.Spec.Cwd != "" {
		var view string
		if dir, view, err = commandDir(home, c.Spec.Cwd, c.Spec.AnyCwd); err != nil {
			return nil, err
		}
		if err := asUserThread(uid, func() error {
			st, err := os.Stat(dir)
			if err != nil {
				return errnoError(view, "cwd", errors.Unwrap(err))
			}
			if !st.IsDir() {
				return fileErr(errclass.Conflict, "cwd %s is not a directory", view)
			}
			if err := unix.Faccessat(unix.AT_FDCWD, dir, unix.R_OK|unix.X_OK, unix.AT_EACCESS); err != nil { // as the session's uid
				return fileErr(errclass.Forbidden, "cwd %s: the session's user may not enter and read it", view)
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	env, err := e.commandEnv(slot, c)
	if err != nil {
		return nil, err
	}
	env = append(env, "PWD="+dir)
	p := &proc{e: e, id: id, slot: slot, gid: e.commandGID(), spec: c.Spec, exited: make(chan struct{})}
	var childIn, childOut, childErr *os.File
	if c.Spec.PTY != nil {
		master, slave, err := pty.Open()
		if err != nil {
			return nil, fmt.Errorf("opening a terminal: %w", err)
		}
		defer slave.Close()
		if err := pty.Setsize(master, &pty.Winsize{Rows: c.Spec.PTY.Rows, Cols: c.Spec.PTY.Cols}); err != nil {
			master.Close()
			return nil, fmt.Errorf("sizing the terminal: %w", err)
		}
		p.tty, p.stdin, p.stdout, p.ttyRead = master, master, master, make(chan struct{})
		childIn, childOut, childErr = slave, slave, slave
	} else {
		inR, inW, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			inR.Close()
			inW.Close()
			return nil, err
		}
		errR, errW, err := os.Pipe()
		if err != nil {
			inR.Close()
			inW.Close()
			outR.Close()
			outW.Close()
			return nil, err
		}
		defer inR.Close()
		defer outW.Close()
		defer errW.Close()
		p.stdin, p.stdout, p.stderr = inW, outR, errR
		childIn, childOut, childErr = inR, outW, errW
	}
	prog := c.Spec.Argv[0]
	if !strings.Contains(prog, "/") {
		path := "/usr/local/bin:/usr/bin:/bin"
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, "PATH="); ok {
				path = v
			}
		}
		found := ""
		for _, d := range filepath.SplitList(path) {
			cand := filepath.Join(d, prog)
			if st, err := os.Stat(cand); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
				found = cand
				break
			}
		}
		if found == "" {
			p.closeFiles()
			return nil, fileErr(errclass.Invalid, "%s: command not found (PATH is %s)", prog, path)
		}
		prog = found
	}
	path, args := e.limited(prog, c.Spec.Argv, c.Spec.Processes, c.Spec.OpenFiles)
	cmd := &exec.Cmd{Path: path, Args: args, Env: env, Dir: dir, Stdin: childIn, Stdout: childOut, Stderr: childErr}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: c.Spec.PTY != nil, Ctty: 0,
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(p.gid), Groups: []uint32{uint32(uid)}}}
	e.changingUID.Lock()
	err = cmd.Start() // returns once the program has become uid and exec'd
	e.changingUID.Unlock()
	if err != nil {
		p.closeFiles()
		return nil, fileErr(errclass.Invalid, "starting %s: %v", c.Spec.Argv[0], err)
	}
	p.cmd, p.pid, p.start = cmd, cmd.Process.Pid, time.Now()
	go func() {
		_ = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
			p.status = ws
		}
		close(p.exited)
	}()
	p.out = p.newCapture(0, c.Spec.StdoutBytes, stopStdoutLimit)
	if p.stderr != nil {
		p.err = p.newCapture(1, c.Spec.StderrBytes, stopStderrLimit)
	}
	e.mu.Lock()
	e.procs[id] = p
	e.mu.Unlock()
	go p.pump(p.stdout, false)
	if p.stderr != nil {
		go p.pump(p.stderr, true)
	}
	go p.feed(c.Spec.Stdin, !c.Spec.KeepStdin)
	return p, nil
}

// commandGIDBase is the first of a session's command groups: far above every uid and gid of
// the image (slots, sessions, the installer), and unique to the session (its uid's offset).
const commandGIDBase = 1 << 20

// commandGID returns a new group for a command of the session: one of 4096 per session, used
// in turn (a group is free again once its command's processes are gone).
func (e *Executor) commandGID() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gidSeq++
	return commandGIDBase + (e.cfg.UIDBase%4096)*4096 + e.gidSeq%4096
}

func (p *proc) closeFiles() {
	for _, f := range []*os.File{p.stdin, p.stdout, p.stderr} {
		if f != nil {
			f.Close()
		}
	}
}

// newCapture returns the capture of stream i (0 stdout, 1 stderr), called under pumpMu.
func (p *proc) newCapture(i int, limit int64, reason stopReason) *capture {
	kind := [2]protocol.Kind{protocol.KindStdout, protocol.KindStderr}[i]
	return &capture{
		limit: limit,
		emit: func(s string) {
			if p.spec.Background {
				p.ring[i].write(s)
				if len(p.readers) == 0 {
					return // kept in the box only: no one reads it
				}
			}
			if err := p.e.conn.Send(&protocol.Message{Kind: kind, ID: p.id, Data: s}); err != nil {
				p.e.log.Debug("sending a command's output", "id", p.id, "error", err)
			}
		},
		onLimit: func() { go p.stop(reason) },
	}
}

// feed writes the command's first input, then closes its stdin when asked.
func (p *proc) feed(data []byte, closeAfter bool) {
	if len(data) == 0 && !closeAfter {
		return
	}
	if err := p.input(data, closeAfter); err != nil {
		p.e.log.Debug("writing a command's stdin", "id", p.id, "error", err)
	}
}

// stdinWait is how long a write to a command's stdin waits for the command to read any of it:
// a command that never read held the write, and every later input call, for good, with the
// data in the daemon's and the box's memory (trial, 2 December 2026).
const stdinWait = 10 * time.Second

// input writes data to the command's stdin (its terminal), then closes it when closeIn is set
// (a terminal gets end-of-file, ^D, instead). A write the command takes nothing of for
// stdinWait fails (errclass.Conflict), saying how much it took.
func (p *proc) input(data []byte, closeIn bool) error {
	p.inputMu.Lock()
	defer p.inputMu.Unlock()
	if p.stdin == nil {
		if len(data) == 0 {
			return nil
		}
		return fileErr(errclass.Conflict, "process %s's stdin is closed", p.id)
	}
	if len(data) > 0 {
		// A terminal may have no deadline (gVisor's master is not pollable): it waits as before.
		f := p.stdin
		defer func() { _ = f.SetWriteDeadline(time.Time{}) }()
		// In writes of PIPE_BUF bytes, which a pipe takes whole or not at all, so that a wait
		// counts from the command's last read (a write of more was given a new wait for the bytes
		// the pipe's buffer had taken at once, and failed after 20 s: trial).
		const pipeBuf = 4096
		for took := 0; took < len(data); {
			_ = f.SetWriteDeadline(time.Now().Add(stdinWait))
			n, err := f.Write(data[took:min(took+pipeBuf, len(data))])
			took += n
			switch {
			case err == nil:
			case errors.Is(err, os.ErrDeadlineExceeded):
				return fileErr(errclass.Conflict, "process %s did not read its stdin for %s: it took %d of the %d bytes; send the rest once it reads",
					p.id, stdinWait, took, len(data))
			default:
				return fileErr(errclass.Conflict, "writing to process %s's stdin: %v", p.id, err)
			}
		}
	}
	if closeIn {
		if p.tty != nil {
			_, err := p.tty.Write([]byte{4})
			return err
		}
		err := p.stdin.Close()
		p.stdin = nil
		return err
	}
	return nil
}

// stop ends the command for reason (the first wins), killing every process it started.
func (p *proc) stop(reason stopReason) {
	p.mu.Lock()
	if p.reason != stopNone || p.ended {
		p.mu.Unlock()
		return
	}
	p.reason = reason
	p.mu.Unlock()
	if err := p.e.killGID(p.gid, p.e.cfg.KillTimeout); err != nil {
		p.e.log.Error("killing a command's processes", "id", p.id, "error", err)
	}
}

// signal sends the command's process group sig.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	ended := p.ended
	p.mu.Unlock()
	if ended {
		return fileErr(errclass.Conflict, "process %s has ended", p.id)
	}
	if sig == syscall.SIGKILL {
		go p.stop(stopCancelled)
		return nil
	}
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// pump passes the command's stdout (or stderr) to its capture until detached (or the end of
// the stream); see interp.pump.
func (p *proc) pump(f *os.File, stderr bool) {
	if f == p.tty {
		// A terminal is read outside pumpMu: under gVisor its master may not be pollable,
		// and a blocking read must not hold the lock the command's end takes.
		defer close(p.ttyRead)
		buf := make([]byte, 64<<10)
		for {
			n, err := f.Read(buf)
			if n > 0 {
				p.pumpMu.Lock()
				if p.out != nil {
					p.out.write(buf[:n])
				}
				p.pumpMu.Unlock()
			}
			if err != nil { // EIO once the terminal's other side is closed
				return
			}
		}
	}
	pumpLocked(f, &p.pumpMu, func(b []byte) {
		c := p.out
		if stderr {
			c = p.err
		}
		if c != nil {
			c.write(b)
		}
	})
}

// serve waits for the command's own process to end (or its timeout), passes on what it wrote
// before, and reports its end.
func (p *proc) serve() {
	var timer *time.Timer
	if p.spec.TimeoutMS > 0 {
		timer = time.AfterFunc(time.Duration(p.spec.TimeoutMS)*time.Millisecond, func() { p.stop(stopTimeout) })
	}
	if p.e.cfg.GVisor && p.spec.Processes > 0 {
		go p.watchCommand()
	}
	<-p.exited
	status := &p.status
	if timer != nil {
		timer.Stop()
	}
	p.drain()
	p.mu.Lock()
	p.ended = true
	reason := p.reason
	p.mu.Unlock()
	end := &sandbox.ProcessEnd{ExitCode: -1, DurationMS: time.Since(p.start).Milliseconds()}
	p.pumpMu.Lock()
	if p.out != nil {
		p.out.close()
		end.StdoutTruncated = p.out.truncated
	}
	if p.err != nil {
		p.err.close()
		end.StderrTruncated = p.err.truncated
	}
	p.out, p.err = nil, nil
	var tail *sandbox.ProcessTail
	if p.spec.Background {
		tail = p.tail("", true)
	}
	p.pumpMu.Unlock()
	switch {
	case status.Signaled():
		name := signalName(int(status.Signal()))
		end.Signal, _, _ = strings.Cut(name, ":")
		if !strings.HasPrefix(end.Signal, "SIG") {
			end.Signal = fmt.Sprintf("signal %d", int(status.Signal()))
		}
		end.Outcome, end.Reason = sandbox.OutcomeError, "the command was killed by "+name
	default:
		end.ExitCode = status.ExitStatus()
		end.Outcome = sandbox.OutcomeOK
		if end.ExitCode != 0 {
			end.Outcome, end.Reason = sandbox.OutcomeError, fmt.Sprintf("the command exited with status %d", end.ExitCode)
		}
	}
	switch reason {
	case stopTimeout:
		end.Outcome = sandbox.OutcomeTimeout
		end.Reason = fmt.Sprintf("the command passed its timeout of %d ms and was killed with every process it started", p.spec.TimeoutMS)
	case stopStdoutLimit:
		end.Outcome = sandbox.OutcomeOutputLimit
		end.Reason = fmt.Sprintf("the command wrote more than its %d bytes of stdout and was killed with every process it started", p.spec.StdoutBytes)
	case stopStderrLimit:
		end.Outcome = sandbox.OutcomeOutputLimit
		end.Reason = fmt.Sprintf("the command wrote more than its %d bytes of stderr and was killed with every process it started", p.spec.StderrBytes)
	case stopCancelled:
		end.Outcome = sandbox.OutcomeKilled
		end.Reason = "the command was killed (SIGKILL) with every process it started"
	case stopProcessLimit:
		end.Outcome = sandbox.OutcomeKilled
		end.Reason = fmt.Sprintf("the command reached its limit of %d processes and was killed with every process it started "+
			"(under runsc a command is stopped at its process cap: a fork storm there would exhaust the sandbox's host threads)", p.spec.Processes)
	}
	// Its output streams now end here: processes it left running write into closed pipes.
	p.inputMu.Lock()
	p.closeFiles()
	p.stdin = nil
	p.inputMu.Unlock()
	p.e.mu.Lock()
	delete(p.e.procs, p.id)
	p.e.mu.Unlock()
	p.e.send(&protocol.Message{Kind: protocol.KindProcEnded, ID: p.id, ProcEnded: end, ProcTail: tail})
}

// tail returns what the command's box kept of its output (only its counts without withData),
// under pumpMu.
func (p *proc) tail(reader string, withData bool) *sandbox.ProcessTail {
	t := &sandbox.ProcessTail{Reader: reader, StdoutBytes: p.ring[0].total, StderrBytes: p.ring[1].total}
	if withData {
		t.Stdout, t.Stderr = p.ring[0].kept(), p.ring[1].kept()
	}
	return t
}

// attach makes reader a reader of the command's output: it sends what the box kept, then
// (with pumpMu held between the two, so no chunk comes between) the chunks from now on. A
// foreground command's chunks are sent anyway: its tail is empty.
func (p *proc) attach(reader string, withData bool) {
	p.pumpMu.Lock()
	defer p.pumpMu.Unlock()
	if p.readers == nil {
		p.readers = map[string]bool{}
	}
	p.readers[reader] = true
	p.e.send(&protocol.Message{Kind: protocol.KindProcTail, ID: p.id, ProcTail: p.tail(reader, withData && p.spec.Background)})
}

// detach ends reader's reading: with no reader left, a background command's output stays in
// the box.
func (p *proc) detach(reader string) {
	p.pumpMu.Lock()
	delete(p.readers, reader)
	p.pumpMu.Unlock()
}

// drain passes on what the command wrote before its end: it waits (a second at most) for the
// terminal's pump to end, or reads its streams (each non-blocking) until they hold nothing,
// under pumpMu, for at most 200 ms (a process it left running may keep writing).
func (p *proc) drain() {
	if p.tty != nil {
		// The terminal's pump reads until its other side is closed by every process that holds
		// it, which is at once unless the command left one running: wait for it, not for a
		// clock (50 ms lost a command's whole output on a loaded machine, CI 7 December).
		select {
		case <-p.ttyRead:
		case <-time.After(time.Second):
		}
	}
	p.pumpMu.Lock()
	defer p.pumpMu.Unlock()
	deadline := time.Now().Add(200 * time.Millisecond)
	buf := make([]byte, 64<<10)
	for i, f := range []*os.File{p.stdout, p.stderr} {
		c := p.out
		if i == 1 {
			c = p.err
		}
		if f == nil || c == nil || f == p.tty {
			continue
		}
		rc, err := f.SyscallConn()
		if err != nil {
			continue
		}
		_ = rc.Control(func(fd uintptr) {
			for time.Now().Before(deadline) {
				n, err := syscall.Read(int(fd), buf)
				if errors.Is(err, syscall.EINTR) {
					continue
				}
				if n <= 0 {
					return
				}
				c.write(buf[:n])
			}
		})
	}
}

// procOp serves a KindProcInput, KindProcSignal, KindProcResize, KindProcAttach or
// KindProcDetach message.
func (e *Executor) procOp(m *protocol.Message) {
	var id string
	switch {
	case m.ProcAttach != nil:
		id = m.ProcAttach.Proc
	case m.ProcInput != nil:
		id = m.ProcInput.Proc
	case m.ProcSignal != nil:
		id = m.ProcSignal.Proc
	case m.ProcResize != nil:
		id = m.ProcResize.Proc
	}
	e.mu.Lock()
	p := e.procs[id]
	e.mu.Unlock()
	ack := &protocol.Message{Kind: protocol.KindProcAck, ID: m.ID}
	var err error
	switch {
	case p == nil:
		err = fileErr(errclass.NotFound, "the session has no running process %q", id)
	case m.ProcAttach != nil && m.Kind == protocol.KindProcAttach:
		p.attach(m.ProcAttach.Reader, m.ProcAttach.Tail)
	case m.ProcAttach != nil:
		p.detach(m.ProcAttach.Reader)
	case m.ProcInput != nil:
		err = p.input(m.ProcInput.Data, m.ProcInput.Close)
	case m.ProcSignal != nil:
		sig, ok := signalNumbers[m.ProcSignal.Signal]
		if !ok {
			err = fileErr(errclass.Invalid, "%q is not a signal sandpit sends; use one of %s", m.ProcSignal.Signal, strings.Join(sandbox.Signals, ", "))
		} else {
			err = p.signal(sig)
		}
	case m.ProcResize != nil:
		if p.tty == nil {
			err = fileErr(errclass.Conflict, "process %s has no terminal to resize (start it with pty)", id)
		} else {
			err = pty.Setsize(p.tty, &pty.Winsize{Rows: m.ProcResize.Size.Rows, Cols: m.ProcResize.Size.Cols})
		}
	}
	if err != nil {
		ack.Error = err.Error()
		if fe, ok := errors.AsType[*fileError](err); ok {
			ack.ErrorClass = fe.class.Error()
		}
	}
	e.send(ack)
}

var signalNumbers = map[string]syscall.Signal{"SIGINT": syscall.SIGINT, "SIGTERM": syscall.SIGTERM, "SIGKILL": syscall.SIGKILL,
	"SIGHUP": syscall.SIGHUP, "SIGQUIT": syscall.SIGQUIT, "SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2,
	"SIGSTOP": syscall.SIGSTOP, "SIGCONT": syscall.SIGCONT}
