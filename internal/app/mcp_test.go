package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/jobs"
	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/mcpserver"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

func mcpRun(t *testing.T, cs *mcp.ClientSession, code string) (bool, string) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": code}})
	if err != nil {
		t.Fatal(err)
	}
	text := ""
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	return res.IsError, text
}

// MCP against the real engine: streamable HTTP at the daemon's /mcp, and a `sandpit mcp`
// subprocess over stdio, each acting for its agent; the runs are in the ledger as source mcp.
func TestMCP(t *testing.T) {
	url, _ := startDaemon(t, testConfig(t))

	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: url + "/mcp?agent=dave"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	// Issue 33, item 5: /mcp said "daemon"; it is the build's version, as over stdio.
	if v := cs.InitializeResult().ServerInfo.Version; v != testVersion {
		t.Errorf("serverInfo.version over /mcp: %q, want the build's %q", v, testVersion)
	}
	if isErr, text := mcpRun(t, cs, "print(6 * 7)"); isErr || !strings.Contains(text, "stdout:\n42") {
		t.Fatalf("over HTTP: %v %q", isErr, text)
	}
	if isErr, text := mcpRun(t, cs, "1/0"); !isErr || !strings.Contains(text, "ZeroDivisionError") {
		t.Fatalf("a failing program over HTTP: %v %q", isErr, text)
	}

	cmd := exec.Command(buildSandpit(t), "mcp", "--agent", "erin")
	cmd.Env = append(os.Environ(), "SANDPIT_URL="+url)
	cmd.Stderr = os.Stderr
	cs2, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := cs2.ListTools(t.Context(), nil)
	if err != nil || len(tools.Tools) != 33 {
		t.Fatalf("tools over stdio: %v %v", tools, err)
	}
	if isErr, text := mcpRun(t, cs2, "import pandas as pd; print(pd.DataFrame({'a': [1, 2]}).a.sum())"); isErr || !strings.Contains(text, "stdout:\n3") {
		t.Fatalf("over stdio: %v %q", isErr, text)
	}
	tool := func(name string, args map[string]any) (bool, string) {
		res, err := cs2.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		text := ""
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		return res.IsError, text
	}
	if isErr, text := tool("run_code", map[string]any{"code": "OUTPUT = {'total': sum(INPUT)}", "input": []int{1, 2, 3}}); isErr || !strings.Contains(text, `OUTPUT: {"total":6}`) {
		t.Fatalf("INPUT and OUTPUT over stdio: %v %q", isErr, text)
	}
	if isErr, text := tool("run_code", map[string]any{"code": "def f():\n    raise ValueError('bad row')\nf()"}); !isErr || !strings.Contains(text, "Traceback") || !strings.Contains(text, "ValueError: bad row") {
		t.Fatalf("a traceback over stdio: %v %q", isErr, text)
	}
	if isErr, text := tool("save_code", map[string]any{"name": "total", "code": "OUTPUT = sum(INPUT)",
		"input_schema": map[string]any{"type": "array", "items": map[string]any{"type": "number"}}}); isErr {
		t.Fatalf("save_code: %q", text)
	}
	if isErr, text := tool("create_code_job", map[string]any{"code_name": "total", "schedule": "@daily", "input": []int{4, 5}}); isErr || !strings.Contains(text, "next_fires") {
		t.Fatalf("create_code_job: %q", text)
	}
	cs2.Close()

	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// Counted so far: over HTTP 1 ok and 1 error; over stdio 2 ok and 1 error.
	for _, want := range []string{`sandpit_executions_total{outcome="ok",source="mcp"} 3`, `sandpit_executions_total{outcome="error",source="mcp"} 2`,
		"sandpit_slots 4", "sandpit_queue_depth 0", "sandpit_sandbox_resets_total 0", `sandpit_execution_duration_seconds_count{source="mcp"} 5`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	for _, agent := range []string{"dave", "erin"} {
		var list struct{ Executions []apitype.ExecutionSummary }
		if st := call(t, "GET", url+"/v1/executions?source=mcp&agent="+agent, "", &list); st != 200 || len(list.Executions) == 0 {
			t.Fatalf("%s's MCP runs in the ledger: %d %+v", agent, st, list)
		}
	}
}

// A daemon listening beyond loopback refuses to start without a token; with one, every
// request but /healthz needs it, MCP included.
func TestBearerToken(t *testing.T) {
	cfg := testConfig(t)
	cfg.Listen = "0.0.0.0:0"
	err := app.Serve(t.Context(), cfg, testVersion, testenv.Logger(), io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "bearer token is required") {
		t.Fatalf("listening on every interface without a token: %v", err)
	}
	cfg.Listen, cfg.Token = "0.0.0.0:0", "a-long-random-token" // every address, with a token
	url, _ := startDaemon(t, cfg)
	for _, c := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer nope", 401}, {"Bearer a-long-random-token", 200}} {
		req, _ := http.NewRequest("GET", url+"/v1/limits", nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%q: %d, want %d", c.auth, resp.StatusCode, c.want)
		}
	}
	withToken := &http.Client{Transport: bearer{"a-long-random-token"}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: withToken}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if isErr, text := mcpRun(t, cs, "print('ok')"); isErr || !strings.Contains(text, "stdout:\nok") {
		t.Fatalf("MCP with the token (its tools call the API with it too): %v %q", isErr, text)
	}
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpPost sends one JSON-RPC message to url (a daemon's /mcp) in cs's session, as an MCP
// client over streamable HTTP does, and returns the answer unread.
func mcpPost(ctx context.Context, url string, cs *mcp.ClientSession, msg string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(msg))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", cs.ID())
	req.Header.Set("Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion)
	return http.DefaultClient.Do(req)
}

// ledgerRecord returns the newest ledger record of agent (nil when it has none).
func ledgerRecord(t *testing.T, url, agent string) *apitype.ExecutionSummary {
	t.Helper()
	var list struct{ Executions []apitype.ExecutionSummary }
	if st := call(t, "GET", url+"/v1/executions?limit=1&agent="+agent, "", &list); st != 200 {
		t.Fatalf("listing %s's executions: %d", agent, st)
	}
	if len(list.Executions) == 0 {
		return nil
	}
	return &list.Executions[0]
}

// An MCP client over HTTP whose connection closes while its run_code runs stops that run, as
// a REST client that goes away does: /mcp keeps no stream to resume, so nobody could ever
// receive the answer, and the run must not hold its slot until its timeout. Against the real
// engine: the ledger records the run killed and finished within two seconds of the
// disconnect.
func TestMCPDisconnectStopsRun(t *testing.T) {
	url, _ := startDaemon(t, testConfig(t))
	endpoint := url + "/mcp?agent=gone"
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: endpoint}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	ctx, disconnect := context.WithCancel(t.Context())
	defer disconnect()
	posted := make(chan error, 1)
	go func() {
		resp, err := mcpPost(ctx, endpoint, cs, `{"jsonrpc":"2.0","id":"sleeper","method":"tools/call","params":{"name":"run_code",`+
			`"arguments":{"code":"import time; time.sleep(20)","timeout_ms":60000}}}`)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		posted <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for rec := ledgerRecord(t, url, "gone"); rec == nil || rec.Status != "running"; rec = ledgerRecord(t, url, "gone") {
		if time.Now().After(deadline) {
			t.Fatalf("the run did not start within 30 s: %+v", rec)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // the program is in its sleep
	disconnect()
	gone := time.Now()
	<-posted

	// The run sleeps 60 s: a record that ends before then, killed and saying cancelled, was
	// ended by the client's going away (not by its timeout), however long the machine took.
	var rec *apitype.ExecutionSummary
	for rec = ledgerRecord(t, url, "gone"); rec.Status == "running" && time.Since(gone) < 30*time.Second; rec = ledgerRecord(t, url, "gone") {
		time.Sleep(50 * time.Millisecond)
	}
	if rec.Status != "finished" || rec.Outcome != apitype.OutcomeKilled || !strings.Contains(rec.Reason, "cancelled") {
		t.Fatalf("%s after the client went away, the run's record is %s, outcome %q (%q); want finished, killed, cancelled",
			time.Since(gone).Round(time.Millisecond), rec.Status, rec.Outcome, rec.Reason)
	}
	if isErr, text := mcpRun(t, cs, "print(1)"); isErr || !strings.Contains(text, "stdout:\n1") {
		t.Fatalf("the session's next run: %v %q", isErr, text)
	}
}

// blockingRuntime runs every program until its context ends, sending each run's ID to started.
type blockingRuntime struct{ started chan string }

func (blockingRuntime) Ready(context.Context) error { return nil }
func (b blockingRuntime) Run(ctx context.Context, _ int, spec sandbox.Spec, _ func(sandbox.Event)) (sandbox.Result, error) {
	b.started <- spec.ID
	<-ctx.Done()
	return sandbox.Result{}, ctx.Err()
}

// mcpAnswer reads the first JSON-RPC message of an MCP answer (an SSE stream) into v.
func mcpAnswer(r io.Reader, v any) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			return json.Unmarshal([]byte(data), v)
		}
	}
	return fmt.Errorf("the answer ended without a message: %v", sc.Err())
}

// fakeMCP serves /mcp (mcpserver.Endpoint) over the REST API of rt, with a ledger, the library and
// jobs, and returns its endpoint for agent carol, a session of it and the ledger.
func fakeMCP(t *testing.T, rt sandbox.Runtime) (string, *mcp.ClientSession, *store.Store) {
	t.Helper()
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc := engine.NewService(rt, engine.Hooks{Recorder: st}, engine.DefaultConfig(), nil)
	lib := library.New(st, svc, 0)
	h, err := mcpserver.Endpoint(t.Context(), client.InProcess(httpapi.NewHandler(httpapi.Backend{Executor: svc, Library: lib,
		Jobs: jobs.New(st, lib, svc, jobs.Config{}, nil), Ledger: st}, nil)), "test")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	endpoint := srv.URL + "?agent=carol"
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: endpoint}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return endpoint, cs, st
}

// notifications/cancelled for a running run_code over /mcp stops the run, and the answer (the
// spec requires none; the SDK sends one) says the run was cancelled and gives its execution ID,
// in sandpit's words: no in-process URL, no Go context error.
func TestMCPCancelAnswers(t *testing.T) {
	rt := blockingRuntime{started: make(chan string, 1)}
	endpoint, cs, st := fakeMCP(t, rt)

	type answer struct {
		Result struct {
			IsError bool `json:"isError"`
			Content []struct{ Text string }
		}
		Error any
	}
	answered := make(chan answer, 1)
	go func() {
		var a answer
		resp, err := mcpPost(t.Context(), endpoint, cs, `{"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{"name":"run_code",`+
			`"arguments":{"code":"import time; time.sleep(60)","timeout_ms":60000}}}`)
		if err == nil {
			err = mcpAnswer(resp.Body, &a)
			resp.Body.Close()
		}
		if err != nil {
			a.Error = err.Error()
		}
		answered <- a
	}()
	id := <-rt.started
	resp, err := mcpPost(t.Context(), endpoint, cs, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c1","reason":"enough"}}`)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	a := <-answered
	if a.Error != nil || len(a.Result.Content) != 1 {
		t.Fatalf("the cancelled call's answer: %+v", a)
	}
	text := a.Result.Content[0].Text
	if !a.Result.IsError || !strings.Contains(text, "outcome: killed") || !strings.Contains(text, "cancelled") || !strings.Contains(text, "execution: "+id) {
		t.Errorf("the cancelled call's answer does not say the run %s was cancelled: %q", id, text)
	}
	for _, internal := range []string{"http", "context canceled", "/v1/"} {
		if strings.Contains(text, internal) {
			t.Errorf("the cancelled call's answer speaks of %q: %q", internal, text)
		}
	}
	rec, err := st.GetExecution(t.Context(), id)
	if err != nil || rec.Outcome != sandbox.OutcomeKilled || rec.Status != "finished" {
		t.Fatalf("the cancelled run's record: %v %s %+v", err, rec.Status, rec.Result)
	}
}

// Every tool's error over /mcp is in the words of the REST API and names what was wrong: never
// the in-process transport (a URL, a request line) or a Go error of the client. (list_code and
// list_code_jobs take nothing that can be wrong; cancellation: TestMCPCancelAnswers.)
func TestMCPToolErrors(t *testing.T) {
	_, cs, _ := fakeMCP(t, blockingRuntime{started: make(chan string, 1)})
	cases := []struct {
		tool string
		args map[string]any
		says string
	}{
		{"run_code", map[string]any{"code": "print(1)", "timeout_ms": 99999999}, "timeout_ms"},
		{"save_code", map[string]any{"name": "Bad Name", "code": "pass"}, "name"},
		{"update_code", map[string]any{"name": "nope", "code": "pass"}, "nope"},
		{"get_code", map[string]any{"name": "nope"}, "nope"},
		{"delete_code", map[string]any{"name": "nope"}, "nope"},
		{"run_saved_code", map[string]any{"name": "nope"}, "nope"},
		{"create_code_job", map[string]any{"code_name": "nope", "schedule": "@daily"}, "nope"},
		{"update_code_job", map[string]any{"id": "job_nope", "enabled": false}, "job_nope"},
		{"delete_code_job", map[string]any{"id": "job_nope"}, "job_nope"},
		{"get_code_job_history", map[string]any{"id": "job_nope"}, "job_nope"},
		{"list_executions", map[string]any{"source": "bogus"}, "bogus"},
		{"get_execution", map[string]any{"id": "ex_nope"}, "ex_nope"},
	}
	for _, c := range cases {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
		if err != nil {
			t.Fatalf("%s: %v", c.tool, err)
		}
		text := ""
		for _, content := range res.Content {
			if tc, ok := content.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		if !res.IsError || !strings.Contains(text, c.says) {
			t.Errorf("%s %v: %v %q, want an error naming %q", c.tool, c.args, res.IsError, text, c.says)
		}
		for _, internal := range []string{"http", "/v1/", "sandpit.internal", "context canceled", "Get ", "Post "} {
			if strings.Contains(text, internal) {
				t.Errorf("%s's error speaks of %q: %q", c.tool, internal, text)
			}
		}
	}
}
