// Package bench measures sandpit's speed against the baselines it replaces, in one run,
// against one warm container, on loopback only: `sandpit bench`.
//
// Run starts its own daemon (a child `sandpit serve` on a fresh temporary data directory and a
// free loopback port, so a user's daemon and ledger are never touched), waits for it, warms
// up, and times:
//
//   - baseline A: a `docker exec` of python3 -c 'print(1)' in the warm container through the
//     Docker Engine API (what people do without sandpit);
//   - baseline B: python3 -c 'print(1)' started by sandpit-executor in the container, with no
//     HTTP or session around it (`sandpit-executor spawn-time`, timed inside the box);
//   - print(1) through the REST API, end to end, one client, sequentially;
//   - a pandas snippet through the REST API, and the same snippet in a fresh python3 started
//     by sandpit-executor (baseline C);
//   - an analysis program (a pandas groupby, a pyplot chart saved as a PNG file, a scipy.stats
//     test, a bs4 parse, a PIL resize) through the REST API, and the same program in a fresh
//     python3 started by sandpit-executor (baseline D);
//   - the boxes' CPU time per run of each REST measurement, and its floor: the CPU time of a
//     bare fork and exit of a process holding the same preload, in the same box (ForkFloor),
//     with the fork server's memory and that of the preload before it grew (SmallPreload);
//   - the throughput of print(1) through REST at 1, 4 and 16 concurrent clients;
//   - the resident memory of the daemon, the container and the executor, idle and under load.
//
// Then it stops the daemon and removes its container, volume and data directory, also when
// the measurement fails or ctx ends. Percentiles are nearest-rank (see Percentile). The
// package knows nothing of the command line; internal/cli wires it to `sandpit bench`.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/datadir"
	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
)

// Options configures Run; DefaultOptions gives the counts.
type Options struct {
	// Config is the configuration the bench's daemon runs with, loaded the way every command
	// loads it; Run uses its Docker host, base image and token. Its DataDir and Listen are
	// replaced by the bench's own.
	Config config.Config
	// Serve is the command line that starts a daemon with that configuration: the program,
	// "serve" and the configuration flags the user gave, for example
	// ["/usr/local/bin/sandpit", "serve", "--base-image=sandpit-base:bookworm-2"]. Run appends
	// --data-dir and --listen.
	Serve []string
	// Runs is how many print(1) runs are timed through REST and as baseline B, and how many
	// forks each fork floor times.
	Runs int
	// SlowRuns is how many runs are timed for the pandas snippet and the analysis program
	// through REST and for baselines A, C and D.
	SlowRuns int
	// Warmup is how many runs of each kind are made, and discarded, before anything is timed.
	Warmup int
	// Duration is how long each throughput level lasts.
	Duration time.Duration
	// Clients are the throughput's concurrency levels; memory under load is sampled during
	// the last one.
	Clients []int
	// Compare names the other layouts measured beside the main daemon in the same run, each a
	// daemon of its own: VariantSingle (one container, one slot; skipped when the main
	// daemon has one slot), VariantRunsc (gVisor; skipped when the engine has no runsc or
	// the main daemon uses it) and VariantSmallPreload (the fork server preloading
	// SmallPreload; skipped when the main daemon has no fork server or that preload).
	Compare []string
	// Kubernetes, when set, names a daemon with the Kubernetes runtime measured beside the main
	// one, after the main one's rows and before the variants: print(1) on its warm pods in turns
	// with the main one's, sessions from its warm pool and a slot pod's start
	// (Report.Kubernetes).
	Kubernetes *KubernetesOptions
	// Progress receives a line per step (nil: none).
	Progress io.Writer
	// DaemonLog receives the daemon's own log as it comes (nil: only its end is kept, and shown
	// when the daemon fails).
	DaemonLog io.Writer
}

// DefaultOptions returns the counts that keep a bench around a few minutes on a 2-CPU
// machine: 50 print(1) runs (and forks of each fork floor), 20 of the slow kinds, 3 warm-up
// runs of each kind, 5 s at 1, 4 and 16 clients, and every variant.
func DefaultOptions() Options {
	return Options{Runs: 50, SlowRuns: 20, Warmup: 3, Duration: 5 * time.Second, Clients: []int{1, 4, 16},
		Compare: []string{VariantSingle, VariantRunsc, VariantSmallPreload, VariantPlain}}
}

func (o Options) validate() error {
	switch {
	case len(o.Serve) < 2:
		return errors.New("bench: Options.Serve must name the program and its serve command")
	case o.Runs < 1 || o.SlowRuns < 1 || o.Runs > MaxRuns || o.SlowRuns > MaxRuns:
		return fmt.Errorf("bench: runs (%d) and slow runs (%d) must be 1 to %d", o.Runs, o.SlowRuns, MaxRuns)
	case o.Warmup < 0:
		return fmt.Errorf("bench: warm-up runs (%d) must not be negative", o.Warmup)
	case o.Duration <= 0:
		return fmt.Errorf("bench: the throughput duration (%s) must be positive", o.Duration)
	case len(o.Clients) == 0 || slices.Min(o.Clients) < 1:
		return fmt.Errorf("bench: concurrency levels %v must be at least 1", o.Clients)
	}
	if k := o.Kubernetes; k != nil && (k.File == "" || k.Config.Runtime != config.RuntimeKubernetes) {
		return fmt.Errorf("bench: Options.Kubernetes must name a config file with runtime %q (got %q, runtime %q)", config.RuntimeKubernetes, k.File, k.Config.Runtime)
	}
	for _, v := range o.Compare {
		if v != VariantSingle && v != VariantRunsc && v != VariantSmallPreload && v != VariantPlain {
			return fmt.Errorf("bench: %q is not a layout to compare with: use %q, %q, %q or %q", v, VariantSingle, VariantRunsc, VariantSmallPreload, VariantPlain)
		}
	}
	return nil
}

// MaxRuns is the most runs of one kind a bench may time (sandpit-executor spawn-time's limit).
const MaxRuns = 100_000

// dataDirPrefix begins the name of every bench's data directory, in the temporary directory.
const dataDirPrefix = "sandpit-bench-"

// readyTimeout bounds the wait for the daemon's sandbox (the image is already built by then).
const readyTimeout = 2 * time.Minute

// stopGrace is how long the daemon gets to stop after SIGTERM (its own shutdown takes at most
// 15 s) before it is killed.
const stopGrace = 30 * time.Second

// cleanupTimeout bounds the removal of the bench's container and volume.
const cleanupTimeout = time.Minute

// Run runs the whole bench and returns its report. Missing a target is not an error: the
// report says so. An error means the measurement itself failed, with a nil report, or ctx
// ended: the error is then context.Cause(ctx), with the report of what was measured before
// (its targets judged on those figures alone), nil if nothing was. The bench's daemon,
// container and data directory are removed either way, and a failure to remove them is
// reported on Progress, not returned.
func Run(ctx context.Context, opts Options) (rep *Report, err error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	b := &bench{opts: opts, progress: opts.Progress}
	if b.progress == nil {
		b.progress = io.Discard
	}
	started := time.Now()
	defer func() {
		if cerr := b.cleanup(ctx); cerr != nil {
			b.say("warning: %v", cerr)
		}
		if rep != nil {
			rep.ElapsedSeconds = round(time.Since(started).Seconds(), 1)
		}
	}()
	rep, err = b.run(ctx)
	if err != nil {
		if ctx.Err() != nil {
			if rep != nil {
				rep.Targets = Targets(*rep)
			}
			return rep, context.Cause(ctx)
		}
		return nil, err
	}
	return rep, nil
}

// bench is one run of the bench and what it must clean up.
type bench struct {
	opts     Options
	progress io.Writer

	api       *client.Client // nil until the first daemon starts
	instances []*instance    // every daemon started, for cleanup
	// secretHosts are the HTTPS hosts of the secrets' measurement (nil: not measured).
	secretHosts *secretHosts
	scratch     []string // directories of the bench's own files, removed at its end
}

// instance is one daemon the bench started, on its own data directory, and its containers.
type instance struct {
	cfg     config.Config // with the instance's data directory
	dataDir string        // canonical
	daemon  *daemon
	rest    *restClient
	box     *box
	ready   time.Duration // from the daemon's start to its sandbox being ready
	kube    *kubeDaemon   // the Kubernetes daemon's pods and Lease, deleted at its end; nil for Docker
}

func (b *bench) say(format string, args ...any) {
	fmt.Fprintf(b.progress, "bench: "+format+"\n", args...)
}

func (b *bench) run(ctx context.Context) (*Report, error) {
	opts := b.opts
	rep := &Report{CPUs: runtime.NumCPU(), BoxCPUs: opts.Config.CPUs, ThroughputSeconds: opts.Duration.Seconds()}
	in, err := b.prepare(ctx, rep)
	if err != nil {
		return nil, err
	}
	// From here, an error returns what was measured before it too (see Run).
	b.idleMemory(ctx, in, rep)
	if err := b.latencies(ctx, in, rep); err != nil {
		return rep, err
	}
	if err := b.sessionLatencies(ctx, in, rep); err != nil {
		return rep, err
	}
	if err := b.sessionCreateLatency(ctx, in, rep); err != nil {
		return rep, err
	}
	if err := b.portLatencies(ctx, in, rep); err != nil {
		return rep, err
	}
	if err := b.secretLatencies(ctx, in, rep); err != nil {
		return rep, err
	}
	if err := b.lifecycleLatencies(ctx, in, rep); err != nil {
		return rep, err
	}
	if err := b.e2bLatencies(ctx, in, rep); err != nil {
		return rep, err
	}
	if err := b.preload(ctx, in, rep); err != nil {
		return rep, err
	}
	if err := b.throughput(ctx, in, rep); err != nil {
		return rep, err
	}
	if _, rep.Memory.ExecutorPeakRSS, err = in.box.executorMemory(ctx); err != nil {
		b.say("warning: %v", err)
	}
	if opts.Kubernetes != nil {
		// The Kubernetes daemon starts beside this one, whose print(1) it is timed in turns
		// with; measureKubernetes stops this one then.
		if rep.Kubernetes, err = b.measureKubernetes(ctx, in); err != nil {
			return rep, fmt.Errorf("measuring the daemon with the Kubernetes runtime (%s): %w", opts.Kubernetes.File, err)
		}
	}
	if err := b.stop(ctx, in); err != nil {
		b.say("warning: %v", err)
	}
	for _, v := range b.variants(ctx, in.cfg) {
		m, err := b.measureVariant(ctx, v)
		if err != nil {
			return rep, fmt.Errorf("measuring the daemon with %s: %w", v.label(), err)
		}
		rep.Variants = append(rep.Variants, m)
	}
	rep.Targets = Targets(*rep)
	return rep, nil
}

// prepare builds the sandbox image if needed, removes what earlier benches left, starts the
// main daemon and warms it up.
func (b *bench) prepare(ctx context.Context, rep *Report) (*instance, error) {
	b.say("checking the sandbox image (the first time, building it takes a few minutes)")
	tag, built, err := app.BuildImage(ctx, b.opts.Config, b.progress)
	if err != nil {
		return nil, err
	}
	rep.Image = tag
	if built {
		b.say("built %s", tag)
	}
	b.removeStale(ctx)
	var main variant
	if b.opts.Config.Network == "allowlist" {
		dir, err := os.MkdirTemp("", dataDirPrefix)
		if err == nil {
			b.scratch = append(b.scratch, dir)
			b.secretHosts, err = startSecretHosts(b.opts.Config, dir)
		}
		if err != nil {
			b.say("warning: the secrets' GETs are not measured: %v", err)
		} else {
			main.env = b.secretHosts.env(b.opts.Config)
		}
	} else {
		b.say("the secrets' GETs are not measured: they need network \"allowlist\", the daemon's is %q", b.opts.Config.Network)
	}
	in, err := b.start(ctx, main)
	if err != nil {
		return nil, err
	}
	rep.ReadySeconds, rep.Slots = round(in.ready.Seconds(), 2), len(in.box.ids)
	if err := b.settle(ctx, in); err != nil {
		return nil, err
	}
	if err := b.warmUp(ctx, in, true); err != nil {
		return nil, fmt.Errorf("warming up: %w", err)
	}
	return in, b.settle(ctx, in)
}

// The boxes are idle when they use less than settleCPU of CPU time each, on average, over
// settleInterval (an idle box under gVisor uses about 4% of a CPU; a fork server importing
// its preload, all its box may have); settle waits up to settleTimeout for that.
const (
	settleInterval = time.Second
	settleCPU      = 75 * time.Millisecond
	settleTimeout  = 3 * time.Minute
)

// settle waits until in's boxes are idle: a daemon is ready once slot 0 is, and the slots'
// fork servers import their preload after that (seconds of CPU each), which would otherwise
// be measured as the runs' cost (or make the warm-up's runs start cold). After
// settleTimeout it measures anyway, with a warning; it fails only when ctx ends.
func (b *bench) settle(ctx context.Context, in *instance) error {
	deadline := time.Now().Add(settleTimeout)
	prev, err := in.box.cpuTime(ctx)
	for err == nil {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(settleInterval):
		}
		var cur time.Duration
		if cur, err = in.box.cpuTime(ctx); err != nil {
			break
		}
		if used := cur - prev; used < settleCPU*time.Duration(len(in.box.ids)) {
			return nil
		} else if time.Now().After(deadline) {
			b.say("warning: the boxes still used %.0f%% of a CPU after %s; measuring anyway", 100*used.Seconds()/settleInterval.Seconds(), settleTimeout)
			return nil
		}
		prev = cur
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	b.say("warning: not waiting for the boxes to be idle: %v", err)
	return nil
}

// idleMemory reads the memory of the daemon, the boxes and the executor after the warm-up; a
// figure that cannot be read is left 0, with a warning.
func (b *bench) idleMemory(ctx context.Context, in *instance, rep *Report) {
	b.say("reading the memory of the daemon, the boxes and the executor, idle")
	if dm, err := readMemory(in.daemon.pid()); err != nil {
		b.say("warning: %v", err)
	} else {
		rep.Memory.DaemonIdleRSS, rep.Memory.DaemonIdleAnon, rep.Memory.DaemonIdleFile = dm.rss, dm.anon, dm.file
	}
	var err error
	if rep.Memory.BoxIdle, err = in.box.memory(ctx); err != nil {
		b.say("warning: %v", err)
	}
	if rep.Memory.ExecutorIdleRSS, _, err = in.box.executorMemory(ctx); err != nil {
		b.say("warning: %v", err)
	}
}

// latencies times the sequential measurements: the baselines, and print(1), the pandas
// snippet and the analysis program through REST (with the boxes' CPU per run).
func (b *bench) latencies(ctx context.Context, in *instance, rep *Report) error {
	opts := b.opts
	baseline := func(f func() ([]time.Duration, error)) func() ([]time.Duration, map[string]int, float64, error) {
		return func() ([]time.Duration, map[string]int, float64, error) { d, err := f(); return d, nil, 0, err }
	}
	rest := func(p program, n int) func() ([]time.Duration, map[string]int, float64, error) {
		return func() ([]time.Duration, map[string]int, float64, error) { return in.timedREST(ctx, p, n) }
	}
	steps := []struct {
		name, baseline, what string
		measure              func() ([]time.Duration, map[string]int, float64, error)
	}{
		{LatencyDockerExec, "A", "docker exec python3 -c 'print(1)'", baseline(func() ([]time.Duration, error) {
			return in.box.dockerExec(ctx, printProgram(), opts.SlowRuns)
		})},
		{LatencySpawnPrint, "B", "executor spawns python3 -c 'print(1)'", baseline(func() ([]time.Duration, error) {
			return in.box.spawnTime(ctx, printProgram(), opts.Runs)
		})},
		{LatencyRESTPrint, "", "sandpit REST print(1)", rest(printProgram(), opts.Runs)},
		{LatencySpawnPandas, "C", "executor spawns python3 -c <pandas snippet>", baseline(func() ([]time.Duration, error) {
			return in.box.spawnTime(ctx, pandasProgram(), opts.SlowRuns)
		})},
		{LatencyRESTPandas, "", "sandpit REST <pandas snippet>", rest(pandasProgram(), opts.SlowRuns)},
		{LatencySpawnAnalysis, "D", "executor spawns python3 -c <analysis>", baseline(func() ([]time.Duration, error) {
			return in.box.spawnInDirectory(ctx, analysisProgram(), opts.SlowRuns)
		})},
		{LatencyRESTAnalysis, "", "sandpit REST <analysis>", rest(analysisProgram(), opts.SlowRuns)},
		{LatencyRESTDescribe, "", "sandpit REST <df.describe()>", rest(describeProgram(), opts.SlowRuns)},
	}
	for _, s := range steps {
		t0 := time.Now()
		durations, starts, cpu, err := s.measure()
		if err != nil {
			return fmt.Errorf("measuring %s: %w", s.what, err)
		}
		l := newLatency(s.name, s.baseline, s.what, durations, starts)
		l.BoxCPUMSPerRun = cpu
		b.say("%s: %d runs, p50 %.1f ms (%.1fs)", s.what, l.Runs, l.P50MS, time.Since(t0).Seconds())
		rep.Latency = append(rep.Latency, l)
	}
	return nil
}

// timedREST runs p n times through in's REST API, one after the other, and returns the
// durations, the start kinds and the boxes' CPU time per run in milliseconds (0 when it could
// not be read).
func (in *instance) timedREST(ctx context.Context, p program, n int) ([]time.Duration, map[string]int, float64, error) {
	cpu0 := in.cpuTimes(ctx)
	durations, starts, err := in.rest.sequential(ctx, p, n)
	if err != nil {
		return nil, nil, 0, err
	}
	cpu1 := in.cpuTimes(ctx)
	return durations, starts, cpuPerRun(cpu0.box, cpu1.box, n), nil
}

// preload measures what the preload costs in slot 0's box: the fork server's memory, and the
// fork floor of the daemon's preload, of SmallPreload and of none (see ForkFloor), each with
// opts.Runs forks.
func (b *bench) preload(ctx context.Context, in *instance, rep *Report) error {
	rep.Preload.Modules = slices.Clip(in.cfg.Preload)
	floors := []struct {
		label   string
		modules []string
	}{{"this daemon's preload", in.cfg.Preload}, {"the small preload", SmallPreload}, {"no preload", nil}}
	var done [][]string
	for _, f := range floors {
		if slices.ContainsFunc(done, func(m []string) bool { return slices.Equal(m, f.modules) }) {
			continue
		}
		done = append(done, f.modules)
		b.say("fork floor of %s: importing it in slot 0's box and timing %d bare forks", f.label, b.opts.Runs)
		floor, server, err := in.box.forkFloor(ctx, f.label, f.modules, b.opts.Runs)
		if err != nil {
			return err
		}
		if rep.Preload.Server == nil {
			rep.Preload.Server = server
		}
		for name, reason := range floor.Skipped {
			b.say("warning: the fork floor of %s could not import %s: %s", f.label, name, reason)
		}
		b.say("%s: RSS %s, a fork and exit %.2f ms of CPU (%s)", f.label, mibText(floor.RSS), floor.CPUMSPerFork, floor.CPUSource)
		rep.Preload.ForkFloors = append(rep.Preload.ForkFloors, floor)
	}
	return nil
}

// throughput measures print(1) through REST at each concurrency level, with the CPU per run,
// and samples the memory under load during the last level.
func (b *bench) throughput(ctx context.Context, in *instance, rep *Report) error {
	opts := b.opts
	for i, clients := range opts.Clients {
		b.say("throughput: print(1) from %d concurrent client(s) for %s", clients, opts.Duration)
		var stopSampling func() (int64, int64)
		if i == len(opts.Clients)-1 {
			stopSampling = in.sampleMemory(ctx)
		}
		cpu0 := in.cpuTimes(ctx)
		l, err := in.rest.throughput(ctx, printProgram(), clients, opts.Duration)
		cpu1 := in.cpuTimes(ctx)
		if stopSampling != nil {
			rep.Memory.DaemonLoadPeakRSS, rep.Memory.BoxLoadPeak = stopSampling()
		}
		if err != nil {
			return err
		}
		if len(l.ok) == 0 {
			return fmt.Errorf("throughput at %d clients: no run ended ok (%d not ok, %d busy, %d errors; the last: %v)",
				clients, l.notOK, l.busy, l.errors, l.lastErr)
		}
		if l.lastErr != nil {
			b.say("warning: at %d clients %d run(s) were not ok and %d failed; the last: %v", clients, l.notOK, l.errors, l.lastErr)
		}
		th := newThroughput(l)
		th.BoxCPUMSPerRun = cpuPerRun(cpu0.box, cpu1.box, th.OK)
		th.DaemonCPUMSPerRun = cpuPerRun(cpu0.daemon, cpu1.daemon, th.OK)
		b.say("%d client(s): %.1f runs/s, p50 %.1f ms", clients, th.RunsPerSec, th.P50MS)
		rep.Throughput = append(rep.Throughput, th)
	}
	return nil
}

// variant is a daemon measured beside the main one, with flags added to its command line and
// variables to its environment.
type variant struct {
	name  string
	flags []string
	env   []string
	kube  *kubeDaemon // a daemon with the Kubernetes runtime: its pods and Lease, to delete
}

// label names the variant by what it changes.
func (v variant) label() string { return strings.Join(append(slices.Clone(v.flags), v.env...), " ") }

// variants are the other layouts measured in the same run: a single container (one slot),
// when the main daemon has a pool; gVisor, when the engine has runsc and the main daemon does
// not use it; and SmallPreload, when the main daemon has a fork server with another preload.
func (b *bench) variants(ctx context.Context, cfg config.Config) []variant {
	var vs []variant
	if cfg.Slots > 1 && slices.Contains(b.opts.Compare, VariantSingle) {
		vs = append(vs, variant{name: VariantSingle, flags: []string{"--slots=1"}})
	}
	if cfg.Runtime != "runsc" && slices.Contains(b.opts.Compare, VariantRunsc) {
		if info, err := b.api.Info(ctx, client.InfoOptions{}); err == nil {
			if _, ok := info.Info.Runtimes["runsc"]; ok {
				vs = append(vs, variant{name: VariantRunsc, flags: []string{"--runtime=runsc", "--network=none"}})
			}
		}
	}
	if cfg.ForkServer && !slices.Equal(cfg.Preload, SmallPreload) && slices.Contains(b.opts.Compare, VariantSmallPreload) {
		vs = append(vs, variant{name: VariantSmallPreload, env: []string{config.EnvName("preload") + "=" + strings.Join(SmallPreload, ",")}})
	}
	if cfg.Notebook && slices.Contains(b.opts.Compare, VariantPlain) {
		vs = append(vs, variant{name: VariantPlain, env: []string{config.EnvName("notebook") + "=false"}})
	}
	return vs
}

// measureVariant starts a daemon with v's flags and environment and measures what the layouts
// are compared by: the time to ready, idle memory, and print(1) and pandas p50 through REST
// (with the boxes' CPU per run).
func (b *bench) measureVariant(ctx context.Context, v variant) (Variant, error) {
	b.say("measuring a daemon with %s beside it", v.label())
	in, err := b.start(ctx, v)
	if err != nil {
		return Variant{}, err
	}
	defer func() {
		if err := b.stop(ctx, in); err != nil {
			b.say("warning: %v", err)
		}
	}()
	m := Variant{Name: v.name, Flags: slices.Clip(v.flags), Env: slices.Clip(v.env), Slots: len(in.box.ids), ReadySeconds: round(in.ready.Seconds(), 2)}
	if m.Flags == nil {
		m.Flags = []string{}
	}
	if err := b.settle(ctx, in); err != nil {
		return Variant{}, err
	}
	if err := b.warmUp(ctx, in, false); err != nil {
		return Variant{}, fmt.Errorf("warming up: %w", err)
	}
	if err := b.settle(ctx, in); err != nil {
		return Variant{}, err
	}
	if m.DaemonIdleRSS, err = readRSS(in.daemon.pid()); err != nil {
		b.say("warning: %v", err)
	}
	if m.BoxIdle, err = in.box.memory(ctx); err != nil {
		b.say("warning: %v", err)
	}
	for _, step := range []struct {
		p     program
		runs  int
		into  *Latency
		name  string
		label string
	}{{printProgram(), b.opts.Runs, &m.RESTPrint, LatencyRESTPrint, "print(1)"},
		{pandasProgram(), b.opts.SlowRuns, &m.RESTPandas, LatencyRESTPandas, "<pandas snippet>"}} {
		durations, starts, cpu, err := in.timedREST(ctx, step.p, step.runs)
		if err != nil {
			return Variant{}, err
		}
		*step.into = newLatency(step.name, "", "sandpit REST "+step.label, durations, starts)
		step.into.BoxCPUMSPerRun = cpu
		b.say("%s: %s p50 %.1f ms", v.name, step.label, step.into.P50MS)
	}
	return m, nil
}

// start creates a data directory, starts a daemon on it with the bench's configuration and
// v's flags and environment (none for the main daemon), waits for it to be ready and finds
// its containers.
func (b *bench) start(ctx context.Context, v variant) (*instance, error) {
	in, err := b.launch(ctx, v)
	if err != nil {
		return nil, err
	}
	ids, err := b.containers(ctx, in)
	if err != nil {
		return nil, err
	}
	in.box = &box{api: b.api, ids: ids}
	b.say("daemon ready in %.1fs (%d container(s), the first %.12s)", in.ready.Seconds(), len(ids), ids[0])
	return in, nil
}

// launch creates a data directory, starts a daemon on it with the bench's configuration and
// v's flags and environment, and waits until it answers ready; the instance is cleaned up
// with the others.
func (b *bench) launch(ctx context.Context, v variant) (*instance, error) {
	tmp, err := os.MkdirTemp("", dataDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("creating the bench's data directory: %w (set TMPDIR to a writable directory)", err)
	}
	in := &instance{kube: v.kube}
	if in.dataDir, err = datadir.Canonical(tmp); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	b.instances = append(b.instances, in)
	in.cfg = b.opts.Config
	in.cfg.DataDir = in.dataDir
	if b.api == nil {
		if b.api, err = app.DockerClient(in.cfg); err != nil {
			return nil, err
		}
	}
	t0 := time.Now()
	if in.daemon, err = startDaemon(append(slices.Clip(b.opts.Serve), v.flags...), v.env, in.dataDir, b.opts.DaemonLog); err != nil {
		return nil, err
	}
	in.rest = newRESTClient("http://"+in.daemon.addr, in.cfg.Token, slices.Max(b.opts.Clients))
	b.say("started a daemon (pid %d) on http://%s with data directory %s; waiting for its sandbox", in.daemon.pid(), in.daemon.addr, in.dataDir)
	readyCtx, cancel := context.WithTimeoutCause(ctx, readyTimeout,
		fmt.Errorf("the bench's daemon was not ready within %s", readyTimeout))
	defer cancel()
	if err := in.rest.ready(readyCtx, 100*time.Millisecond, in.daemon.done); err != nil {
		if in.daemon.exited() {
			return nil, fmt.Errorf("%w\n%w", err, in.daemon.exitError())
		}
		return nil, fmt.Errorf("%w; the end of its log:\n%s", err, in.daemon.log.String())
	}
	in.ready = time.Since(t0)
	return in, nil
}

// containers finds the running containers of an instance's data directory, and checks that
// its daemon is the engine that owns them. A daemon is ready when one slot is: the others are
// waited for, up to readyTimeout.
func (b *bench) containers(ctx context.Context, in *instance) ([]string, error) {
	deadline := time.Now().Add(readyTimeout)
	for {
		_, owner, list, err := app.Sandbox(ctx, in.cfg)
		if err != nil {
			return nil, fmt.Errorf("finding the bench's containers: %w", err)
		}
		if owner != in.daemon.pid() {
			return nil, fmt.Errorf("the bench's data directory %s is owned by process %d, not by the bench's daemon (%d)", in.dataDir, owner, in.daemon.pid())
		}
		// The slots' boxes, slot 0's first: a session's container (the E2B API's warm one)
		// comes and goes with the measurements.
		list = slices.DeleteFunc(list, func(c app.ContainerStatus) bool { return c.Slot < 0 })
		slices.SortFunc(list, func(a, b app.ContainerStatus) int { return a.Slot - b.Slot })
		var ids []string
		for _, c := range list {
			if c.State == string(container.StateRunning) {
				ids = append(ids, c.ID)
			}
		}
		if len(ids) > 0 && len(ids) == len(list) && (len(ids) >= in.cfg.Slots || time.Now().After(deadline)) {
			return ids, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the bench's daemon is ready but %d of %d containers labelled for %s run", len(ids), len(list), in.dataDir)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop stops an instance's daemon and removes its containers, volume and data directory.
func (b *bench) stop(ctx context.Context, in *instance) error {
	i := slices.Index(b.instances, in)
	if i < 0 {
		return nil
	}
	b.instances = slices.Delete(b.instances, i, i+1)
	return b.cleanupInstance(ctx, in)
}

// warmUp makes opts.Warmup runs of every kind through in's REST API (and, with baselines,
// of the baselines' kinds in its box) and discards them.
func (b *bench) warmUp(ctx context.Context, in *instance, baselines bool) error {
	n := b.opts.Warmup
	if n == 0 {
		return nil
	}
	b.say("warming up: %d run(s) of each kind", n)
	for _, p := range []program{printProgram(), pandasProgram()} {
		if _, _, err := in.rest.sequential(ctx, p, n); err != nil {
			return err
		}
		if !baselines {
			continue
		}
		if _, err := in.box.spawnTime(ctx, p, n); err != nil {
			return err
		}
	}
	if baselines { // the analysis program is measured on the main daemon only
		if _, _, err := in.rest.sequential(ctx, analysisProgram(), n); err != nil {
			return err
		}
		if _, err := in.box.spawnInDirectory(ctx, analysisProgram(), n); err != nil {
			return err
		}
	}
	if !baselines {
		return nil
	}
	_, err := in.box.dockerExec(ctx, printProgram(), n)
	return err
}

// cpuTimes is the CPU time the boxes and the daemon have used so far; -1 when it could not be
// read.
type cpuTimes struct{ box, daemon time.Duration }

func (in *instance) cpuTimes(ctx context.Context) cpuTimes {
	t := cpuTimes{box: -1, daemon: -1}
	if d, err := in.box.cpuTime(ctx); err == nil {
		t.box = d
	}
	if d, err := processCPUTime(in.daemon.pid()); err == nil {
		t.daemon = d
	}
	return t
}

// cpuPerRun is the CPU time used between before and after divided by runs, in milliseconds;
// 0 when either was not read or nothing ran.
func cpuPerRun(before, after time.Duration, runs int) float64 {
	if before < 0 || after < before || runs == 0 {
		return 0
	}
	return round(float64(after-before)/float64(time.Millisecond)/float64(runs), 2)
}

// Sampling intervals of the memory under load: the daemon's RSS is a file read; the
// container's use is an Engine API call.
const (
	rssInterval = 100 * time.Millisecond
	boxInterval = 500 * time.Millisecond
)

// sampleMemory samples the daemon's RSS and the containers' memory until the returned
// function is called, which returns their peaks in bytes (0 when no sample could be read).
func (in *instance) sampleMemory(ctx context.Context) (stop func() (daemonPeak, boxPeak int64)) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var daemonMax, boxMax int64
	sample := func(interval time.Duration, read func() (int64, error), peak *int64) {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			if v, err := read(); err == nil {
				*peak = max(*peak, v)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}
	wg.Go(func() { sample(rssInterval, func() (int64, error) { return readRSS(in.daemon.pid()) }, &daemonMax) })
	wg.Go(func() { sample(boxInterval, func() (int64, error) { return in.box.memory(ctx) }, &boxMax) })
	return func() (int64, int64) {
		cancel()
		wg.Wait()
		return daemonMax, boxMax
	}
}

// removeStale removes what earlier benches killed outright left behind: the containers,
// volumes and data directories of bench data directories that no daemon holds.
func (b *bench) removeStale(ctx context.Context) {
	api, err := app.DockerClient(b.opts.Config)
	if err != nil {
		return // reported when the bench's own daemon starts
	}
	defer api.Close()
	dirs, err := docker.DataDirs(ctx, api)
	if err != nil {
		b.say("warning: looking for sandboxes left by earlier benches: %v", err)
		return
	}
	tmp, err := datadir.Canonical(os.TempDir())
	if err != nil {
		return
	}
	for _, dir := range dirs {
		if filepath.Dir(dir) != tmp || !strings.HasPrefix(filepath.Base(dir), dataDirPrefix) {
			continue
		}
		if _, err := os.Stat(dir); err == nil {
			lock, err := datadir.Acquire(dir)
			if err != nil {
				continue // a bench running now
			}
			lock.Release()
		}
		b.say("removing the sandbox an earlier bench left (%s)", dir)
		cfg := b.opts.Config
		cfg.DataDir = dir
		if err := removeSandbox(ctx, api, cfg); err != nil {
			b.say("warning: %v", err)
		}
	}
}

// cleanup stops every daemon the bench started and removes their containers, package volumes
// and data directories. It runs after ctx may have ended, so it has its own deadline.
func (b *bench) cleanup(ctx context.Context) error {
	var errs []error
	for _, in := range b.instances {
		errs = append(errs, b.cleanupInstance(ctx, in))
	}
	b.instances = nil
	if b.secretHosts != nil {
		b.secretHosts.close()
	}
	for _, dir := range b.scratch {
		errs = append(errs, os.RemoveAll(dir))
	}
	if b.api != nil {
		b.api.Close()
	}
	return errors.Join(errs...)
}

// cleanupInstance stops an instance's daemon and removes its containers, package volume and
// data directory, with its own deadline.
func (b *bench) cleanupInstance(ctx context.Context, in *instance) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var errs []error
	if in.rest != nil {
		in.rest.close()
	}
	if in.daemon != nil {
		b.say("stopping the daemon and removing its containers")
		errs = append(errs, in.daemon.stop(stopGrace))
	}
	if in.kube != nil {
		b.say("deleting the Kubernetes daemon's pods and Lease in namespace %s", in.kube.namespace)
		errs = append(errs, in.kube.remove(ctx))
	}
	if b.api == nil { // the engine was never reached: only the directory to remove
		if err := os.RemoveAll(in.dataDir); err != nil {
			errs = append(errs, fmt.Errorf("removing the bench's data directory: %w", err))
		}
		return errors.Join(errs...)
	}
	errs = append(errs, removeSandbox(ctx, b.api, in.cfg))
	return errors.Join(errs...)
}

// removeSandbox removes the container, the package volume and the data directory of a bench's
// data directory, cfg.DataDir (no daemon may be using it).
func removeSandbox(ctx context.Context, api client.APIClient, cfg config.Config) error {
	var errs []error
	if _, err := app.RemoveSandbox(ctx, cfg, true); err != nil {
		errs = append(errs, fmt.Errorf("removing the bench's containers and volume: %w (remove them with: docker rm -f $(docker ps -aq --filter label=dev.sandpit.data-dir=%s); docker volume rm %s)",
			err, cfg.DataDir, docker.VolumeName(cfg.DataDir)))
	}
	if err := os.RemoveAll(cfg.DataDir); err != nil {
		errs = append(errs, fmt.Errorf("removing the bench's data directory: %w", err))
	}
	return errors.Join(errs...)
}
