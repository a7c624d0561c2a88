package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

func agentPath(agent string, parts ...string) string {
	p := "/v1/agents/" + url.PathEscape(agent)
	for _, s := range parts {
		p += "/" + url.PathEscape(s)
	}
	return p
}

// CreateCode saves d as version 1 of the agent's new code name. An existing name is an
// *APIError with Status 409.
func (c *Client) CreateCode(ctx context.Context, agent, name string, d apitype.CodeDraft) (apitype.Code, error) {
	d.Name, d.ExpectedVersion = name, 0
	var out apitype.Code
	err := c.call(ctx, http.MethodPost, agentPath(agent, "code"), d, &out)
	return out, err
}

// UpdateCode saves d as the next version of the agent's code name (PUT: every field is
// replaced). expected, when not 0, is the version the caller last saw (409 when another is
// current).
func (c *Client) UpdateCode(ctx context.Context, agent, name string, d apitype.CodeDraft, expected int) (apitype.Code, error) {
	d.Name, d.ExpectedVersion = "", expected
	var out apitype.Code
	err := c.call(ctx, http.MethodPut, agentPath(agent, "code", name), d, &out)
	return out, err
}

// GetCode returns version of the agent's code name (0: the latest).
func (c *Client) GetCode(ctx context.Context, agent, name string, version int) (apitype.Code, error) {
	path := agentPath(agent, "code", name)
	if version > 0 {
		path += "/versions/" + strconv.Itoa(version)
	}
	var out apitype.Code
	err := c.call(ctx, http.MethodGet, path, nil, &out)
	return out, err
}

// CodeVersions returns every version of the agent's code name, newest first (GET
// /v1/agents/{agent}/code/{name}/versions).
func (c *Client) CodeVersions(ctx context.Context, agent, name string) ([]apitype.CodeVersion, error) {
	var out apitype.CodeVersions
	err := c.call(ctx, http.MethodGet, agentPath(agent, "code", name, "versions"), nil, &out)
	return out.Versions, err
}

// ListCode returns a page of the agent's saved code whose name or description contains q.
func (c *Client) ListCode(ctx context.Context, agent, q string, p apitype.Page) ([]apitype.CodeSummary, string, error) {
	v := pageQuery(p)
	if q != "" {
		v.Set("q", q)
	}
	var out apitype.CodeList
	err := c.call(ctx, http.MethodGet, agentPath(agent, "code")+query(v), nil, &out)
	return out.Code, out.NextCursor, err
}

// DeleteCode deletes the agent's code name and returns the jobs force disabled.
func (c *Client) DeleteCode(ctx context.Context, agent, name string, force bool) ([]string, error) {
	path := agentPath(agent, "code", name)
	if force {
		path += "?force=true"
	}
	var out apitype.CodeDeleted
	err := c.call(ctx, http.MethodDelete, path, nil, &out)
	return out.DisabledJobs, err
}

// RunCode runs the agent's saved code name (see Execute for onEvent and the errors, and
// ExecuteAnswer for the answer).
func (c *Client) RunCode(ctx context.Context, agent, name string, run apitype.CodeRun, onEvent func(apitype.Event)) (Answer, error) {
	return c.execute(ctx, agentPath(agent, "code", name, "run"), run, onEvent)
}

// CreateJob creates a job of agent.
func (c *Client) CreateJob(ctx context.Context, agent string, d apitype.JobDraft) (apitype.ScheduledJob, error) {
	var out apitype.ScheduledJob
	err := c.call(ctx, http.MethodPost, agentPath(agent, "jobs"), d, &out)
	return out, err
}

// UpdateJob changes the fields of the agent's job id that patch names (PATCH).
func (c *Client) UpdateJob(ctx context.Context, agent, id string, patch map[string]any) (apitype.ScheduledJob, error) {
	var out apitype.ScheduledJob
	err := c.call(ctx, http.MethodPatch, agentPath(agent, "jobs", id), patch, &out)
	return out, err
}

// GetJob returns the agent's job id with its next fire times.
func (c *Client) GetJob(ctx context.Context, agent, id string) (apitype.ScheduledJob, error) {
	var out apitype.ScheduledJob
	err := c.call(ctx, http.MethodGet, agentPath(agent, "jobs", id), nil, &out)
	return out, err
}

// JobAction makes action ("pause" or "resume") on the agent's job id.
func (c *Client) JobAction(ctx context.Context, agent, id, action string) (apitype.ScheduledJob, error) {
	var out apitype.ScheduledJob
	err := c.call(ctx, http.MethodPost, agentPath(agent, "jobs", id, action), nil, &out)
	return out, err
}

// RunJob fires the agent's job id now.
func (c *Client) RunJob(ctx context.Context, agent, id string) (apitype.Fire, error) {
	var out apitype.Fire
	err := c.call(ctx, http.MethodPost, agentPath(agent, "jobs", id, "run"), nil, &out)
	return out, err
}

// DeleteJob deletes the agent's job id.
func (c *Client) DeleteJob(ctx context.Context, agent, id string) error {
	var out apitype.Deleted
	return c.call(ctx, http.MethodDelete, agentPath(agent, "jobs", id), nil, &out)
}

// ListJobs returns a page of the agent's jobs.
func (c *Client) ListJobs(ctx context.Context, agent string, p apitype.Page) ([]apitype.Job, string, error) {
	var out apitype.JobList
	err := c.call(ctx, http.MethodGet, agentPath(agent, "jobs")+query(pageQuery(p)), nil, &out)
	return out.Jobs, out.NextCursor, err
}

// JobHistory returns a page of the fires of the agent's job id from since to until (each
// ignored when zero), newest first.
func (c *Client) JobHistory(ctx context.Context, agent, id string, since, until time.Time, p apitype.Page) ([]apitype.Fire, string, error) {
	v := pageQuery(p)
	if !since.IsZero() {
		v.Set("since", since.Format(time.RFC3339Nano))
	}
	if !until.IsZero() {
		v.Set("until", until.Format(time.RFC3339Nano))
	}
	var out apitype.FireList
	err := c.call(ctx, http.MethodGet, agentPath(agent, "jobs", id, "history")+query(v), nil, &out)
	return out.Fires, out.NextCursor, err
}

// ListExecutions returns a page of the ledger, newest first. filter holds the query
// parameters of GET /v1/executions (agent, source, outcome, code_name, job_id, template, since,
// until).
func (c *Client) ListExecutions(ctx context.Context, filter url.Values, p apitype.Page) ([]apitype.ExecutionSummary, string, error) {
	v := pageQuery(p)
	for k, vals := range filter {
		for _, x := range vals {
			v.Add(k, x)
		}
	}
	var out apitype.ExecutionList
	err := c.call(ctx, http.MethodGet, "/v1/executions"+query(v), nil, &out)
	return out.Executions, out.NextCursor, err
}

// GetExecution returns the ledger's record of execution id; with agent not "", only if it is
// that agent's.
func (c *Client) GetExecution(ctx context.Context, id, agent string) (apitype.Execution, error) {
	path := "/v1/executions/" + url.PathEscape(id)
	if agent != "" {
		path += "?agent=" + url.QueryEscape(agent)
	}
	var out apitype.Execution
	err := c.call(ctx, http.MethodGet, path, nil, &out)
	return out, err
}

// ExecutionFiles returns the output files of execution id as its ledger record lists them,
// with the names of those skipped and whether more were left out; with agent not "", only if
// it is that agent's execution (another's is an *APIError with Status 404).
func (c *Client) ExecutionFiles(ctx context.Context, id, agent string) (files []apitype.File, skipped []apitype.SkippedFile, truncated bool, err error) {
	e, err := c.GetExecution(ctx, id, agent)
	return e.Files, e.FilesSkipped, e.FilesTruncated, err
}

// FilePath is the REST path of execution id's output file name: GET answers its bytes. Each
// part of name is escaped on its own, so a "/" stays a separator and nothing else is one.
func FilePath(id, name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return "/v1/executions/" + url.PathEscape(id) + "/files/" + strings.Join(parts, "/")
}

// OpenFile returns the bytes of execution id's output file name as a stream (close it) and
// their media type. A file the record does not list is an *APIError with Status 404; one whose
// bytes were evicted to keep the daemon's files_max_bytes quota, Status 410.
func (c *Client) OpenFile(ctx context.Context, id, name string) (io.ReadCloser, string, error) {
	resp, err := c.sendRaw(ctx, http.MethodGet, FilePath(id, name), nil, "", "*/*")
	if err != nil {
		return nil, "", err
	}
	return resp.Body, resp.Header.Get("Content-Type"), nil
}

// ReadFile returns the bytes of execution id's output file f (an entry of its result's Files)
// and checks them against f's size and SHA-256; max, when above 0, refuses a file of more
// bytes before reading it. Errors are OpenFile's.
func (c *Client) ReadFile(ctx context.Context, id string, f apitype.File, max int64) ([]byte, error) {
	if max > 0 && f.SizeBytes > max {
		return nil, fmt.Errorf("output file %q is %d bytes; at most %d are read here", f.Name, f.SizeBytes, max)
	}
	body, _, err := c.OpenFile(ctx, id, f.Name)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, f.SizeBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading output file %q: %w", f.Name, err)
	}
	if err := CheckContent(f, b); err != nil {
		return nil, err
	}
	return b, nil
}

func pageQuery(p apitype.Page) url.Values {
	v := url.Values{}
	if p.Limit > 0 {
		v.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Cursor != "" {
		v.Set("cursor", p.Cursor)
	}
	return v
}

func query(v url.Values) string {
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

// Packages lists the dependencies installed in the sandbox's package volume.
func (c *Client) Packages(ctx context.Context) ([]apitype.Package, error) {
	var out apitype.Packages
	err := c.call(ctx, http.MethodGet, "/v1/packages", nil, &out)
	return out.Packages, err
}

// InstallPackages pre-installs requirements; progress, when not nil, receives each status as
// the daemon decides it (the answer is streamed).
func (c *Client) InstallPackages(ctx context.Context, reqs []string, progress func(apitype.DependencyStatus)) ([]apitype.DependencyStatus, error) {
	body := apitype.InstallRequest{Requirements: reqs}
	resp, err := c.send(ctx, http.MethodPost, "/v1/packages", body, apitype.NDJSONContentType+", application/json;q=0.5")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var l struct {
			apitype.StreamLine
			Dependencies []apitype.DependencyStatus `json:"dependencies"`
		}
		if err := dec.Decode(&l); err != nil {
			return nil, fmt.Errorf("reading the install's answer: it ended before its last line: %w", err)
		}
		switch l.Type {
		case apitype.StreamDependency:
			if progress != nil && l.Dependency != nil {
				progress(*l.Dependency)
			}
		case apitype.StreamInstalled:
			return l.Dependencies, nil
		case apitype.StreamError:
			return nil, streamError(l.Error)
		}
	}
}

// RemovePackage removes the installed package name (every version of it).
func (c *Client) RemovePackage(ctx context.Context, name string) ([]apitype.Package, error) {
	var out apitype.Removed
	err := c.call(ctx, http.MethodDelete, "/v1/packages/"+url.PathEscape(name), nil, &out)
	return out.Removed, err
}

// knowledgePath is the path of a kind of knowledge: memories, facts, documents, nodes, edges
// or results.
func knowledgePath(agent, kind string) (string, error) {
	switch kind {
	case "memories", "facts", "documents", "results":
		return agentPath(agent, kind), nil
	case "nodes", "edges":
		return agentPath(agent, "graph", kind), nil
	}
	return "", fmt.Errorf("kind %q: use memories, facts, documents, nodes, edges or results", kind)
}

// ImportKnowledge stores the NDJSON items of body (one JSON object per line) as kind, all or
// none, and returns how many it stored.
func (c *Client) ImportKnowledge(ctx context.Context, agent, kind string, body io.Reader) (int, error) {
	path, err := knowledgePath(agent, kind)
	if err != nil {
		return 0, err
	}
	resp, err := c.sendRaw(ctx, http.MethodPost, path, body, apitype.NDJSONContentType, "application/json")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out apitype.Created
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, fmt.Errorf("reading the import's answer: %w", err)
	}
	return out.Created, nil
}

// ListKnowledge returns a page of the agent's items of kind.
func (c *Client) ListKnowledge(ctx context.Context, agent, kind string, p apitype.Page) ([]json.RawMessage, string, error) {
	path, err := knowledgePath(agent, kind)
	if err != nil {
		return nil, "", err
	}
	var out apitype.KnowledgeList
	err = c.call(ctx, http.MethodGet, path+query(pageQuery(p)), nil, &out)
	return out.Items, out.NextCursor, err
}

// DeleteKnowledge deletes the agent's item of kind with key id.
func (c *Client) DeleteKnowledge(ctx context.Context, agent, kind, id string) error {
	path, err := knowledgePath(agent, kind)
	if err != nil {
		return err
	}
	var out apitype.Deleted
	return c.call(ctx, http.MethodDelete, path+"/"+url.PathEscape(id), nil, &out)
}

// ErrSetupFailed is wrapped by the error Setup returns when a step failed; the step's event
// said why.
var ErrSetupFailed = errors.New("setup step failed")

// Setup runs setup on the daemon's machine (POST /v1/setup), sending each step's event to
// emit; it returns the last event's failure as an error wrapping ErrSetupFailed.
func (c *Client) Setup(ctx context.Context, emit func(apitype.SetupEvent)) error {
	resp, err := c.send(ctx, http.MethodPost, "/v1/setup", nil, apitype.NDJSONContentType)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var e apitype.SetupEvent
		if err := dec.Decode(&e); err != nil {
			return fmt.Errorf("reading the setup's progress: it ended before its last step: %w", err)
		}
		if e.Step == "setup" {
			if e.Status == apitype.SetupFailed {
				return fmt.Errorf("%w: %s", ErrSetupFailed, e.Message)
			}
			return nil
		}
		emit(e)
	}
}
