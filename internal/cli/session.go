package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// sessionCommand is `sandpit session`: stateful sessions on the daemon.
func (o *options) sessionCommand() *cobra.Command {
	s := &cobra.Command{Use: "session", Short: "Stateful sessions: new, run, exec, ps, logs, kill, wait, cp, ls, commands, show, rm, pause, resume, hibernate, fork, ports, share, shares, unshare, egress (an interpreter, commands and files that persist; needs the daemon)"}
	s.AddCommand(o.sessionNewCommand(), o.sessionRunCommand(), o.sessionExecCommand(), o.sessionPsCommand(), o.sessionLogsCommand(), o.sessionKillCommand(), o.sessionWaitCommand(),
		o.sessionCpCommand(), o.sessionListCommand(), o.sessionCommandsCommand(), o.sessionShowCommand(), o.sessionRmCommand())
	s.AddCommand(o.sessionLifecycleCommands()...)
	s.AddCommand(o.sessionPortsCommand(), o.sessionShareCommand(), o.sessionSharesCommand(), o.sessionUnshareCommand(), o.sessionEgressCommand())
	return s
}

func (o *options) sessionNewCommand() *cobra.Command {
	var (
		f              daemonFlags
		deps           []string
		idle, lifetime time.Duration
		autoResume     bool
		autoPause      bool
		tmpl           string
		secrets        []string
		env            []string
	)
	cmd := &cobra.Command{
		Use:   "new",
		Short: "Start a session and print its ID",
		Long: `Start a stateful session: a sandbox of its own whose interpreter keeps its globals, imports
and files from call to call (sandpit session run ID ...). It ends when closed (sandpit session
rm ID), after --idle without a call, after --lifetime, or when a call must be killed.`,
		Example: `  S=$(sandpit session new --agent alice)
  sandpit session run $S --agent alice -c 'import pandas as pd; df = pd.DataFrame({"a": [1, 2]})'
  sandpit session run $S --agent alice -c 'print(df.a.sum())'
  sandpit session rm $S --agent alice`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			d := apitype.SessionCreate{Template: tmpl, Dependencies: deps, AutoResume: autoResume, Secrets: secrets}
			var err error
			if d.Env, err = envFlag(env); err != nil {
				return err
			}
			if cmd.Flags().Changed("auto-pause") {
				d.AutoPause = &autoPause
			}
			for _, v := range []struct {
				flag string
				dur  time.Duration
				dst  **int64
			}{{"idle", idle, &d.IdleTimeoutMS}, {"lifetime", lifetime, &d.MaxLifetimeMS}} {
				if cmd.Flags().Changed(v.flag) {
					if v.dur < time.Second || v.dur%time.Millisecond != 0 {
						return usageErrorf("--%s %s: give at least 1s, in whole milliseconds (such as 30s or 10m)", v.flag, v.dur)
					}
					ms := v.dur.Milliseconds()
					*v.dst = &ms
				}
			}
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			info, err := c.CreateSession(cmd.Context(), f.agent, d)
			if err != nil {
				return err
			}
			if f.json {
				return o.printJSON(info)
			}
			fmt.Fprintln(o.env.Stdout, info.ID)
			return nil
		},
	}
	f.register(cmd.Flags(), true)
	fl := cmd.Flags()
	fl.StringVar(&tmpl, "template", "", "start the session from this template (NAME, or AGENT/NAME of a shared one; sandpit template ls lists them)")
	fl.StringArrayVar(&deps, "dep", nil, `a dependency installed once for the session (PEP 508, such as "tinypkg==1.0"), repeatable`)
	fl.DurationVar(&idle, "idle", 0, "end the session after this long without a call (default: the daemon's session_idle_timeout_ms, 10m)")
	fl.DurationVar(&lifetime, "lifetime", 0, "end the session after it ran this long, paused time not counted (default and most: the daemon's session_max_lifetime_ms, 1h)")
	fl.BoolVar(&autoResume, "auto-resume", false, "a call to the session while it is paused or hibernated resumes it (else the call fails until sandpit session resume)")
	fl.BoolVar(&autoPause, "auto-pause", false, "pause the session at its idle timeout instead of ending it (default: the daemon's session_auto_pause)")
	fl.StringArrayVarP(&env, "env", "e", nil, "an environment variable NAME=VALUE of the session's code and commands (over its template's), repeatable")
	fl.StringArrayVar(&secrets, "secret", nil, "a secret the session's code and commands may use, repeatable: they see $NAME holding a placeholder the egress proxy replaces for the secret's hosts (sandpit secrets list; docs/secrets.md)")
	return cmd
}

func (o *options) sessionRunCommand() *cobra.Command {
	var (
		f      runFlags
		d      daemonFlags
		noWait bool
	)
	cmd := &cobra.Command{
		Use:   "run ID [FILE | -c CODE | -]",
		Short: "Run code in a session: its globals, imports and files are the earlier calls'",
		Long: `Run code as the next call of session ID and print its stdout and stderr as they come, as
sandpit run does (the same --input, --timeout, --file, --output-dir, --json and exit statuses).
A call that passes --timeout is interrupted (KeyboardInterrupt) and the session keeps its state;
one that does not stop 2 s later is killed and the session ends. A call waits for the calls
before it; with --no-wait it fails at once while one runs.`,
		Example: `  sandpit session run se_... -c 'x = 41'
  sandpit session run se_... -c 'print(x + 1)'`,
		Args: withSessionID(func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usageErrorf("give the session ID, then one FILE (or - for standard input) or -c CODE")
			}
			return nil
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			code, err := o.readCode(f, args[1:])
			if err != nil {
				return err
			}
			call := apitype.SessionCall{Code: code}
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
				call.Input = json.RawMessage(in)
			}
			if cmd.Flags().Changed("timeout") {
				ms := f.timeout.Milliseconds()
				if ms < 1 {
					return usageErrorf("--timeout %s is too short: give at least 1ms, e.g. --timeout 30s", f.timeout)
				}
				call.TimeoutMS = &ms
			}
			if noWait {
				no := false
				call.Wait = &no
			}
			if call.RunFiles, err = f.inputs.runFiles(); err != nil {
				return err
			}
			call.InlineFiles = f.output.dir != ""
			d.json = f.json
			c, err := o.daemon(cmd, d)
			if err != nil {
				return err
			}
			a, err := c.RunInSession(cmd.Context(), d.agent, args[0], call, o.emitter(f.json, !f.noDisplay))
			if err == nil && a.SessionEnded != "" && !f.json {
				defer fmt.Fprintf(o.env.Stderr, "sandpit: the session ended (%s)\n", a.SessionEnded)
			}
			return o.finishRun(cmd, a.Result, err, f.json, f.output, daemonFiles(c, a.ID, a.Inline))
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.code, "code", "c", "", "the code to run")
	fl.StringVar(&f.input, "input", "", "INPUT as JSON, or @FILE to read it from a file")
	fl.DurationVar(&f.timeout, "timeout", 0, "wall-clock limit of the call, e.g. 30s (default: the server's, 30s)")
	fl.BoolVar(&f.json, "json", false, "print the whole result as JSON instead of the program's output")
	fl.BoolVar(&f.noDisplay, "no-display", false, "do not print the text of what the code displays and of its last expression's value")
	fl.BoolVar(&noWait, "no-wait", false, "fail at once (409) while another call of the session runs, instead of waiting for its turn")
	fl.StringVar(&d.url, "url", "", "daemon URL (default $SANDPIT_URL, else the configured listen address, else "+DefaultURL+")")
	fl.StringVar(&d.agent, "agent", "default", "agent namespace")
	f.inputs.register(fl)
	f.output.register(fl, "the call's output files")
	return cmd
}

func (o *options) sessionListCommand() *cobra.Command {
	var (
		f     daemonFlags
		depth int
	)
	cmd := &cobra.Command{
		Use:     "ls [ID [PATH]]",
		Aliases: []string{"list"},
		Short:   "List the agent's sessions (active ones and those ended while the daemon ran), or with ID a session's files",
		Example: `  sandpit session ls
  sandpit session ls se_... data --depth 2`,
		Args: withSessionID(func(cmd *cobra.Command, args []string) error {
			if len(args) > 2 {
				return usageErrorf("give at most a session ID and a PATH in it; usage: %s", cmd.UseLine())
			}
			return nil
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			if depth < 1 {
				return usageErrorf("--depth is %d; give 1 or more levels (1 lists the directory's entries, 2 their entries too)", depth)
			}
			if len(args) > 0 {
				path := ""
				if len(args) == 2 {
					path = args[1]
				}
				return o.sessionFilesList(cmd, f, depth, args[0], path)
			}
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			list, err := c.ListSessions(cmd.Context(), f.agent)
			if err != nil {
				return err
			}
			if f.json {
				return o.printJSON(list)
			}
			tw := tabwriter.NewWriter(o.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tCALLS\tCREATED\tEXPIRES / ENDED")
			for _, s := range list {
				state, when := s.State, ""
				switch {
				case s.State == apitype.SessionEnded && s.EndedAt != nil:
					state, when = s.State+" ("+s.EndReason+")", s.EndedAt.Local().Format(time.DateTime)
				case s.ExpiresAt != nil:
					when = s.ExpiresAt.Local().Format(time.DateTime)
				}
				if s.Busy {
					state += ", busy"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", s.ID, state, s.Calls, s.CreatedAt.Local().Format(time.DateTime), when)
			}
			return tw.Flush()
		},
	}
	f.register(cmd.Flags(), true)
	cmd.Flags().IntVar(&depth, "depth", 1, "with ID: list this many levels down")
	return cmd
}

// sessionIDCommand is a command that takes a session ID and prints the session do returns.
func (o *options) sessionIDCommand(use, short string, do func(ctx context.Context, c *client.Client, agent, id string) (apitype.Session, error)) *cobra.Command {
	return o.sessionStepCommand(use, short, do, false)
}

// sessionStepCommand is sessionIDCommand; with newID it prints the session it answers as
// `session new` does, its ID alone on stdout (F=$(sandpit session fork S)), and its line on
// stderr.
func (o *options) sessionStepCommand(use, short string, do func(ctx context.Context, c *client.Client, agent, id string) (apitype.Session, error), newID bool) *cobra.Command {
	var f daemonFlags
	cmd := &cobra.Command{
		Use:   use + " ID",
		Short: short,
		Args:  withSessionID(exactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			info, err := do(cmd.Context(), c, f.agent, args[0])
			if err != nil {
				return err
			}
			if f.json {
				return o.printJSON(info)
			}
			if newID {
				fmt.Fprintln(o.env.Stdout, info.ID)
				fmt.Fprintln(o.env.Stderr, sessionLine(info))
				return nil
			}
			fmt.Fprintln(o.env.Stdout, sessionLine(info))
			return nil
		},
	}
	f.register(cmd.Flags(), true)
	return cmd
}

func (o *options) sessionShowCommand() *cobra.Command {
	return o.sessionIDCommand("show", "Show a session", func(ctx context.Context, c *client.Client, agent, id string) (apitype.Session, error) {
		return c.GetSession(ctx, agent, id)
	})
}

func (o *options) sessionRmCommand() *cobra.Command {
	return o.sessionIDCommand("rm", "Close a session and remove its sandbox (a call running is killed)", func(ctx context.Context, c *client.Client, agent, id string) (apitype.Session, error) {
		return c.CloseSession(ctx, agent, id)
	})
}

// withSessionID checks, before args, that the first argument given is a session ID (se_ and
// 26 characters): another name, empty or holding a '/', would change the route it is sent on.
func withSessionID(args cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if len(a) > 0 && !sandbox.ValidSessionID(a[0]) {
			return usageErrorf("%.80q is not a session ID: give the se_... ID that sandpit session new printed (sandpit session ls lists them)", a[0])
		}
		return args(cmd, a)
	}
}
