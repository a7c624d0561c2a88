package bench

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/e2b/e2bclient"
)

// The names of the E2B API's measurements (Latency.Name): each step of an E2B SDK's session,
// through the daemon's /e2b routes as the SDKs send them.
const (
	LatencyE2BCreate   = "e2b_create"    // POST /sandboxes, to its 201
	LatencyE2BFirstRun = "e2b_first_run" // the sandbox's first run_code('print(1)')
	LatencyE2BCommand  = "e2b_command"   // commands.run('echo 1'): process.Process/Start to its end
	LatencyE2BFile     = "e2b_file_1mib" // a 1 MiB file written (octet-stream) and read back
	LatencyE2BKill     = "e2b_kill"      // DELETE /sandboxes/{id}, to its 204
)

// e2bRuns caps the sandboxes the E2B measurements create (each is a container of its own).
const e2bRuns = 5

// e2bLatencies times an E2B SDK's session through the E2B API, min(runs, e2bRuns) times: a
// key is made for the agent "bench" in the daemon's database. A daemon that refuses the
// sandbox (sessions off, or at their cap) leaves them out, with a warning.
func (b *bench) e2bLatencies(ctx context.Context, in *instance, rep *Report) error {
	st, err := app.OpenKeys(ctx, in.cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.say("warning: the E2B API not measured: opening the daemon's keys: %v", err)
		return nil
	}
	key, _, err := st.CreateAPIKey(ctx, "bench", "sandpit bench")
	st.Close()
	if err != nil {
		return fmt.Errorf("creating the bench's API key: %w", err)
	}
	url := "http://" + in.daemon.addr + app.E2BPrefix
	c := &e2bclient.Client{APIURL: url, SandboxURL: url, APIKey: key}
	file := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	steps := map[string][]time.Duration{}
	timed := func(name string, f func(context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		began := time.Now()
		if err := f(cctx); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		steps[name] = append(steps[name], time.Since(began))
		return nil
	}
	for i := range min(b.opts.Runs, e2bRuns) {
		var sb e2bclient.Sandbox
		err := timed(LatencyE2BCreate, func(ctx context.Context) (err error) {
			sb, err = c.Create(ctx, map[string]any{"templateID": "code-interpreter-v1", "timeout": 300})
			return err
		})
		if err != nil && i == 0 {
			b.say("warning: the E2B API not measured: %v", err)
			return nil
		}
		if err != nil {
			return err
		}
		conn := c.Conn(sb.SandboxID, sb.EnvdAccessToken)
		err = timed(LatencyE2BFirstRun, func(ctx context.Context) error {
			ex, err := conn.RunCode(ctx, "print(1)", "", nil)
			if err == nil && (ex.Error != nil || len(ex.Stdout) != 1) {
				err = fmt.Errorf("run_code answered %+v", ex)
			}
			return err
		})
		if err == nil {
			err = timed(LatencyE2BCommand, func(ctx context.Context) error {
				res, err := conn.Run(ctx, "echo 1", nil, nil)
				if err == nil && (res.ExitCode != 0 || res.Stdout != "1\n") {
					err = fmt.Errorf("commands.run answered %+v", res)
				}
				return err
			})
		}
		if err == nil {
			err = timed(LatencyE2BFile, func(ctx context.Context) error {
				if _, err := conn.WriteFile(ctx, "bench.bin", file, false); err != nil {
					return err
				}
				got, err := conn.ReadFile(ctx, "bench.bin")
				if err == nil && !bytes.Equal(got, file) {
					err = fmt.Errorf("read back %d bytes, not the %d written", len(got), len(file))
				}
				return err
			})
		}
		if kerr := timed(LatencyE2BKill, func(ctx context.Context) error { return c.Kill(ctx, sb.SandboxID) }); err == nil {
			err = kerr
		}
		if err != nil {
			return err
		}
	}
	for _, s := range []struct{ name, what string }{
		{LatencyE2BCreate, "E2B API: Sandbox.create (POST /sandboxes)"},
		{LatencyE2BFirstRun, "E2B API: first run_code('print(1)')"},
		{LatencyE2BCommand, "E2B API: commands.run('echo 1')"},
		{LatencyE2BFile, "E2B API: 1 MiB file write and read"},
		{LatencyE2BKill, "E2B API: kill (DELETE /sandboxes/{id})"},
	} {
		l := newLatency(s.name, "", s.what, steps[s.name], nil)
		b.say("%s: %d runs, p50 %.1f ms", l.What, l.Runs, l.P50MS)
		rep.Latency = append(rep.Latency, l)
	}
	return nil
}
