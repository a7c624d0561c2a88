package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/jobs"
	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/mcpserver"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/secrets"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// pyRuntime "runs" code: "fail" fails with a traceback; otherwise OUTPUT is INPUT.
type pyRuntime struct{}

func (pyRuntime) Ready(context.Context) error { return nil }
func (pyRuntime) Run(_ context.Context, _ int, spec sandbox.Spec, _ func(sandbox.Event)) (sandbox.Result, error) {
	if spec.Code == "fail" {
		return sandbox.Result{Outcome: sandbox.OutcomeError, ExitCode: 1, Stderr: "Traceback: NameError: name 'x' is not defined\n",
			StartedAt: time.Now().UTC()}, nil
	}
	return sandbox.Result{Outcome: sandbox.OutcomeOK, Stdout: "hi\n", Output: spec.Input, StartedAt: time.Now().UTC()}, nil
}

// newAPI serves the REST API over rt with cfg on a loopback port, with a ledger, and returns its
// URL and ledger.
func newAPI(t testing.TB, rt sandbox.Runtime, cfg engine.Config) (string, *store.Store) {
	t.Helper()
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	files, err := st.OpenFiles(t.Context(), filepath.Join(t.TempDir(), store.FilesDir), store.DefaultFilesMaxBytes)
	if err != nil {
		t.Fatal(err)
	}
	svc := engine.NewService(rt, engine.Hooks{Recorder: st, Files: files}, cfg, nil)
	lib := library.New(st, svc, 0)
	api := httptest.NewServer(httpapi.NewHandler(httpapi.Backend{Executor: svc, Library: lib,
		Jobs: jobs.New(st, lib, svc, jobs.Config{}, nil), Ledger: st, Files: files, Secrets: secrets.NewKeeper(st, testCipher(t))}, nil))
	t.Cleanup(api.Close)
	return api.URL, st
}

// connectAs connects an MCP client, over in-memory transports, to a server for agent.
func connectAs(t testing.TB, agent string) *mcp.ClientSession {
	t.Helper()
	url, _ := newAPI(t, pyRuntime{}, engine.DefaultConfig())
	return connect(t, newServer(t, url, agent))
}

// connect connects an MCP client to server over in-memory transports.
func connect(t testing.TB, server *mcp.Server) *mcp.ClientSession {
	t.Helper()
	st1, st2 := mcp.NewInMemoryTransports()
	ss, err := server.Connect(t.Context(), st1, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(), st2, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// newServer returns an MCP server for agent of the daemon at url, with its limits.
func newServer(t testing.TB, url, agent string) *mcp.Server {
	t.Helper()
	c := client.New(url, nil)
	limits, err := c.Limits(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return mcpserver.New(c, agent, "test", limits)
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, string) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	return res, text.String()
}

func TestTools(t *testing.T) {
	cs := connectAs(t, "alice")
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if len(tool.Description) < 40 {
			t.Errorf("tool %s has no real description: %q", tool.Name, tool.Description)
		}
	}
	want := strings.Fields("run_code save_code update_code get_code list_code delete_code run_saved_code create_code_job list_code_jobs " +
		"update_code_job delete_code_job get_code_job_history list_executions get_execution create_session run_in_session list_sessions list_templates close_session run_command read_file write_file list_files list_commands list_secrets pause_session resume_session fork_session " +
		"list_ports list_port_requests share_port list_shares revoke_share")
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("tools: %v", names)
	}

	res, text := callTool(t, cs, "run_code", map[string]any{"code": "print('hi')", "input": map[string]any{"n": 1}})
	if res.IsError || !strings.Contains(text, "outcome: ok") || !strings.Contains(text, `OUTPUT: {"n":1}`) {
		t.Fatalf("run_code: %v %q", res.IsError, text)
	}
	res, text = callTool(t, cs, "run_code", map[string]any{"code": "fail"})
	if !res.IsError || !strings.Contains(text, "NameError") || !strings.Contains(text, "outcome: error") {
		t.Fatalf("a failing program is a tool error with its stderr: %v %q", res.IsError, text)
	}
	res, text = callTool(t, cs, "run_code", map[string]any{"code": "x", "timeout_ms": 0})
	if res.IsError {
		t.Fatalf("timeout_ms 0 means the default: %q", text)
	}
	res, text = callTool(t, cs, "run_code", map[string]any{"code": "x", "timeout_ms": 99999999})
	if !res.IsError || !strings.Contains(text, "timeout_ms") {
		t.Fatalf("a bad argument names its field: %q", text)
	}
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"input": 1}}); err == nil {
		if res, text := callTool(t, cs, "run_code", map[string]any{"input": 1}); !res.IsError || !strings.Contains(text, "code") {
			t.Fatalf("a missing code: %q", text)
		}
	}

	res, text = callTool(t, cs, "save_code", map[string]any{"name": "echo", "code": "pass",
		"input_schema": map[string]any{"type": "object", "required": []string{"n"}}})
	if res.IsError {
		t.Fatalf("save_code: %q", text)
	}
	res, text = callTool(t, cs, "run_saved_code", map[string]any{"name": "echo", "input": map[string]any{}})
	if !res.IsError || !strings.Contains(text, "missing property 'n'") {
		t.Fatalf("invalid input names the failing field: %q", text)
	}
	res, text = callTool(t, cs, "update_code", map[string]any{"name": "echo", "description": "echoes"})
	if res.IsError || !strings.Contains(text, `"version":2`) || !strings.Contains(text, `"code":"pass"`) {
		t.Fatalf("update_code changes only what it names: %q", text)
	}
	res, text = callTool(t, cs, "create_code_job", map[string]any{"code_name": "echo", "schedule": "@daily", "input": map[string]any{"n": 1}})
	var job apitype.ScheduledJob
	if res.IsError || json.Unmarshal([]byte(text), &job) != nil || len(job.NextFires) != 5 {
		t.Fatalf("create_code_job: %q", text)
	}
	res, text = callTool(t, cs, "update_code_job", map[string]any{"id": job.ID, "enabled": false})
	if res.IsError || !strings.Contains(text, `"enabled":false`) {
		t.Fatalf("pause through update_code_job: %q", text)
	}
	res, text = callTool(t, cs, "list_executions", map[string]any{"source": "mcp"})
	if res.IsError || strings.Count(text, `"source":"mcp"`) != 3 {
		t.Fatalf("list_executions: %q", text)
	}
	var list struct {
		Executions []apitype.ExecutionSummary
	}
	json.Unmarshal([]byte(text), &list)
	res, text = callTool(t, cs, "get_execution", map[string]any{"id": list.Executions[0].ID})
	if res.IsError || !strings.Contains(text, `"agent":"alice"`) {
		t.Fatalf("get_execution: %q", text)
	}
	if res, text = callTool(t, cs, "delete_code", map[string]any{"name": "echo"}); !res.IsError || !strings.Contains(text, job.ID) {
		t.Fatalf("delete_code while a job uses it: %q", text)
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

// As `sandpit mcp` serves it (stdio, the daemon reached over HTTP): notifications/cancelled for
// a running run_code stops the run (outcome killed in the ledger), and the answer says the call
// was cancelled in sandpit's words, without the daemon's URL or a Go context error.
func TestCancelOverStdio(t *testing.T) {
	rt := blockingRuntime{started: make(chan string, 1)}
	url, st := newAPI(t, rt, engine.DefaultConfig())
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- newServer(t, url, "alice").Run(t.Context(), &mcp.IOTransport{Reader: inR, Writer: outW})
	}()
	defer func() { inW.Close(); <-served }()
	lines := bufio.NewScanner(outR)
	exchange := func(msg string, answer bool) map[string]any {
		t.Helper()
		if _, err := io.WriteString(inW, msg+"\n"); err != nil {
			t.Fatal(err)
		}
		if !answer {
			return nil
		}
		if !lines.Scan() {
			t.Fatalf("no answer to %s: %v", msg, lines.Err())
		}
		var m map[string]any
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	exchange(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}`, true)
	exchange(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, false)
	answered := make(chan map[string]any, 1)
	go func() {
		answered <- exchange(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_code","arguments":{"code":"import time; time.sleep(60)"}}}`, true)
	}()
	id := <-rt.started
	exchange(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"enough"}}`, false)
	answer, _ := json.Marshal(<-answered)
	var res struct {
		Result struct {
			IsError bool `json:"isError"`
			Content []struct{ Text string }
		}
	}
	json.Unmarshal(answer, &res)
	if !res.Result.IsError || len(res.Result.Content) != 1 || !strings.HasPrefix(res.Result.Content[0].Text, "cancelled: the client cancelled this call") {
		t.Fatalf("the cancelled call's answer: %s", answer)
	}
	for _, internal := range []string{"http", "context canceled", "/v1/"} {
		if strings.Contains(string(answer), internal) {
			t.Errorf("the cancelled call's answer speaks of %q: %s", internal, answer)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		rec, err := st.GetExecution(t.Context(), id)
		if err == nil && rec.Status == "finished" {
			if rec.Outcome != sandbox.OutcomeKilled {
				t.Fatalf("the cancelled run's outcome: %s (%s)", rec.Outcome, rec.Reason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled run is not finished in the ledger: %v %s", err, rec.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The run tools' descriptions state the daemon's own limits (GET /v1/limits), whatever its
// configuration, and the instructions and run_code name every package of the default image.
func TestDescriptionsStateTheLimits(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.DefaultTimeout, cfg.MaxTimeout, cfg.Network = 12345*time.Millisecond, 99*time.Second, "none"
	cfg.Limits.MemoryBytes, cfg.Limits.StdoutBytes, cfg.Limits.StderrBytes = 300<<20, 64<<10, 100000
	cfg.Limits.OutputBytes, cfg.Limits.FileSizeBytes = 2<<20, 1<<30
	url, _ := newAPI(t, pyRuntime{}, cfg)
	cs := connect(t, newServer(t, url, "alice"))
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	for _, tool := range tools.Tools {
		docs[tool.Name] = tool.Description
	}
	for _, name := range []string{"run_code", "run_saved_code"} {
		for _, want := range []string{"timeout_ms: default 12345, at most 99000", "memory: 300 MiB", "stdout 64 KiB and stderr 100000 bytes",
			"OUTPUT 2 MiB", "any file 1 GiB", "there is no network"} {
			if !strings.Contains(docs[name], want) {
				t.Errorf("%s's description lacks %q: %s", name, want, docs[name])
			}
		}
		for _, stale := range []string{"30000", "512 MiB", "1 MiB"} {
			if strings.Contains(docs[name], stale) {
				t.Errorf("%s's description says %q, not the daemon's limit: %s", name, stale, docs[name])
			}
		}
	}
	for _, pkg := range config.DefaultPackages() {
		if !strings.Contains(docs["run_code"], pkg) || !strings.Contains(cs.InitializeResult().Instructions, pkg) {
			t.Errorf("the default image's package %s is not named in run_code's description and the instructions", pkg)
		}
	}
}

// get_code_job_history pages through a job's fires, newest first, with a cursor, and since and
// until bound when they were handled, as GET .../jobs/{id}/history does.
func TestJobHistory(t *testing.T) {
	url, _ := newAPI(t, pyRuntime{}, engine.DefaultConfig())
	cs := connect(t, newServer(t, url, "alice"))
	if res, text := callTool(t, cs, "save_code", map[string]any{"name": "echo", "code": "pass"}); res.IsError {
		t.Fatalf("save_code: %q", text)
	}
	_, text := callTool(t, cs, "create_code_job", map[string]any{"code_name": "echo", "schedule": "@daily"})
	var job apitype.ScheduledJob
	if err := json.Unmarshal([]byte(text), &job); err != nil {
		t.Fatalf("create_code_job: %q", text)
	}
	api := client.New(url, nil)
	for range 3 {
		if _, err := api.RunJob(t.Context(), "alice", job.ID); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // distinct fired_at times
	}
	history := func(args map[string]any) (fires []apitype.Fire, next string) {
		t.Helper()
		args["id"] = job.ID
		res, text := callTool(t, cs, "get_code_job_history", args)
		var page struct {
			Fires      []apitype.Fire `json:"fires"`
			NextCursor string         `json:"next_cursor"`
		}
		if res.IsError || json.Unmarshal([]byte(text), &page) != nil {
			t.Fatalf("get_code_job_history %v: %q", args, text)
		}
		return page.Fires, page.NextCursor
	}
	all, next := history(map[string]any{})
	if len(all) != 3 || next != "" || !all[0].FiredAt.After(all[2].FiredAt) {
		t.Fatalf("the whole history, newest first: %+v %q", all, next)
	}
	first, cursor := history(map[string]any{"limit": 2})
	rest, end := history(map[string]any{"limit": 2, "cursor": cursor})
	if len(first) != 2 || cursor == "" || len(rest) != 1 || end != "" || rest[0].ID != all[2].ID {
		t.Fatalf("two pages: %+v %q, %+v %q", first, cursor, rest, end)
	}
	middle := all[1].FiredAt.Format(time.RFC3339Nano)
	if since, _ := history(map[string]any{"since": middle}); len(since) != 2 || since[1].ID != all[1].ID {
		t.Fatalf("since the middle fire: %+v", since)
	}
	if until, _ := history(map[string]any{"until": middle}); len(until) != 1 || until[0].ID != all[2].ID {
		t.Fatalf("until the middle fire: %+v", until)
	}
	if res, text := callTool(t, cs, "get_code_job_history", map[string]any{"id": job.ID, "since": "yesterday"}); !res.IsError || !strings.HasPrefix(text, `since "yesterday" is not an RFC 3339 time`) {
		t.Fatalf("a bad since: %q", text)
	}
	if res, text := callTool(t, cs, "get_code_job_history", map[string]any{"id": "job_nope"}); !res.IsError || !strings.Contains(text, "job_nope") {
		t.Fatalf("an unknown job: %q", text)
	}
}

// Issue 33, item 18: an argument's name a model guesses is accepted where it is unambiguous.
func TestAliasesAreAccepted(t *testing.T) {
	cs := connectAs(t, "alice")
	if res, text := callTool(t, cs, "save_code", map[string]any{"name": "s1", "code": "x"}); res.IsError {
		t.Fatalf("save_code: %s", text)
	}
	if res, text := callTool(t, cs, "get_code", map[string]any{"code_name": "s1"}); res.IsError || !strings.Contains(text, "s1") {
		t.Fatalf("get_code with code_name: %v %s", res.IsError, text)
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "get_code", Arguments: map[string]any{"name": "s1", "code_name": "s2"}})
	if err == nil && !res.IsError {
		t.Fatalf("get_code with both name and code_name was accepted")
	}
}
