package client

import (
	"context"
	"net/http"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

// CreateSession starts a stateful session for agent (POST /v1/agents/{agent}/sessions). Past a
// cap: an *APIError with Status 429.
func (c *Client) CreateSession(ctx context.Context, agent string, d apitype.SessionCreate) (apitype.Session, error) {
	var out apitype.Session
	err := c.call(ctx, http.MethodPost, agentPath(agent, "sessions"), d, &out)
	return out, err
}

// ListSessions returns agent's sessions: active ones and those ended while the daemon ran.
func (c *Client) ListSessions(ctx context.Context, agent string) ([]apitype.Session, error) {
	var out apitype.SessionList
	err := c.getJSON(ctx, agentPath(agent, "sessions"), &out)
	return out.Sessions, err
}

// GetSession returns agent's session id, active or ended (404: none).
func (c *Client) GetSession(ctx context.Context, agent, id string) (apitype.Session, error) {
	var out apitype.Session
	err := c.getJSON(ctx, agentPath(agent, "sessions", id), &out)
	return out, err
}

// CloseSession ends agent's session id and removes its sandbox; it returns the session as it
// ended.
func (c *Client) CloseSession(ctx context.Context, agent, id string) (apitype.Session, error) {
	var out apitype.Session
	err := c.call(ctx, http.MethodDelete, agentPath(agent, "sessions", id), nil, &out)
	return out, err
}

// RunInSession runs call as the next call of agent's session id (see Execute for onEvent and
// ExecuteAnswer for the answer). An ended session is an *APIError with Status 410.
func (c *Client) RunInSession(ctx context.Context, agent, id string, call apitype.SessionCall, onEvent func(apitype.Event)) (Answer, error) {
	return c.execute(ctx, agentPath(agent, "sessions", id, "executions"), call, onEvent)
}
