package egress

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// TestForwardFollowsTheBuildPolicy: a build's proxy carries plain HTTP and CONNECT to the
// package sources (a mirror on the host's own network included) and to template_build_allow,
// drops the client's proxy credentials, and refuses the rest with a 403 naming the settings,
// each attempt recorded.
func TestForwardFollowsTheBuildPolicy(t *testing.T) {
	var seen sync.Map
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.URL.Path, r.Header.Clone())
		io.WriteString(w, "package "+r.URL.Path)
	})
	plain := httptest.NewServer(handler)
	defer plain.Close()
	secure := httptest.NewTLSServer(handler)
	defer secure.Close()
	_, plainPort, _ := net.SplitHostPort(plain.Listener.Addr().String())
	_, securePort, _ := net.SplitHostPort(secure.Listener.Addr().String())

	res := fakeResolver{"deb.test": {"127.0.0.1"}, "files.test": {"127.0.0.1"}, "other.test": {"127.0.0.1"}}
	a, err := New(Config{PackageHosts: []string{"deb.test:" + plainPort, "deb.test:" + securePort, "security.test"}, BuildAllow: []string{"files.test"}, Resolver: res})
	if err != nil {
		t.Fatal(err)
	}
	// A package source without a port is apt's two.
	res["security.test"] = []string{"192.0.2.80"}
	for port, allowed := range map[int]bool{80: true, 443: true, 22: false, 6379: false} {
		if _, err := a.ForBuild(nil).Check(t.Context(), "security.test", port); (err == nil) != allowed {
			t.Errorf("security.test:%d: %v, want allowed %v", port, err, allowed)
		}
	}
	var mu sync.Mutex
	var recs []sandbox.EgressConnection
	gate := a.ForBuild(func(r sandbox.EgressConnection) { mu.Lock(); recs = append(recs, r); mu.Unlock() })
	fwd := NewForward(gate, "hunter2")
	proxy := httptest.NewServer(fwd)
	stop := sync.OnceFunc(func() { proxy.Close(); gate.Close(); fwd.Close() })
	defer stop()
	pu, _ := url.Parse(proxy.URL)
	pu.User = url.UserPassword("build", "hunter2")
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

	get := func(u string) (int, string) {
		t.Helper()
		resp, err := client.Get(u)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("http://deb.test:" + plainPort + "/pool/jq.deb"); code != 200 || body != "package /pool/jq.deb" {
		t.Errorf("plain HTTP to a package source: %d %q", code, body)
	}
	if h, _ := seen.Load("/pool/jq.deb"); h == nil || h.(http.Header).Get("Proxy-Authorization") != "" {
		t.Errorf("the source saw the proxy's credentials: %v", h)
	}
	if code, body := get("https://deb.test:" + securePort + "/simple/"); code != 200 || body != "package /simple/" {
		t.Errorf("HTTPS (CONNECT) to a package source: %d %q", code, body)
	}
	// template_build_allow's entries are not trusted: a loopback address needs an entry
	// naming it, as network_allow's do.
	if code, body := get("http://files.test:" + plainPort + "/x"); code != http.StatusForbidden || !strings.Contains(body, "is refused") {
		t.Errorf("a build_allow name on loopback: %d %q", code, body)
	}
	if code, body := get("http://other.test:" + plainPort + "/"); code != http.StatusForbidden || !strings.Contains(body, "template_build_allow") {
		t.Errorf("plain HTTP elsewhere: %d %q, want 403 naming template_build_allow", code, body)
	}
	if code, body := get("https://other.test:" + securePort + "/"); code != 0 || !strings.Contains(body, "Forbidden") {
		t.Errorf("CONNECT elsewhere: %d %q, want the client's error on a 403", code, body)
	}
	// Without the proxy's password: 407, for plain HTTP and CONNECT alike.
	for _, pass := range []string{"", "hunter3"} {
		wrong, _ := url.Parse(proxy.URL)
		if pass != "" {
			wrong.User = url.UserPassword("build", pass)
		}
		other := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(wrong), TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		if resp, err := other.Get("http://deb.test:" + plainPort + "/"); err != nil || resp.StatusCode != http.StatusProxyAuthRequired {
			t.Errorf("plain HTTP with password %q: %v %v, want 407", pass, resp, err)
		} else {
			resp.Body.Close()
		}
		if _, err := other.Get("https://deb.test:" + securePort + "/"); err == nil || !strings.Contains(err.Error(), "Proxy Authentication Required") {
			t.Errorf("CONNECT with password %q: %v, want 407", pass, err)
		}
	}
	// A request that is not a proxy's.
	req, _ := http.NewRequest("GET", proxy.URL+"/pool/jq.deb", nil)
	req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("build:hunter2")))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("origin-form request: %d", resp.StatusCode)
	}
	client.CloseIdleConnections()
	stop() // an allowed connection is recorded when it ends
	mu.Lock()
	defer mu.Unlock()
	allowed, refused := 0, 0
	for _, r := range recs {
		if r.Allowed {
			allowed++
		} else {
			refused++
		}
	}
	if allowed < 2 || refused != 3 { // the 407s dialed nothing
		t.Errorf("records: %d allowed, %d refused (want ≥ 2 and 3): %+v", allowed, refused, recs)
	}
}

// TestForwardNeverOpensTheDaemon: the daemon's own listeners stay closed to a build through
// CONNECT and absolute-form requests alike, whatever the package sources resolve to.
func TestForwardNeverOpensTheDaemon(t *testing.T) {
	daemon := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "the daemon's API") }))
	defer daemon.Close()
	host, port, _ := net.SplitHostPort(daemon.Listener.Addr().String())
	a, err := New(Config{PackageHosts: []string{"deb.test:" + port}, IndexURLs: []string{"http://" + daemon.Listener.Addr().String() + "/simple/"},
		Resolver: fakeResolver{"deb.test": {host}}, Reserved: ReserveListen(daemon.Listener.Addr().String())})
	if err != nil {
		t.Fatal(err)
	}
	gate := a.ForBuild(nil)
	fwd := NewForward(gate, "pw")
	proxy := httptest.NewServer(fwd)
	defer func() { proxy.Close(); gate.Close(); fwd.Close() }()
	pu, _ := url.Parse(proxy.URL)
	pu.User = url.UserPassword("sandpit", "pw")
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	for _, u := range []string{"http://deb.test:" + port + "/", daemon.URL + "/simple/"} {
		resp, err := client.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "sandpit's own API") {
			t.Errorf("%s: %d %q, want 403 naming the daemon's API", u, resp.StatusCode, body)
		}
	}
	conn, err := net.Dial("tcp", proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", daemon.Listener.Addr(), daemon.Listener.Addr(),
		base64.StdEncoding.EncodeToString([]byte("sandpit:pw")))
	line, _ := bufio.NewReader(conn).ReadString('\n')
	if !strings.Contains(line, "403") {
		t.Errorf("CONNECT to the daemon: %q, want 403", line)
	}
}

// TestForwardTunnel: bytes a client sends right behind its CONNECT reach the destination,
// the answer comes back after the destination stops sending, and Close ends a tunnel whose
// client never stops.
func TestForwardTunnel(t *testing.T) {
	ln := serveTCP(t, func(c net.Conn) { // an echo of the first line, then the end of its sending
		line, _ := bufio.NewReader(c).ReadString('\n')
		io.WriteString(c, "echo "+line)
		c.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, c)
	})
	a, err := New(Config{BuildAllow: []string{ln.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	gate := a.ForBuild(nil)
	fwd := NewForward(gate, "pw")
	proxy := httptest.NewServer(fwd)
	conn, err := net.Dial("tcp", proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The request and the tunnel's first bytes in one write.
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\nhello\n", ln.Addr(), ln.Addr(),
		base64.StdEncoding.EncodeToString([]byte("x:pw")))
	br := bufio.NewReader(conn)
	status, _ := br.ReadString('\n')
	for {
		l, err := br.ReadString('\n')
		if err != nil || l == "\r\n" {
			break
		}
	}
	rest, _ := io.ReadAll(br) // until the destination's end reaches us
	if !strings.Contains(status, "200") || string(rest) != "echo hello\n" {
		t.Errorf("tunnel: %q then %q, want 200 then the echo", status, rest)
	}
	// The client still holds its side open: closing the proxy ends it rather than waiting.
	done := make(chan struct{})
	go func() {
		proxy.Close()
		gate.Close()
		fwd.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited on a tunnel whose client never ended it")
	}
}
