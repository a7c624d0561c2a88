package bench

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/client"
)

// The names of the session measurements (Latency.Name).
const (
	// LatencySessionPrint is print(1) as a call of a live stateful session, through the REST
	// API, end to end (the session's interpreter already started).
	LatencySessionPrint = "session_print"
	// LatencySessionSum is a call that sums a column of a 1-million-row DataFrame an earlier
	// call of the session loaded (the load itself is timed once, in What).
	LatencySessionSum = "session_sum"
	// LatencySessionEcho is `echo 1` as a foreground command of a live session, through REST.
	LatencySessionEcho = "session_echo"
	// LatencySessionFile is a 1 MiB file written (PUT) then read back (GET), through REST.
	LatencySessionFile = "session_file_1mib"
	// LatencySessionList is a listing of a 1,000-file directory of a session, through REST.
	LatencySessionList = "session_list_1000"
)

// sessionSumCalls is how many sum calls LatencySessionSum times.
const sessionSumCalls = 20

// openSession creates a session of agent "default" for the bench's measurements of what,
// and returns it with done, which closes it. When the daemon refuses it (sessions off, or at
// their cap) done is nil, after a warning.
func (b *bench) openSession(ctx context.Context, in *instance, what string) (apitype.Session, func()) {
	api := in.rest.api
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	info, err := api.CreateSession(cctx, "default", apitype.SessionCreate{})
	cancel()
	if err != nil {
		b.say("warning: %s not measured: %v", what, err)
		return info, nil
	}
	return info, func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, err := api.CloseSession(cctx, "default", info.ID); err != nil {
			b.say("warning: closing the bench's session: %v", err)
		}
	}
}

// sessionLatencies times calls of a stateful session: print(1) (runs times), and a sum over
// a DataFrame kept from an earlier call (sessionSumCalls times). A daemon that refuses the
// session (sessions off, or at their cap) leaves them out, with a warning.
func (b *bench) sessionLatencies(ctx context.Context, in *instance, rep *Report) error {
	api := in.rest.api
	info, done := b.openSession(ctx, in, "sessions")
	if done == nil {
		return nil
	}
	defer done()
	call := func(code string) (time.Duration, error) {
		cctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		ms := int64(runTimeoutMS)
		began := time.Now()
		a, err := api.RunInSession(cctx, "default", info.ID, apitype.SessionCall{Code: code, TimeoutMS: &ms}, nil)
		took := time.Since(began)
		if err == nil && a.Outcome != apitype.OutcomeOK {
			err = fmt.Errorf("outcome %s: %s %s", a.Outcome, a.Reason, a.Stderr)
		}
		return took, err
	}
	times := func(code string, n int) ([]time.Duration, error) {
		var out []time.Duration
		for range n {
			d, err := call(code)
			if err != nil {
				return nil, err
			}
			out = append(out, d)
		}
		return out, nil
	}
	if _, err := call("print(1)"); err != nil { // starts the interpreter
		return fmt.Errorf("the session's first call: %w", err)
	}
	prints, err := times("print(1)", b.opts.Runs)
	if err != nil {
		return fmt.Errorf("timing print(1) in a session: %w", err)
	}
	load, err := call("import numpy as np, pandas as pd\ndf = pd.DataFrame({'a': np.arange(1_000_000), 'b': np.random.rand(1_000_000)})")
	if err != nil {
		return fmt.Errorf("loading the session's DataFrame: %w", err)
	}
	sums, err := times("OUTPUT = float(df['b'].sum())", sessionSumCalls)
	if err != nil {
		return fmt.Errorf("timing the sums in a session: %w", err)
	}
	ws, err := b.workspaceLatencies(ctx, api, info.ID)
	if err != nil {
		return err
	}
	for _, l := range append([]Latency{
		newLatency(LatencySessionPrint, "", "sandpit session call print(1)", prints, nil),
		newLatency(LatencySessionSum, "", fmt.Sprintf("session call: sum of a kept 1e6-row column (load once: %d ms)", load.Milliseconds()), sums, nil),
	}, ws...) {
		b.say("%s: %d calls, p50 %.1f ms", l.What, l.Runs, l.P50MS)
		rep.Latency = append(rep.Latency, l)
	}
	return nil
}

// workspaceLatencies times a session's workspace through REST: `echo 1` as a command, a
// 1 MiB file written then read, and a listing of a 1,000-file directory (b.opts.Runs each).
func (b *bench) workspaceLatencies(ctx context.Context, api *client.Client, id string) ([]Latency, error) {
	timed := func(n int, do func(context.Context) error) ([]time.Duration, error) {
		var out []time.Duration
		for range n {
			cctx, cancel := context.WithTimeout(ctx, requestTimeout)
			began := time.Now()
			err := do(cctx)
			out = append(out, time.Since(began))
			cancel()
			if err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	echo, err := timed(b.opts.Runs, func(ctx context.Context) error {
		res, err := api.Command(ctx, "default", id, apitype.CommandRequest{Cmd: "echo 1"}, nil)
		if err == nil && (res.Stdout != "1\n" || res.Process.End == nil || res.Process.End.Outcome != apitype.OutcomeOK) {
			err = fmt.Errorf("echo 1 answered %q, %+v", res.Stdout, res.Process.End)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("timing echo 1 in a session: %w", err)
	}
	mib := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	file, err := timed(b.opts.Runs, func(ctx context.Context) error {
		if _, err := api.WriteSessionFile(ctx, "default", id, "bench/1mib.bin", bytes.NewReader(mib), true); err != nil {
			return err
		}
		got, err := api.ReadSessionFile(ctx, "default", id, "bench/1mib.bin", 0, 0)
		if err == nil && !bytes.Equal(got, mib) {
			err = fmt.Errorf("read back %d bytes, not the 1 MiB written", len(got))
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("timing a 1 MiB write and read in a session: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, requestTimeout)
	_, err = api.Command(cctx, "default", id, apitype.CommandRequest{Cmd: "mkdir -p many && cd many && for i in $(seq 1 1000); do : > f$i; done"}, nil)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("making 1,000 files in a session: %w", err)
	}
	list, err := timed(b.opts.Runs, func(ctx context.Context) error {
		l, err := api.ListSessionFiles(ctx, "default", id, "many", 1)
		if err == nil && len(l.Entries) != 1000 {
			err = fmt.Errorf("listed %d entries, not 1,000", len(l.Entries))
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("timing a listing of 1,000 files in a session: %w", err)
	}
	return []Latency{
		newLatency(LatencySessionEcho, "", "session command echo 1", echo, nil),
		newLatency(LatencySessionFile, "", "session file: write then read 1 MiB", file, nil),
		newLatency(LatencySessionList, "", "session files: list 1,000 entries", list, nil),
	}, nil
}

// sessionCreateLatency times the creation of sessions through REST (LatencySessionCreate),
// min(slow runs, sessionCreateRuns) times. A daemon that refuses sessions leaves it out, with a
// warning.
func (b *bench) sessionCreateLatency(ctx context.Context, in *instance, rep *Report) error {
	_, done := b.openSession(ctx, in, "session creation")
	if done == nil {
		return nil
	}
	done()
	creates, err := b.timeSessionCreates(ctx, in, min(b.opts.SlowRuns, sessionCreateRuns), nil)
	if err != nil {
		return err
	}
	l := newLatency(LatencySessionCreate, "", "session creation (REST)", creates, nil)
	b.say("%s: %d runs, p50 %.1f ms", l.What, l.Runs, l.P50MS)
	rep.Latency = append(rep.Latency, l)
	return nil
}
