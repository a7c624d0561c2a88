package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Pause freezes the session where it stands: no CPU, its memory kept. It holds its turn, so
// calls wait (or resume it, with auto_resume). A call running or waiting makes it a
// *SessionBusyError; a paused or hibernated session is answered as it is. Past
// sessions_paused_max_bytes it is a *SessionBudgetError.
//
// A sandbox that cannot be frozen (the kubernetes runtime: a pod) is hibernated instead, when
// the daemon hibernates at all: the answer's state is then "hibernated" (its files kept, its
// interpreter's memory not; a resume brings it back as a hibernated session's does), and its
// history says why. Without hibernation it is ErrNoFreezer.
func (s *Session) Pause(ctx context.Context) (sandbox.SessionInfo, error) {
	err := s.pause(ctx, "asked")
	if errors.Is(err, ErrNoFreezer) && s.r.cfg.Lifecycle.Dir != "" {
		return s.hibernateRunning(ctx, PausedAsHibernation)
	}
	if err != nil {
		return sandbox.SessionInfo{}, err
	}
	return s.Info(), nil
}

// PausedAsHibernation is the detail of the "hibernated" event of a pause asked of a session
// whose sandbox cannot be frozen.
const PausedAsHibernation = "pause asked; this daemon's sandboxes cannot be frozen (the kubernetes runtime: a pod has no freezer), " +
	"so it was hibernated: its files are kept, its interpreter's memory is not"

// pause pauses s (why goes to its history), taking its turn: a paused session holds its turn
// until it resumes. A hibernated session is left as it is.
func (s *Session) pause(ctx context.Context, why string) error {
	r := s.r
	s.mu.Lock()
	h, paused, err := s.cur, s.life.paused, s.endedErr()
	hibernated := s.info.State == sandbox.SessionHibernated
	s.mu.Unlock()
	switch {
	case err != nil:
		return err
	case paused, hibernated:
		return nil
	case h == nil:
		return fmt.Errorf("%w: session %s has no sandbox now", sandbox.ErrNotReady, s.id)
	}
	pb, ok := h.box.(sandbox.PausableBox)
	if !ok {
		return ErrNoFreezer
	}
	lc := r.cfg.Lifecycle
	r.mu.Lock()
	used := r.pausedBytes() + lc.SessionMemoryBytes
	r.mu.Unlock()
	if used > lc.PausedMaxBytes {
		return &sandbox.SessionBudgetError{Budget: "sessions_paused_max_bytes", Limit: lc.PausedMaxBytes, Need: used,
			Fix: "resume or close a paused session, or hibernate one (POST …/sessions/{id}/hibernate)"}
	}
	select {
	case <-s.turn:
	default:
		return &sandbox.SessionBusyError{ID: s.id, Step: "paused"}
	}
	h.closePorts()
	if err := pb.Pause(ctx); err != nil {
		h.reopenPorts()
		s.releaseTurn()
		return fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	now := time.Now().UTC()
	s.mu.Lock()
	s.life.ran = s.ranFor(now)
	s.life.paused = true
	s.info.State, s.info.PausedAt, s.info.RanMS = sandbox.SessionPaused, &now, s.life.ran.Milliseconds()
	s.info.LifecycleError = ""
	s.info.AddEvent(now, "paused", why)
	if s.cur != nil {
		s.timer.Reset(s.pausedWait(now))
	}
	info := s.info
	s.mu.Unlock()
	r.record(ctx, info)
	r.log.Info("session paused", "session", s.id, "agent", info.Agent, "why", why)
	return nil
}

// ErrNoFreezer is a pause of a session whose sandbox cannot be frozen (the kubernetes runtime:
// a pod cannot be paused). Its class is invalid.
var ErrNoFreezer = errclass.New(errclass.Invalid, "this daemon's sandboxes cannot be paused (the kubernetes runtime has no freezer: "+
	"a pod cannot be paused); hibernate the session instead (POST …/sessions/{id}/hibernate): it saves the session's files "+
	"and frees its sandbox, and the next call or resume restores them")

// pausedBytes is what the paused sessions count against PausedMaxBytes. Called with r.mu held.
func (r *Registry) pausedBytes() int64 {
	var n int64
	for _, s := range r.live {
		if s.isPaused() {
			n += r.cfg.Lifecycle.SessionMemoryBytes
		}
	}
	return n
}

// pausedWait is how long from now paused s waits before it is hibernated (an hour when it
// never is by time: its timer then only looks again). Called with s.mu held.
func (s *Session) pausedWait(now time.Time) time.Duration {
	lc := s.r.cfg.Lifecycle
	if lc.HibernateAfter <= 0 || lc.Dir == "" || s.info.PausedAt == nil {
		return time.Hour
	}
	return max(s.info.PausedAt.Add(lc.HibernateAfter).Sub(now), time.Millisecond)
}

// expirePaused is expire for a paused session: it hibernates it once it has been paused for
// HibernateAfter.
func (r *Registry) expirePaused(s *Session) {
	now := time.Now()
	after := r.cfg.Lifecycle.HibernateAfter
	s.mu.Lock()
	if after <= 0 || r.cfg.Lifecycle.Dir == "" || s.info.PausedAt == nil || now.Before(s.info.PausedAt.Add(after)) {
		s.timer.Reset(s.pausedWait(now))
		s.mu.Unlock()
		return
	}
	s.timer.Reset(time.Minute) // looked at again if the hibernation fails
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := s.hibernatePaused(ctx, fmt.Sprintf("paused for session_hibernate_after_ms (%d ms)", after.Milliseconds())); err != nil {
		r.log.Warn("a paused session could not be hibernated; it stays paused and is tried again in a minute", "session", s.id, "error", err)
	}
}

// autoPause pauses s (auto_pause) instead of ending it, why saying what passed; when it cannot
// be paused (the paused-memory budget, a sandbox without a freezer), it is hibernated, and when
// that fails too it ends.
func (r *Registry) autoPause(s *Session, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := s.pause(ctx, why)
	if _, over := errors.AsType[*sandbox.SessionBudgetError](err); (over || errors.Is(err, ErrNoFreezer)) && r.cfg.Lifecycle.Dir != "" {
		r.log.Info("a session is hibernated instead of paused", "session", s.id, "why", err)
		_, err = s.hibernateRunning(ctx, "auto_pause, and it cannot be paused: "+err.Error())
	}
	if _, busy := errors.AsType[*sandbox.SessionBusyError](err); busy {
		s.mu.Lock()
		if s.cur != nil {
			s.timer.Reset(time.Second) // a call came in: look again
		}
		s.mu.Unlock()
		return
	}
	if err != nil {
		r.log.Warn("a session could not be paused; it ends", "session", s.id, "error", err)
		s.mu.Lock()
		code, what := sandbox.EndIdleTimeout, fmt.Sprintf("it had no call for its idle timeout of %d ms", s.info.IdleTimeoutMS)
		if d := s.info.Deadline; d != nil && !time.Now().Before(*d) {
			code, what = sandbox.EndDeadline, fmt.Sprintf("it reached its deadline (%s)", d.UTC().Format(time.RFC3339))
		}
		s.mu.Unlock()
		r.end(s, nil, code, fmt.Sprintf("%s and could not be paused: %v", what, err))
	}
}

// Resume continues the session: a paused one where it stood ("memory": "kept"), a hibernated
// one in a new sandbox with its files and packages and a new interpreter ("memory": "lost").
// An active one is answered as it is. Errors: a *SessionEndedError (a hibernation file altered
// on disk is refused, and the session ends lost), the session caps' *SessionLimitError, or an
// error wrapping ErrNotReady.
func (s *Session) Resume(ctx context.Context) (sandbox.SessionInfo, error) {
	for {
		s.mu.Lock()
		state, waking, err := s.info.State, s.waking, s.endedErr()
		s.mu.Unlock()
		switch {
		case err != nil:
			return sandbox.SessionInfo{}, err
		case waking != nil:
			select {
			case <-waking:
				continue
			case <-ctx.Done():
				return sandbox.SessionInfo{}, ctx.Err()
			}
		case state == sandbox.SessionHibernated:
			if err := s.wake(ctx); err != nil {
				return sandbox.SessionInfo{}, err
			}
			continue
		}
		if err := s.unpause(ctx); err != nil {
			return sandbox.SessionInfo{}, err
		}
		return s.Info(), nil
	}
}

// unpause thaws paused s and gives its turn back.
func (s *Session) unpause(ctx context.Context) error {
	s.thaw.Lock()
	defer s.thaw.Unlock()
	s.mu.Lock()
	if !s.life.paused || s.cur == nil {
		s.mu.Unlock()
		return nil
	}
	h := s.cur
	s.life.paused = false // claimed: a second resume finds it running
	s.mu.Unlock()
	if err := h.box.(sandbox.PausableBox).Unpause(ctx); err != nil {
		s.mu.Lock()
		s.life.paused = true
		s.info.LifecycleError = "resuming failed: " + err.Error()
		s.mu.Unlock()
		return fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	h.reopenPorts()
	now := time.Now().UTC()
	s.mu.Lock()
	s.life.runStart = now
	s.info.State, s.info.PausedAt, s.info.Memory, s.info.LastUsedAt = sandbox.SessionActive, nil, sandbox.MemoryKept, now
	s.info.AddEvent(now, "resumed", "memory kept")
	if s.cur != nil {
		s.timer.Reset(s.untilExpiry(now))
	}
	info := s.info
	s.mu.Unlock()
	s.releaseTurn()
	s.r.record(ctx, info)
	s.r.log.Info("session resumed", "session", s.id, "agent", info.Agent)
	return nil
}
