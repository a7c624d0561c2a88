// Package mcpserver serves sandpit over the Model Context Protocol (the official go-sdk):
// tools to run Python, save and run code, schedule it, and read the ledger. Every tool is an
// adapter over the REST client, so MCP behaves exactly as the REST API does (the same checks,
// limits and errors), whether it runs inside the daemon (/mcp) or as `sandpit mcp` over
// stdio. Each server acts for one agent.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/client"
)

// New returns an MCP server whose tools call the daemon through c for agent. limits are the
// daemon's (Client.Limits: GET /v1/limits), which the tool descriptions state.
func New(c *client.Client, agent, version string, limits apitype.Limits) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "sandpit", Version: version}, &mcp.ServerOptions{
		Instructions: instructions,
	})
	s.AddReceivingMiddleware(acceptAliases, plainArguments)
	t := &tools{c: c.As(apitype.SourceMCP), agent: agent}
	s.AddResourceTemplate(&mcp.ResourceTemplate{Name: "output-file", Title: "An output file of a run",
		URITemplate: fileURITemplate, Description: fileResourceDoc}, t.readFile)
	mcp.AddTool(s, &mcp.Tool{Name: "run_code", Description: runCodeDoc + limitsDoc(limits) + outcomesDoc}, t.runCode)
	mcp.AddTool(s, &mcp.Tool{Name: "save_code", Description: saveCodeDoc}, t.saveCode)
	mcp.AddTool(s, &mcp.Tool{Name: "update_code", Description: updateCodeDoc}, t.updateCode)
	mcp.AddTool(s, &mcp.Tool{Name: "get_code", Description: "Get a saved script: its code, dependencies, schemas, description and version (the latest, or the version given)."}, t.getCode)
	mcp.AddTool(s, &mcp.Tool{Name: "list_code", Description: "List your saved scripts (name, version, description, dependencies), optionally only those whose name or description contains query."}, t.listCode)
	mcp.AddTool(s, &mcp.Tool{Name: "delete_code", Description: "Delete a saved script with all its versions. Refused while jobs run it, unless force is true, which also disables those jobs."}, t.deleteCode)
	mcp.AddTool(s, &mcp.Tool{Name: "run_saved_code", Description: runSavedDoc + limitsDoc(limits) + outcomesDoc}, t.runSaved)
	mcp.AddTool(s, &mcp.Tool{Name: "create_code_job", Description: createJobDoc}, t.createJob)
	mcp.AddTool(s, &mcp.Tool{Name: "list_code_jobs", Description: "List your jobs: their script, schedule, timezone, enabled flag and next run."}, t.listJobs)
	mcp.AddTool(s, &mcp.Tool{Name: "update_code_job", Description: "Change a job: only the fields given change. Setting enabled false pauses it; true resumes it. Answers the next five fire times."}, t.updateJob)
	mcp.AddTool(s, &mcp.Tool{Name: "delete_code_job", Description: "Delete a job and its fire history (its runs stay in the ledger)."}, t.deleteJob)
	mcp.AddTool(s, &mcp.Tool{Name: "get_code_job_history", Description: jobHistoryDoc}, t.jobHistory)
	mcp.AddTool(s, &mcp.Tool{Name: "list_secrets", Description: listSecretsDoc}, t.listSecrets)
	mcp.AddTool(s, &mcp.Tool{Name: "list_executions", Description: "List your past executions, newest first, with outcome and duration; filter by source (api, cli, mcp, job), outcome, code_name, job_id, template, and since and until (RFC 3339 times such as 2026-01-02T15:04:05Z, bounding the start). A next_cursor in the answer gets the next page (pass it as cursor)."}, t.listExecutions)
	mcp.AddTool(s, &mcp.Tool{Name: "get_execution", Description: "Get one past execution in full: code, input, stdout, stderr, OUTPUT, outcome, the agent.* calls it made and its log lines."}, t.getExecution)
	addSessionTools(s, t)
	addWorkspaceTools(s, t)
	addPortTools(s, t)
	addLifecycleTools(s, t)
	return s
}

const instructions = `sandpit runs Python 3 for you in a locked-down sandbox: use it for arithmetic, aggregation, data over twenty rows, parsing, anything where code is more reliable than reasoning.` + packagesDoc + ` Give the code data as input (the global INPUT) and set the global OUTPUT to a JSON-serialisable value to get structured results back; print for humans. Code can read your own knowledge with agent.search_memory, agent.get_facts, agent.query_graph, agent.get_documents, and keep results with agent.store_result and agent.log. Save code you will use again (save_code) with JSON Schemas for its input and output, and schedule it (create_code_job).`

// packagesDoc names the packages of the default sandbox image (config.DefaultPackages), with
// the module names to import where they differ.
const packagesDoc = ` The default sandbox image has pandas, numpy, matplotlib, scipy, requests, beautifulsoup4 (import bs4), Pillow (import PIL) and ipython installed; ask for others with dependencies.`

// limitsDoc states the daemon's limits l for a model.
func limitsDoc(l apitype.Limits) string {
	network := "the network is reachable"
	switch l.Network {
	case "none":
		network = "there is no network"
	case "allowlist":
		network = "the network is reachable only through the sandbox's HTTP proxy (HTTP_PROXY and HTTPS_PROXY are set: requests and urllib use it), to these hosts: none"
		if len(l.NetworkAllow) > 0 {
			network = network[:len(network)-len("none")] + strings.Join(l.NetworkAllow, ", ")
		}
		network += "; any other host is refused with a 403 that says why, and raw sockets fail"
	}
	charts := "figures are not saved unless the code saves them"
	if l.Charts {
		charts = "open matplotlib figures (at each plt.show() and at the end) and PIL images shown come back as PNG files unless charts is false"
	}
	return fmt.Sprintf(" Limits: a wall-clock timeout (timeout_ms: default %d, at most %d); memory: %s for the run's data (past it: MemoryError, outcome memory_limit); "+
		"stdout %s and stderr %s (past them: outcome output_limit); OUTPUT %s of JSON; any file %s. "+
		"Files: up to %d input files (files), %s each, %s in all, written in the current directory; "+
		"the files the code writes or changes in the current directory (not /tmp) come back, up to %d files, %s each, %s in all "+
		"(images as images, other small files embedded, larger ones and those past a result's share as links to read with resources/read); %s; %s.",
		l.DefaultTimeoutMS, l.MaxTimeoutMS, size(l.Limits.MemoryBytes), size(l.Limits.StdoutBytes), size(l.Limits.StderrBytes),
		size(l.Limits.OutputBytes), size(l.Limits.FileSizeBytes),
		l.MaxInputFiles, size(l.MaxInputFileBytes), size(l.MaxInputFilesBytes), l.OutputFiles, size(l.OutputFileBytes), size(l.OutputFilesBytes),
		charts, network)
}

// size writes n bytes in the largest binary unit that divides it ("512 MiB", "1536 bytes").
func size(n int64) string {
	for _, u := range []struct {
		name  string
		bytes int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.bytes && n%u.bytes == 0 {
			return fmt.Sprintf("%d %s", n/u.bytes, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

const outcomesDoc = ` The result has one outcome: ok; error (an exception or non-zero exit: read stderr, fix the code, try again); timeout; memory_limit; output_limit; output_invalid (OUTPUT broke the script's output schema); dependency_error (a package could not be installed); killed; sandbox_error (the sandbox failed, not your code: retry). A failing program is reported as a tool error carrying its stdout and stderr.`

const runCodeDoc = `Run Python 3 code in the sandbox and get its stdout, stderr, exit code, duration and OUTPUT, and, as a notebook cell, the value of its last expression and what it displays (display(df), plt.show(): tables as HTML, charts as images). INPUT is the JSON value you pass as input (None when absent); set the global OUTPUT to return JSON. dependencies are pip requirements (PEP 508, such as "tabulate>=0.9") installed before the run; names only, no URLs or options. The global agent object reads your knowledge: agent.search_memory(query, limit=10), agent.get_facts(subject=None, predicate=None), agent.query_graph(start=None, relation=None, depth=1), agent.get_documents(query=None, ids=None), agent.store_result(key, value), agent.log(message). files are given like [{"name": "data.csv", "content": "a,b\n1,2\n"}] (binary: the bytes in base64 with "encoding": "base64"); read them by name, such as pandas.read_csv("data.csv").` + packagesDoc

const saveCodeDoc = `Save a Python script under a name (lowercase letters, digits, - and _), as version 1, to run later by name (run_saved_code) or on a schedule (create_code_job). input_schema and output_schema are JSON Schemas (2020-12) of its INPUT and OUTPUT: runs with input that breaks input_schema are refused, and an OUTPUT that breaks output_schema ends the run output_invalid. dependencies are pip requirements installed before each run.`

const updateCodeDoc = `Save a new version of a saved script: only the fields given change. Give expected_version (the version you last read) to be refused if someone else changed it meanwhile.`

const runSavedDoc = `Run a saved script by name with an input (checked against its input schema first: a mismatch names each failing field as a JSON pointer). Answers like run_code.`

const createJobDoc = `Schedule a saved script: schedule is a 5-field cron spec ("0 9 * * 1-5"), @hourly, @daily, @weekly, @monthly or "@every 10m" (at least 10s), read in an IANA timezone (default UTC). input is given to every run. overlap: "skip" (default) skips a fire while the previous run still goes, "queue" runs it after. catch_up: "skip" (default) or "once" for fires missed while sandpit was down. Answers the job with its next five fire times.`

const jobHistoryDoc = `A job's history, newest first: each fire with its kind (schedule, manual, catch_up), status (started, skipped, queued, missed, failed), scheduled_at and fired_at, and for a started fire its execution_id (read the run with get_execution) and outcome. since and until (RFC 3339 times such as 2026-01-02T15:04:05Z) bound when each fire was handled (since <= fired_at < until). A next_cursor in the answer gets the next page (pass it as cursor).`

type tools struct {
	c     *client.Client
	agent string
}

// RunCodeArgs are run_code's arguments.
type RunCodeArgs struct {
	Code         string   `json:"code" jsonschema:"the Python source to run"`
	Input        any      `json:"input,omitempty" jsonschema:"any JSON value, given to the code as INPUT"`
	Dependencies []string `json:"dependencies,omitempty" jsonschema:"pip requirements to install first, such as tabulate>=0.9"`
	Template     string   `json:"template,omitempty" jsonschema:"run in a fresh sandbox of this template (list_templates names them; NAME:TAG or NAME:VERSION for a kept version) instead of the default environment"`
	TimeoutMS    int64    `json:"timeout_ms,omitempty" jsonschema:"wall-clock limit in milliseconds (the default and the maximum are in the tool's description)"`
	NetworkAllow []string `json:"network_allow,omitempty" jsonschema:"hosts (api.example.com, *.example.com, with :PORT) and CIDRs this run may reach: narrows the server's network_allow (in the tool's description), never widens it"`
	Secrets      []string `json:"secrets,omitempty" jsonschema:"secrets the code may use (list_secrets names them): each is the environment variable of that name, holding a placeholder the server replaces with the value for the secret's hosts only"`
	FileArgs
}

// FileArgs are the arguments about files of the tools that run code.
type FileArgs struct {
	Files  []FileArg `json:"files,omitempty" jsonschema:"files written into the run's working directory before the code starts, such as [{\"name\": \"data.csv\", \"content\": \"a,b\\n1,2\\n\"}]"`
	Charts *bool     `json:"charts,omitempty" jsonschema:"false: do not return open matplotlib figures and PIL images shown as PNG files (default true)"`
}

// FileArg is an input file, as the REST API takes it.
type FileArg struct {
	Name     string `json:"name" jsonschema:"its path in the working directory, such as data.csv or in/a.json (relative, no ..)"`
	Content  string `json:"content" jsonschema:"its text, or its bytes in standard base64 with encoding base64"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (the default) or base64"`
}

// runFiles is the request's part of a: its input files and charts, with the small output
// files asked inline.
func (a FileArgs) runFiles() apitype.RunFiles {
	rf := apitype.RunFiles{Charts: a.Charts, InlineFiles: true}
	for _, f := range a.Files {
		rf.Files = append(rf.Files, apitype.InputFile{Name: f.Name, Content: f.Content, Encoding: f.Encoding})
	}
	return rf
}

func (t *tools) runCode(ctx context.Context, _ *mcp.CallToolRequest, a RunCodeArgs) (*mcp.CallToolResult, any, error) {
	req := apitype.ExecuteRequest{Code: a.Code, Agent: t.agent, Template: a.Template, Dependencies: a.Dependencies, NetworkAllow: a.NetworkAllow, Secrets: a.Secrets, RunFiles: a.runFiles()}
	if a.Input != nil {
		in, err := json.Marshal(a.Input)
		if err != nil {
			return nil, nil, fmt.Errorf("input: %w", err)
		}
		req.Input = in
	}
	if a.TimeoutMS != 0 {
		req.TimeoutMS = &a.TimeoutMS
	}
	return runResult(t.c.ExecuteAnswer(ctx, req, nil))
}

// runResult turns an execution into a tool result: a failing program is a tool error with its
// output, so the model can fix its code. The execution's ID is always given (get_execution
// reads its record), a run stopped because its call was cancelled included. Its displays and
// last expression's value follow the text, as resultContents makes them, then its output
// files, as fileContents makes them.
func runResult(ans client.Answer, err error) (*mcp.CallToolResult, any, error) {
	if err != nil {
		return nil, nil, toolError(err)
	}
	res := ans.Result
	var b strings.Builder
	fmt.Fprintf(&b, "outcome: %s (exit code %d, %d ms)\n", res.Outcome, res.ExitCode, res.DurationMS)
	fmt.Fprintf(&b, "execution: %s\n", res.ID)
	if res.Reason != "" {
		fmt.Fprintf(&b, "reason: %s\n", res.Reason)
	}
	if res.Stdout != "" {
		fmt.Fprintf(&b, "stdout:\n%s\n", res.Stdout)
	}
	if res.Stderr != "" {
		fmt.Fprintf(&b, "stderr:\n%s\n", res.Stderr)
	}
	if string(res.Output) != "null" && len(res.Output) > 0 {
		fmt.Fprintf(&b, "OUTPUT: %s\n", res.Output)
	}
	if len(res.Files) > 0 {
		fmt.Fprintf(&b, "output files (below; read any again with resources/read of its URI):\n")
		for _, f := range res.Files {
			fmt.Fprintf(&b, "  %s (%s, %d bytes): %s\n", f.Name, f.MediaType, f.SizeBytes, FileURI(res.ID, f.Name))
		}
	}
	for _, s := range res.FilesSkipped {
		fmt.Fprintf(&b, "output file %s skipped: %s\n", s.Name, s.Reason)
	}
	if res.FilesTruncated {
		fmt.Fprintf(&b, "more output files were left out than are listed (a cap on output files was reached)\n")
	}
	if res.Error != nil {
		fmt.Fprintf(&b, "error: %s: %s\n", res.Error.Name, res.Error.Value)
	}
	content := append([]mcp.Content{&mcp.TextContent{Text: b.String()}}, resultContents(res)...)
	content = append(content, fileContents(res.ID, res.Files, ans.Inline)...)
	return &mcp.CallToolResult{IsError: res.Outcome != apitype.OutcomeOK, Content: content}, res, nil
}

// errCancelled is the tool error of a call cancelled (notifications/cancelled, or its client
// gone) before the daemon answered it.
var errCancelled = errors.New("cancelled: the client cancelled this call before sandpit answered it; " +
	"if it had started a run, that run was stopped and is recorded with outcome killed (see list_executions)")

// toolError makes err a tool error: naming the field at fault as the API named it, with the
// REST API's advice said as tools (inToolWords). A cancelled call says so, and a daemon that
// did not answer says that, without the client's request line (method and URL).
func toolError(err error) error {
	var api *client.APIError
	var urlErr *url.Error
	switch {
	case errors.As(err, &api):
		msg := inToolWords(api.Message)
		if api.Field != "" && !strings.HasPrefix(msg, api.Field) {
			msg = api.Field + ": " + msg
		}
		for _, v := range api.Violations {
			msg += fmt.Sprintf("\n  input at %q: %s", v.Pointer, v.Message)
		}
		return errors.New(msg)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return errCancelled
	case errors.As(err, &urlErr):
		return fmt.Errorf("sandpit's API did not answer: %w", urlErr.Err)
	}
	return err
}

// SaveCodeArgs are save_code's arguments.
type SaveCodeArgs struct {
	Name         string   `json:"name" jsonschema:"lowercase letters, digits, - and _; up to 64"`
	Code         string   `json:"code" jsonschema:"the Python source"`
	Description  string   `json:"description,omitempty" jsonschema:"what the script does"`
	Dependencies []string `json:"dependencies,omitempty" jsonschema:"pip requirements installed before each run"`
	InputSchema  any      `json:"input_schema,omitempty" jsonschema:"JSON Schema (2020-12) of INPUT"`
	OutputSchema any      `json:"output_schema,omitempty" jsonschema:"JSON Schema (2020-12) of OUTPUT"`
	Template     string   `json:"template,omitempty" jsonschema:"run the script in a sandbox of this template (list_templates names them; NAME:TAG or NAME:VERSION for a kept version) instead of the default environment"`
}

func raw(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, _ := json.Marshal(v)
	return b
}

func (t *tools) saveCode(ctx context.Context, _ *mcp.CallToolRequest, a SaveCodeArgs) (*mcp.CallToolResult, any, error) {
	c, err := t.c.CreateCode(ctx, t.agent, a.Name, apitype.CodeDraft{Code: a.Code, Description: a.Description,
		Dependencies: a.Dependencies, InputSchema: raw(a.InputSchema), OutputSchema: raw(a.OutputSchema), Template: a.Template})
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, c, nil
}

// UpdateCodeArgs are update_code's arguments: the fields given change.
type UpdateCodeArgs struct {
	Name            string    `json:"name" jsonschema:"the saved script's name"`
	Code            *string   `json:"code,omitempty" jsonschema:"new Python source"`
	Description     *string   `json:"description,omitempty"`
	Dependencies    *[]string `json:"dependencies,omitempty"`
	InputSchema     any       `json:"input_schema,omitempty"`
	OutputSchema    any       `json:"output_schema,omitempty"`
	Template        *string   `json:"template,omitempty" jsonschema:"the template whose sandbox runs the script (\"\": the default environment)"`
	ExpectedVersion int       `json:"expected_version,omitempty" jsonschema:"the version you last read; refused if another is current"`
}

func (t *tools) updateCode(ctx context.Context, _ *mcp.CallToolRequest, a UpdateCodeArgs) (*mcp.CallToolResult, any, error) {
	cur, err := t.c.GetCode(ctx, t.agent, a.Name, 0)
	if err != nil {
		return nil, nil, toolError(err)
	}
	d := apitype.CodeDraft{Code: cur.Code, Description: cur.Description, Dependencies: cur.Dependencies,
		InputSchema: cur.InputSchema, OutputSchema: cur.OutputSchema, Template: cur.Template}
	if a.Code != nil {
		d.Code = *a.Code
	}
	if a.Description != nil {
		d.Description = *a.Description
	}
	if a.Dependencies != nil {
		d.Dependencies = *a.Dependencies
	}
	if a.InputSchema != nil {
		d.InputSchema = raw(a.InputSchema)
	}
	if a.OutputSchema != nil {
		d.OutputSchema = raw(a.OutputSchema)
	}
	if a.Template != nil {
		d.Template = *a.Template
	}
	expected := a.ExpectedVersion
	if expected == 0 {
		expected = cur.Version // nobody may slip a version in between the read and the write
	}
	c, err := t.c.UpdateCode(ctx, t.agent, a.Name, d, expected)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, c, nil
}

// NameArgs name a saved script (and optionally a version).
type NameArgs struct {
	Name    string `json:"name" jsonschema:"the saved script's name"`
	Version int    `json:"version,omitempty" jsonschema:"a version (default the latest)"`
}

func (t *tools) getCode(ctx context.Context, _ *mcp.CallToolRequest, a NameArgs) (*mcp.CallToolResult, any, error) {
	c, err := t.c.GetCode(ctx, t.agent, a.Name, a.Version)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, c, nil
}

// ListCodeArgs filter list_code.
type ListCodeArgs struct {
	Query string `json:"query,omitempty" jsonschema:"only scripts whose name or description contains this"`
}

func (t *tools) listCode(ctx context.Context, _ *mcp.CallToolRequest, a ListCodeArgs) (*mcp.CallToolResult, any, error) {
	items, _, err := t.c.ListCode(ctx, t.agent, a.Query, apitype.Page{Limit: apitype.MaxLimit})
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, map[string]any{"code": items}, nil
}

// DeleteCodeArgs are delete_code's arguments.
type DeleteCodeArgs struct {
	Name  string `json:"name" jsonschema:"the saved script's name"`
	Force bool   `json:"force,omitempty" jsonschema:"delete even if jobs run it, disabling them"`
}

func (t *tools) deleteCode(ctx context.Context, _ *mcp.CallToolRequest, a DeleteCodeArgs) (*mcp.CallToolResult, any, error) {
	disabled, err := t.c.DeleteCode(ctx, t.agent, a.Name, a.Force)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, map[string]any{"deleted": a.Name, "disabled_jobs": disabled}, nil
}

// RunSavedArgs are run_saved_code's arguments.
type RunSavedArgs struct {
	Name      string   `json:"name" jsonschema:"the saved script's name"`
	Input     any      `json:"input,omitempty" jsonschema:"INPUT; must fit the script's input schema"`
	TimeoutMS int64    `json:"timeout_ms,omitempty" jsonschema:"wall-clock limit in milliseconds"`
	Version   int      `json:"version,omitempty" jsonschema:"run this version (default the latest)"`
	Secrets   []string `json:"secrets,omitempty" jsonschema:"secrets the code may use (list_secrets names them), as in run_code"`
	FileArgs
}

func (t *tools) runSaved(ctx context.Context, _ *mcp.CallToolRequest, a RunSavedArgs) (*mcp.CallToolResult, any, error) {
	run := apitype.CodeRun{Input: raw(a.Input), Version: a.Version, Secrets: a.Secrets, RunFiles: a.runFiles()}
	if a.TimeoutMS != 0 {
		run.TimeoutMS = &a.TimeoutMS
	}
	return runResult(t.c.RunCode(ctx, t.agent, a.Name, run, nil))
}

// JobArgs are create_code_job's arguments.
type JobArgs struct {
	CodeName    string   `json:"code_name" jsonschema:"the saved script to run"`
	Schedule    string   `json:"schedule" jsonschema:"cron spec, @hourly, @daily, @weekly, @monthly or @every 10m"`
	Timezone    string   `json:"timezone,omitempty" jsonschema:"IANA timezone such as Europe/Berlin (default UTC)"`
	Input       any      `json:"input,omitempty" jsonschema:"INPUT of every run"`
	TimeoutMS   int64    `json:"timeout_ms,omitempty"`
	Overlap     string   `json:"overlap,omitempty" jsonschema:"skip (default) or queue"`
	CatchUp     string   `json:"catch_up,omitempty" jsonschema:"skip (default) or once"`
	Description string   `json:"description,omitempty"`
	CodeVersion int      `json:"code_version,omitempty" jsonschema:"pin a version (default the latest at each run)"`
	Secrets     []string `json:"secrets,omitempty" jsonschema:"secrets each run may use (list_secrets names them), as in run_code"`
}

func (t *tools) createJob(ctx context.Context, _ *mcp.CallToolRequest, a JobArgs) (*mcp.CallToolResult, any, error) {
	d := apitype.JobDraft{CodeName: a.CodeName, CodeVersion: a.CodeVersion, Schedule: a.Schedule, Timezone: a.Timezone,
		Input: raw(a.Input), Overlap: a.Overlap, CatchUp: a.CatchUp, Description: a.Description, Secrets: a.Secrets}
	if a.TimeoutMS != 0 {
		d.TimeoutMS = &a.TimeoutMS
	}
	j, err := t.c.CreateJob(ctx, t.agent, d)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, j, nil
}

func (t *tools) listJobs(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
	items, _, err := t.c.ListJobs(ctx, t.agent, apitype.Page{Limit: apitype.MaxLimit})
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, map[string]any{"jobs": items}, nil
}

// UpdateJobArgs change the fields given.
type UpdateJobArgs struct {
	ID          string    `json:"id" jsonschema:"the job's id (job_...)"`
	Schedule    *string   `json:"schedule,omitempty"`
	Timezone    *string   `json:"timezone,omitempty"`
	Input       any       `json:"input,omitempty"`
	TimeoutMS   *int64    `json:"timeout_ms,omitempty"`
	Enabled     *bool     `json:"enabled,omitempty" jsonschema:"false pauses the job, true resumes it"`
	Overlap     *string   `json:"overlap,omitempty"`
	CatchUp     *string   `json:"catch_up,omitempty"`
	Description *string   `json:"description,omitempty"`
	CodeName    *string   `json:"code_name,omitempty"`
	CodeVersion *int      `json:"code_version,omitempty"`
	Secrets     *[]string `json:"secrets,omitempty" jsonschema:"the secrets each run may use, replacing the job's ([] for none)"`
}

func (t *tools) updateJob(ctx context.Context, _ *mcp.CallToolRequest, a UpdateJobArgs) (*mcp.CallToolResult, any, error) {
	b, _ := json.Marshal(a)
	var patch map[string]any
	_ = json.Unmarshal(b, &patch)
	delete(patch, "id")
	if len(patch) == 0 {
		return nil, nil, errors.New("nothing to change: give at least one field besides id")
	}
	j, err := t.c.UpdateJob(ctx, t.agent, a.ID, patch)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, j, nil
}

// IDArgs name a job or an execution.
type IDArgs struct {
	ID string `json:"id" jsonschema:"the id"`
}

func (t *tools) deleteJob(ctx context.Context, _ *mcp.CallToolRequest, a IDArgs) (*mcp.CallToolResult, any, error) {
	if err := t.c.DeleteJob(ctx, t.agent, a.ID); err != nil {
		return nil, nil, toolError(err)
	}
	return nil, map[string]string{"deleted": a.ID}, nil
}

// PageArgs are the paging and time filter of a listing.
type PageArgs struct {
	Since  string `json:"since,omitempty" jsonschema:"an RFC 3339 time such as 2026-01-02T15:04:05Z: only from then on"`
	Until  string `json:"until,omitempty" jsonschema:"an RFC 3339 time: only before then"`
	Limit  int    `json:"limit,omitempty" jsonschema:"at most this many (default 20, up to 500)"`
	Cursor string `json:"cursor,omitempty" jsonschema:"the next_cursor of the previous answer, for the next page"`
}

// parse returns p's time bounds and page; a time that is not RFC 3339 is an error naming its
// argument.
func (p PageArgs) parse() (since, until time.Time, page apitype.Page, err error) {
	for _, a := range []struct {
		name, value string
		dst         *time.Time
	}{{"since", p.Since, &since}, {"until", p.Until, &until}} {
		if a.value == "" {
			continue
		}
		if *a.dst, err = time.Parse(time.RFC3339, a.value); err != nil {
			return since, until, page, fmt.Errorf("%s %q is not an RFC 3339 time: give one such as 2026-01-02T15:04:05Z", a.name, a.value)
		}
	}
	page, err = toolPage(p.Limit, p.Cursor)
	return since, until, page, err
}

// ListExecutionsArgs filter list_executions.
type ListExecutionsArgs struct {
	Source   string `json:"source,omitempty" jsonschema:"api, cli, mcp or job"`
	Outcome  string `json:"outcome,omitempty" jsonschema:"ok, error, timeout, ..."`
	CodeName string `json:"code_name,omitempty"`
	JobID    string `json:"job_id,omitempty"`
	Template string `json:"template,omitempty" jsonschema:"the template whose sandboxes ran them (NAME, or OWNER/NAME of a shared one)"`
	PageArgs
}

func (t *tools) listExecutions(ctx context.Context, _ *mcp.CallToolRequest, a ListExecutionsArgs) (*mcp.CallToolResult, any, error) {
	since, until, page, err := a.PageArgs.parse()
	if err != nil {
		return nil, nil, err
	}
	f := url.Values{"agent": {t.agent}}
	for k, v := range map[string]string{"source": a.Source, "outcome": a.Outcome, "code_name": a.CodeName, "job_id": a.JobID, "template": a.Template} {
		if v != "" {
			f.Set(k, v)
		}
	}
	if !since.IsZero() {
		f.Set("since", since.Format(time.RFC3339Nano))
	}
	if !until.IsZero() {
		f.Set("until", until.Format(time.RFC3339Nano))
	}
	items, next, err := t.c.ListExecutions(ctx, f, page)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, map[string]any{"executions": items, "next_cursor": next}, nil
}

// JobHistoryArgs are get_code_job_history's arguments.
type JobHistoryArgs struct {
	ID string `json:"id" jsonschema:"the job's id (job_...)"`
	PageArgs
}

func (t *tools) jobHistory(ctx context.Context, _ *mcp.CallToolRequest, a JobHistoryArgs) (*mcp.CallToolResult, any, error) {
	since, until, page, err := a.PageArgs.parse()
	if err != nil {
		return nil, nil, err
	}
	fires, next, err := t.c.JobHistory(ctx, t.agent, a.ID, since, until, page)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, map[string]any{"fires": fires, "next_cursor": next}, nil
}

func (t *tools) getExecution(ctx context.Context, _ *mcp.CallToolRequest, a IDArgs) (*mcp.CallToolResult, any, error) {
	e, err := t.c.GetExecution(ctx, a.ID, t.agent)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, e, nil
}

// toolDefaultLimit is how many items a listing tool answers when it is given no limit.
const toolDefaultLimit = 20

// toolPage is the page a listing tool asks for: limit items (0: toolDefaultLimit; 1 to
// apitype.MaxLimit, else an error in the tool's own words) after cursor.
func toolPage(limit int, cursor string) (apitype.Page, error) {
	if limit < 0 || limit > apitype.MaxLimit {
		return apitype.Page{}, fmt.Errorf("limit %d: give a whole number from 1 to %d (default %d)", limit, apitype.MaxLimit, toolDefaultLimit)
	}
	if limit == 0 {
		limit = toolDefaultLimit
	}
	return apitype.Page{Limit: limit, Cursor: cursor}, nil
}

const listSecretsDoc = "List the secrets your code may use but never read: each one's name, the hosts it may be sent to and the header it goes in, never its value. " +
	"Name one in run_code's or create_session's secrets and the code finds the environment variable of that name holding the placeholder sandpit-secret:NAME: use it as if it were the key " +
	"(os.environ[\"NAME\"] in the header the secret is bound to), and the daemon puts the value in its place in a request to one of its hosts only."

// ListSecretsArgs are list_secrets' arguments: none.
type ListSecretsArgs struct{}

func (t *tools) listSecrets(ctx context.Context, _ *mcp.CallToolRequest, _ ListSecretsArgs) (*mcp.CallToolResult, any, error) {
	list, err := t.c.ListSecrets(ctx, t.agent)
	if err != nil {
		return nil, nil, toolError(err)
	}
	type secret struct {
		Name      string   `json:"name"`
		Shared    bool     `json:"shared,omitempty"`
		Hosts     []string `json:"hosts"`
		Header    string   `json:"header"`
		Format    string   `json:"format,omitempty"`
		BasicUser string   `json:"basic_user,omitempty"`
	}
	out := []secret{}
	for _, s := range list {
		if s.Agent == "" && slices.ContainsFunc(list, func(o apitype.Secret) bool { return o.Agent != "" && o.Name == s.Name }) {
			continue // the agent's own hides it
		}
		out = append(out, secret{Name: s.Name, Shared: s.Agent == "", Hosts: s.Hosts, Header: s.Header, Format: s.Format, BasicUser: s.BasicUser})
	}
	return nil, map[string]any{"secrets": out}, nil
}
