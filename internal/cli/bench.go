package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/bench"
	"github.com/sandpit-dev/sandpit/internal/config"
)

type benchFlags struct {
	runs, slowRuns, warmup int
	duration, maxTime      time.Duration
	json                   bool
	compare                []string
	kubernetes             string
	kubeDensity            int
	kubeDensityWindow      time.Duration
}

func (o *options) benchCommand() *cobra.Command {
	def := bench.DefaultOptions()
	f := benchFlags{runs: def.Runs, slowRuns: def.SlowRuns, warmup: def.Warmup, duration: def.Duration, maxTime: 30 * time.Minute,
		compare: def.Compare}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure sandpit's speed against docker exec and a bare Python start, on this machine",
		Long: `Measure sandpit against the baselines it replaces, in one run, against its warm containers:

  A  a docker exec of python3 -c 'print(1)' in slot 0's warm container (Docker Engine API)
  B  python3 -c 'print(1)' started by sandpit-executor in the container, without HTTP or a session
     print(1) through the REST API, end to end, one client
  C  a pandas snippet in a fresh python3 started by sandpit-executor
     the same snippet through the REST API
  D  an analysis program (pandas groupby, a pyplot chart saved as PNG, a scipy.stats test,
     a bs4 parse, a PIL resize) in a fresh python3 started by sandpit-executor
     the same program through the REST API
  the containers' CPU per REST run, against the floor of a bare fork and exit of a process
  holding the same preload in slot 0's container; the fork server's memory, and the memory
  and fork floor of the small preload (numpy pandas matplotlib scipy) and of none
  throughput of print(1) through REST at 1, 4 and 16 concurrent clients (--duration each)
  the resident memory of the daemon, the containers and the executor, idle and under load
  sessions through REST: calls, commands and files; creation in a burst of up to 10 in a row,
  then again once the warm pool has grown; a new session's first call importing pandas and
  matplotlib; a GET of 1 KiB from python3 -m http.server in a session through the daemon's
  port path against the same GET inside the box, and 1 MiB through the port (MiB/s)
  with network "allowlist", a run's HTTPS GETs of 1 KiB from a host a secret is bound to (the
  egress proxy adds the value) against the same from an unbound host (its tunnel), both served
  by the bench on two of the machine's addresses
  with --kubernetes-config FILE, a daemon with the Kubernetes runtime started beside the
  first with that config file (runtime "kubernetes" and its kubernetes object: kubeconfig,
  namespace, image; docs/kubernetes.md): print(1) through REST on its warm pods and on the
  first daemon's containers, one run on each in turn (p50, p95 and their ratio), a session's
  creation from its warm pool beside a Docker session's, and a slot pod's start, from the
  pod's creation to its executor answering (the bench deletes slot 0's pod and times the
  replacement); with --kubernetes-density N as well, up to N idle sessions opened at once on
  it (fewer when the cluster has no room: the refusal says what bounds it), and the daemon's
  requests to the API server per minute and resident memory idle without them and with them
  then, each on a daemon of its own (--compare): one container with one slot (the pool is
  compared with it: time to ready, idle memory, print(1) and pandas p50), gVisor (runsc)
  when the engine has it, and the small preload (print(1) must be no slower with the default)

and compare them with sandpit's targets. Latencies are p50, p95 and p99 in milliseconds
(nearest rank) with runs per second; progress goes to stderr, the table (or --json) to stdout.

The bench never touches your daemon or ledger: it starts its own daemon (this binary's serve)
on a temporary data directory and a free port on 127.0.0.1, with your configuration (config
file, SANDPIT_* variables and --base-image, --network, --docker-host), and removes
its container, volume and directory at the end, also on Ctrl-C or failure. The Kubernetes
daemon gets a daemon_id of its own (bench-…); its pods and Lease are deleted at the end.

Exit status 0 when the measurement completed, whether or not the targets were met; 64 for a
usage mistake; 70 when it failed; 130 when interrupted (Ctrl-C, SIGTERM or SIGHUP: it cleans up
first). A bench killed outright leaves its daemon to die with it and its container to the next
bench, which removes it.`,
		Example: `  sandpit bench --base-image sandpit-base:bookworm-2
  sandpit bench --runs 200 --duration 10s --json > bench.json
  sandpit bench --compare "" --kubernetes-config kube.json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.bench(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.runs, "runs", f.runs, "timed print(1) runs through REST and of baseline B")
	fl.IntVar(&f.slowRuns, "slow-runs", f.slowRuns, "timed runs of the pandas snippet through REST and of baselines A and C")
	fl.IntVar(&f.warmup, "warmup", f.warmup, "untimed runs of each kind before measuring")
	fl.DurationVar(&f.duration, "duration", f.duration, "how long each throughput level lasts")
	fl.DurationVar(&f.maxTime, "max-time", f.maxTime, "stop the bench (and clean up) when it takes longer than this")
	fl.BoolVar(&f.json, "json", false, "print the report as JSON")
	fl.StringSliceVar(&f.compare, "compare", f.compare, `layouts measured beside, each on its own daemon: "single" (one container), "runsc" (gVisor), "small-preload", "plain" (the notebook layer off); "" for none`)
	fl.StringVar(&f.kubernetes, "kubernetes-config", "", `a config file with runtime "kubernetes": measure a daemon of it on the cluster beside the Docker one`)
	fl.IntVar(&f.kubeDensity, "kubernetes-density", 0, "with --kubernetes-config: open up to this many idle sessions on it (fewer when the cluster has no room) and measure what they cost the daemon and the API server; 0: not measured")
	fl.DurationVar(&f.kubeDensityWindow, "kubernetes-density-window", time.Minute, "with --kubernetes-density: how long the idle requests are counted, without the sessions and with them")
	return cmd
}

func (o *options) bench(cmd *cobra.Command, f benchFlags) error {
	switch {
	case cmd.Flags().Changed("data-dir"):
		return usageErrorf("sandpit bench runs its own daemon on a temporary data directory: leave out --data-dir")
	case f.runs < 1 || f.slowRuns < 1 || f.runs > bench.MaxRuns || f.slowRuns > bench.MaxRuns:
		return usageErrorf("--runs and --slow-runs must be 1 to %d (got %d and %d)", bench.MaxRuns, f.runs, f.slowRuns)
	case f.warmup < 0:
		return usageErrorf("--warmup must not be negative (got %d)", f.warmup)
	case f.duration < 100*time.Millisecond:
		return usageErrorf("--duration %s is too short to count runs per second: give at least 100ms, e.g. --duration 5s", f.duration)
	case !validCompare(f.compare):
		return usageErrorf("--compare takes single, runsc, small-preload and plain (comma-separated), or \"\" for none; got %q", strings.Join(f.compare, ","))
	case f.kubeDensity < 0 || (f.kubeDensity > 0 && f.kubernetes == ""):
		return usageErrorf("--kubernetes-density must be 0 or more, and goes with --kubernetes-config (got %d)", f.kubeDensity)
	case f.kubeDensityWindow < time.Second:
		return usageErrorf("--kubernetes-density-window %s is too short to count requests: give at least 1s, e.g. 1m", f.kubeDensityWindow)
	case f.maxTime <= 0:
		return usageErrorf("--max-time must be positive, e.g. --max-time 10m")
	case 3*f.duration >= f.maxTime:
		return usageErrorf("--duration %s runs 3 times (1, 4 and 16 clients), which does not fit in --max-time %s: lower --duration or raise --max-time", f.duration, f.maxTime)
	}
	cfg, err := o.load(cmd)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program to start the bench's daemon: %w", err)
	}
	opts := bench.DefaultOptions()
	opts.Config = cfg
	opts.Serve = append([]string{exe, "serve"}, o.configArgs(cmd)...)
	opts.Runs, opts.SlowRuns, opts.Warmup, opts.Duration, opts.Compare = f.runs, f.slowRuns, f.warmup, f.duration, f.compare
	if f.kubernetes != "" {
		kcfg, err := o.loadFile(cmd, f.kubernetes)
		if err != nil {
			return err
		}
		if kcfg.Runtime != config.RuntimeKubernetes {
			return usageErrorf("--kubernetes-config %s sets runtime %q: it must set \"runtime\": \"kubernetes\" and the kubernetes object (docs/kubernetes.md)", f.kubernetes, kcfg.Runtime)
		}
		opts.Kubernetes = &bench.KubernetesOptions{File: f.kubernetes, Config: kcfg, Density: f.kubeDensity, DensityWindow: f.kubeDensityWindow}
	}
	opts.Progress = o.env.Stderr
	if o.verbose {
		opts.DaemonLog = o.env.Stderr
	}

	parent := cmd.Context()
	ctx, cancel := context.WithTimeoutCause(parent, f.maxTime, fmt.Errorf(
		"the bench did not finish within --max-time %s and was stopped: raise --max-time, or lower --runs, --slow-runs or --duration", f.maxTime))
	defer cancel()
	rep, err := bench.Run(ctx, opts)
	if err != nil {
		if parent.Err() != nil {
			fmt.Fprintln(o.env.Stderr, "sandpit: bench interrupted; its daemon and container were removed")
			return reported(context.Canceled)
		}
		if rep == nil {
			return fmt.Errorf("bench failed: %w", err)
		}
		// Stopped at --max-time: what was measured is not lost.
		if perr := o.printReport(rep, f.json); perr != nil {
			return perr
		}
		return fmt.Errorf("bench failed: %w (the report above has what was measured before)", err)
	}
	return o.printReport(rep, f.json)
}

// printReport prints a bench's report as JSON or as the table.
func (o *options) printReport(rep *bench.Report, asJSON bool) error {
	if asJSON {
		return o.printJSON(rep)
	}
	return bench.WriteTable(o.env.Stdout, *rep)
}

// validCompare reports whether every --compare value is a layout bench knows.
func validCompare(names []string) bool {
	for _, n := range names {
		if n != bench.VariantSingle && n != bench.VariantRunsc && n != bench.VariantSmallPreload && n != bench.VariantPlain {
			return false
		}
	}
	return true
}

// configArgs returns the configuration flags given on the command line (and --config), to
// start another sandpit process with the same configuration.
func (o *options) configArgs(cmd *cobra.Command) []string {
	var args []string
	if o.configFile != "" {
		args = append(args, "--config="+o.configFile)
	}
	for _, s := range o.settings {
		if f := cmd.Flags().Lookup(s.flag); f != nil && f.Changed {
			args = append(args, "--"+s.flag+"="+*s.value)
		}
	}
	return args
}
