package client

import (
	"context"
	"net/http"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

// Ports returns the TCP ports agent's session id listens on, each with its path form (GET
// …/sessions/{id}/ports). A paused or hibernated session is an *APIError with Status 409.
func (c *Client) Ports(ctx context.Context, agent, id string) ([]apitype.Port, error) {
	var out apitype.PortList
	err := c.getJSON(ctx, agentPath(agent, "sessions", id, "ports"), &out)
	return out.Ports, err
}

// PortRequests returns a page of the requests the ledger recorded to agent's session id's
// ports, newest first, and the next page's cursor ("" after the last).
func (c *Client) PortRequests(ctx context.Context, agent, id string, p apitype.Page) ([]apitype.PortRequest, string, error) {
	var out apitype.PortRequestList
	err := c.call(ctx, http.MethodGet, agentPath(agent, "sessions", id, "ports", "requests")+query(pageQuery(p)), nil, &out)
	return out.Requests, out.NextCursor, err
}

// CreateShare makes a share link of one port of agent's session id; the answer's URL (which
// holds the link's secret) is given only here. A daemon with no public_host is an *APIError
// with Status 503; a session with 64 shares one with Status 409.
func (c *Client) CreateShare(ctx context.Context, agent, id string, r apitype.ShareRequest) (apitype.Share, error) {
	var out apitype.Share
	err := c.call(ctx, http.MethodPost, agentPath(agent, "sessions", id, "shares"), r, &out)
	return out, err
}

// Shares returns the unexpired shares of agent's session id, newest first, without their URLs.
func (c *Client) Shares(ctx context.Context, agent, id string) ([]apitype.Share, error) {
	var out apitype.ShareList
	err := c.getJSON(ctx, agentPath(agent, "sessions", id, "shares"), &out)
	return out.Shares, err
}

// RevokeShare deletes share of agent's session id: its link stops working at once. An unknown
// share is an *APIError with Status 404.
func (c *Client) RevokeShare(ctx context.Context, agent, id, share string) error {
	resp, err := c.send(ctx, http.MethodDelete, agentPath(agent, "sessions", id, "shares", share), nil, "application/json")
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// SessionEgress returns a page of the outbound connections the ledger recorded for agent's
// session id's commands and for what its calls left running, newest first, and the next
// page's cursor ("" after the last).
func (c *Client) SessionEgress(ctx context.Context, agent, id string, p apitype.Page) ([]apitype.EgressConnection, string, error) {
	var out apitype.EgressList
	err := c.call(ctx, http.MethodGet, agentPath(agent, "sessions", id, "egress")+query(pageQuery(p)), nil, &out)
	return out.Connections, out.NextCursor, err
}
