package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/app"
)

func (o *options) sandboxCommand() *cobra.Command {
	sb := &cobra.Command{Use: "sandbox", Short: "Inspect or remove the warm containers of the data directory (one per slot)"}
	sb.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "Show the data directory's containers and which engine owns it",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.load(cmd)
			if err != nil {
				return err
			}
			dir, owner, containers, err := app.Sandbox(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			w := o.env.Stdout
			fmt.Fprintf(w, "data directory: %s\n", dir)
			if owner > 0 {
				fmt.Fprintf(w, "owned by:       sandpit process %d\n", owner)
			} else {
				fmt.Fprintln(w, "owned by:       nobody (no daemon or run is using it)")
			}
			if len(containers) == 0 {
				fmt.Fprintln(w, "containers:     none (the next run creates them)")
			}
			for _, c := range containers {
				fmt.Fprintf(w, "container:      %.12s  %-8s %s  created %s\n", c.ID, c.State, c.Image, c.Created.Format(time.RFC3339))
			}
			return nil
		},
	})
	sb.AddCommand(&cobra.Command{
		Use:   "rm",
		Short: "Remove the data directory's containers (refused while an engine uses them)",
		Long: `Remove the warm containers of the data directory (one per slot, and any stopped ones). The next run
or daemon creates a fresh one. Refused while a daemon or a run owns the data directory: stop it
first. Images are kept; remove them with docker image rm.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.load(cmd)
			if err != nil {
				return err
			}
			n, err := app.RemoveSandbox(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(o.env.Stdout, "removed %d container(s)\n", n)
			return nil
		},
	})
	return sb
}
