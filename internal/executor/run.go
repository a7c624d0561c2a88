package executor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// stopReason is why the executor ended a run before the program did.
type stopReason int

const (
	stopNone stopReason = iota
	stopTimeout
	stopStdoutLimit
	stopStderrLimit
	stopOutputLimit
	stopDisplayLimit // the displays passed their cap (only a program writing the control line itself)
	stopCancelled
	stopProcessLimit // under gVisor: the run reached its process cap (see watch)
	stopBoxMemory    // under gVisor: the box's free memory fell below the reserve (see watch)
)

// run is one execution in one slot.
type run struct {
	e    *Executor
	id   string
	slot int
	uid  int
	spec sandbox.Spec

	mu      sync.Mutex
	reason  stopReason
	proc    process       // nil until the program has started
	stopped chan struct{} // closed when reason is set

	// the call line: replies from the daemon, and the program's exit
	replies chan *protocol.AgentReply
	exited  chan struct{}
	seq     int64

	// cpu is the CPU time the program's process used, known once it has ended.
	cpu time.Duration

	// preloadData is the data segment the fork server's preload takes, in bytes: allowed on
	// top of the run's memory limit, forked or cold (see forkServers.preloadData)
	preloadData int64

	// set by the control line
	output      []byte // OUTPUT's JSON text as received, up to its cap
	outputBytes int64  // bytes of OUTPUT received when it passed its cap
	memoryError bool   // the bootstrap saw a MemoryError (see classify)
	// the notebook layer's reports: the bytes of displays received, the uncaught exception
	displayBytes int64
	execError    *sandbox.ExecError

	// lines joins the streams' chunks into whole lines (see lines); inOrder has a display
	// sent in order with the streams (one-shot: through pumpStreams' queue; a session call:
	// under its pump's lock); nil calls at once.
	lines   *lines
	inOrder func(fn func())

	// session is true for a call in the slot's session interpreter (see interp.go); there
	// interrupt, when set, stops the call instead of a kill of every process of the uid.
	session   bool
	interrupt func()

	// caFile is the secrets' trust bundle when the run has secrets (see secretCABundle).
	caFile string
}

func newRun(e *Executor, id string, slot int, spec sandbox.Spec) *run {
	if e.cfg.GVisor && (spec.Limits.Processes <= 0 || spec.Limits.Processes > gVisorProcesses) {
		spec.Limits.Processes = gVisorProcesses
	}
	r := &run{e: e, id: id, slot: slot, uid: e.cfg.UIDBase + slot, spec: spec,
		replies: make(chan *protocol.AgentReply, 1), exited: make(chan struct{}), stopped: make(chan struct{})}
	r.lines = &lines{send: func(kind protocol.Kind, s string) {
		if err := e.conn.Send(&protocol.Message{Kind: kind, ID: id, Data: s}); err != nil {
			e.log.Debug("sending output", "id", id, "error", err)
		}
	}}
	return r
}

// process is a run's started program: a cold interpreter or a fork server's child.
type process interface {
	// wait waits for the program to exit and returns how it ended; an error means that is
	// unknown.
	wait() (exit, error)
}

// exit is how a program ended: its wait status, and the CPU time it used (user and system,
// its own threads included, as wait4 reports it).
type exit struct {
	status syscall.WaitStatus
	cpu    time.Duration
}

type coldProcess struct{ cmd *exec.Cmd }

func (p coldProcess) wait() (exit, error) {
	err := p.cmd.Wait()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return exit{}, fmt.Errorf("waiting for python: %w", err)
	}
	status, _ := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return exit{status: status, cpu: p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()}, nil
}

// stop ends the run for reason (the first reason wins) by killing every process of its uid.
func (r *run) stop(reason stopReason) {
	r.mu.Lock()
	if r.reason != stopNone {
		r.mu.Unlock()
		return
	}
	r.reason = reason
	close(r.stopped)
	started, interrupt := r.proc != nil, r.interrupt
	r.mu.Unlock()
	if started && interrupt != nil {
		interrupt()
		return
	}
	if started {
		if err := killUID(r.uid); err != nil {
			r.e.log.Error("killing run", "id", r.id, "error", err)
		}
	}
}

// execute writes the run's input files, runs the program, sends its output files (once every
// process of the run is gone) and returns its result. It never returns before every process
// of the run is gone; the run's files are left for Executor.clean, after the result is sent.
func (r *run) execute() *sandbox.Result {
	res := &sandbox.Result{ExitCode: -1}
	killed := false // every process of the run is gone
	defer func() {
		if !killed {
			if err := r.e.killAndWait(r.uid, r.e.cfg.KillTimeout); err != nil {
				r.systemError(res, "cleaning up the run: %v", err)
			}
		}
	}()

	l, err := r.program()
	if err != nil {
		return r.systemError(res, "%v", err)
	}
	defer l.close()
	control := &drainConn{Conn: l.control}

	oomBefore, oomKnown := oomKills()
	r.mu.Lock()
	if r.reason != stopNone { // cancelled before it started
		r.mu.Unlock()
		res.Outcome, res.Reason = sandbox.OutcomeKilled, "cancelled before the run started"
		return res
	}
	proc := l.proc
	r.proc = proc
	r.mu.Unlock()
	// The input files, before the code is sent: the program waits for it and has done
	// nothing yet. A file that cannot be written fails the run; its program is stopped.
	if err := writeInputFiles(r.e.slotDir(r.slot), r.uid, r.spec.Files); err != nil {
		r.stop(stopCancelled)
		_, _ = r.wait(proc)
		return r.systemError(res, "%v", err)
	}
	started := time.Now()
	res.StartedAt = started.UTC()
	res.Start = l.start
	r.preloadData = r.e.forks.preloadData()

	var streams sync.WaitGroup
	outCap := r.newCapture(protocol.KindStdout, r.spec.Limits.StdoutBytes, stopStdoutLimit)
	errCap := r.newCapture(protocol.KindStderr, r.spec.Limits.StderrBytes, stopStderrLimit)
	queue := &passQueue{}
	r.mu.Lock()
	r.inOrder = queue.do
	r.mu.Unlock()
	streams.Go(func() { pumpStreams(l.stdout, l.stderr, outCap, errCap, queue) })
	var controlDone sync.WaitGroup
	controlDone.Go(func() { r.serveControl(control) })

	timer := time.AfterFunc(time.Duration(r.spec.TimeoutMS)*time.Millisecond, func() { r.stop(stopTimeout) })
	if r.e.cfg.GVisor {
		go r.watch()
	}
	ended, waitErr := r.wait(proc)
	r.cpu = ended.cpu
	res.DurationMS = time.Since(started).Milliseconds()
	timer.Stop()
	close(r.exited)

	// Whatever the program left running (daemons, grandchildren holding the pipes) dies now.
	if err := r.e.killAndWait(r.uid, r.e.cfg.KillTimeout); err != nil {
		r.systemError(res, "killing the run's remaining processes: %v", err)
	} else {
		killed = true
	}
	streams.Wait()
	control.drain()
	controlDone.Wait()
	r.lines.flush()
	res.Error = r.execError

	// Stdout and stderr went to the daemon as chunks; the result carries only their flags.
	res.StdoutTruncated, res.StderrTruncated = outCap.truncated, errCap.truncated
	if killed {
		r.collectFiles(res)
	}
	oomAfter, oomAfterKnown := oomKills()
	if oomKnown && oomAfterKnown && oomAfter > oomBefore {
		res.OOMKills = int(oomAfter - oomBefore)
	}
	r.classify(res, ended.status, waitErr)
	return res
}

// program returns the slot's ready program, when it suits the run; else a new one (nothing of
// an earlier run is left in the slot either way).
func (r *run) program() (*launch, error) {
	l := r.e.takeNext(r.slot)
	if l != nil && l.server.unsuitable(r.spec.Paths) != "" {
		r.e.discard(l)
		l = nil
	}
	if l != nil {
		return l, nil
	}
	s, why := r.e.forks.server(r.spec.Paths)
	if s == nil {
		r.e.log.Debug("starting the run cold", "id", r.id, "reason", why)
	}
	return r.e.launchProgram(r.slot, s, true, r.id)
}

// collectFiles sends the run's output files to the daemon (one KindFile message each, in
// name order) and lists them in res. Every process of the run is dead by now. A directory
// that cannot be read is logged and leaves the files out; the outcome stays the program's.
func (r *run) collectFiles(res *sandbox.Result) {
	send := func(f sandbox.File, content []byte) {
		if err := r.e.conn.Send(&protocol.Message{Kind: protocol.KindFile, ID: r.id, File: &f, FileContent: content}); err != nil {
			r.e.log.Warn("sending an output file", "id", r.id, "file", f.Name, "error", err)
		}
	}
	got, err := collectOutputFiles(r.e.slotDir(r.slot), r.spec.Files, r.spec.Limits, send)
	if err != nil {
		r.e.log.Error("collecting a run's output files", "id", r.id, "slot", r.slot, "error", err)
		res.FilesTruncated = true
		return
	}
	res.Files, res.FilesSkipped, res.FilesTruncated = got.files, got.skipped, got.truncated
}

// wait waits for the program's exit. Once the run is stopped it kills the uid's processes
// again every 50 ms until the program is gone: a forked child may not yet have become the
// slot's uid when the first kill came.
func (r *run) wait(proc process) (exit, error) {
	type waited struct {
		exit
		err error
	}
	done := make(chan waited, 1)
	go func() {
		x, err := proc.wait()
		done <- waited{x, err}
	}()
	select {
	case x := <-done:
		return x.exit, x.err
	case <-r.stopped:
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case x := <-done:
			return x.exit, x.err
		case <-tick.C:
			if err := killUID(r.uid); err != nil {
				r.e.log.Error("killing run", "id", r.id, "error", err)
			}
		}
	}
}

// watchInterval is how often watch looks at the run's processes and the box's memory.
const watchInterval = 20 * time.Millisecond

// watch enforces, under gVisor, what Linux enforces by itself, until the program exits or the
// run is stopped: a run whose uid has as many processes as its cap allows is stopped
// (stopProcessLimit; gVisor's ptrace platform adds host threads for every task it runs, and
// never frees them, so a fork storm held at the cap would exhaust the container's pids limit
// and kill the whole sandbox), and so is a run while the box has less than MemoryReserve bytes
// available (stopBoxMemory; there is no memory cgroup in gVisor whose out-of-memory killer
// would pick the run: the host's would kill the sandbox).
func (r *run) watch() {
	tick := time.NewTicker(watchInterval)
	defer tick.Stop()
	for {
		select {
		case <-r.exited:
			return
		case <-r.stopped:
			return
		case <-tick.C:
		}
		if n := r.spec.Limits.Processes; n > 0 && int64(r.e.countProcesses(r.uid)) >= n {
			r.stop(stopProcessLimit)
			return
		}
		if avail, ok := memAvailable(); ok && r.e.cfg.MemoryReserve > 0 && avail < r.e.cfg.MemoryReserve {
			r.stop(stopBoxMemory)
			return
		}
	}
}

// gVisorProcesses caps a run's processes and threads under gVisor: each process forked from
// the preloaded fork server costs about 26 MiB of the sandbox's memory there (against a few
// under Linux), so the Linux default of 64 lets a fork bomb fill the box before the watch sees
// it.
const gVisorProcesses = 16

// runEnvironment is a run's whole environment: nothing of the executor's or the host's.
// Every directory a library may write its configuration or caches to is private to the run:
// HOME and XDG's are home; the interpreter's own (matplotlib's, IPython's profile) are in
// state, outside home, so that they never show among the user's files (a session's home is
// its working directory, whose new files are its calls' output files).
func runEnvironment(home, state string, extra []string) []string {
	return append([]string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + home,
		"TMPDIR=/tmp",
		"LANG=C.UTF-8",
		"MPLBACKEND=Agg",
		// The run's directory is its own and removed after it: compiled modules written there
		// (by any interpreter the run starts) would only be taken for output files.
		"PYTHONDONTWRITEBYTECODE=1",
		"MPLCONFIGDIR=" + filepath.Join(state, matplotlibSubdir),
		"IPYTHONDIR=" + filepath.Join(state, "ipython"),
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		"OPENBLAS_NUM_THREADS=1",
		"OMP_NUM_THREADS=1",
		"MKL_NUM_THREADS=1",
	}, extra...)
}

// matplotlibSubdir is matplotlib's directory (MPLCONFIGDIR) inside a run's state directory.
const matplotlibSubdir = "matplotlib"

// seedState makes the matplotlib directory of a run's new, empty state directory (owned by
// uid, which has no process alive) and fills it with the image's prebuilt matplotlib cache
// files, if any. An error means the run must not start: its libraries would otherwise
// rebuild or miss their configuration.
func (e *Executor) seedState(uid int, state string) error {
	// The directory is made the run's own (0700) whether or not there is a cache to seed it
	// with: matplotlib would otherwise make it 0755 itself.
	dir := filepath.Join(state, matplotlibSubdir)
	if err := mkdirOwned(dir, uid); err != nil {
		return fmt.Errorf("creating the run's matplotlib directory: %w", err)
	}
	entries, err := os.ReadDir(e.cfg.MatplotlibCache)
	if errors.Is(err, os.ErrNotExist) {
		return nil // no cache in this image
	}
	if err != nil {
		return fmt.Errorf("reading the matplotlib cache %s: %w", e.cfg.MatplotlibCache, err)
	}
	for _, entry := range entries {
		if !entry.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(e.cfg.MatplotlibCache, entry.Name()))
		if err != nil {
			return fmt.Errorf("reading the matplotlib cache: %w", err)
		}
		dst := filepath.Join(dir, entry.Name())
		if err := os.WriteFile(dst, data, 0o600); err != nil {
			return fmt.Errorf("seeding the run's matplotlib directory: %w", err)
		}
		if err := os.Chown(dst, uid, uid); err != nil {
			return fmt.Errorf("seeding the run's matplotlib directory: %w", err)
		}
	}
	return nil
}

// freshDir replaces dir, and whatever it holds, with a new empty one of uid's (0700). A
// directory that gains an entry while it is removed (ENOTEMPTY), or is made again before the
// new one (EEXIST), by a process of the last run still exiting (matplotlib writes its cache
// at exit, making its directories as it goes) is cleared again, for up to 2 s: under gVisor
// on Kubernetes a session's next interpreter could not start.
func freshDir(dir string, uid int) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := os.RemoveAll(dir)
		if err == nil {
			if err = mkdirOwned(dir, uid); err == nil {
				return nil
			}
			if !errors.Is(err, os.ErrExist) || time.Now().After(deadline) {
				return fmt.Errorf("creating %s for uid %d: %w", dir, uid, err)
			}
		} else if !errors.Is(err, syscall.ENOTEMPTY) || time.Now().After(deadline) {
			return fmt.Errorf("clearing %s: %w", dir, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mkdirOwned creates dir (which must not exist) with mode 0700, owned by uid.
func mkdirOwned(dir string, uid int) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	return os.Chown(dir, uid, uid)
}

// newCapture returns a capture that sends a stream's chunks to the daemon and stops the run
// for reason when the stream passes limit.
func (r *run) newCapture(kind protocol.Kind, limit int64, reason stopReason) *capture {
	return &capture{
		limit: limit,
		emit:  func(s string) { r.lines.emit(kind, s) },
		onLimit: func() {
			r.lines.flush()
			r.stop(reason)
		},
	}
}

// serveControl sends the run's init line to the bootstrap and reads its frames until the
// line closes: agent.* calls (answered), OUTPUT's text (kept up to its cap, measured here:
// once more bytes than the cap have arrived, the run is stopped with output_limit) and the
// MemoryError mark. Nothing read here decides the run's outcome by itself (see classify). A
// line longer than a call may be, or an output frame with a negative size, is not the
// bootstrap's: the line is closed, so the program can no longer use it.
func (r *run) serveControl(conn net.Conn) {
	init, err := json.Marshal(r.initLine())
	if err != nil {
		r.e.log.Error("encoding init", "id", r.id, "error", err)
		return
	}
	go func() {
		// Written concurrently: a large init fills the socket buffer before Python reads it.
		if _, err := conn.Write(append(init, '\n')); err != nil {
			r.e.log.Debug("writing init", "id", r.id, "error", err)
		}
	}()
	maxLine := r.spec.CallBytes + 64<<10
	br := bufio.NewReaderSize(conn, 64<<10)
	for {
		line, err := readLine(br, maxLine)
		if errors.Is(err, errLineTooLong) {
			r.closeControl(conn, fmt.Sprintf("a line of more than %d bytes", maxLine))
			return
		}
		if err != nil {
			return
		}
		var report controlReport
		if json.Unmarshal(line, &report) != nil {
			if !r.refuseLine(conn) {
				return
			}
			continue
		}
		if !r.control(conn, br, report) {
			return
		}
	}
}

// controlReport is one line the bootstrap writes on the control line.
type controlReport struct {
	Type   string          `json:"type"`
	Bytes  int64           `json:"bytes"`
	Method string          `json:"method"`
	Args   json.RawMessage `json:"args"`
	// Status and Interrupted are a session call's end ("done"): its exit status, and whether
	// a KeyboardInterrupt ended it.
	Status      int  `json:"status"`
	Interrupted bool `json:"interrupted"`
	// Call is the number of the session call that a "done" report ends (the init line's).
	Call int `json:"call"`
	// ExecutionCount is the session's count of calls, in a "done" report.
	ExecutionCount int `json:"execution_count"`
}

// refuseLine answers a control line that is not JSON: only the bootstrap writes there, and
// only JSON; a program writing to the line itself gets an answer, not a wait until its
// timeout. It returns false when the line failed.
func (r *run) refuseLine(conn net.Conn) bool {
	b, _ := json.Marshal(map[string]any{"type": "reply", "ok": false, "error": "the control line takes one JSON object per line"})
	_, err := conn.Write(append(b, '\n'))
	return err == nil
}

// control handles one report of the bootstrap: an agent.* call (answered), a piece of
// OUTPUT's text, or the MemoryError mark. It returns false when the control line must no
// longer be read.
func (r *run) control(conn net.Conn, br *bufio.Reader, report controlReport) bool {
	switch report.Type {
	case "call":
		reply := r.call(sandbox.Call{Method: report.Method, Args: report.Args})
		if reply == nil {
			return false // the program has exited
		}
		b, _ := json.Marshal(map[string]any{"type": "reply", "ok": reply.OK, "value": reply.Value, "error": reply.Error})
		if _, err := conn.Write(append(b, '\n')); err != nil {
			return false
		}
	case "memory_error":
		r.mu.Lock()
		r.memoryError = true
		r.mu.Unlock()
	case "output":
		if report.Bytes < 0 {
			r.closeControl(conn, fmt.Sprintf("an output frame of %d bytes", report.Bytes))
			return false
		}
		if !r.readOutput(br, report.Bytes) {
			return false
		}
	case "result", "error":
		if report.Bytes < 0 {
			r.closeControl(conn, fmt.Sprintf("a %s frame of %d bytes", report.Type, report.Bytes))
			return false
		}
		if r.readReport(br, report.Type, report.Bytes) != nil {
			return false
		}
		if report.Type == "result" {
			// The display is queued in order with the streams: the program may go on.
			if _, err := conn.Write([]byte("{\"type\":\"ack\"}\n")); err != nil {
				return false
			}
		}
	}
	return true
}

// maxErrorReport is the most bytes an "error" report (an uncaught exception's name, message
// and traceback) may take; a larger one is read away and dropped.
const maxErrorReport = 1 << 20

// readReport reads a "result" (a display, or the last expression's value) or "error" report
// of n bytes from br. A display is passed on to the daemon in order with the streams; once
// the displays of the run pass its cap (outputCap; the bootstrap keeps within it by cutting a
// display short, so only a program writing on the line itself gets here), the run is stopped
// with output_limit and the rest is read away. A report that is not what it should be is
// logged and dropped. It returns an error only when the line failed.
func (r *run) readReport(br *bufio.Reader, kind string, n int64) error {
	r.mu.Lock()
	left := int64(maxErrorReport)
	if kind == "result" {
		left = r.outputCap() - r.displayBytes
	}
	r.mu.Unlock()
	var piece bytes.Buffer
	got, err := io.CopyN(&piece, br, min(n, max(left, 0)+1))
	if kind == "result" {
		r.mu.Lock()
		r.displayBytes += got
		r.mu.Unlock()
	}
	if got > left {
		// Counted as it arrives, not taken from the frame; the rest is read away (a
		// session's line goes on after the call).
		if kind == "result" {
			r.reportDisplaysTooLarge()
		}
		_, err = io.CopyN(io.Discard, br, n-got)
		return err
	}
	if err != nil {
		return err // the line ended inside the report: dropped
	}
	body := piece.Bytes()
	if kind == "error" {
		var e sandbox.ExecError
		if err := json.Unmarshal(body, &e); err != nil || e.Name == "" {
			r.e.log.Info("dropping an error report that is not one", "id", r.id)
			return nil
		}
		r.mu.Lock()
		r.execError = &e
		r.mu.Unlock()
		return nil
	}
	var d sandbox.Display
	if err := json.Unmarshal(body, &d); err != nil || d.Data == nil {
		r.e.log.Info("dropping a display that is not one", "id", r.id)
		return nil
	}
	if _, ok := d.Data["text/plain"]; !ok {
		d.Data["text/plain"] = json.RawMessage(`""`)
	}
	send := func() {
		r.lines.inOrder(func() {
			if err := r.e.conn.Send(&protocol.Message{Kind: protocol.KindDisplay, ID: r.id, Display: &d}); err != nil {
				r.e.log.Debug("sending a display", "id", r.id, "error", err)
			}
		})
	}
	r.mu.Lock()
	inOrder := r.inOrder
	r.mu.Unlock()
	if inOrder == nil {
		send()
	} else {
		inOrder(send)
	}
	return nil
}

// initLine is the init line the bootstrap reads for the run (or a session's call).
func (r *run) initLine() map[string]any {
	return map[string]any{
		"code":       r.spec.Code,
		"input":      r.spec.Input,
		"limits":     r.spec.Limits,
		"timeout_ms": r.spec.TimeoutMS,
		"paths":      r.spec.Paths,
		"call_bytes": r.spec.CallBytes,
		// Open matplotlib figures and PIL images shown are saved as output files.
		"charts": r.spec.Charts,
		// The preload's data, allowed on top of memory_bytes (a fork inherits it).
		"preload_data_bytes": r.preloadData,
		// gVisor ignores RLIMIT_DATA: the memory limit is then one of address space.
		"limit_address_space": r.e.cfg.GVisor,
		// A session's call: the interpreter keeps its globals for the next call.
		"session": r.session,
		// The daemon's own session call: it takes no execution count.
		"internal": r.spec.Internal,
		// A plain script: no notebook results, no IPython syntax.
		"plain": r.spec.Plain,
		// An uncaught exception's traceback goes to the result's error only, not to stderr.
		"traceback_in_error_only": r.spec.TracebackInErrorOnly,
		// The session's environment (its template's, then its request's).
		"env": r.spec.Env,
		// The secrets' placeholders, and the trust bundle holding the CA the egress proxy's
		// certificates for their hosts are signed by (docs/secrets.md).
		"secret_env":     r.spec.SecretEnv,
		"secret_ca_file": r.caFile,
	}
}

// closeControl closes a run's control line that the program misused (what names how).
func (r *run) closeControl(conn net.Conn, what string) {
	r.e.log.Info("closing a run's control line: the program wrote what the bootstrap does not", "id", r.id, "what", what)
	_ = conn.Close()
}

// outputCap is the most bytes of OUTPUT's JSON a run may return: its output_bytes limit, or
// half a protocol frame when that is 0 (no limit): the result must still fit in one frame.
func (r *run) outputCap() int64 {
	if lim := r.spec.Limits.OutputBytes; lim > 0 {
		return lim
	}
	return protocol.MaxFrame / 2
}

// readOutput reads a piece of OUTPUT's JSON text of n bytes from br and keeps it. Once more
// bytes than the cap have arrived (counted here, not taken from the frame), it stops the run
// with output_limit and returns false; it returns false as well when the line ends first.
func (r *run) readOutput(br *bufio.Reader, n int64) bool {
	limit := r.outputCap()
	r.mu.Lock()
	have := int64(len(r.output))
	r.mu.Unlock()
	var piece bytes.Buffer
	got, err := io.CopyN(&piece, br, min(n, limit-have+1))
	if have+got > limit {
		r.mu.Lock()
		r.output = append(r.output, piece.Bytes()...)
		r.mu.Unlock()
		r.reportOutputTooLarge(have + got)
		return false
	}
	if err != nil {
		// The line ended inside the piece: the bootstrap writes whole pieces, so this one
		// is the program's own (whose claimed size swallowed what followed it, a display
		// say); it is dropped.
		return false
	}
	r.mu.Lock()
	r.output = append(r.output, piece.Bytes()...)
	r.mu.Unlock()
	return true
}

// call forwards one agent.* call of the program to the daemon and waits for its answer, or
// returns nil when the program exits first. One call at a time: the control line is read
// in order, so a program cannot have more than one call in flight.
func (r *run) call(c sandbox.Call) *protocol.AgentReply {
	r.seq++
	if r.spec.CallBytes > 0 && len(c.Args) > r.spec.CallBytes {
		return &protocol.AgentReply{Seq: r.seq, Error: fmt.Sprintf("the call's arguments are %d bytes; the limit is %d", len(c.Args), r.spec.CallBytes)}
	}
	// Deeper JSON would not even cross the control line (its reader stops at 10 000 levels)
	// and could not be read back by Python (about 1000).
	if d := sandbox.JSONDepth(c.Args); d > sandbox.MaxInputDepth {
		return &protocol.AgentReply{Seq: r.seq, Error: fmt.Sprintf("the call's arguments nest %d levels deep; the limit is %d levels", d, sandbox.MaxInputDepth)}
	}
	if err := r.e.conn.Send(&protocol.Message{Kind: protocol.KindCall, ID: r.id, AgentCall: &protocol.AgentCall{Seq: r.seq, Call: c}}); err != nil {
		return &protocol.AgentReply{Seq: r.seq, Error: "the executor could not reach the daemon: " + err.Error()}
	}
	for {
		select {
		case rep := <-r.replies:
			if rep.Seq == r.seq {
				return rep
			}
		case <-r.exited:
			return nil
		}
	}
}

// reportDisplaysTooLarge stops the run whose displays passed their cap.
func (r *run) reportDisplaysTooLarge() { r.stop(stopDisplayLimit) }

func (r *run) reportOutputTooLarge(n int64) {
	r.mu.Lock()
	r.outputBytes = n
	r.mu.Unlock()
	r.stop(stopOutputLimit)
}

var errLineTooLong = errors.New("line too long")

func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > max {
			return nil, errLineTooLong
		}
		if err == nil {
			return line, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) && len(line) > 0 {
				return line, nil
			}
			return nil, err
		}
	}
}

// classify sets the outcome from what the executor observed: how the program ended (its wait
// status, or waitErr when that is unknown), why the executor stopped it, the box's count of
// out-of-memory kills during the run (res.OOMKills) and the OUTPUT bytes it received.
//
// The one thing the program reports itself is a MemoryError under RLIMIT_DATA, which only the
// interpreter sees; since the program may write that mark itself, it only relabels a run that
// failed with a non-zero exit status (error becomes memory_limit), never an exit 0 or a
// signal. An OUTPUT text that is not valid JSON (only a program writing the control line
// itself sends one) makes an exit 0 an error.
//
// Out-of-memory kills (res.OOMKills, the box's counter) are always named in the reason, and
// win over the program's own ending when they are surely the run's: when the program itself
// was killed (SIGKILL) or the box serves this slot alone. Then the run is memory_limit even if
// the program survived a child's kill and exited 0 (its result may be wrong for want of what
// the killed process did). In a box shared by several slots a kill the program survived may
// have been another slot's run: the outcome stays the program's own. An outcome the executor
// caused itself (timeout, output_limit, cancelled) stays in every case.
// cpuLimit is the run's CPU-time limit (RLIMIT_CPU, set by the bootstrap): its timeout rounded
// up to whole seconds, and one more.
func (r *run) cpuLimit() time.Duration {
	return time.Duration((r.spec.TimeoutMS+999)/1000+1) * time.Second
}

// cpuLimitSlack is how far under its CPU-time limit a process killed by SIGXCPU may have been
// measured (the kernel checks the limit on its clock ticks).
const cpuLimitSlack = 100 * time.Millisecond

func (r *run) classify(res *sandbox.Result, status syscall.WaitStatus, waitErr error) {
	shared := r.e.cfg.Slots > 1
	defer func() {
		if res.OOMKills > 0 && res.Outcome != sandbox.OutcomeMemoryLimit {
			if res.Reason != "" {
				res.Reason += "; "
			}
			res.Reason += oomSentence(res.OOMKills, shared)
		}
	}()
	if res.Outcome == sandbox.OutcomeSandboxError {
		return
	}
	if waitErr != nil {
		r.systemError(res, "%v", waitErr)
		return
	}
	switch {
	case status.Signaled():
		res.Signal = int(status.Signal())
		res.ExitCode = 128 + res.Signal
	default:
		res.ExitCode = status.ExitStatus()
	}
	lim := r.spec.Limits
	r.mu.Lock()
	reason, memoryError, outputBytes, output := r.reason, r.memoryError, r.outputBytes, r.output
	r.mu.Unlock()
	var outputErr error
	if output != nil {
		if outputErr = checkOutput(output); outputErr == nil {
			res.Output = json.RawMessage(output)
		}
	}
	switch {
	case reason == stopTimeout:
		res.Outcome = sandbox.OutcomeTimeout
		res.Reason = fmt.Sprintf("the run passed its timeout of %d ms; every process of it was killed", r.spec.TimeoutMS)
	case reason == stopStdoutLimit:
		res.Outcome = sandbox.OutcomeOutputLimit
		res.Reason = fmt.Sprintf("stdout passed its cap of %d bytes; the run was stopped and stdout cut at the cap", lim.StdoutBytes)
	case reason == stopStderrLimit:
		res.Outcome = sandbox.OutcomeOutputLimit
		res.Reason = fmt.Sprintf("stderr passed its cap of %d bytes; the run was stopped and stderr cut at the cap", lim.StderrBytes)
	case reason == stopOutputLimit:
		res.Outcome = sandbox.OutcomeOutputLimit
		res.Reason = fmt.Sprintf("OUTPUT passed its cap of %d bytes of JSON; the run was stopped once %d bytes of it had arrived", r.outputCap(), outputBytes)
		res.Output = nil
	case reason == stopDisplayLimit:
		res.Outcome = sandbox.OutcomeOutputLimit
		res.Reason = fmt.Sprintf("the displays passed their cap of %d bytes (output_bytes); the run was stopped", r.outputCap())
	case reason == stopCancelled:
		res.Outcome = sandbox.OutcomeKilled
		res.Reason = "cancelled: the daemon stopped the run"
	case reason == stopProcessLimit:
		res.Outcome = sandbox.OutcomeKilled
		res.Reason = fmt.Sprintf("the run reached its limit of %d processes and was stopped (under runsc a run is stopped "+
			"at its process cap: a fork storm there would exhaust the sandbox's host threads)", lim.Processes)
	case reason == stopBoxMemory:
		res.Outcome = sandbox.OutcomeMemoryLimit
		res.Reason = fmt.Sprintf("the box ran out of memory (less than %d bytes left) and the run was stopped", r.e.cfg.MemoryReserve)
	case res.OOMKills > 0 && res.Signal == int(syscall.SIGKILL):
		res.Outcome = sandbox.OutcomeMemoryLimit
		res.Reason = "the box ran out of memory" + r.e.boxMemoryNote() + " and its out-of-memory killer stopped the run"
		if res.OOMKills > 1 {
			res.Reason += "; " + oomSentence(res.OOMKills, shared)
		}
	case res.OOMKills > 0 && !shared:
		res.Outcome = sandbox.OutcomeMemoryLimit
		res.Reason = oomSentence(res.OOMKills, shared) + r.e.boxMemoryNote() + fmt.Sprintf("; the program itself ended with %s", endedWith(res))
	case res.Signal == int(syscall.SIGXCPU) && r.cpu >= r.cpuLimit()-cpuLimitSlack:
		// The kernel's CPU-time limit, and not the program signalling itself: its CPU time
		// says so.
		res.Outcome = sandbox.OutcomeTimeout
		res.Reason = fmt.Sprintf("the run used up its CPU time limit of %d s", r.cpuLimit()/time.Second)
	case res.Signal != 0:
		res.Outcome = sandbox.OutcomeKilled
		res.Reason = fmt.Sprintf("the program was killed by signal %d (%s)", res.Signal, signalName(res.Signal))
	case res.ExitCode != 0 && memoryError:
		res.Outcome = sandbox.OutcomeMemoryLimit
		res.Reason = "the program ran out of memory (MemoryError) under its limit of " + mebibytes(lim.MemoryBytes)
		if r.preloadData > 0 {
			res.Reason += " (plus " + mebibytes(r.preloadData) + " for the preloaded modules)"
		}
		res.Reason += ", the daemon's run_memory_bytes (by default its memory_bytes)"
	case res.ExitCode != 0:
		res.Outcome = sandbox.OutcomeError
		res.Reason = fmt.Sprintf("the program exited with status %d", res.ExitCode)
	case outputErr != nil:
		res.Outcome = sandbox.OutcomeError
		res.Reason = fmt.Sprintf("the OUTPUT written on the control line is not usable: %v", outputErr)
	default:
		res.Outcome = sandbox.OutcomeOK
	}
}

// mebibytes writes n bytes as the limits are set: "256 MiB", "1.5 MiB", "512 bytes".
func mebibytes[N int | int64](n N) string {
	switch {
	case n < 1<<20:
		return fmt.Sprintf("%d bytes", n)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	default:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
}

// boxMemoryNote is " (its memory_bytes, 512 MiB, which its files in /tmp and /dev/shm count
// against)", naming the box's limit for a reason about its out-of-memory killer, or "" when
// the limit is unknown.
func (e *Executor) boxMemoryNote() string {
	if e.boxMemory <= 0 {
		return ""
	}
	return " (its memory_bytes, " + mebibytes(e.boxMemory) + ", which its files in /tmp and /dev/shm count against)"
}

// oomSentence says that n processes were killed for memory during the run: the run's own,
// or, in a box that several slots share, the box's.
func oomSentence(n int, shared bool) string {
	procs, were := "1 process", "was"
	if n > 1 {
		procs, were = fmt.Sprintf("%d processes", n), "were"
	}
	if shared {
		return fmt.Sprintf("%s in the box (this run's or another slot's) %s killed by its out-of-memory killer while the run was going", procs, were)
	}
	return fmt.Sprintf("%s of the run %s killed by the box's out-of-memory killer", procs, were)
}

// endedWith describes the program's own ending: "exit status 0" or "signal 9 (SIGKILL: killed)".
func endedWith(res *sandbox.Result) string {
	if res.Signal != 0 {
		return fmt.Sprintf("signal %d (%s)", res.Signal, signalName(res.Signal))
	}
	return fmt.Sprintf("exit status %d", res.ExitCode)
}

func (r *run) systemError(res *sandbox.Result, format string, args ...any) *sandbox.Result {
	res.Outcome = sandbox.OutcomeSandboxError
	res.Reason = fmt.Sprintf(format, args...)
	r.e.log.Error("run failed in the sandbox", "id", r.id, "slot", r.slot, "reason", res.Reason)
	return res
}

// signalName gives the conventional name and meaning of a signal ("SIGSEGV: segmentation fault").
func signalName(sig int) string {
	names := map[syscall.Signal]string{
		syscall.SIGSEGV: "SIGSEGV: segmentation fault",
		syscall.SIGABRT: "SIGABRT: aborted",
		syscall.SIGBUS:  "SIGBUS: bus error",
		syscall.SIGFPE:  "SIGFPE: arithmetic error",
		syscall.SIGILL:  "SIGILL: illegal instruction",
		syscall.SIGKILL: "SIGKILL: killed",
		syscall.SIGTERM: "SIGTERM: terminated",
		syscall.SIGPIPE: "SIGPIPE: broken pipe",
		syscall.SIGXFSZ: "SIGXFSZ: file size limit exceeded",
		syscall.SIGXCPU: "SIGXCPU: CPU time limit exceeded",
		syscall.SIGINT:  "SIGINT: interrupted; python3 ends so on an uncaught KeyboardInterrupt",
	}
	if n, ok := names[syscall.Signal(sig)]; ok {
		return n
	}
	return syscall.Signal(sig).String()
}

// drainIdle bounds the control line's drain after the program's end by silence, not by total
// time: a line that brought megabytes of OUTPUT just before the program exited is read to its
// end however loaded the machine (its writers are dead, so the end comes), and a line held
// open without data ends after drainIdle.
const drainIdle = time.Second

// drainConn is a run's control line; once drain is called, each read that brings data
// gives the line another drainIdle.
type drainConn struct {
	net.Conn
	draining atomic.Bool
}

func (c *drainConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.draining.Load() {
		_ = c.Conn.SetReadDeadline(time.Now().Add(drainIdle))
	}
	return n, err
}

// drain starts the drain: the line's reads end after drainIdle without data.
func (c *drainConn) drain() {
	c.draining.Store(true)
	_ = c.Conn.SetReadDeadline(time.Now().Add(drainIdle))
}
