package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sandpit-dev/sandpit/internal/executor"
	"github.com/sandpit-dev/sandpit/internal/protocol"
)

func main() {
	if len(os.Args) >= 2 && os.Args[1] == executor.LimitedExec {
		os.Exit(executor.ExecLimited(os.Args[2:]))
	}
	if len(os.Args) >= 2 && os.Args[1] == executor.IdleMode {
		// A box's own process: it waits until the engine stops the box (docker-init, pid 1,
		// passes the signal on).
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		<-stop
		os.Exit(0)
	}
	if len(os.Args) >= 2 && os.Args[1] == "spawn-time" {
		os.Exit(spawnTime(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) < 2 || os.Args[1] != "serve" {
		fmt.Fprintln(os.Stderr, "usage: sandpit-executor serve [flags]  (started by the sandpit daemon, not by hand)")
		os.Exit(2)
	}
	cfg := executor.DefaultConfig()
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	fs.IntVar(&cfg.Slots, "slots", cfg.Slots, "number of slots")
	fs.IntVar(&cfg.UIDBase, "uid-base", cfg.UIDBase, "uid of slot 0")
	fs.StringVar(&cfg.Python, "python", cfg.Python, "python interpreter")
	fs.StringVar(&cfg.Bootstrap, "bootstrap", cfg.Bootstrap, "path of bootstrap.py")
	fs.StringVar(&cfg.RunRoot, "run-root", cfg.RunRoot, "directory of the run directories")
	forkServer := fs.Bool("fork-server", true, "start runs from a fork server with preloaded modules (false: a fresh interpreter per run)")
	preload := fs.String("preload", strings.Join(cfg.Preload, ","), "comma-separated modules the fork server imports; those the image lacks are skipped")
	fs.IntVar(&cfg.ForkServerMaxRuns, "fork-server-max-runs", cfg.ForkServerMaxRuns, "replace the fork server after this many runs (0: never)")
	runtime := fs.String("runtime", "runc", `the container's runtime: "runc" (Linux) or "runsc" (gVisor, whose limits differ: see executor.Config.GVisor)`)
	fs.Int64Var(&cfg.MemoryReserve, "memory-reserve", 0, "under runsc: stop a run when the box has less than this many bytes of memory available")
	fs.StringVar(&cfg.SessionHome, "session-home", "", "a session's executor: slot 0's working directory and home (a tmpfs of its own, kept for the session's life)")
	fs.Int64Var(&cfg.SocketBufferMax, "socket-buffer-max", 0, "under runsc: the maximum of the box's tcp_rmem and tcp_wmem, in bytes (0: gVisor's own)")
	fs.StringVar(&cfg.Proxy, "egress-proxy", "", `serve the egress proxy on this loopback address ("127.0.0.1:3128"; network "allowlist")`)
	_ = fs.Parse(os.Args[2:])
	if self, err := os.Executable(); err == nil {
		cfg.Self = self
	}
	switch *runtime {
	case "runc":
	case "runsc":
		cfg.GVisor = true
	default:
		fmt.Fprintf(os.Stderr, "sandpit-executor: -runtime is %q; it must be \"runc\" or \"runsc\"\n", *runtime)
		os.Exit(2)
	}
	if !*forkServer {
		cfg.ForkServer = ""
	}
	cfg.Preload = nil
	for m := range strings.SplitSeq(*preload, ",") {
		if m = strings.TrimSpace(m); m != "" {
			cfg.Preload = append(cfg.Preload, m)
		}
	}

	// JSON lines without time: the daemon reads them and logs them as its own, with its clock.
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := executor.Serve(ctx, protocol.NewConn(os.Stdin, os.Stdout), cfg, log); err != nil {
		log.Error("executor stopped", "error", err)
		os.Exit(1)
	}
}
