// Package control is the daemon's end of the control line to sandpit-executor: it sends
// runs over a protocol.Conn, routes the executor's output chunks and results back to the
// callers that are waiting for them, and fails every waiting run when the line ends.
//
// A *Line is a sandbox.Runtime for as long as it lives.
package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// ErrClosed is returned for runs on a line that has ended; errors.Is(err, ErrClosed) holds
// for every error caused by the line's end.
var ErrClosed = errors.New("the control line to the executor ended")

// CancelGrace is how long Run waits for the executor's result after it asked for a cancel. It
// covers the executor's own kill of the run, its KillTimeout (5 s), which a fork bomb on a
// loaded node can use up; a shorter grace called a kill still under way unconfirmed, and the
// slot was replaced.
const CancelGrace = 10 * time.Second

// Options tune a line. Zero values take the defaults.
type Options struct {
	// HeartbeatInterval is how often the daemon pings the executor (default 2 s).
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long the executor may leave pings unanswered before the line
	// is ended as hung (default 10 s). Ready reports not ready after two unanswered intervals.
	HeartbeatTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = 2 * time.Second
	}
	if o.HeartbeatTimeout <= 0 {
		o.HeartbeatTimeout = 10 * time.Second
	}
	return o
}

// Line drives one executor over one connection (the executor protocol).
type Line struct {
	conn   *protocol.Conn
	closer io.Closer
	log    *slog.Logger
	hello  protocol.Hello
	opts   Options

	mu      sync.Mutex
	calls   map[string]*call
	settles map[int]*settle // by slot: its last run's cleanup
	err     error           // why the line ended; nil while it lives
	done    chan struct{}
	heard   *heardReader // the executor's output: when its last byte came (see heardReader)
	// fork and forkWhy are the executor's fork server state at its last pong (protocol.Fork*;
	// "" before the first).
	fork, forkWhy string
	suspended     bool                     // the executor is frozen on purpose (see Suspend): no pings, no timeout
	pings         map[string]chan struct{} // Ping's waiters, by the ping's ID
	pingSeq       int
	// The egress proxy's streams (network "allowlist"): the dialer of each run or install
	// that may open them, by ID, and the streams open, with their owner.
	dialers map[string]sandbox.EgressDialer
	streams map[uint64]*egressStream
	opening atomic.Int64 // egress requests being decided
	// The streams to the session's ports (see ports.go): the last number given, and those
	// waiting for the executor's answer.
	portSeq     atomic.Uint64
	portOpening map[uint64]chan *protocol.Message
}

// egressStream is one connection carried for the executor's proxy.
type egressStream struct {
	owner  string
	stream *protocol.Stream
}

// call is one run waiting for its result. The reader goroutine appends to its queue; the
// goroutine in Run drains it, so a slow emit never blocks the line.
type call struct {
	notify chan struct{} // capacity 1
	mu     sync.Mutex
	queue  []*protocol.Message
}

func (c *call) push(m *protocol.Message) {
	c.mu.Lock()
	c.queue = append(c.queue, m)
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

func (c *call) drain() []*protocol.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queue
	c.queue = nil
	return q
}

// settle is a slot's cleanup after its last run: done is closed when the executor reports the
// slot settled, with err set when its cleanup failed.
type settle struct {
	done chan struct{}
	err  error
}

// Start waits for the executor's hello from r (bounded by ctx), then serves the line until
// it ends, pinging the executor to detect a hung one. closer, when not nil, is closed by Close
// and when the line fails.
func Start(ctx context.Context, r io.Reader, w io.Writer, closer io.Closer, log *slog.Logger, opts Options) (*Line, error) {
	heard := &heardReader{r: r}
	heard.mark()
	c := &Line{conn: protocol.NewConn(heard, w), closer: closer, log: log, opts: opts.withDefaults(), heard: heard,
		calls: map[string]*call{}, settles: map[int]*settle{}, done: make(chan struct{}),
		dialers: map[string]sandbox.EgressDialer{}, streams: map[uint64]*egressStream{}, portOpening: map[uint64]chan *protocol.Message{}}
	type helloResult struct {
		m   *protocol.Message
		err error
	}
	hc := make(chan helloResult, 1)
	go func() {
		m, err := c.conn.Receive()
		hc <- helloResult{m, err}
	}()
	select {
	case <-ctx.Done():
		c.closeConn()
		return nil, fmt.Errorf("waiting for the executor's greeting: %w", ctx.Err())
	case h := <-hc:
		if h.err != nil {
			c.closeConn()
			return nil, fmt.Errorf("waiting for the executor's greeting: %w", h.err)
		}
		if h.m.Kind != protocol.KindHello || h.m.Hello == nil {
			c.closeConn()
			return nil, fmt.Errorf("executor spoke %q before greeting", h.m.Kind)
		}
		if h.m.Hello.Version != protocol.Version {
			c.closeConn()
			return nil, fmt.Errorf("executor speaks protocol version %d, this daemon speaks %d: rebuild the image (sandpit image build)",
				h.m.Hello.Version, protocol.Version)
		}
		c.hello = *h.m.Hello
		heard.mark() // the silence counts from the greeting, not from the wait for it
	}
	go c.readLoop()
	go c.heartbeat()
	return c, nil
}

// heartbeat pings the executor until the line ends, and ends the line when nothing has
// come from the executor for HeartbeatTimeout (stopped, frozen or deadlocked: its pipe is
// open but nobody reads it, and it answers no ping).
func (c *Line) heartbeat() {
	t := time.NewTicker(c.opts.HeartbeatInterval)
	defer t.Stop()
	for seq := 1; ; seq++ {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		c.mu.Lock()
		silent, suspended := c.heard.silence(), c.suspended
		c.mu.Unlock()
		if suspended {
			continue
		}
		if silent > c.opts.HeartbeatTimeout {
			c.fail(fmt.Errorf("%w: the executor has not answered for %s", ErrClosed, silent.Round(10*time.Millisecond)))
			return
		}
		// Sent from its own goroutine: a hung executor stops reading, and the write blocks.
		go func() {
			if err := c.conn.Send(&protocol.Message{Kind: protocol.KindPing, ID: strconv.Itoa(seq)}); err != nil {
				c.fail(fmt.Errorf("%w: sending a ping: %w", ErrClosed, err))
			}
		}()
	}
}

// Suspend stops the heartbeat while the executor is frozen on purpose (its container paused):
// a frozen executor answers no ping, and its line must not end for that. Resume starts the
// heartbeat again, counting the executor's silence from then.
func (c *Line) Suspend() {
	c.mu.Lock()
	c.suspended = true
	c.mu.Unlock()
}

// Resume undoes Suspend.
func (c *Line) Resume() {
	c.mu.Lock()
	c.suspended = false
	c.heard.mark()
	c.mu.Unlock()
}

// Fork returns the executor's fork server state as its last heartbeat answer said it
// (protocol.ForkReady, ForkStarting or ForkOff with why; "" before the first answer, about
// HeartbeatInterval after the line starts).
func (c *Line) Fork() (state, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fork, c.forkWhy
}

// Hello returns the executor's greeting.
func (c *Line) Hello() protocol.Hello { return c.hello }

// Done is closed when the line has ended.
func (c *Line) Done() <-chan struct{} { return c.done }

// Err says why the line ended, or nil while it lives.
func (c *Line) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Ready returns nil while the line lives and the executor answers its pings.
func (c *Line) Ready(context.Context) error {
	c.mu.Lock()
	err, silent := c.err, c.heard.silence()
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	if silent > 2*c.opts.HeartbeatInterval+time.Second {
		return fmt.Errorf("%w: the executor has not answered for %s", sandbox.ErrNotReady, silent.Round(10*time.Millisecond))
	}
	return nil
}

// Ping asks the executor to answer now and waits for its answer, or for ctx: Ready trusts the
// heartbeat, which notices an executor frozen or hung only after about two of its intervals,
// and a sandbox about to be handed out (a warm one claimed) must answer now. Errors wrap
// sandbox.ErrNotReady.
func (c *Line) Ping(ctx context.Context) error {
	answered := make(chan struct{})
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	if c.pings == nil {
		c.pings = map[string]chan struct{}{}
	}
	c.pingSeq++
	id := "now-" + strconv.Itoa(c.pingSeq) // the heartbeat's IDs are plain numbers
	c.pings[id] = answered
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pings, id)
		c.mu.Unlock()
	}()
	// From its own goroutine, as the heartbeat's: a hung executor stops reading.
	go func() { _ = c.conn.Send(&protocol.Message{Kind: protocol.KindPing, ID: id}) }()
	select {
	case <-answered:
		return nil
	case <-c.done:
		return fmt.Errorf("%w: %w", sandbox.ErrNotReady, c.Err())
	case <-ctx.Done():
		return fmt.Errorf("%w: the executor did not answer a ping: %w", sandbox.ErrNotReady, ctx.Err())
	}
}

// Close ends the line; the executor sees the end of its input, kills every run and exits.
// Runs still waiting fail with ErrClosed. It is idempotent.
func (c *Line) Close() error {
	c.fail(fmt.Errorf("%w: closed by the daemon", ErrClosed))
	return nil
}

func (c *Line) closeConn() {
	if c.closer != nil {
		_ = c.closer.Close()
	}
}

// fail ends the line with err (the first error wins) and wakes every waiting run.
func (c *Line) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	close(c.done)
	open := make([]*protocol.Stream, 0, len(c.streams))
	for _, es := range c.streams {
		open = append(open, es.stream)
	}
	c.mu.Unlock()
	c.closeConn()
	// No connection outlives the line: its clients see it end now, not at their next write.
	for _, s := range open {
		s.Abort(err)
	}
}

func (c *Line) readLoop() {
	for {
		m, err := c.conn.Receive()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the executor closed its output")
			}
			c.fail(fmt.Errorf("%w: %w", ErrClosed, err))
			return
		}
		switch m.Kind {
		case protocol.KindPong:
			c.mu.Lock()
			c.fork, c.forkWhy = m.Fork, m.Error
			if w, ok := c.pings[m.ID]; ok {
				close(w)
				delete(c.pings, m.ID)
			}
			c.mu.Unlock()
		case protocol.KindStdout, protocol.KindStderr, protocol.KindFile, protocol.KindDisplay, protocol.KindResult, protocol.KindRefused,
			protocol.KindInstallStatus, protocol.KindInstalled, protocol.KindPackagesResult,
			protocol.KindProcStarted, protocol.KindProcTail, protocol.KindProcEnded, protocol.KindProcAck, protocol.KindFileReply, protocol.KindPortListed,
			protocol.KindWatchStarted, protocol.KindWatchEvents, protocol.KindWatchEnded:
			c.route(m)
		case protocol.KindPortOpened:
			c.portOpened(m)
		case protocol.KindSettled:
			c.settled(m.Slot, m.Error)
		case protocol.KindEgressOpen:
			c.openEgress(m)
		case protocol.KindEgressData, protocol.KindEgressAck, protocol.KindEgressClose:
			if m.Egress != nil {
				c.mu.Lock()
				es := c.streams[m.Egress.Stream]
				c.mu.Unlock()
				// Data frames carry no ID (see protocol.Conn); the rest must name the stream's owner.
				if es != nil && (es.owner == m.ID || m.Kind == protocol.KindEgressData) {
					es.stream.Handle(m)
				}
			}
		case protocol.KindCall:
			if !c.route(m) && m.AgentCall != nil {
				c.reply(m.ID, m.AgentCall.Seq, nil, sandbox.ErrRunEnded)
			}
		default:
			c.log.Warn("unexpected message from the executor", "kind", m.Kind)
		}
	}
}

// settled records that slot's last run is cleaned up (errText: how its cleanup failed).
func (c *Line) settled(slot int, errText string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.settles[slot]
	if st == nil {
		c.log.Warn("the executor reported a slot settled that had no run", "slot", slot)
		return
	}
	select {
	case <-st.done:
		return // already settled (a refused run's)
	default:
	}
	if errText != "" {
		st.err = fmt.Errorf("cleaning up after slot %d's run failed: %s", slot, errText)
	}
	close(st.done)
}

// Settle waits until slot's last run has been cleaned up, so that the slot takes its next
// run; it returns at once for a slot that has not run. Errors: the cleanup's failure (the
// slot's files or processes may be left: a caller that can should replace the sandbox), ctx's
// error, or an error wrapping ErrClosed when the line ends first.
func (c *Line) Settle(ctx context.Context, slot int) error {
	c.mu.Lock()
	st := c.settles[slot]
	c.mu.Unlock()
	if st == nil {
		return nil
	}
	select {
	case <-st.done:
		return st.err
	case <-ctx.Done():
		return fmt.Errorf("waiting for slot %d's cleanup: %w", slot, ctx.Err())
	case <-c.done:
		return c.Err()
	}
}

// route hands m to the call waiting for its ID, and reports whether there was one.
func (c *Line) route(m *protocol.Message) bool {
	c.mu.Lock()
	cl := c.calls[m.ID]
	c.mu.Unlock()
	if cl == nil {
		c.log.Debug("message for an unknown run", "kind", m.Kind, "id", m.ID)
		return false
	}
	cl.push(m)
	return true
}

// reply answers run id's agent call seq.
func (c *Line) reply(id string, seq int64, value json.RawMessage, err error) {
	r := &protocol.AgentReply{Seq: seq, OK: err == nil, Value: value}
	if err != nil {
		r.Error = err.Error()
	}
	err = c.conn.Send(&protocol.Message{Kind: protocol.KindReply, ID: id, AgentReply: r})
	if errors.Is(err, protocol.ErrFrameTooLarge) {
		// Nothing was sent: the run gets an error instead of the answer, the line lives on.
		r = &protocol.AgentReply{Seq: seq, Error: "the answer is too large to send to the sandbox: ask for less"}
		err = c.conn.Send(&protocol.Message{Kind: protocol.KindReply, ID: id, AgentReply: r})
	}
	if err != nil {
		c.fail(fmt.Errorf("%w: sending a call's reply: %w", ErrClosed, err))
	}
}

// Run executes spec in slot and returns its result; see sandbox.Runtime for the contract.
// When ctx ends first, Run asks the executor to kill the run and waits CancelGrace for its
// result; without one it returns ctx's error. When the line ends, Run returns an error
// wrapping ErrClosed with the output received so far in the Result.
//
// A run waits for the slot's previous run to be cleaned up (see Settle) before it is sent.
func (c *Line) Run(ctx context.Context, slot int, spec sandbox.Spec, emit func(sandbox.Event)) (sandbox.Result, error) {
	if err := c.Settle(ctx, slot); err != nil && (ctx.Err() != nil || c.Err() != nil) {
		return sandbox.Result{}, fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	} // a failed cleanup is redone by the executor before the next program starts
	cl := &call{notify: make(chan struct{}, 1)}
	st := &settle{done: make(chan struct{})}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return sandbox.Result{}, fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	c.calls[spec.ID] = cl
	c.settles[slot] = st
	if spec.Egress != nil {
		c.dialers[spec.ID] = spec.Egress
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.calls, spec.ID)
		c.mu.Unlock()
		c.endEgress(spec.ID)
	}()

	started := time.Now()
	if err := c.conn.Send(&protocol.Message{Kind: protocol.KindRun, ID: spec.ID, Run: &protocol.Run{Slot: slot, Spec: spec}}); err != nil {
		if errors.Is(err, protocol.ErrFrameTooLarge) {
			// Nothing was sent: the line lives on, and the slot has nothing to clean up.
			close(st.done)
			return sandbox.Result{}, fmt.Errorf("the run's code, input and files together do not fit in one message to the sandbox "+
				"(lower the caps on them): %w", err)
		}
		c.fail(fmt.Errorf("%w: sending a run: %w", ErrClosed, err))
		return sandbox.Result{}, fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}

	o := &runOutput{c: c, ctx: ctx, slot: slot, spec: spec, emit: emit, started: started, settle: st}
	var grace <-chan time.Time
	ctxDone := ctx.Done()
	for {
		select {
		case <-cl.notify:
			if res, ended, err := o.deliver(cl.drain()); ended {
				return res, err
			}
		case <-ctxDone:
			ctxDone = nil
			grace = time.After(CancelGrace)
			if err := c.conn.Send(&protocol.Message{Kind: protocol.KindCancel, ID: spec.ID}); err != nil {
				c.fail(fmt.Errorf("%w: sending a cancel: %w", ErrClosed, err))
			}
		case <-grace:
			return o.partial(), fmt.Errorf("the executor did not confirm the cancelled run's end: %w", ctx.Err())
		case <-c.done:
			if res, ended, err := o.deliver(cl.drain()); ended {
				return res, err
			}
			return o.partial(), c.Err()
		}
	}
}

// runOutput is what a run's messages have delivered so far, in Run.
type runOutput struct {
	c       *Line
	ctx     context.Context
	slot    int
	spec    sandbox.Spec
	emit    func(sandbox.Event)
	started time.Time
	settle  *settle

	stdout, stderr strings.Builder
	files          map[string]bool // output files whose bytes arrived intact
	results        []sandbox.Display
}

// partial is the result of a run whose end did not arrive: the output received so far.
func (o *runOutput) partial() sandbox.Result {
	return sandbox.Result{Stdout: o.stdout.String(), Stderr: o.stderr.String(), Results: o.results, StartedAt: o.started.UTC(),
		DurationMS: time.Since(o.started).Milliseconds(), ExitCode: -1}
}

// deliver handles a run's queued messages in order; ended is true once the run's end has
// arrived, with its result (or the error that ended it).
func (o *runOutput) deliver(msgs []*protocol.Message) (res sandbox.Result, ended bool, err error) {
	c, spec := o.c, o.spec
	for _, m := range msgs {
		switch m.Kind {
		case protocol.KindStdout, protocol.KindStderr:
			b := &o.stdout
			if m.Kind == protocol.KindStderr {
				b = &o.stderr
			}
			b.WriteString(m.Data)
			if o.emit != nil {
				o.emit(sandbox.Event{Stream: sandbox.Stream(m.Kind), Data: m.Data})
			}
		case protocol.KindFile:
			o.file(m)
		case protocol.KindDisplay:
			if m.Display == nil {
				continue
			}
			o.results = append(o.results, *m.Display)
			if o.emit != nil {
				o.emit(sandbox.Event{Stream: sandbox.StreamDisplay, Display: m.Display})
			}
		case protocol.KindCall:
			if m.AgentCall == nil {
				continue
			}
			call := *m.AgentCall
			if spec.Calls == nil {
				c.reply(spec.ID, call.Seq, nil, errors.New("this run cannot make agent calls"))
				continue
			}
			// Answered on its own goroutine: a slow host must not hold the run's output.
			go func() {
				value, err := spec.Calls(o.ctx, call.Call)
				c.reply(spec.ID, call.Seq, value, err)
			}()
		case protocol.KindRefused:
			c.mu.Lock()
			if c.settles[o.slot] == o.settle { // nothing ran: nothing to clean up
				close(o.settle.done)
			}
			c.mu.Unlock()
			return o.partial(), true, fmt.Errorf("the executor refused the run: %s", m.Error)
		case protocol.KindResult:
			if m.Result == nil {
				return o.partial(), true, errors.New("the executor sent a result without content")
			}
			return o.result(*m.Result), true, nil
		}
	}
	return sandbox.Result{}, false, nil
}

// file passes on an output file whose bytes match its size and SHA-256 (as a "file" event
// with its content); a damaged one is logged and dropped.
func (o *runOutput) file(m *protocol.Message) {
	f := m.File
	if f == nil {
		o.c.log.Warn("the executor sent a file message without a file", "id", o.spec.ID)
		return
	}
	if !f.Holds(m.FileContent) {
		o.c.log.Warn("dropping an output file whose bytes do not match its size and SHA-256", "id", o.spec.ID,
			"file", f.Name, "size_bytes", f.SizeBytes, "received_bytes", len(m.FileContent))
		return
	}
	if o.files == nil {
		o.files = map[string]bool{}
	}
	o.files[f.Name] = true
	if o.emit != nil {
		o.emit(sandbox.Event{Stream: sandbox.StreamFile, File: f, Content: m.FileContent})
	}
}

// result is the run's result r with the streams received as chunks (r carries only their
// flags), listing only the output files whose bytes arrived intact: any other is moved to
// FilesSkipped.
func (o *runOutput) result(r sandbox.Result) sandbox.Result {
	r.Stdout, r.Stderr = o.stdout.String(), o.stderr.String()
	r.Results = o.results
	kept := r.Files[:0:0]
	for _, f := range r.Files {
		if o.files[f.Name] {
			kept = append(kept, f)
			continue
		}
		if len(r.FilesSkipped) >= sandbox.MaxSkippedFiles {
			r.FilesTruncated = true
			continue
		}
		r.FilesSkipped = append(r.FilesSkipped, sandbox.SkippedFile{Name: f.Name,
			Reason: "its bytes did not arrive intact from the sandbox"})
	}
	if len(kept) == 0 {
		kept = nil
	}
	r.Files = kept
	return r
}

// register adds a call for id, or returns the line's error.
func (c *Line) register(id string) (*call, func(), error) {
	cl := &call{notify: make(chan struct{}, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil, nil, fmt.Errorf("%w: %w", sandbox.ErrNotReady, c.err)
	}
	c.calls[id] = cl
	return cl, func() {
		c.mu.Lock()
		delete(c.calls, id)
		c.mu.Unlock()
	}, nil
}

// installCancelGrace is how long Install waits for the executor to stop a cancelled install
// (it kills pip and removes its directory).
const installCancelGrace = 10 * time.Second

// Install asks the executor to make req's requirements importable (see sandbox.Installer),
// with pip's settings o. progress, when not nil, receives each requirement's status.
func (c *Line) Install(ctx context.Context, req sandbox.InstallRequest, o protocol.PipOptions, progress func(sandbox.DependencyStatus)) (sandbox.Installed, error) {
	id := "in_" + sandbox.NewID()[3:]
	cl, unregister, err := c.register(id)
	if err != nil {
		return sandbox.Installed{}, err
	}
	defer unregister()
	if req.Egress != nil {
		c.mu.Lock()
		c.dialers[id] = req.Egress
		c.mu.Unlock()
		defer c.endEgress(id)
	}
	if err := c.conn.Send(&protocol.Message{Kind: protocol.KindInstall, ID: id, Install: &protocol.Install{Request: req, Pip: o}}); err != nil {
		c.fail(fmt.Errorf("%w: sending an install: %w", ErrClosed, err))
		return sandbox.Installed{}, fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	var grace <-chan time.Time
	ctxDone := ctx.Done()
	for {
		select {
		case <-cl.notify:
			for _, m := range cl.drain() {
				switch m.Kind {
				case protocol.KindInstallStatus:
					if progress != nil && m.Dependency != nil {
						progress(*m.Dependency)
					}
				case protocol.KindInstalled:
					if m.Installed == nil {
						return sandbox.Installed{}, fmt.Errorf("the executor failed the install: %s", m.Error)
					}
					if ctxDone == nil { // cancelled meanwhile
						return sandbox.Installed{}, ctx.Err()
					}
					return *m.Installed, nil
				}
			}
		case <-ctxDone:
			ctxDone = nil
			grace = time.After(installCancelGrace)
			if err := c.conn.Send(&protocol.Message{Kind: protocol.KindCancel, ID: id}); err != nil {
				c.fail(fmt.Errorf("%w: sending a cancel: %w", ErrClosed, err))
			}
		case <-grace:
			return sandbox.Installed{}, fmt.Errorf("the executor did not confirm the cancelled install's end: %w", ctx.Err())
		case <-c.done:
			return sandbox.Installed{}, c.Err()
		}
	}
}

// Packages lists the installed packages (op "list") or removes a name's (op "remove").
func (c *Line) Packages(ctx context.Context, op protocol.Packages) ([]protocol.Package, error) {
	id := "pk_" + sandbox.NewID()[3:]
	cl, unregister, err := c.register(id)
	if err != nil {
		return nil, err
	}
	defer unregister()
	if err := c.conn.Send(&protocol.Message{Kind: protocol.KindPackages, ID: id, Packages: &op}); err != nil {
		c.fail(fmt.Errorf("%w: sending a packages request: %w", ErrClosed, err))
		return nil, fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	for {
		select {
		case <-cl.notify:
			for _, m := range cl.drain() {
				if m.Kind == protocol.KindPackagesResult {
					if m.Error != "" {
						return nil, errors.New(m.Error)
					}
					return m.PackageList, nil
				}
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.done:
			return nil, c.Err()
		}
	}
}

// heardReader is the executor's output as the line reads it, noting when each read brought
// bytes. Any byte shows the executor alive, not only a pong, nor only a whole frame: a pong
// can wait in the stream behind large frames, and a large frame can take longer than the
// heartbeat's timeout to arrive (4 MiB agent calls one after another on a loaded machine;
// a session's 8 MiB file over a Kubernetes exec stream, CI 2026-12-02), and a live
// executor's line was ended.
type heardReader struct {
	r    io.Reader
	last atomic.Int64 // time.Now().UnixNano() of the last read that brought bytes
}

func (h *heardReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if n > 0 {
		h.mark()
	}
	return n, err
}

// mark counts the executor as heard now.
func (h *heardReader) mark() { h.last.Store(time.Now().UnixNano()) }

// silence is how long the executor has sent nothing.
func (h *heardReader) silence() time.Duration {
	return time.Duration(time.Now().UnixNano() - h.last.Load())
}
