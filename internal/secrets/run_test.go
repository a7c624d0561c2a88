package secrets_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/secrets"
)

type resolver map[string]string

func (r resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	a, ok := r[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return []netip.Addr{netip.MustParseAddr(a)}, nil
}

// TestGateHandsBoundHostsToTheInjector: through a run's egress gate (the daemon's half of the
// proxy, as the control line drives it), a request to a bound host on an address the policy
// allows gets the value from the Injector, verified against a test CA the daemon trusts; a
// second name for the same address, which the secret does not bind, keeps the plain tunnel
// and gets the placeholder; the run's end closes the injector's connection.
func TestGateHandsBoundHostsToTheInjector(t *testing.T) {
	hostCA, err := secrets.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen []string
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Host+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = io.WriteString(w, "you sent "+r.Header.Get("Authorization"))
	}))
	srv.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return hostCA.Leaf(h.ServerName) }}
	srv.StartTLS()
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port

	boxCA, err := secrets.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	inj := secrets.NewInjector(boxCA, hostCA.Pool(), nil)
	run := inj.ForRun([]secrets.Bound{{Secret: secrets.Secret{Name: "TOKEN", Binding: secrets.Binding{Hosts: []string{"api.bound.test"},
		Header: "Authorization", Format: "Bearer {{secret}}"}}, Value: []byte("the-real-value-31")}})
	policy, err := egress.ParsePolicy("network_allow in the configuration", []string{"api.bound.test", "alias.test", "127.0.0.1:" + strconv.Itoa(port)})
	if err != nil {
		t.Fatal(err)
	}
	gate := egress.NewGate([]egress.Policy{policy}, egress.DefaultLimits(), resolver{"api.bound.test": "127.0.0.1", "alias.test": "127.0.0.1"}, nil)
	gate.SetWrapper(run)

	get := func(host string) (string, net.Conn) {
		conn, err := gate.DialEgress(t.Context(), host, port)
		if err != nil {
			t.Fatal(err)
		}
		roots := boxCA.Pool()
		if host != "api.bound.test" {
			roots = hostCA.Pool() // the tunnel: the program sees the host's own certificate
		}
		tc := tls.Client(conn, &tls.Config{ServerName: host, RootCAs: roots})
		req, _ := http.NewRequest("GET", "https://"+host+"/", nil)
		req.Header.Set("Authorization", "Bearer "+secrets.Placeholder("TOKEN"))
		if err := req.Write(tc); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufioReader(tc), req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return string(b), conn
	}
	body, conn := get("api.bound.test")
	if body != "you sent Bearer "+secrets.Placeholder("TOKEN") {
		t.Errorf("the program got %q", body)
	}
	body2, _ := get("alias.test")
	mu.Lock()
	got := strings.Join(seen, "|")
	mu.Unlock()
	if got != "api.bound.test Bearer the-real-value-31|alias.test Bearer "+secrets.Placeholder("TOKEN") {
		t.Errorf("the host saw %q", got)
	}
	if strings.Contains(body+body2, "the-real-value") {
		t.Error("the value came back to the program")
	}
	uses, _ := run.Uses()
	if len(uses) != 1 || !uses[0].Added || uses[0].Host != "api.bound.test" || uses[0].Status != 200 {
		t.Errorf("uses %+v", uses)
	}
	gate.Close()
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Error("the injector's connection outlived the run")
	}
}

func bufioReader(r io.Reader) *bufio.Reader { return bufio.NewReader(r) }
