package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/config"
)

func (o *options) sandboxCommand() *cobra.Command {
	sb := &cobra.Command{Use: "sandbox", Short: "Inspect or remove the warm containers (or pods) of the data directory (one per slot)"}
	sb.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "Show the data directory's containers (runtime kubernetes: its daemon's pods and Lease) and which engine owns it",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.load(cmd)
			if err != nil {
				return err
			}
			if cfg.Runtime == config.RuntimeKubernetes {
				return o.kubernetesStatus(cmd, cfg)
			}
			dir, owner, containers, err := app.Sandbox(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			w := o.env.Stdout
			writeOwner(w, dir, owner)
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
		Short: "Remove the data directory's containers (or pods and Lease), and with --all its package volume (refused while an engine uses them)",
		Long: `Remove the warm containers of the data directory (one per slot, sessions', and any stopped
ones). The next run or daemon creates fresh ones. With --all, also remove its package volume
(the installed dependencies and pip's cache): then nothing the data directory made is left in
the engine. Refused while a daemon or a run owns the data directory: stop it first. Images are
kept, since other data directories share them; remove them with docker image rm.

With runtime kubernetes, remove the pods and the Lease of the data directory's daemon
(daemon_id, or the ID kept in the data directory) in kubernetes.namespace: a daemon that
stopped leaves them up for its next start to adopt. Refused while its Lease is held.`,
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
			if cfg.Runtime == config.RuntimeKubernetes {
				fmt.Fprintf(o.env.Stdout, "removed %d pod(s) of data directory %s in namespace %s\n", got.Containers, cfg.DataDir, cfg.Kubernetes.Namespace)
				if got.Lease != "" {
					fmt.Fprintf(o.env.Stdout, "removed lease %s\n", got.Lease)
				}
				return nil
			}
			if got.Containers > 0 {
				fmt.Fprintf(o.env.Stdout, "removed %d container(s) of data directory %s\n", got.Containers, cfg.DataDir)
			} else {
				fmt.Fprintf(o.env.Stdout, "data directory %s has no containers to remove\n", cfg.DataDir)
			}
			switch {
			case got.Volume != "":
				fmt.Fprintf(o.env.Stdout, "removed volume %s (installed dependencies and pip's cache)\n", got.Volume)
			case got.Kept != "":
				fmt.Fprintf(o.env.Stdout, "kept volume %s (installed dependencies and pip's cache); --all removes it too\n", got.Kept)
			case all:
				fmt.Fprintln(o.env.Stdout, "no package volume to remove")
			}
			return nil
		},
	}
	rm.Flags().BoolVar(&all, "all", false, "also remove the package volume (installed dependencies and pip's cache)")
	sb.AddCommand(rm)
	return sb
}

// kubernetesStatus prints the pods and the Lease of the data directory's daemon.
func (o *options) kubernetesStatus(cmd *cobra.Command, cfg config.Config) error {
	dir, owner, _, err := app.Sandbox(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	got, err := app.SandboxPods(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	w := o.env.Stdout
	writeOwner(w, dir, owner)
	fmt.Fprintf(w, "namespace:      %s\n", got.Namespace)
	if got.Daemon == "" {
		fmt.Fprintln(w, "daemon:         none yet (no daemon has run with this data directory; daemon_id is not set)")
		return nil
	}
	fmt.Fprintf(w, "daemon:         %s\n", got.Daemon)
	switch {
	case got.Lease == "":
		fmt.Fprintln(w, "lease:          none")
	case got.LeaseHeld:
		fmt.Fprintf(w, "lease:          %s  held (renewed %s: the daemon runs)\n", got.Lease, got.Renewed.Format(time.RFC3339))
	case got.LeaseReleased:
		fmt.Fprintf(w, "lease:          %s  released (last renewed %s; the daemon stopped cleanly: `sandpit sandbox rm` removes it and the pods)\n", got.Lease, got.Renewed.Format(time.RFC3339))
	default:
		fmt.Fprintf(w, "lease:          %s  expired (renewed %s; `sandpit sandbox rm` removes it and the pods)\n", got.Lease, got.Renewed.Format(time.RFC3339))
	}
	if len(got.Pods) == 0 {
		fmt.Fprintln(w, "pods:           none (the next daemon creates them)")
	}
	for _, p := range got.Pods {
		role := "session"
		if p.Slot >= 0 {
			role = fmt.Sprintf("slot %d", p.Slot)
		}
		fmt.Fprintf(w, "pod:            %s  %-9s %-8s %s  created %s\n", p.ID, p.State, role, p.Image, p.Created.Format(time.RFC3339))
	}
	return nil
}

// writeOwner writes the status lines every runtime shares: the data directory and the process
// holding it (owner 0: none).
func writeOwner(w io.Writer, dir string, owner int) {
	fmt.Fprintf(w, "data directory: %s\n", dir)
	if owner > 0 {
		fmt.Fprintf(w, "owned by:       sandpit process %d\n", owner)
	} else {
		fmt.Fprintln(w, "owned by:       nobody (no daemon or run is using it)")
	}
}
