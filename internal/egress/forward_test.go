package egress

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

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
	a, err := New(Config{PackageHosts: []string{"deb.test"}, BuildAllow: []string{"files.test"}, Resolver: res})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var recs []sandbox.EgressConnection
	gate := a.ForBuild(func(r sandbox.EgressConnection) { mu.Lock(); recs = append(recs, r); mu.Unlock() })
	fwd := NewForward(gate)
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
	// A request that is not a proxy's.
	resp, err := http.Get(proxy.URL + "/pool/jq.deb")
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
	if allowed < 2 || refused != 3 {
		t.Errorf("records: %d allowed, %d refused (want ≥ 2 and 3): %+v", allowed, refused, recs)
	}
}
