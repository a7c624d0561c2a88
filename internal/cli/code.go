package cli

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/errclass"
)

func (o *options) codeCommand() *cobra.Command {
	code := &cobra.Command{Use: "code", Short: "Save, list, show, list the versions of, run and remove an agent's saved code (needs the daemon)"}
	code.AddCommand(o.codeSaveCommand(), o.codeListCommand(), o.codeShowCommand(), o.codeVersionsCommand(), o.codeRunCommand(), o.codeRmCommand())
	return code
}

func (o *options) codeSaveCommand() *cobra.Command {
	var save struct {
		daemonFlags
		deps                []string
		inSchema, outSchema string
		description         string
		template            string
		expected            int
	}
	saveCmd := &cobra.Command{
		Use:   "save NAME FILE",
		Short: "Save FILE as NAME: version 1 when new, the next version otherwise",
		Long: `Save a Python script under NAME (lowercase letters, digits, '-' and '_'). Every save of an
existing name makes a new version, which keeps the current version's dependencies,
description and schemas unless their flags are given (an empty --input-schema '' or
--output-schema '' removes one). Dependencies are PEP 508 requirements; schemas are JSON
Schemas (2020-12) given inline or as @FILE: the input is validated before each run and OUTPUT
after it (a mismatch ends the run with outcome output_invalid). --template runs the code in a
sandbox of that template (sandpit template ls; --template '' goes back to the default image).`,
		Example: `  sandpit code save sum-sales sum.py --dep 'pandas>=2' --input-schema @in.json --output-schema @out.json
  sandpit code save make-report report.py --template tools`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := os.ReadFile(args[1])
			if err != nil {
				return usageErrorf("reading the code: %v", err)
			}
			d := apitype.CodeDraft{Code: string(src), Dependencies: save.deps, Description: save.description, Template: save.template}
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
			if errors.Is(err, errclass.Conflict) { // the name exists: save a new version of it
				saved, err = saveVersion(cmd, c, save.agent, args[0], d, save.expected)
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
	saveCmd.Flags().StringVar(&save.template, "template", "", "run the code in a sandbox of this template (NAME, or OWNER/NAME of a shared one)")
	saveCmd.Flags().IntVar(&save.expected, "expected-version", 0, "refuse the save unless this is the current version")
	return saveCmd
}

// saveVersion saves d as the next version of the agent's code name. What cmd's flags do not
// give is the current version's, so that fixing the script keeps its schemas (an empty
// --input-schema value clears one). expected 0 expects the version those fields came from, so
// that a save in between is refused.
func saveVersion(cmd *cobra.Command, c *client.Client, agent, name string, d apitype.CodeDraft, expected int) (apitype.Code, error) {
	cur, err := c.GetCode(cmd.Context(), agent, name, 0)
	if err != nil {
		return apitype.Code{}, err
	}
	fl := cmd.Flags()
	if !fl.Changed("dep") {
		d.Dependencies = cur.Dependencies
	}
	if !fl.Changed("description") {
		d.Description = cur.Description
	}
	if !fl.Changed("input-schema") {
		d.InputSchema = cur.InputSchema
	}
	if !fl.Changed("output-schema") {
		d.OutputSchema = cur.OutputSchema
	}
	if !fl.Changed("template") {
		d.Template = cur.Template
	}
	if expected == 0 {
		expected = cur.Version
	}
	return c.UpdateCode(cmd.Context(), agent, name, d, expected)
}

func (o *options) codeListCommand() *cobra.Command {
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
			items, next, err := c.ListCode(cmd.Context(), list.agent, list.q, apitype.Page{Limit: list.limit})
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
			fmt.Fprintln(tw, "NAME\tVERSION\tTEMPLATE\tUPDATED\tDESCRIPTION")
			for _, it := range items {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", it.Name, it.Version, cmp.Or(it.Template, "-"), it.UpdatedAt.Format(time.RFC3339), oneLine(it.Description, 60))
			}
			return tw.Flush()
		},
	}
	list.register(listCmd.Flags(), true)
	listCmd.Flags().StringVarP(&list.q, "query", "q", "", "only code whose name or description contains this")
	listCmd.Flags().IntVar(&list.limit, "limit", 100, "at most this many")
	return listCmd
}

func (o *options) codeShowCommand() *cobra.Command {
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
	return showCmd
}

func (o *options) codeRunCommand() *cobra.Command {
	var run struct {
		daemonFlags
		input   string
		timeout time.Duration
		version int
		secrets []string
		inputs  inputFlags
		output  outputFlags
	}
	runCmd := &cobra.Command{
		Use:   "run NAME",
		Short: "Run saved code and print its output as it comes (exit status as sandpit run)",
		Long: `Run saved code and print its output as it comes (exit status as sandpit run). --file,
--no-charts and --output-dir work as for sandpit run.`,
		Example: `  sandpit code run sum-sales --input '{"days": 7}' --file sales.csv --output-dir out/`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r := apitype.CodeRun{Version: run.version, Secrets: run.secrets}
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
			var err error
			if r.RunFiles, err = run.inputs.runFiles(); err != nil {
				return err
			}
			if err := run.output.prepare(); err != nil {
				return err
			}
			r.InlineFiles = run.output.dir != ""
			c, err := o.daemon(cmd, run.daemonFlags)
			if err != nil {
				return err
			}
			a, err := c.RunCode(cmd.Context(), run.agent, args[0], r, o.emitter(run.json, true))
			return o.finishRun(cmd, a.Result, err, run.json, run.output, daemonFiles(c, a.ID, a.Inline))
		},
	}
	run.register(runCmd.Flags(), true)
	runCmd.Flags().StringVar(&run.input, "input", "", "INPUT as JSON, or @FILE")
	runCmd.Flags().DurationVar(&run.timeout, "timeout", 0, "wall-clock limit, e.g. 30s (default: the daemon's)")
	runCmd.Flags().IntVar(&run.version, "version", 0, "run this version (default the latest)")
	runCmd.Flags().StringArrayVar(&run.secrets, "secret", nil, "a secret the run may use, repeatable, as for sandpit run (sandpit secrets list; docs/secrets.md)")
	run.inputs.register(runCmd.Flags())
	run.output.register(runCmd.Flags(), "the run's output files")
	return runCmd
}

func (o *options) codeRmCommand() *cobra.Command {
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
	return rmCmd
}

func (o *options) codeVersionsCommand() *cobra.Command {
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
	return versionsCmd
}
