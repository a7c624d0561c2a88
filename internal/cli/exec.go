package cli

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

func (o *options) execCommand() *cobra.Command {
	exec := &cobra.Command{Use: "exec", Short: "Read the ledger of executions and their output files (needs the daemon)"}
	exec.AddCommand(o.execListCommand(), o.execShowCommand(), o.execFilesCommand())
	return exec
}

// execListFlags are the flags of exec list.
type execListFlags struct {
	daemonFlags
	source, outcome, codeName, jobID, template, since, until, cursor string
	limit                                                            int
}

func (o *options) execListCommand() *cobra.Command {
	var list execListFlags
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List executions, newest first",
		Long: `List executions from the ledger, newest first: every run from the API, the CLI, MCP and
jobs. --agent filters by agent (default: every agent); the other flags narrow further.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter, err := list.filter(time.Now())
			if err != nil {
				return err
			}
			c, err := o.daemon(cmd, list.daemonFlags)
			if err != nil {
				return err
			}
			if list.limit < 1 || list.limit > apitype.MaxLimit {
				return usageErrorf("--limit %d: give 1 to %d", list.limit, apitype.MaxLimit)
			}
			items, next, err := c.ListExecutions(cmd.Context(), filter, apitype.Page{Limit: list.limit, Cursor: list.cursor})
			if err != nil {
				return err
			}
			if list.json {
				return o.printJSON(map[string]any{"executions": items, "next_cursor": next})
			}
			return o.printExecutions(items, next)
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
	fl.StringVar(&list.template, "template", "", "template (NAME, or OWNER/NAME of a shared one) whose sandboxes ran them")
	fl.StringVar(&list.since, "since", "", "started at or after: RFC 3339 time, or a duration ago such as 1h")
	fl.StringVar(&list.until, "until", "", "started before: RFC 3339 time, or a duration ago")
	fl.IntVar(&list.limit, "limit", 50, "at most this many")
	return listCmd
}

// filter is the query of GET /v1/executions that the flags ask for; --since and --until are
// read at now. An error names the flag.
func (l execListFlags) filter(now time.Time) (url.Values, error) {
	filter := url.Values{}
	add := func(key, v string) {
		if v != "" {
			filter.Set(key, v)
		}
	}
	add("agent", l.agent)
	add("source", l.source)
	add("outcome", l.outcome)
	add("code_name", l.codeName)
	add("job_id", l.jobID)
	add("template", l.template)
	for _, t := range []struct{ flag, key, v string }{{"since", "since", l.since}, {"until", "until", l.until}} {
		if t.v == "" {
			continue
		}
		at, err := parseWhen(t.v, now)
		if err != nil {
			return nil, usageErrorf("--%s: %v", t.flag, err)
		}
		add(t.key, at.Format(time.RFC3339))
	}
	return filter, nil
}

// printExecutions prints a page of the ledger as a table, and on stderr how to ask for the next
// page when there is one.
func (o *options) printExecutions(items []apitype.ExecutionSummary, next string) error {
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
		if e.Status == apitype.StatusRunning {
			outcome = "(running)"
		}
		start := e.Start // fork or cold
		if start == "" {
			start = "-"
		}
		exit := "-"
		if e.Status != apitype.StatusRunning {
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
}

func (o *options) execShowCommand() *cobra.Command {
	var show daemonFlags
	showCmd := &cobra.Command{
		Use:   "show ID",
		Short: "Print an execution's record: where it came from, how it ended, its code, input, output and files",
		Long: `Print an execution's record from the ledger, for a person: where it came from, how it ended,
its code, INPUT, OUTPUT, stdout, stderr, what it displayed, its output files (sandpit exec files
fetches them) and the agent.* calls and connections it made. --json prints the record as the
REST API answers it. With --agent, only if it is that agent's (another agent's record is "not
found"); without, whichever agent's it is.`,
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
			if show.json {
				return o.printJSON(e)
			}
			printExecution(o.env.Stdout, e)
			return nil
		},
	}
	show.registerShared(showCmd.Flags(), true)
	showCmd.Flags().StringVar(&show.agent, "agent", "", "only if it is this agent's execution (default: any agent)")
	return showCmd
}

// printExecution writes e as a record for a person: a label per line, and the code, stdout and
// stderr indented beneath theirs, every text of the run escaped (H65). Charts and displays are
// named, not printed: exec files fetches the files, --json carries the rest.
func printExecution(w io.Writer, e apitype.Execution) {
	line := func(label, format string, args ...any) {
		fmt.Fprintf(w, "%-11s %s\n", label+":", fmt.Sprintf(format, args...))
	}
	block := func(label, text string, truncated bool) {
		if text == "" {
			return
		}
		note := fmt.Sprintf("%d bytes", len(text))
		if truncated {
			note += ", cut at its cap"
		}
		line(label, "(%s)", note)
		for l := range strings.Lines(text) {
			fmt.Fprintf(w, "  %s\n", sandbox.EscapeName(strings.TrimSuffix(l, "\n")))
		}
	}
	origin := []string{"source " + string(e.Source)}
	if e.CodeName != "" {
		origin = append(origin, fmt.Sprintf("code %s v%d", e.CodeName, e.CodeVersion))
	}
	if e.JobID != "" {
		origin = append(origin, "job "+e.JobID)
	}
	if e.Template != "" {
		origin = append(origin, fmt.Sprintf("template %s v%d", e.Template, e.TemplateVersion))
	}
	if e.SessionID != "" {
		origin = append(origin, fmt.Sprintf("session %s, call %d", e.SessionID, e.ExecutionCount))
	}
	line("execution", "%s", e.ID)
	line("agent", "%s (%s)", e.Agent, strings.Join(origin, ", "))
	started := e.StartedAt.Local().Format(time.DateTime)
	if e.Start != "" {
		started += " (" + string(e.Start) + ")"
	}
	line("started", "%s, ran %dms of its %s", started, e.DurationMS, time.Duration(e.TimeoutMS)*time.Millisecond)
	if e.Status == apitype.StatusRunning {
		line("outcome", "(running)")
	} else {
		outcome := fmt.Sprintf("%s, exit %d", e.Outcome, e.ExitCode)
		if e.Signal > 0 {
			outcome += fmt.Sprintf(", signal %d", e.Signal)
		}
		if e.OOMKills > 0 {
			outcome += fmt.Sprintf(", %d out-of-memory kill(s)", e.OOMKills)
		}
		if e.SessionEnded != "" {
			outcome += ", ended its session (" + e.SessionEnded + ")"
		}
		line("outcome", "%s", outcome)
	}
	if e.Reason != "" {
		// A reason of several lines (pip's own words) keeps them, under its first.
		first, rest, _ := strings.Cut(sandbox.EscapeText(e.Reason), "\n")
		line("reason", "%s", first)
		for l := range strings.Lines(rest) {
			fmt.Fprintf(w, "%12s%s\n", "", strings.TrimSuffix(l, "\n"))
		}
	}
	if e.Error != nil {
		line("error", "%s: %s", sandbox.EscapeName(e.Error.Name), oneLine(e.Error.Value, 200))
	}
	for _, d := range e.Dependencies {
		v := string(d.Status)
		if d.Version != "" {
			v += " " + d.Version
		}
		line("dependency", "%s: %s", sandbox.EscapeName(d.Requirement), sandbox.EscapeName(v))
	}
	for _, f := range e.InputFiles {
		line("input file", "%s (%s)", sandbox.EscapeName(f.Name), humanSize(f.SizeBytes))
	}
	if len(e.Input) > 0 && string(e.Input) != "null" {
		line("input", "%s", oneLine(string(e.Input), 200))
	}
	if len(e.Output) > 0 && string(e.Output) != "null" {
		line("output", "%s", oneLine(string(e.Output), 200))
	}
	if e.Code != "" {
		block("code", e.Code, false)
	} else if e.CodeSHA256 != "" {
		line("code", "sha256 %s (not kept)", e.CodeSHA256)
	}
	block("stdout", e.Stdout, e.StdoutTruncated)
	block("stderr", e.Stderr, e.StderrTruncated)
	for _, r := range e.Results {
		what := "display"
		if r.IsMainResult {
			what = "value"
		}
		var text string
		_ = json.Unmarshal(r.Data["text/plain"], &text)
		types := slices.Sorted(maps.Keys(r.Data))
		line(what, "%s: %s", strings.Join(types, ", "), oneLine(text, 120))
	}
	for _, f := range e.Files {
		line("file", "%s (%s, %s)", sandbox.EscapeName(f.Name), sandbox.EscapeName(f.MediaType), humanSize(f.SizeBytes))
	}
	if len(e.Files) > 0 {
		line("files", "sandpit exec files %s --output-dir DIR writes them", e.ID)
	}
	for _, f := range e.FilesSkipped {
		line("skipped", "%s: %s", sandbox.EscapeName(f.Name), sandbox.EscapeName(f.Reason))
	}
	if len(e.Calls) > 0 || len(e.Logs) > 0 {
		line("agent.*", "%d call(s), %d log line(s)", len(e.Calls), len(e.Logs))
	}
	for _, c := range e.Egress {
		verdict := "allowed"
		if !c.Allowed {
			verdict = "refused: " + sandbox.EscapeName(c.Reason)
		}
		line("connection", "%s:%d %s", sandbox.EscapeName(c.Host), c.Port, verdict)
	}
	if e.EgressOmitted > 0 {
		line("connection", "%d more not recorded", e.EgressOmitted)
	}
}

func (o *options) execFilesCommand() *cobra.Command {
	var files struct {
		daemonFlags
		output outputFlags
		stdout bool
	}
	cmd := &cobra.Command{
		Use:   "files ID [NAME...]",
		Short: "List an execution's output files, or write them into a directory (--output-dir)",
		Long: `List the output files of an execution (name, size, media type), and those it could not
return with why; with --output-dir DIR, write them (or only the NAMEs given) into DIR; with
--stdout, write the one NAME given to standard output. The daemon keeps them as long as the
execution's record, within its quota files_max_bytes (an evicted file is refused, HTTP 410).`,
		Example: `  sandpit exec files ex_0123456789abcdefghijklmnop
  sandpit exec files ex_0123456789abcdefghijklmnop figure-1.png --output-dir charts/
  sandpit exec files ex_0123456789abcdefghijklmnop result.csv --stdout | head`,
		Args: minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case files.stdout && (files.output.dir != "" || len(args) != 2):
				return usageErrorf("--stdout writes one file: give its NAME alone (sandpit exec files ID NAME --stdout), without --output-dir")
			case len(args) > 1 && files.output.dir == "" && !files.stdout:
				return usageErrorf("naming files (%s) selects which to write: add --output-dir DIR, or --stdout for one", strings.Join(args[1:], " "))
			}
			c, err := o.daemon(cmd, files.daemonFlags)
			if err != nil {
				return err
			}
			id := args[0]
			list, skipped, truncated, err := c.ExecutionFiles(cmd.Context(), id, files.agent)
			if err != nil {
				return err
			}
			if files.stdout {
				chosen, err := chooseFiles(list, args[1:], id)
				if err != nil {
					return err
				}
				return writeChecked(cmd.Context(), o.env.Stdout, chosen[0], daemonFiles(c, id, nil))
			}
			if files.output.dir != "" {
				chosen, err := chooseFiles(list, args[1:], id)
				if err != nil {
					return err
				}
				return saveFiles(cmd.Context(), o.env.Stdout, files.output.dir, files.output.force, len(args) > 1, chosen, daemonFiles(c, id, nil))
			}
			if files.json {
				return o.printJSON(map[string]any{"files": list, "files_skipped": skipped, "files_truncated": truncated})
			}
			if len(list) == 0 {
				fmt.Fprintf(o.env.Stdout, "execution %s has no output files\n", id)
			} else {
				tw := tabwriter.NewWriter(o.env.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tSIZE\tMEDIA TYPE")
				for _, f := range list {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", sandbox.EscapeName(f.Name), humanSize(f.SizeBytes), sandbox.EscapeName(f.MediaType))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			printSkipped(o.env.Stderr, apitype.Result{FilesSkipped: skipped, FilesTruncated: truncated})
			return nil
		},
	}
	files.registerShared(cmd.Flags(), true)
	cmd.Flags().StringVar(&files.agent, "agent", "", "only if it is this agent's execution (default: any agent)")
	files.output.register(cmd.Flags(), "the files")
	cmd.Flags().BoolVar(&files.stdout, "stdout", false, "write the one file NAMEd to standard output")
	return cmd
}

// chooseFiles returns the files of list that names names (all of list when none is named); a
// name the list lacks is an error naming what the execution has.
func chooseFiles(list []apitype.File, names []string, id string) ([]apitype.File, error) {
	if len(names) == 0 {
		return list, nil
	}
	var chosen []apitype.File
	for _, n := range names {
		i := slices.IndexFunc(list, func(f apitype.File) bool { return f.Name == n })
		if i < 0 {
			have := make([]string, len(list))
			for j, f := range list {
				have[j] = f.Name
			}
			return nil, usageErrorf("execution %s has no output file %q; it has: %s", id, n, cmp.Or(strings.Join(have, ", "), "none"))
		}
		if !slices.ContainsFunc(chosen, func(f apitype.File) bool { return f.Name == n }) {
			chosen = append(chosen, list[i])
		}
	}
	return chosen, nil
}

// outputPreview is one line of what an execution printed, for exec list: the end of stderr
// when it failed (where a traceback ends), else the start of stdout, else of stderr.
func outputPreview(e apitype.ExecutionSummary) string {
	const width = 40
	switch {
	case e.Outcome != apitype.OutcomeOK && strings.TrimSpace(e.StderrPreview) != "":
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
