package mcpserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// connsServer serves httpHandler with at most max connections, each with a tool "quick" and a
// tool "block" that says it started on started and returns when release is closed, and
// initTimeout for connections to initialise.
func connsServer(t *testing.T, max int, initTimeout time.Duration, started, release chan struct{}) (*httptest.Server, *conns) {
	t.Helper()
	h, live := httpHandler(func(*http.Request) *mcp.Server {
		s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
		mcp.AddTool(s, &mcp.Tool{Name: "quick"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
		})
		mcp.AddTool(s, &mcp.Tool{Name: "block"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
		})
		return s
	}, time.Hour, max, initTimeout)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, live
}

// connect starts a connection (initialize, then notifications/initialized) for agent.
func connect(t *testing.T, url, agent string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url + "?agent=" + agent, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("connecting for agent %s: %v", agent, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// initializeOnly sends initialize and never notifications/initialized; it returns the status.
func initializeOnly(t *testing.T, url string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func alive(t *testing.T, cs *mcp.ClientSession) bool {
	t.Helper()
	return cs.Ping(t.Context(), nil) == nil
}

// H55: one client cannot hold every MCP connection. Before, 254 initialize calls took every place
// and every other client got 503 for 30 minutes. Now a new connection closes the oldest idle one
// (those that never called a tool first): the client's own when it holds its share, else one of
// the client holding the most; connections that never initialise are closed; only when every
// connection has a call running is a new one refused. A request naming another agent than its
// connection's is refused.
func TestHTTPHandlerSharesConnections(t *testing.T) {
	started, release := make(chan struct{}, 2), make(chan struct{})
	srv, _ := connsServer(t, 2, time.Hour, started, release)
	call := func(cs *mcp.ClientSession, tool string) error {
		_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}})
		return err
	}

	a, b := connect(t, srv.URL, "mallory"), connect(t, srv.URL, "mallory")
	if err := call(a, "quick"); err != nil {
		t.Fatal(err)
	}
	// mallory holds every place: its third connection closes its own idle one that never called.
	c := connect(t, srv.URL, "mallory")
	if !alive(t, a) || alive(t, b) || !alive(t, c) {
		t.Fatalf("after mallory's third connection: a %v, b %v, c %v; want b (never called a tool) closed", alive(t, a), alive(t, b), alive(t, c))
	}
	// alice, under her share, takes mallory's idle connection that never called a tool.
	d := connect(t, srv.URL, "alice")
	if !alive(t, a) || alive(t, c) || !alive(t, d) {
		t.Fatalf("after alice's connection: a %v, c %v, d %v; want mallory's c closed for her", alive(t, a), alive(t, c), alive(t, d))
	}
	// A request naming another agent than its connection's.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"?agent=alice", strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", a.ID())
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("mallory's connection used as alice: %v %v, want 403", resp, err)
	} else {
		resp.Body.Close()
	}
	// With a call running in every connection, a new one is refused, and nothing is closed.
	done := make(chan error, 2)
	for _, cs := range []*mcp.ClientSession{a, d} {
		go func() { done <- call(cs, "block") }()
	}
	<-started
	<-started
	if st := initializeOnly(t, srv.URL+"?agent=bob"); st != http.StatusServiceUnavailable {
		t.Errorf("a connection while every connection runs a call: %d, want 503", st)
	}
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("a running call: %v", err)
		}
	}
	if !alive(t, a) || !alive(t, d) {
		t.Error("a connection with a running call was closed")
	}
}

// A connection that never sends notifications/initialized is closed once a new connection arrives
// after the time to initialise, even when there is room.
func TestHTTPHandlerClosesUninitialisedConnections(t *testing.T) {
	srv, live := connsServer(t, 10, 0, make(chan struct{}, 1), make(chan struct{}))
	if st := initializeOnly(t, srv.URL); st != http.StatusOK {
		t.Fatalf("initialize: %d", st)
	}
	count := func() int {
		live.mu.Lock()
		defer live.mu.Unlock()
		return len(live.live())
	}
	if n := count(); n != 1 {
		t.Fatalf("%d connections after one initialize, want 1", n)
	}
	// notifications/initialized is handled after its POST is answered: wait until it is.
	initialised := func(n int) {
		for {
			live.mu.Lock()
			k := 0
			for _, t := range live.live() {
				if t.initialised {
					k++
				}
			}
			live.mu.Unlock()
			if k >= n {
				return
			}
			runtime.Gosched()
		}
	}
	a := connect(t, srv.URL, "alice")
	initialised(1)
	b := connect(t, srv.URL, "bob")
	initialised(2)
	if n := count(); !alive(t, a) || !alive(t, b) || n != 2 {
		t.Fatalf("%d connections (alice's alive %v, bob's %v); want the two initialised ones only", n, alive(t, a), alive(t, b))
	}
}
