package cli

import (
	"fmt"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/app"
)

// keysCommand is `sandpit keys`: the API keys of the E2B-compatible API.
func (o *options) keysCommand() *cobra.Command {
	k := &cobra.Command{Use: "keys", Short: "API keys of the E2B-compatible API: create, list, revoke (each acts for one agent)"}
	k.AddCommand(o.keysCreateCommand(), o.keysListCommand(), o.keysRevokeCommand())
	return k
}

func (o *options) keysCreateCommand() *cobra.Command {
	var agent, name string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create --agent NAME",
		Short: "Create an API key for an agent and print it (once: only its digest is kept)",
		Long: `Create an API key for the E2B-compatible API (docs/e2b.md). The key sees only its agent's
sandboxes. It is printed once; sandpit keeps only its SHA-256 digest. Works whether or not the
daemon runs (it opens the daemon's database: the data directory's, or database_url).`,
		Example: `  export E2B_API_KEY=$(sandpit keys create --agent alice)
  export E2B_API_URL=http://127.0.0.1:8765/e2b E2B_SANDBOX_URL=http://127.0.0.1:8765/e2b`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if agent == "" {
				return usageErrorf("--agent is required: the agent whose sandboxes the key may use")
			}
			st, err := o.keyStore(cmd)
			if err != nil {
				return err
			}
			defer st.Close()
			key, info, err := st.CreateAPIKey(cmd.Context(), agent, name)
			if err != nil {
				return err
			}
			if asJSON {
				return o.printJSON(struct {
					Key string `json:"key"`
					app.APIKey
				}{key, info})
			}
			fmt.Fprintln(o.env.Stdout, key)
			return nil
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "", "the agent the key acts for (required)")
	cmd.Flags().StringVar(&name, "name", "", "a note shown in listings: who holds the key, what for")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the key with its ID and agent as JSON")
	return cmd
}

func (o *options) keysListCommand() *cobra.Command {
	var agent string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the API keys (their IDs and first characters, never the keys), revoked ones too",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := o.keyStore(cmd)
			if err != nil {
				return err
			}
			defer st.Close()
			keys, err := st.ListAPIKeys(cmd.Context(), agent)
			if err != nil {
				return err
			}
			if asJSON {
				return o.printJSON(keys)
			}
			tw := tabwriter.NewWriter(o.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tAGENT\tKEY\tCREATED\tREVOKED\tNAME")
			for _, k := range keys {
				revoked := "-"
				if k.RevokedAt != nil {
					revoked = k.RevokedAt.Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s…\t%s\t%s\t%s\n", k.ID, k.Agent, k.Prefix, k.CreatedAt.Format(time.RFC3339), revoked, k.Name)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "", "only this agent's keys")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (o *options) keysRevokeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID|KEY",
		Short: "Revoke an API key by its ID (sandpit keys list) or the key itself: it is refused from now on",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := o.keyStore(cmd)
			if err != nil {
				return err
			}
			defer st.Close()
			k, err := st.RevokeAPIKey(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(o.env.Stdout, "revoked %s (agent %s)\n", k.ID, k.Agent)
			return nil
		},
	}
}

func (o *options) keyStore(cmd *cobra.Command) (app.Keys, error) {
	cfg, err := o.load(cmd)
	if err != nil {
		return nil, err
	}
	return app.OpenKeys(cmd.Context(), cfg, slog.New(slog.DiscardHandler))
}
