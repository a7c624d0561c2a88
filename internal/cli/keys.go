package cli

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
)

// keysCommand is `sandpit keys`: the API keys of the E2B-compatible API, kept by the daemon
// that answers (its /v1/keys), or without one in the configuration's database.
func (o *options) keysCommand() *cobra.Command {
	k := &cobra.Command{Use: "keys", Short: "API keys of the E2B-compatible API: create, list, revoke (each acts for one agent)",
		Long: `Manage the API keys of the E2B-compatible API (docs/e2b.md). Like every client command, these
go to the daemon at --url, SANDPIT_URL or the configured listen address when one answers (its
REST API, behind its token), so a key is made for that daemon. Only when none answers, or with
--local, they open the configuration's database (the data directory's, or database_url), and
say which.`}
	k.AddCommand(o.keysCreateCommand(), o.keysListCommand(), o.keysRevokeCommand())
	return k
}

// keysFlags are the flags of the keys commands.
type keysFlags struct {
	daemonFlags
	local bool
}

func (f *keysFlags) register(fs *pflag.FlagSet, withJSON bool) {
	f.registerShared(fs, withJSON)
	fs.BoolVar(&f.local, "local", false, "do not look for a daemon: use the configuration's database (the data directory's, or database_url)")
}

func (o *options) keysCreateCommand() *cobra.Command {
	var (
		f    keysFlags
		name string
	)
	cmd := &cobra.Command{
		Use:   "create --agent NAME",
		Short: "Create an API key for an agent and print it (once: only its digest is kept)",
		Long: `Create an API key for the E2B-compatible API (docs/e2b.md), for the daemon that answers (see
sandpit keys --help). The key sees only its agent's sandboxes. It is printed once; sandpit
keeps only its SHA-256 digest.`,
		Example: `  export E2B_API_KEY=$(sandpit keys create --agent alice)
  export E2B_API_URL=http://127.0.0.1:8765/e2b E2B_SANDBOX_URL=http://127.0.0.1:8765/e2b`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.agent == "" {
				return usageErrorf("--agent is required: the agent whose sandboxes the key may use (or set %s)", agentEnv)
			}
			return o.withKeys(cmd, f, "wrote the key into", func(ctx context.Context, c *client.Client) error {
				k, err := c.CreateAPIKey(ctx, f.agent, name)
				if err != nil {
					return err
				}
				if f.json {
					return o.printJSON(k)
				}
				fmt.Fprintln(o.env.Stdout, k.Key)
				return nil
			})
		},
	}
	f.register(cmd.Flags(), true)
	cmd.Flags().StringVar(&f.agent, "agent", "", "the agent the key acts for (required)")
	cmd.Flags().StringVar(&name, "name", "", "a note shown in listings: who holds the key, what for")
	return cmd
}

func (o *options) keysListCommand() *cobra.Command {
	var f keysFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the API keys (their IDs and first characters, never the keys), revoked ones too",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.withKeys(cmd, f, "read the keys of", func(ctx context.Context, c *client.Client) error {
				keys, err := c.ListAPIKeys(ctx, f.agent)
				if err != nil {
					return err
				}
				if f.json {
					return o.printJSON(append([]apitype.APIKey{}, keys...)) // [] when none
				}
				tw := tabwriter.NewWriter(o.env.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tAGENT\tKEY\tCREATED\tREVOKED\tNAME")
				for _, k := range keys {
					revoked := "-"
					if k.RevokedAt != nil {
						revoked = k.RevokedAt.Format(time.RFC3339)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s…\t%s\t%s\t%s\n", k.ID, k.Agent, k.Prefix, k.CreatedAt.Format(time.RFC3339), revoked, oneLine(k.Name, 60))
				}
				return tw.Flush()
			})
		},
	}
	f.register(cmd.Flags(), true)
	cmd.Flags().StringVar(&f.agent, "agent", "", "only this agent's keys")
	return cmd
}

func (o *options) keysRevokeCommand() *cobra.Command {
	var f keysFlags
	cmd := &cobra.Command{
		Use:   "revoke ID|KEY",
		Short: "Revoke an API key by its ID (sandpit keys list) or the key itself: it is refused from now on",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.withKeys(cmd, f, "revoked it in", func(ctx context.Context, c *client.Client) error {
				k, err := c.RevokeAPIKey(ctx, args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(o.env.Stdout, "revoked %s (agent %s)\n", k.ID, k.Agent)
				return nil
			})
		},
	}
	f.register(cmd.Flags(), false)
	return cmd
}

// withKeys calls do with a client of the keys: the daemon's when one answers and f.local is
// not set, else the keys' REST handler, in this process, on the configuration's database
// (see withDatabase).
func (o *options) withKeys(cmd *cobra.Command, f keysFlags, did string, do func(context.Context, *client.Client) error) error {
	return o.withDatabase(cmd, f, did, "keys", do, func(ctx context.Context, cfg config.Config) (httpapi.Backend, func() error, error) {
		st, err := app.OpenKeys(ctx, cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			return httpapi.Backend{}, nil, err
		}
		return httpapi.Backend{Keys: st}, st.Close, nil
	})
}

// withDatabase calls do with a client of the daemon when one answers and f.local is not set,
// else of the REST handler, in this process, of the backend open makes on the configuration's
// database, which it then names on stderr after did ("wrote the key into"); what names the
// records ("keys"). Engine flags (--data-dir) choose that database, and are refused when a
// daemon answers, as `sandpit run` refuses them.
func (o *options) withDatabase(cmd *cobra.Command, f keysFlags, did, what string, do func(context.Context, *client.Client) error,
	open func(context.Context, config.Config) (httpapi.Backend, func() error, error)) error {
	ctx := cmd.Context()
	cfg, err := o.load(cmd)
	if err != nil {
		return err
	}
	why := "" // why the configuration's database is used
	if !f.local {
		u := o.daemonURL(f.url)
		c := client.New(u, nil).As(apitype.SourceCLI).WithToken(cfg.Token)
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		herr := c.Health(hctx)
		cancel()
		if herr == nil {
			if given := o.engineFlagsGiven(cmd); len(given) > 0 {
				return usageErrorf("the daemon at %s keeps its own %s, and %s name another database: leave them out, or add --local to use %s",
					u, what, strings.Join(given, ", "), app.KeysDatabase(cfg))
			}
			return do(ctx, c)
		}
		why = fmt.Sprintf("no daemon answers at %s (%v), so this command ", u, herr)
	}
	backend, closeFn, err := open(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeFn()
	if err := do(ctx, client.InProcess(httpapi.NewHandler(backend, nil))); err != nil {
		return err
	}
	fmt.Fprintf(o.env.Stderr, "sandpit: %s%s %s; a daemon on another database has other %s (start it, or set SANDPIT_URL, to manage its %s)\n",
		why, did, app.KeysDatabase(cfg), what, what)
	return nil
}
