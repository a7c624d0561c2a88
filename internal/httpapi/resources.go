package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/jobs"
	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// CodeLibrary is what the API needs of saved code; *library.Library satisfies it.
type CodeLibrary interface {
	Create(ctx context.Context, agent, name string, d library.Draft) (store.Code, error)
	Update(ctx context.Context, agent, name string, d library.Draft, expected int) (store.Code, error)
	Get(ctx context.Context, agent, name string, version int) (store.Code, error)
	Versions(ctx context.Context, agent, name string) ([]store.CodeVersion, error)
	List(ctx context.Context, agent, filter string, p store.Page) ([]store.Code, string, error)
	Delete(ctx context.Context, agent, name string, force bool) ([]string, error)
	Run(ctx context.Context, agent, name string, run library.Run, origin sandbox.Origin, emit func(sandbox.Event)) (sandbox.Result, error)
}

// Scheduler is what the API needs of jobs; *jobs.Scheduler satisfies it.
type Scheduler interface {
	Create(ctx context.Context, agent string, d jobs.Draft) (jobs.Scheduled, error)
	Update(ctx context.Context, agent, id string, d jobs.Draft) (jobs.Scheduled, error)
	SetEnabled(ctx context.Context, agent, id string, enabled bool) (jobs.Scheduled, error)
	Get(ctx context.Context, agent, id string) (jobs.Scheduled, error)
	List(ctx context.Context, agent string, p store.Page) ([]store.Job, string, error)
	Delete(ctx context.Context, agent, id string) error
	History(ctx context.Context, agent, id string, f store.FireFilter, p store.Page) ([]store.Fire, string, error)
	RunNow(ctx context.Context, agent, id string) (store.Fire, error)
}

// Ledger is what the API needs of the execution ledger; *store.Store satisfies it.
type Ledger interface {
	GetExecution(ctx context.Context, id string) (store.Execution, error)
	ListExecutions(ctx context.Context, f store.ExecutionFilter, p store.Page) ([]store.ExecutionSummary, string, error)
	// SessionCommands is a page of the commands recorded for agent's session id, newest first.
	SessionCommands(ctx context.Context, agent, id string, p store.Page) ([]sandbox.ProcessInfo, string, error)
	// SessionPortRequests is a page of the requests recorded to agent's session id's ports,
	// newest first.
	SessionPortRequests(ctx context.Context, agent, id string, p store.Page) ([]sandbox.PortRequest, string, error)
	// SessionEgress is a page of the outbound connections recorded for agent's session id's
	// commands (and what its calls left running), newest first.
	SessionEgress(ctx context.Context, agent, id string, p store.Page) ([]sandbox.EgressConnection, string, error)
	// Retention is what the ledger is held to, and LedgerBytes what its records take now
	// (GET /v1/limits).
	Retention() store.Retention
	LedgerBytes() int64
}

var (
	_ CodeLibrary = (*library.Library)(nil)
	_ Scheduler   = (*jobs.Scheduler)(nil)
	_ Ledger      = (*store.Store)(nil)
)

// agentOf returns the {agent} of the path, or a 400 error.
func agentOf(r *http.Request) (string, error) {
	agent := r.PathValue("agent")
	if err := sandbox.CheckAgent(agent); err != nil {
		err.Message += " (in the path)"
		return "", err
	}
	return agent, nil
}

// page reads the limit and cursor query parameters.
func page(q url.Values) (store.Page, error) {
	p := store.Page{Cursor: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxLimit {
			return p, invalid("limit", "limit=%q: give a whole number from 1 to %d (default %d)", v, store.MaxLimit, store.DefaultLimit)
		}
		p.Limit = n
	}
	return p, nil
}

// checkQuery refuses query parameters other than known ones, naming the nearest.
func checkQuery(q url.Values, known ...string) error {
	for k := range q {
		if !slices.Contains(known, k) {
			return invalid(k, "unknown query parameter %q; known ones are %v", k, known)
		}
	}
	return nil
}

// listing reads the path's agent and a listing's query: the page parameters and extra ones.
func listing(r *http.Request, extra ...string) (agent string, q url.Values, p store.Page, err error) {
	q = r.URL.Query()
	if agent, err = agentOf(r); err != nil {
		return
	}
	if err = checkQuery(q, append([]string{"limit", "cursor"}, extra...)...); err != nil {
		return
	}
	p, err = page(q)
	return
}

// listAnswer is the JSON of a listing: the items under their name and the next page's cursor
// ("" after the last page).
func listAnswer(key string, items any, next string) map[string]any {
	return map[string]any{key: items, "next_cursor": next}
}

// bodyLimit bounds the bodies of the resource routes (code, schemas and inputs, a job's
// input files).
func (a *api) bodyLimit() int64 {
	cfg := a.ex.Config()
	return int64(cfg.MaxCodeBytes) + 2*int64(cfg.MaxInputBytes) + filesBodyBytes(cfg) + bodySlack
}

// ---- saved code ----

// codeBody is the JSON body of saved code: apitype.CodeDraft, whose name is read on create
// and expected_version on update (the shapes refuse the other).
type codeBody = apitype.CodeDraft

// draftOf is the library's draft of a body.
func draftOf(b codeBody) library.Draft {
	return library.Draft{Code: b.Code, Dependencies: b.Dependencies, InputSchema: b.InputSchema,
		OutputSchema: b.OutputSchema, Description: b.Description, Template: b.Template}
}

var (
	draftFields = []string{"code", "dependencies", "input_schema", "output_schema", "description", "template"}
	draftExpect = map[string]string{
		"code":             "must be a string holding the Python source",
		"dependencies":     `must be a list of requirement strings such as ["pandas>=2"]`,
		"description":      "must be a string",
		"template":         "must be a string: a template's name (GET /v1/agents/{agent}/templates lists them), or \"\" for the default image",
		"name":             "must be a string",
		"expected_version": "must be an integer",
	}
	createCodeShape = shape{fields: append([]string{"name"}, draftFields...), expect: draftExpect,
		example: `{"name": "sum-sales", "code": "OUTPUT = sum(INPUT)"}`}
	updateCodeShape = shape{fields: append(slices.Clone(draftFields), "expected_version"), expect: draftExpect,
		example: `{"code": "OUTPUT = sum(INPUT)", "expected_version": 1}`}
)

func (a *api) createCode(w http.ResponseWriter, r *http.Request) {
	agent, err := agentOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var b codeBody
	if err := readBody(w, r, a.bodyLimit(), &b, createCodeShape); err != nil {
		writeError(w, err)
		return
	}
	c, err := a.lib.Create(r.Context(), agent, b.Name, draftOf(b))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/agents/"+agent+"/code/"+c.Name)
	writeJSON(w, http.StatusCreated, codeOf(c))
}

func (a *api) updateCode(w http.ResponseWriter, r *http.Request) {
	agent, err := agentOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	name := r.PathValue("name")
	var b codeBody
	if r.Method == http.MethodPatch {
		// PATCH changes the fields it names; PUT replaces them all.
		cur, err := a.lib.Get(r.Context(), agent, name, 0)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		b = codeBody{Code: cur.Code, Dependencies: cur.Dependencies, InputSchema: cur.InputSchema,
			OutputSchema: cur.OutputSchema, Description: cur.Description, Template: cur.Template}
	}
	if err := readBody(w, r, a.bodyLimit(), &b, updateCodeShape); err != nil {
		writeError(w, err)
		return
	}
	c, err := a.lib.Update(r.Context(), agent, name, draftOf(b), b.ExpectedVersion)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, codeOf(c))
}

func (a *api) getCode(w http.ResponseWriter, r *http.Request) {
	a.answerCode(w, r, 0)
}

func (a *api) getCodeVersion(w http.ResponseWriter, r *http.Request) {
	v, err := strconv.Atoi(r.PathValue("version"))
	if err != nil || v < 1 {
		writeError(w, invalid("version", "version %q in the path: give a whole number from 1", r.PathValue("version")))
		return
	}
	a.answerCode(w, r, v)
}

func (a *api) answerCode(w http.ResponseWriter, r *http.Request, version int) {
	agent, err := agentOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	c, err := a.lib.Get(r.Context(), agent, r.PathValue("name"), version)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, codeOf(c))
}

func (a *api) listCode(w http.ResponseWriter, r *http.Request) {
	agent, q, p, err := listing(r, "q")
	if err != nil {
		writeError(w, err)
		return
	}
	list, next, err := a.lib.List(r.Context(), agent, q.Get("q"), p)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	items := each(list, codeSummaryOf)
	if items == nil {
		items = []apitype.CodeSummary{}
	}
	writeJSON(w, http.StatusOK, apitype.CodeList{Code: items, NextCursor: next})
}

func (a *api) listCodeVersions(w http.ResponseWriter, r *http.Request) {
	agent, err := agentOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	list, err := a.lib.Versions(r.Context(), agent, r.PathValue("name"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apitype.CodeVersions{Versions: each(list, codeVersionOf)})
}

// forceParam reads a DELETE's query: only "force", a boolean (absent: false).
func forceParam(r *http.Request) (bool, error) {
	q := r.URL.Query()
	if err := checkQuery(q, "force"); err != nil {
		return false, err
	}
	return boolParam(q, "force")
}

func (a *api) deleteCode(w http.ResponseWriter, r *http.Request) {
	agent, err := agentOf(r)
	force, ferr := forceParam(r)
	if err != nil || ferr != nil {
		writeError(w, firstErr(err, ferr))
		return
	}
	name := r.PathValue("name")
	disabled, err := a.lib.Delete(r.Context(), agent, name, force)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if disabled == nil {
		disabled = []string{}
	}
	writeJSON(w, http.StatusOK, apitype.CodeDeleted{Deleted: name, DisabledJobs: disabled})
}

var runCodeShape = shape{
	fields: append([]string{"input", "timeout_ms", "version", "secrets"}, runFieldNames...),
	expect: withRunFields(map[string]string{
		"timeout_ms": "must be an integer number of milliseconds",
		"version":    "must be an integer (absent: the latest)",
		"secrets":    secretsExpect,
	}),
	example: `{"input": {"n": 3}}`,
}

// runCodeBody is the JSON body of a saved-code run: apitype.CodeRun, with its files in the
// body's form, checked one by one by decodeFiles.
type runCodeBody struct {
	apitype.CodeRun
	Files runFiles `json:"files"` // decoded by readRunBody
}

func (a *api) runCode(w http.ResponseWriter, r *http.Request) {
	agent, err := agentOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	release, ok := a.admit(w, r, a.answering)
	if !ok {
		return
	}
	defer release()
	cfg := a.ex.Config()
	var b runCodeBody
	files, ok := readRunBody(w, r, cfg, &b, runCodeShape)
	if !ok {
		return
	}
	run := library.Run{Input: b.Input, TimeoutMS: b.TimeoutMS, Version: b.Version, Files: files, Charts: b.Charts, Secrets: b.Secrets}
	name, origin := r.PathValue("name"), sandbox.Origin{Source: sourceOf(r)}
	a.run(w, r, b.InlineFiles, func(ctx context.Context, emit func(sandbox.Event)) (sandbox.Result, error) {
		return a.lib.Run(ctx, agent, name, run, origin, emit)
	})
}

// ---- jobs ----

var jobShape = shape{
	fields: []string{"code_name", "code_version", "schedule", "timezone", "input", "timeout_ms", "enabled",
		"overlap", "catch_up", "description", "files", "charts", "secrets"},
	expect: map[string]string{
		"code_name":    "must be a string naming saved code",
		"code_version": "must be an integer (0: the latest)",
		"schedule":     `must be a string such as "0 9 * * 1-5" or "@every 10m"`,
		"timezone":     `must be a string naming an IANA timezone such as "Europe/Berlin"`,
		"timeout_ms":   "must be an integer number of milliseconds",
		"enabled":      "must be true or false",
		"overlap":      `must be "skip" or "queue"`,
		"catch_up":     `must be "skip" or "once"`,
		"description":  "must be a string",
		"files":        filesExpect,
		"charts":       runFieldExpect["charts"],
		"secrets":      secretsExpect,
	},
	example: `{"code_name": "daily-report", "schedule": "@daily"}`,
}

// jobBody is the JSON body of a job: apitype.JobDraft, with its input files in the body's form
// (nil when absent: a PATCH keeps the job's files), checked one by one by decodeFiles.
type jobBody struct {
	apitype.JobDraft
	Files []json.RawMessage `json:"files"`
}

// readJob reads a job's body over d (a PATCH's current job, or nothing).
func (a *api) readJob(w http.ResponseWriter, r *http.Request, d jobs.Draft) (jobs.Draft, error) {
	b := jobBody{JobDraft: apitype.JobDraft{CodeName: d.CodeName, CodeVersion: d.CodeVersion, Schedule: d.Schedule,
		Timezone: d.Timezone, Input: d.Input, TimeoutMS: d.TimeoutMS, Enabled: d.Enabled, Charts: d.Charts,
		Secrets: d.Secrets, Overlap: d.Overlap, CatchUp: d.CatchUp, Description: d.Description}}
	if err := readBody(w, r, a.bodyLimit(), &b, jobShape); err != nil {
		return d, err
	}
	out := jobs.Draft{CodeName: b.CodeName, CodeVersion: b.CodeVersion, Schedule: b.Schedule, Timezone: b.Timezone,
		Input: b.Input, TimeoutMS: b.TimeoutMS, Enabled: b.Enabled, Files: d.Files, Charts: b.Charts,
		Secrets: b.Secrets, Overlap: b.Overlap, CatchUp: b.CatchUp, Description: b.Description}
	if b.Files != nil {
		files, err := decodeFiles(b.Files)
		if err != nil {
			return d, err
		}
		out.Files = files
	}
	return out, nil
}

func (a *api) createJob(w http.ResponseWriter, r *http.Request) {
	agent, err := agentOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	d, err := a.readJob(w, r, jobs.Draft{})
	if err != nil {
		writeError(w, err)
		return
	}
	j, err := a.jobs.Create(r.Context(), agent, d)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/agents/"+agent+"/jobs/"+j.ID)
	writeJSON(w, http.StatusCreated, scheduledOf(j))
}

func (a *api) updateJob(w http.ResponseWriter, r *http.Request) {
	agent, err := agentOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	var d jobs.Draft
	if r.Method == http.MethodPatch {
		cur, err := a.jobs.Get(r.Context(), agent, id)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		d = jobs.DraftOf(cur.Job)
	}
	d, err = a.readJob(w, r, d)
	if err != nil {
		writeError(w, err)
		return
	}
	j, err := a.jobs.Update(r.Context(), agent, id, d)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, scheduledOf(j))
}

func (a *api) getJob(w http.ResponseWriter, r *http.Request) {
	a.jobAction(w, r, func(ctx context.Context, agent, id string) (any, error) {
		j, err := a.jobs.Get(ctx, agent, id)
		return scheduledOf(j), err
	})
}

func (a *api) pauseJob(w http.ResponseWriter, r *http.Request) {
	a.jobAction(w, r, func(ctx context.Context, agent, id string) (any, error) {
		j, err := a.jobs.SetEnabled(ctx, agent, id, false)
		return scheduledOf(j), err
	})
}

func (a *api) resumeJob(w http.ResponseWriter, r *http.Request) {
	a.jobAction(w, r, func(ctx context.Context, agent, id string) (any, error) {
		j, err := a.jobs.SetEnabled(ctx, agent, id, true)
		return scheduledOf(j), err
	})
}

func (a *api) runJob(w http.ResponseWriter, r *http.Request) {
	a.jobAction(w, r, func(ctx context.Context, agent, id string) (any, error) {
		f, err := a.jobs.RunNow(ctx, agent, id)
		return fireOf(f), err
	})
}

func (a *api) deleteJob(w http.ResponseWriter, r *http.Request) {
	a.jobAction(w, r, func(ctx context.Context, agent, id string) (any, error) {
		return apitype.Deleted{Deleted: id}, a.jobs.Delete(ctx, agent, id)
	})
}

// jobAction answers do's result for the path's agent and job.
func (a *api) jobAction(w http.ResponseWriter, r *http.Request, do func(ctx context.Context, agent, id string) (any, error)) {
	agent, err := agentOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	v, err := do(r.Context(), agent, r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (a *api) listJobs(w http.ResponseWriter, r *http.Request) {
	agent, _, p, err := listing(r)
	if err != nil {
		writeError(w, err)
		return
	}
	list, next, err := a.jobs.List(r.Context(), agent, p)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apitype.JobList{Jobs: each(list, jobOf), NextCursor: next})
}

func (a *api) jobHistory(w http.ResponseWriter, r *http.Request) {
	agent, q, p, err := listing(r, "since", "until")
	if err != nil {
		writeError(w, err)
		return
	}
	var f store.FireFilter
	if f.Since, f.Until, err = timeRange(q); err != nil {
		writeError(w, err)
		return
	}
	list, next, err := a.jobs.History(r.Context(), agent, r.PathValue("id"), f, p)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apitype.FireList{Fires: each(list, fireOf), NextCursor: next})
}

// ---- the ledger ----

func (a *api) getExecution(w http.ResponseWriter, r *http.Request) {
	e, err := a.scopedExecution(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	rec := executionOf(e)
	if a.files != nil && len(rec.Files) > 0 {
		kept, err := a.files.Kept(r.Context(), e.ID)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		for i := range rec.Files {
			rec.Files[i].Evicted = !kept[rec.Files[i].Name]
		}
	}
	writeJSON(w, http.StatusOK, rec)
}

func (a *api) listExecutions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := checkQuery(q, "agent", "source", "outcome", "code_name", "job_id", "template", "since", "until", "limit", "cursor"); err != nil {
		writeError(w, err)
		return
	}
	p, err := page(q)
	if err != nil {
		writeError(w, err)
		return
	}
	f := store.ExecutionFilter{Agent: q.Get("agent"), Source: q.Get("source"), CodeName: q.Get("code_name"),
		JobID: q.Get("job_id"), Template: q.Get("template"), Outcome: sandbox.Outcome(q.Get("outcome"))}
	if f.Agent != "" {
		if err := sandbox.CheckAgent(f.Agent); err != nil {
			err.Message += " (the query parameter agent)"
			writeError(w, err)
			return
		}
	}
	if f.Source != "" && !slices.Contains(sandbox.Sources, sandbox.Source(f.Source)) {
		writeError(w, invalid("source", "source=%q: use api, cli, mcp or job", f.Source))
		return
	}
	if f.Outcome != "" && !slices.Contains(sandbox.Outcomes, f.Outcome) {
		writeError(w, invalid("outcome", "outcome=%q is not an outcome; the outcomes are %v", f.Outcome, sandbox.Outcomes))
		return
	}
	if f.Since, f.Until, err = timeRange(q); err != nil {
		writeError(w, err)
		return
	}
	list, next, err := a.ledger.ListExecutions(r.Context(), f, p)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apitype.ExecutionList{Executions: each(list, executionSummaryOf), NextCursor: next})
}

// timeRange reads the query parameters since and until (RFC 3339 times, each optional; since
// before until).
func timeRange(q url.Values) (since, until time.Time, err error) {
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"since", &since}, {"until", &until}} {
		if v := q.Get(t.name); v != "" {
			if *t.dst, err = time.Parse(time.RFC3339, v); err != nil {
				return time.Time{}, time.Time{}, invalid(t.name, "%s=%q: give an RFC 3339 time such as 2026-01-02T15:04:05Z", t.name, v)
			}
		}
	}
	if !since.IsZero() && !until.IsZero() && !since.Before(until) {
		return time.Time{}, time.Time{}, invalid("since", "since (%s) must be before until (%s)", since.Format(time.RFC3339), until.Format(time.RFC3339))
	}
	return since, until, nil
}

func boolParam(q url.Values, name string) (bool, error) {
	v := q.Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, invalid(name, "%s=%q: use true or false", name, v)
	}
	return b, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
