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
	var all bool
	rm := &cobra.Command{
		Use:   "rm",
		Short: "Remove the data directory's containers, and with --all its package volume (refused while an engine uses them)",
		Long: `Remove the warm containers of the data directory (one per slot, sessions', and any stopped
ones). The next run or daemon creates fresh ones. With --all, also remove its package volume
(the installed dependencies and pip's cache): then nothing the data directory made is left in
the engine. Refused while a daemon or a run owns the data directory: stop it first. Images are
kept, since other data directories share them; remove them with docker image rm.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.load(cmd)
			if err != nil {
				return err
			}
			got, err := app.RemoveSandbox(cmd.Context(), cfg, all)
			if err != nil {
				return err
			}
			fmt.Fprintf(o.env.Stdout, "removed %d container(s) of data directory %s\n", got.Containers, cfg.DataDir)
			switch {
			case got.Volume != "":
				fmt.Fprintf(o.env.Stdout, "removed volume %s (installed dependencies and pip's cache)\n", got.Volume)
			case all:
				fmt.Fprintln(o.env.Stdout, "no package volume to remove")
			default:
				fmt.Fprintln(o.env.Stdout, "kept the package volume (installed dependencies); --all removes it too")
			}
			return nil
		},
	}
	rm.Flags().BoolVar(&all, "all", false, "also remove the package volume (installed dependencies and pip's cache)")
	sb.AddCommand(rm)
	return sb
}
