package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/setup"
)

func (o *options) setupCommand() *cobra.Command {
	var f daemonFlags
	var opts setup.Options
	cmd := &cobra.Command{
		Use:   "setup",
		Short: "Take this machine to a warm sandbox: Docker, the image, the container, a health check",
		Long: `Check the Docker engine (and, with --install, install it: on macOS Homebrew, the Docker CLI
and Colima, started with --colima-cpus and --colima-memory; on Debian or Ubuntu as root,
docker.io), build or reuse the sandbox image, start the warm container and run print(1) in it.
Steps already done are reported as skipped, so running it again is safe. Without --install it
says exactly what to install.

When a daemon answers at SANDPIT_URL, the daemon runs the checks (POST /v1/setup).
Progress: a progress bar on a terminal, plain lines otherwise, NDJSON with --json.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			emit, finish := o.setupReporter(f.json)
			err := o.setup(cmd, f, opts, emit)
			last := apitype.SetupEvent{Step: "setup", Status: apitype.SetupDone, Message: "the sandbox is ready", Progress: 1}
			if err != nil {
				last = apitype.SetupEvent{Step: "setup", Status: apitype.SetupFailed, Message: err.Error()}
			}
			emit(last) // as POST /v1/setup ends
			finish()
			if errors.Is(err, setup.ErrStepFailed) || errors.Is(err, client.ErrSetupFailed) {
				return reported(errclass.Wrap(errclass.Unavailable, err)) // the failed step's event said why
			}
			return err
		},
	}
	f.registerShared(cmd.Flags(), true)
	cmd.Flags().BoolVar(&opts.Install, "install", false, "install what is missing (macOS: Homebrew, Docker CLI, Colima; Debian/Ubuntu as root: docker.io)")
	cmd.Flags().IntVar(&opts.ColimaCPUs, "colima-cpus", 2, "CPUs of the Colima VM (macOS)")
	cmd.Flags().IntVar(&opts.ColimaMemoryGiB, "colima-memory", 4, "memory of the Colima VM in GiB (macOS)")
	return cmd
}

func (o *options) setup(cmd *cobra.Command, f daemonFlags, opts setup.Options, emit func(apitype.SetupEvent)) error {
	ctx := cmd.Context()
	// Which configuration is checked is said first: the running daemon's, or this command's.
	if len(o.engineFlagsGiven(cmd)) == 0 {
		if c, err := o.daemon(cmd, f); err == nil {
			emit(apitype.SetupEvent{Step: "setup", Status: setup.Started,
				Message: "a daemon answers at " + o.daemonURL(f.url) + ": it runs the checks, with its own configuration"})
			return c.Setup(ctx, emit)
		} else if _, ok := err.(*NoDaemonError); !ok {
			return err
		}
	}
	cfg, err := o.load(cmd)
	if err != nil {
		return err
	}
	emit(apitype.SetupEvent{Step: "setup", Status: setup.Started, Message: "no daemon answers at " + o.daemonURL(f.url) +
		": setting up this machine with " + o.configSource()})
	opts.EngineAddress = cfg.DockerHost
	if opts.EngineAddress == "" {
		opts.EngineAddress, _ = o.env.Lookup("DOCKER_HOST")
	}
	eng := &app.SetupDocker{Cfg: cfg, Log: o.logger(cfg, true)}
	defer eng.Close()
	_, err = setup.Run(ctx, setup.DetectPlatform(runtime.GOOS), setup.ExecRunner{}, eng, opts,
		func(e setup.Event) { emit(httpapi.SetupEventOf(e)) })
	return err
}

// setupReporter returns how setup's events are shown: NDJSON, a progress bar on a terminal,
// or plain lines; finish ends the display.
func (o *options) setupReporter(asJSON bool) (func(apitype.SetupEvent), func()) {
	out := o.env.Stdout
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetEscapeHTML(false)
		return func(e apitype.SetupEvent) { _ = enc.Encode(e) }, func() {}
	}
	line := func(e apitype.SetupEvent) string {
		return fmt.Sprintf("%-13s %-8s %s", e.Step, e.Status, e.Message)
	}
	if file, ok := out.(*os.File); !ok || !isatty.IsTerminal(file.Fd()) {
		return func(e apitype.SetupEvent) {
			if e.Status != setup.Progress {
				fmt.Fprintln(out, line(e))
			}
		}, func() {}
	}
	// A bar of the current step's percentage (the events that carry a fraction move it; the
	// build's lines only describe it), started again by each step.
	bar := progressbar.NewOptions(100, progressbar.OptionSetWriter(out), progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
	return func(e apitype.SetupEvent) {
			switch e.Status {
			case setup.Started, setup.Progress:
				if e.Status == setup.Started {
					bar.Reset()
				}
				if e.Progress > 0 {
					_ = bar.Set(int(e.Progress * 100))
				}
				msg := e.Message
				if len(msg) > 50 {
					msg = msg[:50] + "…"
				}
				bar.Describe(e.Step + ": " + strings.ReplaceAll(msg, "\n", " "))
			default:
				_ = bar.Clear()
				fmt.Fprintln(out, line(e))
			}
		}, func() {
			_ = bar.Finish()
		}
}
