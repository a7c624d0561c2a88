package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
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
	// LatencySessionCreateGrown is LatencySessionCreate's burst again, once the warm pool has
	// refilled to the target the first burst raised.
	LatencySessionCreateGrown = "session_create_grown"
	// LatencySessionFirstImport is a new session's first call, importing pandas and
	// matplotlib.pyplot, through REST.
	LatencySessionFirstImport = "session_first_import"
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

// sessionCreateLatency times the creation of sessions through REST in bursts of
// min(slow runs, sessionCreateRuns), each created and closed in a row: the first with the
// warm pool full at the target the bench's earlier sessions left it (LatencySessionCreate),
// the second once the pool has refilled to the target the first raised
// (LatencySessionCreateGrown). Then the first call of a new
// session that imports pandas and matplotlib (LatencySessionFirstImport). A daemon that
// refuses sessions leaves them out, with a warning.
func (b *bench) sessionCreateLatency(ctx context.Context, in *instance, rep *Report) error {
	_, done := b.openSession(ctx, in, "session creation")
	if done == nil {
		return nil
	}
	done()
	n := min(b.opts.SlowRuns, sessionCreateRuns)
	what := fmt.Sprintf("session creation (REST), %d in a row", n)
	if target := b.waitPool(ctx, in, false); target > 0 {
		what += fmt.Sprintf(", pool of %d", target) // as the bench's earlier sessions left it
	}
	creates, err := b.timeSessionCreates(ctx, in, n, nil)
	if err != nil {
		return err
	}
	l := newLatency(LatencySessionCreate, "", what, creates, nil)
	b.say("%s: %d runs, p50 %.1f ms", l.What, l.Runs, l.P50MS)
	rep.Latency = append(rep.Latency, l)
	if target := b.waitPool(ctx, in, false); target > 0 {
		if creates, err = b.timeSessionCreates(ctx, in, n, nil); err != nil {
			return err
		}
		l = newLatency(LatencySessionCreateGrown, "", fmt.Sprintf("  again, the pool grown to %d", target), creates, nil)
		b.say("%s: %d runs, p50 %.1f ms", l.What, l.Runs, l.P50MS)
		rep.Latency = append(rep.Latency, l)
	}
	var firsts []time.Duration
	for range min(n, 3) {
		b.waitPool(ctx, in, true)
		info, done := b.openSession(ctx, in, "a session's first call")
		if done == nil {
			return nil
		}
		cctx, cancel := context.WithTimeout(ctx, requestTimeout)
		ms := int64(runTimeoutMS)
		began := time.Now()
		a, err := in.rest.api.RunInSession(cctx, "default", info.ID, apitype.SessionCall{Code: "import pandas, matplotlib.pyplot", TimeoutMS: &ms}, nil)
		firsts = append(firsts, time.Since(began))
		cancel()
		done()
		if err == nil && a.Outcome != apitype.OutcomeOK {
			err = fmt.Errorf("outcome %s: %s %s", a.Outcome, a.Reason, a.Stderr)
		}
		if err != nil {
			return fmt.Errorf("a session's first call: %w", err)
		}
	}
	l = newLatency(LatencySessionFirstImport, "", "session's first call: import pandas, matplotlib", firsts, nil)
	b.say("%s: %d runs, p50 %.1f ms", l.What, l.Runs, l.P50MS)
	rep.Latency = append(rep.Latency, l)
	return nil
}

// waitPool waits, up to five minutes, until the daemon's warm session pool holds its target
// (sandpit_session_pool_ready and _target on /metrics), or with one only one ready, and
// returns the target; 0 when the daemon reports no pool (an older sandpit, or e2b_pool 0).
func (b *bench) waitPool(ctx context.Context, in *instance, one bool) int {
	deadline := time.Now().Add(5 * time.Minute)
	for first := true; ; first = false {
		ready, target, ok := poolGauges(ctx, in.rest)
		switch {
		case first && (!ok || target == 0):
			return 0
		case !ok: // a scrape that failed under load: look again
			ready, target = 0, 1
		}
		if ready >= target || (one && ready > 0) {
			return target
		}
		if time.Now().After(deadline) {
			b.say("warning: the warm pool holds %d of its target %d after 5 minutes; measuring anyway", ready, target)
			return target
		}
		select {
		case <-ctx.Done():
			return target
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// poolGauges reads the warm pool's ready and target gauges from the daemon's /metrics.
func poolGauges(ctx context.Context, c *restClient) (ready, target int, ok bool) {
	m, err := c.metrics(ctx)
	r, okR := m["sandpit_session_pool_ready"]
	g, okT := m["sandpit_session_pool_target"]
	return int(r), int(g), err == nil && okR && okT
}

// metrics reads the daemon's /metrics: each unlabelled sample's value by its name.
func (c *restClient) metrics(ctx context.Context) (map[string]float64, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, c.base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the daemon's /metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading the daemon's /metrics: %d %v", resp.StatusCode, err)
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(string(body), "\n") {
		name, v, cut := strings.Cut(line, " ")
		if n, err := strconv.ParseFloat(strings.TrimSpace(v), 64); cut && err == nil {
			out[name] = n
		}
	}
	return out, nil
}
