package secrets

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestInjectorLingersAfterItsAnswer: once the Injector has written its last answer (the host
// closes: Connection: close), the program may still be writing, and its write must not fail:
// on the egress stream a failed write aborted the stream, and the abort dropped the answer's
// bytes not yet delivered to the box (a urllib GET of a bound host got its headers and no
// body; bench, 5 December). The program reads the whole answer, then the end, and its write
// after the end is dropped, not refused.
func TestInjectorLingersAfterItsAnswer(t *testing.T) {
	body := bytes.Repeat([]byte("s"), 1024)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	h := newHarness(t, roots)
	up, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := Bound{Secret: Secret{Name: "TOKEN", Binding: Binding{Hosts: []string{"api.example.com"}, Header: "Authorization", Format: "Bearer {{secret}}"}}, Value: []byte("v")}
	prog := h.inj.Wrap(t.Context(), up, "api.example.com", []Bound{b}, func(Use) {})
	tc := tls.Client(prog, &tls.Config{ServerName: "api.example.com", RootCAs: h.ca.Pool()})
	req, _ := http.NewRequest("GET", "https://api.example.com/1k", nil)
	req.Header.Set("Authorization", "Bearer "+Placeholder("TOKEN"))
	if err := req.Write(tc); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("the answer: %d bytes, %v; want 1024", len(got), err)
	}
	if _, err := prog.Write([]byte("GET /next HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatalf("a write after the answer: %v, want it dropped, not refused", err)
	}
	prog.Close()
}
