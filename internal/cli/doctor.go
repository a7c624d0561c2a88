package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/errclass"
)

func (o *options) doctorCommand() *cobra.Command {
	var f daemonFlags
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check every requirement of sandpit on this machine and print the fix for each failure",
		Long: `Check the configuration, the executor binary, the data directory and its free space, the
Docker engine and its version, the base and sandbox images, the warm container and the
daemon. Exits 0 when every required check passes, 69 otherwise.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// A configuration that does not load is the first failed check, not a usage error:
			// doctor prints its table and exits 69 as for any other failed check.
			cfg, err := o.load(cmd)
			src := app.ConfigSource{Name: o.configSource(), Err: err, Ignored: o.ignoredEnv()}
			if err != nil {
				cfg.Token, _ = o.env.Lookup("SANDPIT_TOKEN")
			}
			u := o.daemonURL(f.url)
			checks := app.Doctor(cmd.Context(), cfg, src, u)
			failed := false
			for _, c := range checks {
				failed = failed || (c.Required && !c.OK)
			}
			if f.json {
				if err := o.printJSON(map[string]any{"checks": checks, "ok": !failed}); err != nil {
					return err
				}
			} else {
				printChecks(o.env.Stdout, checks)
			}
			if failed {
				return reported(errclass.New(errclass.Unavailable, "doctor found a failed check"))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&f.url, "url", "", "daemon URL (default $SANDPIT_URL, else the configured listen address, else "+DefaultURL+")")
	f.registerOutput(cmd.Flags(), true)
	return cmd
}

// printChecks prints checks as a table: a mark, the name in a column as wide as the widest,
// the detail, and under a failed check its fix.
func printChecks(w io.Writer, checks []app.Check) {
	width := 0
	for _, c := range checks {
		width = max(width, len(c.Name))
	}
	for _, c := range checks {
		mark := "ok  "
		switch {
		case !c.OK && c.Required:
			mark = "FAIL"
		case !c.OK:
			mark = "note"
		}
		fmt.Fprintf(w, "%s  %-*s  %s\n", mark, width, c.Name, c.Detail)
		if !c.OK && c.Fix != "" {
			fmt.Fprintf(w, "      %-*s  fix: %s\n", width, "", c.Fix)
		}
	}
}

// configSource names the configuration this command reads, for doctor's report: its config
// file, or the defaults when there is none, with the SANDPIT_* variables and flags over it.
func (o *options) configSource() string {
	file, required := config.FileOf(o.configFile, o.env.Lookup)
	if _, err := os.Stat(file); file != "" && (required || err == nil) {
		return "this command's configuration (config file " + file + ", SANDPIT_* variables and flags)"
	}
	return "this command's configuration (defaults, SANDPIT_* variables and flags; no config file)"
}
