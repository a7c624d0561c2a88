package mcpserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The daemon keeps a bounded number of MCP connections: one more initialize is a 503 that says
// how to free one, and closing a connection makes room again. (3000 initialize requests took a
// daemon from 122 MB to 1.1 GB before.)
func TestHTTPHandlerCapsConnections(t *testing.T) {
	h := HTTPHandler(func(*http.Request) *mcp.Server {
		return mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	}, time.Hour, 2)
	srv := httptest.NewServer(h)
	defer srv.Close()
	initialize := func() *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	var ids []string
	for range 2 {
		resp := initialize()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" {
			t.Fatalf("initialize: %d, session %q", resp.StatusCode, resp.Header.Get("Mcp-Session-Id"))
		}
		ids = append(ids, resp.Header.Get("Mcp-Session-Id"))
	}
	if resp := initialize(); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a third session: %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	req, _ := http.NewRequest(http.MethodDelete, srv.URL, nil)
	req.Header.Set("Mcp-Session-Id", ids[0])
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode >= 300 {
		t.Fatalf("closing a session: %v %v", resp, err)
	}
	if resp := initialize(); resp.StatusCode != http.StatusOK {
		t.Fatalf("after one was closed: %d, want 200", resp.StatusCode)
	}
}
