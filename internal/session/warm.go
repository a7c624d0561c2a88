package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/template"
)

// Warm sessions: the pool (pool.go) starts sessions ahead of demand, their interpreters
// started and the preload imported, and hands one to an agent's creation, so that a new
// session is ready at once. Until then a warm session belongs to WarmAgent, which is no valid
// agent name: no client can name it, so none can reach a warm session and plant anything in
// another agent's future sandbox. Only a context made by createWarm passes for it.

// WarmAgent owns warm sessions until adopt hands them on.
const WarmAgent = "~warm"

type warmKey struct{}

// warmWork is the value of a context made by createWarm or closeWarm: the template a warm
// session starts from (nil: the daemon's image).
type warmWork struct{ template *template.Template }

// warm reports whether ctx may act for WarmAgent.
func warm(ctx context.Context) bool { _, ok := ctx.Value(warmKey{}).(warmWork); return ok }

// createWarm starts a session for WarmAgent with the limits of req (its Agent and Template
// are ignored), from template t (nil: the daemon's image; its start command run as Create
// runs it), and starts its interpreter with a first call of code (such as "pass"). Errors:
// those of Create and Execute; a call that does not end ok ends the session and is an error.
func (r *Registry) createWarm(ctx context.Context, req sandbox.SessionRequest, code string, t *template.Template) (*Session, error) {
	ctx = context.WithValue(ctx, warmKey{}, warmWork{template: t})
	req.Agent, req.Template = WarmAgent, ""
	if t != nil {
		req.Template = t.Agent + "/" + t.Name
	}
	s, err := r.Create(ctx, req)
	if err != nil {
		return nil, err
	}
	// The preload's import can take longer than a call's default timeout on a loaded
	// machine (over 30 s was seen on 2 CPUs): the warm-up gets the longest a call may take.
	ms := r.svc.Config().MaxTimeout.Milliseconds()
	res, err := s.Execute(ctx, sandbox.Request{Code: code, Internal: true, TimeoutMS: &ms}, true, nil)
	if err == nil && res.Outcome != sandbox.OutcomeOK {
		err = fmt.Errorf("starting a warm session's interpreter: %s: %s %s", res.Outcome, res.Reason, res.Stderr)
	}
	if err != nil {
		_, _ = s.Close(ctx)
		return nil, err
	}
	return s, nil
}

// adopt hands warm session s, of template t (nil: the daemon's image), to agent, counted
// against its sessions_per_agent from now on, with limits idle and life and the properties
// req gives (its template's name as req names it, network narrowing, environment over t's,
// deadline, lifecycle options; its dependencies must be none: see pool.go). Errors:
// ErrSessionNotFound (s ended, or was adopted), a *FieldError, a *SessionLimitError when the
// agent is at its cap.
func (r *Registry) adopt(ctx context.Context, s *Session, agent string, req sandbox.SessionRequest, t *template.Template, sec engine.SecretsRun, idle, life time.Duration) (*Session, error) {
	if err := sandbox.CheckAgent(agent); err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.live[s.id] != s || !s.idleWarm() {
		r.mu.Unlock()
		return nil, errclass.Wrap(errclass.NotFound, fmt.Errorf("%w: %s is not a warm session ready to hand on", sandbox.ErrSessionNotFound, s.id))
	}
	// A claim is the session's start (its clock, its calls and its record): the time it
	// waited in the pool is nobody's, and its warm-up call is not the agent's.
	now := time.Now().UTC()
	if err := r.checkProperties(req, now.Add(life)); err != nil {
		r.mu.Unlock()
		return nil, err
	}
	mine := r.opening[agent]
	for _, other := range r.live {
		if other.Agent() == agent {
			mine++
		}
	}
	if mine >= r.cfg.MaxPerAgent {
		r.mu.Unlock()
		return nil, &sandbox.SessionLimitError{Agent: agent, Limit: r.cfg.MaxPerAgent, PerAgent: true}
	}
	s.mu.Lock()
	s.info.Agent, s.info.CreatedAt, s.info.LastUsedAt, s.info.Calls = agent, now, now, 0
	s.info.IdleTimeoutMS, s.info.MaxLifetimeMS = idle.Milliseconds(), life.Milliseconds()
	s.info.NetworkAllow, s.info.Deadline, s.env = slices.Clone(req.NetworkAllow), req.Deadline, templateEnv(t, req.Env)
	s.info.Template = req.Template
	s.info.Secrets, s.secrets = slices.Clone(req.Secrets), sec
	s.info.History = nil
	s.startLife(req.SessionOptions, now)
	s.info.AddEvent(now, "adopted", "from the warm pool")
	s.life = clock{runStart: now}
	s.fromPool = true
	s.timer.Reset(s.untilExpiry(now))
	h := s.cur
	info := s.info
	s.mu.Unlock()
	r.mu.Unlock()
	if (req.NetworkAllow != nil || sec != nil) && h != nil {
		// Its commands' egress follows its new narrowing, and adds its secrets.
		old := h.egress
		h.giveEgress(r.workspaceEgress(s, req.NetworkAllow))
		if old != nil {
			old.Close()
		}
	}
	r.record(ctx, info)
	r.shareCPU(agent)
	r.log.Info("session created", "session", s.id, "agent", agent, "idle_timeout_ms", idle.Milliseconds(), "max_lifetime_ms", life.Milliseconds(), "warm", true)
	return s, nil
}

// FromPool reports whether the session was claimed from the warm pool (its interpreter
// started before it was asked for).
func (s *Session) FromPool() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fromPool
}

// closeWarm ends warm session id (reason closed), one not handed on yet.
func (r *Registry) closeWarm(ctx context.Context, id string) (sandbox.SessionInfo, error) {
	ctx = context.WithValue(ctx, warmKey{}, warmWork{})
	s, err := r.Get(ctx, WarmAgent, id)
	if err != nil {
		if ended, ok := errors.AsType[*sandbox.SessionEndedError](err); ok {
			return ended.Info, nil
		}
		return sandbox.SessionInfo{}, err
	}
	return s.Close(ctx)
}
