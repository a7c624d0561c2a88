package executor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Session interpreters. A run whose spec has Session set is a call in its slot's session
// interpreter: one long-lived bootstrap (started cold at the slot's first call) that runs
// call after call in one module, so globals, imports and the slot's working directory persist.
// Per call the executor writes the input files, sends the call's init line, routes the
// interpreter's stdout and stderr to the call (with the call's caps), answers its agent.*
// calls, reads its OUTPUT and waits for its "done" report; the output files are those the call
// created or changed. A call that passes its timeout (or a cap, or is cancelled) is
// interrupted with SIGINT (KeyboardInterrupt in the program); one that has not ended
// InterruptGrace later is killed with every process of the slot's uid, and the session is
// over. A call whose outcome is memory_limit ends it too, and so does an interpreter that
// exits by itself. An ended session answers every later call with a sandbox_error whose
// Result.SessionEnded says why: the executor never starts a second interpreter for a slot.

// InterruptGrace is how long a session's call may take to end after its interrupt (SIGINT)
// before the executor kills its interpreter, ending the session.
const InterruptGrace = 2 * time.Second

// startSession is Result.Start for a session's call.
const startSession = "session"

// The reasons a session ends (sandbox.Result.SessionEnded).
const (
	EndedKilled       = "killed"        // a call did not stop within InterruptGrace of its interrupt
	EndedMemoryLimit  = "memory_limit"  // a call ran out of memory
	EndedExited       = "exited"        // the interpreter ended by itself (os._exit, a signal)
	EndedSandboxError = "sandbox_error" // the interpreter could not be started or read
)

// interp is a slot's session interpreter.
type interp struct {
	e    *Executor
	slot int
	uid  int
	l    *launch
	pid  int

	exited  chan struct{} // closed once the interpreter's process has ended
	status  exit          // how it ended, set before exited is closed
	waitErr error

	dones chan controlReport // "done" reports of the current call

	pumpMu sync.Mutex // held while a chunk of stdout or stderr is read and passed on

	mu       sync.Mutex
	cur      *run     // the call running, nil between calls
	out, err *capture // cur's captures
	seq      int      // calls sent
	grace    *time.Timer
	killed   bool   // the grace ran out: the executor killed the interpreter
	ended    string // why the session ended; "" while it lives
	reason   string // the sentence that says so
	maxLine  int
}

// serveSessionCall runs r, a session's call, and sends its result and the slot's settlement:
// nothing is cleaned between a session's calls.
func (e *Executor) serveSessionCall(r *run) {
	res := e.sessionCall(r)
	e.mu.Lock()
	delete(e.runs, r.id)
	e.mu.Unlock()
	e.send(&protocol.Message{Kind: protocol.KindResult, ID: r.id, Result: res})
	e.mu.Lock()
	delete(e.busy, r.slot)
	e.mu.Unlock()
	e.send(&protocol.Message{Kind: protocol.KindSettled, Slot: r.slot})
}

// sessionCall runs r in its slot's interpreter, starting it at the slot's first call.
func (e *Executor) sessionCall(r *run) *sandbox.Result {
	e.mu.Lock()
	ip := e.interps[r.slot]
	e.mu.Unlock()
	if ip == nil {
		var err error
		if ip, err = e.startInterp(r); err != nil {
			res := r.systemError(&sandbox.Result{ExitCode: -1}, "starting the session's interpreter: %v", err)
			res.SessionEnded = EndedSandboxError
			return res
		}
	}
	return ip.run(r)
}

// startInterp starts slot's session interpreter in a fresh working directory. The slot's
// next program, forked ahead for a run (see reserveNext), is not an interpreter: it is ended
// first, waited for while it is still being forked, since its fork clears and seeds the same
// directories (both at once lost the seeded files, on CI).
func (e *Executor) startInterp(r *run) (*interp, error) {
	if next := e.takeNext(r.slot); next != nil {
		e.discard(next)
	}
	l, err := e.launchProgram(r.slot, nil, true, r.id)
	if err != nil {
		return nil, err
	}
	cold, ok := l.proc.(coldProcess)
	if !ok {
		l.close()
		return nil, errors.New("the interpreter was not started cold")
	}
	ip := &interp{e: e, slot: r.slot, uid: e.cfg.UIDBase + r.slot, l: l, pid: cold.cmd.Process.Pid,
		exited: make(chan struct{}), dones: make(chan controlReport, 1), maxLine: r.spec.CallBytes + 64<<10}
	go func() {
		ip.status, ip.waitErr = l.proc.wait()
		close(ip.exited)
	}()
	go ip.pump(l.stdout, false)
	go ip.pump(l.stderr, true)
	go ip.serve()
	e.mu.Lock()
	e.interps[r.slot] = ip
	e.mu.Unlock()
	return ip, nil
}

// run runs one call (see the comment at the top of the file).
func (ip *interp) run(r *run) *sandbox.Result {
	e := ip.e
	res := &sandbox.Result{ExitCode: -1}
	if ended, why := ip.endedBefore(); ended != "" {
		res.Outcome, res.Reason, res.SessionEnded = sandbox.OutcomeSandboxError, "the session has ended: "+why, ended
		return res
	}
	dir := e.slotDir(ip.slot)
	if dir == e.cfg.SessionHome {
		// What `pip install` in a command installed is importable in the next call.
		r.spec.Paths = append(slices.Clone(r.spec.Paths), e.userSite(ip.slot))
	}
	if err := writeInputFiles(dir, ip.uid, r.spec.Files); err != nil {
		res.Outcome, res.Reason = sandbox.OutcomeError, fmt.Sprintf("%v (an input file may not replace a file of the session's directory; give it a new name)", err)
		return res
	}
	before := stampFiles(dir)
	oomBefore, oomKnown := oomKills()

	outCap := r.newCapture(protocol.KindStdout, r.spec.Limits.StdoutBytes, stopStdoutLimit)
	errCap := r.newCapture(protocol.KindStderr, r.spec.Limits.StderrBytes, stopStderrLimit)
	ip.mu.Lock()
	ip.seq++
	seq := ip.seq
	ip.cur, ip.out, ip.err = r, outCap, errCap
	ip.mu.Unlock()
	r.mu.Lock()
	r.proc, r.interrupt = ip.l.proc, func() { ip.interrupt(r) }
	r.inOrder = func(fn func()) {
		ip.pumpMu.Lock()
		defer ip.pumpMu.Unlock()
		fn()
	}
	cancelled := r.reason != stopNone
	r.mu.Unlock()
	if cancelled {
		ip.detach(r)
		res.Outcome, res.Reason = sandbox.OutcomeKilled, "cancelled before the call started"
		return res
	}
	if err := ip.send(r, seq); err != nil {
		ip.detach(r)
		return r.systemError(res, "encoding the call: %v", err)
	}
	started := time.Now()
	res.StartedAt, res.Start = started.UTC(), startSession
	timer := time.AfterFunc(time.Duration(r.spec.TimeoutMS)*time.Millisecond, func() { r.stop(stopTimeout) })
	if e.cfg.GVisor {
		go r.watch()
	}
	done := ip.await(seq)
	timer.Stop()
	res.DurationMS = time.Since(started).Milliseconds()
	killed := ip.stopGrace()
	if done != nil && !killed {
		ip.drain()
	}
	ip.detach(r)
	r.lines.flush()
	r.mu.Lock()
	res.Error = r.execError
	r.mu.Unlock()
	if done != nil {
		res.ExecutionCount = done.ExecutionCount
	}
	res.StdoutTruncated, res.StderrTruncated = outCap.truncated, errCap.truncated

	var status syscall.WaitStatus
	var waitErr error
	alive := done != nil && !killed
	if !alive {
		if err := e.killAndWait(ip.uid, e.cfg.KillTimeout); err != nil {
			r.systemError(res, "killing the session's processes: %v", err)
		}
		<-ip.exited
		status, waitErr = ip.status.status, ip.waitErr
	} else {
		status = syscall.WaitStatus(uint32(done.Status&0xff) << 8)
	}
	ip.collect(r, res, before)
	if oomAfter, ok := oomKills(); oomKnown && ok && oomAfter > oomBefore {
		res.OOMKills = int(oomAfter - oomBefore)
	}
	r.classify(res, status, waitErr)
	ip.endAfter(r, res, killed, alive)
	return res
}

// send writes call seq's init line to the interpreter, without waiting for the write (the
// interpreter may be busy); an error is the line's encoding.
func (ip *interp) send(r *run, seq int) error {
	line := r.initLine()
	line["call"] = seq
	init, err := json.Marshal(line)
	if err != nil {
		return err
	}
	go func() {
		if _, err := ip.l.control.Write(append(init, '\n')); err != nil {
			ip.e.log.Debug("writing a session call", "id", r.id, "error", err)
		}
	}()
	return nil
}

// stopGrace stops the timer that kills a call which ignores its interrupt, and says whether
// the call was killed (or its kill is on its way).
func (ip *interp) stopGrace() bool {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	killed := ip.killed
	if ip.grace != nil && !ip.grace.Stop() {
		killed = true // the kill is on its way
	}
	ip.grace = nil
	return killed
}

// endedBefore returns how the session ended and why, or "" while it goes on; an interpreter
// that exited between calls ends it now.
func (ip *interp) endedBefore() (ended, why string) {
	ip.mu.Lock()
	ended, why = ip.ended, ip.reason
	ip.mu.Unlock()
	if ended == "" {
		select {
		case <-ip.exited:
			ended, why = ip.end(EndedExited, "the session's interpreter ended between calls ("+ip.endedWith()+")")
		default:
		}
	}
	return ended, why
}

// await waits for the end of call seq: its report, or nil when the interpreter exited first.
func (ip *interp) await(seq int) *controlReport {
	for {
		select {
		case d := <-ip.dones:
			if d.Call == seq { // an earlier call's late report is not this one's end
				return &d
			}
		case <-ip.exited:
			return nil
		}
	}
}

// endAfter ends the session after a call that was killed, ran out of memory or whose
// interpreter did not survive (alive false), saying so in res; a call that timed out and was
// interrupted leaves it going, with its state.
func (ip *interp) endAfter(r *run, res *sandbox.Result, killed, alive bool) {
	switch {
	case killed:
		res.SessionEnded, _ = ip.end(EndedKilled, fmt.Sprintf("a call did not stop within %s of its interrupt (KeyboardInterrupt) and was killed with the interpreter", InterruptGrace))
		res.Reason += fmt.Sprintf("; it did not stop within %s of its interrupt, so the session's interpreter was killed and the session ended", InterruptGrace)
	case res.Outcome == sandbox.OutcomeMemoryLimit:
		res.SessionEnded, _ = ip.end(EndedMemoryLimit, "a call ran out of memory: "+res.Reason)
		res.Reason += "; the session ended"
	case !alive:
		res.SessionEnded, _ = ip.end(EndedExited, "the session's interpreter ended during a call ("+ip.endedWith()+")")
		res.Reason += "; the session's interpreter ended, and the session with it"
	case res.Outcome == sandbox.OutcomeTimeout:
		res.Reason = fmt.Sprintf("the call passed its timeout of %d ms and was interrupted (KeyboardInterrupt); the session keeps its state", r.spec.TimeoutMS)
	}
}

// collect sends the call's output files: those it created or changed in the session's
// directory.
func (ip *interp) collect(r *run, res *sandbox.Result, before *snapshot) {
	send := func(f sandbox.File, content []byte) {
		if err := ip.e.conn.Send(&protocol.Message{Kind: protocol.KindFile, ID: r.id, File: &f, FileContent: content}); err != nil {
			ip.e.log.Warn("sending an output file", "id", r.id, "file", f.Name, "error", err)
		}
	}
	got, err := collectFiles(ip.e.slotDir(ip.slot), r.spec.Files, r.spec.Limits, before, send)
	if err != nil {
		ip.e.log.Error("collecting a session call's output files", "id", r.id, "error", err)
		res.FilesTruncated = true
		return
	}
	res.Files, res.FilesSkipped, res.FilesTruncated = got.files, got.skipped, got.truncated
}

// detach ends r's hold on the interpreter: its output goes nowhere from now on, and a call of
// agent.* it still waits on is refused.
func (ip *interp) detach(r *run) {
	ip.mu.Lock()
	out, errc := ip.out, ip.err
	if ip.cur == r {
		ip.cur, ip.out, ip.err = nil, nil, nil
	}
	ip.mu.Unlock()
	ip.pumpMu.Lock()
	if out != nil {
		out.close()
		errc.close()
	}
	ip.pumpMu.Unlock()
	select {
	case <-r.exited:
	default:
		close(r.exited)
	}
}

// interrupt sends the interpreter SIGINT while r is its call, and kills it InterruptGrace
// later unless the call has ended by then (run stops the timer).
func (ip *interp) interrupt(r *run) {
	ip.mu.Lock()
	if ip.cur != r || ip.grace != nil || ip.ended != "" {
		ip.mu.Unlock()
		return
	}
	ip.grace = time.AfterFunc(InterruptGrace, func() {
		ip.mu.Lock()
		ip.killed = true
		ip.mu.Unlock()
		if err := killUID(ip.uid); err != nil {
			ip.e.log.Error("killing a session's interpreter", "slot", ip.slot, "error", err)
		}
	})
	ip.mu.Unlock()
	if err := syscall.Kill(ip.pid, syscall.SIGINT); err != nil {
		ip.e.log.Debug("interrupting a session's call", "slot", ip.slot, "error", err)
	}
}

// end records that the session is over (the first reason wins), kills what is left of it and
// returns the reason that stands.
func (ip *interp) end(code, reason string) (string, string) {
	ip.mu.Lock()
	if ip.ended == "" {
		ip.ended, ip.reason = code, reason
	}
	code, reason = ip.ended, ip.reason
	ip.mu.Unlock()
	if err := ip.e.killAndWait(ip.uid, ip.e.cfg.KillTimeout); err != nil {
		ip.e.log.Error("killing an ended session's processes", "slot", ip.slot, "error", err)
	}
	ip.l.close()
	return code, reason
}

// endedWith says how the interpreter's process ended, once it has.
func (ip *interp) endedWith() string {
	<-ip.exited
	if ip.waitErr != nil {
		return ip.waitErr.Error()
	}
	st := ip.status.status
	if st.Signaled() {
		return fmt.Sprintf("signal %d (%s)", int(st.Signal()), signalName(int(st.Signal())))
	}
	return fmt.Sprintf("exit status %d", st.ExitStatus())
}

// pump passes the interpreter's stdout (or stderr) to the current call's capture, reading
// under pumpMu (shared by both streams, so what is read first is passed on first); what it
// writes between calls is dropped.
func (ip *interp) pump(f *os.File, stderr bool) {
	pumpLocked(f, &ip.pumpMu, func(b []byte) {
		ip.mu.Lock()
		c := ip.out
		if stderr {
			c = ip.err
		}
		ip.mu.Unlock()
		if c != nil {
			c.write(b)
		}
	})
}

// pumpLocked reads the pipe f until its end, each read and the passing on of what it read
// (pass) under mu: a holder of mu knows that nothing read is still on its way.
func pumpLocked(f *os.File, mu *sync.Mutex, pass func([]byte)) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, 64<<10)
	for done := false; !done; {
		err := rc.Read(func(fd uintptr) bool {
			mu.Lock()
			defer mu.Unlock()
			n, err := syscall.Read(int(fd), buf)
			switch {
			case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
				return false
			case n > 0:
				pass(buf[:n])
			default: // the end, or an error
				done = true
			}
			return true
		})
		if err != nil {
			return
		}
	}
}

// drain waits (up to a second) until the executor has read both pipes empty, then until the
// pump has passed on what it read: what the call wrote before its end is then the call's.
func (ip *interp) drain() {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) && (pipeBytes(ip.l.stdout) > 0 || pipeBytes(ip.l.stderr) > 0) {
		time.Sleep(time.Millisecond)
	}
	ip.pumpMu.Lock()
	//nolint:staticcheck // an empty critical section: a barrier for the pump
	ip.pumpMu.Unlock()
}

// pipeBytes returns the bytes waiting in the pipe f reads (0 when unknown).
func pipeBytes(f *os.File) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	var n int32
	_ = rc.Control(func(fd uintptr) {
		_, _, _ = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
	})
	return int(n)
}

// serve reads the interpreter's control line for as long as it lives, handing each report to
// the call running: agent.* calls, OUTPUT, the MemoryError mark, and the call's end.
func (ip *interp) serve() {
	conn := ip.l.control
	br := bufio.NewReaderSize(conn, 64<<10)
	for {
		line, err := readLine(br, ip.maxLine)
		if errors.Is(err, errLineTooLong) {
			ip.e.log.Info("closing a session's control line: the program wrote a line too long", "slot", ip.slot)
			_ = conn.Close()
			return
		}
		if err != nil {
			return
		}
		ip.mu.Lock()
		r := ip.cur
		ip.mu.Unlock()
		var report controlReport
		if json.Unmarshal(line, &report) != nil {
			if !refuseLine(conn, "the control line takes one JSON object per line") {
				return
			}
			continue
		}
		switch {
		case report.Type == "done":
			// Handed over, never dropped: a stale report (one the program wrote itself) must
			// not crowd out the call's own, which run tells apart by its number.
			select {
			case ip.dones <- report:
			case <-ip.exited:
				return
			}
		case report.Type == "output" && report.Bytes < 0:
			_ = conn.Close()
			return
		case (report.Type == "result" || report.Type == "error") && report.Bytes < 0:
			_ = conn.Close()
			return
		case (report.Type == "output" || report.Type == "result" || report.Type == "error") && r == nil:
			if _, err := io.CopyN(io.Discard, br, report.Bytes); err != nil {
				return
			}
		case report.Type == "output":
			if err := r.readSessionOutput(br, report.Bytes); err != nil {
				return
			}
		case report.Type == "call" && r == nil:
			if !refuseLine(conn, "agent."+report.Method+": no call of the session is running") {
				return
			}
		default:
			if !r.control(conn, br, report) && report.Type == "call" {
				// The call ended while its agent.* call waited: its thread gets an answer.
				if !refuseLine(conn, "agent."+report.Method+": the call that made it has ended") {
					return
				}
			}
		}
	}
}

// refuseLine answers a line of the control line with an error reply; false when the line
// failed.
func refuseLine(conn net.Conn, msg string) bool {
	b, _ := json.Marshal(map[string]any{"type": "reply", "ok": false, "error": msg})
	_, err := conn.Write(append(b, '\n'))
	return err == nil
}

// readSessionOutput reads a piece of OUTPUT's text of n bytes, keeping it up to the cap and
// reading the rest away (the line goes on after the call); passing the cap stops the call with
// output_limit.
func (r *run) readSessionOutput(br *bufio.Reader, n int64) error {
	limit := r.outputCap()
	buf := make([]byte, 64<<10)
	for n > 0 {
		k, err := io.ReadFull(br, buf[:min(n, int64(len(buf)))])
		n -= int64(k)
		r.mu.Lock()
		have := int64(len(r.output))
		if have <= limit {
			r.output = append(r.output, buf[:min(int64(k), limit-have+1)]...)
		}
		over := int64(len(r.output)) > limit && have <= limit
		r.mu.Unlock()
		if over {
			r.reportOutputTooLarge(int64(len(r.output)))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// closeInterps kills every session interpreter (the executor is stopping).
func (e *Executor) closeInterps() {
	e.mu.Lock()
	interps := e.interps
	e.interps = map[int]*interp{}
	e.mu.Unlock()
	for _, ip := range interps {
		ip.end(EndedSandboxError, "the executor stopped")
	}
}
