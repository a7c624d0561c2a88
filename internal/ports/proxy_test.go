package ports_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/ports"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// loopback dials a test server as a session's port would be: only the one address it was
// given, whatever port is asked (ports it does not serve are refused as the executor does).
type loopback struct {
	addrs map[int]string
	mu    sync.Mutex
	dials int
}

func (l *loopback) DialPort(ctx context.Context, port int) (net.Conn, error) {
	l.mu.Lock()
	l.dials++
	l.mu.Unlock()
	addr, ok := l.addrs[port]
	if !ok {
		return nil, &sandbox.PortError{Port: port, Why: fmt.Sprintf("connection refused: nothing listens on port %d", port)}
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// recorder keeps the ledger's records.
type recorder struct {
	mu   sync.Mutex
	recs []sandbox.PortRequest
}

func (r *recorder) RecordPortRequest(_ context.Context, rec sandbox.PortRequest) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}

func (r *recorder) all() []sandbox.PortRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sandbox.PortRequest(nil), r.recs...)
}

// wait returns the records once there are n, or what there is after 10 s: a request is
// recorded as its exchange ends, after the client has read the answer.
func (r *recorder) wait(n int) []sandbox.PortRequest {
	deadline := time.Now().Add(10 * time.Second)
	for len(r.all()) < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return r.all()
}

// front serves the proxy as a door does: every request to port 8000 of session se_1 under
// prefix (the path form) or as its own origin (prefix "").
func front(t *testing.T, p *ports.Proxy, d ports.Dialer, prefix string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := strings.TrimPrefix(r.URL.EscapedPath(), prefix)
		if r.URL.RawQuery != "" {
			path += "?" + r.URL.RawQuery
		}
		p.Serve(w, r, ports.Target{Session: d, SessionID: "se_1", Agent: "alice", Port: 8000, Path: path, Prefix: prefix,
			Client: r.RemoteAddr, Strip: []string{"Authorization"}, DaemonHosts: []string{r.Host, "localhost:8765"},
			Fail: func(w http.ResponseWriter, err error) {
				status := http.StatusInternalServerError
				if pe, ok := errors.AsType[*ports.Error](err); ok {
					status = pe.Status
				}
				http.Error(w, err.Error(), status)
			}})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, c *http.Client, url string, header ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// The path form: path and query pass, the daemon's credentials do not, and the answer stays
// under the prefix (cookies, redirects) in a sandboxed document.
func TestPathFormKeepsTheAnswerUnderItsPrefix(t *testing.T) {
	var seen *http.Request
	box := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r
		switch r.URL.Path {
		case "/login":
			http.SetCookie(w, &http.Cookie{Name: "app", Value: "1", Path: "/", Domain: "localhost"})
			http.SetCookie(w, &http.Cookie{Name: "sandpit_console", Value: "forged", Path: "/ui"})
			http.SetCookie(w, &http.Cookie{Name: "__Host-x", Value: "1", Path: "/", Secure: true})
			w.Header().Set("Strict-Transport-Security", "max-age=31536000")
			w.Header().Set("Clear-Site-Data", `"*"`)
			http.Redirect(w, r, "/home?x=1", http.StatusFound)
		case "/away":
			http.Redirect(w, r, "http://localhost:8000/there", http.StatusFound)
		case "/daemon":
			http.Redirect(w, r, "http://127.0.0.1:8765/v1/limits", http.StatusFound)
		case "/elsewhere":
			http.Redirect(w, r, "https://example.com/x", http.StatusFound)
		default:
			fmt.Fprintf(w, "path %s query %s", r.URL.EscapedPath(), r.URL.RawQuery)
		}
	}))
	defer box.Close()
	rec := &recorder{}
	p := ports.New(ports.DefaultLimits(), rec, nil)
	defer p.Close()
	prefix := "/v1/agents/alice/sessions/se_1/ports/8000"
	srv := front(t, p, &loopback{addrs: map[int]string{8000: box.Listener.Addr().String()}}, prefix)

	res, body := get(t, noRedirect, srv.URL+prefix+"/a%2Fb/c?q=1&r=%20", "Authorization", "Bearer daemon-token",
		"Cookie", "sandpit_console=secret; app=2")
	if res.StatusCode != 200 || body != "path /a%2Fb/c query q=1&r=%20" {
		t.Fatalf("GET: %d %q", res.StatusCode, body)
	}
	if seen.Header.Get("Authorization") != "" || seen.Header.Get("Cookie") != "app=2" || seen.Host != "localhost:8000" ||
		seen.Header.Get("X-Forwarded-Prefix") != prefix {
		t.Fatalf("the box saw Authorization %q, Cookie %q, Host %q, X-Forwarded-Prefix %q",
			seen.Header.Get("Authorization"), seen.Header.Get("Cookie"), seen.Host, seen.Header.Get("X-Forwarded-Prefix"))
	}
	// E2B's tokens and a share link's secret never reach the box, whatever the form.
	res, body = get(t, noRedirect, srv.URL+prefix+"/x?a=1&sandpit_share=secret", "X-Access-Token", "tok", "E2b-Traffic-Access-Token", "tok")
	if res.StatusCode != 200 || body != "path /x query a=1" || seen.Header.Get("X-Access-Token") != "" || seen.Header.Get("E2b-Traffic-Access-Token") != "" {
		t.Fatalf("the box saw %q, X-Access-Token %q", body, seen.Header.Get("X-Access-Token"))
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "sandbox ") || strings.Contains(csp, "allow-same-origin") {
		t.Fatalf("Content-Security-Policy %q: the page must be sandboxed without allow-same-origin", csp)
	}

	res, _ = get(t, noRedirect, srv.URL+prefix+"/login")
	if loc := res.Header.Get("Location"); loc != prefix+"/home?x=1" {
		t.Errorf("redirect to /home?x=1 became %q", loc)
	}
	cookies := res.Header.Values("Set-Cookie")
	if len(cookies) != 1 || !strings.HasPrefix(cookies[0], "app=1; Path="+prefix+"/") || strings.Contains(strings.ToLower(cookies[0]), "domain") {
		t.Errorf("Set-Cookie: %q; want only app, host-only, under %s/", cookies, prefix)
	}
	if res.Header.Get("Strict-Transport-Security") != "" || res.Header.Get("Clear-Site-Data") != "" {
		t.Errorf("the box's HSTS or Clear-Site-Data reached the browser: %v", res.Header)
	}
	res, _ = get(t, noRedirect, srv.URL+prefix+"/away")
	if loc := res.Header.Get("Location"); loc != prefix+"/there" {
		t.Errorf("redirect to its own loopback name became %q", loc)
	}
	res, body = get(t, noRedirect, srv.URL+prefix+"/daemon")
	if res.StatusCode != 502 || res.Header.Get("Location") != "" || !strings.Contains(body, "redirected to the daemon itself") {
		t.Errorf("a redirect to the daemon's API: %d, Location %q, %q", res.StatusCode, res.Header.Get("Location"), body)
	}
	res, _ = get(t, noRedirect, srv.URL+prefix+"/elsewhere")
	if loc := res.Header.Get("Location"); loc != "https://example.com/x" {
		t.Errorf("a redirect elsewhere was changed: %q", loc)
	}

	recs := rec.wait(6)
	if len(recs) != 6 || recs[0].Status != 200 || recs[0].Path != "/a%2Fb/c?q=1&r=%20" || recs[0].Agent != "alice" || recs[0].BytesOut == 0 ||
		recs[1].Path != "/x?a=1" || recs[2].Status != 302 || recs[4].Status != 502 {
		t.Fatalf("ledger: %+v", recs)
	}
}

// Errors are answered, never a hang: nothing listens (502), a server that never answers
// (504 after the idle timeout), headers past the bound (502).
func TestFailuresAreAnsweredAtOnce(t *testing.T) {
	silent, _ := net.Listen("tcp", "127.0.0.1:0")
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 2000 {
			w.Header().Set(fmt.Sprintf("X-H%d", i), strings.Repeat("x", 100))
		}
	}))
	defer huge.Close()
	// Only the silent server's case waits for the idle timeout; the others are answered by
	// what fails, so their idle timeout is long (on a loaded machine 2000 headers took longer
	// than 500 ms to arrive, and the answer was the idle timeout's 504: CI, 5 December).
	for _, c := range []struct {
		name   string
		addr   string
		idle   time.Duration
		status int
		says   string
	}{
		{"nothing listens", "", time.Minute, 502, "nothing listens on port 8000"},
		{"never answers", silent.Addr().String(), 500 * time.Millisecond, 504, "sent no answer within 500ms (port_idle_timeout_ms)"},
		{"huge headers", huge.Listener.Addr().String(), time.Minute, 502, "did not answer properly"},
	} {
		lim := ports.DefaultLimits()
		lim.IdleTimeout = c.idle
		p := ports.New(lim, nil, nil)
		defer p.Close()
		d := &loopback{addrs: map[int]string{}}
		if c.addr != "" {
			d.addrs[8000] = c.addr
		}
		srv := front(t, p, d, "")
		start := time.Now()
		res, body := get(t, http.DefaultClient, srv.URL+"/")
		if res.StatusCode != c.status || !strings.Contains(body, c.says) || time.Since(start) > 10*time.Second {
			t.Errorf("%s: %d %q after %s; want %d saying %q", c.name, res.StatusCode, body, time.Since(start), c.status, c.says)
		}
	}
}

// An endless body is cut at the connection's bytes; the requests in flight to one session are
// capped, and the cap's answer names the setting.
func TestBoundsHold(t *testing.T) {
	release := make(chan struct{})
	box := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-release
			return
		}
		chunk := make([]byte, 64<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer box.Close()
	defer close(release)
	lim := ports.DefaultLimits()
	lim.MaxBytes, lim.PerSession = 4<<20, 2
	p := ports.New(lim, nil, nil)
	defer p.Close()
	srv := front(t, p, &loopback{addrs: map[int]string{8000: box.Listener.Addr().String()}}, "")

	res, err := http.Get(srv.URL + "/endless")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if n > 4<<20 || n < 3<<20 {
		t.Fatalf("an endless body gave %d bytes; want it cut at 4 MiB, the connection's bytes", n)
	}

	var open []*http.Response
	for range 2 {
		res, err := http.Get(srv.URL + "/wait")
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("a held request: %v", err)
		}
		open = append(open, res)
	}
	res, body := get(t, http.DefaultClient, srv.URL+"/third")
	if res.StatusCode != 429 || !strings.Contains(body, "port_connections_per_session") {
		t.Fatalf("a third request in flight: %d %q", res.StatusCode, body)
	}
	for _, r := range open {
		r.Body.Close()
	}
}

// A WebSocket passes both ways (a raw upgrade, as the browser's), and is counted in the
// ledger as one request.
func TestWebSocketPassesBothWays(t *testing.T) {
	box := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "upgrade required", 426)
			return
		}
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
		line, _ := rw.ReadString('\n')
		rw.WriteString("echo " + line)
		rw.Flush()
	}))
	defer box.Close()
	rec := &recorder{}
	p := ports.New(ports.DefaultLimits(), rec, nil)
	defer p.Close()
	srv := front(t, p, &loopback{addrs: map[int]string{8000: box.Listener.Addr().String()}}, "")

	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", res, err)
	}
	fmt.Fprintf(c, "hello\n")
	got, err := br.ReadString('\n')
	if err != nil || got != "echo hello\n" {
		t.Fatalf("echo: %q %v", got, err)
	}
	c.Close()
	recs := rec.wait(1)
	if len(recs) != 1 || !recs[0].WebSocket || recs[0].Status != 101 || recs[0].BytesIn < 6 || recs[0].BytesOut < 11 {
		t.Fatalf("ledger: %+v", recs)
	}
}

func TestParseHost(t *testing.T) {
	for _, c := range []struct {
		host, domain string
		port         int
		id           string
	}{
		{"8000-se_abc.localhost:8765", "localhost:8765", 8000, "se_abc"},
		{"8000-SE_ABC.LOCALHOST:8765", "localhost:8765", 8000, "se_abc"},
		{"3000-i1.sandpit.example.com", "sandpit.example.com", 3000, "i1"},
		{"3000-i1.sandpit.example.com:443", "sandpit.example.com", 3000, "i1"},
		{"8000-se_abc.localhost:9999", "localhost:8765", 0, ""},
		{"localhost:8765", "localhost:8765", 0, ""},
		{"x-se_abc.localhost:8765", "localhost:8765", 0, ""},
		{"08000-se_abc.localhost:8765", "localhost:8765", 0, ""},
		{"70000-se_abc.localhost:8765", "localhost:8765", 0, ""},
		{"8000-se_abc.evil.localhost:8765", "localhost:8765", 0, ""},
		{"8000-.localhost:8765", "localhost:8765", 0, ""},
	} {
		port, id, ok := ports.ParseHost(c.host, c.domain)
		if port != c.port || id != c.id || ok != (c.port != 0) {
			t.Errorf("ParseHost(%q, %q) = %d %q %v; want %d %q", c.host, c.domain, port, id, ok, c.port, c.id)
		}
	}
}
