package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

// The names of the port measurements (Latency.Name).
const (
	// LatencyPortGet is an HTTP GET of a 1 KiB file from `python3 -m http.server` in a
	// session, through the daemon's REST port path (…/sessions/{id}/ports/8000/…).
	LatencyPortGet = "port_get_1kib"
	// LatencyPortGetInBox is the same GET made inside the box (urllib, in a session call
	// that times each request itself): what the daemon's path adds is the difference.
	LatencyPortGetInBox = "port_get_1kib_in_box"
	// LatencyPortGetMiB is a GET of 1 MiB through the daemon's port path.
	LatencyPortGetMiB = "port_get_1mib"
)

// The ports' goals (issue 46): the daemon's path at most 3 ms over the same GET inside the
// box, and 1 MiB through it at 50 MiB/s or more.
const (
	MaxPortOverMS    = 3
	MinPortMiBPerSec = 50
)

// portFiles writes the files the server serves, in www of the session's home.
const portFiles = `import os
os.makedirs("www", exist_ok=True)
open("www/1k.bin", "wb").write(b"k" * 1024)
open("www/1m.bin", "wb").write(b"m" * (1 << 20))`

// portInBox times n GETs of the 1 KiB file inside the box after 3 untimed, no proxy between.
const portInBox = `import time, urllib.request
_o = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_t = []
for _i in range(%d):
    _s = time.perf_counter()
    with _o.open("http://127.0.0.1:8000/1k.bin") as _r:
        assert len(_r.read()) == 1024
    _t.append(time.perf_counter() - _s)
OUTPUT = _t[3:]`

// portLatencies times a session's port: a 1 KiB GET through the daemon and inside the box
// (b.opts.Runs each), and a 1 MiB GET through the daemon (min(slow runs, 10)). A daemon that
// refuses the session leaves them out, with a warning.
func (b *bench) portLatencies(ctx context.Context, in *instance, rep *Report) error {
	info, done := b.openSession(ctx, in, "a session's port")
	if done == nil {
		return nil
	}
	defer done()
	api := in.rest.api
	call := func(code string) (json.RawMessage, error) {
		cctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		ms := int64(runTimeoutMS)
		a, err := api.RunInSession(cctx, "default", info.ID, apitype.SessionCall{Code: code, TimeoutMS: &ms}, nil)
		if err == nil && a.Outcome != apitype.OutcomeOK {
			err = fmt.Errorf("outcome %s: %s %s", a.Outcome, a.Reason, a.Stderr)
		}
		return a.Output, err
	}
	if _, err := call(portFiles); err != nil {
		return fmt.Errorf("writing the port's files: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, requestTimeout)
	_, err := api.Command(cctx, "default", info.ID, apitype.CommandRequest{Cmd: "cd www && exec python3 -m http.server 8000 --bind 127.0.0.1 2>/dev/null", Background: true}, nil)
	cancel()
	if err != nil {
		return fmt.Errorf("starting python3 -m http.server in the session: %w", err)
	}
	url := in.rest.base + "/v1/agents/default/sessions/" + info.ID + "/ports/8000/"
	get := func(name string, size int) (time.Duration, error) {
		cctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(cctx, http.MethodGet, url+name, nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+in.rest.token)
		began := time.Now()
		resp, err := in.rest.hc.Do(req)
		if err != nil {
			return 0, err
		}
		n, err := io.Copy(io.Discard, resp.Body)
		took := time.Since(began)
		resp.Body.Close()
		if err == nil && (resp.StatusCode != http.StatusOK || n != int64(size)) {
			err = fmt.Errorf("GET %s answered %s with %d bytes", name, resp.Status, n)
		}
		return took, err
	}
	for deadline := time.Now().Add(30 * time.Second); ; { // the server's start
		_, err := get("1k.bin", 1024)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the session's http.server never answered through the port: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	timed := func(name string, size, n int) ([]time.Duration, error) {
		var out []time.Duration
		for i := range n + 3 {
			d, err := get(name, size)
			if err != nil {
				return nil, err
			}
			if i >= 3 {
				out = append(out, d)
			}
		}
		return out, nil
	}
	via, err := timed("1k.bin", 1024, b.opts.Runs)
	if err != nil {
		return fmt.Errorf("timing GETs through the port: %w", err)
	}
	out, err := call(fmt.Sprintf(portInBox, b.opts.Runs+3))
	if err != nil {
		return fmt.Errorf("timing GETs inside the box: %w", err)
	}
	var secs []float64
	if err := json.Unmarshal(bytes.TrimSpace(out), &secs); err != nil {
		return fmt.Errorf("the in-box timings %s: %w", out, err)
	}
	inBox := make([]time.Duration, len(secs))
	for i, s := range secs {
		inBox[i] = time.Duration(s * float64(time.Second))
	}
	mib, err := timed("1m.bin", 1<<20, min(b.opts.SlowRuns, 10))
	if err != nil {
		return fmt.Errorf("timing 1 MiB through the port: %w", err)
	}
	for _, l := range []Latency{
		newLatency(LatencyPortGet, "", "port: GET 1 KiB through the daemon", via, nil),
		newLatency(LatencyPortGetInBox, "", "port: the same GET inside the box", inBox, nil),
		newLatency(LatencyPortGetMiB, "", "port: GET 1 MiB through the daemon", mib, nil),
	} {
		b.say("%s: %d runs, p50 %.2f ms", l.What, l.Runs, l.P50MS)
		rep.Latency = append(rep.Latency, l)
	}
	return nil
}

// portTargets are the ports' goals, when the report has their measurements.
func portTargets(p50 func(string) float64) []Target {
	var targets []Target
	via, inBox := p50(LatencyPortGet), p50(LatencyPortGetInBox)
	if via > 0 && inBox > 0 {
		v := via - inBox
		targets = append(targets, Target{Name: "port_get_over_ms", What: "port GET 1 KiB: through the daemon − inside the box, p50", Unit: "ms", Op: "<=",
			Goal: MaxPortOverMS, Value: round(v, 2), Status: evaluate(v, "<=", MaxPortOverMS)})
	}
	if v := p50(LatencyPortGetMiB); v > 0 {
		rate := 1000 / v // 1 MiB per p50
		targets = append(targets, Target{Name: "port_1mib_mib_per_s", What: "port GET 1 MiB through the daemon (at p50)", Unit: "MiB/s", Op: ">=",
			Goal: MinPortMiBPerSec, Value: round(rate, 1), Status: evaluate(rate, ">=", MinPortMiBPerSec)})
	}
	return targets
}
