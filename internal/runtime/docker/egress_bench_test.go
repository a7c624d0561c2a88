package docker_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/sandbox/sandboxtest"
	"github.com/sandpit-dev/sandpit/internal/testenv/pyindex"
)

// egressProbe times, each on a new connection with plain HTTP: 10 GETs of URL/data (1 MiB),
// each from the start of the request to its last byte (set-up and transfer), and 10 GETs of
// URL/hello (set-up and one round trip), and prints both lists in ms.
const egressProbe = `
import json, time, urllib.request
url = %q
def get(path):
    with urllib.request.urlopen(url + path, timeout=60) as r:
        return r.read()
get("/hello")
def timed(path, n):
    out = []
    for _ in range(n):
        t = time.perf_counter(); get(path); out.append((time.perf_counter() - t) * 1000)
    return out
print(json.dumps({"get_ms": timed("/data", 10), "setup_ms": timed("/hello", 10)}))
`

// streamProbe is the ceiling of any byte stream over a docker exec: it reads a message (a
// 4-byte big-endian length, then that many bytes) from its stdin and answers one byte on
// stdout, until its stdin ends. It runs in the box with no sandpit code in the path (the
// daemon's end is the test's own exec attach).
const streamProbe = `
import sys
i, o = sys.stdin.buffer, sys.stdout.buffer
while True:
    h = i.read(4)
    if len(h) < 4:
        break
    i.read(int.from_bytes(h, "big"))
    o.write(b"."); o.flush()
`

// BenchmarkEgress compares a 1 MiB plain-HTTP GET through the allowlist proxy with the same
// GET made directly from a box of network "full", from a server on the host (its bridge
// gateway address), and measures the ceiling: 1 MiB down a bare docker exec's stdin and one
// byte back, the same transport the proxy's session uses. The two boxes run side by side and
// the rounds alternate which goes first; the medians of every round's GETs are reported.
// Run it once: go test -run X -bench Egress -benchtime 1x.
func BenchmarkEgress(b *testing.B) {
	const rounds = 5
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

	start := func(network string) *docker.Runtime {
		rt, _ := startRuntime(b, func(cfg *docker.Config) {
			cfg.Slots, cfg.Box.Network = 1, network
			cfg.ForkServer.Preload = nil
		})
		return rt
	}
	proxied, direct := start("allowlist"), start("full")
	p, _ := egress.ParsePolicy("network_allow in the configuration", []string{gw + "/32"})
	gate := egress.NewGate([]egress.Policy{p}, egress.DefaultLimits(), nil, nil)
	defer gate.Close()

	measure := func(rt *docker.Runtime, g *egress.Gate) (gets, setups []float64) {
		spec := sandboxtest.Spec(fmt.Sprintf(egressProbe, url), 120*time.Second)
		if g != nil {
			spec.Egress = g
		}
		res, err := rt.Run(b.Context(), 0, spec, nil)
		if err != nil || res.Outcome != sandbox.OutcomeOK {
			b.Fatalf("%v %s %s", err, res.Outcome, res.Stderr)
		}
		var out struct {
			GetMS   []float64 `json:"get_ms"`
			SetupMS []float64 `json:"setup_ms"`
		}
		if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil {
			b.Fatalf("%q: %v", res.Stdout, err)
		}
		return out.GetMS, out.SetupMS
	}
	for b.Loop() {
		var pGet, pSetup, dGet, dSetup, ceil, rtt []float64
		for round := range rounds {
			order := []bool{true, false}
			if round%2 == 1 {
				order = []bool{false, true}
			}
			for _, viaProxy := range order {
				if viaProxy {
					g, s := measure(proxied, gate)
					pGet, pSetup = append(pGet, g...), append(pSetup, s...)
				} else {
					g, s := measure(direct, nil)
					dGet, dSetup = append(dGet, g...), append(dSetup, s...)
				}
			}
			m, r := execStream(b, proxied.ContainerID(), 10)
			ceil, rtt = append(ceil, m...), append(rtt, r...)
		}
		pm, dm, cm := median(pGet), median(dGet), median(ceil)
		b.ReportMetric(pm, "proxy-get-ms")
		b.ReportMetric(dm, "direct-get-ms")
		b.ReportMetric(pm/dm, "time-ratio")
		b.ReportMetric(1000/pm, "proxy-MiB/s")
		b.ReportMetric(1000/dm, "direct-MiB/s")
		b.ReportMetric(median(pSetup), "proxy-setup-p50-ms")
		b.ReportMetric(median(dSetup), "direct-setup-p50-ms")
		// The ceiling: the bare stream's time for the GET's bytes alone, against the direct
		// GET's whole time. The proxy's time ratio cannot go below it.
		b.ReportMetric(cm/dm, "exec-time-ratio")
		b.ReportMetric(cm, "exec-MiB-ms")
		b.ReportMetric(1000/cm, "exec-MiB/s")
		b.ReportMetric(median(rtt), "exec-rtt-ms")
		b.Logf("per round (proxy, direct, exec ms): %v / %v / %v", roundMedians(pGet, rounds), roundMedians(dGet, rounds), roundMedians(ceil, rounds))
	}
}

// execStream execs streamProbe in container id (no sandpit code on either end) and times n
// exchanges of 1 MiB down its stdin and one byte back, and n of one byte each way (the
// stream's round trip), in ms each.
func execStream(b *testing.B, id string, n int) (mib, rtt []float64) {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
	defer cancel()
	ex, err := api.ExecCreate(ctx, id, client.ExecCreateOptions{
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Cmd: []string{"python3", "-c", streamProbe},
	})
	if err != nil {
		b.Fatal(err)
	}
	att, err := api.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer att.Close()
	pr, pw := io.Pipe()
	go func() { _, err := stdcopy.StdCopy(pw, io.Discard, att.Reader); pw.CloseWithError(err) }()
	one := make([]byte, 1)
	exchange := func(msg []byte) float64 {
		t := time.Now()
		if _, err := att.Conn.Write(binary.BigEndian.AppendUint32(nil, uint32(len(msg)))); err != nil {
			b.Fatal(err)
		}
		if _, err := att.Conn.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(pr, one); err != nil {
			b.Fatal(err)
		}
		return float64(time.Since(t).Microseconds()) / 1000
	}
	for range n {
		mib = append(mib, exchange(mebibyte))
		rtt = append(rtt, exchange(one))
	}
	_ = att.CloseWrite()
	return mib, rtt
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// roundMedians splits xs into rounds equal parts and returns the median of each, rounded to
// 0.1.
func roundMedians(xs []float64, rounds int) []float64 {
	var out []float64
	per := len(xs) / rounds
	for i := range rounds {
		out = append(out, float64(int(median(xs[i*per:(i+1)*per])*10))/10)
	}
	return out
}
