package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/secrets"
	"github.com/sandpit-dev/sandpit/internal/suggest"
)

// Env is what the commands read and write besides their arguments.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Lookup reads environment variables (os.LookupEnv).
	Lookup func(string) (string, bool)
	// Environ lists the environment (os.Environ), to warn about misspelt SANDPIT_ variables;
	// nil skips the warning.
	Environ func() []string
	// Version is the build's version string.
	Version string
}

// options are the flags every command shares.
type options struct {
	env        Env
	configFile string
	settings   []setting // config flags, applied when given
	verbose    bool
}

// Main runs the command line with args (without the program name) and returns the exit code.
func Main(ctx context.Context, args []string, env Env) int {
	opts := &options{env: env}
	root := &cobra.Command{
		Use:   "sandpit",
		Short: "Run Python for AI agents in a warm, locked-down Docker sandbox",
		Long: `sandpit runs Python code for AI agents in a warm, locked-down Docker container and returns
stdout, stderr, the exit code, the duration and a JSON OUTPUT in milliseconds.

Configuration: defaults < config file (--config, SANDPIT_CONFIG or ~/.config/sandpit/config.json)
< SANDPIT_<KEY> environment variables < flags. The keys: ` + strings.Join(config.Keys(), ", ") + `.
sandpit run looks for a daemon at SANDPIT_URL (else at the configured listen address (listen, SANDPIT_LISTEN), else ` + DefaultURL + `).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       env.Version,
		// Every command's --agent, SANDPIT_AGENT when it is not given, checked once before the
		// command runs: a name such as ".." would change the route it is sent on.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.checkURL(cmd); err != nil {
				return err
			}
			fl := cmd.Flags().Lookup("agent")
			switch {
			case fl == nil:
			case fl.Changed:
				return checkAgent("--agent", fl.Value.String())
			case opts.envAgent() != "":
				if err := checkAgent(agentEnv, opts.envAgent()); err != nil {
					return err
				}
				return fl.Value.Set(opts.envAgent())
			}
			return nil
		},
	}
	root.SetArgs(args)
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&opts.configFile, "config", "", "config file (JSON)")
	pf.BoolVarP(&opts.verbose, "verbose", "v", false, "log what sandpit does to stderr")
	opts.configFlag(pf, "data-dir", "data_dir", "data directory (owns the warm containers, one per slot)")
	opts.configFlag(pf, "base-image", "base_image", "base image of the sandbox image")
	opts.configFlag(pf, "network", "network", `network policy of the sandbox: "allowlist" (the proxy to network_allow's hosts), "full" or "none"`)
	opts.configFlag(pf, "runtime", "runtime", `container runtime of the sandboxes: "runc" or "runsc" (gVisor)`)
	opts.configFlag(pf, "docker-host", "docker_host", "Docker engine address (default: the Docker environment)")

	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		// time.ParseDuration's errors: `time: invalid duration "abc"`, `time: missing unit in
		// duration "30"`, `time: unknown unit "x" in duration "3x"`.
		msg := err.Error()
		if strings.Contains(msg, "time: ") && strings.Contains(msg, "duration") {
			return usageErrorf("%v: write a duration with its unit, e.g. 30s, 1500ms or 2m", err)
		}
		// pflag's "unknown flag: --tiemout" gets the command's nearest flag.
		if name, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
			var names []string
			cmd.Flags().VisitAll(func(f *pflag.Flag) {
				if !f.Hidden {
					names = append(names, f.Name)
				}
			})
			if near := suggest.Nearest(name, names, 2); near != "" {
				return usageErrorf("%v; did you mean --%s? (`%s --help` lists its flags)", err, near, cmd.CommandPath())
			}
			return usageErrorf("%v (`%s --help` lists its flags)", err, cmd.CommandPath())
		}
		// pflag's "unknown shorthand flag: 'x' in -x" gets the command's short flags (-h is
		// every command's).
		if strings.HasPrefix(msg, "unknown shorthand flag: ") {
			var short []string
			cmd.Flags().VisitAll(func(f *pflag.Flag) {
				if !f.Hidden && f.Shorthand != "" {
					short = append(short, "-"+f.Shorthand+" (--"+f.Name+")")
				}
			})
			return usageErrorf("%v: the short flags of `%s` are %s (`%s --help` lists them all)", err, cmd.CommandPath(), strings.Join(short, ", "), cmd.CommandPath())
		}
		return usageErrorf("%v", err)
	})
	root.AddCommand(opts.serveCommand(), opts.runCommand(), opts.codeCommand(), opts.jobCommand(), opts.sessionCommand(), opts.templateCommand(), opts.execCommand(), opts.packagesCommand(), opts.kbCommand(), opts.mcpCommand(), opts.setupCommand(), opts.doctorCommand(),
		opts.imageCommand(), opts.sandboxCommand(), opts.keysCommand(), opts.secretsCommand(), opts.versionCommand())
	root.AddCommand(opts.benchCommand())
	refuseUnknownCommands(root)
	forEachCommand(root, func(c *cobra.Command) {
		if fl := c.Flags().Lookup("agent"); fl != nil {
			fl.Usage += " [env " + agentEnv + "]"
		}
	})
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	if _, ok := errors.AsType[*reportedError](err); ok {
		return ExitCode(nil, err)
	}
	msg := inFlagWords(cmd, err)
	fmt.Fprintf(env.Stderr, "sandpit: %s%s\n", msg, opts.agentHint(ctx, cmd, err, msg))
	return ExitCode(nil, err)
}

// agentHint is what to add to msg, the daemon's "not found", for a command that asked as the
// agent "default" because neither --agent nor SANDPIT_AGENT was given: the daemon answers
// another agent's resources as not found, and an ID alone does not say whose it is.
//
// No hint when what was not found is inside a resource the agent has: a field the daemon names
// (a file of an execution), or a file, process or share of a session of the agent's (a trial's
// `session cp` of a missing path was told it may be another agent's).
func (o *options) agentHint(ctx context.Context, cmd *cobra.Command, err error, msg string) string {
	if cmd == nil {
		return ""
	}
	fl := cmd.Flags().Lookup("agent")
	api, isAPI := errors.AsType[*client.APIError](err)
	if !isAPI || !errors.Is(err, errclass.NotFound) || fl == nil || fl.Changed || fl.DefValue != "default" || o.envAgent() != "" || api.Field != "" {
		return ""
	}
	if o.sessionFound(ctx, cmd) {
		return ""
	}
	if strings.Contains(msg, "--agent") { // the daemon said it (sessions do)
		return "; " + agentEnv + " gives --agent to every command"
	}
	return "; it may be another agent's: give --agent NAME, or set " + agentEnv + " for every command"
}

// sessionFound says cmd names a session (se_… or se_…:PATH) that the agent "default" has, as
// the daemon answers it now: a not-found of cmd was of something in it.
func (o *options) sessionFound(ctx context.Context, cmd *cobra.Command) bool {
	id := ""
	for _, a := range cmd.Flags().Args() {
		if sid, _, ok := sessionPath(a); ok {
			id = sid
		} else if sandbox.ValidSessionID(a) {
			id = a
		}
		if id != "" {
			break
		}
	}
	if !sandbox.ValidSessionID(id) {
		return false
	}
	cfg, err := o.loadFile(cmd, o.configFile)
	if err != nil {
		return false
	}
	u := ""
	if fl := cmd.Flags().Lookup("url"); fl != nil {
		u = fl.Value.String()
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = client.New(o.daemonURL(u), nil).As(apitype.SourceCLI).WithToken(cfg.Token).GetSession(ctx, "default", id)
	return err == nil
}

// refuseUnknownCommands makes every command that groups others (sandpit, sandpit session, …)
// refuse a word that names none of them as a usage error with a "did you mean" (cobra
// printed the group's help and exited 0, or, for the root, exited 70), and the help command
// refuse a topic it does not know. A group given no word still prints its help.
func refuseUnknownCommands(root *cobra.Command) {
	root.InitDefaultCompletionCmd() // cobra adds it as it runs: after this walk
	forEachCommand(root, func(c *cobra.Command) {
		if c.HasSubCommands() && !c.Runnable() {
			c.Args = cobra.ArbitraryArgs // a group's Args is checked only when it runs
			c.RunE = func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return unknownCommand(cmd, args[0])
				}
				return cmd.Help()
			}
		}
	})
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil {
				return err
			}
			if len(rest) > 0 && cmd.HasSubCommands() {
				return unknownCommand(cmd, rest[0])
			}
			return cmd.Help()
		},
	})
}

// forEachCommand calls do for c and every command under it.
func forEachCommand(c *cobra.Command, do func(*cobra.Command)) {
	do(c)
	for _, sub := range c.Commands() {
		forEachCommand(sub, do)
	}
}

// unknownCommand is the usage error for name given to group, which has no command of that name.
func unknownCommand(group *cobra.Command, name string) error {
	var names []string
	for _, c := range group.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
			names = append(names, c.Aliases...)
		}
	}
	msg := fmt.Sprintf("unknown command %q for %q", name, group.CommandPath())
	if s := suggest.Nearest(name, names, 2); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	return usageErrorf("%s (`%s --help` lists its commands)", msg, group.CommandPath())
}

// flagOfField names the flag of a request field where the two names differ by more than "_"
// and "-" (timeout_ms is --timeout).
var flagOfField = map[string]string{"dependencies": "dep", "timeout_ms": "timeout", "expected_version": "expected-version", "files": "file",
	"idle_timeout_ms": "idle", "max_lifetime_ms": "lifetime"}

// fieldMention matches a field named in a message: a whole word, with a list index
// ("dependencies[0]") or a REST query value ("force=true") after it.
func fieldMention(field string) *regexp.Regexp {
	return regexp.MustCompile(`(^|[^A-Za-z0-9_.])` + regexp.QuoteMeta(field) + `(\[\d+\]|=true\b|\b)`)
}

// inFlagWords is err's message for the command line: its REST advice said as commands
// (inCommandWords), and when it names a request field (an answer
// of the daemon, or a refusal of the local engine) that cmd has a flag for, the field is named
// as that flag ("timeout_ms" as --timeout, "force=true" as --force, "files[0].content" as
// --file).
func inFlagWords(cmd *cobra.Command, err error) string {
	msg := inCommandWords(err.Error())
	var api *client.APIError
	var fieldErr *sandbox.FieldError
	field := ""
	switch {
	case errors.As(err, &api):
		field = api.Field
	case errors.As(err, &fieldErr):
		field = fieldErr.Field
	}
	if field == "" || cmd == nil {
		return msg
	}
	base := field[:strings.IndexAny(field+"[", "[.")] // files[0].content is said with files' flag
	flag := cmp.Or(flagOfField[base], strings.ReplaceAll(base, "_", "-"))
	f := cmd.Flags().Lookup(flag)
	if f == nil {
		return msg
	}
	if strings.HasSuffix(base, "_ms") && f.Value.Type() == "duration" {
		msg = millisecondsAsDurations(msg) // the flag takes a duration
	}
	// A mention is the field when it reads as one: a name with "_", "." or an index, a
	// "force=true", or the message's subject at its start. A plain word elsewhere ("has no
	// template") is the message's own noun and stays.
	identifier := strings.ContainsAny(field, "_.[")
	var b strings.Builder
	last, replaced := 0, false
	for _, m := range fieldMention(field).FindAllStringSubmatchIndex(msg, -1) {
		name := m[3] // after the character before the mention
		if !identifier && m[4] == m[5] && name != 0 {
			continue
		}
		b.WriteString(msg[last:name])
		b.WriteString("--" + flag)
		last, replaced = m[1], true
	}
	if !replaced {
		return "--" + flag + ": " + msg
	}
	return b.String() + msg[last:]
}

// msRange is the daemon's answer to a duration in milliseconds out of its range
// (sandbox.CheckTimeout's and the sessions').
var msRange = regexp.MustCompile(`is (\d+); allowed range is (\d+) to (\d+) milliseconds( \(omit it for the default of (\d+)\))?`)

// millisecondsAsDurations says the milliseconds of msRange as durations ("is 2h0m0s; allowed
// range is 1s to 1h0m0s"), as --timeout, --idle and --lifetime take them (trials gave 2h and
// 10h and were told 7200000 and 36000000).
func millisecondsAsDurations(msg string) string {
	return msRange.ReplaceAllStringFunc(msg, func(m string) string {
		g := msRange.FindStringSubmatch(m)
		d := func(ms string) time.Duration {
			n, _ := strconv.ParseInt(ms, 10, 64)
			return time.Duration(n) * time.Millisecond
		}
		out := fmt.Sprintf("is %s; allowed range is %s to %s", d(g[1]), d(g[2]), d(g[3]))
		if g[5] != "" {
			out += fmt.Sprintf(" (omit it for the default of %s)", d(g[5]))
		}
		return out
	})
}

// configFlag registers a string flag that sets a config key when given.
func (o *options) configFlag(fs *pflag.FlagSet, name, key, usage string) {
	s := setting{flag: name, key: key, value: new(string)}
	fs.StringVar(s.value, name, "", usage+" [config key "+key+", env "+config.EnvName(key)+"]")
	o.settings = append(o.settings, s)
}

// agentEnv is the environment variable that gives --agent, wherever a command has it, when
// the flag is not given.
const agentEnv = "SANDPIT_AGENT"

// envAgent is SANDPIT_AGENT, "" when unset.
func (o *options) envAgent() string {
	if o.env.Lookup == nil {
		return ""
	}
	if v, ok := o.env.Lookup(agentEnv); ok {
		return v
	}
	return ""
}

// nonConfigEnv are SANDPIT_ variables that are not configuration keys.
var nonConfigEnv = []string{"SANDPIT_URL", agentEnv, secrets.KeyEnv}

// nonConfigEnvPrefixes begin SANDPIT_ variables of the project's tests and test cluster
// (scripts/kube-cluster.sh env exports SANDPIT_KUBE_*), which are not configuration keys
// either: a developer's shell has them set while it runs sandpit.
var nonConfigEnvPrefixes = []string{"SANDPIT_TEST_", "SANDPIT_REQUIRE_", "SANDPIT_KUBE_"}

// configEnv reports whether SANDPIT_ variable name may be meant as a configuration key.
func configEnv(name string) bool {
	return !slices.Contains(nonConfigEnv, name) &&
		!slices.ContainsFunc(nonConfigEnvPrefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}

// setting is a flag that sets a config key.
type setting struct {
	flag, key string
	value     *string
}

// load builds the configuration: defaults < file < environment < the flags that were given.
func (o *options) load(cmd *cobra.Command) (config.Config, error) {
	for _, w := range o.ignoredEnv() {
		fmt.Fprintf(o.env.Stderr, "sandpit: warning: %s\n", w)
	}
	return o.loadFile(cmd, o.configFile)
}

// ignoredEnv says of each SANDPIT_ variable set that is not a setting that it is ignored, with
// the setting nearest to its name.
func (o *options) ignoredEnv() []string {
	if o.env.Environ == nil {
		return nil
	}
	var out []string
	for _, name := range config.UnknownEnv(o.env.Environ()) {
		if !configEnv(name) {
			continue
		}
		hint := "the settings: sandpit --help"
		if near := config.NearestEnv(name); near != "" {
			hint = "did you mean " + near + "?"
		}
		out = append(out, fmt.Sprintf("%s is not a sandpit setting and is ignored (%s)", name, hint))
	}
	return out
}

// loadFile is load with the config file file instead of --config's, without the warnings
// about the environment.
func (o *options) loadFile(cmd *cobra.Command, file string) (config.Config, error) {
	cfg, err := config.LoadLookup(file, o.env.Lookup)
	if err != nil {
		return cfg, &UsageError{msg: err.Error()}
	}
	for _, s := range o.settings {
		if f := cmd.Flags().Lookup(s.flag); f != nil && f.Changed {
			if err := cfg.Set(s.key, *s.value); err != nil {
				return cfg, usageErrorf("--%s: %v", s.flag, err)
			}
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, &UsageError{msg: "invalid configuration:\n" + err.Error()}
	}
	return cfg, nil
}

func (o *options) logger(cfg config.Config, quiet bool) *slog.Logger {
	if quiet && !o.verbose {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return cfg.Logger(o.env.Stderr)
}

// UsageError is a mistake in the command line itself (a flag, an argument, a file to read);
// `sandpit run` exits 64 for it.
type UsageError struct{ msg string }

func (e *UsageError) Error() string { return e.msg }

// Is makes a UsageError of class errclass.Invalid.
func (e *UsageError) Is(target error) bool { return target == errclass.Invalid }

func usageErrorf(format string, args ...any) error {
	return &UsageError{msg: fmt.Sprintf(format, args...)}
}

// engineFlagsGiven names the engine flags given on the command line.
func (o *options) engineFlagsGiven(cmd *cobra.Command) []string {
	var given []string
	for _, s := range o.settings {
		if f := cmd.Flags().Lookup(s.flag); f != nil && f.Changed {
			given = append(given, "--"+s.flag)
		}
	}
	return given
}

func (o *options) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print sandpit's version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(o.env.Stdout, "sandpit", o.env.Version)
			return nil
		},
	}
}

// noArgs, exactArgs and minArgs check a command's arguments; a mismatch is a UsageError (exit
// 64) that shows the command's usage line.
func noArgs(cmd *cobra.Command, args []string) error { return exactArgs(0)(cmd, args) }

func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%s takes %d argument(s), got %d; usage: %s", cmd.CommandPath(), n, len(args), cmd.UseLine())
		}
		return nil
	}
}

func minArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usageErrorf("%s takes at least %d argument(s), got %d; usage: %s", cmd.CommandPath(), n, len(args), cmd.UseLine())
		}
		return nil
	}
}
