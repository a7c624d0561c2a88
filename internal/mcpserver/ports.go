package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

const listPortsDoc = `List the TCP ports a session's servers listen on (start one with run_command and background: true, such as python3 -m http.server 8000; it must listen on 127.0.0.1, ::1, 0.0.0.0 or ::): port, address, and path, the daemon's path that forwards any HTTP request to it (behind the daemon's token). A server does not survive hibernation: after a resume from one, start it again.`

const sharePortDoc = `Make a share link of one port of a session, for a person to open in a browser without the daemon's token (a web app or dashboard the session serves): answers the link as url, given only now, its id and expires_at. It works until ttl_ms passes (default one hour, or the session's lifetime when shorter), until revoke_share, or until the session ends.`

const listPortRequestsDoc = `List the HTTP requests sent to a session's ports, newest first, as the ledger recorded them: port, method, path, status, client, bytes each way, duration and the daemon's error if it failed one. Works after the session ended too. A next_cursor in the answer gets the next page (pass it as cursor).`

// PortsArgs are list_ports's arguments.
type PortsArgs struct {
	ID string `json:"id" jsonschema:"the session's id (se_...)"`
}

// SharePortArgs are share_port's arguments.
type SharePortArgs struct {
	ID    string `json:"id" jsonschema:"the session's id (se_...)"`
	Port  int    `json:"port" jsonschema:"the TCP port the session's server listens on, 1 to 65535"`
	TTLMS int64  `json:"ttl_ms,omitempty" jsonschema:"how long the link works, in milliseconds (default 3600000, or the session's lifetime when shorter)"`
}

// RevokeShareArgs are revoke_share's arguments.
type RevokeShareArgs struct {
	ID      string `json:"id" jsonschema:"the session's id (se_...)"`
	ShareID string `json:"share_id" jsonschema:"the share's id (sh_...), from share_port or list_shares"`
}

// ListPortRequestsArgs are list_port_requests's arguments.
type ListPortRequestsArgs struct {
	ID     string `json:"id" jsonschema:"the session's id (se_...)"`
	Limit  int    `json:"limit,omitempty" jsonschema:"at most this many (default 20, up to 500)"`
	Cursor string `json:"cursor,omitempty" jsonschema:"the next_cursor of the previous answer, for the next page"`
}

// addPortTools adds the tools of a session's ports and their share links to s.
func addPortTools(s *mcp.Server, t *tools) {
	mcp.AddTool(s, &mcp.Tool{Name: "list_ports", Description: listPortsDoc}, t.listPorts)
	mcp.AddTool(s, &mcp.Tool{Name: "list_port_requests", Description: listPortRequestsDoc}, t.listPortRequests)
	mcp.AddTool(s, &mcp.Tool{Name: "share_port", Description: sharePortDoc}, t.sharePort)
	mcp.AddTool(s, &mcp.Tool{Name: "list_shares", Description: "List a session's share links that still work: id, port, created_at, expires_at (their urls are given only by share_port)."}, t.listShares)
	mcp.AddTool(s, &mcp.Tool{Name: "revoke_share", Description: "Revoke a session's share link: it stops working at once, also in a browser that opened it."}, t.revokeShare)
}

func (t *tools) listPorts(ctx context.Context, _ *mcp.CallToolRequest, a PortsArgs) (*mcp.CallToolResult, any, error) {
	list, err := t.c.Ports(ctx, t.agent, a.ID)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, apitype.PortList{Ports: list}, nil
}

func (t *tools) listPortRequests(ctx context.Context, _ *mcp.CallToolRequest, a ListPortRequestsArgs) (*mcp.CallToolResult, any, error) {
	page, err := toolPage(a.Limit, a.Cursor)
	if err != nil {
		return nil, nil, err
	}
	list, next, err := t.c.PortRequests(ctx, t.agent, a.ID, page)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, apitype.PortRequestList{Requests: list, NextCursor: next}, nil
}

func (t *tools) sharePort(ctx context.Context, _ *mcp.CallToolRequest, a SharePortArgs) (*mcp.CallToolResult, any, error) {
	r := apitype.ShareRequest{Port: a.Port}
	if a.TTLMS != 0 {
		r.TTLMS = &a.TTLMS
	}
	sh, err := t.c.CreateShare(ctx, t.agent, a.ID, r)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, sh, nil
}

func (t *tools) listShares(ctx context.Context, _ *mcp.CallToolRequest, a PortsArgs) (*mcp.CallToolResult, any, error) {
	list, err := t.c.Shares(ctx, t.agent, a.ID)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, apitype.ShareList{Shares: list}, nil
}

func (t *tools) revokeShare(ctx context.Context, _ *mcp.CallToolRequest, a RevokeShareArgs) (*mcp.CallToolResult, any, error) {
	if err := t.c.RevokeShare(ctx, t.agent, a.ID, a.ShareID); err != nil {
		return nil, nil, toolError(err)
	}
	return nil, map[string]string{"revoked": a.ShareID}, nil
}
