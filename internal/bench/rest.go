package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// restClient calls one daemon's REST API the way any HTTP client would: a JSON POST to
// /v1/executions, with keep-alive connections. It decodes the result itself (rather than with
// package client) so that it reads what is on the wire, including fields the Go types may not
// have yet, such as "start".
type restClient struct {
	base  string
	token string
	hc    *http.Client
}

// newRESTClient returns a client of the daemon at base (http://host:port) whose connection
// pool keeps enough idle connections for maxClients concurrent callers.
func newRESTClient(base, token string, maxClients int) *restClient {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // loopback only, whatever HTTP_PROXY says
	tr.MaxIdleConns = 2 * maxClients
	tr.MaxIdleConnsPerHost = 2 * maxClients
	return &restClient{base: strings.TrimRight(base, "/"), token: token, hc: &http.Client{Transport: tr}}
}

// close releases the idle connections.
func (c *restClient) close() { c.hc.CloseIdleConnections() }

// execResult is the part of an execution result the bench reads.
type execResult struct {
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
	Stdout  string `json:"stdout"`
	Stderr  string `json:"stderr"`
	// Start says how the run's Python was started ("fork" or "cold"); empty from daemons that
	// do not report it.
	Start string `json:"start"`
}

// statusError is an answer other than 200.
type statusError struct {
	status int
	body   string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("the daemon answered HTTP %d: %s", e.status, e.body)
}

// busy reports whether err is a 429 (all slots busy and the queue full).
func busy(err error) bool {
	se, ok := errors.AsType[*statusError](err)
	return ok && se.status == http.StatusTooManyRequests
}

// requestTimeout bounds one request: the run's own timeout plus room for the daemon.
const requestTimeout = time.Minute

// runTimeoutMS is the timeout_ms every bench run asks for.
const runTimeoutMS = 30_000

// execute runs code through POST /v1/executions and returns its result.
func (c *restClient) execute(ctx context.Context, code string) (execResult, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	body, err := json.Marshal(map[string]any{"code": code, "timeout_ms": runTimeoutMS})
	if err != nil {
		return execResult{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/executions", bytes.NewReader(body))
	if err != nil {
		return execResult{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return execResult{}, err
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // so the connection is reused
		resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return execResult{}, &statusError{status: resp.StatusCode, body: strings.TrimSpace(string(msg))}
	}
	var res execResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return execResult{}, fmt.Errorf("reading the execution result: %w", err)
	}
	return res, nil
}

// ready waits until GET /readyz answers 200, polling every interval, until ctx ends or
// stopped is closed (the daemon exited). The error says what the daemon last answered.
func (c *restClient) ready(ctx context.Context, interval time.Duration, stopped <-chan struct{}) error {
	var last error
	for {
		last = c.readyOnce(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last answer: %v)", context.Cause(ctx), last)
		case <-stopped:
			return errors.New("the daemon exited before it was ready")
		case <-time.After(interval):
		}
	}
}

func (c *restClient) readyOnce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/readyz", nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return &statusError{status: resp.StatusCode, body: strings.TrimSpace(string(msg))}
	}
	return nil
}

// program is code the bench runs, with the stdout that proves it ran.
type program struct {
	code, stdout string
}

// printProgram is print(1): the cost of a run itself.
func printProgram() program { return program{code: "print(1)", stdout: "1\n"} }

// pandasProgram is a pandas snippet: the cost of a run whose imports are heavy.
func pandasProgram() program {
	return program{code: `import pandas as pd; print(pd.DataFrame({"a": [1, 2]}).a.sum())`, stdout: "3\n"}
}

// check returns an error unless res is an ok run of p.
func (p program) check(res execResult) error {
	if res.Outcome != "ok" {
		reason := res.Reason
		if reason == "" {
			reason = strings.TrimSpace(res.Stderr)
		}
		return fmt.Errorf("%s ended with outcome %q: %s", p.code, res.Outcome, reason)
	}
	if res.Stdout != p.stdout {
		return fmt.Errorf("%s printed %q, want %q", p.code, res.Stdout, p.stdout)
	}
	return nil
}

// sequential runs p n times, one after the other, and returns each run's duration (from just
// before the request to the decoded result) and how many runs reported each start kind. Any
// failed run fails the measurement.
func (c *restClient) sequential(ctx context.Context, p program, n int) ([]time.Duration, map[string]int, error) {
	durations := make([]time.Duration, 0, n)
	starts := map[string]int{}
	for range n {
		t0 := time.Now()
		res, err := c.execute(ctx, p.code)
		d := time.Since(t0)
		if err == nil {
			err = p.check(res)
		}
		if err != nil {
			return nil, nil, err
		}
		durations = append(durations, d)
		if res.Start != "" {
			starts[res.Start]++
		}
	}
	return durations, starts, nil
}

// load is what a fixed-duration load of concurrent clients achieved.
type load struct {
	clients int
	elapsed time.Duration   // from the start to the last answer
	ok      []time.Duration // the latencies of the ok runs
	notOK   int             // results with another outcome
	busy    int             // 429 answers
	errors  int             // other answers and transport errors
	lastErr error           // the last of those errors
}

// busyPause is how long a client waits after a 429 before it asks again, so that a full queue
// is not hammered in a tight loop.
const busyPause = 20 * time.Millisecond

// throughput runs p from clients concurrent clients, each sending its next request when the
// previous one answered, until duration has passed (requests already sent finish). Failures
// are counted, not fatal; it returns an error only when ctx ended.
func (c *restClient) throughput(ctx context.Context, p program, clients int, duration time.Duration) (load, error) {
	var (
		mu sync.Mutex
		l  = load{clients: clients}
		wg sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(duration)
	for range clients {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(deadline) {
				t0 := time.Now()
				res, err := c.execute(ctx, p.code)
				d := time.Since(t0)
				if ctx.Err() != nil {
					return
				}
				if err == nil {
					err = p.check(res)
					if err != nil {
						err = notOKError{err}
					}
				}
				mu.Lock()
				switch {
				case err == nil:
					l.ok = append(l.ok, d)
				case busy(err):
					l.busy++
				case errors.As(err, new(notOKError)):
					l.notOK++
					l.lastErr = err
				default:
					l.errors++
					l.lastErr = err
				}
				mu.Unlock()
				if busy(err) {
					select {
					case <-ctx.Done():
					case <-time.After(busyPause):
					}
				}
			}
		})
	}
	wg.Wait()
	l.elapsed = time.Since(start)
	return l, context.Cause(ctx)
}

// notOKError marks a run that answered but did not end ok.
type notOKError struct{ error }

func (e notOKError) Unwrap() error { return e.error }
