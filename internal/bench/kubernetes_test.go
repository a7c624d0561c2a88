package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// withKubernetes adds a Kubernetes daemon and the main daemon's session creation to r.
func withKubernetes(r Report) Report {
	r.Latency = append(r.Latency, Latency{Name: LatencySessionCreate, What: "session creation (REST)", Runs: 10, P50MS: 400, P95MS: 450, P99MS: 460, RunsPerSec: 2.5})
	r.Kubernetes = &Kubernetes{Config: "kube.json", Namespace: "kbench", Image: "sandpit-sandbox:0123", Slots: 1, WarmSessions: 1, ReadySeconds: 4.5,
		RESTPrint:     Latency{Name: LatencyRESTPrint, Runs: 50, P50MS: 30, P95MS: 45, P99MS: 50},
		DockerPrint:   Latency{Name: LatencyRESTPrint, Runs: 50, P50MS: 25, P95MS: 36, P99MS: 40},
		SessionCreate: Latency{Name: LatencySessionCreate, Runs: 10, P50MS: 120, P95MS: 200, P99MS: 210},
		PodReady:      Latency{Name: LatencyPodReady, Runs: 5, P50MS: 1500, P95MS: 1800, P99MS: 1800}}
	return r
}

func TestTargetsOfKubernetes(t *testing.T) {
	r := withKubernetes(fixedReport(2))
	all := Targets(r)
	got := all[len(all)-2:]
	// The ratio is of the two daemons' print(1) timed in turns (30 / 25), not of the main
	// daemon's own row (24).
	if got[0].Name != "kubernetes_print_over_docker" || got[0].Value != 1.2 || got[0].Status != StatusMet {
		t.Errorf("print ratio: %+v", got[0])
	}
	if got[1].Name != "kubernetes_session_create_p50" || got[1].Value != 120 || got[1].Status != StatusNotMet {
		t.Errorf("session creation: %+v", got[1])
	}
	docker := fixedReport(2) // with the main daemon's session creation, which has a target of its own
	docker.Latency = append(docker.Latency, latencyOf(r, LatencySessionCreate))
	if n := len(Targets(docker)); len(all) != n+2 {
		t.Errorf("%d targets with the Kubernetes daemon, %d without: want 2 more", len(all), n)
	}

	// A daemon whose warm pool was off has no session target; one whose print(1) was not
	// measured has its ratio n/a.
	r.Kubernetes.SessionCreate, r.Kubernetes.RESTPrint = Latency{}, Latency{}
	all = Targets(r)
	if last := all[len(all)-1]; last.Name != "kubernetes_print_over_docker" || last.Status != StatusNA {
		t.Errorf("without measurements: %+v", last)
	}
}

func TestWriteTableOfKubernetes(t *testing.T) {
	r := withKubernetes(fixedReport(2))
	r.Targets = Targets(r)
	var buf bytes.Buffer
	if err := WriteTable(&buf, r); err != nil {
		t.Fatal(err)
	}
	want := `
runtimes: this daemon (docker) and kubernetes (kube.json, namespace kbench, 1 slot(s), warm_sessions 1, ready in 4.5s)
                                                            runs    p50 ms    p95 ms    p99 ms
docker     REST print(1), warm container, in turns            50      25.0      36.0      40.0
kubernetes REST print(1), warm pod, in turns                  50      30.0      45.0      50.0
docker     session creation (a container)                     10     400.0     450.0     460.0
kubernetes session creation from the warm pool                10     120.0     200.0     210.0
kubernetes slot pod create to its executor answering           5    1500.0    1800.0    1800.0
kubernetes / docker: REST print(1) p50                     1.20x (p95 1.25x)
`
	if got := buf.String(); !strings.Contains(got, want) {
		t.Errorf("WriteTable:\n%s\nwant it to hold:\n%s", got, want)
	}
	r.Kubernetes.Density = &Density{Sessions: 17, Refusal: "no room for another sandbox: 0/1 nodes are available: 1 Insufficient cpu",
		WindowSeconds: 60, APIRequestsIdle: 14, APIRequestsSessions: 14.5, APIRequestsPerSandbox: 0.03, OpenRequestsPerSandbox: 9.2,
		DaemonRSSIdleMiB: 60, DaemonRSSSessionsMiB: 66.5, DaemonKiBPerSandbox: 392}
	buf.Reset()
	if err := WriteTable(&buf, r); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"kubernetes idle sessions open at once: 17 (the next refused: no room for another sandbox: 0/1 nodes are available: 1 Insufficient cpu)",
		"  API requests per minute, idle over 60s: 14.0 with no session, 14.5 with 17 (0.03 per session); 9.2 to open each",
		"  daemon resident memory: 60.0 MiB with no session, 66.5 MiB with 17 (392 KiB per session)",
		"kubernetes / docker: REST print(1) p50                    1.20x      ≤ 1.5x  met",
		"kubernetes: session creation from the warm pool p50    120.0 ms    ≤ 100 ms  not met"} {
		if !strings.Contains(buf.String(), line) {
			t.Errorf("WriteTable has no target line %q:\n%s", line, buf.String())
		}
	}
}

// TestPrintInTurns: the two daemons take one run each in turn, the first of each pair
// alternating, each run turnPause or more after the last, and each daemon's runs and starts
// land in its own row.
func TestPrintInTurns(t *testing.T) {
	var (
		mu    sync.Mutex
		order []string
		last  time.Time
		gaps  []time.Duration
	)
	daemon := func(name, start string) *instance {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			order = append(order, name)
			if !last.IsZero() {
				gaps = append(gaps, time.Since(last))
			}
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"id": "ex_1", "outcome": "ok", "success": true, "stdout": "1\n", "start": start})
			mu.Lock()
			last = time.Now()
			mu.Unlock()
		}))
		t.Cleanup(srv.Close)
		return &instance{rest: newRESTClient(srv.URL, "", 1)}
	}
	docker, kube := daemon("docker", "fork"), daemon("kube", "cold")
	b := &bench{opts: Options{Runs: 3}}
	var k Kubernetes
	if err := b.printInTurns(context.Background(), docker, kube, &k); err != nil {
		t.Fatal(err)
	}
	if want := []string{"docker", "kube", "kube", "docker", "docker", "kube"}; !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	for i, g := range gaps {
		if g < turnPause {
			t.Errorf("run %d came %v after the last, want at least %v", i+1, g, turnPause)
		}
	}
	if k.DockerPrint.Runs != 3 || k.DockerPrint.Starts["fork"] != 3 || k.RESTPrint.Runs != 3 || k.RESTPrint.Starts["cold"] != 3 {
		t.Errorf("rows: docker %+v, kubernetes %+v", k.DockerPrint, k.RESTPrint)
	}
}
