package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A session's commands (foreground, background, in a terminal), served by the session's own
// box (sandbox.Workspace). Commands run alongside the interpreter's calls, not in their turn:
// they share the box, not the call order. The ledger records each command like a call (see
// sandbox.CommandRecorder).

// Bounds of the commands.
const (
	// MaxProcesses caps a session's commands that run at once (and ended ones kept).
	MaxProcesses = 64
	// MaxCommandStdin caps a command's first stdin and each input, in bytes.
	MaxCommandStdin = 8 << 20
	// endedProcessesKept is how many ended processes a session keeps for listing and wait.
	endedProcessesKept = 32
)

// CommandRequest asks for a command in a session.
type CommandRequest struct {
	// Cmd is run with `bash -lc`; Argv instead is run as it is. Exactly one is given.
	Cmd  string
	Argv []string
	// Cwd is the working directory (the session's view; "" is its home); Env adds variables
	// to the session's own (Env wins).
	Cwd string
	Env map[string]string
	// AnyCwd lets Cwd be any directory the session's user may enter and read (see
	// sandbox.CommandSpec).
	AnyCwd bool
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
// PID), "stdout" or "stderr" (Data), "end" (Process set, with End). Dropped, on the output a
// background command's box kept (Attach's tail), counts the bytes of the stream before Data
// that it did not keep.
type CommandEvent struct {
	Type    string       `json:"type"`
	Data    string       `json:"data,omitempty"`
	Dropped int64        `json:"dropped,omitempty"`
	Process *ProcessInfo `json:"process,omitempty"`
}

// CommandResult is a foreground command's whole answer.
type CommandResult struct {
	Process ProcessInfo `json:"process"`
	Stdout  string      `json:"stdout"`
	Stderr  string      `json:"stderr"`
}

// process is a command of a session's box, running or recently ended. A background one's
// output stays in its box (see sandbox.CommandSpec.Background) and reaches the daemon only
// while a reader is attached: the daemon keeps none of it but what the box sent with its end.
type process struct {
	mu         sync.Mutex
	info       ProcessInfo
	readers    map[string]*reader // by name: "command" (a foreground command's caller), "r1"… (Attach)
	nextReader int
	tail       *sandbox.ProcessTail // what a background process's box kept at its end
	done       chan struct{}
	recordedAt time.Time
}

// reader is a client of a process's events.
type reader struct {
	emit func(CommandEvent) // called outside the process's lock, from one goroutine
	// live: it is passed the process's output (a background process's reader: once its box
	// has sent the tail for it); tail: it wants the output kept first.
	live, tail bool
}

// opening returns the events a reader of a background process starts with: its start (as of
// info), then the output its box kept (t, when the reader asked for it).
func (r *reader) opening(info ProcessInfo, t *sandbox.ProcessTail) []CommandEvent {
	evs := []CommandEvent{{Type: "start", Process: &info}}
	if r.tail && t != nil {
		if t.Stdout != "" {
			evs = append(evs, CommandEvent{Type: "stdout", Data: t.Stdout, Dropped: t.StdoutBytes - int64(len(t.Stdout))})
		}
		if t.Stderr != "" {
			evs = append(evs, CommandEvent{Type: "stderr", Data: t.Stderr, Dropped: t.StderrBytes - int64(len(t.Stderr))})
		}
	}
	return evs
}

// workspace is the commands of a session's box.
type workspace struct {
	// largeReads holds a token while a large file read runs (see Session.read).
	largeReads chan struct{}

	mu    sync.Mutex
	procs map[string]*process
	order []string // ended process IDs, oldest first
}

func (h *held) workspace() *workspace {
	h.wsOnce.Do(func() {
		h.ws = &workspace{procs: map[string]*process{}, largeReads: make(chan struct{}, 1)}
	})
	return h.ws
}

// Command runs req in the session. A foreground command's events go to emit (start, output,
// end) and its whole answer is returned at its end; a background one returns at once with its
// process (its output reaches clients that Attach). Errors: a *FieldError, those of a session
// that cannot work now (see callable), the box's (a bad cwd: invalid), too many processes
// (busy).
func (s *Session) Command(ctx context.Context, req CommandRequest, emit func(CommandEvent)) (CommandResult, error) {
	spec, err := s.commandSpec(req)
	if err != nil {
		return CommandResult{}, err
	}
	h, err := s.callable(ctx)
	if err != nil {
		return CommandResult{}, err
	}
	w := h.workspace()
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
		return CommandResult{}, errclass.Newf(errclass.Busy, "session %s runs %d processes, its limit; wait for one to end or signal one (SIGTERM)", s.id, MaxProcesses)
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
	p := &process{done: make(chan struct{}), readers: map[string]*reader{}, info: ProcessInfo{
		ID: pid, SessionID: s.id, Command: display, Argv: spec.Argv, Cwd: cwd, Background: req.Background, PTY: req.PTY,
		TimeoutMS: spec.TimeoutMS, State: "running", StartedAt: time.Now().UTC()}}
	var (
		stdout, stderr strings.Builder
		whole          bool
	)
	emit = inOrder(emit)
	if !req.Background {
		whole = true
		p.readers["command"] = &reader{live: true, emit: func(ev CommandEvent) {
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
		}}
	}
	w.mu.Lock()
	w.procs[pid] = p
	w.mu.Unlock()
	s.touch()
	agent := s.Agent()
	osPID, err := h.box.StartCommand(ctx, pid, spec, func(ev sandbox.ProcessEvent) { s.processEvent(h, agent, p, ev) })
	if err != nil {
		w.mu.Lock()
		delete(w.procs, pid)
		w.mu.Unlock()
		if errors.Is(err, sandbox.ErrNotReady) {
			if serr := s.stateErr(); serr != nil {
				return CommandResult{}, serr
			}
		}
		return CommandResult{}, err
	}
	p.mu.Lock()
	p.info.PID = osPID
	info := p.info
	p.mu.Unlock()
	s.r.log.Info("session command started", "session", s.id, "process", pid, "pid", osPID, "background", req.Background)
	if !whole {
		return CommandResult{Process: info}, nil
	}
	if emit != nil {
		emit(CommandEvent{Type: "start", Process: &info})
	}
	defer s.inCall()()
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
		_ = h.box.SignalProcess(context.WithoutCancel(ctx), pid, "SIGKILL")
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

// commandSpec checks req and makes the box's spec: the session's environment under the
// command's own.
func (s *Session) commandSpec(req CommandRequest) (sandbox.CommandSpec, error) {
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
	if err := sandbox.CheckEnv("env", req.Env); err != nil {
		return spec, err
	}
	if len(req.Stdin) > MaxCommandStdin {
		return spec, &sandbox.FieldError{Field: "stdin", TooLarge: true, Message: fmt.Sprintf("is %d bytes; the limit is %d: send more with the process's input", len(req.Stdin), MaxCommandStdin)}
	}
	if req.PTY != nil && (req.PTY.Rows == 0 || req.PTY.Cols == 0) {
		return spec, &sandbox.FieldError{Field: "pty", Message: "rows and cols must be at least 1"}
	}
	env, ca := s.commandEnv(req.Env)
	spec.SecretCA = ca
	spec.Cwd, spec.AnyCwd, spec.Env, spec.Stdin, spec.PTY = req.Cwd, req.AnyCwd, env, req.Stdin, req.PTY
	spec.KeepStdin = req.Background || req.PTY != nil
	spec.Background = req.Background
	cfg := s.r.svc.Config()
	spec.Processes, spec.OpenFiles = cfg.Limits.Processes, cfg.Limits.OpenFiles
	if !req.Background {
		timeout := cfg.DefaultTimeout
		if req.TimeoutMS != nil {
			if err := sandbox.CheckTimeout(*req.TimeoutMS, cfg.MaxTimeout, "the daemon's max_timeout_ms; use background for longer commands"); err != nil {
				return spec, err
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

// processEvent takes one event of p from h's box and passes it to p's readers: output to
// those that are live, a tail to the reader it is for (which is live from then on), the end
// to all (after the opening a reader still waiting for its tail would have had).
func (s *Session) processEvent(h *held, agent string, p *process, ev sandbox.ProcessEvent) {
	type call struct {
		r   *reader
		evs []CommandEvent
	}
	var calls []call
	p.mu.Lock()
	if t := ev.Tail; t != nil {
		// The box's counts: what a background process wrote while no one read it.
		p.info.StdoutBytes, p.info.StderrBytes = max(p.info.StdoutBytes, t.StdoutBytes), max(p.info.StderrBytes, t.StderrBytes)
	}
	switch {
	case ev.End != nil:
		now := time.Now().UTC()
		end := *ev.End
		if why := h.ending.Load(); why != nil && end.Outcome == sandbox.OutcomeSandboxError {
			// Its sandbox was removed on purpose, not lost: sandpit ended it.
			end.Outcome, end.Reason = sandbox.OutcomeKilled, "it ended with its sandbox: "+*why
		}
		p.info.State, p.info.EndedAt, p.info.End = "ended", &now, &end
		p.tail = ev.Tail
		info := p.info
		for _, k := range slices.Sorted(maps.Keys(p.readers)) {
			r := p.readers[k]
			var evs []CommandEvent
			if !r.live {
				evs = r.opening(info, p.tail)
			}
			calls = append(calls, call{r, append(evs, CommandEvent{Type: "end", Process: &info})})
		}
	case ev.Tail != nil:
		if r := p.readers[ev.Tail.Reader]; r != nil && !r.live {
			r.live = true
			calls = append(calls, call{r, r.opening(p.info, ev.Tail)})
		}
	default:
		if ev.Stream == sandbox.StreamStderr {
			p.info.StderrBytes += int64(len(ev.Data))
		} else {
			p.info.StdoutBytes += int64(len(ev.Data))
		}
		out := []CommandEvent{{Type: string(ev.Stream), Data: ev.Data}}
		for _, k := range slices.Sorted(maps.Keys(p.readers)) {
			if r := p.readers[k]; r.live {
				calls = append(calls, call{r, out})
			}
		}
	}
	p.mu.Unlock()
	if ev.End != nil {
		// In the ledger before anyone hears of the end: a client that lists the session's
		// commands once its command answered finds it there.
		s.processEnded(h, agent, p)
	}
	for _, c := range calls {
		for _, e := range c.evs {
			c.r.emit(e)
		}
	}
	if ev.End != nil {
		close(p.done)
	}
}

// processEnded records p in the ledger and keeps it among h's ended processes.
func (s *Session) processEnded(h *held, agent string, p *process) {
	p.mu.Lock()
	info := p.info
	p.mu.Unlock()
	w := h.workspace()
	w.mu.Lock()
	w.order = append(w.order, info.ID)
	for len(w.order) > endedProcessesKept {
		delete(w.procs, w.order[0])
		w.order = w.order[1:]
	}
	w.mu.Unlock()
	s.touch()
	log := s.r.log
	log.Info("session command ended", "session", info.SessionID, "process", info.ID, "outcome", info.End.Outcome,
		"exit_code", info.End.ExitCode, "duration_ms", info.End.DurationMS)
	if c := s.r.commands; c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.RecordCommand(ctx, agent, info); err != nil {
			log.Warn("the ledger could not record a session's command", "session", info.SessionID, "process", info.ID, "error", err)
		}
	}
}

// process returns the session's process pid.
func (s *Session) process(ctx context.Context, pid string) (*held, *process, error) {
	h, err := s.callable(ctx)
	if err != nil {
		return nil, nil, err
	}
	w := h.workspace()
	w.mu.Lock()
	p := w.procs[pid]
	w.mu.Unlock()
	if p == nil {
		return nil, nil, fmt.Errorf("%w: session %s has no process %q; GET …/sessions/%s/processes lists them", sandbox.ErrProcessNotFound, s.id, pid, s.id)
	}
	return h, p, nil
}

// Processes lists the session's processes: those running, then the last ended ones, oldest
// first. A paused or hibernated session has none running; a hibernated one lists none.
func (s *Session) Processes(ctx context.Context) ([]ProcessInfo, error) {
	s.mu.Lock()
	h, err := s.cur, s.endedErr()
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	list := []ProcessInfo{}
	if h == nil {
		return list, nil
	}
	w := h.workspace()
	w.mu.Lock()
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

// Process returns one process of the session.
func (s *Session) Process(ctx context.Context, pid string) (ProcessInfo, error) {
	_, p, err := s.process(ctx, pid)
	if err != nil {
		return ProcessInfo{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.info, nil
}

// Attach passes process pid's output to emit from now on ("stdout" and "stderr" events, then
// "end"), after a "start" event with the process and, when tail is set, the latest output its
// box kept of a background process (with the count of the bytes before it that it did not
// keep); it returns once the process has ended or ctx is done. An ended process gets its
// "end" event at once. A background process's output crosses the box's line only while a
// client is attached.
func (s *Session) Attach(ctx context.Context, pid string, tail bool, emit func(CommandEvent)) (ProcessInfo, error) {
	h, p, err := s.process(ctx, pid)
	if err != nil {
		return ProcessInfo{}, err
	}
	events := make(chan CommandEvent, 256)
	overflow := make(chan struct{})
	var once sync.Once
	p.mu.Lock()
	info := p.info
	r := &reader{live: !info.Background, tail: tail && info.Background, emit: func(ev CommandEvent) {
		select {
		case events <- ev:
		default: // a client too slow to keep up loses the stream, not the process
			once.Do(func() { close(overflow) })
		}
	}}
	if info.State != "running" {
		evs := r.opening(info, p.tail)
		p.mu.Unlock()
		for _, ev := range evs {
			emit(ev)
		}
		emit(CommandEvent{Type: "end", Process: &info})
		return info, nil
	}
	p.nextReader++
	name := "r" + strconv.Itoa(p.nextReader)
	p.readers[name] = r
	p.mu.Unlock()
	defer s.inCall()()
	attached := false
	defer func() {
		p.mu.Lock()
		delete(p.readers, name)
		ended := p.info.State != "running"
		p.mu.Unlock()
		if attached && !ended {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := h.box.DetachProcess(dctx, pid, name); err != nil { // it ended, or its sandbox did
				s.r.log.Debug("detaching from a session's process", "session", s.id, "process", pid, "error", err)
			}
		}
	}()
	if info.Background {
		// Not cut short by ctx: the box must not be left attached to a reader that is gone.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err := h.box.AttachProcess(actx, pid, name, r.tail)
		cancel()
		switch {
		case err == nil:
			attached = true
		case errors.Is(err, errclass.NotFound): // it has ended in the box: its end is on its way
		default:
			attached = true // it may have been attached all the same
			return info, err
		}
	} else {
		emit(CommandEvent{Type: "start", Process: &info})
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
func (s *Session) Wait(ctx context.Context, pid string) (ProcessInfo, error) {
	_, p, err := s.process(ctx, pid)
	if err != nil {
		return ProcessInfo{}, err
	}
	defer s.inCall()()
	select {
	case <-p.done:
	case <-ctx.Done():
		return ProcessInfo{}, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.info, nil
}

// running returns p's box when process pid still runs, or the error that answers.
func (s *Session) running(ctx context.Context, pid string) (*held, error) {
	h, p, err := s.process(ctx, pid)
	if err != nil {
		return nil, err
	}
	select {
	case <-p.done:
		return nil, errclass.Newf(errclass.Conflict, "process %s has ended (%s); start a new command", pid, p.info.End.Outcome)
	default:
	}
	return h, nil
}

// Input writes data to process pid's stdin (or terminal), closing stdin after it when
// closeStdin is set.
func (s *Session) Input(ctx context.Context, pid string, data []byte, closeStdin bool) error {
	if len(data) > MaxCommandStdin {
		return &sandbox.FieldError{Field: "data", TooLarge: true, Message: fmt.Sprintf("is %d bytes; the limit is %d: send it in parts", len(data), MaxCommandStdin)}
	}
	h, err := s.running(ctx, pid)
	if err != nil {
		return err
	}
	s.touch()
	return h.box.ProcessInput(ctx, pid, data, closeStdin)
}

// Signal sends process pid (its process group) a signal by name ("SIGTERM", "TERM", "term").
// SIGKILL kills it with every process it started.
func (s *Session) Signal(ctx context.Context, pid, signal string) error {
	sig, err := sandbox.CheckSignal(signal)
	if err != nil {
		return err
	}
	h, err := s.running(ctx, pid)
	if err != nil {
		return err
	}
	s.touch()
	return h.box.SignalProcess(ctx, pid, sig)
}

// Resize sets the size of process pid's terminal.
func (s *Session) Resize(ctx context.Context, pid string, size sandbox.TermSize) error {
	if size.Rows == 0 || size.Cols == 0 {
		return &sandbox.FieldError{Field: "rows", Message: "rows and cols must be at least 1"}
	}
	h, err := s.running(ctx, pid)
	if err != nil {
		return err
	}
	return h.box.ResizeProcess(ctx, pid, size)
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

// commandEnv returns the environment of a command of s, its env, then its secrets'
// placeholders, then extra (nil when all are empty), and the CA its secrets' hosts are
// presented with ("" when it has no secrets).
func (s *Session) commandEnv(extra map[string]string) (env map[string]string, ca string) {
	s.mu.Lock()
	env, sec := maps.Clone(s.env), s.secrets
	s.mu.Unlock()
	if env == nil && (len(extra) > 0 || sec != nil) {
		env = map[string]string{}
	}
	if sec != nil {
		maps.Copy(env, sec.Env())
		ca = sec.CA()
	}
	maps.Copy(env, extra)
	return env, ca
}
