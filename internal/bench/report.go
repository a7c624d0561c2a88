package bench

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Report is the result of one bench. The JSON field names are what `sandpit bench --json`
// prints.
type Report struct {
	// CPUs is the machine's CPU count (runtime.NumCPU).
	CPUs int `json:"cpus"`
	// BoxCPUs is each box's CPU quota (the cpus setting), in CPUs.
	BoxCPUs float64 `json:"box_cpus"`
	// Slots is how many slots, and so containers, the measured daemon had.
	Slots int `json:"slots"`
	// ReadySeconds is the time from starting the daemon to its answering ready, in seconds
	// (the image already built).
	ReadySeconds float64 `json:"ready_seconds"`
	// Image is the sandbox image's tag.
	Image string `json:"image"`
	// ElapsedSeconds is how long the whole bench took, in seconds, from the image check to the
	// removal of its container.
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	// Latency holds the sequential measurements, one client, one run after another: the
	// baselines and sandpit, in the order of the Latency* names.
	Latency []Latency `json:"latency"`
	// Throughput holds one row per concurrency level.
	Throughput []Throughput `json:"throughput"`
	// ThroughputSeconds is how long each throughput level was to last, in seconds.
	ThroughputSeconds float64 `json:"throughput_seconds"`
	// Memory holds the resident memory figures.
	Memory Memory `json:"memory"`
	// Preload holds what the fork server's preload costs: its memory, and the CPU time of a
	// bare fork and exit of a process holding it, the floor of a forked run's CPU.
	Preload Preload `json:"preload"`
	// Variants are daemons with other layouts measured in the same run, to compare with.
	Variants []Variant `json:"variants,omitempty"`
	// Kubernetes is the daemon with the Kubernetes runtime measured in the same run
	// (Options.Kubernetes), nil when none was.
	Kubernetes *Kubernetes `json:"kubernetes,omitempty"`
	// Targets says how the measurements compare with sandpit's goals.
	Targets []Target `json:"targets"`
}

// The names of the variants (Variant.Name).
const (
	// VariantSingle is a single container with one slot (--slots=1): the layout of one warm
	// box that the pool of per-slot containers is compared with.
	VariantSingle = "single"
	// VariantRunsc is the same pool under gVisor (--runtime=runsc, network none).
	VariantRunsc = "runsc"
	// VariantSmallPreload is the same pool with the fork server preloading SmallPreload (set
	// through SANDPIT_PRELOAD): the preload before it took every default package's modules
	// agents import, to compare print(1) and memory with.
	VariantSmallPreload = "small-preload"
	// VariantPlain is the same pool with the notebook layer off (SANDPIT_NOTEBOOK=false): code
	// runs as a plain script, to compare print(1) with (docs/notebook.md).
	VariantPlain = "plain"
)

// Variant is a daemon measured beside the main one with other settings.
type Variant struct {
	// Name is one of the Variant* names; Flags the flags its daemon got on top of the main
	// one's, and Env the environment variables added to its environment.
	Name  string   `json:"name"`
	Flags []string `json:"flags"`
	Env   []string `json:"env,omitempty"`
	// Slots is how many containers it ran.
	Slots int `json:"slots"`
	// ReadySeconds is the time from its start to its answering ready, in seconds.
	ReadySeconds float64 `json:"ready_seconds"`
	// DaemonIdleRSS and BoxIdle are as in Memory, after its warm-up, in bytes.
	DaemonIdleRSS int64 `json:"daemon_idle_rss_bytes,omitempty"`
	BoxIdle       int64 `json:"box_idle_bytes,omitempty"`
	// RESTPrint and RESTPandas are print(1) and the pandas snippet through its REST API.
	RESTPrint  Latency `json:"rest_print"`
	RESTPandas Latency `json:"rest_pandas"`
}

// The names of the latency measurements (Latency.Name).
const (
	// LatencyDockerExec is baseline A: a `docker exec` of python3 -c 'print(1)' through the
	// Engine API.
	LatencyDockerExec = "docker_exec_print"
	// LatencySpawnPrint is baseline B: python3 -c 'print(1)' started by sandpit-executor in
	// the box, with no HTTP or session around it.
	LatencySpawnPrint = "spawn_print"
	// LatencyRESTPrint is print(1) through sandpit's REST API, end to end.
	LatencyRESTPrint = "rest_print"
	// LatencySpawnPandas is baseline C: the pandas snippet in a fresh python3 started by
	// sandpit-executor in the box.
	LatencySpawnPandas = "spawn_pandas"
	// LatencyRESTPandas is the pandas snippet through sandpit's REST API, end to end.
	LatencyRESTPandas = "rest_pandas"
	// LatencySpawnAnalysis is baseline D: the analysis program (a pandas groupby, a pyplot
	// chart saved as a PNG file, a scipy.stats test, a bs4 parse, a PIL resize) in a fresh
	// python3 started by sandpit-executor in the box, in a directory of its own.
	LatencySpawnAnalysis = "spawn_analysis"
	// LatencyRESTAnalysis is the analysis program through sandpit's REST API, end to end.
	LatencyRESTAnalysis = "rest_analysis"
	// LatencyRESTDescribe is a run ending in df.describe() through sandpit's REST API, its
	// value returned with its HTML table (the notebook layer).
	LatencyRESTDescribe = "rest_describe"
)

// Latency summarises one sequential measurement.
type Latency struct {
	// Name is one of the Latency* names.
	Name string `json:"name"`
	// Baseline is "A", "B", "C" or "D" for a baseline, empty for sandpit itself.
	Baseline string `json:"baseline,omitempty"`
	// What says what was timed, for a person.
	What string `json:"what"`
	// Runs is how many runs were timed.
	Runs int `json:"runs"`
	// P50MS, P95MS and P99MS are nearest-rank percentiles of the runs' durations, in
	// milliseconds.
	P50MS float64 `json:"p50_ms"`
	P95MS float64 `json:"p95_ms"`
	P99MS float64 `json:"p99_ms"`
	// RunsPerSec is the rate of one client running them back to back: runs divided by the sum
	// of their durations, in runs per second.
	RunsPerSec float64 `json:"runs_per_sec"`
	// Starts counts the runs by the "start" field of their results ("fork", "cold"); absent
	// for baselines and for daemons that do not report it.
	Starts map[string]int `json:"starts,omitempty"`
	// BoxCPUMSPerRun is the CPU time every process in the boxes used during the measurement
	// (the containers' cgroups, through the Engine API), divided by Runs, in milliseconds;
	// 0 for baselines and when it could not be read.
	BoxCPUMSPerRun float64 `json:"box_cpu_ms_per_run,omitempty"`
}

// newLatency summarises durations (in any order) as the measurement name: percentiles in
// milliseconds, the sequential rate in runs per second.
func newLatency(name, baseline, what string, durations []time.Duration, starts map[string]int) Latency {
	s := Summarize(durations)
	if len(starts) == 0 {
		starts = nil
	}
	return Latency{Name: name, Baseline: baseline, What: what, Runs: s.Runs,
		P50MS: ms(s.P50), P95MS: ms(s.P95), P99MS: ms(s.P99), RunsPerSec: round(s.RunsPerSec(), 3), Starts: starts}
}

// Throughput is what one concurrency level of print(1) through REST achieved.
type Throughput struct {
	// Clients is how many clients sent requests concurrently, each its next when the previous
	// one answered.
	Clients int `json:"clients"`
	// Seconds is how long the level took, from its first request to its last answer, in
	// seconds.
	Seconds float64 `json:"seconds"`
	// OK counts the runs that ended ok (and printed 1).
	OK int `json:"ok"`
	// RunsPerSec is OK divided by Seconds, in runs per second.
	RunsPerSec float64 `json:"runs_per_sec"`
	// NotOK counts results with another outcome.
	NotOK int `json:"not_ok"`
	// Busy counts 429 answers (every slot busy and the queue full); the client retried after
	// a pause.
	Busy int `json:"busy_429"`
	// Errors counts other HTTP answers and transport errors.
	Errors int `json:"errors"`
	// P50MS and P99MS are nearest-rank percentiles of the ok requests' latencies, in
	// milliseconds.
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
	// BoxCPUMSPerRun is the CPU time every process in the container used during the level
	// (executor, Python, the exec'd tools), divided by OK, in milliseconds; 0 when not read.
	// Times the throughput gives the share of a CPU the box used, to compare with its quota.
	BoxCPUMSPerRun float64 `json:"box_cpu_ms_per_run,omitempty"`
	// DaemonCPUMSPerRun is the daemon's CPU time during the level divided by OK, in
	// milliseconds; 0 when not read.
	DaemonCPUMSPerRun float64 `json:"daemon_cpu_ms_per_run,omitempty"`
}

// newThroughput summarises a load.
func newThroughput(l load) Throughput {
	s := Summarize(l.ok)
	return Throughput{Clients: l.clients, Seconds: round(l.elapsed.Seconds(), 3), OK: len(l.ok),
		RunsPerSec: round(Rate(len(l.ok), l.elapsed), 3), NotOK: l.notOK, Busy: l.busy, Errors: l.errors,
		P50MS: ms(s.P50), P99MS: ms(s.P99)}
}

// Memory holds resident memory figures in bytes; a figure that could not be read is 0 (and
// absent from the JSON).
type Memory struct {
	// DaemonIdleRSS is the daemon's resident set size (VmRSS) after the warm-up, before load,
	// in bytes.
	DaemonIdleRSS int64 `json:"daemon_idle_rss_bytes,omitempty"`
	// DaemonIdleAnon and DaemonIdleFile split DaemonIdleRSS (RssAnon and RssFile of
	// /proc/PID/status), in bytes: its anonymous memory (heap, stacks), the daemon's own, and
	// the pages of its binary mapped in, which are page cache (shared with every process of
	// the binary, read again from the file when the kernel drops them).
	DaemonIdleAnon int64 `json:"daemon_idle_anon_bytes,omitempty"`
	DaemonIdleFile int64 `json:"daemon_idle_file_bytes,omitempty"`
	// DaemonLoadPeakRSS is the largest daemon VmRSS sampled (every 100 ms) during the
	// highest-concurrency throughput level, in bytes.
	DaemonLoadPeakRSS int64 `json:"daemon_load_peak_rss_bytes,omitempty"`
	// BoxIdle is the container's memory use (as docker stats shows it: the cgroup's usage
	// without the inactive file cache) before load, in bytes.
	BoxIdle int64 `json:"box_idle_bytes,omitempty"`
	// BoxLoadPeak is the largest container memory use sampled (every 500 ms) during the
	// highest-concurrency throughput level, in bytes.
	BoxLoadPeak int64 `json:"box_load_peak_bytes,omitempty"`
	// ExecutorIdleRSS is sandpit-executor's VmRSS in the box before load, in bytes.
	ExecutorIdleRSS int64 `json:"executor_idle_rss_bytes,omitempty"`
	// ExecutorPeakRSS is sandpit-executor's peak resident set size since it started (VmHWM),
	// read after the load, in bytes.
	ExecutorPeakRSS int64 `json:"executor_peak_rss_bytes,omitempty"`
}

// Preload is what the fork server's preload costs, measured in slot 0's box.
type Preload struct {
	// Modules is the main daemon's preload (its preload setting).
	Modules []string `json:"modules"`
	// Server is slot 0's fork server, read before the fork floors ran; absent when the box
	// has none (fork_server off) or it could not be read.
	Server *ServerMemory `json:"server,omitempty"`
	// ForkFloors are the fork floors measured: of the main daemon's preload, of SmallPreload
	// and of no preload (the interpreter and bootstrap.py alone), in that order; one whose
	// preload equals an earlier one's is left out.
	ForkFloors []ForkFloor `json:"fork_floors,omitempty"`
}

// ServerMemory is a fork server's memory, from /proc/PID/smaps_rollup in its box, in bytes.
type ServerMemory struct {
	PID int `json:"pid"`
	// RSS is its resident set; PSS its proportional share (pages shared with its children
	// count half or less); Anon its anonymous resident memory (the preload's heap).
	RSS  int64 `json:"rss_bytes"`
	PSS  int64 `json:"pss_bytes"`
	Anon int64 `json:"anon_bytes"`
	// Children is how many children it has (the slot's next run, forked ahead and waiting);
	// GroupPSS is its PSS and theirs summed: the memory the server and its children take; 0
	// (absent) when a child could not be read (they run as the slot's uid, which the
	// container's root, without CAP_SYS_PTRACE, may not inspect).
	Children int   `json:"children"`
	GroupPSS int64 `json:"group_pss_bytes,omitempty"`
}

// ForkFloor is the cost of a preload measured in a box: a Python started as the fork server
// is (the same interpreter flags, run environment, bootstrap.py loaded, the preload imported,
// the collector frozen), run through the Engine API as the container's root, which then
// forks Forks children that call os._exit(0) at once, waiting for each. Its CPU per fork is
// the floor of a forked run's CPU with that preload: every run costs at least a fork and an
// exit of the server's size.
type ForkFloor struct {
	// Label says which preload this is, for a person.
	Label string `json:"label"`
	// Modules is the preload asked for; Preloaded those imported, Skipped those that failed
	// (with the error).
	Modules   []string          `json:"modules"`
	Preloaded []string          `json:"preloaded"`
	Skipped   map[string]string `json:"skipped,omitempty"`
	// ImportMS is how long the imports took, in milliseconds.
	ImportMS float64 `json:"import_ms"`
	// RSS, PSS and Anon are the process's resident set, proportional share and anonymous
	// resident memory after the imports, in bytes. Its files' pages are shared with the box's
	// fork server, so PSS counts them about half; RSS and Anon do not depend on that.
	RSS  int64 `json:"rss_bytes"`
	PSS  int64 `json:"pss_bytes"`
	Anon int64 `json:"anon_bytes"`
	// Mappings is how many memory mappings it has (each one a fork copies).
	Mappings int `json:"mappings"`
	// Huge is the part of its memory it collapsed into transparent huge pages, as the fork
	// server does (0 where the kernel does not), in bytes.
	Huge int64 `json:"huge_bytes"`
	// Forks is how many forks were timed.
	Forks int `json:"forks"`
	// CPUMSPerFork is the CPU time the box's cgroup used over the forks divided by Forks, in
	// milliseconds; CPUSource says where it came from ("cgroup v2", "cgroup v1", or "rusage"
	// when the cgroup was unreadable). RusageMSPerFork is the same from the process's and its
	// children's rusage (the system's work on their behalf that the cgroup charges elsewhere
	// is missing from it).
	CPUMSPerFork    float64 `json:"cpu_ms_per_fork"`
	CPUSource       string  `json:"cpu_source"`
	RusageMSPerFork float64 `json:"rusage_ms_per_fork"`
	// WallP50MS is the p50 of each fork's time from the fork to the child reaped, in
	// milliseconds.
	WallP50MS float64 `json:"wall_p50_ms"`
}

// The statuses of a Target.
const (
	// StatusMet says the measurement meets the goal.
	StatusMet = "met"
	// StatusNotMet says the measurement misses the goal.
	StatusNotMet = "not met"
	// StatusNA says the goal does not apply on this machine, or was not measured.
	StatusNA = "n/a"
)

// Target is one of sandpit's performance goals and how this bench fared against it.
type Target struct {
	// Name identifies the target.
	Name string `json:"name"`
	// What says what is compared, for a person.
	What string `json:"what"`
	// Value is the measured figure, in Unit; 0 when it could not be computed.
	Value float64 `json:"value"`
	// Unit is "x" for a ratio, "ms" or "MiB".
	Unit string `json:"unit"`
	// Op and Goal are the goal: Value Op Goal, with Op one of "<=", ">=" and "<".
	Op   string  `json:"op"`
	Goal float64 `json:"goal"`
	// Status is StatusMet, StatusNotMet or StatusNA.
	Status string `json:"status"`
	// Note qualifies the figure (why it is n/a, what it depends on).
	Note string `json:"note,omitempty"`
}

// The targets' thresholds.
const (
	// MaxRESTOverSpawn is the most REST print(1) p50 may be, as a multiple of baseline B's.
	MaxRESTOverSpawn = 1.25
	// MinDockerExecOverREST is the least baseline A p50 must be, as a multiple of REST
	// print(1)'s.
	MinDockerExecOverREST = 5
	// MinColdPandasOverREST is the least baseline C p50 must be, as a multiple of REST
	// pandas'.
	MinColdPandasOverREST = 8
	// MinScaling4 is the least throughput at 4 clients must be, as a multiple of 1 client's,
	// when the machine and the box both have at least MinScalingCPUs CPUs.
	MinScaling4 = 3
	// MinScalingCPUs is the CPU count (of the machine, runtime.NumCPU, and of the box, its
	// cpus setting) below which MinScaling4 is n/a: 4 clients cannot run 3 times as fast on
	// fewer CPUs.
	MinScalingCPUs = 4
	// MaxDaemonIdleRSSMiB is the daemon's idle RSS goal, in MiB (exclusive).
	MaxDaemonIdleRSSMiB = 40
	// MaxPoolOverSingle is the most the pool's p50s and time to ready may be, as a multiple
	// of a single container's in the same run.
	MaxPoolOverSingle = 1.25
	// MaxRunscOverRunc is the most print(1) p50 under gVisor may be, as a multiple of runc's.
	MaxRunscOverRunc = 4
	// MaxRESTAnalysisMS is the most the analysis program's p50 through REST may be, in
	// milliseconds.
	MaxRESTAnalysisMS = 60
	// MaxSessionPrintMS is the most a print(1) call's p50 in a live session may be, end to
	// end, in milliseconds.
	MaxSessionPrintMS = 10
	// MaxSessionEchoMS, MaxSessionFileMS and MaxSessionListMS are the workspace's goals (p50,
	// through REST): `echo 1` as a command, a 1 MiB file written then read, a 1,000-file listing.
	MaxSessionEchoMS = 10
	MaxSessionFileMS = 20
	MaxSessionListMS = 20
	// MinColdAnalysisOverREST is the least baseline D p50 must be, as a multiple of REST
	// analysis'.
	MinColdAnalysisOverREST = 20
	// MaxPrintOverSmallPreload is the most REST print(1) p50 may be, as a multiple of the
	// same with SmallPreload in the same run: a bigger preload must not slow the smallest run
	// (the margin is the p50's noise from one daemon to the next, a few tenths of a
	// millisecond).
	MaxPrintOverSmallPreload = 1.1
	// MaxPrintOverPlain is the most REST print(1) p50 may be, as a multiple of the same with
	// the notebook layer off in the same run.
	MaxPrintOverPlain = 1.1
	// MaxRESTDescribeMS is the most a run ending in df.describe() (its HTML returned) may take
	// at p50 through REST, in milliseconds.
	MaxRESTDescribeMS = 30
	// MaxRunCPUOverForkFloor is the most the boxes' CPU per REST print(1) run may be, as a
	// multiple of the fork floor of the same preload: a bare fork and exit.
	MaxRunCPUOverForkFloor = 1.5
)

// Targets compares the measurements of r with sandpit's goals.
func Targets(r Report) []Target {
	p50 := func(name string) float64 { return latencyP50(r, name) }
	rate := func(clients int) float64 {
		for _, t := range r.Throughput {
			if t.Clients == clients {
				return t.RunsPerSec
			}
		}
		return 0
	}
	ratio := func(name, what string, a, b float64, op string, goal float64) Target {
		t := Target{Name: name, What: what, Unit: "x", Op: op, Goal: goal, Status: StatusNA, Note: "not measured"}
		if v, ok := Ratio(a, b); ok {
			t.Value, t.Status, t.Note = round(v, 2), evaluate(v, op, goal), ""
		}
		return t
	}
	targets := []Target{
		ratio("rest_print_over_spawn", "REST print(1) p50 / baseline B p50", p50(LatencyRESTPrint), p50(LatencySpawnPrint), "<=", MaxRESTOverSpawn),
		ratio("docker_exec_over_rest", "baseline A p50 / REST print(1) p50", p50(LatencyDockerExec), p50(LatencyRESTPrint), ">=", MinDockerExecOverREST),
		ratio("cold_pandas_over_rest", "baseline C p50 / REST pandas p50", p50(LatencySpawnPandas), p50(LatencyRESTPandas), ">=", MinColdPandasOverREST),
	}
	scaling := ratio("throughput_4_over_1", "throughput(4) / throughput(1)", rate(4), rate(1), ">=", MinScaling4)
	if scaling.Status != StatusNA {
		scaling.Note = fmt.Sprintf("%d CPUs, box cpus %g", r.CPUs, r.BoxCPUs)
		if r.CPUs < MinScalingCPUs || r.BoxCPUs < MinScalingCPUs {
			scaling.Status = StatusNA
			scaling.Note = fmt.Sprintf("%d CPUs, box cpus %g; the goal needs at least %d of each", r.CPUs, r.BoxCPUs, MinScalingCPUs)
		}
	}
	rss := Target{Name: "daemon_idle_rss", What: "daemon idle RSS", Unit: "MiB", Op: "<", Goal: MaxDaemonIdleRSSMiB,
		Status: StatusNA, Note: "not measured"}
	if r.Memory.DaemonIdleRSS > 0 {
		v := mib(r.Memory.DaemonIdleRSS)
		rss.Value, rss.Status, rss.Note = round(v, 1), evaluate(v, "<", MaxDaemonIdleRSSMiB), ""
		if r.Memory.DaemonIdleAnon > 0 || r.Memory.DaemonIdleFile > 0 {
			rss.Note = fmt.Sprintf("anonymous %.1f MiB, the binary's pages %.1f MiB", mib(r.Memory.DaemonIdleAnon), mib(r.Memory.DaemonIdleFile))
		}
	}
	targets = append(targets, scaling, rss)
	analysis := Target{Name: "rest_analysis_p50", What: "REST analysis p50", Unit: "ms", Op: "<=", Goal: MaxRESTAnalysisMS,
		Status: StatusNA, Note: "not measured"}
	if v := p50(LatencyRESTAnalysis); v > 0 {
		analysis.Value, analysis.Status, analysis.Note = round(v, 1), evaluate(v, "<=", MaxRESTAnalysisMS), ""
	}
	targets = append(targets, analysis,
		ratio("cold_analysis_over_rest", "baseline D p50 / REST analysis p50", p50(LatencySpawnAnalysis), p50(LatencyRESTAnalysis), ">=", MinColdAnalysisOverREST))
	var floor float64
	if len(r.Preload.ForkFloors) > 0 {
		floor = r.Preload.ForkFloors[0].CPUMSPerFork
	}
	cpu := ratio("run_cpu_over_fork_floor", "box CPU per REST print(1) / fork and exit", latencyOf(r, LatencyRESTPrint).BoxCPUMSPerRun, floor, "<=", MaxRunCPUOverForkFloor)
	if cpu.Status != StatusNA {
		cpu.Note = fmt.Sprintf("%.1f ms against %.1f ms", latencyOf(r, LatencyRESTPrint).BoxCPUMSPerRun, floor)
	}
	targets = append(targets, cpu)
	for _, v := range r.Variants {
		switch v.Name {
		case VariantSingle:
			pool := fmt.Sprintf("pool of %d", r.Slots)
			targets = append(targets,
				ratio("pool_print_over_single", pool+" / one container: REST print(1) p50", p50(LatencyRESTPrint), v.RESTPrint.P50MS, "<=", MaxPoolOverSingle),
				ratio("pool_pandas_over_single", pool+" / one container: REST pandas p50", p50(LatencyRESTPandas), v.RESTPandas.P50MS, "<=", MaxPoolOverSingle),
				ratio("pool_ready_over_single", pool+" / one container: time to ready", r.ReadySeconds, v.ReadySeconds, "<=", MaxPoolOverSingle))
			mem := ratio("pool_memory_over_single", pool+" / one container: idle box memory", float64(r.Memory.BoxIdle), float64(v.BoxIdle), "<=", MaxPoolOverSingle)
			if mem.Status != StatusNA {
				mem.Note = "each slot's sandbox holds its own fork server"
			}
			targets = append(targets, mem)
		case VariantRunsc:
			targets = append(targets, ratio("runsc_print_over_runc", "runsc / runc: REST print(1) p50", v.RESTPrint.P50MS, p50(LatencyRESTPrint), "<=", MaxRunscOverRunc))
		case VariantSmallPreload:
			targets = append(targets, ratio("print_over_small_preload", "this preload / the small one: REST print(1) p50", p50(LatencyRESTPrint), v.RESTPrint.P50MS, "<=", MaxPrintOverSmallPreload))
		case VariantPlain:
			targets = append(targets, ratio("print_over_plain", "notebook layer on / off: REST print(1) p50", p50(LatencyRESTPrint), v.RESTPrint.P50MS, "<=", MaxPrintOverPlain))
		}
	}
	if v := p50(LatencyRESTDescribe); v > 0 {
		targets = append(targets, Target{Name: "rest_describe_p50", What: "REST df.describe() with its HTML p50", Unit: "ms", Op: "<=",
			Goal: MaxRESTDescribeMS, Value: round(v, 1), Status: evaluate(v, "<=", MaxRESTDescribeMS)})
	}
	if v := p50(LatencySessionPrint); v > 0 { // a daemon with sessions off has none
		targets = append(targets, Target{Name: "session_print_p50", What: "session call print(1) p50", Unit: "ms", Op: "<=",
			Goal: MaxSessionPrintMS, Value: round(v, 1), Status: evaluate(v, "<=", MaxSessionPrintMS)})
	}
	for _, g := range []struct {
		latency, name, what string
		goal                float64
	}{
		{LatencySessionEcho, "session_echo_p50", "session command echo 1 p50", MaxSessionEchoMS},
		{LatencySessionFile, "session_file_1mib_p50", "session 1 MiB write then read p50", MaxSessionFileMS},
		{LatencySessionList, "session_list_1000_p50", "session listing of 1,000 files p50", MaxSessionListMS},
	} {
		if v := p50(g.latency); v > 0 {
			targets = append(targets, Target{Name: g.name, What: g.what, Unit: "ms", Op: "<=", Goal: g.goal, Value: round(v, 1),
				Status: evaluate(v, "<=", g.goal)})
		}
	}
	for _, g := range []struct{ latency, name, what string }{
		{LatencySessionCreate, "session_create_p50", "session creation (REST) in a burst p50"},
		{LatencySessionCreateGrown, "session_create_grown_p50", "  again, the pool grown, p50"},
	} {
		if v := p50(g.latency); v > 0 {
			targets = append(targets, Target{Name: g.name, What: g.what, Unit: "ms", Op: "<=", Goal: MaxSessionCreateMS, Value: round(v, 1),
				Status: evaluate(v, "<=", MaxSessionCreateMS)})
		}
	}
	targets = append(targets, portTargets(p50)...)
	targets = append(targets, secretTargets(p50)...)
	targets = append(targets, lifecycleTargets(p50)...)
	targets = append(targets, kubernetesTargets(r)...)
	for _, g := range []struct {
		name, what, latency string
		goal                float64
	}{
		{"e2b_create_p50", "E2B API: Sandbox.create p50", LatencyE2BCreate, MaxE2BCreateMS},
		{"e2b_first_run_p50", "E2B API: first run_code('print(1)') p50", LatencyE2BFirstRun, MaxE2BFirstRunMS},
	} {
		if v := p50(g.latency); v > 0 { // a daemon with sessions off has none
			targets = append(targets, Target{Name: g.name, What: g.what, Unit: "ms", Op: "<=", Goal: g.goal, Value: round(v, 1), Status: evaluate(v, "<=", g.goal)})
		}
	}
	return targets
}

// MaxSessionCreateMS is the goal of a session's creation through REST (issue 46).
const MaxSessionCreateMS = 50

// The E2B API's goals (issue 30): a sandbox ready in 50 ms, its first run_code in 20 ms.
const (
	MaxE2BCreateMS   = 50
	MaxE2BFirstRunMS = 20
)

// evaluate says whether value op goal holds.
func evaluate(value float64, op string, goal float64) string {
	var met bool
	switch op {
	case "<=":
		met = value <= goal
	case ">=":
		met = value >= goal
	case "<":
		met = value < goal
	default:
		panic("bench: unknown operator " + op)
	}
	if met {
		return StatusMet
	}
	return StatusNotMet
}

// WriteTable writes r as plain-text tables: latency, throughput, memory and targets.
func WriteTable(w io.Writer, r Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "sandpit bench: %d CPUs (box: %g), image %s, took %s\n\n", r.CPUs, r.BoxCPUs, r.Image,
		time.Duration(r.ElapsedSeconds*float64(time.Second)).Round(time.Second))

	fmt.Fprintf(&b, "%-50s %5s %9s %9s %9s %8s %8s  %s\n", "latency (sequential, one client)", "runs", "p50 ms", "p95 ms", "p99 ms", "runs/s",
		"cpu ms", "start")
	for _, l := range r.Latency {
		label := "   " + l.What
		if l.Baseline != "" {
			label = l.Baseline + "  " + l.What
		}
		cpu := ""
		if l.BoxCPUMSPerRun > 0 {
			cpu = fmt.Sprintf("%.1f", l.BoxCPUMSPerRun)
		}
		fmt.Fprintf(&b, "%-50s %5d %9.1f %9.1f %9.1f %8.1f %8s  %s\n", label, l.Runs, l.P50MS, l.P95MS, l.P99MS, l.RunsPerSec, cpu, starts(l.Starts))
	}

	fmt.Fprintf(&b, "\nthroughput: print(1) through REST, %gs per level\n", r.ThroughputSeconds)
	fmt.Fprintf(&b, "%7s %8s %7s %7s %6s %7s %9s %9s %15s %18s\n", "clients", "runs/s", "ok", "not ok", "429", "errors", "p50 ms", "p99 ms",
		"box cpu ms/run", "daemon cpu ms/run")
	for _, t := range r.Throughput {
		fmt.Fprintf(&b, "%7d %8.1f %7d %7d %6d %7d %9.1f %9.1f %15s %18s\n", t.Clients, t.RunsPerSec, t.OK, t.NotOK, t.Busy, t.Errors,
			t.P50MS, t.P99MS, optional(t.BoxCPUMSPerRun), optional(t.DaemonCPUMSPerRun))
	}

	m := r.Memory
	fmt.Fprintf(&b, "\n%-28s %12s %20s\n", "memory", "idle", "under load (peak)")
	fmt.Fprintf(&b, "%-28s %12s %20s\n", "daemon RSS", mibText(m.DaemonIdleRSS), mibText(m.DaemonLoadPeakRSS))
	if m.DaemonIdleAnon > 0 || m.DaemonIdleFile > 0 {
		fmt.Fprintf(&b, "%-28s %12s\n", "  of it anonymous (its own)", mibText(m.DaemonIdleAnon))
		fmt.Fprintf(&b, "%-28s %12s\n", "  of it its binary's pages", mibText(m.DaemonIdleFile))
	}
	fmt.Fprintf(&b, "%-28s %12s %20s\n", fmt.Sprintf("boxes (%d containers)", r.Slots), mibText(m.BoxIdle), mibText(m.BoxLoadPeak))
	fmt.Fprintf(&b, "%-28s %12s %20s\n", "executor RSS (peak: VmHWM)", mibText(m.ExecutorIdleRSS), mibText(m.ExecutorPeakRSS))

	writePreload(&b, r.Preload)

	if len(r.Variants) > 0 {
		fmt.Fprintf(&b, "\n%-46s %6s %9s %14s %14s %16s %12s\n", "layouts", "slots", "ready s", "print p50 ms", "pandas p50 ms", "boxes idle", "daemon idle")
		fmt.Fprintf(&b, "%-46s %6d %9.2f %14.1f %14.1f %16s %12s\n", "this daemon", r.Slots, r.ReadySeconds,
			latencyP50(r, LatencyRESTPrint), latencyP50(r, LatencyRESTPandas), mibText(m.BoxIdle), mibText(m.DaemonIdleRSS))
		for _, v := range r.Variants {
			fmt.Fprintf(&b, "%-46s %6d %9.2f %14.1f %14.1f %16s %12s\n", v.label(), v.Slots, v.ReadySeconds,
				v.RESTPrint.P50MS, v.RESTPandas.P50MS, mibText(v.BoxIdle), mibText(v.DaemonIdleRSS))
		}
	}

	writeKubernetes(&b, r)

	fmt.Fprintf(&b, "\n%-52s %10s %11s  %s\n", "target", "value", "goal", "status")
	for _, t := range r.Targets {
		value := "-"
		if t.Status != StatusNA || t.Value != 0 {
			value = figure(t.Value, t.Unit)
		}
		status := t.Status
		if t.Note != "" {
			status += " (" + t.Note + ")"
		}
		fmt.Fprintf(&b, "%-52s %10s %11s  %s\n", t.What, value, opText(t.Op)+" "+goalText(t.Goal, t.Unit), status)
	}
	var out strings.Builder
	for line := range strings.Lines(b.String()) {
		out.WriteString(strings.TrimRight(line, " \n") + "\n")
	}
	_, err := io.WriteString(w, out.String())
	return err
}

// writePreload writes the preload's table: the fork server's memory and the fork floors.
func writePreload(b *strings.Builder, p Preload) {
	if p.Server == nil && len(p.ForkFloors) == 0 {
		return
	}
	fmt.Fprintf(b, "\npreload: %s\n", strings.Join(p.Modules, " "))
	fmt.Fprintf(b, "%-44s %10s %10s %10s %5s %9s %11s %11s\n", "in slot 0's box", "RSS", "PSS", "anon", "maps", "import ms", "fork cpu ms", "fork p50 ms")
	if s := p.Server; s != nil {
		fmt.Fprintf(b, "%-44s %10s %10s %10s\n", "the fork server", mibText(s.RSS), mibText(s.PSS), mibText(s.Anon))
		if s.GroupPSS > 0 {
			fmt.Fprintf(b, "%-44s %10s %10s\n", fmt.Sprintf("  and its waiting children (%d)", s.Children), "", mibText(s.GroupPSS))
		}
	}
	for _, f := range p.ForkFloors {
		label := "fork floor: " + f.Label
		if len(f.Skipped) > 0 {
			label += fmt.Sprintf(" (%d skipped)", len(f.Skipped))
		}
		fmt.Fprintf(b, "%-44s %10s %10s %10s %5d %9.0f %11.2f %11.2f\n", label, mibText(f.RSS), mibText(f.PSS), mibText(f.Anon),
			f.Mappings, f.ImportMS, f.CPUMSPerFork, f.WallP50MS)
	}
}

// label names v in the layouts table: its flags, or its environment.
func (v Variant) label() string {
	return strings.Join(append(slices.Clone(v.Flags), v.Env...), " ")
}

// latencyP50 is the p50 of r's latency measurement name, 0 when it has none (or no runs).
func latencyP50(r Report, name string) float64 { return latencyOf(r, name).P50MS }

// latencyOf is r's latency measurement name, zero when it has none (or no runs).
func latencyOf(r Report, name string) Latency {
	for _, l := range r.Latency {
		if l.Name == name && l.Runs > 0 {
			return l
		}
	}
	return Latency{}
}

// starts formats start counts: "fork" when every run had one kind, "fork 18, cold 2" when
// they differ, "" when none was reported.
func starts(m map[string]int) string {
	kinds := slices.Sorted(maps.Keys(m))
	if len(kinds) == 1 {
		return kinds[0]
	}
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// optional formats a figure that is 0 when it was not measured.
func optional(v float64) string {
	if v == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", v)
}

func opText(op string) string {
	switch op {
	case "<=":
		return "≤"
	case ">=":
		return "≥"
	}
	return op
}

func figure(v float64, unit string) string {
	if unit == "x" {
		return fmt.Sprintf("%.2fx", v)
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

func goalText(v float64, unit string) string {
	if unit == "x" {
		return fmt.Sprintf("%gx", v)
	}
	return fmt.Sprintf("%g %s", v, unit)
}

func mibText(bytes int64) string {
	if bytes <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f MiB", mib(bytes))
}

func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }

// round rounds v to digits decimal places.
func round(v float64, digits int) float64 {
	p := math.Pow10(digits)
	return math.Round(v*p) / p
}
