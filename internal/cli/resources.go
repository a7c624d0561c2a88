package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/jobs"
	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// NoDaemonError means a command that needs the daemon found none; it exits 69.
type NoDaemonError struct {
	URL string
	Err error
}

func (e *NoDaemonError) Error() string {
	return fmt.Sprintf("no sandpit daemon answers at %s (%v): saved code, jobs and the ledger are served by the daemon; "+
		"start it with `sandpit serve`, or set SANDPIT_URL or --url to its address", e.URL, e.Err)
}

func (e *NoDaemonError) Unwrap() error { return e.Err }

// daemonFlags are the flags of the commands served by the daemon.
type daemonFlags struct {
	url   string
	agent string
	json  bool
}

func (f *daemonFlags) register(fs *pflag.FlagSet, withJSON bool) {
	f.registerShared(fs, withJSON)
	fs.StringVar(&f.agent, "agent", "default", "agent namespace")
}

// registerShared registers --url (and --json when withJSON) without --agent, for commands
// whose resources belong to no agent (installed packages, the machine's setup).
func (f *daemonFlags) registerShared(fs *pflag.FlagSet, withJSON bool) {
	fs.StringVar(&f.url, "url", "", "daemon URL (default $SANDPIT_URL or "+DefaultURL+")")
	f.registerOutput(fs, withJSON)
}

// registerOutput registers --json when withJSON.
func (f *daemonFlags) registerOutput(fs *pflag.FlagSet, withJSON bool) {
	if withJSON {
		fs.BoolVar(&f.json, "json", false, "print JSON")
	}
}

// daemon returns a client of the daemon, or a *NoDaemonError. Like `sandpit run`, it refuses
// engine flags (the daemon has its own settings) and a network policy the daemon lacks.
func (o *options) daemon(cmd *cobra.Command, f daemonFlags) (*client.Client, error) {
	ctx := cmd.Context()
	if given := o.engineFlagsGiven(cmd); len(given) > 0 {
		return nil, usageErrorf("this command is served by the daemon, which runs with its own settings; these flags only set up an engine: %s; "+
			"give them to `sandpit serve`", strings.Join(given, ", "))
	}
	cfg, err := o.load(cmd)
	if err != nil {
		return nil, err
	}
	u := o.daemonURL(f.url)
	c := client.New(u, nil).As(sandbox.SourceCLI).WithToken(cfg.Token)
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := c.Health(hctx); err != nil {
		return nil, &NoDaemonError{URL: u, Err: err}
	}
	if err := o.compareWithDaemon(ctx, c, cfg, u); err != nil {
		return nil, err
	}
	return c, nil
}

func (o *options) printJSON(v any) error {
	enc := json.NewEncoder(o.env.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// jsonArg reads a flag's JSON value: inline, or @FILE.
func jsonArg(flag, v string) (json.RawMessage, error) {
	b := []byte(v)
	if name, ok := strings.CutPrefix(v, "@"); ok {
		var err error
		if b, err = os.ReadFile(name); err != nil {
			return nil, usageErrorf("--%s: %v", flag, err)
		}
	}
	if !json.Valid(b) {
		return nil, usageErrorf("--%s is not valid JSON: give a JSON value inline or @FILE", flag)
	}
	return json.RawMessage(b), nil
}

func (o *options) codeCommand() *cobra.Command {
	code := &cobra.Command{Use: "code", Short: "Save, list, show, list the versions of, run and remove an agent's saved code (needs the daemon)"}

	var save struct {
		daemonFlags
		deps                []string
		inSchema, outSchema string
		description         string
		expected            int
	}
	saveCmd := &cobra.Command{
		Use:   "save NAME FILE",
		Short: "Save FILE as NAME: version 1 when new, the next version otherwise",
		Long: `Save a Python script under NAME (lowercase letters, digits, '-' and '_'). Every save of an
existing name makes a new version. Dependencies are PEP 508 requirements; schemas are JSON
Schemas (2020-12) given inline or as @FILE: the input is validated before each run and OUTPUT
after it (a mismatch ends the run with outcome output_invalid).`,
		Example: `  sandpit code save sum-sales sum.py --dep 'pandas>=2' --input-schema @in.json --output-schema @out.json`,
		Args:    exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := os.ReadFile(args[1])
			if err != nil {
				return usageErrorf("reading the code: %v", err)
			}
			d := library.Draft{Code: string(src), Dependencies: save.deps, Description: save.description}
			if save.inSchema != "" {
				if d.InputSchema, err = jsonArg("input-schema", save.inSchema); err != nil {
					return err
				}
			}
			if save.outSchema != "" {
				if d.OutputSchema, err = jsonArg("output-schema", save.outSchema); err != nil {
					return err
				}
			}
			c, err := o.daemon(cmd, save.daemonFlags)
			if err != nil {
				return err
			}
			saved, err := c.CreateCode(cmd.Context(), save.agent, args[0], d)
			if api, ok := err.(*client.APIError); ok && api.Status == 409 {
				saved, err = c.UpdateCode(cmd.Context(), save.agent, args[0], d, save.expected)
			}
			if err != nil {
				return err
			}
			if save.json {
				return o.printJSON(saved)
			}
			fmt.Fprintf(o.env.Stdout, "saved %s version %d\n", saved.Name, saved.Version)
			return nil
		},
	}
	save.register(saveCmd.Flags(), true)
	saveCmd.Flags().StringArrayVar(&save.deps, "dep", nil, "a dependency (PEP 508), repeatable")
	saveCmd.Flags().StringVar(&save.inSchema, "input-schema", "", "input JSON Schema, inline or @FILE")
	saveCmd.Flags().StringVar(&save.outSchema, "output-schema", "", "output JSON Schema, inline or @FILE")
	saveCmd.Flags().StringVar(&save.description, "description", "", "what the code does")
	saveCmd.Flags().IntVar(&save.expected, "expected-version", 0, "refuse the save unless this is the current version")

	var list struct {
		daemonFlags
		q     string
		limit int
	}
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List the agent's saved code",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.daemon(cmd, list.daemonFlags)
			if err != nil {
				return err
			}
			items, next, err := c.ListCode(cmd.Context(), list.agent, list.q, store.Page{Limit: list.limit})
			if err != nil {
				return err
			}
			if list.json {
				return o.printJSON(map[string]any{"code": items, "next_cursor": next})
			}
			if len(items) == 0 {
				what := "no saved code"
				if list.q != "" {
					what = fmt.Sprintf("no saved code matching %q", list.q)
				}
				fmt.Fprintf(o.env.Stdout, "agent %s has %s; save some with `sandpit code save NAME FILE`\n", list.agent, what)
				return nil
			}
			tw := tabwriter.NewWriter(o.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tVERSION\tUPDATED\tDESCRIPTION")
			for _, it := range items {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", it.Name, it.Version, it.UpdatedAt.Format(time.RFC3339), oneLine(it.Description, 60))
			}
			return tw.Flush()
		},
	}
	list.register(listCmd.Flags(), true)
	listCmd.Flags().StringVarP(&list.q, "query", "q", "", "only code whose name or description contains this")
	listCmd.Flags().IntVar(&list.limit, "limit", 100, "at most this many")

	var show struct {
		daemonFlags
		version int
	}
	showCmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Print saved code with its dependencies, schemas and version (JSON)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.daemon(cmd, show.daemonFlags)
			if err != nil {
				return err
			}
			got, err := c.GetCode(cmd.Context(), show.agent, args[0], show.version)
			if err != nil {
				return err
			}
			return o.printJSON(got)
		},
	}
	show.register(showCmd.Flags(), false)
	showCmd.Flags().IntVar(&show.version, "version", 0, "show this version (default the latest)")

	var run struct {
		daemonFlags
		input   string
		timeout time.Duration
		version int
	}
	runCmd := &cobra.Command{
		Use:   "run NAME",
		Short: "Run saved code and print its output as it comes (exit status as sandpit run)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r := library.Run{Version: run.version}
			if cmd.Flags().Changed("input") {
				in, err := jsonArg("input", run.input)
				if err != nil {
					return err
				}
				r.Input = in
			}
			if cmd.Flags().Changed("timeout") {
				ms := run.timeout.Milliseconds()
				if ms < 1 {
					return usageErrorf("--timeout %s is too short: give at least 1ms, e.g. --timeout 30s", run.timeout)
				}
				r.TimeoutMS = &ms
			}
			c, err := o.daemon(cmd, run.daemonFlags)
			if err != nil {
				return err
			}
			res, err := c.RunCode(cmd.Context(), run.agent, args[0], r, o.emitter(run.json))
			return o.finishRun(cmd, res, err, run.json)
		},
	}
	run.register(runCmd.Flags(), true)
	runCmd.Flags().StringVar(&run.input, "input", "", "INPUT as JSON, or @FILE")
	runCmd.Flags().DurationVar(&run.timeout, "timeout", 0, "wall-clock limit, e.g. 30s (default: the daemon's)")
	runCmd.Flags().IntVar(&run.version, "version", 0, "run this version (default the latest)")

	var rm struct {
		daemonFlags
		force bool
	}
	rmCmd := &cobra.Command{
		Use:   "rm NAME",
		Short: "Delete saved code and all its versions (refused while jobs use it, unless --force)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.daemon(cmd, rm.daemonFlags)
			if err != nil {
				return err
			}
			disabled, err := c.DeleteCode(cmd.Context(), rm.agent, args[0], rm.force)
			if err != nil {
				return err
			}
			fmt.Fprintf(o.env.Stdout, "deleted %s\n", args[0])
			for _, id := range disabled {
				fmt.Fprintf(o.env.Stdout, "disabled job %s\n", id)
			}
			return nil
		},
	}
	rm.register(rmCmd.Flags(), false)
	rmCmd.Flags().BoolVar(&rm.force, "force", false, "delete even if jobs use it, disabling them")

	var versions daemonFlags
	versionsCmd := &cobra.Command{
		Use:   "versions NAME",
		Short: "List every version of saved code, newest first (show one with code show NAME --version N)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.daemon(cmd, versions)
			if err != nil {
				return err
			}
			list, err := c.CodeVersions(cmd.Context(), versions.agent, args[0])
			if err != nil {
				return err
			}
			if versions.json {
				return o.printJSON(map[string]any{"versions": list})
			}
			tw := tabwriter.NewWriter(o.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\tSAVED\tCODE SHA-256\tDESCRIPTION")
			for _, v := range list {
				fmt.Fprintf(tw, "%d\t%s\t%.12s\t%s\n", v.Version, v.CreatedAt.Format(time.RFC3339), v.CodeSHA256, oneLine(v.Description, 60))
			}
			return tw.Flush()
		},
	}
	versions.register(versionsCmd.Flags(), true)

	code.AddCommand(saveCmd, listCmd, showCmd, versionsCmd, runCmd, rmCmd)
	return code
}

// jobFlags are the fields of a job as flags.
type jobFlags struct {
	schedule, timezone, input, overlap, catchUp, description string
	timeout                                                  time.Duration
	codeVersion                                              int
	disabled                                                 bool
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
	fs.BoolVar(&f.disabled, "disabled", false, "the job does not fire (create it paused; with update, --disabled=false resumes it)")
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
			var d jobs.Draft
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
				return usageErrorf("nothing to change: give at least one of --schedule, --timezone, --input, --overlap, --catch-up, --timeout, --code-version, --description, --disabled")
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

	// The commands that take a job ID and nothing else.
	simple := func(use, short string, do func(ctx context.Context, c *client.Client, agent, id string, asJSON bool) error) *cobra.Command {
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
	action := func(name string) func(ctx context.Context, c *client.Client, agent, id string, asJSON bool) error {
		return func(ctx context.Context, c *client.Client, agent, id string, asJSON bool) error {
			j, err := c.JobAction(ctx, agent, id, name)
			if err != nil {
				return err
			}
			return o.printJob(j, asJSON)
		}
	}
	showCmd := simple("show", "Show a job and its next five fires", func(ctx context.Context, c *client.Client, agent, id string, asJSON bool) error {
		j, err := c.GetJob(ctx, agent, id)
		if err != nil {
			return err
		}
		return o.printJob(j, asJSON)
	})
	runCmd := simple("run", "Fire a job now (its overlap policy applies)", func(ctx context.Context, c *client.Client, agent, id string, asJSON bool) error {
		f, err := c.RunJob(ctx, agent, id)
		if err != nil {
			return err
		}
		if asJSON {
			return o.printJSON(f)
		}
		fmt.Fprintf(o.env.Stdout, "%s %s\n", f.Status, strings.TrimSpace(f.ExecutionID+" "+f.Reason))
		return nil
	})
	rmCmd := simple("rm", "Delete a job and its history (the ledger keeps its runs)", func(ctx context.Context, c *client.Client, agent, id string, _ bool) error {
		if err := c.DeleteJob(ctx, agent, id); err != nil {
			return err
		}
		fmt.Fprintf(o.env.Stdout, "deleted %s\n", id)
		return nil
	})
	historyCmd := simple("history", "List a job's fires, newest first: started, skipped, queued, missed or failed", func(ctx context.Context, c *client.Client, agent, id string, asJSON bool) error {
		fires, next, err := c.JobHistory(ctx, agent, id, store.FireFilter{}, store.Page{Limit: 100})
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
		fmt.Fprintln(tw, "SCHEDULED\tKIND\tSTATUS\tEXECUTION\tOUTCOME\tREASON")
		for _, f := range fires {
			status := f.Status
			if f.Missed > 0 {
				status += fmt.Sprintf(" (%d)", f.Missed)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.ScheduledAt.Format(time.RFC3339), f.Kind, status, f.ExecutionID, f.Outcome, oneLine(f.Reason, 60))
		}
		return tw.Flush()
	})

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
			items, next, err := c.ListJobs(cmd.Context(), list.agent, store.Page{Limit: store.MaxLimit})
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

	job.AddCommand(createCmd, listCmd, showCmd, updateCmd,
		simple("pause", "Stop a job firing until resumed", action("pause")),
		simple("resume", "Let a paused job fire again, from its next scheduled time", action("resume")),
		runCmd, rmCmd, historyCmd)
	return job
}

func (o *options) printJob(j jobs.Scheduled, asJSON bool) error {
	if asJSON {
		return o.printJSON(j)
	}
	w := o.env.Stdout
	version := "the latest version"
	if j.CodeVersion > 0 {
		version = fmt.Sprintf("version %d", j.CodeVersion)
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

func (o *options) execCommand() *cobra.Command {
	exec := &cobra.Command{Use: "exec", Short: "Read the ledger of executions (needs the daemon)"}

	var list struct {
		daemonFlags
		source, outcome, codeName, jobID, since, until, cursor string
		limit                                                  int
	}
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List executions, newest first",
		Long: `List executions from the ledger, newest first: every run from the API, the CLI, MCP and
jobs. --agent filters by agent (default: every agent); the other flags narrow further.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter := url.Values{}
			add := func(key, v string) {
				if v != "" {
					filter.Set(key, v)
				}
			}
			add("agent", list.agent)
			add("source", list.source)
			add("outcome", list.outcome)
			add("code_name", list.codeName)
			add("job_id", list.jobID)
			for _, t := range []struct{ flag, key, v string }{{"since", "since", list.since}, {"until", "until", list.until}} {
				if t.v == "" {
					continue
				}
				at, err := parseWhen(t.v, time.Now())
				if err != nil {
					return usageErrorf("--%s: %v", t.flag, err)
				}
				add(t.key, at.Format(time.RFC3339))
			}
			c, err := o.daemon(cmd, list.daemonFlags)
			if err != nil {
				return err
			}
			if list.limit < 1 || list.limit > store.MaxLimit {
				return usageErrorf("--limit %d: give 1 to %d", list.limit, store.MaxLimit)
			}
			items, next, err := c.ListExecutions(cmd.Context(), filter, store.Page{Limit: list.limit, Cursor: list.cursor})
			if err != nil {
				return err
			}
			if list.json {
				return o.printJSON(map[string]any{"executions": items, "next_cursor": next})
			}
			if len(items) == 0 {
				fmt.Fprintln(o.env.Stdout, "no executions match")
				return nil
			}
			tw := tabwriter.NewWriter(o.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTARTED\tAGENT\tSOURCE\tCODE\tOUTCOME\tEXIT\tDURATION\tSTART\tPRINTED")
			for _, e := range items {
				code := e.CodeName
				if code != "" {
					code += " v" + strconv.Itoa(e.CodeVersion)
				}
				outcome := string(e.Outcome)
				if e.Status == store.StatusRunning {
					outcome = "(running)"
				}
				start := e.Start // fork or cold
				if start == "" {
					start = "-"
				}
				exit := "-"
				if e.Status != store.StatusRunning {
					exit = strconv.Itoa(e.ExitCode)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%dms\t%s\t%s\n", e.ID, e.StartedAt.Format(time.RFC3339), e.Agent, e.Source, code, outcome,
					exit, e.DurationMS, start, outputPreview(e))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if next != "" {
				fmt.Fprintf(o.env.Stderr, "sandpit: more: add --cursor %s\n", next)
			}
			return nil
		},
	}
	fl := listCmd.Flags()
	list.registerShared(fl, true)
	fl.StringVar(&list.agent, "agent", "", "only this agent's executions (default: every agent)")
	fl.StringVar(&list.cursor, "cursor", "", "the next_cursor of an earlier page (see --json)")
	fl.StringVar(&list.source, "source", "", "api, cli, mcp or job")
	fl.StringVar(&list.outcome, "outcome", "", "ok, error, timeout, memory_limit, ...")
	fl.StringVar(&list.codeName, "code", "", "saved code name")
	fl.StringVar(&list.jobID, "job", "", "job ID")
	fl.StringVar(&list.since, "since", "", "started at or after: RFC 3339 time, or a duration ago such as 1h")
	fl.StringVar(&list.until, "until", "", "started before: RFC 3339 time, or a duration ago")
	fl.IntVar(&list.limit, "limit", 50, "at most this many")

	var show daemonFlags
	showCmd := &cobra.Command{
		Use:   "show ID",
		Short: "Print an execution's record: request, result, stdout, stderr and OUTPUT (JSON)",
		Long: `Print an execution's record from the ledger. With --agent, only if it is that agent's
(another agent's record is "not found"); without, whichever agent's it is.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.daemon(cmd, show)
			if err != nil {
				return err
			}
			e, err := c.GetExecution(cmd.Context(), args[0], show.agent)
			if err != nil {
				return err
			}
			return o.printJSON(e)
		},
	}
	show.registerShared(showCmd.Flags(), false)
	showCmd.Flags().StringVar(&show.agent, "agent", "", "only if it is this agent's execution (default: any agent)")
	exec.AddCommand(listCmd, showCmd)
	return exec
}

// outputPreview is one line of what an execution printed, for exec list: the end of stderr
// when it failed (where a traceback ends), else the start of stdout, else of stderr.
func outputPreview(e store.ExecutionSummary) string {
	const width = 40
	switch {
	case e.Outcome != sandbox.OutcomeOK && strings.TrimSpace(e.StderrPreview) != "":
		lines := strings.Split(strings.TrimSpace(e.StderrPreview), "\n")
		return oneLine(lines[len(lines)-1], width)
	case strings.TrimSpace(e.StdoutPreview) != "":
		return oneLine(e.StdoutPreview, width)
	case strings.TrimSpace(e.StderrPreview) != "":
		return oneLine(e.StderrPreview, width)
	}
	return "-"
}

// parseWhen reads an RFC 3339 time, or a duration before now ("90m").
func parseWhen(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2026-01-02T15:04:05Z) nor a duration ago (90m, 24h)", v)
	}
	return now.Add(-d), nil
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}

func (o *options) packagesCommand() *cobra.Command {
	pk := &cobra.Command{Use: "packages", Short: "List, pre-install and remove the dependencies installed in the sandbox (needs the daemon)"}
	var list daemonFlags
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List installed dependencies with their versions and sizes",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.daemon(cmd, list)
			if err != nil {
				return err
			}
			pkgs, err := c.Packages(cmd.Context())
			if err != nil {
				return err
			}
			if list.json {
				return o.printJSON(map[string]any{"packages": pkgs})
			}
			if len(pkgs) == 0 {
				fmt.Fprintln(o.env.Stdout, "no dependencies installed (the image's own packages are not listed)")
				return nil
			}
			tw := tabwriter.NewWriter(o.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tVERSION\tSIZE\tINSTALLED\tFOR")
			for _, p := range pkgs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name, p.Version, config.FormatSize(p.SizeBytes), p.InstalledAt.Format(time.RFC3339), p.Requirement)
			}
			return tw.Flush()
		},
	}
	list.registerShared(listCmd.Flags(), true)

	var install daemonFlags
	installCmd := &cobra.Command{
		Use:   "install REQUIREMENT...",
		Short: "Install dependencies ahead of the runs that need them",
		Long: `Install dependencies ahead of the runs that need them, for every agent, and print each
requirement's status: present, installed, skipped (its environment marker excludes it) or
failed. Exit status 66 when one failed (as a run's dependency_error).`,
		Example: `  sandpit packages install 'pandas==2.2.2' 'rich[jupyter]'`,
		Args:    minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.daemon(cmd, install)
			if err != nil {
				return err
			}
			statuses, err := c.InstallPackages(cmd.Context(), args, func(d sandbox.DependencyStatus) {
				if !install.json {
					fmt.Fprintln(o.env.Stdout, dependencyLine(d))
				}
			})
			if err != nil {
				return err
			}
			if install.json {
				if err := o.printJSON(map[string]any{"dependencies": statuses}); err != nil {
					return err
				}
			}
			for _, d := range statuses {
				if d.Status == sandbox.DependencyFailed {
					return &exitError{code: exitNoInput} // as a run's dependency_error
				}
			}
			return nil
		},
	}
	install.registerShared(installCmd.Flags(), true)

	var remove daemonFlags
	removeCmd := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove an installed dependency (every version of it; the image's own packages stay)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.daemon(cmd, remove)
			if err != nil {
				return err
			}
			removed, err := c.RemovePackage(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			for _, p := range removed {
				fmt.Fprintf(o.env.Stdout, "removed %s %s\n", p.Name, p.Version)
			}
			return nil
		},
	}
	remove.registerShared(removeCmd.Flags(), false)
	pk.AddCommand(listCmd, installCmd, removeCmd)
	return pk
}

// dependencyLine is one requirement's status as `packages install` prints it: the status, the
// requirement, and the version or why it failed (an installed one that conflicts says so).
func dependencyLine(d sandbox.DependencyStatus) string {
	detail := d.Version
	switch {
	case d.Status == sandbox.DependencyFailed && d.Version != "":
		detail = fmt.Sprintf("(version %s is installed but cannot be used with the others): %s", d.Version, d.Error)
	case d.Status == sandbox.DependencyFailed:
		detail = d.Error
	case d.Status == sandbox.DependencySkipped:
		detail = "(its environment marker excludes it here)"
	}
	return strings.TrimSpace(fmt.Sprintf("%-9s %s %s", d.Status, d.Requirement, detail))
}

func (o *options) kbCommand() *cobra.Command {
	kb := &cobra.Command{Use: "kb", Short: "Load and read the knowledge agents' code reaches through agent.* (needs the daemon)",
		Long: `The knowledge store behind agent.search_memory, get_facts, query_graph and get_documents,
and the results runs store with agent.store_result. Kinds: memories ({"text", "metadata"}),
facts ({"subject", "predicate", "object", "metadata"}), documents ({"id", "title", "content",
"metadata"}), nodes ({"id", "type", "properties"}), edges ({"source", "target", "relation",
"properties"}) and results ({"key", "value"}).`}
	kinds := "memories, facts, documents, nodes, edges or results"

	var imp struct {
		daemonFlags
		kind string
	}
	importCmd := &cobra.Command{
		Use:     "import FILE.ndjson --kind KIND",
		Short:   "Import one JSON object per line as KIND, all or none (- reads standard input)",
		Example: `  sandpit kb import notes.ndjson --kind memories --agent alice`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if imp.kind == "" {
				return usageErrorf("--kind is required: %s", kinds)
			}
			var r io.Reader = o.env.Stdin
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return usageErrorf("reading %s: %v", args[0], err)
				}
				defer f.Close()
				r = f
			}
			c, err := o.daemon(cmd, imp.daemonFlags)
			if err != nil {
				return err
			}
			n, err := c.ImportKnowledge(cmd.Context(), imp.agent, imp.kind, r)
			if err != nil {
				return err
			}
			fmt.Fprintf(o.env.Stdout, "imported %d %s for agent %s\n", n, imp.kind, imp.agent)
			return nil
		},
	}
	imp.register(importCmd.Flags(), false)
	importCmd.Flags().StringVar(&imp.kind, "kind", "", kinds)

	var list struct {
		daemonFlags
		kind, cursor string
		limit        int
	}
	listCmd := &cobra.Command{
		Use:   "list --kind KIND",
		Short: "Print the agent's items of KIND, one JSON object per line",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if list.kind == "" {
				return usageErrorf("--kind is required: %s", kinds)
			}
			c, err := o.daemon(cmd, list.daemonFlags)
			if err != nil {
				return err
			}
			items, next, err := c.ListKnowledge(cmd.Context(), list.agent, list.kind, store.Page{Limit: list.limit, Cursor: list.cursor})
			if err != nil {
				return err
			}
			for _, it := range items {
				fmt.Fprintln(o.env.Stdout, string(it))
			}
			if next != "" {
				fmt.Fprintf(o.env.Stderr, "sandpit: more: add --cursor %s\n", next)
			}
			return nil
		},
	}
	list.register(listCmd.Flags(), false)
	listCmd.Flags().StringVar(&list.kind, "kind", "", kinds)
	listCmd.Flags().IntVar(&list.limit, "limit", 100, "at most this many (1 to 500)")
	listCmd.Flags().StringVar(&list.cursor, "cursor", "", "continue after an earlier page")

	var rm struct {
		daemonFlags
		kind string
	}
	rmCmd := &cobra.Command{
		Use:   "rm --kind KIND ID",
		Short: "Delete one item (results: the key with every version)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rm.kind == "" {
				return usageErrorf("--kind is required: %s", kinds)
			}
			c, err := o.daemon(cmd, rm.daemonFlags)
			if err != nil {
				return err
			}
			if err := c.DeleteKnowledge(cmd.Context(), rm.agent, rm.kind, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(o.env.Stdout, "deleted %s %s\n", rm.kind, args[0])
			return nil
		},
	}
	rm.register(rmCmd.Flags(), false)
	rmCmd.Flags().StringVar(&rm.kind, "kind", "", kinds)
	kb.AddCommand(importCmd, listCmd, rmCmd)
	return kb
}
