package docker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/sandbox/sandboxtest"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/internal/testenv/pyindex"
)

// testResolver answers names from a map, as a DNS server under the test's control would
// (rebinding names to loopback and metadata addresses among them).
type testResolver map[string]string

func (r testResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	a, ok := r[host]
	if !ok {
		return nil, fmt.Errorf("no such host %s", host)
	}
	return []netip.Addr{netip.MustParseAddr(a)}, nil
}

// mebibyte is what the test server's /data answers.
var mebibyte = bytes.Repeat([]byte("0123456789abcdef"), 1<<16)

// hostServer serves /data (1 MiB) and /hello on the host's loopback, where only the daemon
// (this process) can reach it: the box has no interface but its own loopback.
func hostServer(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow": // answers only if the client is still there after a while
			select {
			case <-time.After(300 * time.Millisecond):
				fmt.Fprint(w, "slow ok")
			case <-r.Context().Done():
				panic(http.ErrAbortHandler)
			}
		case "/data":
			w.Header().Set("Content-Length", fmt.Sprint(len(mebibyte)))
			_, _ = w.Write(mebibyte)
		default:
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "hello from the host, %s %s %d", r.Method, r.URL.Path, n)
		}
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

func gateFor(t *testing.T, allow []string, res testResolver, mutate func(*egress.Limits)) *egress.Gate {
	t.Helper()
	p, err := egress.ParsePolicy("network_allow in the configuration", allow)
	if err != nil {
		t.Fatal(err)
	}
	lim := egress.DefaultLimits()
	if mutate != nil {
		mutate(&lim)
	}
	return egress.NewGate([]egress.Policy{p}, lim, res, nil)
}

// runWith runs code in slot 0 with gate as its egress and returns its result with the
// gate's records, after the gate is closed (as the Service does).
func runWith(t *testing.T, rt sandbox.Runtime, gate *egress.Gate, code string) (sandbox.Result, []sandbox.EgressConnection) {
	t.Helper()
	spec := sandboxtest.Spec(code, 60*time.Second)
	spec.Egress = gate
	res := sandboxtest.Exec(t, rt, 0, spec, nil)
	gate.Close()
	recs, _ := gate.Connections()
	// In the order they were asked for (they are recorded as they end).
	slices.SortStableFunc(recs, func(a, b sandbox.EgressConnection) int { return a.StartedAt.Compare(b.StartedAt) })
	if res.Outcome != sandbox.OutcomeOK {
		t.Fatalf("outcome %s (%s)\nstdout: %s\nstderr: %s", res.Outcome, res.Reason, res.Stdout, res.Stderr)
	}
	return res, recs
}

// TestEgressAllowlist runs programs in a box of network "allowlist" against servers on the
// host's loopback that the allowlist names by an explicit CIDR.
func TestEgressAllowlist(t *testing.T) { egressAllowlist(t, nil) }

// TestEgressAllowlistRunsc runs the same under gVisor, when the engine has it.
func TestEgressAllowlistRunsc(t *testing.T) {
	name := testenv.ContainerRuntime(t, "runsc")
	egressAllowlist(t, func(cfg *docker.Config) { cfg.Box.Runtime = name })
}

func egressAllowlist(t *testing.T, mutate func(*docker.Config)) {
	rt, _ := startRuntime(t, func(cfg *docker.Config) {
		cfg.Slots, cfg.Box.Network = 1, "allowlist"
		cfg.ForkServer.Preload = []string{"requests"}
		if mutate != nil {
			mutate(cfg)
		}
	})
	port, other := hostServer(t), hostServer(t)
	res := testResolver{"allowed.test": "127.0.0.1", "rebind.test": "127.0.0.1", "meta.test": "169.254.169.254", "public.test": "93.184.215.14"}

	t.Run("allowed and refused", func(t *testing.T) {
		gate := gateFor(t, []string{"allowed.test:" + fmt.Sprint(port), fmt.Sprintf("127.0.0.1:%d", port)}, res, nil)
		out, recs := runWith(t, rt, gate, fmt.Sprintf(`
import json, os, socket, time, errno, requests
r = {}
resp = requests.get("http://allowed.test:%[1]d/data", timeout=30)
r["status"], r["length"], r["same"] = resp.status_code, len(resp.content), resp.content == b"0123456789abcdef" * 65536
r["slow"] = requests.get("http://allowed.test:%[1]d/slow", timeout=30).text
r["hello"] = requests.post("http://allowed.test:%[1]d/hello", data=b"x" * 100000, timeout=30).text
try:
    requests.get("https://denied.test/", timeout=30)
    r["https_denied"] = "reached"
except requests.exceptions.ProxyError as e:
    r["https_denied"] = str(e)
resp = requests.get("http://allowed.test:%[2]d/hello", timeout=30)
r["port_rule"] = [resp.status_code, resp.text]
try:
    requests.get("https://10.1.2.3/", timeout=30)
    r["private"] = "reached"
except requests.exceptions.ProxyError as e:
    r["private"] = str(e)
resp = requests.get("http://[::ffff:169.254.169.254]/latest/meta-data/", timeout=30)
r["mapped"] = [resp.status_code, resp.text]
t0 = time.monotonic()
try:
    socket.create_connection(("93.184.215.14", 80), timeout=20)
    r["raw"] = "connected"
except OSError as e:
    r["raw"] = [type(e).__name__, e.errno, time.monotonic() - t0]
r["env"] = os.environ.get("HTTPS_PROXY")
print(json.dumps(r))
`, port, other))
		var r map[string]any
		if err := json.Unmarshal([]byte(out.Stdout), &r); err != nil {
			t.Fatalf("stdout %q: %v", out.Stdout, err)
		}
		t.Logf("program saw: %s", out.Stdout)
		if r["status"] != 200.0 || r["length"] != float64(len(mebibyte)) || r["same"] != true {
			t.Errorf("allowed GET: %v %v %v", r["status"], r["length"], r["same"])
		}
		if r["slow"] != "slow ok" {
			t.Errorf("the origin took the forwarded request for abandoned: %v", r["slow"])
		}
		if r["hello"] != "hello from the host, POST /hello 100000" {
			t.Errorf("allowed POST: %v", r["hello"])
		}
		for key, want := range map[string][]string{
			"https_denied": {"ProxyError", "403", "denied.test:443 is refused", "network_allow in the configuration"},
			"private":      {"403", "10.1.2.3", "private"},
		} {
			got, _ := r[key].(string)
			for _, w := range want {
				if !strings.Contains(got, w) {
					t.Errorf("%s: %q does not contain %q", key, got, w)
				}
			}
		}
		if pr := fmt.Sprint(r["port_rule"]); !strings.Contains(pr, "403") || !strings.Contains(pr, fmt.Sprint(other)) {
			t.Errorf("another port: %s, want a 403 naming it", pr)
		}
		if m := fmt.Sprint(r["mapped"]); !strings.Contains(m, "403") || !strings.Contains(m, "metadata") {
			t.Errorf("IPv4-mapped metadata address: %s, want a 403 naming metadata", m)
		}
		if raw, _ := r["raw"].([]any); len(raw) != 3 || raw[0] == "TimeoutError" {
			t.Errorf("a raw socket: %v, want an OSError at once (not a timeout)", r["raw"])
		}
		if r["env"] != "http://"+docker.ProxyAddr {
			t.Errorf("HTTPS_PROXY is %v", r["env"])
		}
		// The records: every connection with its address, bytes and verdict.
		var got []string
		for _, c := range recs {
			got = append(got, fmt.Sprintf("%s:%d allowed=%v", c.Host, c.Port, c.Allowed))
		}
		if len(recs) != 7 {
			t.Fatalf("records %v, want 7", got)
		}
		first := recs[0]
		if !first.Allowed || first.Address != "127.0.0.1" || first.BytesReceived < int64(len(mebibyte)) || first.BytesSent == 0 {
			t.Errorf("the first record %+v", first)
		}
		if !recs[2].Allowed || recs[2].BytesSent < 100000 {
			t.Errorf("the POST's record %+v", recs[2])
		}
		for _, c := range recs[3:] {
			if c.Allowed || c.Reason == "" {
				t.Errorf("a refused connection's record %+v", c)
			}
		}
	})

	t.Run("rebinding refused", func(t *testing.T) {
		gate := gateFor(t, []string{"rebind.test", "meta.test", "0.0.0.0/0"}, res, nil)
		out, recs := runWith(t, rt, gate, fmt.Sprintf(`
import requests
for url in ["http://rebind.test:%d/hello", "http://meta.test/latest/meta-data/"]:
    r = requests.get(url, timeout=30)
    print(r.status_code, r.text.strip())
`, port))
		lines := strings.Split(strings.TrimSpace(out.Stdout), "\n")
		if len(lines) != 2 || !strings.Contains(lines[0], "403") || !strings.Contains(lines[0], "loopback") ||
			!strings.Contains(lines[1], "403") || !strings.Contains(lines[1], "metadata") {
			t.Errorf("rebinding names: %q", out.Stdout)
		}
		for _, c := range recs {
			if c.Allowed {
				t.Errorf("a rebinding name was dialed: %+v", c)
			}
		}
	})

	t.Run("byte cap", func(t *testing.T) {
		gate := gateFor(t, []string{"allowed.test", "127.0.0.1/32"}, res, func(l *egress.Limits) { l.MaxBytesReceived = 200 << 10 })
		out, recs := runWith(t, rt, gate, fmt.Sprintf(`
import requests
try:
    r = requests.get("http://allowed.test:%[1]d/data", timeout=30)
    print("got", len(r.content))
except requests.exceptions.RequestException as e:
    print("cut", type(e).__name__)
r = requests.get("http://allowed.test:%[1]d/hello", timeout=30)
print(r.status_code, r.text.strip())
`, port))
		t.Logf("program saw: %s", out.Stdout)
		lines := strings.Split(strings.TrimSpace(out.Stdout), "\n")
		var got int
		if len(lines) == 2 && strings.HasPrefix(lines[0], "got ") {
			_, _ = fmt.Sscanf(lines[0], "got %d", &got)
		} else {
			got = -1 // cut with an error
		}
		if len(lines) != 2 || got >= len(mebibyte) {
			t.Errorf("past the byte cap the download was not cut: %q", out.Stdout)
		}
		if len(lines) == 2 && (!strings.HasPrefix(lines[1], "403 ") || !strings.Contains(lines[1], "egress_max_bytes_received")) {
			t.Errorf("a connection after the cap: %q, want a 403 naming egress_max_bytes_received", lines[1])
		}
		if len(recs) == 0 || !strings.Contains(recs[0].Ended, "egress_max_bytes_received") || recs[0].BytesReceived != 200<<10 {
			t.Errorf("the capped connection's record: %+v", recs)
		}
	})

	t.Run("connection cap", func(t *testing.T) {
		gate := gateFor(t, []string{"allowed.test", "127.0.0.1/32"}, res, func(l *egress.Limits) { l.MaxConnections = 2 })
		out, _ := runWith(t, rt, gate, fmt.Sprintf(`
import requests
for i in range(3):
    r = requests.get("http://allowed.test:%[1]d/hello", timeout=30)
    print(r.status_code, r.text.strip())
`, port))
		lines := strings.Split(strings.TrimSpace(out.Stdout), "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[1], "200 ") || !strings.HasPrefix(lines[2], "403 ") || !strings.Contains(lines[2], "egress_max_connections") {
			t.Errorf("past the connection cap: %q, want the third refused naming egress_max_connections", out.Stdout)
		}
	})

	t.Run("no connection survives its run", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := ln.Accept()
			if err == nil {
				accepted <- c
			}
		}()
		lport := ln.Addr().(*net.TCPAddr).Port
		gate := gateFor(t, []string{fmt.Sprintf("127.0.0.1:%d", lport)}, res, nil)
		// The program opens a tunnel, starts a child that holds it, and exits.
		runWith(t, rt, gate, fmt.Sprintf(`
import socket
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n")
print(s.recv(100))
`, lport))
		var c net.Conn
		select {
		case c = <-accepted:
		case <-time.After(30 * time.Second):
			t.Fatal("the tunnel never reached the server")
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
		if _, err := io.ReadAll(c); err != nil {
			t.Errorf("the tunnel outlived its run: %v", err)
		}
	})
}

// TestEgressInstallThroughProxy installs a package from a local index through the proxy of a
// box of network "allowlist": installs reach the package index, and only it.
func TestEgressInstallThroughProxy(t *testing.T) {
	idx := pyindex.New(t)
	idx.AddWheel("tinypkg", "1.0", `VALUE = "1.0"`)
	rt, _ := startRuntime(t, func(cfg *docker.Config) {
		cfg.Slots, cfg.Box.Network = 1, "allowlist"
		cfg.ForkServer.Preload = []string{"requests"}
		cfg.Pip = protocol.PipOptions{IndexURL: idx.URL(), TrustedHosts: []string{idx.Host()}}
	})
	allow, err := egress.New(egress.Config{IndexURLs: []string{idx.URL()}, Limits: egress.DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	gate := allow.ForInstall()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := rt.Install(ctx, 0, sandbox.InstallRequest{Requirements: []string{"tinypkg==1.0"}, Timeout: time.Minute, Egress: gate}, nil)
	gate.Close()
	if err != nil {
		t.Fatal(err)
	}
	if d := out.Dependencies; len(d) != 1 || d[0].Status == sandbox.DependencyFailed {
		t.Fatalf("install: %+v", out)
	}
	recs, _ := gate.Connections()
	if len(recs) == 0 || !recs[0].Allowed {
		t.Errorf("install connections: %+v", recs)
	}
	if idx.Requests("tinypkg") == 0 {
		t.Error("pip never asked the index")
	}
	// A run gets the configuration's network_allow, which does not hold the index.
	run := allow.ForRun(nil).(*egress.Gate)
	res, _ := runWith(t, rt, run, fmt.Sprintf(`
import requests
print(requests.get(%q, timeout=30).status_code)
`, idx.URL()))
	if strings.TrimSpace(res.Stdout) != "403" {
		t.Errorf("a run reached the package index: %q", res.Stdout)
	}
}
