package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/datadir"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// DefaultURL is where `sandpit run` looks for a daemon when SANDPIT_URL is not set.
const DefaultURL = "http://127.0.0.1:8765"

func (o *options) serveCommand() *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon: keep a warm sandbox and serve the REST API",
		Long: `Run the sandpit daemon. It builds the sandbox image when missing (showing the build),
starts or adopts the warm container of its data directory, fires scheduled jobs, and serves the
REST API until interrupted: POST /v1/executions, GET /v1/executions, /v1/agents/{agent}/code,
/v1/agents/{agent}/jobs, /v1/packages, GET /v1/limits, /healthz and /readyz (docs/api.md lists them).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.load(cmd)
			if err != nil {
				return err
			}
			if err := app.CheckExposure(cfg); err != nil {
				return &UsageError{msg: err.Error()}
			}
			if dryRun {
				return o.printServeSettings(cmd.Context(), cfg)
			}
			log := o.logger(cfg, false)
			return app.Serve(cmd.Context(), cfg, o.env.Version, log, o.env.Stderr, nil)
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the address, data directory, runtime and base image the daemon would use with these settings, and exit")
	o.configFlag(cmd.Flags(), "listen", "listen", "address of the REST API")
	o.configFlag(cmd.Flags(), "slots", "slots", "runs executed at once")
	return cmd
}

// printServeSettings prints what `sandpit serve` would run with under cfg, one "key: value"
// line each (keys as in the config file): listen (and the URL clients use), data_dir, runtime,
// and base_image (chosen from the engine's images when unset) or kubernetes.image. The
// quickstart prints its closing line from it, so the line is true of the settings in effect.
func (o *options) printServeSettings(ctx context.Context, cfg config.Config) error {
	w := o.env.Stdout
	fmt.Fprintf(w, "listen: %s\nurl: %s\ndata_dir: %s\nruntime: %s\n", cfg.Listen, listenURL(cfg.Listen), cfg.DataDir, cfg.Runtime)
	if cfg.Runtime == config.RuntimeKubernetes {
		fmt.Fprintf(w, "kubernetes.image: %s\n", cfg.Kubernetes.Image)
		return nil
	}
	how := "set"
	if cfg.BaseImage == "" {
		api, err := app.DockerClient(cfg)
		if err != nil {
			return err
		}
		defer api.Close()
		cfg, how = app.ChooseBaseImage(ctx, api, cfg), "chosen: base_image is unset"
	}
	fmt.Fprintf(w, "base_image: %s (%s)\n", cfg.BaseImage, how)
	return nil
}

func (o *options) imageCommand() *cobra.Command {
	image := &cobra.Command{Use: "image", Short: "Manage the sandbox image"}
	var push string
	build := &cobra.Command{
		Use:   "build",
		Short: "Build the sandbox image (or confirm it is up to date)",
		Long: `Build the sandbox image through the Docker engine from the embedded Dockerfile: the base
image, the preinstalled packages, the slot users, sandpit-executor and the Python bootstrap.
The tag carries a hash of the recipe, so an unchanged recipe is reused and a changed one
rebuilds. Without a container registry, build a base first with scripts/offline-base-image.sh:
with base_image unset, python:3.11-slim is used when the engine has it, else
sandpit-base:bookworm-2 when the engine has it, else python:3.11-slim is pulled.

With --push REF the image is then tagged REF (keeping its own tag when REF has none) and
pushed to REF's registry, for the nodes of a Kubernetes cluster to pull (runtime kubernetes:
set kubernetes.image to the reference printed). Credentials come from the Docker client's
config as docker login stores them; with a credential helper, run docker push yourself. A
local test cluster without a registry imports the image instead:
scripts/kube-cluster.sh import-image TAG (docs/kubernetes.md).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.load(cmd)
			if err != nil {
				return err
			}
			tag, built, err := app.BuildImage(cmd.Context(), cfg, o.env.Stderr)
			if err != nil {
				return err
			}
			if built {
				fmt.Fprintf(o.env.Stdout, "built %s\n", tag)
			} else {
				fmt.Fprintf(o.env.Stdout, "up to date: %s\n", tag)
			}
			if push != "" {
				ref, err := app.PushImage(cmd.Context(), cfg, tag, push, o.env.Stderr)
				if err != nil {
					return err
				}
				fmt.Fprintf(o.env.Stdout, "pushed %s\n", ref)
			}
			return nil
		},
	}
	build.Flags().StringVar(&push, "push", "", "after building, tag the image as `REF` (registry/repository[:tag]) and push it there")
	o.configFlag(build.Flags(), "packages", "packages", "comma-separated packages to preinstall (empty for none)")
	image.AddCommand(build)
	return image
}

type runFlags struct {
	code    string
	input   string
	timeout time.Duration
	agent   string
	json    bool
	url     string
	local   bool
	deps    []string
	allow   []string
	secrets []string
	// template: run in a fresh session of this template (sandpit run only)
	template string
	inputs   inputFlags
	output   outputFlags
	// noDisplay: do not print the displays' and the last expression's text/plain
	noDisplay bool
}

func (o *options) runCommand() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [FILE | -c CODE | -]",
		Short: "Run Python code in the sandbox",
		Long: `Run Python code in the sandbox and print its stdout and stderr as they come.

The code comes from FILE, from -c CODE, or from standard input with "-". INPUT is the JSON
given with --input (inline, or @FILE). If the code sets a global OUTPUT, it is printed as one
line of JSON after the run when the program printed nothing on stdout (always on a terminal);
--json shows the whole result.

As a Python REPL does, the value of the code's last expression (when it ends in one that is
not None, and not with ";") is printed after what the program printed, as its text/plain;
what the program shows with display() is printed as it comes, the same way. --no-display
prints neither; --json carries every MIME type of them in "results".

sandpit run uses the daemon at SANDPIT_URL (else at the configured listen address (listen, SANDPIT_LISTEN), else ` + DefaultURL + `)
when one answers;
otherwise it starts the engine itself for this one command (building the image if needed).

--file PATH[=NAME] hands the run a file in its working directory (repeatable). The files the
program writes there, and the charts it draws (matplotlib figures, PIL images shown; not with
--no-charts), are its output files: listed as they come, and written into DIR with
--output-dir DIR (fetch them later with sandpit exec files ID).

Exit status: the program's own status; 124 timeout; 137 memory_limit; 125 output_limit;
65 output_invalid; 66 dependency_error; 128+N killed by signal N; 64 invalid request;
69 sandbox not ready; 70 sandbox_error; 75 busy or the data directory is in use.`,
		Example: `  sandpit run -c 'print(sum(INPUT))' --input '[1,2,3]'
  sandpit run script.py --timeout 10s --json
  echo 'print("hi")' | sandpit run -
  sandpit run plot.py --file sales.csv --output-dir out/
  sandpit run fetch.py --network-allow api.example.com:443`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErrorf("give one FILE (or - for standard input), not %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd, f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.code, "code", "c", "", "the code to run")
	fl.StringVar(&f.input, "input", "", "INPUT as JSON, or @FILE to read it from a file")
	fl.DurationVar(&f.timeout, "timeout", 0, "wall-clock limit, e.g. 30s (default: the server's, 30s)")
	fl.StringVar(&f.agent, "agent", "", `agent namespace (default "default")`)
	fl.BoolVar(&f.json, "json", false, "print the whole result as JSON instead of the program's output")
	fl.StringVar(&f.url, "url", "", "daemon URL (default $SANDPIT_URL, else the configured listen address, else "+DefaultURL+")")
	fl.BoolVar(&f.local, "local", false, "do not look for a daemon: run the engine in this process")
	fl.StringArrayVar(&f.deps, "dep", nil, `a dependency to install first (PEP 508, such as "tinypkg==1.0"), repeatable`)
	fl.StringArrayVar(&f.secrets, "secret", nil, "a secret the run may use, repeatable: its code sees $NAME holding a placeholder the egress proxy replaces for the secret's hosts (sandpit secrets list; docs/secrets.md)")
	fl.StringArrayVar(&f.allow, "network-allow", nil, `with the daemon's network "allowlist": what this run may reach, a host ("api.example.com", "*.example.com", with ":PORT") or a CIDR, repeatable; it narrows the daemon's network_allow, never widens it`)
	fl.BoolVar(&f.noDisplay, "no-display", false, "do not print the text of what the code displays and of its last expression's value")
	fl.StringVar(&f.template, "template", "", "run in a fresh sandbox of this template (NAME, or AGENT/NAME of a shared one; sandpit template ls lists them)")
	f.inputs.register(fl)
	f.output.register(fl, "the run's output files")
	return cmd
}

func (o *options) run(cmd *cobra.Command, f runFlags, args []string) error {
	code, err := o.readCode(f, args)
	if err != nil {
		return err
	}
	req := apitype.ExecuteRequest{Code: code, Agent: f.agent, Template: f.template, Dependencies: f.deps, NetworkAllow: f.allow, Secrets: f.secrets}
	if f.input != "" {
		in := []byte(f.input)
		if name, ok := strings.CutPrefix(f.input, "@"); ok {
			if in, err = os.ReadFile(name); err != nil {
				return usageErrorf("--input: %v", err)
			}
		}
		if !json.Valid(in) {
			return usageErrorf("--input is not valid JSON: give a JSON value such as '[1,2,3]' or '{\"a\": 1}', or @FILE")
		}
		req.Input = json.RawMessage(in)
	}
	if cmd.Flags().Changed("input") && f.input == "" {
		return usageErrorf("--input is empty: give a JSON value such as '[1,2,3]', or leave --input out for INPUT = None")
	}
	if cmd.Flags().Changed("timeout") {
		ms := f.timeout.Milliseconds()
		if ms < 1 {
			return usageErrorf("--timeout %s is too short: give at least 1ms, e.g. --timeout 30s", f.timeout)
		}
		req.TimeoutMS = &ms
	}
	if req.RunFiles, err = f.inputs.runFiles(); err != nil {
		return err
	}
	if err := f.output.prepare(); err != nil {
		return err
	}
	req.InlineFiles = f.output.dir != ""
	res, files, done, err := o.execute(cmd, f, req, o.emitter(f.json, !f.noDisplay))
	defer done()
	return o.finishRun(cmd, res, err, f.json, f.output, files)
}

// emitter returns the event sink that prints a run's output as it comes, or nil with asJSON
// (the result is printed whole at the end). With displays, the text/plain of what the
// program displays, and of its last expression's value, is printed on stdout as it comes.
func (o *options) emitter(asJSON, displays bool) func(apitype.Event) {
	if asJSON {
		return nil
	}
	return func(e apitype.Event) {
		switch e.Stream {
		case apitype.StreamStdout:
			io.WriteString(o.env.Stdout, e.Data)
		case apitype.StreamStderr:
			io.WriteString(o.env.Stderr, e.Data)
		case apitype.StreamDependency:
			o.printDependency(e.Dependency)
		case apitype.StreamLog:
			fmt.Fprintf(o.env.Stderr, "sandpit: agent.log %s: %s\n", sandbox.EscapeName(e.Level), sandbox.EscapeName(e.Data))
		case apitype.StreamFile:
			if e.File != nil {
				fmt.Fprintf(o.env.Stderr, "sandpit: output file %s (%s, %s)\n", sandbox.EscapeName(e.File.Name), sandbox.EscapeName(e.File.MediaType), humanSize(e.File.SizeBytes))
			}
		case apitype.StreamDisplay:
			if displays && e.Display != nil {
				printDisplay(o.env.Stdout, *e.Display)
			}
		}
	}
}

// printDisplay prints d's text/plain, as a REPL prints a value, on a line of its own.
func printDisplay(w io.Writer, d apitype.Display) {
	var text string
	if json.Unmarshal(d.Data["text/plain"], &text) != nil || text == "" {
		return
	}
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	io.WriteString(w, text)
}

// printDependency reports an install on stderr (present requirements are quiet).
func (o *options) printDependency(d *apitype.DependencyStatus) {
	switch {
	case d == nil:
	case d.Status == apitype.DependencyInstalled:
		fmt.Fprintf(o.env.Stderr, "sandpit: installed %s (%s) in %dms\n", d.Requirement, d.Version, d.DurationMS)
	case d.Status == apitype.DependencyFailed && d.Version != "":
		fmt.Fprintf(o.env.Stderr, "sandpit: %s is installed (%s) but conflicts with another requirement\n", d.Requirement, d.Version) // the reason follows with the outcome
	case d.Status == apitype.DependencyFailed:
		fmt.Fprintf(o.env.Stderr, "sandpit: could not install %s\n", d.Requirement)
	}
}

// finishRun reports a run's end: the result as JSON with asJSON, a line naming a limit's
// outcome otherwise; writes its output files (read from files) into out's directory when one
// is given; and returns the exit status of ExitCode, or the error of saving the files.
func (o *options) finishRun(cmd *cobra.Command, res apitype.Result, err error, asJSON bool, out outputFlags, files fileSource) error {
	if cmd.Context().Err() != nil { // interrupted (Ctrl-C): the run was stopped
		fmt.Fprintln(o.env.Stderr, "sandpit: interrupted; the run was stopped")
		return reported(context.Canceled)
	}
	if err != nil {
		return err
	}
	if asJSON {
		if err := o.printJSON(res); err != nil {
			return err
		}
	} else {
		o.printOutput(res)
		// An error's reason is the program's own traceback, on stderr already, unless sandpit
		// ended the run before the program could (no exit status: exit_code -1), such as a
		// session refusing an input file.
		if res.Outcome != apitype.OutcomeOK && (res.Outcome != apitype.OutcomeError || res.ExitCode < 0 && res.Reason != "") {
			fmt.Fprintf(o.env.Stderr, "sandpit: %s: %s\n", res.Outcome, sandbox.EscapeText(res.Reason))
		}
		printSkipped(o.env.Stderr, res)
		if out.dir == "" && len(res.Files) > 0 {
			fmt.Fprintf(o.env.Stderr, "sandpit: %d output file(s) kept with %s: write them into a directory with --output-dir DIR, now or later with `sandpit exec files %s --output-dir DIR`\n",
				len(res.Files), res.ID, res.ID)
		}
	}
	if out.dir != "" {
		if err := saveFiles(cmd.Context(), o.env.Stderr, out.dir, out.force, false, res.Files, files); err != nil {
			if res.ID == "" {
				return err
			}
			return fmt.Errorf("%w (the run's files are kept with %s: `sandpit exec files %s --output-dir DIR` writes them later)", err, res.ID, res.ID)
		}
	}
	return reportedRun(res)
}

// printOutput prints the program's OUTPUT as one line of JSON on stdout when it set one and
// printed nothing there (else a program that only sets OUTPUT shows nothing), or when stdout
// is a terminal, where a person reads it.
func (o *options) printOutput(res apitype.Result) {
	if len(res.Output) == 0 || string(res.Output) == "null" {
		return
	}
	file, ok := o.env.Stdout.(*os.File)
	if res.Stdout != "" && !(ok && isatty.IsTerminal(file.Fd())) {
		return
	}
	if res.Stdout != "" && !strings.HasSuffix(res.Stdout, "\n") {
		fmt.Fprintln(o.env.Stdout)
	}
	fmt.Fprintf(o.env.Stdout, "%s\n", res.Output)
}

// daemonURL is the daemon's address: flag, else SANDPIT_URL, else http:// and the address
// the configuration gives the daemon (listen in the config file, SANDPIT_LISTEN over it, as
// `sandpit serve` reads them; a wildcard host as 127.0.0.1), else DefaultURL.
func (o *options) daemonURL(flag string) string {
	if flag != "" {
		return flag
	}
	if u, _ := o.env.Lookup("SANDPIT_URL"); u != "" {
		return u
	}
	l, _ := o.env.Lookup("SANDPIT_LISTEN")
	if cfg, err := config.LoadLookup(o.configFile, o.env.Lookup); err == nil {
		l = cfg.Listen // a configuration that does not load is reported by the command itself
	}
	return listenURL(l)
}

// listenURL is the URL a client on this machine reaches a daemon listening on l by (an
// unspecified host is 127.0.0.1); DefaultURL when l is empty or no host:port.
func listenURL(l string) string {
	if l != "" {
		if host, port, err := net.SplitHostPort(l); err == nil && port != "" {
			if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
				host = "127.0.0.1"
			}
			return "http://" + net.JoinHostPort(host, port)
		}
	}
	return DefaultURL
}

// execute runs req through the daemon when one answers, else through an engine in this
// process, whose REST API it calls in process (the same path as the daemon's). It
// returns the run's result, where its output files are read from, and done, which releases
// the engine (call it when the files are read, also after an error).
func (o *options) execute(cmd *cobra.Command, f runFlags, req apitype.ExecuteRequest, emit func(apitype.Event)) (_ apitype.Result, _ fileSource, done func(), _ error) {
	done = func() {}
	ctx := cmd.Context()
	url := o.daemonURL(f.url)
	cfg, err := o.load(cmd) // also with a daemon: a broken configuration is always an error
	if err != nil {
		return apitype.Result{}, nil, done, err
	}
	var daemonErr error
	if !f.local {
		c := client.New(url, nil).WithToken(cfg.Token)
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		daemonErr = c.Health(hctx)
		cancel()
		if daemonErr == nil {
			if given := o.engineFlagsGiven(cmd); len(given) > 0 {
				return apitype.Result{}, nil, done, usageErrorf("the daemon at %s runs with its own settings, and these flags only set up an engine: %s; "+
					"give them to `sandpit serve`, or add --local to run this command on its own engine", url, strings.Join(given, ", "))
			}
			if err := o.compareWithDaemon(ctx, c, cfg, url); err != nil {
				return apitype.Result{}, nil, done, err
			}
			a, err := c.As(apitype.SourceCLI).ExecuteAnswer(ctx, req, emit)
			return a.Result, daemonFiles(c, a.ID, a.Inline), done, err
		}
	}

	if !f.local {
		fmt.Fprintf(o.env.Stderr, "sandpit: no daemon answers at %s; running the engine in this process on %s (start `sandpit serve` to keep it warm between runs; "+
			"its one container stays up for the next run: `sandpit sandbox rm` removes it)\n", url, cfg.DataDir)
	}
	if f := cmd.Flags().Lookup("slots"); f == nil || !f.Changed {
		// One program runs: one slot, not the daemon's pool (each a container, left warm for the
		// next command to adopt).
		cfg.Slots = 1
		if cfg.ExecutionsPerAgent > cfg.Slots+cfg.QueueLength {
			cfg.ExecutionsPerAgent = 0
		}
	}
	eng, err := app.Open(ctx, cfg, o.logger(cfg, true), o.env.Stderr)
	if err != nil {
		var locked *datadir.LockedError
		if errors.As(err, &locked) && daemonErr != nil {
			err = fmt.Errorf("%w (no daemon answered at %s: %v)", err, url, daemonErr)
		}
		return apitype.Result{}, nil, done, err
	}
	// The engine's own REST API, in process: the same decoding and limits as a daemon's.
	c := client.InProcess(eng.Handler(cfg, o.logger(cfg, true))).As(apitype.SourceCLI)
	a, err := c.ExecuteAnswer(ctx, req, emit)
	return a.Result, daemonFiles(c, a.ID, a.Inline), func() { eng.Close() }, err
}

// compareWithDaemon checks the settings this command was given (environment, config file)
// against the daemon's, since the daemon's apply: a network policy that the daemon does not
// have is refused; differences in timeouts, limits, network_allow and index_url are warned
// about (the data directory, slots and the rest are the daemon's alone, and not compared).
func (o *options) compareWithDaemon(ctx context.Context, c *client.Client, cfg config.Config, url string) error {
	lim, err := c.Limits(ctx)
	if err != nil {
		return nil // an older daemon; nothing to compare
	}
	def, mine := config.Default().Sandbox(), cfg.Sandbox()
	if mine.Network != def.Network && mine.Network != lim.Network {
		return usageErrorf("your settings ask for network %q, but the daemon at %s runs with network %q: "+
			"restart it with that setting, or add --local to run this command on its own engine", mine.Network, url, lim.Network)
	}
	var diffs []string
	compare := func(name string, mineV, defV, theirs int64) {
		if mineV != defV && mineV != theirs {
			diffs = append(diffs, fmt.Sprintf("%s %d (the daemon's: %d)", name, mineV, theirs))
		}
	}
	compare("default_timeout_ms", mine.DefaultTimeout.Milliseconds(), def.DefaultTimeout.Milliseconds(), lim.DefaultTimeoutMS)
	compare("max_timeout_ms", mine.MaxTimeout.Milliseconds(), def.MaxTimeout.Milliseconds(), lim.MaxTimeoutMS)
	compare("run_memory_bytes", mine.Limits.MemoryBytes, def.Limits.MemoryBytes, lim.Limits.MemoryBytes)
	compare("stdout_bytes", mine.Limits.StdoutBytes, def.Limits.StdoutBytes, lim.Limits.StdoutBytes)
	compare("stderr_bytes", mine.Limits.StderrBytes, def.Limits.StderrBytes, lim.Limits.StderrBytes)
	compare("output_bytes", mine.Limits.OutputBytes, def.Limits.OutputBytes, lim.Limits.OutputBytes)
	if len(cfg.NetworkAllow) > 0 && !sameSet(cfg.NetworkAllow, lim.NetworkAllow) {
		diffs = append(diffs, fmt.Sprintf("network_allow %q (the daemon's: %q; a run may only narrow the daemon's, with --network-allow)",
			cfg.NetworkAllow, lim.NetworkAllow))
	}
	// A URL with a password is shown redacted by the daemon: not compared.
	if cfg.IndexURL != "" && !strings.Contains(cfg.IndexURL, "@") && cfg.IndexURL != lim.PackageIndex.IndexURL {
		diffs = append(diffs, fmt.Sprintf("index_url %q (the daemon's: %q)", cfg.IndexURL, lim.PackageIndex.IndexURL))
	}
	if len(diffs) > 0 {
		fmt.Fprintf(o.env.Stderr, "sandpit: warning: the daemon at %s runs with its own settings, not yours: %s (restart `sandpit serve` with yours, or add --local to use them for this command)\n",
			url, strings.Join(diffs, ", "))
	}
	return nil
}

// sameSet says whether a and b hold the same strings, in any order and letter case.
func sameSet(a, b []string) bool {
	norm := func(l []string) []string {
		out := make([]string, len(l))
		for i, v := range l {
			out[i] = strings.ToLower(strings.TrimSpace(v))
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	return slices.Equal(norm(a), norm(b))
}

func (o *options) readCode(f runFlags, args []string) (string, error) {
	switch {
	case f.code != "" && len(args) > 0:
		return "", usageErrorf("give the code either with -c or as FILE, not both")
	case f.code != "":
		return f.code, nil
	case len(args) == 0:
		return "", usageErrorf("no code: give a FILE, -c CODE, or - to read standard input (see --help)")
	}
	from := args[0]
	var b []byte
	var err error
	if from == "-" {
		from = "standard input"
		b, err = io.ReadAll(o.env.Stdin)
	} else {
		b, err = os.ReadFile(from)
	}
	if err != nil {
		return "", usageErrorf("reading the code: %v", err)
	}
	if !utf8.Valid(b) {
		return "", usageErrorf("%s is not UTF-8 text: give Python source", from)
	}
	return string(b), nil
}
