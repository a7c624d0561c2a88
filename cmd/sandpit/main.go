package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // job timezones must not depend on the host's zoneinfo files

	"github.com/sandpit-dev/sandpit/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	// A closed terminal (SIGHUP) stops a command as Ctrl-C does: in order, cleaning up.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := cli.Main(ctx, os.Args[1:], cli.Env{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Lookup: os.LookupEnv, Environ: os.Environ,
		Version: version,
	})
	stop()
	os.Exit(code)
}
