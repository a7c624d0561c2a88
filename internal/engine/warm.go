package engine

import (
	"context"
	"fmt"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Warm sessions: a pool (the E2B API's, internal/e2b) starts sessions ahead of demand, their
// interpreters started and the preload imported, and hands one to an agent when asked, so
// that a new sandbox is ready at once. Until then a warm session belongs to WarmAgent, which
// is no valid agent name: no client can name it, so none can reach a warm session and plant
// anything in another agent's future sandbox. Only a context made by CreateWarm passes for it.

// WarmAgent owns warm sessions until Adopt hands them on.
const WarmAgent = "~warm"

type warmKey struct{}

// warm reports whether ctx may act for WarmAgent.
func warm(ctx context.Context) bool { ok, _ := ctx.Value(warmKey{}).(bool); return ok }

// CreateWarm starts a session for WarmAgent with the limits of req (its Agent is ignored) and
// starts its interpreter with a first call of code (such as "pass"). Errors: those of Create
// and Execute; a call that does not end ok ends the session and is an error.
func (m *Sessions) CreateWarm(ctx context.Context, req sandbox.SessionRequest, code string) (sandbox.SessionInfo, error) {
	ctx = context.WithValue(ctx, warmKey{}, true)
	req.Agent = WarmAgent
	info, err := m.Create(ctx, req)
	if err != nil {
		return info, err
	}
	res, err := m.Execute(ctx, info.ID, sandbox.Request{Code: code, Agent: WarmAgent}, true, nil)
	if err == nil && res.Outcome != sandbox.OutcomeOK {
		err = fmt.Errorf("starting a warm session's interpreter: %s: %s %s", res.Outcome, res.Reason, res.Stderr)
	}
	if err != nil {
		_, _ = m.Close(ctx, WarmAgent, info.ID)
		return sandbox.SessionInfo{}, err
	}
	return m.Get(ctx, WarmAgent, info.ID)
}

// Adopt hands warm session id to agent, counted against its sessions_per_agent from now on.
// Errors: ErrSessionNotFound (no such warm session: it ended, or was adopted), a
// *SessionLimitError when agent is at its cap.
func (m *Sessions) Adopt(ctx context.Context, id, agent string) (sandbox.SessionInfo, error) {
	if err := sandbox.CheckAgent(agent); err != nil {
		return sandbox.SessionInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ls := m.live[id]
	if ls == nil || ls.info.Agent != WarmAgent || ls.info.Busy || ls.info.State != sandbox.SessionActive {
		return sandbox.SessionInfo{}, errclass.Wrap(errclass.NotFound, fmt.Errorf("%w: %s is not a warm session ready to hand on", sandbox.ErrSessionNotFound, id))
	}
	mine := m.opening[agent]
	for _, other := range m.live {
		if other.info.Agent == agent {
			mine++
		}
	}
	if mine >= m.cfg.MaxPerAgent {
		return sandbox.SessionInfo{}, &sandbox.SessionLimitError{Agent: agent, Limit: m.cfg.MaxPerAgent, PerAgent: true}
	}
	ls.info.Agent = agent
	return m.snapshot(ls), nil
}

// CloseWarm ends warm session id (reason closed), one not handed on yet.
func (m *Sessions) CloseWarm(ctx context.Context, id string) (sandbox.SessionInfo, error) {
	return m.Close(context.WithValue(ctx, warmKey{}, true), WarmAgent, id)
}
