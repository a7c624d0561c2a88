package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/datadir"
	"github.com/sandpit-dev/sandpit/internal/mcpserver"
)

func (o *options) mcpCommand() *cobra.Command {
	var f daemonFlags
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve sandpit's tools to an MCP client over standard input and output",
		Long: `Serve the Model Context Protocol over stdio: run_code, save_code, update_code, get_code,
list_code, delete_code, run_saved_code, create_code_job, list_code_jobs, update_code_job,
delete_code_job, get_code_job_history, list_executions, get_execution, and for sessions
create_session, run_in_session, list_sessions, close_session, pause_session, resume_session,
fork_session, run_command, list_commands, read_file, write_file, list_files, and for a
session's ports list_ports, list_port_requests, share_port, list_shares and revoke_share,
acting for one agent (--agent). The tools' descriptions state the daemon's limits. run_code and run_saved_code take
input files and return output files and charts as images, embedded resources or resource links
(sandpit://executions/{id}/files/{name}, which resources/read answers).

It uses the daemon at SANDPIT_URL when one answers; otherwise it runs the engine itself for as
long as the MCP client keeps it open (jobs then fire only while it runs). Logs go to stderr.
Add it to an MCP client as the command "sandpit mcp --agent NAME".`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			var c *client.Client
			var err error
			var noDaemon *NoDaemonError
			if len(o.engineFlagsGiven(cmd)) == 0 {
				c, err = o.daemon(cmd, f)
			}
			if c == nil && (err == nil || errors.As(err, &noDaemon)) {
				var stop func()
				if c, stop, err = o.engineForMCP(ctx, cmd); err == nil {
					defer stop()
				}
			}
			if err != nil {
				return err
			}
			limits, err := c.Limits(ctx)
			if err != nil {
				return fmt.Errorf("reading the daemon's limits: %w", err)
			}
			srv := mcpserver.New(c, f.agent, o.env.Version, limits)
			stdio := newMCPStdio(o.env.Stdin, o.env.Stdout)
			err = srv.Run(ctx, &mcp.IOTransport{Reader: stdio, Writer: stdio})
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil
			}
			return err
		},
	}
	f.register(cmd.Flags(), false)
	return cmd
}

// engineForMCP opens the engine in this process and returns a client of its REST API, called
// in process (client.InProcess: the daemon's path, without the network), and stop, which ends
// its job fires (their runs get app.ShutdownGrace, then are interrupted) and closes it. Jobs
// fire while it runs.
func (o *options) engineForMCP(ctx context.Context, cmd *cobra.Command) (*client.Client, func(), error) {
	cfg, err := o.load(cmd)
	if err != nil {
		return nil, nil, err
	}
	log := o.logger(cfg, false)
	eng, err := app.OpenServing(ctx, cfg, log, o.env.Stderr)
	if err != nil {
		var locked *datadir.LockedError
		if errors.As(err, &locked) {
			return nil, nil, fmt.Errorf("%w: another sandpit runs the engine of this data directory; run `sandpit serve` once, "+
				"and every `sandpit mcp` (any agent) will use it through SANDPIT_URL", err)
		}
		return nil, nil, fmt.Errorf("starting the engine for MCP: %w", err)
	}
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	bgDone := make(chan struct{})
	go func() { eng.RunBackground(bgCtx, cfg.Retention(), log); close(bgDone) }()
	stop := func() {
		stopBackground() // no more fires; the job runs going get a grace, as a daemon's do
		select {
		case <-bgDone:
		case <-time.After(app.ShutdownGrace):
			eng.Service.Interrupt()
			<-bgDone
		}
		if err := eng.Close(); err != nil {
			fmt.Fprintf(o.env.Stderr, "sandpit: stopping the engine: %v\n", err)
		}
	}
	return client.InProcess(eng.Handler(cfg, log)), stop, nil
}
