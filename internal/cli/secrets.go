package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
)

// secretsCommand is `sandpit secrets`: the secrets the egress proxy adds to requests, kept
// by the daemon that answers (its /v1/secrets), or without one in the configuration's
// database with the data directory's key.
func (o *options) secretsCommand() *cobra.Command {
	s := &cobra.Command{Use: "secrets", Short: "Secrets the code may use but never read: set, list, rm (docs/secrets.md)",
		Long: `Manage the secrets the egress proxy adds to requests (docs/secrets.md). A run that names a
secret sees the environment variable NAME holding the placeholder sandpit-secret:NAME; the
daemon puts the value in its place only in a request to one of the secret's hosts, in the
header it is bound to. Values are sealed with the data directory's secrets.key (or
SANDPIT_SECRETS_KEY) and never shown again.

Like every client command, these go to the daemon at --url, SANDPIT_URL or the configured
listen address when one answers; only when none answers, or with --local, they open the
configuration's database, and say which.`}
	s.AddCommand(o.secretsSetCommand(), o.secretsListCommand(), o.secretsRemoveCommand())
	return s
}

func (o *options) secretsSetCommand() *cobra.Command {
	var (
		f         keysFlags
		hosts     []string
		header    string
		basicUser string
		fromFile  string
	)
	cmd := &cobra.Command{
		Use:   "set NAME --host HOST [--header 'NAME: FORMAT' | --basic-user USER] [--from-file PATH]",
		Short: "Set a secret: its value from standard input (or --from-file), never from a flag",
		Long: `Set the secret NAME (or replace the one of that name and scope), for the daemon that answers
(see sandpit secrets --help). The value is read from standard input (one trailing line break
dropped; on a terminal it is not echoed) or from --from-file, never from a flag, where it would
stay in the shell's history and the process list. --agent makes it that agent's alone;
without it, every agent's runs may name it.`,
		Example: `  sandpit secrets set OPENAI_API_KEY --host api.openai.com < key.txt
  sandpit secrets set GH --agent alice --host api.github.com --header 'Authorization: token {{secret}}' --from-file gh.txt
  sandpit secrets set SVC --host '*.corp.example' --basic-user svc-bot --from-file pw.txt`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(hosts) == 0 {
				return usageErrorf("--host is required: the host the value may be sent to (repeatable; *.example.com for the names under it)")
			}
			body := apitype.SecretSet{Agent: f.agent, Hosts: hosts, BasicUser: basicUser}
			if header != "" {
				name, format, ok := strings.Cut(header, ":")
				if !ok {
					return usageErrorf("--header %q is not 'NAME: FORMAT': give the header and its value with {{secret}} where the value goes, such as 'Authorization: Bearer {{secret}}'", header)
				}
				body.Header, body.Format = strings.TrimSpace(name), strings.TrimSpace(format)
			}
			value, err := o.readSecretValue(fromFile)
			if err != nil {
				return err
			}
			body.Value = value
			return o.withSecrets(cmd, f, "wrote the secret into", func(ctx context.Context, c *client.Client) error {
				s, err := c.SetSecret(ctx, args[0], body)
				if err != nil {
					return err
				}
				if f.json {
					return o.printJSON(s)
				}
				fmt.Fprintf(o.env.Stdout, "set %s%s for %s in %s\n", s.Name, scopeOf(s.Agent), strings.Join(s.Hosts, ", "), placeOf(s))
				for _, w := range s.Warnings {
					fmt.Fprintf(o.env.Stderr, "warning: %s\n", w)
				}
				return nil
			})
		},
	}
	f.register(cmd.Flags(), true)
	cmd.Flags().StringVar(&f.agent, "agent", "", "make the secret this agent's alone (default: shared by every agent)")
	cmd.Flags().StringArrayVar(&hosts, "host", nil, "a host the value may be sent to: api.example.com, or *.example.com (repeatable; required)")
	cmd.Flags().StringVar(&header, "header", "", "the header and its value, {{secret}} where the value goes (default 'Authorization: Bearer {{secret}}')")
	cmd.Flags().StringVar(&basicUser, "basic-user", "", "send the value as the password of HTTP basic authentication for this user")
	cmd.Flags().StringVar(&fromFile, "from-file", "", "read the value from this file instead of standard input")
	return cmd
}

// readSecretValue reads a secret's value from path, else from standard input (without echo
// on a terminal), dropping one trailing line break.
func (o *options) readSecretValue(path string) (string, error) {
	var (
		b   []byte
		err error
	)
	switch f, ok := o.env.Stdin.(*os.File); {
	case path != "":
		b, err = os.ReadFile(path)
		if err != nil {
			return "", usageErrorf("--from-file: %v", err)
		}
	case ok && term.IsTerminal(int(f.Fd())):
		fmt.Fprint(o.env.Stderr, "value (not echoed): ")
		b, err = term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(o.env.Stderr)
	default:
		b, err = io.ReadAll(io.LimitReader(o.env.Stdin, 1<<20))
	}
	if err != nil {
		return "", fmt.Errorf("reading the secret's value: %w", err)
	}
	b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
	if len(b) == 0 {
		return "", usageErrorf("the secret's value is empty: pipe it on standard input (sandpit secrets set NAME --host HOST < file) or give --from-file")
	}
	return string(b), nil
}

func scopeOf(agent string) string {
	if agent == "" {
		return " (shared)"
	}
	return " (agent " + agent + ")"
}

func placeOf(s apitype.Secret) string {
	if s.BasicUser != "" {
		return "basic authentication as " + s.BasicUser
	}
	return s.Header + ": " + s.Format
}

func (o *options) secretsListCommand() *cobra.Command {
	var f keysFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the secrets: names, scopes and bindings, never values",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.withSecrets(cmd, f, "read the secrets of", func(ctx context.Context, c *client.Client) error {
				list, err := c.ListSecrets(ctx, f.agent)
				if err != nil {
					return err
				}
				if f.json {
					return o.printJSON(append([]apitype.Secret{}, list...))
				}
				tw := tabwriter.NewWriter(o.env.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tAGENT\tHOSTS\tPLACE\tUPDATED")
				for _, s := range list {
					agent := s.Agent
					if agent == "" {
						agent = "(shared)"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Name, agent, strings.Join(s.Hosts, ","), oneLine(placeOf(s), 60), s.UpdatedAt.Format(time.RFC3339))
				}
				return tw.Flush()
			})
		},
	}
	f.register(cmd.Flags(), true)
	cmd.Flags().StringVar(&f.agent, "agent", "", "only the secrets this agent's runs may name (its own and the shared ones)")
	return cmd
}

func (o *options) secretsRemoveCommand() *cobra.Command {
	var f keysFlags
	cmd := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a secret (the shared one, or --agent's)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.withSecrets(cmd, f, "removed it from", func(ctx context.Context, c *client.Client) error {
				if err := c.RemoveSecret(ctx, f.agent, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(o.env.Stdout, "removed %s%s\n", args[0], scopeOf(f.agent))
				return nil
			})
		},
	}
	f.register(cmd.Flags(), false)
	cmd.Flags().StringVar(&f.agent, "agent", "", "remove this agent's secret (default: the shared one)")
	return cmd
}

// withSecrets is withKeys for the secrets: the daemon's /v1/secrets when one answers and
// f.local is not set, else the REST handler in this process on the configuration's database
// and the data directory's key.
func (o *options) withSecrets(cmd *cobra.Command, f keysFlags, did string, do func(context.Context, *client.Client) error) error {
	return o.withDatabase(cmd, f, did, "secrets", do, func(ctx context.Context, cfg config.Config) (httpapi.Backend, func() error, error) {
		s, err := app.OpenSecrets(ctx, cfg, o.env.Lookup, slog.New(slog.DiscardHandler))
		if err != nil {
			return httpapi.Backend{}, nil, err
		}
		return httpapi.Backend{Secrets: s.Keeper}, s.Close, nil
	})
}
