package httpapi_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/httpapi/httpapitest"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// maximalRunBody is a POST /v1/executions body as large as the default caps let it be: two
// input files of 8 MiB in base64 (21.3 MiB), and code.
func maximalRunBody(t *testing.T) []byte {
	t.Helper()
	content := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xa5}, 8<<20))
	body, err := json.Marshal(map[string]any{"code": strings.Repeat("#", 1<<20-16) + "\nprint(1)", "files": []map[string]string{
		{"name": "a.bin", "content": content, "encoding": "base64"},
		{"name": "b.bin", "content": content, "encoding": "base64"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// H50: 30 clients at once POST /v1/executions with a body of 23 MiB each, at a daemon of 4
// slots and a queue of 16 whose runs last until the attack is over. Before, every body was
// read and decoded (several copies each) before the run was admitted: the daemon's heap rose
// by gigabytes, and the refused requests got their 429 only after being read. Now requests are
// admitted before reading, by the places of slots and queue and by the bytes of bodies in
// flight (bodies_max_bytes): the heap's peak stays within a few times that budget, every
// answer is a 200 or a 429, and the admitted runs do run. Measured: the Go heap's peak, sampled
// (see heapGrowth), never a time.
func TestConcurrentBodiesAreBoundedByTheBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 700 MiB of bodies")
	}
	const clients = 30
	release := make(chan struct{})
	var (
		started, answered atomic.Int64
		once              sync.Once
	)
	settled := make(chan struct{}) // every client is answered or running
	check := func() {
		if answered.Load()+started.Load() == clients {
			once.Do(func() { close(settled) })
		}
	}
	fake := &httpapitest.Executor{Cfg: engine.DefaultConfig(), Fn: func(ctx context.Context, req sandbox.Request, _ func(sandbox.Event)) (sandbox.Result, error) {
		started.Add(1)
		check()
		select {
		case <-release:
		case <-ctx.Done():
		}
		return sandbox.Result{ID: sandbox.NewID(), Outcome: sandbox.OutcomeOK, Success: true}, nil
	}}
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Backend{Executor: fake}, nil))
	defer srv.Close()
	body := maximalRunBody(t)
	if limit := fake.Cfg.MaxCodeBytes + fake.Cfg.MaxInputBytes; int64(len(body)) < 20<<20 || limit <= 0 {
		t.Fatalf("the body is %d bytes; the attack needs a body near the cap", len(body))
	}

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		statuses = map[string]int{}
	)
	tr := &http.Transport{MaxConnsPerHost: clients, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	growth := func() int64 {
		_, g := heapGrowth(t, func() {
			for range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					status := "transport error"
					resp, err := client.Post(srv.URL+"/v1/executions", "application/json", bytes.NewReader(body))
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						status = fmt.Sprint(resp.StatusCode)
						if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
							status = "429 without Retry-After"
						}
					}
					mu.Lock()
					statuses[status]++
					mu.Unlock()
					if status != "200" {
						answered.Add(1)
					}
					check()
				}()
			}
			<-settled
		})
		return g
	}()
	close(release)
	wg.Wait()

	t.Logf("heap peak %.0f MiB above idle for %d bodies of %.1f MiB; answers %v; runs %d",
		float64(growth)/(1<<20), clients, float64(len(body))/(1<<20), statuses, started.Load())
	if statuses["200"] == 0 || statuses["200"] != int(started.Load()) || statuses["200"]+statuses["429"] != clients {
		t.Errorf("answers %v with %d runs; want only 200s (one per run, at least one) and 429s with Retry-After", statuses, started.Load())
	}
	if most := int64(3 * httpapi.DefaultBodiesMaxBytes); growth > most {
		t.Errorf("the heap rose %d MiB under the attack; want at most %d MiB (3 × bodies_max_bytes)", growth>>20, most>>20)
	}
}
