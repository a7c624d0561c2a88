package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
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
// maxConns live at once: a request to start one more is answered 503 with Retry-After, and a
// JSON error saying how to free one (each connection holds memory in the daemon until it is
// closed or idles out).
//
// Each call (a JSON-RPC request, such as tools/call) is cancelled when the HTTP POST that
// carried it ends before it is answered, that is when the client's connection closes: this
// handler keeps no events to replay, so a client cannot resume the stream and the answer could
// never be delivered. A run_code whose client went away is so stopped (outcome killed) at once,
// as over REST, instead of holding its slot until it ends. notifications/cancelled cancels a
// call as well (the SDK's).
func HTTPHandler(newServer func(*http.Request) *mcp.Server, idleTimeout time.Duration, maxConns int) http.Handler {
	p := &posts{live: map[string]context.Context{}}
	live := &servers{}
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		s := newServer(r)
		if s != nil {
			s.AddReceivingMiddleware(p.tie)
			live.add(s)
		}
		return s
	}, &mcp.StreamableHTTPOptions{SessionTimeout: idleTimeout})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" && live.count() >= maxConns {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(apitype.ErrorBody{Error: apitype.ErrorDetail{Code: apitype.CodeBusy, Message: fmt.Sprintf(
				"%d MCP sessions are open, the most this daemon keeps: close one you no longer use (HTTP DELETE with its "+
					"Mcp-Session-Id), or wait for an idle one to be closed after %s", maxConns, idleTimeout)}})
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
	})
}

// servers are the MCP servers made for connections, one each, to count the live ones.
type servers struct {
	mu   sync.Mutex
	list []made
}

type made struct {
	s  *mcp.Server
	at time.Time
}

func (v *servers) add(s *mcp.Server) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.list = append(v.list, made{s, time.Now()})
}

// count returns how many connections live, forgetting the servers without one for a minute
// (the handler makes servers that never get a connection, and a connection that ended leaves
// its server empty). Requests starting connections at the same moment may each see room for
// one more.
func (v *servers) count() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	v.list = slices.DeleteFunc(v.list, func(m made) bool {
		for range m.s.Sessions() {
			n++
			return false
		}
		return time.Since(m.at) > time.Minute
	})
	return n
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
