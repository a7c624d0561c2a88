package docker_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/sandbox/sandboxtest"
	"github.com/sandpit-dev/sandpit/internal/testenv/pyindex"
)

// egressProbe fetches URL/data (1 MiB) and URL/hello 20 times each with plain HTTP, a new
// connection each time, and prints the MiB/s of the downloads and the median time of the
// small requests (connection set-up and one round trip), in ms.
const egressProbe = `
import json, statistics, time, urllib.request
url = %q
def get(path):
    with urllib.request.urlopen(url + path, timeout=60) as r:
        return r.read()
get("/hello")
t0 = time.perf_counter(); n = 0
for _ in range(20):
    n += len(get("/data"))
mibs = n / (1 << 20) / (time.perf_counter() - t0)
lat = []
for _ in range(20):
    t = time.perf_counter(); get("/hello"); lat.append((time.perf_counter() - t) * 1000)
print(json.dumps({"mib_s": mibs, "p50_ms": statistics.median(lat)}))
`

// BenchmarkEgress compares a 1 MiB plain-HTTP GET through the allowlist proxy with the same
// GET made directly from a box of network "full", from a server on the host (its bridge
// gateway address). Run it once: go test -run X -bench Egress -benchtime 1x.
func BenchmarkEgress(b *testing.B) {
	gw := pyindex.New(b).Host() // the bridge gateway's address, where the boxes of "full" reach the host
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/data" {
			w.Header().Set("Content-Length", fmt.Sprint(len(mebibyte)))
			_, _ = w.Write(mebibyte)
			return
		}
		fmt.Fprint(w, "hello")
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := fmt.Sprintf("http://%s:%d", gw, ln.Addr().(*net.TCPAddr).Port)

	measure := func(network string) (mibs, p50 float64) {
		rt, _ := startRuntime(b, func(cfg *docker.Config) {
			cfg.Slots, cfg.Box.Network = 1, network
			cfg.ForkServer.Preload = nil
		})
		defer rt.Close()
		spec := sandboxtest.Spec(fmt.Sprintf(egressProbe, url), 120*time.Second)
		if network == "allowlist" {
			p, _ := egress.ParsePolicy("network_allow in the configuration", []string{gw + "/32"})
			gate := egress.NewGate([]egress.Policy{p}, egress.DefaultLimits(), nil, nil)
			defer gate.Close()
			spec.Egress = gate
		}
		res, err := rt.Run(b.Context(), 0, spec, nil)
		if err != nil || res.Outcome != "ok" {
			b.Fatalf("%s: %v %s %s", network, err, res.Outcome, res.Stderr)
		}
		var out struct {
			MiBs  float64 `json:"mib_s"`
			P50MS float64 `json:"p50_ms"`
		}
		if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil {
			b.Fatalf("%s: %q: %v", network, res.Stdout, err)
		}
		return out.MiBs, out.P50MS
	}
	for b.Loop() {
		proxy, proxyP50 := measure("allowlist")
		direct, directP50 := measure("full")
		b.ReportMetric(proxy, "proxy-MiB/s")
		b.ReportMetric(direct, "direct-MiB/s")
		b.ReportMetric(direct/proxy, "time-ratio")
		b.ReportMetric(proxyP50, "proxy-p50-ms")
		b.ReportMetric(directP50, "direct-p50-ms")
	}
}
