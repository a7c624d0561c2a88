package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// jobFlags are the fields of a job as flags.
type jobFlags struct {
	schedule, timezone, input, overlap, catchUp, description string
	timeout                                                  time.Duration
	codeVersion                                              int
	disabled                                                 bool
	secrets                                                  []string
	inputs                                                   inputFlags
}

func (f *jobFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.schedule, "schedule", "", `cron spec: 5 fields, @hourly, @daily, @weekly, @monthly or "@every 10m"`)
	fs.StringVar(&f.timezone, "timezone", "", "IANA timezone of the schedule (default UTC)")
	fs.StringVar(&f.input, "input", "", "INPUT of each run as JSON, or @FILE")
	fs.StringVar(&f.overlap, "overlap", "", `while the previous run goes on: "skip" (default) or "queue"`)
	fs.StringVar(&f.catchUp, "catch-up", "", `fires missed while the daemon was down: "skip" (default) or "once"`)
	fs.StringVar(&f.description, "description", "", "what the job is for")
	fs.DurationVar(&f.timeout, "timeout", 0, "each run's wall-clock limit (default: the daemon's)")
	fs.IntVar(&f.codeVersion, "code-version", 0, "run this version of the code (default the latest)")
	fs.StringArrayVar(&f.secrets, "secret", nil, "a secret each run may use, repeatable (sandpit secrets list; docs/secrets.md); with update, the secrets given replace the job's (--secret '' for none)")
	fs.BoolVar(&f.disabled, "disabled", false, "the job does not fire (create it paused; with update, --disabled=false resumes it)")
	f.inputs.register(fs)
	fs.Lookup("file").Usage = "a file for each run's working directory: PATH, or PATH=NAME (repeatable; with update, the files given replace the job's)"
	fs.Lookup("no-charts").Usage = "each run does not save open matplotlib figures and PIL images shown as output files (with update, --no-charts=false saves them again)"
}

// patch returns the fields given on the command line, by their JSON names.
func (f *jobFlags) patch(cmd *cobra.Command) (map[string]any, error) {
	p := map[string]any{}
	set := func(flag, key string, v any) {
		if cmd.Flags().Changed(flag) {
			p[key] = v
		}
	}
	set("schedule", "schedule", f.schedule)
	set("timezone", "timezone", f.timezone)
	set("overlap", "overlap", f.overlap)
	set("catch-up", "catch_up", f.catchUp)
	set("description", "description", f.description)
	set("code-version", "code_version", f.codeVersion)
	if cmd.Flags().Changed("disabled") {
		p["enabled"] = !f.disabled
	}
	if cmd.Flags().Changed("file") {
		files, err := readInputFiles(f.inputs.files)
		if err != nil {
			return nil, err
		}
		p["files"] = files
	}
	if cmd.Flags().Changed("no-charts") {
		p["charts"] = !f.inputs.noCharts
	}
	if cmd.Flags().Changed("secret") {
		secrets := []string{}
		for _, s := range f.secrets {
			if s != "" {
				secrets = append(secrets, s)
			}
		}
		p["secrets"] = secrets
	}
	if cmd.Flags().Changed("timeout") {
		if f.timeout.Milliseconds() < 1 {
			return nil, usageErrorf("--timeout %s is too short: give at least 1ms, e.g. --timeout 30s", f.timeout)
		}
		p["timeout_ms"] = f.timeout.Milliseconds()
	}
	if cmd.Flags().Changed("input") {
		in, err := jsonArg("input", f.input)
		if err != nil {
			return nil, err
		}
		p["input"] = in
	}
	return p, nil
}

func (o *options) jobCommand() *cobra.Command {
	job := &cobra.Command{Use: "job", Short: "Schedule saved code: create, list, show, update, pause, resume, run, rm, history (needs the daemon)"}
	job.AddCommand(o.jobCreateCommand(), o.jobListCommand(), o.jobShowCommand(), o.jobUpdateCommand(),
		o.jobActionCommand("pause", "Stop a job firing until resumed"),
		o.jobActionCommand("resume", "Let a paused job fire again, from its next scheduled time"),
		o.jobRunCommand(), o.jobRmCommand(), o.jobHistoryCommand())
	return job
}

func (o *options) jobCreateCommand() *cobra.Command {
	var create struct {
		daemonFlags
		jobFlags
	}
	createCmd := &cobra.Command{
		Use:     "create CODE_NAME --schedule SPEC",
		Short:   "Create a job that runs saved code on a schedule; prints its next five fires",
		Example: `  sandpit job create daily-report --schedule '0 9 * * 1-5' --timezone Europe/Berlin --input '{"days": 7}'`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := create.patch(cmd)
			if err != nil {
				return err
			}
			p["code_name"] = args[0]
			b, _ := json.Marshal(p)
			var d apitype.JobDraft
			_ = json.Unmarshal(b, &d)
			c, err := o.daemon(cmd, create.daemonFlags)
			if err != nil {
				return err
			}
			j, err := c.CreateJob(cmd.Context(), create.agent, d)
			if err != nil {
				return err
			}
			return o.printJob(j, create.json)
		},
	}
	create.daemonFlags.register(createCmd.Flags(), true)
	create.jobFlags.register(createCmd.Flags())
	return createCmd
}

func (o *options) jobUpdateCommand() *cobra.Command {
	var update struct {
		daemonFlags
		jobFlags
	}
	updateCmd := &cobra.Command{
		Use:   "update ID",
		Short: "Change the fields of a job given as flags",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := update.patch(cmd)
			if err != nil {
				return err
			}
			if len(p) == 0 {
				return usageErrorf("nothing to change: give at least one of --schedule, --timezone, --input, --overlap, --catch-up, --timeout, --code-version, --description, --disabled, --file, --no-charts, --secret")
			}
			c, err := o.daemon(cmd, update.daemonFlags)
			if err != nil {
				return err
			}
			j, err := c.UpdateJob(cmd.Context(), update.agent, args[0], p)
			if err != nil {
				return err
			}
			return o.printJob(j, update.json)
		},
	}
	update.daemonFlags.register(updateCmd.Flags(), true)
	update.jobFlags.register(updateCmd.Flags())
	return updateCmd
}

// jobIDCommand is a command that takes a job ID and nothing else, and does do with it.
func (o *options) jobIDCommand(use, short string, do func(ctx context.Context, c *client.Client, agent, id string, asJSON bool) error) *cobra.Command {
	var f daemonFlags
	cmd := &cobra.Command{
		Use:   use + " ID",
		Short: short,
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			return do(cmd.Context(), c, f.agent, args[0], f.json)
		},
	}
	f.register(cmd.Flags(), true)
	return cmd
}

// jobActionCommand makes action ("pause" or "resume") on a job.
func (o *options) jobActionCommand(action, short string) *cobra.Command {
	return o.jobIDCommand(action, short, func(ctx context.Context, c *client.Client, agent, id string, asJSON bool) error {
		j, err := c.JobAction(ctx, agent, id, action)
		if err != nil {
			return err
		}
		return o.printJob(j, asJSON)
	})
}

func (o *options) jobShowCommand() *cobra.Command {
	return o.jobIDCommand("show", "Show a job and its next five fires", func(ctx context.Context, c *client.Client, agent, id string, asJSON bool) error {
		j, err := c.GetJob(ctx, agent, id)
		if err != nil {
			return err
		}
		return o.printJob(j, asJSON)
	})
}

func (o *options) jobRunCommand() *cobra.Command {
	return o.jobIDCommand("run", "Fire a job now (its overlap policy applies)", func(ctx context.Context, c *client.Client, agent, id string, asJSON bool) error {
		f, err := c.RunJob(ctx, agent, id)
		if err != nil {
			return err
		}
		if asJSON {
			return o.printJSON(f)
		}
		fmt.Fprintf(o.env.Stdout, "%s %s\n", f.Status, sandbox.EscapeName(strings.TrimSpace(f.ExecutionID+" "+f.Reason)))
		return nil
	})
}

func (o *options) jobRmCommand() *cobra.Command {
	return o.jobIDCommand("rm", "Delete a job and its history (the ledger keeps its runs)", func(ctx context.Context, c *client.Client, agent, id string, _ bool) error {
		if err := c.DeleteJob(ctx, agent, id); err != nil {
			return err
		}
		fmt.Fprintf(o.env.Stdout, "deleted %s\n", id)
		return nil
	})
}

func (o *options) jobHistoryCommand() *cobra.Command {
	return o.jobIDCommand("history", "List a job's fires, newest first: started, skipped, queued, missed or failed", func(ctx context.Context, c *client.Client, agent, id string, asJSON bool) error {
		fires, next, err := c.JobHistory(ctx, agent, id, time.Time{}, time.Time{}, apitype.Page{Limit: 100})
		if err != nil {
			return err
		}
		if asJSON {
			return o.printJSON(map[string]any{"fires": fires, "next_cursor": next})
		}
		if len(fires) == 0 {
			fmt.Fprintf(o.env.Stdout, "job %s has not fired yet\n", id)
			return nil
		}
		tw := tabwriter.NewWriter(o.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SCHEDULED\tKIND\tSTATUS\tEXECUTION\tOUTCOME\tDAEMON\tREASON")
		for _, f := range fires {
			status := f.Status
			if f.Missed > 0 {
				status += fmt.Sprintf(" (%d)", f.Missed)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.ScheduledAt.Format(time.RFC3339), f.Kind, status, f.ExecutionID, f.Outcome,
				cmp.Or(f.Daemon, "-"), oneLine(f.Reason, 60))
		}
		return tw.Flush()
	})
}

func (o *options) jobListCommand() *cobra.Command {
	var list daemonFlags
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List the agent's jobs",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.daemon(cmd, list)
			if err != nil {
				return err
			}
			items, next, err := c.ListJobs(cmd.Context(), list.agent, apitype.Page{Limit: apitype.MaxLimit})
			if err != nil {
				return err
			}
			if list.json {
				return o.printJSON(map[string]any{"jobs": items, "next_cursor": next})
			}
			if len(items) == 0 {
				fmt.Fprintf(o.env.Stdout, "agent %s has no jobs; create one with `sandpit job create CODE_NAME --schedule SPEC`\n", list.agent)
				return nil
			}
			tw := tabwriter.NewWriter(o.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tCODE\tSCHEDULE\tTIMEZONE\tENABLED\tNEXT RUN")
			for _, j := range items {
				next := "-"
				if j.NextRunAt != nil {
					next = j.NextRunAt.Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\t%s\n", j.ID, j.CodeName, j.Schedule, j.Timezone, j.Enabled, next)
			}
			return tw.Flush()
		},
	}
	list.register(listCmd.Flags(), true)
	return listCmd
}

func (o *options) printJob(j apitype.ScheduledJob, asJSON bool) error {
	if asJSON {
		return o.printJSON(j)
	}
	w := o.env.Stdout
	version := "the latest version"
	if j.CodeVersion != nil {
		version = fmt.Sprintf("version %d", *j.CodeVersion)
	}
	input := "null"
	if len(j.Input) > 0 {
		input = oneLine(string(j.Input), 200)
	}
	timeout := "the daemon's default"
	if j.TimeoutMS != nil {
		timeout = (time.Duration(*j.TimeoutMS) * time.Millisecond).String()
	}
	fmt.Fprintf(w, "job:       %s\ncode:      %s (%s)\ninput:     %s\ntimeout:   %s\n", j.ID, j.CodeName, version, input, timeout)
	fmt.Fprintf(w, "schedule:  %s (%s)\nenabled:   %t\noverlap:   %s\ncatch-up:  %s\n", j.Schedule, j.Timezone, j.Enabled, j.Overlap, j.CatchUp)
	if j.Description != "" {
		fmt.Fprintf(w, "about:     %s\n", oneLine(j.Description, 200))
	}
	for i, t := range j.NextFires {
		label := "next:     "
		if i > 0 {
			label = "          "
		}
		fmt.Fprintf(w, "%s %s\n", label, t.Format(time.RFC3339))
	}
	return nil
}
