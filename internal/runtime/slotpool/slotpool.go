// Package slotpool keeps a runtime's slots: one sandbox each (a container, a pod), with the
// executor's control line in it, brought back with backoff whenever it is lost. A runtime says
// how a slot's sandbox is made (Backend); the pool does the rest, the same on every engine:
// supervision, waiting for a slot's sandbox, settling after a run, installs and package
// operations, readiness and warmth.
package slotpool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/control"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Backend makes the slots' sandboxes on one engine.
type Backend interface {
	// Connect adopts slot's running sandbox, or makes one (always a new one when discard: the
	// last must not serve again), and starts its executor. It returns the control line, once
	// the executor has said hello, and the sandbox's name (a container ID, a pod name). log is
	// the slot's.
	Connect(ctx context.Context, slot int, discard bool, log *slog.Logger) (*control.Line, string, error)
	// Unreachable returns why the engine itself does not answer, or nil when it does. While it
	// does not and no slot is up, runs are refused at once instead of waiting ReadyWait.
	Unreachable(ctx context.Context) error
}

// Config configures a Pool.
type Config struct {
	// Slots is how many slots the pool has (at least 1).
	Slots int
	// ReadyWait is how long a run waits for its slot's sandbox to come back before it is
	// refused with sandbox.ErrNotReady.
	ReadyWait time.Duration
	// SettleTimeout is how long a slot's cleanup after a run may take before its sandbox is
	// replaced instead.
	SettleTimeout time.Duration
	// ConnectTimeout bounds one Backend.Connect by the supervisor.
	ConnectTimeout time.Duration
	// Pip holds pip's settings for installs.
	Pip protocol.PipOptions
	// ForkServer says the executors run a fork server (Warmth says why not otherwise).
	ForkServer bool
}

// Pool is a runtime's slots. Make it with New, bring slot 0 up with Connect, and the rest with
// Supervise; Close ends it.
type Pool struct {
	cfg     Config
	backend Backend
	slots   []*slot

	upMu sync.Mutex
	up   chan struct{} // closed and replaced whenever a slot connects: the others retry now

	ctx        context.Context // ends at Close; it bounds every connection attempt
	cancel     context.CancelFunc
	supervised sync.WaitGroup
}

// slot is one slot's sandbox and the executor's control line in it.
type slot struct {
	index int
	log   *slog.Logger

	mu         sync.Mutex
	name       string        // the sandbox's name ("" until the first connect)
	line       *control.Line // nil while the sandbox is down
	lastErr    error         // why the sandbox is down
	changed    chan struct{} // closed and replaced whenever line changes
	engineDown bool          // the engine does not answer (Backend.Unreachable)
	discard    bool          // the next connect replaces the sandbox instead of adopting it
	resets     int64         // times the sandbox was lost and brought back
}

// New returns a pool of cfg.Slots slots, none connected yet. log gets each slot's "slot".
func New(cfg Config, backend Backend, log *slog.Logger) *Pool {
	p := &Pool{cfg: cfg, backend: backend, up: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	for i := range cfg.Slots {
		p.slots = append(p.slots, &slot{index: i, log: log.With("slot", i), changed: make(chan struct{})})
	}
	return p
}

// Connect brings slot up now (Start does it for slot 0: a runtime is ready once one is).
func (p *Pool) Connect(ctx context.Context, slot int) error {
	s, err := p.slot(slot)
	if err != nil {
		return err
	}
	return p.connect(ctx, s)
}

// Supervise starts each slot's supervisor: it brings the slot up when it is down and back
// whenever it is lost, until Close.
func (p *Pool) Supervise() {
	for _, s := range p.slots {
		p.supervised.Go(func() { p.supervise(s) })
	}
}

// Down records err as why every slot is down, the engine not answering (before Supervise,
// when a runtime starts without its engine).
func (p *Pool) Down(err error) {
	for _, s := range p.slots {
		s.mu.Lock()
		s.lastErr, s.engineDown = err, true
		s.mu.Unlock()
	}
}

// Close stops supervising and ends every slot's control line (the executors kill their runs).
// The sandboxes themselves are left to the runtime.
func (p *Pool) Close() error {
	p.cancel()
	p.supervised.Wait()
	var errs []error
	for _, s := range p.slots {
		s.mu.Lock()
		line := s.line
		s.line = nil
		s.mu.Unlock()
		if line != nil {
			errs = append(errs, line.Close())
		}
	}
	return errors.Join(errs...)
}

// NextUp returns a channel closed when a slot next connects: the engine answers again.
func (p *Pool) NextUp() <-chan struct{} {
	p.upMu.Lock()
	defer p.upMu.Unlock()
	return p.up
}

// Names returns every slot's sandbox name, by slot ("" for a slot that has none yet).
func (p *Pool) Names() []string {
	names := make([]string, len(p.slots))
	for i, s := range p.slots {
		s.mu.Lock()
		names[i] = s.name
		s.mu.Unlock()
	}
	return names
}

// Current returns slot's control line and sandbox name, waiting up to ReadyWait (or ctx) for
// its sandbox. Errors wrap sandbox.ErrNotReady.
func (p *Pool) Current(ctx context.Context, slot int) (*control.Line, string, error) {
	s, err := p.slot(slot)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	return p.current(ctx, s)
}

// Settle waits until slot's last run is cleaned up (sandbox.Settler). A cleanup that fails or
// takes longer than SettleTimeout gets the slot a new sandbox instead; Settle then waits (up to
// ReadyWait) for it.
func (p *Pool) Settle(ctx context.Context, slot int) error {
	s, err := p.slot(slot)
	if err != nil {
		return err
	}
	s.mu.Lock()
	line := s.line
	s.mu.Unlock()
	if line != nil {
		sctx, cancel := context.WithTimeout(ctx, p.cfg.SettleTimeout)
		err := line.Settle(sctx, 0)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		if line.Err() == nil { // the executor lives: its sandbox holds what the run left
			s.log.Warn("replacing the slot's sandbox: its last run was not cleaned up in time", "error", err)
			s.replace(line, fmt.Errorf("replaced: the last run's cleanup did not finish (%w)", err))
		}
	}
	wctx, cancel := context.WithTimeout(ctx, p.cfg.ReadyWait)
	defer cancel()
	_, _, err = p.current(wctx, s)
	return err
}

// Install makes req's requirements importable in slot's sandbox (sandbox.Installer).
func (p *Pool) Install(ctx context.Context, slot int, req sandbox.InstallRequest, progress func(sandbox.DependencyStatus)) (sandbox.Installed, error) {
	line, _, err := p.Current(ctx, slot)
	if err != nil {
		return sandbox.Installed{}, err
	}
	return line.Install(ctx, req, p.cfg.Pip, progress)
}

// Packages sends op (list or remove) through the first slot whose sandbox is up (slot 0's,
// waited for, when none is).
func (p *Pool) Packages(ctx context.Context, op protocol.Packages) ([]protocol.Package, error) {
	s := p.slots[0]
	for _, other := range p.slots {
		if p.ready(ctx, other) == nil {
			s = other
			break
		}
	}
	line, _, err := p.current(ctx, s)
	if err != nil {
		return nil, err
	}
	return line.Packages(ctx, op)
}

// Resets counts the times a slot's sandbox was lost (its sandbox or executor died or hung, or
// a cleanup did not finish) and had to be brought back.
func (p *Pool) Resets() int64 {
	var n int64
	for _, s := range p.slots {
		s.mu.Lock()
		n += s.resets
		s.mu.Unlock()
	}
	return n
}

// Ready returns nil when at least one slot's executor is live, else why not.
func (p *Pool) Ready(ctx context.Context) error {
	var first error
	for _, s := range p.slots {
		err := p.ready(ctx, s)
		if err == nil {
			return nil
		}
		first = cmp.Or(first, err)
	}
	return first
}

// AllReady waits until every slot's sandbox is up (or ctx ends, with ctx's error).
func (p *Pool) AllReady(ctx context.Context) error {
	for _, s := range p.slots {
		for p.ready(ctx, s) != nil {
			s.mu.Lock()
			changed := s.changed
			s.mu.Unlock()
			select {
			case <-changed:
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return fmt.Errorf("waiting for slot %d's sandbox: %w", s.index, ctx.Err())
			}
		}
	}
	return nil
}

// Warmth says how many slots are up and how many start runs as forks, as each slot's executor
// last answered the heartbeat (its Sessions is the runtime's to fill in).
func (p *Pool) Warmth() sandbox.Warmth {
	w := sandbox.Warmth{Slots: len(p.slots)}
	if !p.cfg.ForkServer {
		w.ForkOff = "the fork server is off (fork_server false)"
	}
	for _, s := range p.slots {
		s.mu.Lock()
		line := s.line
		s.mu.Unlock()
		if line == nil {
			continue
		}
		w.Up++
		switch state, why := line.Fork(); state {
		case protocol.ForkReady:
			w.Fork++
		case protocol.ForkOff:
			w.ForkOff = cmp.Or(w.ForkOff, why)
		}
	}
	return w
}

func (p *Pool) slot(i int) (*slot, error) {
	if i < 0 || i >= len(p.slots) {
		return nil, fmt.Errorf("slot %d does not exist; the pool has slots 0 to %d", i, len(p.slots)-1)
	}
	return p.slots[i], nil
}

// connect brings s up through the backend and wakes the other slots' retries.
func (p *Pool) connect(ctx context.Context, s *slot) error {
	s.mu.Lock()
	discard := s.discard
	s.mu.Unlock()
	line, name, err := p.backend.Connect(ctx, s.index, discard, s.log)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.name, s.line, s.lastErr, s.engineDown, s.discard = name, line, nil, false, false
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	p.upMu.Lock()
	close(p.up)
	p.up = make(chan struct{})
	p.upMu.Unlock()
	return nil
}

// supervise waits for s's executor to end and brings the sandbox back, with backoff (250 ms
// doubling to 10 s, or at once when another slot gets through), until Close.
func (p *Pool) supervise(s *slot) {
	backoff := 250 * time.Millisecond
	for {
		s.mu.Lock()
		line := s.line
		s.mu.Unlock()
		if line != nil {
			select {
			case <-p.ctx.Done():
				return
			case <-line.Done():
			}
			s.log.Warn("sandbox lost; bringing it back", "error", line.Err())
			s.mu.Lock()
			s.line, s.lastErr = nil, line.Err()
			s.resets++
			s.mu.Unlock()
			backoff = 250 * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(p.ctx, p.cfg.ConnectTimeout)
		err := p.connect(ctx, s)
		cancel()
		if err == nil {
			continue
		}
		if p.ctx.Err() != nil {
			return // Close interrupted the attempt: not a failure
		}
		down := p.backend.Unreachable(p.ctx)
		s.mu.Lock()
		s.lastErr, s.engineDown = cmp.Or(down, err), down != nil
		s.mu.Unlock()
		s.log.Error("bringing the sandbox back failed; retrying", "error", cmp.Or(down, err), "retry_in", backoff)
		select {
		case <-p.ctx.Done():
			return
		case <-time.After(backoff):
		case <-p.NextUp(): // another slot got through: the engine is back
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// current returns s's live control line and sandbox name, waiting up to ReadyWait (or ctx).
func (p *Pool) current(ctx context.Context, s *slot) (*control.Line, string, error) {
	deadline := time.NewTimer(p.cfg.ReadyWait)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		line, name, changed, lastErr, down := s.line, s.name, s.changed, s.lastErr, s.engineDown
		s.mu.Unlock()
		if line != nil && line.Ready(ctx) == nil {
			return line, name, nil
		}
		if down && line == nil && !p.anyUp() { // no slot reaches the engine: fail at once
			return nil, "", fmt.Errorf("%w: %w", sandbox.ErrNotReady, lastErr)
		}
		select {
		case <-changed:
		case <-time.After(100 * time.Millisecond): // a silent executor fails or recovers
		case <-deadline.C:
			if lastErr == nil {
				lastErr = errors.New("the sandbox is restarting")
			}
			return nil, "", fmt.Errorf("%w: %w", sandbox.ErrNotReady, lastErr)
		case <-ctx.Done():
			return nil, "", fmt.Errorf("%w: %w", sandbox.ErrNotReady, ctx.Err())
		case <-p.ctx.Done():
			return nil, "", fmt.Errorf("%w: the runtime is shutting down", sandbox.ErrNotReady)
		}
	}
}

// Up reports whether slot's sandbox is up now: its executor's control line is live (false
// while it is lost and being brought back, and for a slot that does not exist).
func (p *Pool) Up(slot int) bool {
	s, err := p.slot(slot)
	if err != nil {
		return false
	}
	s.mu.Lock()
	line := s.line
	s.mu.Unlock()
	if line == nil {
		return false
	}
	select {
	case <-line.Done():
		return false
	default:
		return true
	}
}

// ready returns nil when s's executor is live.
func (p *Pool) ready(ctx context.Context, s *slot) error {
	s.mu.Lock()
	line, lastErr := s.line, s.lastErr
	s.mu.Unlock()
	if line == nil {
		if lastErr == nil {
			lastErr = errors.New("the sandbox is starting")
		}
		return fmt.Errorf("%w: slot %d: %w", sandbox.ErrNotReady, s.index, lastErr)
	}
	return line.Ready(ctx)
}

// anyUp reports whether some slot has a live control line.
func (p *Pool) anyUp() bool {
	for _, s := range p.slots {
		s.mu.Lock()
		up := s.line != nil
		s.mu.Unlock()
		if up {
			return true
		}
	}
	return false
}

// replace ends line, whose sandbox must not serve again: the supervisor makes a new one.
func (s *slot) replace(line *control.Line, why error) {
	s.mu.Lock()
	if s.line == line {
		s.discard = true
	}
	s.mu.Unlock()
	_ = line.Close()
	s.log.Info("slot's sandbox is being replaced", "reason", why)
}
