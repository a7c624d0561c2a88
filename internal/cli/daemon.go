package cli

// The parts every command served by the daemon shares: its flags, finding the daemon, and
// printing JSON. Each command tree has its own file: code.go, job.go, exec.go, packages.go, kb.go.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// NoDaemonError means a command that needs the daemon found none; it exits 69.
type NoDaemonError struct {
	URL string
	Err error
}

// Is makes a NoDaemonError of class errclass.Unavailable.
func (e *NoDaemonError) Is(target error) bool { return target == errclass.Unavailable }

func (e *NoDaemonError) Error() string {
	return fmt.Sprintf("no sandpit daemon answers at %s (%v): saved code, jobs and the ledger are served by the daemon; "+
		"start it with `sandpit serve`, or set SANDPIT_URL or --url to its address", e.URL, e.Err)
}

func (e *NoDaemonError) Unwrap() error { return e.Err }

// daemonFlags are the flags of the commands served by the daemon.
type daemonFlags struct {
	url   string
	agent string
	json  bool
}

func (f *daemonFlags) register(fs *pflag.FlagSet, withJSON bool) {
	f.registerShared(fs, withJSON)
	fs.StringVar(&f.agent, "agent", "default", "agent namespace")
}

// registerShared registers --url (and --json when withJSON) without --agent, for commands
// whose resources belong to no agent (installed packages, the machine's setup).
func (f *daemonFlags) registerShared(fs *pflag.FlagSet, withJSON bool) {
	fs.StringVar(&f.url, "url", "", "daemon URL (default $SANDPIT_URL, else the configured listen address, else "+DefaultURL+")")
	f.registerOutput(fs, withJSON)
}

// registerOutput registers --json when withJSON.
func (f *daemonFlags) registerOutput(fs *pflag.FlagSet, withJSON bool) {
	if withJSON {
		fs.BoolVar(&f.json, "json", false, "print JSON")
	}
}

// daemon returns a client of the daemon, or a *NoDaemonError. Like `sandpit run`, it refuses
// engine flags (the daemon has its own settings) and a network policy the daemon lacks.
func (o *options) daemon(cmd *cobra.Command, f daemonFlags) (*client.Client, error) {
	ctx := cmd.Context()
	if given := o.engineFlagsGiven(cmd); len(given) > 0 {
		return nil, usageErrorf("this command is served by the daemon, which runs with its own settings; these flags only set up an engine: %s; "+
			"give them to `sandpit serve`", strings.Join(given, ", "))
	}
	cfg, err := o.load(cmd)
	if err != nil {
		return nil, err
	}
	u := o.daemonURL(f.url)
	c := client.New(u, nil).As(apitype.SourceCLI).WithToken(cfg.Token)
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := c.Health(hctx); err != nil {
		return nil, &NoDaemonError{URL: u, Err: err}
	}
	if err := o.compareWithDaemon(ctx, c, cfg, u); err != nil {
		return nil, err
	}
	return c, nil
}

// checkURL refuses the daemon URL of a command that has --url (the flag, else SANDPIT_URL)
// when it is not an http or https URL with a host: one without its scheme ("localhost:8080")
// answered as no daemon, and run then started an engine of its own beside the daemon (a new
// user, 7 December 2026).
func (o *options) checkURL(cmd *cobra.Command) error {
	fl := cmd.Flags().Lookup("url")
	if fl == nil {
		return nil // a command that asks no daemon
	}
	from, raw := "--url", fl.Value.String()
	if !fl.Changed {
		from, raw = "SANDPIT_URL", ""
		if v, _ := o.env.Lookup("SANDPIT_URL"); v != "" {
			raw = v
		}
	}
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		return nil
	}
	if !strings.Contains(raw, "://") {
		return usageErrorf("%s %q is not a daemon's URL: give its scheme, as http://%s", from, raw, strings.TrimPrefix(raw, "//"))
	}
	return usageErrorf("%s %q is not a daemon's URL: give it as http://HOST:PORT (or https://)", from, raw)
}

// checkAgent checks an agent name (sandbox.CheckAgent) given by from (--agent or
// SANDPIT_AGENT): a usage error naming from, or nil. Main's root command calls it for every
// command that has the flag.
func checkAgent(from, name string) error {
	if ferr := sandbox.CheckAgent(name); ferr != nil {
		return usageErrorf("%s: %s", from, ferr.Message)
	}
	return nil
}

func (o *options) printJSON(v any) error {
	enc := json.NewEncoder(o.env.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// jsonArg reads a flag's JSON value: inline, or @FILE.
func jsonArg(flag, v string) (json.RawMessage, error) {
	b := []byte(v)
	if name, ok := strings.CutPrefix(v, "@"); ok {
		var err error
		if b, err = os.ReadFile(name); err != nil {
			return nil, usageErrorf("--%s: %v", flag, err)
		}
	}
	if !json.Valid(b) {
		return nil, usageErrorf("--%s is not valid JSON: give a JSON value inline or @FILE", flag)
	}
	return json.RawMessage(b), nil
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "…"
	}
	return sandbox.EscapeName(s) // a run's text must not drive the terminal (H65)
}
