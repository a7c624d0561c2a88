package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

// DefaultBodiesMaxBytes is the default budget of request bodies the API reads and holds at
// once (128 MiB): about five runs' bodies at the default caps.
const DefaultBodiesMaxBytes = 128 << 20

// bodyBudget bounds the bytes of request bodies in flight: a request is admitted before any
// of its body is read, for the bytes its Content-Length names (a body without one, for the
// most one request may send), and holds them until it is answered, since what it decoded
// lives that long. A request the budget has no room for is refused at once with 429, unread;
// one over the most a request may send, with 413. Concurrent clients so cannot make the
// daemon read and decode more than the budget (each body is held in at most two copies while
// decoding, see decodeBody).
//
// Each agent holds at most its share of the budget (a quarter, at least the most one request
// may send; the requests that name no agent share one share), so one agent's slow bodies
// cannot take the room every other agent's requests need.
type bodyBudget struct {
	sem      *semaphore.Weighted
	total    int64 // bytes
	perBody  int64 // the most one request may send, bytes
	share    int64 // the most one agent may hold, bytes
	retryIn  time.Duration
	settings string // the setting that sets total, for messages

	mu   sync.Mutex
	held map[string]int64 // bytes admitted, by agent
}

func newBodyBudget(total, perBody int64) *bodyBudget {
	total = max(total, perBody) // one request of the largest size must fit
	return &bodyBudget{sem: semaphore.NewWeighted(total), total: total, perBody: perBody, share: max(total/4, perBody),
		retryIn: time.Second, settings: "bodies_max_bytes", held: map[string]int64{}}
}

// admit reserves r's body's bytes in agent's share ("": a request that names none). It
// answers the request and returns ok false when the budget refuses it; else call release once
// the request is answered.
func (b *bodyBudget) admit(w http.ResponseWriter, r *http.Request, agent string) (release func(), ok bool) {
	n := r.ContentLength
	if n == 0 || r.Body == nil || r.Body == http.NoBody {
		return func() {}, true
	}
	if n > b.perBody {
		w.Header().Set("Connection", "close") // unread
		writeError(w, &requestError{status: http.StatusRequestEntityTooLarge, code: apitype.CodeTooLarge,
			msg: fmt.Sprintf("the request body is %d bytes; no request may send more than %d bytes", n, b.perBody)})
		return nil, false
	}
	if n < 0 {
		// No Content-Length (chunked): reserve the most a request may send, and hold it to that.
		n = b.perBody
		r.Body = http.MaxBytesReader(w, r.Body, n)
	}
	b.mu.Lock()
	mine := b.held[agent]
	if mine+n > b.share {
		b.mu.Unlock()
		who := fmt.Sprintf("agent %q's requests", agent)
		if agent == "" {
			who = "the requests that name no agent (MCP's, unauthenticated ones)"
		}
		setRetryAfter(w, b.retryIn)
		refuseUnread(w, r, &requestError{status: http.StatusTooManyRequests, code: apitype.CodeBusy, msg: fmt.Sprintf(
			"%s hold %d bytes of request bodies being read and answered, and this one would pass their share, %d bytes "+
				"(a quarter of %s, %d); retry after the time in Retry-After, once they are answered "+
				"(a body without Content-Length counts as %d bytes: send Content-Length)",
			who, mine, b.share, b.settings, b.total, b.perBody)})
		return nil, false
	}
	b.held[agent] = mine + n
	b.mu.Unlock()
	unhold := func() {
		b.mu.Lock()
		if b.held[agent] -= n; b.held[agent] <= 0 {
			delete(b.held, agent)
		}
		b.mu.Unlock()
	}
	if !b.sem.TryAcquire(n) {
		unhold()
		setRetryAfter(w, b.retryIn)
		refuseUnread(w, r, &requestError{status: http.StatusTooManyRequests, code: apitype.CodeBusy, msg: fmt.Sprintf(
			"the server is reading and holding other requests' bodies, up to the %d bytes it keeps for them at once (%s); "+
				"retry after the time in Retry-After (a body without Content-Length counts as %d bytes: send Content-Length)",
			b.total, b.settings, b.perBody)})
		return nil, false
	}
	return func() { b.sem.Release(n); unhold() }, true
}

// pathAgent is the agent a REST path names (/v1/agents/{agent}/…), or "".
func pathAgent(p string) string {
	rest, ok := strings.CutPrefix(p, "/v1/agents/")
	if !ok {
		return ""
	}
	agent, _, _ := strings.Cut(rest, "/")
	return agent
}

// refuseUnread answers err to a request whose body (at most the most one request may send) is
// not wanted, then reads the rest of the body into nothing: the body is never held, and a
// client still sending it gets the answer rather than a reset connection. A client that sent
// Expect: 100-continue is not asked for the body at all. The connection is closed afterwards.
func refuseUnread(w http.ResponseWriter, r *http.Request, err error) {
	w.Header().Set("Connection", "close")
	writeError(w, err)
	if strings.EqualFold(r.Header.Get("Expect"), "100-continue") || r.Body == nil {
		return
	}
	_ = http.NewResponseController(w).Flush()
	_, _ = io.Copy(io.Discard, r.Body)
}

// LimitBodies returns next with its requests admitted by the body budget of handler, which
// NewHandler returned (bodies_max_bytes): the bodies next reads count with the API's own, in
// the share of the agent agentOf names (nil, or "": the share of requests that name none).
// It returns next as it is for another handler.
func LimitBodies(handler, next http.Handler, agentOf func(*http.Request) string) http.Handler {
	a, ok := handler.(*api)
	if !ok {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agent := ""
		if agentOf != nil {
			agent = agentOf(r)
		}
		release, ok := a.bodies.admit(w, r, agent)
		if !ok {
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}
