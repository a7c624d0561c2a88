package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// fixedReport is a report with round numbers, as Run would fill it before Targets.
func fixedReport(cpus int) Report {
	return Report{
		CPUs: cpus, BoxCPUs: 1, Slots: 4, ReadySeconds: 1.5, Image: "sandpit-sandbox:0123456789abcdef", ElapsedSeconds: 72.4, ThroughputSeconds: 5,
		Latency: []Latency{
			{Name: LatencyDockerExec, Baseline: "A", What: "docker exec python3 -c 'print(1)'", Runs: 20, P50MS: 150, P95MS: 180.25, P99MS: 190, RunsPerSec: 6.5},
			{Name: LatencySpawnPrint, Baseline: "B", What: "executor spawns python3 -c 'print(1)'", Runs: 50, P50MS: 20, P95MS: 23.4, P99MS: 25, RunsPerSec: 48.1},
			{Name: LatencyRESTPrint, What: "sandpit REST print(1)", Runs: 50, P50MS: 24, P95MS: 30, P99MS: 33.3, RunsPerSec: 40,
				Starts: map[string]int{"fork": 50}, BoxCPUMSPerRun: 15},
			{Name: LatencySpawnPandas, Baseline: "C", What: "executor spawns python3 -c <pandas snippet>", Runs: 20, P50MS: 700, P95MS: 750, P99MS: 760, RunsPerSec: 1.4},
			{Name: LatencyRESTPandas, What: "sandpit REST <pandas snippet>", Runs: 20, P50MS: 50, P95MS: 60, P99MS: 61, RunsPerSec: 19.5,
				Starts: map[string]int{"fork": 18, "cold": 2}},
			{Name: LatencySpawnAnalysis, Baseline: "D", What: "executor spawns python3 -c <analysis>", Runs: 20, P50MS: 2000, P95MS: 2100, P99MS: 2200, RunsPerSec: 0.5},
			{Name: LatencyRESTAnalysis, What: "sandpit REST <analysis>", Runs: 20, P50MS: 50, P95MS: 55, P99MS: 58, RunsPerSec: 20,
				Starts: map[string]int{"fork": 20}, BoxCPUMSPerRun: 60.25},
		},
		Throughput: []Throughput{
			{Clients: 1, Seconds: 5.01, OK: 200, RunsPerSec: 40, P50MS: 24, P99MS: 30, BoxCPUMSPerRun: 24.46, DaemonCPUMSPerRun: 3.2},
			{Clients: 4, Seconds: 5.02, OK: 600, RunsPerSec: 120, P50MS: 32, P99MS: 45, BoxCPUMSPerRun: 8.3, DaemonCPUMSPerRun: 1.15},
			{Clients: 16, Seconds: 5.1, OK: 612, RunsPerSec: 120, NotOK: 1, Busy: 7, Errors: 2, P50MS: 120, P99MS: 300},
		},
		Memory: Memory{DaemonIdleRSS: 30 << 20, DaemonIdleAnon: 12 << 20, DaemonIdleFile: 18 << 20, DaemonLoadPeakRSS: 36 << 20, BoxIdle: 100 << 20, BoxLoadPeak: 210 << 20,
			ExecutorIdleRSS: 5 << 20},
		Preload: Preload{Modules: []string{"numpy", "pandas", "matplotlib.pyplot"},
			Server: &ServerMemory{PID: 7, RSS: 120 << 20, PSS: 64 << 20, Anon: 60 << 20, Children: 1, GroupPSS: 125 << 20},
			ForkFloors: []ForkFloor{
				{Label: "this daemon's preload", Modules: []string{"numpy", "pandas", "matplotlib.pyplot"}, Preloaded: []string{"numpy", "pandas", "matplotlib.pyplot"},
					ImportMS: 1500, RSS: 110 << 20, PSS: 60 << 20, Anon: 50 << 20, Mappings: 900, Forks: 50, CPUMSPerFork: 10, CPUSource: "cgroup v1", RusageMSPerFork: 8, WallP50MS: 9.5},
				{Label: "the small preload", Modules: SmallPreload, Preloaded: []string{"numpy", "pandas", "matplotlib"}, Skipped: map[string]string{"scipy": "ModuleNotFoundError: No module named 'scipy'"},
					ImportMS: 800, RSS: 80 << 20, PSS: 45 << 20, Anon: 40 << 20, Mappings: 600, Forks: 50, CPUMSPerFork: 7.5, CPUSource: "cgroup v1", RusageMSPerFork: 6, WallP50MS: 7},
			}},
	}
}

func TestTargets(t *testing.T) {
	r := fixedReport(8)
	r.BoxCPUs = 4
	got := Targets(r)
	want := []struct {
		name, status string
		value        float64
	}{
		{"rest_print_over_spawn", StatusMet, 1.2},   // 24 / 20
		{"docker_exec_over_rest", StatusMet, 6.25},  // 150 / 24
		{"cold_pandas_over_rest", StatusMet, 14},    // 700 / 50
		{"throughput_4_over_1", StatusMet, 3},       // 120 / 40
		{"daemon_idle_rss", StatusMet, 30},          // MiB
		{"rest_analysis_p50", StatusMet, 50},        // ms
		{"cold_analysis_over_rest", StatusMet, 40},  // 2000 / 50
		{"run_cpu_over_fork_floor", StatusMet, 1.5}, // 15 / 10 ms
	}
	if len(got) != len(want) {
		t.Fatalf("Targets gave %d targets, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Name != w.name || got[i].Status != w.status || got[i].Value != w.value {
			t.Errorf("target %d = %s %v %s, want %s %v %s", i, got[i].Name, got[i].Value, got[i].Status, w.name, w.value, w.status)
		}
	}
	if !strings.Contains(got[3].Note, "8 CPUs") {
		t.Errorf("the scaling target's note %q does not give the CPU count", got[3].Note)
	}
	if got[4].Note != "anonymous 12.0 MiB, the binary's pages 18.0 MiB" {
		t.Errorf("the daemon RSS target's note %q does not split it", got[4].Note)
	}
}

func TestTargetsNotMetAndNotApplicable(t *testing.T) {
	r := fixedReport(2)
	r.Latency[2].P50MS = 30 // REST print(1): 1.5x baseline B, and A is only 5x
	r.Latency[4].P50MS = 100
	r.Memory.DaemonIdleRSS = 0 // not readable
	r.Latency[5].P50MS = 1200
	r.Latency[6].P50MS = 70
	r.Latency[2].BoxCPUMSPerRun = 20
	got := Targets(r)
	status := map[string]string{}
	for _, tg := range got {
		status[tg.Name] = tg.Status
	}
	for name, want := range map[string]string{
		"rest_print_over_spawn":   StatusNotMet, // 1.5 > 1.25
		"docker_exec_over_rest":   StatusMet,    // exactly 5
		"cold_pandas_over_rest":   StatusNotMet, // 7 < 8
		"throughput_4_over_1":     StatusNA,     // 2 CPUs
		"daemon_idle_rss":         StatusNA,     // not measured
		"rest_analysis_p50":       StatusNotMet, // 70 > 60 ms
		"cold_analysis_over_rest": StatusNotMet, // 1200 / 70 < 20
		"run_cpu_over_fork_floor": StatusNotMet, // 20 / 10 ms > 1.5
	} {
		if status[name] != want {
			t.Errorf("%s: status %q, want %q", name, status[name], want)
		}
	}
	if tg := got[7]; tg.Name != "run_cpu_over_fork_floor" || tg.Note != "20.0 ms against 10.0 ms" {
		t.Errorf("the CPU target's note gives the two figures: %s %q", tg.Name, tg.Note)
	}
	if got[3].Value != 3 || !strings.Contains(got[3].Note, "2 CPUs") {
		t.Errorf("an n/a scaling target still shows its figure and why: got %v %q", got[3].Value, got[3].Note)
	}
	// Enough CPUs on the machine, but a box allowed one: still n/a.
	r = fixedReport(8)
	if tg := Targets(r)[3]; tg.Status != StatusNA || !strings.Contains(tg.Note, "box cpus 1") {
		t.Errorf("scaling with 8 CPUs and a 1-CPU box: %s %q, want n/a naming the box", tg.Status, tg.Note)
	}
}

func TestTargetsWithoutMeasurements(t *testing.T) {
	for _, tg := range Targets(Report{CPUs: 8}) {
		if tg.Status != StatusNA || tg.Value != 0 {
			t.Errorf("%s: %v %s, want n/a with no value", tg.Name, tg.Value, tg.Status)
		}
	}
}

// withVariants adds the single container, gVisor and the small preload measured beside the
// pool.
func withVariants(r Report) Report {
	r.Variants = []Variant{
		{Name: VariantSingle, Flags: []string{"--slots=1"}, Slots: 1, ReadySeconds: 1.25, DaemonIdleRSS: 29 << 20, BoxIdle: 40 << 20,
			RESTPrint: Latency{Runs: 50, P50MS: 20}, RESTPandas: Latency{Runs: 20, P50MS: 48}},
		{Name: VariantRunsc, Flags: []string{"--runtime=runsc", "--network=none"}, Slots: 4, ReadySeconds: 6, BoxIdle: 300 << 20,
			RESTPrint: Latency{Runs: 50, P50MS: 120}, RESTPandas: Latency{Runs: 20, P50MS: 300}},
		{Name: VariantSmallPreload, Flags: []string{}, Env: []string{"SANDPIT_PRELOAD=numpy,pandas,matplotlib,scipy"}, Slots: 4, ReadySeconds: 1.2,
			DaemonIdleRSS: 30 << 20, BoxIdle: 80 << 20,
			RESTPrint: Latency{Runs: 50, P50MS: 22, BoxCPUMSPerRun: 12}, RESTPandas: Latency{Runs: 20, P50MS: 49}},
	}
	return r
}

func TestTargetsOfTheLayouts(t *testing.T) {
	got := Targets(withVariants(fixedReport(2)))[8:]
	want := []struct {
		name, status string
		value        float64
	}{
		{"pool_print_over_single", StatusMet, 1.2},     // 24 / 20
		{"pool_pandas_over_single", StatusMet, 1.04},   // 50 / 48
		{"pool_ready_over_single", StatusMet, 1.2},     // 1.5 / 1.25
		{"pool_memory_over_single", StatusNotMet, 2.5}, // 100 / 40 MiB
		{"runsc_print_over_runc", StatusNotMet, 5},     // 120 / 24
		{"print_over_small_preload", StatusMet, 1.09},  // 24 / 22
	}
	if len(got) != len(want) {
		t.Fatalf("%d layout targets, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Name != w.name || got[i].Status != w.status || got[i].Value != w.value {
			t.Errorf("target %s = %v %s, want %s %v %s", got[i].Name, got[i].Value, got[i].Status, w.name, w.value, w.status)
		}
	}
}

func TestWriteTable(t *testing.T) {
	r := withVariants(fixedReport(2))
	r.Targets = Targets(r)
	var buf bytes.Buffer
	if err := WriteTable(&buf, r); err != nil {
		t.Fatal(err)
	}
	want := `sandpit bench: 2 CPUs (box: 1), image sandpit-sandbox:0123456789abcdef, took 1m12s

latency (sequential, one client)                    runs    p50 ms    p95 ms    p99 ms   runs/s   cpu ms  start
A  docker exec python3 -c 'print(1)'                  20     150.0     180.2     190.0      6.5
B  executor spawns python3 -c 'print(1)'              50      20.0      23.4      25.0     48.1
   sandpit REST print(1)                              50      24.0      30.0      33.3     40.0     15.0  fork
C  executor spawns python3 -c <pandas snippet>        20     700.0     750.0     760.0      1.4
   sandpit REST <pandas snippet>                      20      50.0      60.0      61.0     19.5           cold 2, fork 18
D  executor spawns python3 -c <analysis>              20    2000.0    2100.0    2200.0      0.5
   sandpit REST <analysis>                            20      50.0      55.0      58.0     20.0     60.2  fork

throughput: print(1) through REST, 5s per level
clients   runs/s      ok  not ok    429  errors    p50 ms    p99 ms  box cpu ms/run  daemon cpu ms/run
      1     40.0     200       0      0       0      24.0      30.0            24.5                3.2
      4    120.0     600       0      0       0      32.0      45.0             8.3                1.1
     16    120.0     612       1      7       2     120.0     300.0             n/a                n/a

memory                               idle    under load (peak)
daemon RSS                       30.0 MiB             36.0 MiB
  of it anonymous (its own)      12.0 MiB
  of it its binary's pages       18.0 MiB
boxes (4 containers)            100.0 MiB            210.0 MiB
executor RSS (peak: VmHWM)        5.0 MiB                  n/a

preload: numpy pandas matplotlib.pyplot
in slot 0's box                                     RSS        PSS       anon  maps import ms fork cpu ms fork p50 ms
the fork server                               120.0 MiB   64.0 MiB   60.0 MiB
  and its waiting children (1)                           125.0 MiB
fork floor: this daemon's preload             110.0 MiB   60.0 MiB   50.0 MiB   900      1500       10.00        9.50
fork floor: the small preload (1 skipped)      80.0 MiB   45.0 MiB   40.0 MiB   600       800        7.50        7.00

layouts                                         slots   ready s   print p50 ms  pandas p50 ms       boxes idle  daemon idle
this daemon                                         4      1.50           24.0           50.0        100.0 MiB     30.0 MiB
--slots=1                                           1      1.25           20.0           48.0         40.0 MiB     29.0 MiB
--runtime=runsc --network=none                      4      6.00          120.0          300.0        300.0 MiB          n/a
SANDPIT_PRELOAD=numpy,pandas,matplotlib,scipy       4      1.20           22.0           49.0         80.0 MiB     30.0 MiB

target                                                    value        goal  status
REST print(1) p50 / baseline B p50                        1.20x     ≤ 1.25x  met
baseline A p50 / REST print(1) p50                        6.25x        ≥ 5x  met
baseline C p50 / REST pandas p50                         14.00x        ≥ 8x  met
throughput(4) / throughput(1)                             3.00x        ≥ 3x  n/a (2 CPUs, box cpus 1; the goal needs at least 4 of each)
daemon idle RSS                                        30.0 MiB    < 40 MiB  met (anonymous 12.0 MiB, the binary's pages 18.0 MiB)
REST analysis p50                                       50.0 ms     ≤ 60 ms  met
baseline D p50 / REST analysis p50                       40.00x       ≥ 20x  met
box CPU per REST print(1) / fork and exit                 1.50x      ≤ 1.5x  met (15.0 ms against 10.0 ms)
pool of 4 / one container: REST print(1) p50              1.20x     ≤ 1.25x  met
pool of 4 / one container: REST pandas p50                1.04x     ≤ 1.25x  met
pool of 4 / one container: time to ready                  1.20x     ≤ 1.25x  met
pool of 4 / one container: idle box memory                2.50x     ≤ 1.25x  not met (each slot's sandbox holds its own fork server)
runsc / runc: REST print(1) p50                           5.00x        ≤ 4x  not met
this preload / the small one: REST print(1) p50           1.09x      ≤ 1.1x  met
`
	if got := buf.String(); got != want {
		t.Errorf("WriteTable:\n%s\nwant:\n%s", got, want)
	}
}

func TestReportJSON(t *testing.T) {
	r := fixedReport(2)
	r.Targets = Targets(r)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"cpus", "box_cpus", "image", "elapsed_seconds", "latency", "throughput", "throughput_seconds", "memory", "targets"} {
		if _, ok := back[key]; !ok {
			t.Errorf("the JSON report has no %q: %s", key, b)
		}
	}
	lat := back["latency"].([]any)[2].(map[string]any)
	if lat["name"] != LatencyRESTPrint || lat["p50_ms"] != 24.0 || lat["starts"].(map[string]any)["fork"] != 50.0 {
		t.Errorf("latency row: %v", lat)
	}
	if _, ok := back["latency"].([]any)[0].(map[string]any)["starts"]; ok {
		t.Errorf("a baseline row has starts: %s", b)
	}
	mem := back["memory"].(map[string]any)
	if mem["daemon_idle_rss_bytes"] != float64(30<<20) {
		t.Errorf("memory: %v", mem)
	}
	if _, ok := mem["executor_peak_rss_bytes"]; ok {
		t.Errorf("an unmeasured figure is in the JSON: %v", mem)
	}
}

func TestNewLatencyAndThroughput(t *testing.T) {
	l := newLatency(LatencyRESTPrint, "", "x", msList(10, 30, 20, 40), map[string]int{})
	if l.Runs != 4 || l.P50MS != 20 || l.P95MS != 40 || l.RunsPerSec != 40 || l.Starts != nil {
		t.Errorf("NewLatency = %+v", l)
	}
	th := newThroughput(load{clients: 4, elapsed: 2 * time.Second, ok: msList(10, 20, 30), notOK: 1, busy: 2, errors: 3})
	want := Throughput{Clients: 4, Seconds: 2, OK: 3, RunsPerSec: 1.5, NotOK: 1, Busy: 2, Errors: 3, P50MS: 20, P99MS: 30}
	if th != want {
		t.Errorf("newThroughput = %+v, want %+v", th, want)
	}
}

// TestPortTargets: the port's goals are the daemon's path over the same GET inside the box,
// and 1 MiB per p50 as MiB/s.
func TestPortTargets(t *testing.T) {
	r := Report{Latency: []Latency{{Name: LatencyPortGet, Runs: 1, P50MS: 6.5}, {Name: LatencyPortGetInBox, Runs: 1, P50MS: 2}, {Name: LatencyPortGetMiB, Runs: 1, P50MS: 40}}}
	got := map[string]Target{}
	for _, tg := range Targets(r) {
		got[tg.Name] = tg
	}
	if tg := got["port_get_over_ms"]; tg.Value != 4.5 || tg.Status != StatusNotMet {
		t.Errorf("port_get_over_ms: %+v", tg)
	}
	if tg := got["port_1mib_mib_per_s"]; tg.Value != 25 || tg.Status != StatusNotMet {
		t.Errorf("port_1mib_mib_per_s: %+v", tg)
	}
}

// TestSecretTargets: the secrets' goal is a bound host's GET over an unbound one's, p50.
func TestSecretTargets(t *testing.T) {
	r := Report{Latency: []Latency{{Name: LatencySecretGet, Runs: 1, P50MS: 9}, {Name: LatencySecretGetUnbound, Runs: 1, P50MS: 4}}}
	for _, tg := range Targets(r) {
		if tg.Name == "secret_get_over_tunnel" {
			if tg.Value != 2.25 || tg.Status != StatusNotMet {
				t.Errorf("secret_get_over_tunnel: %+v", tg)
			}
			return
		}
	}
	t.Error("no secret_get_over_tunnel target")
}
