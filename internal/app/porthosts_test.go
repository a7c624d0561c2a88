package app

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/ports"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// fakeSessions holds live sessions by ID (their agents), each of whose port 8000 is server.
type fakeSessions struct {
	agents map[string]string
	server string // host:port
}

func (f fakeSessions) Owner(id string) string { return f.agents[id] }

func (f fakeSessions) Session(_ context.Context, agent, id string) (ports.Dialer, error) {
	if a, ok := f.agents[id]; !ok || a != agent {
		return nil, fmt.Errorf("%w: agent %q has no session %q", sandbox.ErrSessionNotFound, agent, id)
	}
	return dialer(f.server), nil
}

type dialer string

func (d dialer) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port != 8000 {
		return nil, &sandbox.PortError{Port: port, Why: fmt.Sprintf("connection refused: nothing listens on port %d", port)}
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", string(d))
}

// TestPortHostShares: a plain session's host name serves its port to a share link (its secret
// moved into a host-only cookie by a 303), to the daemon's token, or to anyone when the daemon
// has none; a share of another port, a wrong, revoked or expired one, and a session that ended
// are refused at once, also with the cookie; the requests are in the ledger.
func TestPortHostShares(t *testing.T) {
	ctx := t.Context()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	box := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var cookies []string
		for _, c := range r.Cookies() {
			cookies = append(cookies, c.Name)
		}
		fmt.Fprintf(w, "%s host=%s auth=%q cookies=%v", r.URL.RequestURI(), r.Host, r.Header.Get("Authorization"), cookies)
	}))
	defer box.Close()
	const domain = "localhost:8765"
	se, gone := sandbox.NewSessionID(), sandbox.NewSessionID()
	proxy := ports.New(ports.DefaultLimits(), st, nil)
	defer proxy.Close()
	daemon := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	door := portHostDoor{domain: domain, sessions: fakeSessions{agents: map[string]string{se: "alice"}, server: box.Listener.Addr().String()},
		shares: st, proxy: proxy, token: "tok"}
	srv := httptest.NewServer(portHosts(daemon, door))
	defer srv.Close()
	open := portHostsNoToken(t, domain, door)
	host := ports.Host(8000, se, domain)

	secret, sh, err := st.CreatePortShare(ctx, "alice", se, 8000, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	other, _, _ := st.CreatePortShare(ctx, "alice", se, 9000, time.Now().Add(time.Hour))
	ended, _, _ := st.CreatePortShare(ctx, "alice", gone, 8000, time.Now().Add(time.Hour))
	get := func(base, host, target string, h http.Header) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+target, nil)
		req.Host = host
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	cookie := func(v string) http.Header { return http.Header{"Cookie": {"sandpit_share_8000=" + v + "; app=1"}} }

	if resp, body := get(srv.URL, host, "/", nil); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "/shares") {
		t.Fatalf("no credentials: %d %s", resp.StatusCode, body)
	}
	if resp, _ := get(srv.URL, "localhost:8765", "/", nil); resp.StatusCode != http.StatusTeapot {
		t.Fatalf("the daemon's own host: %d", resp.StatusCode)
	}
	// The link: 303 to the same address without the secret, which a cookie carries from now on.
	resp, body := get(srv.URL, host, "/app/?a=1&sandpit_share="+secret+"&b=%2F", nil)
	set := resp.Header.Get("Set-Cookie")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/app/?a=1&b=%2F" ||
		!strings.HasPrefix(set, "sandpit_share_8000="+secret+"; Path=/; Max-Age=") || !strings.Contains(set, "HttpOnly") ||
		!strings.Contains(set, "SameSite=Lax") || strings.Contains(set, "Domain") {
		t.Fatalf("the link: %d %q %q %s", resp.StatusCode, resp.Header.Get("Location"), set, body)
	}
	if resp, _ := get(srv.URL, host, "//evil.example/?sandpit_share="+secret, nil); resp.Header.Get("Location") != "/evil.example/" {
		t.Fatalf("a link to //evil.example/ goes to %q", resp.Header.Get("Location"))
	}
	if resp, body := get(srv.URL, host, "/app/?a=1", cookie(secret)); resp.StatusCode != http.StatusOK ||
		body != `/app/?a=1 host=`+host+` auth="" cookies=[app]` {
		t.Fatalf("with the cookie: %d %s", resp.StatusCode, body)
	}
	// The daemon's token opens it too, and stays out of the box.
	if resp, body := get(srv.URL, host, "/x", http.Header{"Authorization": {"Bearer tok"}}); resp.StatusCode != http.StatusOK || !strings.Contains(body, `auth=""`) {
		t.Fatalf("with the token: %d %s", resp.StatusCode, body)
	}
	if resp, _ := get(srv.URL, host, "/x", http.Header{"Authorization": {"Bearer nope"}}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a wrong token: %d", resp.StatusCode)
	}
	for name, c := range map[string]struct {
		target string
		h      http.Header
		status int
	}{
		"a wrong secret":            {"/?sandpit_share=nope", nil, http.StatusForbidden},
		"an empty secret":           {"/?sandpit_share=", nil, http.StatusForbidden},
		"another port's share":      {"/?sandpit_share=" + other, nil, http.StatusForbidden},
		"another port's cookie":     {"/", cookie(other), http.StatusForbidden},
		"an ended session's share":  {"/", cookie(ended), http.StatusForbidden},
		"a wrong cookie":            {"/", cookie("nope"), http.StatusForbidden},
		"an ended session's secret": {"/?sandpit_share=" + ended, nil, http.StatusForbidden},
	} {
		if resp, body := get(srv.URL, host, c.target, c.h); resp.StatusCode != c.status {
			t.Errorf("%s: %d %s", name, resp.StatusCode, body)
		}
	}
	if resp, body := get(srv.URL, ports.Host(8000, gone, domain), "/", cookie(ended)); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the ended session's own host: %d %s", resp.StatusCode, body)
	}
	// Revoked: the cookie stops working at once, and the browser is told to drop it.
	if err := st.RevokePortShare(ctx, "alice", se, sh.ID); err != nil {
		t.Fatal(err)
	}
	resp, body = get(srv.URL, host, "/", cookie(secret))
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "revoked") || !strings.Contains(resp.Header.Get("Set-Cookie"), "Max-Age=0") {
		t.Fatalf("a revoked share's cookie: %d %q %s", resp.StatusCode, resp.Header.Get("Set-Cookie"), body)
	}
	// Expired: the same.
	short, _, _ := st.CreatePortShare(ctx, "alice", se, 8000, time.Now().Add(50*time.Millisecond))
	time.Sleep(100 * time.Millisecond)
	if resp, _ := get(srv.URL, host, "/", cookie(short)); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("an expired share's cookie: %d", resp.StatusCode)
	}
	// A daemon without a token: its sessions' ports are as open as its API.
	if resp, body := get(open, host, "/", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("no token: %d %s", resp.StatusCode, body)
	}
	// A request is recorded once its answer is written: the last may reach the ledger after
	// its client has read the answer (CI, 4 December: 2 of 3 on a loaded machine).
	var reqs []sandbox.PortRequest
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		reqs, _, err = st.SessionPortRequests(ctx, "alice", se, store.Page{})
		if err != nil || len(reqs) >= 3 || time.Now().After(deadline) {
			break
		}
	}
	// Newest first; two requests of the same millisecond come in either order (CI, 4 December).
	if err != nil || len(reqs) != 3 || reqs[0].Client == "" || reqs[0].Status != http.StatusOK ||
		!slices.ContainsFunc(reqs, func(r sandbox.PortRequest) bool { return r.Path == "/app/?a=1" }) {
		t.Fatalf("the ledger: %+v %v", reqs, err)
	}
}

// portHostsNoToken serves door as a daemon without a token would.
func portHostsNoToken(t *testing.T, domain string, door portHostDoor) string {
	door.token = ""
	srv := httptest.NewServer(portHosts(http.NotFoundHandler(), door))
	t.Cleanup(srv.Close)
	return srv.URL
}
