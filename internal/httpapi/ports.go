package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/ports"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// A session's ports over REST (docs/ports.md): the path form
// /v1/agents/{agent}/sessions/{id}/ports/{port}/{path…} forwards any method, path and query to
// the server the session runs on that port, WebSockets and streamed answers included.

// portsSegments is how many segments of a port's path are the daemon's:
// "", v1, agents, {agent}, sessions, {id}, ports, {port}.
const portsSegments = 8

func (a *api) routePorts() {
	s := "/v1/agents/{agent}/sessions/{id}"
	a.handle("GET "+s+"/ports", a.inSession(a.listPorts, false))
	if a.ledger != nil {
		// Not a port: {port} is a number, so the mux routes …/ports/requests here.
		a.handle("GET "+s+"/ports/requests", a.listPortRequests)
	}
	if a.shares != nil {
		a.handle("POST "+s+"/shares", a.inSession(a.createShare, false))
		a.handle("GET "+s+"/shares", a.listShares)
		a.handle("DELETE "+s+"/shares/{share}", a.revokeShare)
	}
	for _, m := range PortMethods {
		a.handle(m+" "+s+"/ports/{port}", a.inSession(a.portRoot, false))
		a.handle(m+" "+s+"/ports/{port}/{path...}", a.inSession(a.proxyPort, false))
		// The body passes to the server as it comes: the proxy counts and bounds it.
		a.streamed[m+" "+s+"/ports/{port}"] = true
		a.streamed[m+" "+s+"/ports/{port}/{path...}"] = true
	}
}

// PortMethods are the methods the path form forwards (GET includes HEAD; a WebSocket is a GET).
var PortMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

func (a *api) listPorts(w http.ResponseWriter, r *http.Request, s *session.Session) {
	listening, err := s.ListeningPorts(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	out := apitype.PortList{Ports: []apitype.Port{}}
	base := strings.TrimSuffix(r.URL.EscapedPath(), "/")
	for _, p := range listening {
		out.Ports = append(out.Ports, apitype.Port{Port: p.Port, Address: p.Address, Path: base + "/" + strconv.Itoa(p.Port) + "/"})
	}
	writeJSON(w, http.StatusOK, out)
}

// portRoot sends …/ports/{port} on to …/ports/{port}/ (308 keeps the method and body): the
// server's relative links resolve under the slash.
func (a *api) portRoot(w http.ResponseWriter, r *http.Request, _ *session.Session) {
	if _, err := portOf(r); err != nil {
		writeError(w, err)
		return
	}
	u := *r.URL
	u.Path, u.RawPath = r.URL.Path+"/", ""
	http.Redirect(w, r, u.RequestURI(), http.StatusPermanentRedirect)
}

func (a *api) proxyPort(w http.ResponseWriter, r *http.Request, s *session.Session) {
	port, err := portOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if a.ports == nil {
		writeError(w, &requestError{status: http.StatusNotFound, code: apitype.CodeNotFound,
			msg: "this daemon does not serve sessions' ports"})
		return
	}
	segs := strings.SplitN(r.URL.EscapedPath(), "/", portsSegments+1)
	prefix, rest := strings.Join(segs[:portsSegments], "/"), "/"
	if len(segs) > portsSegments {
		rest += segs[portsSegments]
	}
	if r.URL.RawQuery != "" {
		rest += "?" + r.URL.RawQuery
	}
	info := s.Info()
	t := ports.Target{Session: s, SessionID: info.ID, Agent: info.Agent, Port: port, Path: rest, Prefix: prefix,
		DaemonHosts: []string{r.Host}, Client: r.RemoteAddr, Fail: writeError}
	if a.daemonToken {
		t.Strip = []string{"Authorization"} // the daemon's bearer token
	}
	a.ports.Serve(w, r, t)
}

// portOf reads the path's {port}.
func portOf(r *http.Request) (int, error) {
	p, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || p < 1 || p > 65535 {
		return 0, invalid("port", "is %q: give a TCP port, 1 to 65535, the session's server listens on", r.PathValue("port"))
	}
	return p, nil
}

// portError classifies a *ports.Error: its status, with the code of its kind.
func portError(err error) (classified, bool) {
	var pe *ports.Error
	if !errors.As(err, &pe) {
		return classified{}, false
	}
	code := apitype.CodeBadGateway
	switch pe.Status {
	case http.StatusBadRequest:
		code = apitype.CodeInvalidRequest
	case http.StatusTooManyRequests:
		code = apitype.CodeBusy
	case http.StatusGatewayTimeout:
		code = apitype.CodeGatewayTimeout
	}
	return classified{status: pe.Status, detail: apitype.ErrorDetail{Code: code, Message: pe.Msg}}, true
}

// PortShares keeps the share links of sessions' ports; *store.Store satisfies it.
type PortShares interface {
	CreatePortShare(ctx context.Context, agent, id string, port int, expires time.Time) (string, store.PortShare, error)
	PortShares(ctx context.Context, agent, id string) ([]store.PortShare, error)
	RevokePortShare(ctx context.Context, agent, id, shareID string) error
}

var _ PortShares = (*store.Store)(nil)

// ShareParam is the query parameter of a share link that carries its secret.
const ShareParam = ports.ShareParam

// DefaultShareTTL is how long a share works when its request gives no ttl_ms.
const DefaultShareTTL = time.Hour

// listPortRequests answers a page of the requests the ledger recorded to the session's ports,
// newest first: also once it has ended, as long as the ledger keeps them.
func (a *api) listPortRequests(w http.ResponseWriter, r *http.Request) {
	agent, _, p, err := listing(r)
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	if err := a.knownSession(r, agent, id); err != nil {
		writeError(w, err)
		return
	}
	list, next, err := a.ledger.SessionPortRequests(r.Context(), agent, id, p)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apitype.PortRequestList{Requests: each(list, portRequestOf), NextCursor: next})
}

func portRequestOf(p sandbox.PortRequest) apitype.PortRequest {
	return apitype.PortRequest{ID: p.ID, SessionID: p.SessionID, Port: p.Port, Method: p.Method, Path: p.Path, Status: p.Status,
		Client: p.Client, WebSocket: p.WebSocket, BytesIn: p.BytesIn, BytesOut: p.BytesOut, StartedAt: p.StartedAt,
		DurationMS: p.DurationMS, Error: p.Error}
}

var shareShape = shape{flat: true, fields: []string{"port", "ttl_ms"},
	expect:  map[string]string{"port": "must be a TCP port number, 1 to 65535", "ttl_ms": "must be an integer number of milliseconds"},
	example: `{"port": 8000, "ttl_ms": 3600000}`}

// createShare makes a share link of one of the session's ports, for a person's browser: its
// URL is the port's host form with the secret in the query (see docs/ports.md).
func (a *api) createShare(w http.ResponseWriter, r *http.Request, s *session.Session) {
	var b apitype.ShareRequest
	if err := readBody(w, r, 4096, &b, shareShape); err != nil {
		writeError(w, err)
		return
	}
	if b.Port < 1 || b.Port > 65535 {
		writeError(w, invalid("port", "is %d: give the TCP port, 1 to 65535, the session's server listens on, such as %s", b.Port, shareShape.example))
		return
	}
	info := s.Info()
	ttl := min(DefaultShareTTL, time.Duration(info.MaxLifetimeMS)*time.Millisecond)
	if b.TTLMS != nil {
		if *b.TTLMS < 1000 || *b.TTLMS > info.MaxLifetimeMS {
			writeError(w, invalid("ttl_ms", "is %d: give 1000 to the session's max_lifetime_ms (%d) milliseconds (default %d, an hour)",
				*b.TTLMS, info.MaxLifetimeMS, DefaultShareTTL.Milliseconds()))
			return
		}
		ttl = time.Duration(*b.TTLMS) * time.Millisecond
	}
	if a.portsHost == "" {
		writeError(w, errclass.New(errclass.Unavailable, "this daemon has no host name for its sessions' ports, which a share link opens: "+
			"set public_host to the host (and port) browsers reach the daemon by, e.g. sandpit.example.com:8765, "+
			"with its subdomains resolving to the daemon"))
		return
	}
	secret, sh, err := a.shares.CreatePortShare(r.Context(), info.Agent, info.ID, b.Port, time.Now().Add(ttl))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := shareOf(sh)
	out.URL = "http://" + ports.Host(b.Port, info.ID, a.portsHost) + "/?" + url.Values{ShareParam: {secret}}.Encode()
	writeJSON(w, http.StatusCreated, out)
}

// listShares answers the session's unexpired shares, without their secrets.
func (a *api) listShares(w http.ResponseWriter, r *http.Request) {
	agent, err := agentOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := checkQuery(r.URL.Query()); err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	if err := a.knownSession(r, agent, id); err != nil {
		writeError(w, err)
		return
	}
	list, err := a.shares.PortShares(r.Context(), agent, id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apitype.ShareList{Shares: each(list, shareOf)})
}

// revokeShare deletes a share: it stops working at once, also in a browser that holds its
// cookie.
func (a *api) revokeShare(w http.ResponseWriter, r *http.Request) {
	agent, err := agentOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	if err := a.knownSession(r, agent, id); err != nil {
		writeError(w, err)
		return
	}
	if err := a.shares.RevokePortShare(r.Context(), agent, id, r.PathValue("share")); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func shareOf(sh store.PortShare) apitype.Share {
	return apitype.Share{ID: sh.ID, SessionID: sh.SessionID, Port: sh.Port, CreatedAt: sh.CreatedAt, ExpiresAt: sh.ExpiresAt}
}
