package client

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// SessionDraft is the body of a session's creation; every field is optional.
type SessionDraft struct {
	// Dependencies are PEP 508 requirements installed once, when the session is created.
	Dependencies []string `json:"dependencies,omitempty"`
	// IdleTimeoutMS and MaxLifetimeMS override the daemon's session_idle_timeout_ms and
	// session_max_lifetime_ms for this session (milliseconds; nil: the daemon's).
	IdleTimeoutMS *int64 `json:"idle_timeout_ms,omitempty"`
	MaxLifetimeMS *int64 `json:"max_lifetime_ms,omitempty"`
}

// SessionCall is the body of a call in a session.
type SessionCall struct {
	// Code is the Python source, run in the session's module.
	Code string `json:"code"`
	// Input is the JSON value the call sees as INPUT; nil sends none (null).
	Input json.RawMessage `json:"input,omitempty"`
	// TimeoutMS is the call's wall-clock limit in milliseconds; nil means the daemon's default.
	TimeoutMS *int64 `json:"timeout_ms,omitempty"`
	// Wait, when false, fails the call with an *APIError of Status 409 while another call of
	// the session runs, instead of waiting for its turn.
	Wait *bool `json:"wait,omitempty"`
	RunFiles
}

// CreateSession starts a stateful session for agent. Past a cap: an *APIError with Status 429.
func (c *Client) CreateSession(ctx context.Context, agent string, d SessionDraft) (sandbox.SessionInfo, error) {
	var out sandbox.SessionInfo
	err := c.call(ctx, http.MethodPost, agentPath(agent, "sessions"), d, &out)
	return out, err
}

// ListSessions returns agent's sessions: active ones and those ended while the daemon ran.
func (c *Client) ListSessions(ctx context.Context, agent string) ([]sandbox.SessionInfo, error) {
	var out struct {
		Sessions []sandbox.SessionInfo `json:"sessions"`
	}
	err := c.getJSON(ctx, agentPath(agent, "sessions"), &out)
	return out.Sessions, err
}

// GetSession returns agent's session id, active or ended (404: none).
func (c *Client) GetSession(ctx context.Context, agent, id string) (sandbox.SessionInfo, error) {
	var out sandbox.SessionInfo
	err := c.getJSON(ctx, agentPath(agent, "sessions", id), &out)
	return out, err
}

// CloseSession ends agent's session id and removes its sandbox; it returns the session as it
// ended.
func (c *Client) CloseSession(ctx context.Context, agent, id string) (sandbox.SessionInfo, error) {
	var out sandbox.SessionInfo
	err := c.call(ctx, http.MethodDelete, agentPath(agent, "sessions", id), nil, &out)
	return out, err
}

// RunInSession runs call as the next call of agent's session id (see Execute for onEvent and
// ExecuteAnswer for the answer). An ended session is an *APIError with Status 410.
func (c *Client) RunInSession(ctx context.Context, agent, id string, call SessionCall, onEvent func(sandbox.Event)) (Answer, error) {
	return c.execute(ctx, agentPath(agent, "sessions", id, "executions"), call, onEvent)
}
