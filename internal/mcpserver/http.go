package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

// HTTPHandler serves MCP over streamable HTTP (the MCP spec's transport), with a server from
// newServer for each new MCP connection (an MCP session of the transport, named by its
// Mcp-Session-Id; nil answers 400). Connections idle for idleTimeout are closed. At most
// maxConns live at once, shared between clients (a client is a remote host and the agent the
// request names, see agentOf): a connection that has not initialised within InitTimeout is
// closed; when a new connection finds no room, the oldest idle connection (no call running;
// those not initialised, then those that never called a tool, first) is closed for it, the
// client's own when it holds its share of maxConns or more, else one of the client holding
// the most; only when none is idle is it answered 503 with Retry-After, and a JSON error
// saying how to free one. A request whose agent is not its connection's is refused (403).
//
// Each call (a JSON-RPC request, such as tools/call) is cancelled when the HTTP POST that
// carried it ends before it is answered, that is when the client's connection closes: this
// handler keeps no events to replay, so a client cannot resume the stream and the answer could
// never be delivered. A run_code whose client went away is so stopped (outcome killed) at once,
// as over REST, instead of holding its slot until it ends. notifications/cancelled cancels a
// call as well (the SDK's).
func HTTPHandler(newServer func(*http.Request) *mcp.Server, idleTimeout time.Duration, maxConns int) http.Handler {
	h, _ := httpHandler(newServer, idleTimeout, maxConns, InitTimeout)
	return h
}

// httpHandler is HTTPHandler with the time connections have to initialise; it returns its
// connections too.
func httpHandler(newServer func(*http.Request) *mcp.Server, idleTimeout time.Duration, maxConns int, initTimeout time.Duration) (http.Handler, *conns) {
	p := &posts{live: map[string]context.Context{}}
	live := &conns{max: maxConns, initTimeout: initTimeout}
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		s := newServer(r)
		if s != nil {
			t := live.add(s, clientOf(r), agentOf(r))
			s.AddReceivingMiddleware(p.tie, t.watch)
		}
		return s
	}, &mcp.StreamableHTTPOptions{SessionTimeout: idleTimeout})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("Mcp-Session-Id"); id != "" {
			if agent, ok := live.agentOf(id); ok && agent != agentOf(r) {
				writeBusy(w, http.StatusForbidden, apitype.CodeForbidden, "", fmt.Sprintf(
					"MCP connection %s acts for agent %q, and this request names agent %q: a connection keeps the agent it was "+
						"started for; start another session (without Mcp-Session-Id) for agent %q", id, agent, agentOf(r), agentOf(r)))
				return
			}
		} else if r.Method == http.MethodPost && !live.room(clientOf(r), agentOf(r)) {
			writeBusy(w, http.StatusServiceUnavailable, apitype.CodeBusy, "60", fmt.Sprintf(
				"%d MCP connections are open, the most this daemon keeps, and each has a call running: close one you no longer "+
					"use (HTTP DELETE with its Mcp-Session-Id), or retry when a call has ended (idle connections are closed "+
					"after %s, or for a new connection)", maxConns, idleTimeout))
			return
		}
		r = r.Clone(r.Context())
		r.Header.Del(postHeader) // the client's own value names nothing
		if r.Method == http.MethodPost {
			id := rand.Text()
			r.Header.Set(postHeader, id)
			defer p.add(id, r.Context())()
		}
		h.ServeHTTP(w, r)
	}), live
}

// writeBusy answers an error of status and code (with Retry-After when retry is not "").
func writeBusy(w http.ResponseWriter, status int, code, retry, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if retry != "" {
		w.Header().Set("Retry-After", retry)
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apitype.ErrorBody{Error: apitype.ErrorDetail{Code: code, Message: msg}})
}

// InitTimeout is how long a new MCP connection may take to initialise (the client's
// notifications/initialized) before it is closed.
const InitTimeout = 10 * time.Second

// clientOf is the client of a request for sharing connections: its remote host.
func clientOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// conns are the MCP servers made for connections, one each, with what their connections did.
type conns struct {
	max         int
	initTimeout time.Duration

	mu   sync.Mutex
	list []*tracked
}

// tracked is the server of one connection and its use.
type tracked struct {
	s      *mcp.Server
	client string // clientOf and agent of the request that started it
	agent  string
	at     time.Time

	// Under conns.mu:
	used        time.Time // its last request
	initialised bool
	called      bool        // it called a tool
	running     int         // requests being served
	mu          *sync.Mutex // conns.mu
}

func (v *conns) add(s *mcp.Server, client, agent string) *tracked {
	v.mu.Lock()
	defer v.mu.Unlock()
	t := &tracked{s: s, client: client, agent: agent, at: time.Now(), used: time.Now(), mu: &v.mu}
	v.list = append(v.list, t)
	return t
}

// live returns the servers with a connection, forgetting those without one for a minute (the
// handler makes servers that never get a connection, and a connection that ended leaves its server
// empty). v.mu is held.
func (v *conns) live() []*tracked {
	var out []*tracked
	v.list = slices.DeleteFunc(v.list, func(t *tracked) bool {
		for range t.s.Sessions() {
			out = append(out, t)
			return false
		}
		return time.Since(t.at) > time.Minute
	})
	return out
}

// agentOf returns the agent of the connection with id.
func (v *conns) agentOf(id string) (string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, t := range v.list {
		for ss := range t.s.Sessions() {
			if ss.ID() == id {
				return t.agent, true
			}
		}
	}
	return "", false
}

// room makes room for one more connection of client and agent and reports whether there is:
// it closes the connections that did not initialise within InitTimeout and, when all places are
// taken, one idle connection (see HTTPHandler). Requests starting connections at the same moment may
// each see room for one more.
func (v *conns) room(client, agent string) bool {
	v.mu.Lock()
	live := v.live()
	var closing []*tracked
	live = slices.DeleteFunc(live, func(t *tracked) bool {
		stale := !t.initialised && t.running == 0 && time.Since(t.at) >= v.initTimeout
		if stale {
			closing = append(closing, t)
		}
		return stale
	})
	ok := len(live) < v.max
	if !ok {
		if t := v.evictable(live, client+"/"+agent); t != nil {
			closing, ok = append(closing, t), true
		}
	}
	v.mu.Unlock()
	for _, t := range closing {
		for ss := range t.s.Sessions() {
			_ = ss.Close()
		}
	}
	return ok
}

// evictable returns the connection to close for a new one of client (host/agent): the oldest
// idle one of the client when it holds its share or more, else of the client holding the
// most; those not initialised first, then those that never called a tool. nil when none is
// idle. v.mu is held.
func (v *conns) evictable(live []*tracked, client string) *tracked {
	held := map[string]int{client: 0}
	for _, t := range live {
		held[t.client+"/"+t.agent]++
	}
	share := max(v.max/len(held), 1)
	from := client
	if held[client] < share {
		// The client under its share takes from the one holding the most.
		for c, n := range held {
			if n > held[from] || n == held[from] && c < from {
				from = c
			}
		}
	}
	var pick *tracked
	for _, t := range live {
		if t.client+"/"+t.agent != from || t.running > 0 {
			continue
		}
		if pick == nil || rank(t) < rank(pick) || rank(t) == rank(pick) && t.used.Before(pick.used) {
			pick = t
		}
	}
	return pick
}

// rank orders connections for eviction: not initialised (0), never called a tool (1), others (2).
// The connection's conns.mu is held.
func rank(t *tracked) int {
	switch {
	case !t.initialised:
		return 0
	case !t.called:
		return 1
	}
	return 2
}

// watch is server middleware that records what t's connection does.
func (t *tracked) watch(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		t.mu.Lock()
		t.running++
		t.used = time.Now()
		switch {
		case method == "notifications/initialized":
			t.initialised = true
		case method == "tools/call":
			t.initialised, t.called = true, true
		}
		t.mu.Unlock()
		defer func() {
			t.mu.Lock()
			t.running--
			t.used = time.Now()
			t.mu.Unlock()
		}()
		return next(ctx, method, req)
	}
}

// postHeader carries, from HTTPHandler to its middleware, the ID of the POST that carried a
// message: the SDK gives a call the header of its HTTP request (mcp.RequestExtra), not its
// context.
const postHeader = "X-Sandpit-Mcp-Post"

// posts holds the contexts of the POSTs being served, by ID.
type posts struct {
	mu   sync.Mutex
	live map[string]context.Context
}

// add records ctx as POST id's and returns the function that forgets it.
func (p *posts) add(id string, ctx context.Context) func() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.live[id] = ctx
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(p.live, id)
	}
}

// tie is server middleware that cancels a call when the POST that carried it ends (at once when
// it has already ended). Notifications, and messages that came another way than HTTPHandler,
// pass unchanged.
func (p *posts) tie(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		extra := req.GetExtra()
		if extra == nil || extra.Header.Get(postHeader) == "" || strings.HasPrefix(method, "notifications/") {
			return next(ctx, method, req)
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		p.mu.Lock()
		post, ok := p.live[extra.Header.Get(postHeader)]
		p.mu.Unlock()
		if !ok {
			cancel() // the POST is over: nobody waits for this answer
		} else {
			defer context.AfterFunc(post, cancel)()
		}
		return next(ctx, method, req)
	}
}
