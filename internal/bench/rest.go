package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/errclass"
)

// restClient calls one daemon's REST API through package client, with keep-alive connections
// enough for the bench's concurrent callers.
type restClient struct {
	api         *client.Client
	hc          *http.Client
	base, token string
}

// newRESTClient returns a client of the daemon at base (http://host:port) whose connection
// pool keeps enough idle connections for maxClients concurrent callers.
func newRESTClient(base, token string, maxClients int) *restClient {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // loopback only, whatever HTTP_PROXY says
	tr.MaxIdleConns = 2 * maxClients
	tr.MaxIdleConnsPerHost = 2 * maxClients
	hc := &http.Client{Transport: tr}
	return &restClient{api: client.New(base, hc).WithToken(token), hc: hc, base: base, token: token}
}

// close releases the idle connections.
func (c *restClient) close() { c.hc.CloseIdleConnections() }

// busy reports whether err is the daemon's busy (429: all slots busy and the queue full).
func busy(err error) bool { return errors.Is(err, errclass.Busy) }

// requestTimeout bounds one request: the run's own timeout plus room for the daemon.
const requestTimeout = time.Minute

// runTimeoutMS is the timeout_ms every bench run asks for.
const runTimeoutMS = 30_000

// execute runs code through POST /v1/executions and returns its result.
func (c *restClient) execute(ctx context.Context, code string) (apitype.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	ms := int64(runTimeoutMS)
	return c.api.Execute(ctx, apitype.ExecuteRequest{Code: code, TimeoutMS: &ms}, nil)
}

// ready waits until GET /readyz answers 200, polling every interval, until ctx ends or
// stopped is closed (the daemon exited). The error says what the daemon last answered.
func (c *restClient) ready(ctx context.Context, interval time.Duration, stopped <-chan struct{}) error {
	var last error
	for {
		probe, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.api.Ready(probe)
		cancel()
		if err == nil {
			return nil
		}
		// A probe the deadline cut short is no answer: the last one stays what is reported
		// (it was "context deadline exceeded", hiding the daemon's 503).
		if last == nil || ctx.Err() == nil {
			last = err
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

// program is code the bench runs, with the stdout that proves it ran.
type program struct {
	code, stdout string
	// html, when set, is text the value of the code's last expression must hold as text/html
	html string
}

// printProgram is print(1): the cost of a run itself.
func printProgram() program { return program{code: "print(1)", stdout: "1\n"} }

// pandasProgram is a pandas snippet: the cost of a run whose imports are heavy.
func pandasProgram() program {
	return program{code: `import pandas as pd; print(pd.DataFrame({"a": [1, 2]}).a.sum())`, stdout: "3\n"}
}

// describeProgram ends in df.describe(), as agents end their code: its value comes back
// with its HTML table.
func describeProgram() program {
	return program{code: "import pandas as pd\ndf = pd.DataFrame({\"a\": range(100), \"b\": [x * 0.5 for x in range(100)]})\ndf.describe()",
		html: "<th>mean</th>"}
}

// analysisProgram is what an agent analysing data runs: a pandas groupby, a pyplot chart saved
// as a PNG file in the working directory, a scipy.stats test, a bs4 parse and a PIL resize of
// the chart, in one run. It closes its figure, so chart capture adds no file of its own.
func analysisProgram() program {
	return program{code: `import pandas as pd
import matplotlib.pyplot as plt
from scipy import stats
from bs4 import BeautifulSoup
from PIL import Image

df = pd.DataFrame({"group": ["a", "b", "c", "d"] * 50, "value": range(200)})
means = df.groupby("group")["value"].mean()
fig, ax = plt.subplots(figsize=(4, 3))
ax.bar(means.index, means.values)
ax.set_title("mean value by group")
fig.savefig("chart.png", dpi=72)
plt.close(fig)
test = stats.ttest_ind(df.value[df.group == "a"], df.value[df.group == "d"])
soup = BeautifulSoup("<ul><li>1</li><li>2</li><li>3</li></ul>", "html.parser")
items = sum(int(li.text) for li in soup.find_all("li"))
thumb = Image.open("chart.png").resize((96, 72))
print(len(means), items, thumb.size[0], thumb.size[1], test.pvalue > 0.05)
`, stdout: "4 6 96 72 True\n"}
}

// check returns an error unless res is an ok run of p.
func (p program) check(res apitype.Result) error {
	if res.Outcome != apitype.OutcomeOK {
		reason := res.Reason
		if reason == "" {
			reason = strings.TrimSpace(res.Stderr)
		}
		return fmt.Errorf("%s ended with outcome %q: %s", p.code, res.Outcome, reason)
	}
	if res.Stdout != p.stdout {
		return fmt.Errorf("%s printed %q, want %q", p.code, res.Stdout, p.stdout)
	}
	if p.html != "" {
		var html string
		if n := len(res.Results); n > 0 && res.Results[n-1].IsMainResult {
			_ = json.Unmarshal(res.Results[n-1].Data["text/html"], &html)
		}
		if !strings.Contains(html, p.html) {
			return fmt.Errorf("%s returned no value with %q in its text/html (results %d): is the notebook layer on, and IPython in the image?", p.code, p.html, len(res.Results))
		}
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
			starts[string(res.Start)]++
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
