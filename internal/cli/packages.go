package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/config"
)

func (o *options) packagesCommand() *cobra.Command {
	pk := &cobra.Command{Use: "packages", Short: "List, pre-install and remove the dependencies installed in the sandbox (needs the daemon)"}
	pk.AddCommand(o.packagesListCommand(), o.packagesInstallCommand(), o.packagesRemoveCommand())
	return pk
}

func (o *options) packagesListCommand() *cobra.Command {
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
			fmt.Fprintln(tw, "NAME\tVERSION\tSIZE\tINSTALLED\tFOR\tWITH")
			for _, p := range pkgs {
				size, with := config.FormatSize(p.SizeBytes), p.Within
				if with != "" {
					size = "-" // counted in the size of the package it came with
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, p.Version, size, p.InstalledAt.Format(time.RFC3339), p.Requirement, with)
			}
			return tw.Flush()
		},
	}
	list.registerShared(listCmd.Flags(), true)
	return listCmd
}

func (o *options) packagesInstallCommand() *cobra.Command {
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
			statuses, err := c.InstallPackages(cmd.Context(), args, func(d apitype.DependencyStatus) {
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
				if d.Status == apitype.DependencyFailed {
					return reportedRun(apitype.Result{Outcome: apitype.OutcomeDependencyError}) // as a run's dependency_error
				}
			}
			return nil
		},
	}
	install.registerShared(installCmd.Flags(), true)
	return installCmd
}

func (o *options) packagesRemoveCommand() *cobra.Command {
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
	return removeCmd
}

// dependencyLine is one requirement's status as `packages install` prints it: the status, the
// requirement, and the version or why it failed (an installed one that conflicts says so).
func dependencyLine(d apitype.DependencyStatus) string {
	detail := d.Version
	switch {
	case d.Status == apitype.DependencyFailed && d.Version != "":
		detail = fmt.Sprintf("(version %s is installed but cannot be used with the others): %s", d.Version, d.Error)
	case d.Status == apitype.DependencyFailed:
		detail = d.Error
	case d.Status == apitype.DependencySkipped:
		detail = "(its environment marker excludes it here)"
	}
	return strings.TrimSpace(fmt.Sprintf("%-9s %s %s", d.Status, d.Requirement, detail))
}
