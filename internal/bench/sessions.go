package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

// The names of the session measurements (Latency.Name).
const (
	// LatencySessionPrint is print(1) as a call of a live stateful session, through the REST
	// API, end to end (the session's interpreter already started).
	LatencySessionPrint = "session_print"
	// LatencySessionSum is a call that sums a column of a 1-million-row DataFrame an earlier
	// call of the session loaded (the load itself is timed once, in What).
	LatencySessionSum = "session_sum"
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
	for _, l := range []Latency{
		newLatency(LatencySessionPrint, "", "sandpit session call print(1)", prints, nil),
		newLatency(LatencySessionSum, "", fmt.Sprintf("session call: sum of a kept 1e6-row column (load once: %d ms)", load.Milliseconds()), sums, nil),
	} {
		b.say("%s: %d calls, p50 %.1f ms", l.What, l.Runs, l.P50MS)
		rep.Latency = append(rep.Latency, l)
	}
	return nil
}
