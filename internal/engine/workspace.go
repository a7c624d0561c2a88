package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A session's workspace: its commands (foreground, background, in a terminal) and its files by
// path, served by the session's own box (sandbox.Workspace). Commands run alongside the
// interpreter's calls, not in their turn: they share the box, not the call order. The ledger
// records each command like a call (see CommandRecorder).

// Bounds of the workspace's operations.
const (
	// MaxReadBytes is the most one file read returns; a larger file is read in ranges.
	MaxReadBytes = 32 << 20
	// writeChunk is how much of a write goes to the box in one message.
	writeChunk = 8 << 20
	// MaxProcesses caps a session's commands that run at once (and ended ones kept).
	MaxProcesses = 64
	// MaxCommandStdin caps a command's first stdin and each input, in bytes.
	MaxCommandStdin = 8 << 20
	// processTail is how much of a background process's latest output is kept, per stream,
	// for a client that attaches later.
	processTail = 64 << 10
	// endedProcessesKept is how many ended processes a session keeps for listing and wait.
	endedProcessesKept = 32
)

// CommandRequest asks for a command in a session.
type CommandRequest struct {
	// Cmd is run with `bash -lc`; Argv instead is run as it is. Exactly one is given.
	Cmd  string
	Argv []string
	// Cwd is the working directory (the session's view; "" is its home); Env adds variables.
	Cwd string
	Env map[string]string
	// TimeoutMS bounds a foreground command (nil: the service's default timeout; at most its
	// maximum); a background command runs until it ends, is signalled, or the session ends.
	TimeoutMS *int64
	// Stdin is written to its standard input first (closed after it, for a foreground command
	// outside a terminal).
	Stdin []byte
	// Background returns at once with the process; PTY runs it in a terminal of that size.
	Background bool
	PTY        *sandbox.TermSize
}

// ProcessInfo is one of a session's commands (see sandbox.ProcessInfo).
type ProcessInfo = sandbox.ProcessInfo

// CommandEvent is one event of a command as a client sees it: "start" (Process set, with its
// PID), "stdout" or "stderr" (Data), "end" (Process set, with End).
type CommandEvent struct {
	Type    string       `json:"type"`
	Data    string       `json:"data,omitempty"`
	Process *ProcessInfo `json:"process,omitempty"`
}

// CommandResult is a foreground command's whole answer.
type CommandResult struct {
	Process ProcessInfo `json:"process"`
	Stdout  string      `json:"stdout"`
	Stderr  string      `json:"stderr"`
}

// CommandRecorder keeps the ledger of a session's commands (see sandbox.CommandRecorder).
type CommandRecorder = sandbox.CommandRecorder

// liveProcess is a command of a live session, running or recently ended.
type liveProcess struct {
	mu         sync.Mutex
	info       ProcessInfo
	subs       map[int]func(CommandEvent)
	nextSub    int
	tail       [2][]byte // the latest output of stdout and stderr (background processes)
	done       chan struct{}
	recordedAt time.Time
}

// workspace is a live session's commands.
type workspace struct {
	// largeReads holds a token while a large file read runs (see Sessions.read).
	largeReads chan struct{}

	mu    sync.Mutex
	procs map[string]*liveProcess
	order []string // ended process IDs, oldest first
}

func (ls *liveSession) ws() *workspace {
	ls.wsOnce.Do(func() {
		ls.workspace = &workspace{procs: map[string]*liveProcess{}, largeReads: make(chan struct{}, 1)}
	})
	return ls.workspace
}

// SetCommandRecorder sets the ledger of commands (call before serving).
func (m *Sessions) SetCommandRecorder(r CommandRecorder) { m.commands = r }

// Command runs req in agent's session id. A foreground command's events go to emit (start,
// output, end) and its whole answer is returned at its end; a background one returns at once
// with its process (its output reaches clients that Attach). Errors: a *FieldError,
// ErrSessionNotFound, a *SessionEndedError, the box's (a bad cwd: invalid), too many processes
// (busy).
func (m *Sessions) Command(ctx context.Context, agent, id string, req CommandRequest, emit func(CommandEvent)) (CommandResult, error) {
	spec, err := m.commandSpec(req)
	if err != nil {
		return CommandResult{}, err
	}
	ls, err := m.callable(ctx, agent, id)
	if err != nil {
		return CommandResult{}, err
	}
	w := ls.ws()
	w.mu.Lock()
	running := 0
	for _, p := range w.procs {
		p.mu.Lock()
		if p.info.State == "running" {
			running++
		}
		p.mu.Unlock()
	}
	w.mu.Unlock()
	if running >= MaxProcesses {
		return CommandResult{}, errclass.Newf(errclass.Busy, "session %s runs %d processes, its limit; wait for one to end or signal one (SIGTERM)", id, MaxProcesses)
	}
	display := req.Cmd
	if display == "" {
		display = sandbox.ShellQuote(req.Argv) // what ran, as a shell would need it
	}
	cwd := sandbox.SessionHome
	if req.Cwd != "" {
		cwd = req.Cwd
		if !strings.HasPrefix(cwd, "/") {
			cwd = path.Join(sandbox.SessionHome, cwd)
		}
	}
	pid := sandbox.NewProcessID()
	p := &liveProcess{done: make(chan struct{}), subs: map[int]func(CommandEvent){}, info: ProcessInfo{
		ID: pid, SessionID: id, Command: display, Argv: spec.Argv, Cwd: cwd, Background: req.Background, PTY: req.PTY,
		TimeoutMS: spec.TimeoutMS, State: "running", StartedAt: time.Now().UTC()}}
	var (
		stdout, stderr strings.Builder
		whole          bool
	)
	emit = inOrder(emit)
	if !req.Background {
		whole = true
		p.subs[-1] = func(ev CommandEvent) {
			switch ev.Type {
			case "stdout":
				if int64(stdout.Len()) < max(spec.StdoutBytes, 1<<30) {
					stdout.WriteString(ev.Data)
				}
			case "stderr":
				stderr.WriteString(ev.Data)
			}
			if emit != nil && ev.Type != "start" {
				emit(ev)
			}
		}
	}
	w.mu.Lock()
	w.procs[pid] = p
	w.mu.Unlock()
	m.touch(ls)
	osPID, err := ls.box.StartCommand(ctx, pid, spec, func(ev sandbox.ProcessEvent) { m.processEvent(ls, agent, p, ev) })
	if err != nil {
		w.mu.Lock()
		delete(w.procs, pid)
		w.mu.Unlock()
		if errors.Is(err, sandbox.ErrNotReady) {
			if _, lerr := m.lookup(ctx, agent, id); lerr != nil {
				return CommandResult{}, lerr
			}
		}
		return CommandResult{}, err
	}
	p.mu.Lock()
	p.info.PID = osPID
	info := p.info
	p.mu.Unlock()
	m.log.Info("session command started", "session", id, "process", pid, "pid", osPID, "background", req.Background)
	if !whole {
		return CommandResult{Process: info}, nil
	}
	if emit != nil {
		emit(CommandEvent{Type: "start", Process: &info})
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		p.mu.Lock()
		ended := p.info.End != nil
		p.mu.Unlock()
		if ended { // the client left once it had the end, which is still being passed on
			<-p.done
			break
		}
		// The client left: a foreground command does not outlive it.
		_ = ls.box.SignalProcess(context.WithoutCancel(ctx), pid, "SIGKILL")
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
		return CommandResult{}, ctx.Err()
	}
	p.mu.Lock()
	info = p.info
	p.mu.Unlock()
	return CommandResult{Process: info, Stdout: stdout.String(), Stderr: stderr.String()}, nil
}

// commandSpec checks req and makes the box's spec.
func (m *Sessions) commandSpec(req CommandRequest) (sandbox.CommandSpec, error) {
	var spec sandbox.CommandSpec
	switch {
	case req.Cmd != "" && len(req.Argv) > 0:
		return spec, &sandbox.FieldError{Field: "cmd", Message: "give cmd (run with bash -lc) or argv, not both"}
	case req.Cmd != "":
		spec.Argv = []string{"bash", "-lc", req.Cmd}
	case len(req.Argv) > 0 && req.Argv[0] != "":
		spec.Argv = slices.Clone(req.Argv)
	default:
		return spec, &sandbox.FieldError{Field: "cmd", Message: `is empty: give cmd ("ls -la", run with bash -lc) or argv (["ls", "-la"])`}
	}
	for _, a := range spec.Argv {
		if strings.ContainsRune(a, 0) {
			return spec, &sandbox.FieldError{Field: "argv", Message: "an argument holds a NUL byte"}
		}
	}
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return spec, &sandbox.FieldError{Field: "env", Message: fmt.Sprintf("%q is not a valid variable: a name without '=' or NUL, a value without NUL", k)}
		}
	}
	if len(req.Stdin) > MaxCommandStdin {
		return spec, &sandbox.FieldError{Field: "stdin", TooLarge: true, Message: fmt.Sprintf("is %d bytes; the limit is %d: send more with the process's input", len(req.Stdin), MaxCommandStdin)}
	}
	if req.PTY != nil && (req.PTY.Rows == 0 || req.PTY.Cols == 0) {
		return spec, &sandbox.FieldError{Field: "pty", Message: "rows and cols must be at least 1"}
	}
	spec.Cwd, spec.Env, spec.Stdin, spec.PTY = req.Cwd, req.Env, req.Stdin, req.PTY
	spec.KeepStdin = req.Background || req.PTY != nil
	if !req.Background {
		cfg := m.svc.cfg
		timeout := cfg.DefaultTimeout
		if req.TimeoutMS != nil {
			if *req.TimeoutMS < 1 || *req.TimeoutMS > cfg.MaxTimeout.Milliseconds() {
				return spec, &sandbox.FieldError{Field: "timeout_ms", Message: fmt.Sprintf("is %d; allowed range is 1 to %d (the server's max_timeout_ms); use background for longer commands",
					*req.TimeoutMS, cfg.MaxTimeout.Milliseconds())}
			}
			timeout = time.Duration(*req.TimeoutMS) * time.Millisecond
		}
		spec.TimeoutMS = timeout.Milliseconds()
		spec.StdoutBytes, spec.StderrBytes = cfg.Limits.StdoutBytes, cfg.Limits.StderrBytes
	} else if req.TimeoutMS != nil {
		return spec, &sandbox.FieldError{Field: "timeout_ms", Message: "a background command has no timeout: it runs until it ends, is signalled or the session ends"}
	}
	return spec, nil
}

// touch marks the session used now (a command or file operation keeps it from idling out).
func (m *Sessions) touch(ls *liveSession) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ls.info.LastUsedAt = time.Now().UTC()
	if _, live := m.live[ls.info.ID]; live && !ls.info.Busy {
		ls.timer.Reset(m.untilExpiry(ls, time.Now()))
	}
}

// processEvent takes one event of p from the box and passes it to p's subscribers.
func (m *Sessions) processEvent(ls *liveSession, agent string, p *liveProcess, ev sandbox.ProcessEvent) {
	var out CommandEvent
	p.mu.Lock()
	switch {
	case ev.End != nil:
		now := time.Now().UTC()
		end := *ev.End
		if why := ls.ending.Load(); why != nil && end.Outcome == sandbox.OutcomeSandboxError {
			// Its sandbox was removed on purpose, not lost: sandpit ended it.
			end.Outcome, end.Reason = sandbox.OutcomeKilled, "it ended with its sandbox: "+*why
		}
		p.info.State, p.info.EndedAt, p.info.End = "ended", &now, &end
		info := p.info
		out = CommandEvent{Type: "end", Process: &info}
	default:
		out = CommandEvent{Type: string(ev.Stream), Data: ev.Data}
		i := 0
		if ev.Stream == sandbox.StreamStderr {
			i = 1
			p.info.StderrBytes += int64(len(ev.Data))
		} else {
			p.info.StdoutBytes += int64(len(ev.Data))
		}
		if p.info.Background {
			t := append(p.tail[i], ev.Data...)
			if len(t) > processTail {
				t = t[len(t)-processTail:]
			}
			p.tail[i] = t
		}
	}
	subs := make([]func(CommandEvent), 0, len(p.subs))
	for _, k := range slices.Sorted(maps.Keys(p.subs)) {
		subs = append(subs, p.subs[k])
	}
	p.mu.Unlock()
	if ev.End != nil {
		// In the ledger before anyone hears of the end: a client that lists the session's
		// commands once its command answered finds it there.
		m.processEnded(ls, agent, p)
	}
	for _, s := range subs {
		s(out)
	}
	if ev.End != nil {
		close(p.done)
	}
}

// processEnded records p in the ledger and keeps it among the session's ended processes.
func (m *Sessions) processEnded(ls *liveSession, agent string, p *liveProcess) {
	p.mu.Lock()
	info := p.info
	p.mu.Unlock()
	w := ls.ws()
	w.mu.Lock()
	w.order = append(w.order, info.ID)
	for len(w.order) > endedProcessesKept {
		delete(w.procs, w.order[0])
		w.order = w.order[1:]
	}
	w.mu.Unlock()
	m.touch(ls)
	m.log.Info("session command ended", "session", info.SessionID, "process", info.ID, "outcome", info.End.Outcome,
		"exit_code", info.End.ExitCode, "duration_ms", info.End.DurationMS)
	if m.commands != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.commands.RecordCommand(ctx, agent, info); err != nil {
			m.log.Warn("the ledger could not record a session's command", "session", info.SessionID, "process", info.ID, "error", err)
		}
	}
}

// process returns agent's session id's process pid.
func (m *Sessions) process(ctx context.Context, agent, id, pid string) (*liveSession, *liveProcess, error) {
	ls, err := m.callable(ctx, agent, id)
	if err != nil {
		return nil, nil, err
	}
	w := ls.ws()
	w.mu.Lock()
	p := w.procs[pid]
	w.mu.Unlock()
	if p == nil {
		return nil, nil, fmt.Errorf("%w: session %s has no process %q; GET …/sessions/%s/processes lists them", sandbox.ErrProcessNotFound, id, pid, id)
	}
	return ls, p, nil
}

// Processes lists agent's session id's processes: those running, then the last ended ones,
// oldest first.
func (m *Sessions) Processes(ctx context.Context, agent, id string) ([]ProcessInfo, error) {
	ls, err := m.lookup(ctx, agent, id)
	if err != nil {
		return nil, err
	}
	w := ls.ws()
	w.mu.Lock()
	list := make([]ProcessInfo, 0, len(w.procs))
	for _, p := range w.procs {
		p.mu.Lock()
		list = append(list, p.info)
		p.mu.Unlock()
	}
	w.mu.Unlock()
	slices.SortFunc(list, func(a, b ProcessInfo) int {
		if c := a.StartedAt.Compare(b.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return list, nil
}

// Process returns one process of agent's session id.
func (m *Sessions) Process(ctx context.Context, agent, id, pid string) (ProcessInfo, error) {
	_, p, err := m.process(ctx, agent, id, pid)
	if err != nil {
		return ProcessInfo{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.info, nil
}

// Attach passes process pid's output to emit from now on ("stdout" and "stderr" events, then
// "end"), after a "start" event with the process and, when tail is set, the latest output it
// kept; it returns once the process has ended or ctx is done. An ended process gets its
// "end" event at once.
func (m *Sessions) Attach(ctx context.Context, agent, id, pid string, tail bool, emit func(CommandEvent)) (ProcessInfo, error) {
	_, p, err := m.process(ctx, agent, id, pid)
	if err != nil {
		return ProcessInfo{}, err
	}
	events := make(chan CommandEvent, 256)
	overflow := make(chan struct{})
	var once sync.Once
	p.mu.Lock()
	info := p.info
	t := [2]string{string(p.tail[0]), string(p.tail[1])}
	key := p.nextSub
	p.nextSub++
	if info.State == "running" {
		p.subs[key] = func(ev CommandEvent) {
			select {
			case events <- ev:
			default: // a client too slow to keep up loses the stream, not the process
				once.Do(func() { close(overflow) })
			}
		}
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.subs, key)
		p.mu.Unlock()
	}()
	emit(CommandEvent{Type: "start", Process: &info})
	if tail {
		for i, s := range t {
			if s != "" {
				emit(CommandEvent{Type: [2]string{"stdout", "stderr"}[i], Data: s})
			}
		}
	}
	if info.State != "running" {
		emit(CommandEvent{Type: "end", Process: &info})
		return info, nil
	}
	for {
		select {
		case ev := <-events:
			emit(ev)
			if ev.Type == "end" {
				return *ev.Process, nil
			}
		case <-overflow:
			return info, errclass.Newf(errclass.Busy, "the client read process %s's output too slowly and was detached; attach again", pid)
		case <-ctx.Done():
			return info, ctx.Err()
		}
	}
}

// Wait waits until process pid has ended (or ctx is done) and returns it.
func (m *Sessions) Wait(ctx context.Context, agent, id, pid string) (ProcessInfo, error) {
	_, p, err := m.process(ctx, agent, id, pid)
	if err != nil {
		return ProcessInfo{}, err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return ProcessInfo{}, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.info, nil
}

// running returns p's session and p when it is still running, or the error that answers.
func (m *Sessions) running(ctx context.Context, agent, id, pid string) (*liveSession, error) {
	ls, p, err := m.process(ctx, agent, id, pid)
	if err != nil {
		return nil, err
	}
	select {
	case <-p.done:
		return nil, errclass.Newf(errclass.Conflict, "process %s has ended (%s); start a new command", pid, p.info.End.Outcome)
	default:
	}
	return ls, nil
}

// Input writes data to process pid's stdin (or terminal), closing stdin after it when
// closeStdin is set.
func (m *Sessions) Input(ctx context.Context, agent, id, pid string, data []byte, closeStdin bool) error {
	if len(data) > MaxCommandStdin {
		return &sandbox.FieldError{Field: "data", TooLarge: true, Message: fmt.Sprintf("is %d bytes; the limit is %d: send it in parts", len(data), MaxCommandStdin)}
	}
	ls, err := m.running(ctx, agent, id, pid)
	if err != nil {
		return err
	}
	m.touch(ls)
	return ls.box.ProcessInput(ctx, pid, data, closeStdin)
}

// Signal sends process pid (its process group) a signal by name ("SIGTERM", "TERM", "term").
// SIGKILL kills it with every process it started.
func (m *Sessions) Signal(ctx context.Context, agent, id, pid, signal string) error {
	sig, err := sandbox.CheckSignal(signal)
	if err != nil {
		return err
	}
	ls, err := m.running(ctx, agent, id, pid)
	if err != nil {
		return err
	}
	m.touch(ls)
	return ls.box.SignalProcess(ctx, pid, sig)
}

// Resize sets the size of process pid's terminal.
func (m *Sessions) Resize(ctx context.Context, agent, id, pid string, size sandbox.TermSize) error {
	if size.Rows == 0 || size.Cols == 0 {
		return &sandbox.FieldError{Field: "rows", Message: "rows and cols must be at least 1"}
	}
	ls, err := m.running(ctx, agent, id, pid)
	if err != nil {
		return err
	}
	return ls.box.ResizeProcess(ctx, pid, size)
}

// box returns agent's live session id's box, marking it used: a paused one is resumed when it
// was created with auto_resume, else a *SessionPausedError (a frozen box would answer nothing).
func (m *Sessions) box(ctx context.Context, agent, id string) (sandbox.SessionBox, error) {
	ls, err := m.callable(ctx, agent, id)
	if err != nil {
		return nil, err
	}
	m.touch(ls)
	return ls.box, nil
}

// ReadFile reads a file of agent's session id: length bytes from offset (0: to the end), at
// most MaxReadBytes (more is a too-large error naming the limit). The read counts against the
// daemon's budget of reads in flight (SessionConfig.ReadsMaxBytes; no room within a moment: an
// error of class busy) until the answer's Release is called: call it once the answer is
// written. A session's large reads run one at a time, the others waiting (bounded by ctx).
func (m *Sessions) ReadFile(ctx context.Context, agent, id, p string, offset, length int64) (sandbox.FileContent, error) {
	ls, err := m.callable(ctx, agent, id)
	if err != nil {
		return sandbox.FileContent{}, err
	}
	m.touch(ls)
	return m.read(ctx, ls, sandbox.FileRead{Path: p, Offset: offset, Length: length, MaxBytes: MaxReadBytes})
}

// WriteFile creates or replaces the file p of agent's session id with what r holds (making its
// parent directories when parents is set). It is written to a temporary file beside it and
// renamed into place: a failed write (the session's disk cap) leaves neither half a file nor
// a changed one.
func (m *Sessions) WriteFile(ctx context.Context, agent, id, p string, r io.Reader, parents bool) (sandbox.FileEntry, error) {
	b, err := m.box(ctx, agent, id)
	if err != nil {
		return sandbox.FileEntry{}, err
	}
	buf := make([]byte, writeChunk)
	n, rerr := io.ReadFull(r, buf)
	if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
		return b.WriteFile(ctx, sandbox.FileWrite{Path: p, Content: buf[:n], Parents: parents})
	}
	if rerr != nil {
		return sandbox.FileEntry{}, fmt.Errorf("reading the file's content: %w", rerr)
	}
	// Larger than one message: in parts, to a temporary name, then renamed.
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	dir, base := path.Split(p)
	tmp := dir + ".sandpit-upload-" + hex.EncodeToString(suffix[:]) + "-" + base
	if len(tmp) > 4000 {
		return sandbox.FileEntry{}, &sandbox.FieldError{Field: "path", Message: "is too long"}
	}
	fail := func(err error) (sandbox.FileEntry, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = b.RemoveFile(cctx, sandbox.FileRemove{Path: tmp})
		return sandbox.FileEntry{}, err
	}
	if _, err := b.WriteFile(ctx, sandbox.FileWrite{Path: tmp, Content: buf[:n], Parents: parents}); err != nil {
		return fail(err)
	}
	for {
		n, rerr = io.ReadFull(r, buf)
		if n > 0 {
			if _, err := b.WriteFile(ctx, sandbox.FileWrite{Path: tmp, Content: buf[:n], Append: true}); err != nil {
				return fail(err)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return fail(fmt.Errorf("reading the file's content: %w", rerr))
		}
	}
	ent, err := b.RenameFile(ctx, sandbox.FileRename{From: tmp, To: p, Overwrite: true})
	if err != nil {
		return fail(err)
	}
	return ent, nil
}

// ListFiles lists the directory p of agent's session id ("": its home), depth levels down (1:
// its entries).
func (m *Sessions) ListFiles(ctx context.Context, agent, id, p string, depth int) (sandbox.FileListing, error) {
	if p == "" {
		p = sandbox.SessionHome
	}
	if depth < 0 || depth > 64 {
		return sandbox.FileListing{}, &sandbox.FieldError{Field: "depth", Message: fmt.Sprintf("is %d; allowed range is 1 to 64", depth)}
	}
	b, err := m.box(ctx, agent, id)
	if err != nil {
		return sandbox.FileListing{}, err
	}
	return b.ListFiles(ctx, sandbox.FileList{Path: p, Depth: depth, MaxEntries: 10_000})
}

// StatFile describes the path p of agent's session id.
func (m *Sessions) StatFile(ctx context.Context, agent, id, p string) (sandbox.FileEntry, error) {
	b, err := m.box(ctx, agent, id)
	if err != nil {
		return sandbox.FileEntry{}, err
	}
	return b.StatFile(ctx, sandbox.FileStat{Path: p})
}

// MakeDir makes the directory p of agent's session id (and its parents, when set).
func (m *Sessions) MakeDir(ctx context.Context, agent, id, p string, parents bool) (sandbox.FileEntry, error) {
	b, err := m.box(ctx, agent, id)
	if err != nil {
		return sandbox.FileEntry{}, err
	}
	return b.MakeDir(ctx, sandbox.FileMkdir{Path: p, Parents: parents})
}

// RenameFile renames or moves from to to in agent's session id (replacing to only when
// overwrite is set).
func (m *Sessions) RenameFile(ctx context.Context, agent, id, from, to string, overwrite bool) (sandbox.FileEntry, error) {
	b, err := m.box(ctx, agent, id)
	if err != nil {
		return sandbox.FileEntry{}, err
	}
	return b.RenameFile(ctx, sandbox.FileRename{From: from, To: to, Overwrite: overwrite})
}

// RemoveFile removes the path p of agent's session id (a directory with its contents only
// when recursive is set).
func (m *Sessions) RemoveFile(ctx context.Context, agent, id, p string, recursive bool) error {
	b, err := m.box(ctx, agent, id)
	if err != nil {
		return err
	}
	return b.RemoveFile(ctx, sandbox.FileRemove{Path: p, Recursive: recursive})
}

// inOrder returns emit made safe for the two goroutines a foreground command's events come
// from (its output, on the control line's; its start, on the caller's), and keeping "start"
// first: output that arrives before it waits for it. nil stays nil.
func inOrder(emit func(CommandEvent)) func(CommandEvent) {
	if emit == nil {
		return nil
	}
	var (
		mu      sync.Mutex
		started bool
		early   []CommandEvent
	)
	return func(ev CommandEvent) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case ev.Type == "start":
			started = true
			emit(ev)
			for _, e := range early {
				emit(e)
			}
			early = nil
		case !started:
			early = append(early, ev)
		default:
			emit(ev)
		}
	}
}

// LookFiles lists like ListFiles and LookFile reads like ReadFile, for someone looking on (the
// web console): only while the session is active, without resuming a paused or hibernated one
// (auto_resume or not: a *sandbox.SessionPausedError) and without counting as its use (its
// idle timeout runs on).
func (m *Sessions) LookFiles(ctx context.Context, agent, id, p string, depth int) (sandbox.FileListing, error) {
	if p == "" {
		p = sandbox.SessionHome
	}
	ls, err := m.activeSession(ctx, agent, id)
	if err != nil {
		return sandbox.FileListing{}, err
	}
	return ls.box.ListFiles(ctx, sandbox.FileList{Path: p, Depth: max(depth, 1), MaxEntries: 10_000})
}

// LookFile reads like ReadFile (in the same budget; call the answer's Release once written);
// see LookFiles.
func (m *Sessions) LookFile(ctx context.Context, agent, id, p string, offset, length int64) (sandbox.FileContent, error) {
	ls, err := m.activeSession(ctx, agent, id)
	if err != nil {
		return sandbox.FileContent{}, err
	}
	return m.read(ctx, ls, sandbox.FileRead{Path: p, Offset: offset, Length: length, MaxBytes: MaxReadBytes})
}

// activeSession returns agent's live session id while it is active, else the error that says
// why not (not found, ended, paused or hibernated), touching nothing.
func (m *Sessions) activeSession(ctx context.Context, agent, id string) (*liveSession, error) {
	if agent == "" {
		agent = "default"
	}
	if _, ok := m.hibernatedOf(agent, id); ok {
		return nil, &sandbox.SessionPausedError{ID: id, Agent: agent, State: sandbox.SessionHibernated}
	}
	ls, err := m.lookup(ctx, agent, id)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	paused := ls.life.paused
	m.mu.Unlock()
	if paused {
		return nil, &sandbox.SessionPausedError{ID: id, Agent: agent, State: sandbox.SessionPaused}
	}
	return ls, nil
}
