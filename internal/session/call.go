package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// interruptGrace is added to a session call's deadline in the daemon: the executor gives an
// interrupted call that long before it kills the interpreter.
const interruptGrace = 2 * time.Second

// interpreterStart bounds the start of a session's interpreter, which its first call used to
// pay for within its own timeout.
const interpreterStart = time.Minute

// Execute runs req as the session's next call, once the calls before it have ended; with wait
// false it fails with a *SessionBusyError instead when a call runs. The wait is bounded by the
// call's own timeout. The call is the session's agent's, and reaches at most what the session's
// network narrowing allows (req.NetworkAllow narrows it further). Errors: those of
// engine.Service.Execute, a *SessionEndedError, a *SessionPausedError, a *SessionBusyError. A
// call's failures, its session's end included (Result.SessionEnded), are Results.
func (s *Session) Execute(ctx context.Context, req sandbox.Request, wait bool, emit func(sandbox.Event)) (sandbox.Result, error) {
	r := s.r
	if len(req.Dependencies) > 0 {
		return sandbox.Result{}, &sandbox.FieldError{Field: "dependencies", Message: "a session's dependencies are given when it is created (POST …/sessions); send the call without them"}
	}
	s.mu.Lock()
	req.Agent = s.info.Agent
	in := engine.InBox{Session: s.id, Paths: s.paths, Grace: interruptGrace, NetworkAllow: s.info.NetworkAllow, Secrets: s.secrets, Env: s.env,
		Template: s.info.Template, Unrecorded: s.info.Agent == WarmAgent}
	s.mu.Unlock()
	checked := req
	if req.Agent == WarmAgent { // see warm.go
		checked.Agent = ""
	}
	if err := r.svc.Validate(checked); err != nil {
		return sandbox.Result{}, err
	}
	h, err := s.callable(ctx)
	if err != nil {
		return sandbox.Result{}, err
	}
	in.Box = h.box
	if h.template != nil {
		in.TemplateVersion = h.template.Version
	}
	x := r.svc.Prepare(req, in)
	if err := s.takeTurn(ctx, h, x.Spec().TimeoutMS, wait); err != nil {
		return sandbox.Result{}, err
	}
	defer s.giveTurn()
	s.mu.Lock()
	same := s.cur == h
	s.mu.Unlock()
	if !same { // it ended (or was hibernated) while the call waited
		return sandbox.Result{}, cmpErr(s.stateErr(), fmt.Errorf("%w: the session's sandbox stopped while the call waited", sandbox.ErrNotReady))
	}
	if !h.started && !req.Internal {
		if err := s.startInterpreter(ctx, h, req, in); err != nil {
			return sandbox.Result{}, err
		}
	}
	if err := x.Begin(ctx); err != nil {
		return sandbox.Result{}, err
	}
	res, err := x.Run(ctx, emit)
	if err != nil {
		// It never started: the session's sandbox is gone. When it stopped by itself with a
		// reason (its node lost, its container killed), that is why, as watch gives it.
		reason := "the session's sandbox could not take a call: " + err.Error()
		select {
		case <-h.box.Done():
			if h.box.Err() != nil {
				reason = h.stopReason()
			}
		default:
		}
		info, ok := r.end(s, h, sandbox.EndSandboxError, reason)
		if !ok {
			return sandbox.Result{}, cmpErr(s.stateErr(), err)
		}
		return sandbox.Result{}, &sandbox.SessionEndedError{Info: info}
	}
	s.mu.Lock()
	gone, ended := s.info.EndReason, s.info.State == sandbox.SessionEnded // closed (or expired) while the call ran
	s.mu.Unlock()
	switch {
	case ended:
		res.SessionEnded = gone
	case res.Outcome == sandbox.OutcomeSandboxError && res.SessionEnded == "":
		res.SessionEnded = sandbox.EndSandboxError
	}
	res = x.Finish(ctx, res)
	if res.SessionEnded != "" {
		r.end(s, h, res.SessionEnded, res.Reason)
	} else {
		h.started = true
	}
	return res, nil
}

// startInterpreter starts h's interpreter with a call of the daemon's own ("pass", bounded by
// interpreterStart), so that a user's first call's timeout starts with the user's code, not
// with the interpreter's cold start. The start goes on when the caller goes (an interrupt
// would end the session); one that fails ends the session saying why. The caller holds the
// turn. Errors: a *SessionEndedError, or the state's error when it ended meanwhile.
func (s *Session) startInterpreter(ctx context.Context, h *held, req sandbox.Request, in engine.InBox) error {
	r := s.r
	in.Box = h.box
	// The first call's init line sets the interpreter up (its charts' hooks among it): the
	// start asks for what the user's call does.
	start := r.svc.Prepare(sandbox.Request{Code: "pass", Agent: req.Agent, Charts: req.Charts, Internal: true}, in).Spec()
	start.TimeoutMS = interpreterStart.Milliseconds()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), interpreterStart+interruptGrace+r.svc.Config().Grace)
	defer cancel()
	began := time.Now()
	res, err := h.box.Run(sctx, start, nil)
	var why string
	switch {
	case err != nil:
		why = "the session's interpreter could not be started: " + err.Error()
	case res.Outcome != sandbox.OutcomeOK:
		why = fmt.Sprintf("the session's interpreter did not start (%s: %s)", res.Outcome, res.Reason)
		if tail := lastLines(res.Stderr, 3); tail != "" {
			why += "; it wrote: " + tail
		}
	default:
		h.started = true
		r.log.Debug("a session's interpreter started", "session", s.id, "ms", time.Since(began).Milliseconds())
		return nil
	}
	code := res.SessionEnded
	if code == "" || err != nil {
		code = sandbox.EndSandboxError
	}
	info, ok := r.end(s, h, code, why)
	if !ok {
		return cmpErr(s.stateErr(), errors.New(why))
	}
	return &sandbox.SessionEndedError{Info: info}
}

// lastLines returns the last n non-empty lines of text, joined by " | ".
func lastLines(text string, n int) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// takeTurn waits for the session's turn, in order, for up to the call's timeout; with wait
// false it fails at once when a call runs. A call that waits joins the queue and counts in
// info.Waiting in one step, so that calls run in the order they were seen to wait.
func (s *Session) takeTurn(ctx context.Context, h *held, timeoutMS int64, wait bool) error {
	select {
	case <-s.turn:
		s.markBusy()
		return nil
	default:
	}
	if !wait {
		return &sandbox.SessionBusyError{ID: s.id}
	}
	s.mu.Lock()
	select {
	case <-s.turn: // given back meanwhile, with no call waiting (releaseTurn)
		s.mu.Unlock()
		s.markBusy()
		return nil
	default:
	}
	if len(s.waiters) >= sandbox.MaxSessionWaiting {
		s.mu.Unlock()
		return &sandbox.SessionBusyError{ID: s.id, Full: true}
	}
	mine := make(chan struct{}, 1)
	s.waiters = append(s.waiters, mine)
	s.info.Waiting = len(s.waiters)
	s.mu.Unlock()
	timer := time.NewTimer(time.Duration(timeoutMS) * time.Millisecond)
	defer timer.Stop()
	var err error
	select {
	case <-mine:
		s.markBusy()
		return nil
	case <-ctx.Done():
		err = fmt.Errorf("waiting for the session's turn: %w", ctx.Err())
	case <-timer.C:
		err = &sandbox.SessionBusyError{ID: s.id, Waited: time.Duration(timeoutMS) * time.Millisecond}
	case <-h.box.Done():
		err = fmt.Errorf("%w: the session's sandbox stopped while the call waited", sandbox.ErrNotReady)
	}
	s.mu.Lock()
	i := slices.Index(s.waiters, mine)
	if i >= 0 {
		s.waiters = slices.Delete(s.waiters, i, i+1)
		s.info.Waiting = len(s.waiters)
	}
	s.mu.Unlock()
	if i < 0 { // the turn was handed to it as it gave up: to the next
		s.releaseTurn()
	}
	return err
}

// releaseTurn gives back the session's turn, held by the caller: to the call that has waited
// longest, or, with none waiting, to whoever takes it next.
func (s *Session) releaseTurn() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiters) == 0 {
		s.turn <- struct{}{} // empty: the caller held the token
		return
	}
	next := s.waiters[0]
	s.waiters = slices.Delete(s.waiters, 0, 1)
	s.info.Waiting = len(s.waiters)
	next <- struct{}{}
}

// markBusy records a call taking the turn: it is counted now, so that a call that ends the
// session counts among its calls.
func (s *Session) markBusy() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info.Busy = true
	s.info.Calls++
}

// giveTurn ends a call's turn: the session was used now.
func (s *Session) giveTurn() {
	s.mu.Lock()
	s.info.Busy = false
	s.info.LastUsedAt = time.Now().UTC()
	if s.cur != nil && !s.life.paused {
		s.timer.Reset(s.untilExpiry(time.Now()))
	}
	s.mu.Unlock()
	s.releaseTurn()
}
