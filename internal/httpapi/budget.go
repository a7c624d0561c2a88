package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"strings"
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
type bodyBudget struct {
	sem      *semaphore.Weighted
	total    int64 // bytes
	perBody  int64 // the most one request may send, bytes
	retryIn  time.Duration
	settings string // the setting that sets total, for messages
}

func newBodyBudget(total, perBody int64) *bodyBudget {
	total = max(total, perBody) // one request of the largest size must fit
	return &bodyBudget{sem: semaphore.NewWeighted(total), total: total, perBody: perBody, retryIn: time.Second,
		settings: "bodies_max_bytes"}
}

// admit reserves r's body's bytes. It answers the request and returns ok false when the
// budget refuses it; else call release once the request is answered.
func (b *bodyBudget) admit(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
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
	if !b.sem.TryAcquire(n) {
		setRetryAfter(w, b.retryIn)
		refuseUnread(w, r, &requestError{status: http.StatusTooManyRequests, code: apitype.CodeBusy, msg: fmt.Sprintf(
			"the server is reading and holding other requests' bodies, up to the %d bytes it keeps for them at once (%s); "+
				"retry after the time in Retry-After (a body without Content-Length counts as %d bytes: send Content-Length)",
			b.total, b.settings, b.perBody)})
		return nil, false
	}
	return func() { b.sem.Release(n) }, true
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
// NewHandler returned (bodies_max_bytes): the bodies next reads count with the API's own.
// It returns next as it is for another handler.
func LimitBodies(handler, next http.Handler) http.Handler {
	a, ok := handler.(*api)
	if !ok {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		release, ok := a.bodies.admit(w, r)
		if !ok {
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}
