package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// blockingRuntime holds every run until release is closed.
type blockingRuntime struct {
	started chan struct{}
	release chan struct{}
}

func (r *blockingRuntime) Ready(context.Context) error { return nil }
func (r *blockingRuntime) Run(ctx context.Context, _ int, _ sandbox.Spec, _ func(sandbox.Event)) (sandbox.Result, error) {
	r.started <- struct{}{}
	select {
	case <-r.release:
	case <-ctx.Done():
	}
	return sandbox.Result{Outcome: sandbox.OutcomeOK}, nil
}

// Past executions_per_agent an agent's request is answered 429 busy with Retry-After and a
// message naming the agent, the limit and the key, while another agent's request still
// queues.
func TestExecutionsPerAgentAnswers429(t *testing.T) {
	rt := &blockingRuntime{started: make(chan struct{}, 4), release: make(chan struct{})}
	cfg := engine.DefaultConfig()
	cfg.Slots, cfg.QueueLength, cfg.ExecutionsPerAgent = 1, 4, 1
	svc := engine.NewService(rt, engine.Hooks{}, cfg, nil)
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Backend{Executor: svc}, nil))
	defer srv.Close()
	post := func(agent string) *http.Response {
		resp, err := http.Post(srv.URL+"/v1/executions", "application/json", strings.NewReader(`{"code":"1","agent":"`+agent+`"}`))
		if err != nil {
			t.Error(err)
			return nil
		}
		return resp
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(rt.release)
	for _, agent := range []string{"alice", "bob"} {
		wg.Go(func() {
			if resp := post(agent); resp != nil {
				defer resp.Body.Close()
				if resp.StatusCode != 200 {
					b, _ := io.ReadAll(resp.Body)
					t.Errorf("%s's first run: status %d %s", agent, resp.StatusCode, b)
				}
			}
		})
		if agent == "alice" {
			<-rt.started
		}
	}
	for deadline := time.Now().Add(10 * time.Second); svc.Stats().Waiting != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("bob's run never queued: %+v", svc.Stats())
		}
	}
	resp := post("alice")
	if resp == nil {
		return
	}
	defer resp.Body.Close()
	var body struct{ Error apitype.ErrorDetail }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || body.Error.Code != apitype.CodeBusy {
		t.Fatalf("alice's second run: status %d, Retry-After %q, %+v; want 429 busy, Retry-After 1", resp.StatusCode, resp.Header.Get("Retry-After"), body.Error)
	}
	for _, want := range []string{`agent "alice"`, "1 executions", "executions_per_agent"} {
		if !strings.Contains(body.Error.Message, want) {
			t.Errorf("message %q does not say %q", body.Error.Message, want)
		}
	}
}
