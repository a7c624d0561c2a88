package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/suggest"
)

// templateCommand is `sandpit template`: the agent's templates on the daemon.
func (o *options) templateCommand() *cobra.Command {
	t := &cobra.Command{Use: "template", Short: "Templates: build, ls, show, rm, versions, tag, untag (sandbox images of the agent's own, started with --template; needs the daemon)"}
	t.AddCommand(o.templateBuildCommand(), o.templateListCommand(), o.templateShowCommand(), o.templateRmCommand(),
		o.templateVersionsCommand(), o.templateTagCommand(), o.templateUntagCommand())
	return t
}

// maxSpecFile bounds what template build reads from -f.
const maxSpecFile = 16 << 20

func (o *options) templateBuildCommand() *cobra.Command {
	var (
		f       daemonFlags
		file    string
		shared  bool
		noCache bool
	)
	cmd := &cobra.Command{
		Use:   "build NAME -f SPEC.json|SPEC.yaml|Dockerfile",
		Short: "Build a template from a JSON or YAML spec or a Dockerfile, printing its progress",
		Long: `Build the agent's template NAME from -f: a JSON spec ({"base": ..., "steps": [{"apt": [...]},
{"pip": [...]}, {"file": {...}}, {"run": "..."}], "env": {...}, "workdir": ..., "start": {...},
"preload": [...]};
see docs/templates.md), the same spec in YAML (a .yaml or .yml file, or one whose first line
is a key such as "steps:"), or a Dockerfile (anything else; no build context, so COPY and ADD
of local files fail). The same spec builds once: a rebuild is cached. Sessions
and runs start from it with --template NAME.`,
		Example: `  echo '{"steps": [{"apt": ["jq"]}, {"pip": ["requests"]}]}' > tools.json
  sandpit template build tools -f tools.json
  sandpit session new --template tools`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return usageErrorf("give the spec with -f FILE (a JSON or YAML spec or a Dockerfile; - reads standard input)")
			}
			raw, err := o.readSpecFile(file)
			if err != nil {
				return err
			}
			spec, err := parseSpecFile(file, raw)
			if err != nil {
				return err
			}
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			progress := o.env.Stderr
			if f.json {
				progress = io.Discard
			}
			t, err := c.BuildTemplate(cmd.Context(), f.agent, apitype.TemplateBuild{Name: args[0], Spec: spec, Shared: shared, NoCache: noCache}, func(e apitype.TemplateEvent) {
				switch e.Type {
				case "step":
					fmt.Fprintf(progress, "[%d/%d] %s\n", e.Step, e.Steps, e.Label)
				case "log":
					fmt.Fprintf(progress, "      %s\n", e.Line)
				case "done":
					if e.Cached {
						fmt.Fprintln(progress, "cached: the template's own layer (the same steps) was built before")
					}
				}
			})
			if err != nil {
				return err
			}
			if f.json {
				return o.printJSON(t)
			}
			fmt.Fprintf(o.env.Stdout, "%s version %d: %s (%d MB)\n", t.Name, t.Version, t.Image, t.SizeBytes>>20)
			return nil
		},
	}
	f.register(cmd.Flags(), true)
	cmd.Flags().StringVarP(&file, "file", "f", "", "the JSON or YAML spec or Dockerfile to build (- reads standard input)")
	cmd.Flags().BoolVar(&shared, "shared", false, "let every agent start it, as AGENT/NAME")
	cmd.Flags().BoolVar(&noCache, "no-cache", false, "build every step again, reusing nothing of earlier builds")
	return cmd
}

// yamlKey matches a YAML spec's first line ("steps:", "base: x"); a Dockerfile's starts with
// an instruction and a space ("FROM x").
var yamlKey = regexp.MustCompile(`^[A-Za-z_]+:(\s|$)`)

// parseSpecFile reads -f's content: a JSON spec (an object), a YAML spec (a .yaml or .yml
// file, or a first line that is a key), else a Dockerfile. Errors are usage errors naming
// the file.
func parseSpecFile(name string, raw []byte) (apitype.TemplateSpec, error) {
	var spec apitype.TemplateSpec
	t := bytes.TrimSpace(raw)
	isYAML := strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || yamlKey.Match(firstLine(t))
	switch {
	case len(t) > 0 && t[0] == '{':
	case isYAML:
		j, err := yaml.YAMLToJSON(t)
		if err != nil {
			return spec, usageErrorf("-f %s: not a YAML template spec: %v (see docs/templates.md for its fields)", name, err)
		}
		t = j
	default:
		spec.Dockerfile = string(raw)
		return spec, nil
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		hint := ""
		if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			field, _ = strconv.Unquote(field)
			if best := suggest.Nearest(field, specFields(reflect.TypeFor[apitype.TemplateSpec]()), 3); best != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", best)
			}
		}
		return spec, usageErrorf("-f %s: not a template spec: %v%s (see docs/templates.md for its fields)", name, err, hint)
	}
	return spec, nil
}

// specFields are the JSON field names of struct type t and of the structs it holds.
func specFields(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for f := range t.Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			out = append(out, name)
		}
		out = append(out, specFields(f.Type)...)
	}
	return out
}

// firstLine is b's first line that is not blank or a comment.
func firstLine(b []byte) []byte {
	for line := range bytes.Lines(b) {
		if l := bytes.TrimSpace(line); len(l) > 0 && l[0] != '#' {
			return l
		}
	}
	return nil
}

func (o *options) readSpecFile(name string) ([]byte, error) {
	var r io.Reader
	if name == "-" {
		r = o.env.Stdin
	} else {
		fh, err := os.Open(name)
		if err != nil {
			return nil, usageErrorf("-f %s: %v", name, err)
		}
		defer fh.Close()
		r = fh
	}
	raw, err := io.ReadAll(io.LimitReader(r, maxSpecFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading -f %s: %w", name, err)
	}
	if len(raw) > maxSpecFile {
		return nil, usageErrorf("-f %s is over %d MiB; a spec's files go in it inline, at most 1 MiB each", name, maxSpecFile>>20)
	}
	return raw, nil
}

func (o *options) templateListCommand() *cobra.Command {
	var f daemonFlags
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the agent's templates and the shared ones of other agents",
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			list, err := c.ListTemplates(cmd.Context(), f.agent)
			if err != nil {
				return err
			}
			if f.json {
				return o.printJSON(list)
			}
			tw := tabwriter.NewWriter(o.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tVERSION\tSTATUS\tSIZE\tIMAGE\tUPDATED")
			for _, t := range list {
				name := t.Name
				if t.Agent != f.agent {
					name = t.Agent + "/" + t.Name
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d MB\t%s\t%s\n", name, t.Version, t.Status, t.SizeBytes>>20, t.Image, t.UpdatedAt.Format("2006-01-02 15:04"))
			}
			return tw.Flush()
		},
	}
	f.register(cmd.Flags(), true)
	return cmd
}

func (o *options) templateShowCommand() *cobra.Command {
	var f daemonFlags
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a template: its spec, status, image and build log",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			t, err := c.GetTemplate(cmd.Context(), f.agent, args[0])
			if err != nil {
				return err
			}
			if f.json {
				return o.printJSON(t)
			}
			spec, _ := json.MarshalIndent(t.Spec, "", "  ")
			fmt.Fprintf(o.env.Stdout, "name: %s\nversion: %d\nstatus: %s\nimage: %s\nsize: %d MB\nshared: %v\nspec: %s\n", t.Name, t.Version, t.Status, t.Image, t.SizeBytes>>20, t.Shared, spec)
			if len(t.Tags) > 0 {
				tags := make([]string, 0, len(t.Tags))
				for tag, v := range t.Tags {
					tags = append(tags, fmt.Sprintf("%s=%d", tag, v))
				}
				slices.Sort(tags)
				fmt.Fprintf(o.env.Stdout, "tags: %s\n", strings.Join(tags, " "))
			}
			if t.Error != "" {
				fmt.Fprintf(o.env.Stdout, "error: %s\n", t.Error)
			}
			if t.Log != "" {
				fmt.Fprintf(o.env.Stdout, "log:\n%s\n", strings.TrimRight(t.Log, "\n"))
			}
			return nil
		},
	}
	f.register(cmd.Flags(), true)
	return cmd
}

func (o *options) templateRmCommand() *cobra.Command {
	var f daemonFlags
	var (
		force   bool
		version int
	)
	cmd := &cobra.Command{
		Use:   "rm NAME...",
		Short: "Remove templates (or one kept version), and their images when no other template uses them",
		Long: `Remove templates, all their versions, and their images when no other template uses them. A
template that saved code names is kept (its runs and its jobs' fires would fail) unless
--force. With --version N only that kept version goes (not the current one), with its tags.`,
		Example: `  sandpit template rm tools
  sandpit template rm tools --version 2`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("version") && version < 1 {
				return usageErrorf("--version is %d: give a version the template keeps (sandpit template versions NAME lists them)", version)
			}
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			for _, name := range args {
				if version > 0 {
					if err := c.DeleteTemplateVersion(cmd.Context(), f.agent, name, version); err != nil {
						return err
					}
					fmt.Fprintf(o.env.Stdout, "%s:%d\n", name, version)
					continue
				}
				if err := c.DeleteTemplate(cmd.Context(), f.agent, name, force); err != nil {
					return err
				}
				fmt.Fprintln(o.env.Stdout, name)
			}
			return nil
		},
	}
	f.register(cmd.Flags(), false)
	cmd.Flags().BoolVar(&force, "force", false, "remove a template even while saved code names it")
	cmd.Flags().IntVar(&version, "version", 0, "remove only this kept version (not the current one)")
	return cmd
}

func (o *options) templateVersionsCommand() *cobra.Command {
	var f daemonFlags
	cmd := &cobra.Command{
		Use:   "versions NAME",
		Short: "List a template's kept versions, newest first, with their tags",
		Long: `List the versions template NAME keeps, newest first: its current one (*), the
template_versions_kept before it, and every tagged one. --template NAME:VERSION or NAME:TAG
starts one of them; NAME alone (or NAME:latest) the current one.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			versions, err := c.TemplateVersions(cmd.Context(), f.agent, args[0])
			if err != nil {
				return err
			}
			if f.json {
				return o.printJSON(versions)
			}
			tw := tabwriter.NewWriter(o.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\tTAGS\tSIZE\tIMAGE\tCREATED")
			for _, v := range versions {
				n := strconv.Itoa(v.Version)
				if v.Current {
					n += " *"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d MB\t%s\t%s\n", n, strings.Join(v.Tags, ","), v.SizeBytes>>20, v.Image, v.CreatedAt.Format("2006-01-02 15:04"))
			}
			return tw.Flush()
		},
	}
	f.register(cmd.Flags(), true)
	return cmd
}

func (o *options) templateTagCommand() *cobra.Command {
	var (
		f       daemonFlags
		version int
	)
	cmd := &cobra.Command{
		Use:   "tag NAME TAG",
		Short: "Make TAG name a version of template NAME (the current one unless --version)",
		Long: `Make TAG name a kept version of template NAME: the current one, or --version N. A tagged
version is kept however many are built after it; --template NAME:TAG starts it. A tag is 1 to 63
lowercase letters, digits, '_', '.' or '-', not all digits (NAME:3 is version 3) and not
"latest" (always the current version).`,
		Example: `  sandpit template tag tools stable
  sandpit template tag tools stable --version 2
  sandpit session new --template tools:stable`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("version") {
				t, err := c.GetTemplate(cmd.Context(), f.agent, args[0])
				if err != nil {
					return err
				}
				if t.Status != "ready" {
					return usageErrorf("template %s is %s and has no current version to tag; name a kept one with --version (sandpit template versions %s lists them)", args[0], t.Status, args[0])
				}
				version = t.Version
			}
			t, err := c.TagTemplate(cmd.Context(), f.agent, args[0], args[1], version)
			if err != nil {
				return err
			}
			if f.json {
				return o.printJSON(t)
			}
			fmt.Fprintf(o.env.Stdout, "%s:%s is version %d\n", args[0], args[1], version)
			return nil
		},
	}
	f.register(cmd.Flags(), true)
	cmd.Flags().IntVar(&version, "version", 0, "the kept version the tag names (default: the current one)")
	return cmd
}

func (o *options) templateUntagCommand() *cobra.Command {
	var f daemonFlags
	cmd := &cobra.Command{
		Use:   "untag NAME TAG...",
		Short: "Remove tags of template NAME (their versions stay while template_versions_kept counts them)",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			for _, tag := range args[1:] {
				if err := c.UntagTemplate(cmd.Context(), f.agent, args[0], tag); err != nil {
					return err
				}
				fmt.Fprintf(o.env.Stdout, "%s:%s\n", args[0], tag)
			}
			return nil
		},
	}
	f.register(cmd.Flags(), false)
	return cmd
}
