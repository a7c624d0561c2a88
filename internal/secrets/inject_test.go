package secrets

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

const testValue = "s3cr3t-VALUE-9f8e"

// origin is a test server that records what each request carried, and echoes it back in its
// body and a header (a host that reflects the request: the value must not come back).
type origin struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newOrigin(t *testing.T, tlsOn bool) *origin {
	o := &origin{}
	if tlsOn {
		o.Server = httptest.NewTLSServer(o.handler())
	} else {
		o.Server = httptest.NewServer(o.handler())
	}
	t.Cleanup(o.Close)
	return o
}

// newOriginH2 is an origin over TLS that speaks HTTP/2 (and HTTP/1.1 to a client that asks).
func newOriginH2(t *testing.T) *origin {
	o := &origin{}
	o.Server = httptest.NewUnstartedServer(o.handler())
	o.EnableHTTP2 = true
	o.StartTLS()
	t.Cleanup(o.Close)
	return o
}

func (o *origin) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s host=%s\n", r.Method, r.URL.RequestURI(), r.Host)
		for k, v := range r.Header {
			fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(v, ","))
		}
		b.Write(body)
		o.mu.Lock()
		o.seen = append(o.seen, b.String())
		o.mu.Unlock()
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "https://other.example/landing", http.StatusFound)
			return
		}
		w.Header().Set("X-Echo-Auth", r.Header.Get("Authorization"))
		w.Header().Set("Trailer", "X-Echo-Auth-Trailer")
		// The echo in pieces, so the value may be split across the writes.
		s := fmt.Sprintf("proto=%s\n%s", r.Proto, b.String())
		for i := 0; i < len(s); i += 5 {
			_, _ = io.WriteString(w, s[i:min(len(s), i+5)])
			w.(http.Flusher).Flush()
		}
		w.Header().Set("X-Echo-Auth-Trailer", r.Header.Get("Authorization"))
	})
}

func (o *origin) all() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.seen, "\n---\n")
}

type harness struct {
	inj  *Injector
	ca   *CA
	mu   sync.Mutex
	uses []Use
}

// client returns an HTTP client whose connections to each host go to the origin addrs names,
// through the Injector with bound, as the egress proxy's streams do; the program trusts the
// CA for bound hosts and skips verification for others (its own choice, not the point here).
func (h *harness) client(addrs map[string]string, bound []Bound) *http.Client {
	return h.newClient(addrs, bound, false)
}

// clientH2 is client speaking HTTP/2 over TLS.
func (h *harness) clientH2(addrs map[string]string, bound []Bound) *http.Client {
	return h.newClient(addrs, bound, true)
}

func (h *harness) newClient(addrs map[string]string, bound []Bound, h2 bool) *http.Client {
	dial := func(ctx context.Context, network, addr string) (net.Conn, string, error) {
		host, _, _ := net.SplitHostPort(addr)
		up, err := net.Dial("tcp", addrs[host])
		if err != nil {
			return nil, "", err
		}
		return h.inj.Wrap(ctx, up, host, bound, func(u Use) { h.mu.Lock(); h.uses = append(h.uses, u); h.mu.Unlock() }), host, nil
	}
	return &http.Client{Transport: &http.Transport{
		ForceAttemptHTTP2: h2,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, _, err := dial(ctx, network, addr)
			return c, err
		},
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, host, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			cfg := &tls.Config{ServerName: host, RootCAs: h.ca.Pool()}
			if h2 {
				cfg.NextProtos = []string{"h2"}
			}
			if !Binds(bound, host) {
				cfg.InsecureSkipVerify = true
			}
			tc := tls.Client(c, cfg)
			return tc, tc.HandshakeContext(ctx)
		},
	}}
}

func (h *harness) recorded() []Use {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Use(nil), h.uses...)
}

func newHarness(t *testing.T, roots *x509.CertPool) *harness {
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	return &harness{inj: NewInjector(ca, roots, nil), ca: ca}
}

func do(t *testing.T, c *http.Client, method, url, body string, header map[string]string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if body == "" {
		req.Body = nil
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestInjectorAddsTheValueOnlyWhereBound: against real TLS servers, the value reaches the
// bound host in the bound header, and every hostile use (the URL, another header,
// Proxy-Authorization, the body split across writes, another Host, another host, a redirect
// to another host, plain HTTP to the bound name) sends the placeholder instead; no answer to
// the program holds the value, even when the host echoes it, and each use is recorded.
func TestInjectorAddsTheValueOnlyWhereBound(t *testing.T) {
	bound, other := newOrigin(t, true), newOrigin(t, true)
	clear := newOrigin(t, false)
	roots := x509.NewCertPool()
	roots.AddCert(bound.Certificate())
	h := newHarness(t, roots)
	b := Bound{Secret: Secret{Name: "API_KEY", Binding: Binding{Hosts: []string{"example.com"}, Header: "Authorization", Format: "Bearer {{secret}}"}}, Value: []byte(testValue)}
	c := h.client(map[string]string{"example.com": bound.Listener.Addr().String(), "other.example": other.Listener.Addr().String(),
		"plain.example.com": clear.Listener.Addr().String()}, []Bound{b})
	ph := Placeholder("API_KEY")
	var answers strings.Builder

	code, body, hdr := do(t, c, "GET", "https://example.com/v1/models", "", map[string]string{"Authorization": "Bearer " + ph})
	answers.WriteString(body + fmt.Sprint(hdr))
	if code != 200 || !strings.Contains(bound.all(), "Authorization: Bearer "+testValue) {
		t.Fatalf("the bound request: %d; the host saw %s", code, bound.all())
	}
	if !strings.Contains(body, "Bearer "+ph) || hdr.Get("X-Echo-Auth") != "Bearer "+ph {
		t.Errorf("the echo was not scrubbed to the placeholder: %q %v", body, hdr)
	}

	hostile := []struct {
		name, method, url, body string
		header                  map[string]string
	}{
		{"query string", "GET", "https://example.com/q?key=" + ph, "", nil},
		{"another header", "GET", "https://example.com/h", "", map[string]string{"X-Api-Key": ph}},
		{"Proxy-Authorization", "GET", "https://example.com/p", "", map[string]string{"Proxy-Authorization": "Bearer " + ph}},
		{"body", "POST", "https://example.com/b", strings.Repeat("x", 70000) + ph + "tail", nil},
		{"not the format", "GET", "https://example.com/f", "", map[string]string{"Authorization": "Token " + ph}},
		{"another Host", "GET", "https://example.com/o", "", map[string]string{"Authorization": "Bearer " + ph, "Host": "other.example"}},
		{"another host", "GET", "https://other.example/x", "", map[string]string{"Authorization": "Bearer " + ph}},
		{"plain HTTP to a bound name", "GET", "http://plain.example.com/x", "", map[string]string{"Authorization": "Bearer " + ph}},
	}
	b.Hosts = append(b.Hosts, "plain.example.com")
	c = h.client(map[string]string{"example.com": bound.Listener.Addr().String(), "other.example": other.Listener.Addr().String(),
		"plain.example.com": clear.Listener.Addr().String()}, []Bound{b})
	for _, tc := range hostile {
		req, _ := http.NewRequest(tc.method, tc.url, strings.NewReader(tc.body))
		if tc.body == "" {
			req.Body = nil
		}
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		if hv, ok := tc.header["Host"]; ok {
			req.Host = hv
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answers.Write(got)
		if !strings.Contains(string(got), ph) {
			t.Errorf("%s: the host did not get the placeholder: %d %q", tc.name, resp.StatusCode, got)
		}
	}
	// A redirect to another host: the client follows it with the header, to an unbound host.
	code, body, _ = do(t, c, "GET", "https://example.com/redirect", "", map[string]string{"Authorization": "Bearer " + ph})
	answers.WriteString(body)
	if code != 200 || !strings.Contains(other.all(), "/landing") {
		t.Errorf("the redirect: %d %q", code, body)
	}

	for name, s := range map[string]string{"the other host": other.all(), "the plain-HTTP host": clear.all(), "the program": answers.String()} {
		if strings.Contains(s, testValue) {
			t.Errorf("%s got the value: %s", name, s)
		}
	}
	if n := strings.Count(bound.all(), testValue); n != 2 {
		t.Errorf("the bound host got the value %d times, want 2 (the bound request and the redirect's first leg)", n)
	}
	var added, refused int
	whys := map[string]bool{}
	for _, u := range h.recorded() {
		if u.Added {
			added++
			if u.Status == 0 {
				t.Errorf("an added use without the host's status: %+v", u)
			}
		} else {
			refused++
			whys[u.Why] = true
		}
	}
	if added != 2 || refused < 6 {
		t.Errorf("recorded %d added, %d not: %+v", added, refused, h.recorded())
	}
	for _, want := range []string{"URL", "header X-Api-Key", "Proxy-Authorization", "body", "plain HTTP", "Host"} {
		found := false
		for w := range whys {
			found = found || strings.Contains(w, want)
		}
		if !found {
			t.Errorf("no use recorded mentioning %q: %v", want, whys)
		}
	}
}

// TestInjectorVerifiesTheHost: a host whose certificate the daemon's trust store does not
// verify gets no request (the value is not sent), and the program gets a 502 saying why.
func TestInjectorVerifiesTheHost(t *testing.T) {
	o := newOrigin(t, true)
	h := newHarness(t, x509.NewCertPool())
	b := Bound{Secret: Secret{Name: "K", Binding: Binding{Hosts: []string{"example.com"}, Header: "Authorization", Format: "Bearer {{secret}}"}}, Value: []byte(testValue)}
	for _, c := range []*http.Client{h.client(map[string]string{"example.com": o.Listener.Addr().String()}, []Bound{b}),
		h.clientH2(map[string]string{"example.com": o.Listener.Addr().String()}, []Bound{b})} {
		code, body, _ := do(t, c, "GET", "https://example.com/", "", map[string]string{"Authorization": "Bearer " + Placeholder("K")})
		if code != 502 || !strings.Contains(body, "certificate") || strings.Contains(body, testValue) || o.all() != "" {
			t.Fatalf("%d %q; the host saw %q", code, body, o.all())
		}
	}
}

// TestInjectorBasicAuth: a basic-authentication binding replaces the password only.
func TestInjectorBasicAuth(t *testing.T) {
	o := newOrigin(t, true)
	roots := x509.NewCertPool()
	roots.AddCert(o.Certificate())
	h := newHarness(t, roots)
	b := Bound{Secret: Secret{Name: "PW", Binding: Binding{Hosts: []string{"*.example.com"}, Header: "Authorization", BasicUser: "bot"}}, Value: []byte(testValue)}
	c := h.client(map[string]string{"api.example.com": o.Listener.Addr().String()}, []Bound{b})
	req, _ := http.NewRequest("GET", "https://api.example.com/", nil)
	req.SetBasicAuth("bot", Placeholder("PW"))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := "Basic " + basicOf("bot", testValue)
	if !strings.Contains(o.all(), "Authorization: "+want) || strings.Contains(string(got), basicOf("bot", testValue)) {
		t.Fatalf("the host saw %q; the program got %q", o.all(), got)
	}
}

func basicOf(user, pw string) string {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, pw)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

// TestScrubberSplitsAnywhere: a value split at every offset across two reads is replaced.
func TestScrubberSplitsAnywhere(t *testing.T) {
	text := "a" + testValue + "b" + testValue
	for cut := 0; cut <= len(text); cut++ {
		s := newScrubber(io.NopCloser(&twoReads{parts: []string{text[:cut], text[cut:]}}), []string{testValue, "PH"})
		got, _ := io.ReadAll(s)
		if string(got) != "aPHbPH" {
			t.Fatalf("cut %d: %q", cut, got)
		}
	}
}

type twoReads struct{ parts []string }

func (r *twoReads) Read(p []byte) (int, error) {
	for len(r.parts) > 0 && r.parts[0] == "" {
		r.parts = r.parts[1:]
	}
	if len(r.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.parts[0])
	r.parts[0] = r.parts[0][n:]
	return n, nil
}

// TestInjectorRefusesACompressedAnswer: a host that compresses its answer although asked not to
// could hide an echo of the value from the scrubber: the program gets a 502 instead.
func TestInjectorRefusesACompressedAnswer(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = io.WriteString(w, "not really gzip: "+r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	h := newHarness(t, roots)
	b := Bound{Secret: Secret{Name: "K", Binding: Binding{Hosts: []string{"example.com"}, Header: "Authorization", Format: "Bearer {{secret}}"}}, Value: []byte(testValue)}
	c := h.client(map[string]string{"example.com": srv.Listener.Addr().String()}, []Bound{b})
	c.Transport.(*http.Transport).DisableCompression = true
	code, body, _ := do(t, c, "GET", "https://example.com/", "", map[string]string{"Authorization": "Bearer " + Placeholder("K")})
	if code != 502 || !strings.Contains(body, "Content-Encoding gzip") || strings.Contains(body, testValue) {
		t.Fatalf("%d %q", code, body)
	}
}

// TestInjectorDropsRangeWithTheValue: a request that carries the value asks for the whole
// answer: an echo in ranges (bytes=0-14, then bytes=15-) came back in pieces the scrubber
// cannot match (a red team's replay).
func TestInjectorDropsRangeWithTheValue(t *testing.T) {
	bound := newOrigin(t, true)
	roots := x509.NewCertPool()
	roots.AddCert(bound.Certificate())
	h := newHarness(t, roots)
	b := Bound{Secret: Secret{Name: "API_KEY", Binding: Binding{Hosts: []string{"example.com"}, Header: "Authorization", Format: "Bearer {{secret}}"}}, Value: []byte(testValue)}
	c := h.client(map[string]string{"example.com": bound.Listener.Addr().String()}, []Bound{b})
	ph := Placeholder("API_KEY")
	code, _, _ := do(t, c, "GET", "https://example.com/r", "", map[string]string{"Authorization": "Bearer " + ph, "Range": "bytes=0-14", "If-Range": "x"})
	if seen := bound.all(); code != 200 || !strings.Contains(seen, testValue) || strings.Contains(seen, "bytes=0-14") || strings.Contains(seen, "If-Range") {
		t.Fatalf("a ranged request with the value: %d; the host saw %s", code, seen)
	}
}

// TestInjectorHTTP2: a program speaking HTTP/2 gets the value added and scrubbed as over
// HTTP/1.1, with its streams at once, whether the host speaks HTTP/2 (the streams go on over
// one connection) or only HTTP/1.1 (one request at a time); the trailers come back scrubbed,
// and a placeholder in the URL stays the placeholder.
func TestInjectorHTTP2(t *testing.T) {
	for _, tc := range []struct {
		name, proto string
		origin      func(*testing.T) *origin
	}{
		{"host speaks HTTP/2", "HTTP/2.0", newOriginH2},
		{"host speaks HTTP/1.1", "HTTP/1.1", func(t *testing.T) *origin { return newOrigin(t, true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.origin(t)
			roots := x509.NewCertPool()
			roots.AddCert(o.Certificate())
			h := newHarness(t, roots)
			b := Bound{Secret: Secret{Name: "API_KEY", Binding: Binding{Hosts: []string{"example.com"}, Header: "Authorization", Format: "Bearer {{secret}}"}}, Value: []byte(testValue)}
			c := h.clientH2(map[string]string{"example.com": o.Listener.Addr().String()}, []Bound{b})
			ph := Placeholder("API_KEY")
			var wg sync.WaitGroup
			for i := range 4 {
				wg.Go(func() {
					req, _ := http.NewRequest("GET", fmt.Sprintf("https://example.com/stream/%d", i), nil)
					req.Header.Set("Authorization", "Bearer "+ph)
					resp, err := c.Do(req)
					if err != nil {
						t.Errorf("stream %d: %v", i, err)
						return
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
						t.Errorf("stream %d: %s %d, want HTTP/2 200", i, resp.Proto, resp.StatusCode)
					}
					if !strings.Contains(string(body), "proto="+tc.proto) || !strings.Contains(string(body), "Bearer "+ph) {
						t.Errorf("stream %d: the host's echo: %q", i, body)
					}
					if resp.Header.Get("X-Echo-Auth") != "Bearer "+ph || resp.Trailer.Get("X-Echo-Auth-Trailer") != "Bearer "+ph {
						t.Errorf("stream %d: header %q, trailer %q: want the placeholder", i, resp.Header.Get("X-Echo-Auth"), resp.Trailer.Get("X-Echo-Auth-Trailer"))
					}
					if strings.Contains(string(body)+fmt.Sprint(resp.Header, resp.Trailer), testValue) {
						t.Errorf("stream %d: the value came back to the program", i)
					}
				})
			}
			wg.Wait()
			if n := strings.Count(o.all(), "Authorization: Bearer "+testValue); n != 4 {
				t.Errorf("the host got the value %d times, want 4: %s", n, o.all())
			}
			code, body, _ := do(t, c, "GET", "https://example.com/q?key="+ph, "", nil)
			if code != 200 || !strings.Contains(body, ph) || strings.Contains(o.all(), "key="+testValue) {
				t.Errorf("a placeholder in the URL: %d %q", code, body)
			}
			added := 0
			for _, u := range h.recorded() {
				if u.Added {
					added++
				}
			}
			if added != 4 {
				t.Errorf("recorded %d uses added, want 4: %+v", added, h.recorded())
			}
		})
	}
}

// TestScrubberPrefersTheLongerValue: where one bound value starts another, an echo of the
// longer is replaced whole, wherever the reads split it (the red team of 6 December, from the
// code: the shorter's placeholder took its start and left its tail readable).
func TestScrubberPrefersTheLongerValue(t *testing.T) {
	short := Bound{Secret: Secret{Name: "SHORT"}, Value: []byte(testValue)}
	long := Bound{Secret: Secret{Name: "LONG"}, Value: []byte(testValue + "-and-more")}
	text := "a " + testValue + "-and-more b " + testValue + " c"
	want := "a " + Placeholder("LONG") + " b " + Placeholder("SHORT") + " c"
	for cut := 0; cut <= len(text); cut++ {
		resp := &http.Response{StatusCode: 200, Header: http.Header{"X-Echo": {text}}, ContentLength: -1,
			Body: io.NopCloser(&twoReads{parts: []string{text[:cut], text[cut:]}})}
		scrubResponse(resp, []Bound{short, long})
		got, _ := io.ReadAll(resp.Body)
		if string(got) != want || resp.Header.Get("X-Echo") != want {
			t.Fatalf("cut %d: body %q, header %q; want %q", cut, got, resp.Header.Get("X-Echo"), want)
		}
	}
}
