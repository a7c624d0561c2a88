package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/app"
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
			cfg, err := o.load(cmd)
			if err != nil {
				return err
			}
			u := o.daemonURL(f.url)
			checks := app.Doctor(cmd.Context(), cfg, u)
			failed := false
			for _, c := range checks {
				failed = failed || (c.Required && !c.OK)
			}
			if f.json {
				if err := o.printJSON(map[string]any{"checks": checks, "ok": !failed}); err != nil {
					return err
				}
			} else {
				for _, c := range checks {
					mark := "ok  "
					switch {
					case !c.OK && c.Required:
						mark = "FAIL"
					case !c.OK:
						mark = "note"
					}
					fmt.Fprintf(o.env.Stdout, "%s  %-16s %s\n", mark, c.Name, c.Detail)
					if !c.OK {
						fmt.Fprintf(o.env.Stdout, "      %-16s fix: %s\n", "", c.Fix)
					}
				}
			}
			if failed {
				return reported(errclass.New(errclass.Unavailable, "doctor found a failed check"))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&f.url, "url", "", "daemon URL (default $SANDPIT_URL, else $SANDPIT_LISTEN's address, else "+DefaultURL+")")
	f.registerOutput(cmd.Flags(), true)
	return cmd
}
