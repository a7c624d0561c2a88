package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/secrets"
)

// The names of the secrets' measurements (Latency.Name).
const (
	// LatencySecretGet is an HTTPS GET of 1 KiB that a run's code makes, with a secret's
	// placeholder in its Authorization header, from a host the secret is bound to: the egress
	// proxy ends the box's TLS, verifies the host itself and adds the value. Each GET is a
	// new connection, as requests.get makes one.
	LatencySecretGet = "secret_get_1kib_bound"
	// LatencySecretGetUnbound is the same GET from a host no secret is bound to: the proxy's
	// tunnel, the placeholder left as it is.
	LatencySecretGetUnbound = "secret_get_1kib_unbound"
)

// MaxSecretOverTunnel is the secrets' goal (issue 47): a GET from a bound host at most this
// many times the same GET through the tunnel (p50), the cost of a second TLS handshake.
const MaxSecretOverTunnel = 2

// secretName is the secret the bench sets, shared, bound to its first host.
const secretName = "BENCH_TOKEN"

// secretHosts are two HTTPS servers of the bench's own on two of the machine's addresses
// (the daemon's egress proxy dials them as it dials any allowed host), each answering 1 KiB,
// their certificates signed by a CA of the bench's. The secret is bound to the first; the
// first answers 403 to a request without its value.
type secretHosts struct {
	bound, unbound string // host:port
	value          string
	ca             *secrets.CA
	caFile         string // the CA's certificate, and those of the configuration's own trust file
	srv            *http.Server
	missing        atomic.Int64 // requests to the bound host without the value
}

// startSecretHosts starts the two hosts, or says why it cannot (the machine has fewer than
// two non-loopback IPv4 addresses). dir holds the CA file.
func startSecretHosts(cfg config.Config, dir string) (*secretHosts, error) {
	addrs, err := hostAddresses()
	if err != nil {
		return nil, err
	}
	if len(addrs) < 2 {
		return nil, fmt.Errorf("the machine has %d non-loopback IPv4 address(es); the bound and unbound hosts need two", len(addrs))
	}
	ca, err := secrets.NewCA()
	if err != nil {
		return nil, err
	}
	h := &secretHosts{ca: ca, value: "bench-" + fmt.Sprint(time.Now().UnixNano())}
	trust := ca.CertPEM()
	if cfg.SecretsTrustCAFile != "" {
		own, err := os.ReadFile(cfg.SecretsTrustCAFile)
		if err != nil {
			return nil, fmt.Errorf("reading secrets_trust_ca_file: %w", err)
		}
		trust = append(append(own, '\n'), trust...)
	}
	h.caFile = filepath.Join(dir, "secret-hosts-ca.pem")
	if err := os.WriteFile(h.caFile, trust, 0o600); err != nil {
		return nil, err
	}
	body := bytes.Repeat([]byte("s"), 1024)
	var lns []net.Listener
	for _, a := range addrs[:2] {
		ln, err := net.Listen("tcp4", net.JoinHostPort(a, "0"))
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, fmt.Errorf("listening on %s for the secrets' hosts: %w", a, err)
		}
		lns = append(lns, ln)
	}
	h.bound, h.unbound = lns[0].Addr().String(), lns[1].Addr().String()
	h.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
			if local != nil && local.String() == h.bound && r.Header.Get("Authorization") != "Bearer "+h.value {
				h.missing.Add(1)
				http.Error(w, "no secret", http.StatusForbidden)
				return
			}
			_, _ = w.Write(body)
		}),
		TLSConfig: &tls.Config{GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			host, _, err := net.SplitHostPort(hello.Conn.LocalAddr().String())
			if err != nil {
				return nil, err
			}
			return ca.Leaf(host)
		}},
		ReadHeaderTimeout: 10 * time.Second,
	}
	for _, ln := range lns {
		go func() { _ = h.srv.ServeTLS(ln, "", "") }()
	}
	return h, nil
}

// hostAddresses are the machine's IPv4 addresses other than loopback and link-local ones.
func hostAddresses() ([]string, error) {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing the machine's addresses: %w", err)
	}
	var out []string
	for _, a := range ifaddrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip := n.IP.To4(); ip != nil && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
				out = append(out, ip.String())
			}
		}
	}
	return out, nil
}

// env is the main daemon's environment for the hosts: both allowed beside the configuration's
// network_allow, and their CA trusted by the proxy.
func (h *secretHosts) env(cfg config.Config) []string {
	allow := append(slices.Clone(cfg.NetworkAllow), h.bound, h.unbound)
	return []string{"SANDPIT_NETWORK_ALLOW=" + strings.Join(allow, ","), "SANDPIT_SECRETS_TRUST_CA_FILE=" + h.caFile}
}

func (h *secretHosts) close() { _ = h.srv.Close() }

// secretGets is the code that times the GETs in the box: n+3 of each, alternating, the first
// 3 of each untimed, every one on a new connection; it fails on a body that is not 1 KiB,
// naming the host.
const secretGets = `import os, ssl, time, urllib.request
def _opener(ctx):
    return urllib.request.build_opener(urllib.request.HTTPSHandler(context=ctx))
_hosts = {"bound": _opener(ssl.create_default_context()),
          "unbound": _opener(ssl.create_default_context(cadata=INPUT["ca"]))}
_auth = {"Authorization": "Bearer " + os.environ[INPUT["secret"]]}
OUTPUT = {"bound": [], "unbound": []}
for _i in range(INPUT["n"] + 3):
    for _name, _o in _hosts.items():
        _req = urllib.request.Request("https://" + INPUT[_name] + "/1k", headers=_auth)
        _s = time.perf_counter()
        try:
            with _o.open(_req, timeout=30) as _r:
                _n, _status, _headers = len(_r.read()), _r.status, dict(_r.headers)
        except Exception as _e:
            raise SystemExit(f"the {_name} host {INPUT[_name]}: {_e!r}")
        _d = time.perf_counter() - _s
        if _n != 1024:
            raise SystemExit(f"the {_name} host {INPUT[_name]}: HTTP {_status}, {_n} bytes, headers {_headers}")
        if _i >= 3:
            OUTPUT[_name].append(_d)`

// secretLatencies times an HTTPS GET of 1 KiB from a host a secret is bound to and from one
// none is, each b.opts.Runs times, in one run. Without the hosts (see startSecretHosts) it
// leaves them out, with a warning.
func (b *bench) secretLatencies(ctx context.Context, in *instance, rep *Report) error {
	h := b.secretHosts
	if h == nil {
		return nil
	}
	api := in.rest.api
	bound, _, _ := net.SplitHostPort(h.bound)
	cctx, cancel := context.WithTimeout(ctx, requestTimeout)
	_, err := api.SetSecret(cctx, secretName, apitype.SecretSet{Value: h.value, Hosts: []string{bound}})
	cancel()
	if err != nil {
		return fmt.Errorf("setting the bench's secret: %w", err)
	}
	input, _ := json.Marshal(map[string]any{"ca": string(h.ca.CertPEM()), "secret": secretName, "n": b.opts.Runs,
		"bound": h.bound, "unbound": h.unbound})
	ms := int64(runTimeoutMS)
	cctx, cancel = context.WithTimeout(ctx, requestTimeout)
	res, err := api.Execute(cctx, apitype.ExecuteRequest{Code: secretGets, Input: input, TimeoutMS: &ms, Secrets: []string{secretName}}, nil)
	cancel()
	if err == nil && res.Outcome != apitype.OutcomeOK {
		err = fmt.Errorf("outcome %s: %s %s", res.Outcome, res.Reason, res.Stderr)
	}
	if err == nil && h.missing.Load() > 0 {
		err = fmt.Errorf("%d GET(s) reached the bound host without the secret's value", h.missing.Load())
	}
	if err != nil {
		return fmt.Errorf("timing GETs from the secrets' hosts: %w", err)
	}
	var secs map[string][]float64
	if err := json.Unmarshal(res.Output, &secs); err != nil {
		return fmt.Errorf("the secrets' timings %s: %w", res.Output, err)
	}
	durations := func(s []float64) []time.Duration {
		out := make([]time.Duration, len(s))
		for i, v := range s {
			out[i] = time.Duration(v * float64(time.Second))
		}
		return out
	}
	for _, l := range []Latency{
		newLatency(LatencySecretGet, "", "secrets: HTTPS GET 1 KiB from a bound host (the proxy adds the value)", durations(secs["bound"]), nil),
		newLatency(LatencySecretGetUnbound, "", "secrets: the same GET from an unbound host (the proxy's tunnel)", durations(secs["unbound"]), nil),
	} {
		b.say("%s: %d runs, p50 %.2f ms", l.What, l.Runs, l.P50MS)
		rep.Latency = append(rep.Latency, l)
	}
	return nil
}

// secretTargets is the secrets' goal, when the report has their measurements.
func secretTargets(p50 func(string) float64) []Target {
	bound, unbound := p50(LatencySecretGet), p50(LatencySecretGetUnbound)
	if bound <= 0 || unbound <= 0 {
		return nil
	}
	v := bound / unbound
	return []Target{{Name: "secret_get_over_tunnel", What: "secrets: HTTPS GET 1 KiB from a bound host / from an unbound one, p50", Unit: "x", Op: "<=",
		Goal: MaxSecretOverTunnel, Value: round(v, 2), Status: evaluate(v, "<=", MaxSecretOverTunnel)}}
}
