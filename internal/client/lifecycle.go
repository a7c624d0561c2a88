package client

import (
	"context"
	"net/http"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

// SessionStep takes a lifecycle step of agent's session id: "pause", "resume", "hibernate" or
// "fork" (POST /v1/agents/{agent}/sessions/{id}/{step}). It returns the session after the step
// (for fork, the new session). A step the session's state does not allow is an *APIError with
// Status 409, a budget passed one with 429 naming the budget.
func (c *Client) SessionStep(ctx context.Context, agent, id, step string) (apitype.Session, error) {
	var out apitype.Session
	err := c.call(ctx, http.MethodPost, agentPath(agent, "sessions", id, step), nil, &out)
	return out, err
}
