package cli

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A session's running commands from the command line: `session exec --background` prints a
// process ID (pr_…) that these take: ps, logs, kill, wait.

// withProcessID checks, after the session ID, that the second argument is a process ID (pr_
// and 26 characters): another name would change the route it is sent on.
func withProcessID(args cobra.PositionalArgs) cobra.PositionalArgs {
	return withSessionID(func(cmd *cobra.Command, a []string) error {
		if len(a) > 1 && !sandbox.ValidProcessID(a[1]) {
			return usageErrorf("%q is not a process ID: give the pr_… ID that session exec --background printed (sandpit session ps %s lists them)", a[1], a[0])
		}
		return args(cmd, a)
	})
}

func (o *options) sessionPsCommand() *cobra.Command {
	var f daemonFlags
	cmd := &cobra.Command{
		Use:   "ps ID",
		Short: "List a session's commands that run now, and those ended lately (sandpit session commands lists the ledger's)",
		Args:  withSessionID(exactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			list, err := c.Processes(cmd.Context(), f.agent, args[0])
			if err != nil {
				return err
			}
			if f.json {
				return o.printJSON(apitype.ProcessList{Processes: list})
			}
			if len(list) == 0 {
				fmt.Fprintf(o.env.Stdout, "session %s runs no command\n", args[0])
				return nil
			}
			tw := tabwriter.NewWriter(o.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tPID\tSTATE\tSTARTED\tEXIT\tCOMMAND")
			for _, p := range list {
				exit := "-"
				if p.End != nil {
					exit = fmt.Sprint(commandExit(p.End))
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", p.ID, p.PID, p.State, p.StartedAt.Local().Format(time.DateTime), exit, commandLine(p))
			}
			return tw.Flush()
		},
	}
	f.register(cmd.Flags(), true)
	return cmd
}

func (o *options) sessionLogsCommand() *cobra.Command {
	var (
		f      daemonFlags
		follow bool
	)
	cmd := &cobra.Command{
		Use:   "logs ID PROCESS",
		Short: "Print a session's background command's output: what its sandbox kept, and with --follow the rest as it comes",
		Long: `Print the output of command PROCESS of session ID (one started with session exec --background):
the latest its sandbox kept (up to 64 KiB of stdout and of stderr; a note on stderr says how
many earlier bytes were not), stdout on stdout and stderr on stderr. With --follow, go on printing what it writes until it ends (Ctrl-C stops following;
the command runs on). A foreground command's output went to whoever ran it: none is kept.`,
		Example: "  P=$(sandpit session exec $S --background -- python3 -m http.server 8000)\n  sandpit session logs $S $P --follow",
		Args:    withProcessID(exactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			p, err := c.ProcessOutput(cmd.Context(), f.agent, args[0], args[1], follow, o.printCommandOutput)
			if cmd.Context().Err() != nil {
				return reported(context.Canceled) // Ctrl-C stops following, as it does tail -f
			}
			if err == nil && !p.Background {
				fmt.Fprintf(o.env.Stderr, "sandpit: %s is a foreground command: its output went to whoever ran it, and the daemon keeps none\n", p.ID)
			}
			return err
		},
	}
	f.register(cmd.Flags(), false)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "go on printing the output as it comes, until the command ends")
	return cmd
}

func (o *options) sessionKillCommand() *cobra.Command {
	var (
		f      daemonFlags
		signal string
	)
	cmd := &cobra.Command{
		Use:     "kill ID PROCESS",
		Short:   "Send a signal to a session's running command (default SIGTERM)",
		Example: "  P=$(sandpit session exec $S --background -- sleep 300)\n  sandpit session kill $S $P --signal SIGKILL",
		Args:    withProcessID(exactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			return c.SignalProcess(cmd.Context(), f.agent, args[0], args[1], signal)
		},
	}
	f.register(cmd.Flags(), true)
	cmd.Flags().StringVarP(&signal, "signal", "s", "SIGTERM", "the signal: SIGTERM, SIGKILL, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGSTOP or SIGCONT")
	return cmd
}

func (o *options) sessionWaitCommand() *cobra.Command {
	var (
		f       daemonFlags
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "wait ID PROCESS",
		Short: "Wait until a session's command has ended, and exit with its status",
		Long: `Wait until command PROCESS of session ID has ended (one started with session exec
--background), print how it ended, and exit with its exit status (128 and the signal's number
when a signal ended it), as session exec does. With --timeout, stop waiting after that long
and exit 124, as timeout(1) does; the command runs on.`,
		Args: withProcessID(exactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < 0 {
				return usageErrorf("--timeout %s: give a positive duration, or 0 to wait as long as the command runs", timeout)
			}
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			p, err := c.WaitProcess(ctx, f.agent, args[0], args[1])
			if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && cmd.Context().Err() == nil { // --timeout passed
				fmt.Fprintf(o.env.Stderr, "sandpit: command %s of session %s still runs after --timeout %s (sandpit session kill %s %s ends it)\n",
					args[1], args[0], timeout, args[0], args[1])
				return &reportedError{res: &apitype.Result{Outcome: apitype.OutcomeTimeout}}
			}
			if err != nil {
				return err
			}
			if f.json {
				if err := o.printJSON(p); err != nil {
					return err
				}
			}
			end := p.End
			if end == nil {
				return fmt.Errorf("the daemon answered process %s without its end", args[1])
			}
			if !f.json {
				fmt.Fprintf(o.env.Stderr, "%s %s, exit %d, %d ms\n", p.ID, end.Outcome, commandExit(end), end.DurationMS)
				if end.Outcome != apitype.OutcomeOK && end.Outcome != apitype.OutcomeError && end.Reason != "" {
					fmt.Fprintf(o.env.Stderr, "sandpit: %s: %s\n", end.Outcome, sandbox.EscapeText(end.Reason))
				}
			}
			return reportedRun(commandResult(end))
		},
	}
	f.register(cmd.Flags(), true)
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "stop waiting after this long and exit 124 (the command runs on); 0 waits as long as it runs")
	return cmd
}
