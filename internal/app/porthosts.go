package app

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/e2b"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/ports"
	"github.com/sandpit-dev/sandpit/internal/session"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// hostSessions finds the session a port's host name names by its ID alone (registrySessions
// over *session.Registry).
type hostSessions interface {
	// Owner is the agent of session id while it is live ("" otherwise).
	Owner(id string) string
	// Session is agent's live session id, the registry's errors otherwise.
	Session(ctx context.Context, agent, id string) (ports.Dialer, error)
}

// registrySessions are the registry's sessions as a port's host name finds them.
type registrySessions struct{ *session.Registry }

func (r registrySessions) Session(ctx context.Context, agent, id string) (ports.Dialer, error) {
	s, err := r.Get(ctx, agent, id)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// shareFinder finds a share by its secret; *store.Store satisfies it.
type shareFinder interface {
	PortShareOf(ctx context.Context, secret string) (store.PortShare, error)
}

var (
	_ hostSessions = registrySessions{}
	_ shareFinder  = (*store.Store)(nil)
)

// portHostDoor is what the ports' own host names are served with. sessions, shares and proxy
// nil serve E2B sandboxes' ports only.
type portHostDoor struct {
	domain   string
	e2b      *e2b.Server
	sessions hostSessions
	shares   shareFinder
	proxy    *ports.Proxy
	// token is the daemon's bearer token ("": none, and a plain session's port is open to
	// whoever reaches the daemon, as its API is).
	token string
}

// shareCookie is the cookie a share link leaves for port, on the port's host only.
func shareCookie(port int) string { return httpapi.ShareParam + "_" + strconv.Itoa(port) }

// portHosts serves the sessions' ports' own host names, {port}-{id}.{domain} (see
// docs/ports.md), and passes every other request to next. A request from a page of such a
// host to the daemon's own API is refused: a session's page must not act as the daemon's user.
func portHosts(next http.Handler, d portHostDoor) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		port, id, ok := ports.ParseHost(r.Host, d.domain)
		if !ok {
			if u, err := url.Parse(r.Header.Get("Origin")); err == nil && u.Host != "" {
				if _, _, fromPort := ports.ParseHost(u.Host, d.domain); fromPort {
					httpapi.WriteError(w, errclass.New(errclass.Forbidden,
						"requests from a page a session serves are refused: a session's port must not call the daemon"))
					return
				}
			}
			next.ServeHTTP(w, r)
			return
		}
		if d.e2b != nil && d.e2b.Serves(id) {
			r.Header.Set("E2b-Sandbox-Id", id)
			r.Header.Set("E2b-Sandbox-Port", strconv.Itoa(port))
			d.e2b.ServeHTTP(w, r)
			return
		}
		if d.sessions == nil || d.proxy == nil {
			httpapi.WriteError(w, errclass.New(errclass.NotFound, "no sandbox "+strconv.Quote(id)+" serves port "+strconv.Itoa(port)+" here: "+
				"a session's port is reached at /v1/agents/{agent}/sessions/{id}/ports/{port}/ with the daemon's token"))
			return
		}
		d.serveSession(w, r, port, id)
	})
}

// serveSession serves port of plain session id to a request that carries a share of it (its
// link's secret, or the cookie the link left), the daemon's bearer token, or anything when
// the daemon has no token.
func (d portHostDoor) serveSession(w http.ResponseWriter, r *http.Request, port int, id string) {
	if secret, ok := shareParam(r.URL.RawQuery); ok {
		sh, err := d.share(r.Context(), secret, port, id)
		if err != nil {
			httpapi.WriteError(w, err)
			return
		}
		// The secret leaves the address bar (and the server's logs, and Referer): the cookie
		// carries it from now on, on this host only.
		http.SetCookie(w, &http.Cookie{Name: shareCookie(port), Value: secret, Path: "/", HttpOnly: true,
			SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil, MaxAge: max(int(time.Until(sh.ExpiresAt).Seconds()), 1)})
		// "//host/…" would send the browser to another host: the path stays on this one.
		to := "/" + strings.TrimLeft(r.URL.EscapedPath(), "/")
		if q := withoutShareParam(r.URL.RawQuery); q != "" {
			to += "?" + q
		}
		w.Header().Set("Cache-Control", "no-store")
		http.Redirect(w, r, to, http.StatusSeeOther)
		return
	}
	agent := ""
	if c, err := r.Cookie(shareCookie(port)); err == nil {
		sh, err := d.share(r.Context(), c.Value, port, id)
		if err != nil && !d.authorized(r) {
			if errclass.Of(err) == errclass.Forbidden { // the browser keeps it no longer
				http.SetCookie(w, &http.Cookie{Name: shareCookie(port), Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode, MaxAge: -1})
			}
			httpapi.WriteError(w, err)
			return
		}
		agent = sh.Agent
	}
	if agent == "" {
		if !d.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandpit"`)
			httpapi.WriteError(w, httpapi.Unauthorized(fmt.Sprintf(
				"port %d of session %s is reached in a browser by a share link: the session's agent makes one with "+
					"POST /v1/agents/{agent}/sessions/%s/shares {\"port\": %d} (or the console's session page); "+
					"a client may send the daemon's bearer token instead", port, id, id, port)))
			return
		}
		agent = d.sessions.Owner(id)
	}
	s, err := d.sessions.Session(r.Context(), agent, id)
	if err != nil {
		if agent == "" {
			err = errclass.New(errclass.NotFound, fmt.Sprintf("no session %q serves port %d here: it has ended, or never was", id, port))
		}
		httpapi.WriteError(w, err)
		return
	}
	t := ports.Target{Session: s, SessionID: id, Agent: agent, Port: port, Path: r.URL.RequestURI(), Host: r.Host,
		DaemonHosts: []string{d.domain}, Client: r.RemoteAddr, Fail: httpapi.WriteError}
	if d.token != "" {
		t.Strip = []string{"Authorization"}
	}
	d.proxy.Serve(w, r, t)
}

// share returns the share secret opens, when it is one of port of session id (an error of
// class forbidden otherwise).
func (d portHostDoor) share(ctx context.Context, secret string, port int, id string) (store.PortShare, error) {
	sh, err := d.shares.PortShareOf(ctx, secret)
	switch {
	case errors.Is(err, store.ErrShareUnknown):
		return sh, errclass.New(errclass.Forbidden, "this share link does not open the port any more: it was revoked, it expired, "+
			"or its session ended; ask whoever shared it for a new one")
	case err != nil:
		return sh, err
	case sh.SessionID != id || sh.Port != port:
		return sh, errclass.New(errclass.Forbidden, fmt.Sprintf("this share link opens port %d of session %s, not port %d of session %s: "+
			"open the link as it was given", sh.Port, sh.SessionID, port, id))
	}
	return sh, nil
}

// authorized says r may reach any session's port without a share: it carries the daemon's
// bearer token, or the daemon has none.
func (d portHostDoor) authorized(r *http.Request) bool {
	if d.token == "" {
		return true
	}
	scheme, given, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	got, want := sha256.Sum256([]byte(strings.TrimSpace(given))), sha256.Sum256([]byte(d.token))
	return strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// shareParam returns the share secret of a raw query, and whether it has one.
func shareParam(rawQuery string) (string, bool) {
	for part := range strings.SplitSeq(rawQuery, "&") {
		k, v, _ := strings.Cut(part, "=")
		if k == httpapi.ShareParam {
			if u, err := url.QueryUnescape(v); err == nil {
				v = u
			}
			return v, true // never passed on to the box, even when it is no secret
		}
	}
	return "", false
}

// withoutShareParam returns a raw query without its share secret, the rest as it was.
func withoutShareParam(rawQuery string) string {
	var kept []string
	for part := range strings.SplitSeq(rawQuery, "&") {
		if k, _, _ := strings.Cut(part, "="); k != httpapi.ShareParam && part != "" {
			kept = append(kept, part)
		}
	}
	return strings.Join(kept, "&")
}
