package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/jobs"
	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// outputRuntime "runs" code by answering OUTPUT = INPUT["out"] and printing "测试 😀".
type outputRuntime struct{ runs atomic.Int32 }

var _ sandbox.Installer = (*outputRuntime)(nil)

func (r *outputRuntime) Ready(context.Context) error { return nil }

// Install finds every requirement present.
func (r *outputRuntime) Install(_ context.Context, _ int, req sandbox.InstallRequest, _ func(sandbox.DependencyStatus)) (sandbox.Installed, error) {
	var out sandbox.Installed
	for _, q := range req.Requirements {
		out.Dependencies = append(out.Dependencies, sandbox.DependencyStatus{Requirement: q, Status: sandbox.DependencyPresent})
	}
	return out, nil
}
func (r *outputRuntime) Run(_ context.Context, _ int, spec sandbox.Spec, emit func(sandbox.Event)) (sandbox.Result, error) {
	r.runs.Add(1)
	var in struct {
		Out json.RawMessage `json:"out"`
	}
	_ = json.Unmarshal(spec.Input, &in)
	if emit != nil {
		emit(sandbox.Event{Stream: "stdout", Data: "测试 😀\n"})
	}
	return sandbox.Result{Outcome: sandbox.OutcomeOK, Stdout: "测试 😀\n", Output: in.Out, StartedAt: time.Now().UTC()}, nil
}

type stack struct {
	url string
	rt  *outputRuntime
	st  *store.Store
}

func newStack(t *testing.T) *stack {
	t.Helper()
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rt := &outputRuntime{}
	svc := engine.NewService(rt, engine.Hooks{Recorder: st}, engine.DefaultConfig(), nil)
	lib := library.New(st, svc, 0)
	sch := jobs.New(st, lib, svc, jobs.Config{}, nil)
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Backend{Executor: svc, Library: lib, Jobs: sch, Ledger: st, Knowledge: st}, nil))
	t.Cleanup(srv.Close)
	return &stack{url: srv.URL, rt: rt, st: st}
}

// call sends body (JSON text, "" for none) and decodes the JSON answer.
func (s *stack) call(t *testing.T, method, path, body string, header ...string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	if err := json.Unmarshal(buf.Bytes(), &v); err != nil {
		t.Fatalf("%s %s: answer is not a JSON object: %q", method, path, buf.String())
	}
	return resp.StatusCode, v
}

func errCode(v map[string]any) string {
	e, _ := v["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

const sumCode = `{
	"name": "sum",
	"code": "OUTPUT = INPUT['out']",
	"dependencies": ["Tiny_Pkg==1.0"],
	"description": "adds",
	"input_schema": {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer", "minimum": 1}}},
	"output_schema": {"type": "object", "required": ["total"], "properties": {"total": {"type": "number"}}}
}`

func TestSavedCodeOverREST(t *testing.T) {
	s := newStack(t)
	st, v := s.call(t, "POST", "/v1/agents/a/code", sumCode)
	if st != 201 || v["version"] != 1.0 || v["dependencies"].([]any)[0] != "tiny-pkg==1.0" {
		t.Fatalf("create: %d %v", st, v)
	}
	if st, v := s.call(t, "POST", "/v1/agents/a/code", sumCode); st != 409 || errCode(v) != "conflict" {
		t.Fatalf("create again: %d %v", st, v)
	}
	// PATCH changes only what it names; expected_version guards against lost updates.
	st, v = s.call(t, "PATCH", "/v1/agents/a/code/sum", `{"description": "adds, v2", "expected_version": 1}`)
	if st != 200 || v["version"] != 2.0 || v["code"] != "OUTPUT = INPUT['out']" || v["input_schema"] == nil {
		t.Fatalf("patch: %d %v", st, v)
	}
	if st, v := s.call(t, "PATCH", "/v1/agents/a/code/sum", `{"description": "stale", "expected_version": 1}`); st != 409 || !strings.Contains(v["error"].(map[string]any)["message"].(string), "current version is 2") {
		t.Fatalf("stale patch: %d %v", st, v)
	}
	if st, v := s.call(t, "GET", "/v1/agents/a/code/sum/versions/1", ""); st != 200 || v["description"] != "adds" {
		t.Fatalf("version 1: %d %v", st, v)
	}
	if st, v := s.call(t, "GET", "/v1/agents/a/code/sum/versions", ""); st != 200 || len(v["versions"].([]any)) != 2 {
		t.Fatalf("versions: %d %v", st, v)
	}
	if st, _ := s.call(t, "GET", "/v1/agents/b/code/sum", ""); st != 404 {
		t.Fatalf("another agent's code: %d", st)
	}

	// Run with valid input: the validated output comes back and the ledger has it.
	st, v = s.call(t, "POST", "/v1/agents/a/code/sum/run", `{"input": {"n": 2, "out": {"total": 3}}}`, apitype.SourceHeader, "cli")
	if st != 200 || v["outcome"] != "ok" || v["code_name"] != "sum" || v["code_version"] != 2.0 || v["source"] != "cli" {
		t.Fatalf("run: %d %v", st, v)
	}
	id := v["id"].(string)
	st, rec := s.call(t, "GET", "/v1/executions/"+id, "")
	if st != 200 || rec["status"] != "finished" || rec["stdout"] != "测试 😀\n" || rec["code_name"] != "sum" || rec["source"] != "cli" {
		t.Fatalf("ledger record: %d %v", st, rec)
	}
	if st, _ := s.call(t, "GET", "/v1/executions/"+id+"?agent=a", ""); st != 200 {
		t.Fatalf("the record scoped to its agent: %d", st)
	}
	if st, _ := s.call(t, "GET", "/v1/executions/"+id+"?agent=b", ""); st != 404 {
		t.Fatalf("the record scoped to another agent: %d", st)
	}
	if st, v := s.call(t, "GET", "/v1/executions?since=2026-02-01T00:00:00Z&until=2026-01-01T00:00:00Z", ""); st != 400 || v["error"].(map[string]any)["field"] != "since" {
		t.Fatalf("since after until: %d %v", st, v)
	}

	// Invalid input: 400 with the pointers, and nothing runs.
	runs := s.rt.runs.Load()
	st, v = s.call(t, "POST", "/v1/agents/a/code/sum/run", `{"input": {"n": 0, "extra": [1]}}`)
	viol, _ := v["error"].(map[string]any)["violations"].([]any)
	if st != 400 || errCode(v) != "invalid_input" || len(viol) != 1 || viol[0].(map[string]any)["pointer"] != "/n" {
		t.Fatalf("invalid input: %d %v", st, v)
	}
	if s.rt.runs.Load() != runs {
		t.Fatal("code ran with invalid input")
	}
	// OUTPUT breaking the schema: output_invalid with the pointer.
	st, v = s.call(t, "POST", "/v1/agents/a/code/sum/run", `{"input": {"n": 1, "out": {"total": "x"}}}`)
	if st != 200 || v["outcome"] != "output_invalid" || !strings.Contains(v["reason"].(string), "/total") {
		t.Fatalf("invalid output: %d %v", st, v)
	}

	// Bad saves say where.
	for _, c := range []struct{ body, field, want string }{
		{`{"name": "Bad!", "code": "x"}`, "name", "not a valid code name"},
		{`{"name": "x", "code": "x", "input_schema": {"type": "objekt"}}`, "input_schema", "/type"},
		{`{"name": "x", "code": "x", "dependencies": ["-r /etc/passwd"]}`, "dependencies", "dependencies[0]"},
		{`{"name": "x", "code": "x", "dependecies": []}`, "dependecies", `did you mean "dependencies"`},
		{`{"name": "x", "code": "x", "description": 5}`, "description", "description: must be a string, not number"},
	} {
		st, v := s.call(t, "POST", "/v1/agents/a/code", c.body)
		e := v["error"].(map[string]any)
		if st != 400 || e["field"] != c.field || !strings.Contains(e["message"].(string), c.want) {
			t.Errorf("%s: %d %v", c.body, st, v)
		}
	}

	// Listing pages and filters.
	for i := range 3 {
		s.call(t, "POST", "/v1/agents/a/code", fmt.Sprintf(`{"name": "tool-%d", "code": "pass", "description": "tool number %d"}`, i, i))
	}
	st, v = s.call(t, "GET", "/v1/agents/a/code?limit=2", "")
	if st != 200 || len(v["code"].([]any)) != 2 || v["next_cursor"] == "" {
		t.Fatalf("list page 1: %d %v", st, v)
	}
	st, v = s.call(t, "GET", "/v1/agents/a/code?limit=2&cursor="+v["next_cursor"].(string), "")
	if st != 200 || len(v["code"].([]any)) != 2 || v["next_cursor"] != "" {
		t.Fatalf("list page 2: %d %v", st, v)
	}
	if _, v := s.call(t, "GET", "/v1/agents/a/code?q=NUMBER%201", ""); len(v["code"].([]any)) != 1 {
		t.Fatalf("filter: %v", v)
	}
	if st, v := s.call(t, "GET", "/v1/agents/a/code?limit=0", ""); st != 400 || v["error"].(map[string]any)["field"] != "limit" {
		t.Fatalf("limit=0: %d %v", st, v)
	}
	if st, _ := s.call(t, "GET", "/v1/agents/a/code?page=2", ""); st != 400 {
		t.Fatalf("unknown query parameter: %d", st)
	}
}

func TestJobsOverREST(t *testing.T) {
	s := newStack(t)
	s.call(t, "POST", "/v1/agents/a/code", `{"name": "report", "code": "pass"}`)
	st, v := s.call(t, "POST", "/v1/agents/a/jobs", `{"code_name": "report", "schedule": "0 9 * * 1-5", "timezone": "Europe/Berlin"}`)
	if st != 201 || len(v["next_fires"].([]any)) != 5 || v["overlap"] != "skip" || v["catch_up"] != "skip" || v["enabled"] != true {
		t.Fatalf("create: %d %v", st, v)
	}
	// "The latest version" is null, not 0; a pinned version is its number.
	if cv, ok := v["code_version"]; !ok || cv != nil {
		t.Fatalf("code_version of a job of the latest version: %v (present %t), want null", cv, ok)
	}
	if _, list := s.call(t, "GET", "/v1/agents/a/jobs", ""); list["jobs"].([]any)[0].(map[string]any)["code_version"] != nil {
		t.Fatalf("listed code_version: %v", list)
	}
	if st, pinned := s.call(t, "POST", "/v1/agents/a/jobs", `{"code_name": "report", "code_version": 1, "schedule": "@daily"}`); st != 201 || pinned["code_version"] != 1.0 {
		t.Fatalf("pinned: %d %v", st, pinned)
	} else if st, _ := s.call(t, "DELETE", "/v1/agents/a/jobs/"+pinned["id"].(string), ""); st != 204 && st != 200 {
		t.Fatalf("delete the pinned job: %d", st)
	}
	id := v["id"].(string)
	for _, fire := range v["next_fires"].([]any) {
		at, _ := time.Parse(time.RFC3339, fire.(string))
		berlin, _ := time.LoadLocation("Europe/Berlin")
		if l := at.In(berlin); l.Hour() != 9 || l.Weekday() == time.Saturday || l.Weekday() == time.Sunday {
			t.Fatalf("next fire %v is not 09:00 on a weekday in Berlin", l)
		}
	}
	// A day-of-month starting with "*" is unrestricted (cronie): both day
	// fields must match, so only the 1st, 11th, 21st and 31st that are weekdays.
	st, v = s.call(t, "POST", "/v1/agents/a/jobs", `{"code_name": "report", "schedule": "0 9 */10 * 1-5"}`)
	if st != 201 || len(v["next_fires"].([]any)) != 5 {
		t.Fatalf("create */10: %d %v", st, v)
	}
	for _, fire := range v["next_fires"].([]any) {
		at, _ := time.Parse(time.RFC3339, fire.(string))
		if d := at.Day(); at.Hour() != 9 || d%10 != 1 || at.Weekday() == time.Saturday || at.Weekday() == time.Sunday {
			t.Fatalf("next fire %v of \"0 9 */10 * 1-5\" is not 09:00 UTC on a weekday that is the 1st, 11th, 21st or 31st", at)
		}
	}
	if st, _ := s.call(t, "DELETE", "/v1/agents/a/jobs/"+v["id"].(string), ""); st != 204 && st != 200 {
		t.Fatalf("delete the */10 job: %d", st)
	}
	if st, v := s.call(t, "POST", "/v1/agents/a/jobs", `{"code_name": "report", "schedule": "TZ=UTC 0 9 * * *"}`); st != 400 || v["error"].(map[string]any)["field"] != "schedule" {
		t.Fatalf("TZ= schedule: %d %v", st, v)
	}
	if st, v := s.call(t, "POST", "/v1/agents/a/jobs", `{"code_name": "nope", "schedule": "@daily"}`); st != 404 {
		t.Fatalf("job of missing code: %d %v", st, v)
	}
	st, v = s.call(t, "PATCH", "/v1/agents/a/jobs/"+id, `{"schedule": "@every 10m"}`)
	if st != 200 || v["schedule"] != "@every 10m" || v["timezone"] != "Europe/Berlin" {
		t.Fatalf("patch: %d %v", st, v)
	}
	if st, v := s.call(t, "POST", "/v1/agents/a/jobs/"+id+"/pause", ""); st != 200 || v["enabled"] != false || v["next_run_at"] != nil {
		t.Fatalf("pause: %d %v", st, v)
	}
	if st, v := s.call(t, "POST", "/v1/agents/a/jobs/"+id+"/resume", ""); st != 200 || v["enabled"] != true {
		t.Fatalf("resume: %d %v", st, v)
	}
	st, v = s.call(t, "POST", "/v1/agents/a/jobs/"+id+"/run", "")
	if st != 200 || v["status"] != "started" || v["kind"] != "manual" {
		t.Fatalf("run now: %d %v", st, v)
	}
	execID := v["execution_id"].(string)
	// The manual run is in the ledger with source job (poll: it runs in the background).
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, rec := s.call(t, "GET", "/v1/executions/"+execID, "")
		if st == 200 && rec["status"] == "finished" {
			if rec["source"] != "job" || rec["job_id"] != id {
				t.Fatalf("ledger record of the job run: %v", rec)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job's run never reached the ledger: %d %v", st, rec)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st, v := s.call(t, "GET", "/v1/agents/a/jobs/"+id+"/history", ""); st != 200 || len(v["fires"].([]any)) != 1 {
		t.Fatalf("history: %d %v", st, v)
	}
	// The history's time filters bound fired_at, as the ledger's bound started_at.
	hour := time.Now().UTC().Add(-time.Hour).Format(time.RFC3339)
	for query, want := range map[string]int{"since=" + hour: 1, "until=" + hour: 0} {
		if st, v := s.call(t, "GET", "/v1/agents/a/jobs/"+id+"/history?"+query, ""); st != 200 || len(v["fires"].([]any)) != want {
			t.Fatalf("history?%s: %d %v, want %d fires", query, st, v, want)
		}
	}
	if st, v := s.call(t, "GET", "/v1/agents/a/jobs/"+id+"/history?since=yesterday", ""); st != 400 || v["error"].(map[string]any)["field"] != "since" {
		t.Fatalf("history with a bad since: %d %v", st, v)
	}
	if st, v := s.call(t, "GET", "/v1/executions?source=job&agent=a", ""); st != 200 || len(v["executions"].([]any)) != 1 {
		t.Fatalf("ledger by source: %d %v", st, v)
	}
	if st, v := s.call(t, "GET", "/v1/executions?outcome=fine", ""); st != 400 || v["error"].(map[string]any)["field"] != "outcome" {
		t.Fatalf("bad outcome filter: %d %v", st, v)
	}
	if st, _ := s.call(t, "GET", "/v1/executions?since=yesterday", ""); st != 400 {
		t.Fatalf("bad since: %d", st)
	}

	// Deleting code a job uses: 409 unless forced, which disables the job.
	if st, v := s.call(t, "DELETE", "/v1/agents/a/code/report", ""); st != 409 || !strings.Contains(v["error"].(map[string]any)["message"].(string), id) {
		t.Fatalf("delete in use: %d %v", st, v)
	}
	if st, v := s.call(t, "DELETE", "/v1/agents/a/code/report?force=true", ""); st != 200 || v["disabled_jobs"].([]any)[0] != id {
		t.Fatalf("force delete: %d %v", st, v)
	}
	if _, v := s.call(t, "GET", "/v1/agents/a/jobs/"+id, ""); v["enabled"] != false {
		t.Fatalf("the job of deleted code is enabled: %v", v)
	}
	if st, _ := s.call(t, "DELETE", "/v1/agents/a/jobs/"+id, ""); st != 200 {
		t.Fatalf("delete job: %d", st)
	}
	if st, _ := s.call(t, "GET", "/v1/agents/a/jobs/"+id, ""); st != 404 {
		t.Fatalf("deleted job: %d", st)
	}
	if st, v := s.call(t, "GET", "/v1/agents/Bad!/jobs", ""); st != 400 || v["error"].(map[string]any)["field"] != "agent" {
		t.Fatalf("bad agent: %d %v", st, v)
	}
}

func (s *stack) ndjson(t *testing.T, path, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", s.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	json.NewDecoder(resp.Body).Decode(&v)
	return resp.StatusCode, v
}

func TestKnowledgeOverREST(t *testing.T) {
	s := newStack(t)
	// A bad line refuses the whole import, naming the line.
	if st, v := s.ndjson(t, "/v1/agents/a/memories", `{"text": "one"}`+"\n"+`{"txt": "two"}`); st != 400 || !strings.Contains(v["error"].(map[string]any)["message"].(string), "line 2") {
		t.Fatalf("bad line: %d %v", st, v)
	}
	// Errors speak JSON: the field and the kinds of value, not Go's struct fields and types.
	for body, want := range map[string]string{
		`{"text": 5}`:              `line 2: field "text" must be a string, not number`,
		`{"text": "x", "tags": 1}`: `line 2: unknown field "tags"`,
		`[1]`:                      `line 2: must be an object, not array`,
	} {
		st, v := s.ndjson(t, "/v1/agents/a/memories", `{"text": "one"}`+"\n"+body)
		if msg, _ := v["error"].(map[string]any)["message"].(string); st != 400 || msg != want {
			t.Errorf("%s: %d %q, want %q", body, st, msg, want)
		}
	}
	if _, v := s.call(t, "GET", "/v1/agents/a/memories", ""); len(v["items"].([]any)) != 0 {
		t.Fatalf("a refused import stored something: %v", v)
	}
	if st, v := s.ndjson(t, "/v1/agents/a/memories", `{"text": "one"}`+"\n\n"+`{"text": "two", "metadata": {"k": 1}}`+"\n"); st != 201 || v["created"] != 2.0 {
		t.Fatalf("import: %d %v", st, v)
	}
	st, v := s.call(t, "GET", "/v1/agents/a/memories?limit=1", "")
	items := v["items"].([]any)
	if st != 200 || len(items) != 1 || v["next_cursor"] == "" {
		t.Fatalf("list: %d %v", st, v)
	}
	id := fmt.Sprint(int(items[0].(map[string]any)["id"].(float64)))
	if st, v := s.call(t, "GET", "/v1/agents/a/memories/"+id, ""); st != 200 || v["text"] != "one" {
		t.Fatalf("get: %d %v", st, v)
	}
	if st, _ := s.call(t, "GET", "/v1/agents/b/memories/"+id, ""); st != 404 {
		t.Fatalf("another agent's memory: %d", st)
	}
	if st, _ := s.call(t, "DELETE", "/v1/agents/a/memories/"+id, ""); st != 200 {
		t.Fatalf("delete: %d", st)
	}
	if st, v := s.call(t, "POST", "/v1/agents/a/graph/edges", `{"source": "a", "target": "b"}`); st != 400 || !strings.Contains(v["error"].(map[string]any)["message"].(string), "relation is required") {
		t.Fatalf("edge without relation: %d %v", st, v)
	}
	if st, v := s.call(t, "POST", "/v1/agents/a/documents", `{"id": "d1", "title": "T", "content": "C"}`); st != 201 || v["id"] != "d1" {
		t.Fatalf("document: %d %v", st, v)
	}
	if st, v := s.call(t, "POST", "/v1/agents/a/results", `{"key": "k", "value": [1]}`); st != 201 || v["version"] != 1.0 {
		t.Fatalf("result: %d %v", st, v)
	}
	s.call(t, "POST", "/v1/agents/a/results", `{"key": "k", "value": [2]}`)
	// Every version of a key is a list under its plural, as code versions are.
	if st, v := s.call(t, "GET", "/v1/agents/a/results/k", ""); st != 200 || len(v["versions"].([]any)) != 2 ||
		v["versions"].([]any)[0].(map[string]any)["version"] != 2.0 {
		t.Fatalf("result versions: %d %v", st, v)
	}
	// The quotas are listed, and a store past one is a 413 naming it.
	s.st.SetQuotas(store.Quotas{ResultsMaxBytes: 1 << 20, ResultsMaxVersions: 2})
	if st, v := s.call(t, "GET", "/v1/limits", ""); st != 200 || v["quotas"].(map[string]any)["results_max_versions"] != 2.0 ||
		v["quotas"].(map[string]any)["results_max_bytes"] != float64(1<<20) || v["max_validation_cost"] != float64(library.MaxValidationCost) {
		t.Fatalf("limits: %d %v", st, v)
	}
	if st, v := s.call(t, "POST", "/v1/agents/a/results", `{"key": "k", "value": 3}`); st != 413 ||
		v["error"].(map[string]any)["code"] != "quota_exceeded" || !strings.Contains(v["error"].(map[string]any)["message"].(string), "results_max_versions") {
		t.Fatalf("a third version: %d %v", st, v)
	}
	// An import is all or none: a line past the version cap stores none of them.
	if st, v := s.ndjson(t, "/v1/agents/a/results", `{"key": "n", "value": 1}`+"\n"+`{"key": "n", "value": 2}`+"\n"+`{"key": "n", "value": 3}`); st != 413 ||
		!strings.Contains(v["error"].(map[string]any)["message"].(string), "results_max_versions") {
		t.Fatalf("an import past the version cap: %d %v", st, v)
	}
	if st, _ := s.call(t, "GET", "/v1/agents/a/results/n", ""); st != 404 {
		t.Fatalf("a refused import stored results: %d", st)
	}
	big := `{"key": "big", "value": "` + strings.Repeat("x", 1<<20) + `"}`
	if st, v := s.call(t, "POST", "/v1/agents/a/results", big); st != 413 || !strings.Contains(v["error"].(map[string]any)["message"].(string), "results_max_bytes") {
		t.Fatalf("over the byte quota: %d %v", st, v)
	}
}
