package mcpserver

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// ConnectionTimeout is how long an MCP connection (an MCP-over-HTTP session, named by its
// Mcp-Session-Id) may stay idle before it is closed; MaxConnections how many may be open at
// once (each holds about 300 KiB of the daemon's memory).
const (
	ConnectionTimeout = 30 * time.Minute
	MaxConnections    = 256
)

// Endpoint serves MCP over streamable HTTP (the daemon's /mcp) with tools that call the REST
// API through c (client.InProcess of the daemon's own handler). Each connection acts for the
// agent named by the query parameter agent (or the header X-Sandpit-Agent), "default" when
// neither is given; an invalid name is the API's 400 naming the field agent. Connections idle
// for ConnectionTimeout are closed, at most MaxConnections live at once, and a call whose client goes
// away is cancelled (see HTTPHandler). The tools' descriptions state the limits c answers
// (GET /v1/limits, read once here); an error is its failure to answer.
func Endpoint(ctx context.Context, c *client.Client, version string) (http.Handler, error) {
	limits, err := c.Limits(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the limits for the MCP tools' descriptions: %w", err)
	}
	h := HTTPHandler(func(r *http.Request) *mcp.Server {
		return New(c, agentOf(r), version, limits)
	}, ConnectionTimeout, MaxConnections)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := sandbox.CheckAgent(agentOf(r)); err != nil {
			err.Message += " (?agent=NAME or X-Sandpit-Agent)"
			httpapi.WriteError(w, err)
			return
		}
		h.ServeHTTP(w, r)
	}), nil
}

// agentOf is the agent a request to Endpoint names: ?agent=, else X-Sandpit-Agent, else
// "default".
func agentOf(r *http.Request) string {
	agent := r.URL.Query().Get("agent")
	if agent == "" {
		agent = r.Header.Get("X-Sandpit-Agent")
	}
	if agent == "" {
		agent = "default"
	}
	return agent
}
