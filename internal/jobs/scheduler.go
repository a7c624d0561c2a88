package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/schedule"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// Executor runs requests; *engine.Service satisfies it.
type Executor interface {
	Execute(ctx context.Context, req sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error)
	// Validate checks a request against the limits without running it.
	Validate(req sandbox.Request) error
}

// Config tunes a Scheduler. Zero values take the defaults.
type Config struct {
	// Lateness is how late a fire may be handled and still run as scheduled; older fires count
	// as missed (the daemon was down or stalled). Default 1 minute.
	Lateness time.Duration
	// StartPatience is how long a fire keeps retrying while the sandbox is busy or not ready
	// before it is recorded as failed. Default 1 minute.
	StartPatience time.Duration
	// MaxTimeout is the longest timeout_ms a job may ask for (the daemon's hard cap).
	MaxTimeout time.Duration
	// Poll, when positive, is the longest the scheduler sleeps between looks at the store:
	// set it when other daemons share the store (they change jobs and leave queued fires
	// without waking this one). Default 0: only this daemon's changes and the next due fire
	// wake it.
	Poll time.Duration
}

// Scheduler manages jobs and fires them. Create it with New, start Run once, and call the
// job methods from any goroutine.
type Scheduler struct {
	st  Store
	lib Library
	ex  Executor
	cfg Config
	log *slog.Logger

	wake chan struct{} // buffered (1): the jobs changed

	mu       sync.Mutex
	running  map[string]string // job ID → the execution going on this daemon
	runs     sync.WaitGroup
	base     context.Context // the runs' context, set by Run
	stopping bool            // Run's context ended: queued fires wait for the next daemon
}

// New returns a scheduler over st that runs saved code from lib on ex. log may be nil.
func New(st Store, lib Library, ex Executor, cfg Config, log *slog.Logger) *Scheduler {
	if cfg.Lateness <= 0 {
		cfg.Lateness = time.Minute
	}
	if cfg.StartPatience <= 0 {
		cfg.StartPatience = time.Minute
	}
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = engine.DefaultConfig().MaxTimeout
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Scheduler{st: st, lib: lib, ex: ex, cfg: cfg, log: log, wake: make(chan struct{}, 1),
		running: map[string]string{}, base: context.Background()}
}

func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Create validates d and stores a new job of agent. Errors: *sandbox.FieldError for an
// invalid field, the library's errors for the code (store.ErrNotFound wrapped) and its input
// (*library.InputError).
func (s *Scheduler) Create(ctx context.Context, agent string, d Draft) (Scheduled, error) {
	d, sched, err := check(ctx, s.lib, s.ex, agent, d, s.cfg.MaxTimeout)
	if err != nil {
		return Scheduled{}, err
	}
	now := time.Now()
	j, err := s.st.CreateJob(ctx, jobOf(store.Job{ID: newJobID(), Agent: agent}, d, sched, now))
	if err != nil {
		return Scheduled{}, err
	}
	s.poke()
	return scheduled(j, sched, now), nil
}

// Update replaces the agent's job id with d (DraftOf and a client's fields make a partial
// update) and computes its next fire from now. Errors as Create, and store.ErrNotFound.
func (s *Scheduler) Update(ctx context.Context, agent, id string, d Draft) (Scheduled, error) {
	j, err := s.st.GetJob(ctx, agent, id)
	if err != nil {
		return Scheduled{}, err
	}
	d, sched, err := check(ctx, s.lib, s.ex, agent, d, s.cfg.MaxTimeout)
	if err != nil {
		return Scheduled{}, err
	}
	now := time.Now()
	j, err = s.st.UpdateJob(ctx, jobOf(j, d, sched, now))
	if err != nil {
		return Scheduled{}, err
	}
	s.poke()
	return scheduled(j, sched, now), nil
}

// SetEnabled pauses (false) or resumes (true) the agent's job id. A resumed job fires next
// at its schedule's next time after now; fires while it was paused are not caught up.
func (s *Scheduler) SetEnabled(ctx context.Context, agent, id string, enabled bool) (Scheduled, error) {
	j, err := s.st.GetJob(ctx, agent, id)
	if err != nil {
		return Scheduled{}, err
	}
	d := DraftOf(j)
	d.Enabled = &enabled
	if !enabled {
		// Pausing needs no check: it also works for a job whose code was deleted.
		if j, err = s.st.PauseJob(ctx, agent, id); err != nil {
			return Scheduled{}, err
		}
		s.poke()
		return scheduled(j, nil, time.Now()), nil
	}
	return s.Update(ctx, agent, id, d)
}

// Get returns the agent's job id with its next fire times.
func (s *Scheduler) Get(ctx context.Context, agent, id string) (Scheduled, error) {
	j, err := s.st.GetJob(ctx, agent, id)
	if err != nil {
		return Scheduled{}, err
	}
	sched, _ := schedule.Parse(j.Schedule, j.Timezone)
	return scheduled(j, sched, time.Now()), nil
}

// List returns the agent's jobs, a page at a time.
func (s *Scheduler) List(ctx context.Context, agent string, p store.Page) ([]store.Job, string, error) {
	return s.st.ListJobs(ctx, agent, p)
}

// Delete deletes the agent's job id and its history; a run going on is not stopped.
func (s *Scheduler) Delete(ctx context.Context, agent, id string) error {
	if err := s.st.DeleteJob(ctx, agent, id); err != nil {
		return err
	}
	s.poke()
	return nil
}

// History returns the fires of the agent's job id that f selects, newest first.
func (s *Scheduler) History(ctx context.Context, agent, id string, f store.FireFilter, p store.Page) ([]store.Fire, string, error) {
	return s.st.ListFires(ctx, agent, id, f, p)
}

// RunNow fires the agent's job id now, outside its schedule, following its overlap policy;
// the returned fire says whether it started (with its execution ID), was queued or skipped.
// A job that cannot run (its code is gone, its input no longer fits) is an error, and no fire.
func (s *Scheduler) RunNow(ctx context.Context, agent, id string) (store.Fire, error) {
	j, err := s.st.GetJob(ctx, agent, id)
	if err != nil {
		return store.Fire{}, err
	}
	if _, err := s.request(ctx, j); err != nil {
		return store.Fire{}, err
	}
	now := time.Now().UTC()
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.decide(j, store.Fire{JobID: j.ID, Agent: j.Agent, Kind: store.FireManual, ScheduledAt: now, FiredAt: now})
	if f, err = s.st.AddFire(ctx, f); err != nil {
		return store.Fire{}, err
	}
	s.follow(j, f)
	return f, nil
}

// Run fires due jobs until ctx ends, then waits for the runs it started. Runs are not
// cancelled by ctx: the daemon ends them through the sandbox when it stops. It first fails
// fires whose run never started and restarts queued fires, left by a daemon that stopped.
func (s *Scheduler) Run(ctx context.Context) error {
	s.mu.Lock()
	s.base, s.stopping = context.WithoutCancel(ctx), false
	s.mu.Unlock()
	defer s.runs.Wait()
	defer func() {
		s.mu.Lock()
		s.stopping = true
		s.mu.Unlock()
	}()
	if n, err := s.st.FailUnstartedFires(ctx); err != nil {
		return fmt.Errorf("scheduler: recovering fires: %w", err)
	} else if n > 0 {
		s.log.Warn("fires claimed by a daemon that stopped before starting their runs were marked failed", "fires", n)
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		case <-timer.C:
		}
		wait, err := s.tick(ctx)
		if err == nil {
			err = s.resumeQueued(ctx)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.Error("scheduler: handling due jobs failed; retrying", "error", err)
			wait = 5 * time.Second
		}
		if s.cfg.Poll > 0 {
			wait = min(wait, s.cfg.Poll)
		}
		timer.Reset(wait)
	}
}

// idle is how long the loop sleeps when no job is enabled (a change wakes it sooner).
const idle = time.Hour

// tick fires every due job and returns how long to wait for the next.
func (s *Scheduler) tick(ctx context.Context) (time.Duration, error) {
	now := time.Now()
	due, err := s.st.DueJobs(ctx, now)
	if err != nil {
		return 0, err
	}
	for _, j := range due {
		if err := s.fire(ctx, j, now); err != nil {
			return 0, fmt.Errorf("job %s: %w", j.ID, err)
		}
	}
	next, ok, err := s.st.NextDue(ctx)
	if err != nil || !ok {
		return idle, err
	}
	return max(time.Until(next), 0), nil
}

// fire handles job j, due at or before now: it records the fires that came due (missed ones
// as one entry), moves the job's next fire, and starts the run its policies allow.
func (s *Scheduler) fire(ctx context.Context, j store.Job, now time.Time) error {
	sched, err := schedule.Parse(j.Schedule, j.Timezone)
	if err != nil {
		// The spec was valid when saved; a newer parser may disagree. Stop the job, loudly.
		s.log.Error("scheduler: a job's schedule no longer parses; disabling it", "job", j.ID, "error", err)
		d := DraftOf(j)
		disabled := false
		d.Enabled = &disabled
		_, err := s.st.UpdateJob(ctx, jobOf(j, d, nil, now))
		return err
	}
	// The fires that came due: from the stored next fire to now.
	first := *j.NextRunAt
	last, count := first, 1
	next := sched.Next(first)
	for ; !next.After(now) && count < maxMissed; next = sched.Next(next) {
		last, count = next, count+1
	}
	if !next.After(now) {
		next = sched.Next(now)
	}
	// next follows from the fires, not from now: "@every" keeps its phase across restarts.
	fired := now.UTC()

	s.mu.Lock()
	defer s.mu.Unlock()
	var fires []store.Fire
	missed := func(n int, reason string) store.Fire {
		return store.Fire{JobID: j.ID, Agent: j.Agent, Kind: store.FireScheduled, Status: store.FireMissed,
			ScheduledAt: first, FiredAt: fired, Missed: n, Reason: reason}
	}
	switch {
	case now.Sub(last) <= s.cfg.Lateness:
		if count > 1 {
			fires = append(fires, missed(count-1, "the daemon was not running (or was stalled) at their times"))
		}
		fires = append(fires, s.decide(j, store.Fire{JobID: j.ID, Agent: j.Agent, Kind: store.FireScheduled,
			ScheduledAt: last, FiredAt: fired}))
	case j.CatchUp == CatchUpOnce:
		fires = append(fires, s.decide(j, store.Fire{JobID: j.ID, Agent: j.Agent, Kind: store.FireCatchUp,
			ScheduledAt: first, FiredAt: fired, Missed: count}))
	default:
		fires = append(fires, missed(count, "the daemon was not running (or was stalled) at their times; catch_up is \"skip\""))
	}
	fires, claimed, err := s.st.ClaimFires(ctx, j.ID, first, next, fires)
	if err != nil || !claimed {
		return err // not claimed: the job changed meanwhile; the next tick sees it as it is now
	}
	for _, f := range fires {
		s.follow(j, f)
	}
	return nil
}

// maxMissed bounds the count of missed fires (an @every 10s job down for a year).
const maxMissed = 1_000_000

// decide makes f a fire that starts a new execution. The store, recording it, applies j's
// overlap policy (queued or skipped) when a run of the job goes on, on this daemon or another
// sharing the store; s.mu is held.
func (s *Scheduler) decide(j store.Job, f store.Fire) store.Fire {
	f.Status, f.ExecutionID = store.FireStarted, sandbox.NewID()
	return f
}

// follow acts on a recorded fire: starts its run; a queued fire waits in the store for the run
// going on to end (resumeQueued); s.mu is held.
func (s *Scheduler) follow(j store.Job, f store.Fire) {
	if f.Status == store.FireStarted {
		s.start(j, f)
	}
}

// start runs f's execution for j in its own goroutine; s.mu is held.
func (s *Scheduler) start(j store.Job, f store.Fire) {
	s.running[j.ID] = f.ExecutionID
	s.runs.Add(1)
	// The runs' context as it is now, read under s.mu: Run sets it, and a fire (RunNow) may
	// come before Run or while it starts (the race detector caught the unlocked read).
	base := s.base
	go func() {
		defer s.runs.Done()
		s.execute(base, j, f)
		s.mu.Lock()
		delete(s.running, j.ID)
		s.mu.Unlock()
		if err := s.resumeQueued(base); err != nil {
			s.log.Error("scheduler: starting a queued fire failed", "job", j.ID, "error", err)
		}
	}()
}

// execute runs f's execution in ctx (the runs' context), retrying while the sandbox is busy
// or not ready, and records a fire that could not start as failed.
func (s *Scheduler) execute(ctx context.Context, j store.Job, f store.Fire) {
	req, err := s.request(ctx, j)
	if err == nil {
		req.ID = f.ExecutionID
		deadline := time.Now().Add(s.cfg.StartPatience)
		for {
			var res sandbox.Result
			res, err = s.ex.Execute(ctx, req, nil)
			if err == nil {
				s.log.Info("job fired", "job", j.ID, "agent", j.Agent, "execution", res.ID, "outcome", res.Outcome)
				return
			}
			// Busy: the slots and queue are full (a *sandbox.BusyError), or, for code naming a
			// template, the sessions are at a cap (a *sandbox.SessionLimitError).
			if !(errors.Is(err, errclass.Busy) || errors.Is(err, sandbox.ErrNotReady)) || time.Now().After(deadline) ||
				errors.Is(err, engine.ErrInterrupted) {
				break
			}
			time.Sleep(time.Second)
		}
	}
	s.log.Warn("job fire could not start its run", "job", j.ID, "agent", j.Agent, "fire", f.ID, "error", err)
	if err := s.st.SetFire(ctx, f.ID, store.FireFailed, "", err.Error()); err != nil {
		s.log.Error("scheduler: recording a failed fire failed", "job", j.ID, "fire", f.ID, "error", err)
	}
}

// request builds the execution request of one of j's fires, checked against the limits.
func (s *Scheduler) request(ctx context.Context, j store.Job) (sandbox.Request, error) {
	origin := sandbox.Origin{Source: sandbox.SourceJob, JobID: j.ID}
	req, _, err := s.lib.Request(ctx, j.Agent, j.CodeName, runOf(j.Input, j.TimeoutMS, j.CodeVersion, j.Inputs, j.Charts, j.Secrets), origin)
	if err != nil {
		return req, err
	}
	return req, s.ex.Validate(req)
}

// resumeQueued starts the queued fires whose job has no run going on any more (the run ended
// here or on another daemon, or the daemon running it stopped). Each is started once: the
// store hands it to one daemon.
func (s *Scheduler) resumeQueued(ctx context.Context) error {
	fires, err := s.st.QueuedFires(ctx)
	if err != nil || len(fires) == 0 {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return nil // the next daemon starts them
	}
	for _, f := range fires {
		if _, busy := s.running[f.JobID]; busy {
			continue
		}
		j, err := s.st.GetJob(ctx, f.Agent, f.JobID)
		if errors.Is(err, store.ErrNotFound) {
			continue // deleted meanwhile, with its fires
		}
		if err != nil {
			return fmt.Errorf("scheduler: the job of queued fire %d: %w", f.ID, err)
		}
		exec := sandbox.NewID()
		started, err := s.st.StartQueued(ctx, f.ID, j.ID, exec)
		if err != nil {
			return fmt.Errorf("scheduler: starting queued fire %d: %w", f.ID, err)
		}
		if started {
			f.Status, f.ExecutionID, f.Reason = store.FireStarted, exec, ""
			s.start(j, f)
		}
	}
	return nil
}
