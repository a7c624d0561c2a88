package secrets

import (
	"bufio"
	"bytes"
	"compress/gzip"
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

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestInjectorKeepsTheValueOutOfEveryChannel replays the fifth red team's leaks (5 December,
// runc and gVisor alike): a bound host that reflects the value in a trailer of an HTTP/1.1
// answer, in its reason phrase or a header's name, that keeps it and serves it back
// compressed or in ranges to a request carrying no value, or whose interim 100 Continue
// shifted the answers of a connection onto the next request (past the identity check). None
// may bring the value back to the program.
func TestInjectorKeepsTheValueOutOfEveryChannel(t *testing.T) {
	var (
		mu     sync.Mutex
		stored string
	)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		switch r.URL.Path {
		case "/trailer":
			w.Header().Set("Trailer", "X-T")
			io.WriteString(w, "body\n")
			w.Header().Set("X-T", auth)
		case "/names":
			c, brw, _ := w.(http.Hijacker).Hijack()
			defer c.Close()
			v := strings.TrimPrefix(auth, "Bearer ")
			fmt.Fprintf(brw, "HTTP/1.1 200 OK-%s\r\nX-%s: 1\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", v, strings.ToLower(v))
			brw.Flush()
		case "/store":
			mu.Lock()
			stored = "Authorization: " + auth + "\n"
			mu.Unlock()
		case "/fetch":
			mu.Lock()
			body := stored
			mu.Unlock()
			if r.Header.Get("Range") != "" {
				w.Header().Set("Content-Range", "bytes 0-4/"+fmt.Sprint(len(body)))
				w.WriteHeader(http.StatusPartialContent)
				io.WriteString(w, body[:5])
				return
			}
			if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
				w.Header().Set("Content-Encoding", "gzip")
				zw := gzip.NewWriter(w)
				io.WriteString(zw, body)
				zw.Close()
				return
			}
			io.WriteString(w, body)
		case "/gz":
			_, _ = io.ReadAll(r.Body)
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			io.WriteString(zw, "Authorization: "+auth)
			zw.Close()
		}
	}))
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	h := newHarness(t, roots)
	b := Bound{Secret: Secret{Name: "API_KEY", Binding: Binding{Hosts: []string{"example.com"}, Header: "Authorization", Format: "Bearer {{secret}}"}}, Value: []byte(testValue)}
	bound := []Bound{b}
	addr := srv.Listener.Addr().String()
	auth := map[string]string{"Authorization": "Bearer " + Placeholder("API_KEY")}

	// One exchange of raw requests on one connection, as a program may write them.
	raw := func(reqs string) string {
		up, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(h.inj.Wrap(t.Context(), up, "example.com", bound, nil), &tls.Config{ServerName: "example.com", RootCAs: h.ca.Pool()})
		defer tc.Close()
		if _, err := io.WriteString(tc, reqs); err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(bufio.NewReader(tc))
		return string(out)
	}
	leaks := func(name, got string) {
		t.Helper()
		if strings.Contains(strings.ToLower(got), strings.ToLower(testValue)) {
			t.Errorf("%s: the value came back: %q", name, got)
		}
	}

	leaks("a trailer", raw("GET /trailer HTTP/1.1\r\nHost: example.com\r\nAuthorization: Bearer "+Placeholder("API_KEY")+"\r\nTE: trailers\r\nConnection: close\r\n\r\n"))
	got := raw("GET /names HTTP/1.1\r\nHost: example.com\r\nAuthorization: Bearer " + Placeholder("API_KEY") + "\r\nConnection: close\r\n\r\n")
	leaks("the reason phrase and a header's name", got)
	if !strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") || !strings.Contains(got, "\r\nok\r\n") {
		t.Errorf("the answer with a value in its reason phrase and a name: %q, want 200 OK and its body", got)
	}
	// Kept, then fetched without a value: compressed, then in a range.
	c := h.client(map[string]string{"example.com": addr}, bound)
	if st, _, _ := do(t, c, "GET", "https://example.com/store", "", auth); st != 200 {
		t.Fatalf("/store: %d", st)
	}
	st, body, _ := do(t, c, "GET", "https://example.com/fetch", "", map[string]string{"Accept-Encoding": "gzip"})
	leaks("a kept value fetched compressed", body)
	if st != 200 || !strings.Contains(body, Placeholder("API_KEY")) {
		t.Errorf("a kept value fetched: %d %q, want it whole, uncompressed and scrubbed", st, body)
	}
	st, body, _ = do(t, c, "GET", "https://example.com/fetch", "", map[string]string{"Range": "bytes=0-4"})
	leaks("a kept value fetched in a range", body)
	if st != 200 {
		t.Errorf("a range from a bound host: %d, want the whole answer (the range dropped)", st)
	}
	// 100 Continue: the answer to the request carrying the value stays its own.
	got = raw("POST /gz HTTP/1.1\r\nHost: example.com\r\nAuthorization: Bearer " + Placeholder("API_KEY") + "\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello" +
		"GET /fetch HTTP/1.1\r\nHost: example.com\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n")
	leaks("an answer shifted by 100 Continue", got)
	if n := strings.Count(got, "502 Bad Gateway"); n != 1 {
		t.Errorf("the compressed answer to the request carrying the value: %q, want one 502 (its own)", got)
	}
}

// A request head that never ends is refused at maxHead with 431, not held whole in the
// daemon's memory (red team, 5 December: 300 MiB of one header line to a bound host took the
// daemon to 1.27 GB; the ledger counted 1586 bytes sent).
func TestInjectorBoundsARequestsHead(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	h := newHarness(t, roots)
	bound := []Bound{{Secret: Secret{Name: "API_KEY", Binding: Binding{Hosts: []string{"example.com"}, Header: "Authorization", Format: "Bearer {{secret}}"}}, Value: []byte(testValue)}}
	up, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(h.inj.Wrap(t.Context(), up, "example.com", bound, nil), &tls.Config{ServerName: "example.com", RootCAs: h.ca.Pool()})
	defer tc.Close()
	sent := make(chan int64, 1)
	go func() {
		sent <- writeEndlessHead(tc, "GET / HTTP/1.1\r\nHost: example.com\r\nX-Big: ")
	}()
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatalf("no answer to a head that never ends: %v", err)
	}
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a head that never ends: %s, want 431", resp.Status)
	}
	tc.Close()
	if n := <-sent; n >= endlessHead {
		t.Fatalf("the proxy read all %d bytes of a head that never ends", n)
	}
}

// A bound host's answer whose head never ends is cut at maxHead, whether the program speaks
// HTTP/1.1 or HTTP/2 to the proxy (red team, 5 December: the HTTP/2 side's reader of an
// HTTP/1.1 host had no bound): the program gets a 502, and the proxy stops reading.
func TestInjectorBoundsAnAnswersHead(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("program speaks HTTP/2 %v", h2), func(t *testing.T) {
			written := make(chan int64, 1)
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				conn, _, err := w.(http.Hijacker).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				defer conn.Close()
				written <- writeEndlessHead(conn, "HTTP/1.1 200 OK\r\nX-Big: ")
			}))
			srv.StartTLS() // HTTP/1.1 only: EnableHTTP2 is false
			defer srv.Close()
			roots := x509.NewCertPool()
			roots.AddCert(srv.Certificate())
			h := newHarness(t, roots)
			bound := []Bound{{Secret: Secret{Name: "API_KEY", Binding: Binding{Hosts: []string{"example.com"}, Header: "Authorization", Format: "Bearer {{secret}}"}}, Value: []byte(testValue)}}
			c := h.newClient(map[string]string{"example.com": srv.Listener.Addr().String()}, bound, h2)
			resp, err := c.Get("https://example.com/")
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway {
				t.Errorf("an answer whose head never ends: %s, want 502", resp.Status)
			}
			c.CloseIdleConnections()
			if n := <-written; n >= endlessHead {
				t.Errorf("the proxy read all %d bytes of an answer's head that never ends", n)
			}
		})
	}
}

// endlessHead is where writeEndlessHead stops: a proxy that read it all held it all.
const endlessHead = 64 << 20

// writeEndlessHead writes start, then one header line's value of "A"s until endlessHead
// bytes in all or a write fails, and returns how many bytes it wrote.
func writeEndlessHead(w io.Writer, start string) int64 {
	n, _ := io.WriteString(w, start)
	total := int64(n)
	chunk := strings.Repeat("A", 64<<10)
	for total < endlessHead {
		n, err := io.WriteString(w, chunk)
		total += int64(n)
		if err != nil {
			break
		}
	}
	return total
}

// TestInjectorBoundsWaitingStreams replays the sixth red team's finding (6 December): an
// HTTP/2 program's streams to an HTTP/1.1 host waited behind one slow answer, each holding up
// to 1 MiB of decoded headers in the daemon's memory (240 streams on each of 4 connections:
// 1.05 GB), none of it sent or counted. The program may now open one stream at a time to such
// a host (a second is refused at once) and each stream's head is bounded; an HTTP/2 host gets
// maxH2Streams.
func TestInjectorBoundsWaitingStreams(t *testing.T) {
	for _, tc := range []struct {
		name    string
		h2      bool
		streams uint32
	}{{"host speaks HTTP/1.1", false, 1}, {"host speaks HTTP/2", true, maxH2Streams}} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/slow" {
					<-release
				}
			}))
			srv.EnableHTTP2 = tc.h2
			srv.StartTLS()
			defer srv.Close()
			defer close(release)
			roots := x509.NewCertPool()
			roots.AddCert(srv.Certificate())
			h := newHarness(t, roots)
			bound := []Bound{{Secret: Secret{Name: "API_KEY", Binding: Binding{Hosts: []string{"example.com"}, Header: "Authorization", Format: "Bearer {{secret}}"}}, Value: []byte(testValue)}}
			up, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			conn := tls.Client(h.inj.Wrap(t.Context(), up, "example.com", bound, nil), &tls.Config{ServerName: "example.com", RootCAs: h.ca.Pool(), NextProtos: []string{"h2"}})
			defer conn.Close()
			if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
				t.Fatal(err)
			}
			fr := http2.NewFramer(conn, conn)
			if err := fr.WriteSettings(); err != nil {
				t.Fatal(err)
			}
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			sf, ok := f.(*http2.SettingsFrame)
			if !ok {
				t.Fatalf("the proxy's first frame: %v, want its settings", f)
			}
			streams, _ := sf.Value(http2.SettingMaxConcurrentStreams)
			head, _ := sf.Value(http2.SettingMaxHeaderListSize)
			if streams != tc.streams || head == 0 || head > 2*maxH2Head {
				t.Fatalf("the proxy allows %d streams and heads of %d bytes; want %d streams and about %d", streams, head, tc.streams, maxH2Head)
			}
			if tc.h2 {
				return
			}
			_ = fr.WriteSettingsAck()
			var hb bytes.Buffer
			enc := hpack.NewEncoder(&hb)
			headers := func(id uint32, path string) {
				t.Helper()
				hb.Reset()
				for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "example.com"}, {":path", path}} {
					_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
				}
				if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
					t.Fatal(err)
				}
			}
			headers(1, "/slow")
			headers(3, "/waiting")
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					t.Fatalf("reading the proxy's frames: %v; want the second stream refused", err)
				}
				if rst, ok := f.(*http2.RSTStreamFrame); ok && rst.StreamID == 3 {
					return // refused, not held
				}
				if f.Header().StreamID == 3 {
					t.Fatalf("the second stream was taken while the first waited: %v", f)
				}
			}
		})
	}
}
