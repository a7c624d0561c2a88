package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

const createSessionDoc = `Start a stateful session: a Python interpreter of your own that keeps its globals, imports and files from call to call (run code in it with run_in_session). Use it to load data once and ask many questions of it; use run_code for one-shot code. dependencies are pip requirements installed once, now. The session ends after idle_timeout_ms without a call (default 10 minutes), after max_lifetime_ms (default and most 1 hour), when you close it (close_session), when a call runs out of memory, or when a call does not stop within 2 s of its timeout's interrupt; afterwards every call fails saying why (start a new session: its state is gone). You may have only a few sessions at once. Answers the session's id and limits.`

const runInSessionDoc = `Run Python code in a session started with create_session: the globals, imports and files of the earlier calls are there, and what this call defines stays for the next ones. INPUT is this call's input; set OUTPUT to return JSON; stdout and stderr are this call's. A call that passes timeout_ms is interrupted (KeyboardInterrupt, outcome timeout) and the session keeps its state; one that ignores the interrupt is killed and the session ends. Calls run one at a time, in order. Answers like run_code (files as in run_code: written into the session's directory; output files are the files this call created or changed).`

// CreateSessionArgs are create_session's arguments.
type CreateSessionArgs struct {
	Template      string   `json:"template,omitempty" jsonschema:"start the session from this template (list_templates names them; NAME:TAG or NAME:VERSION for a kept version) instead of the default environment"`
	Dependencies  []string `json:"dependencies,omitempty" jsonschema:"pip requirements installed once for the session, such as tabulate>=0.9"`
	IdleTimeoutMS int64    `json:"idle_timeout_ms,omitempty" jsonschema:"end the session after this long without a call, in milliseconds (default 600000)"`
	MaxLifetimeMS int64    `json:"max_lifetime_ms,omitempty" jsonschema:"end the session this long after its start, in milliseconds (default and most 3600000)"`
	AutoResume    bool     `json:"auto_resume,omitempty" jsonschema:"true: a call to the session while it is paused or hibernated resumes it (else the call fails until resume_session)"`
	Secrets       []string `json:"secrets,omitempty" jsonschema:"secrets the session's code and commands may use (list_secrets names them): each is the environment variable of that name, holding a placeholder the server replaces with the value for the secret's hosts only"`
}

// RunInSessionArgs are run_in_session's arguments.
type RunInSessionArgs struct {
	ID        string `json:"id" jsonschema:"the session's id (se_...), from create_session"`
	Code      string `json:"code" jsonschema:"the Python source, run in the session's module"`
	Input     any    `json:"input,omitempty" jsonschema:"any JSON value, given to this call as INPUT"`
	TimeoutMS int64  `json:"timeout_ms,omitempty" jsonschema:"this call's wall-clock limit in milliseconds (default 30000)"`
	FileArgs
}

// addSessionTools adds the session tools to s.
func addSessionTools(s *mcp.Server, t *tools) {
	mcp.AddTool(s, &mcp.Tool{Name: "create_session", Description: createSessionDoc}, t.createSession)
	mcp.AddTool(s, &mcp.Tool{Name: "run_in_session", Description: runInSessionDoc + outcomesDoc}, t.runInSession)
	mcp.AddTool(s, &mcp.Tool{Name: "list_sessions", Description: "List your sessions: the active ones (id, calls, when each expires) and those that ended while the daemon ran, with why they ended."}, t.listSessions)
	mcp.AddTool(s, &mcp.Tool{Name: "list_templates", Description: listTemplatesDoc}, t.listTemplates)
	mcp.AddTool(s, &mcp.Tool{Name: "close_session", Description: "Close a session: its interpreter and files are removed (a call still running is killed). Close sessions you no longer need: you may have only a few at once."}, t.closeSession)
}

func (t *tools) createSession(ctx context.Context, _ *mcp.CallToolRequest, a CreateSessionArgs) (*mcp.CallToolResult, any, error) {
	d := apitype.SessionCreate{Template: a.Template, Dependencies: a.Dependencies, AutoResume: a.AutoResume, Secrets: a.Secrets}
	if a.IdleTimeoutMS != 0 {
		d.IdleTimeoutMS = &a.IdleTimeoutMS
	}
	if a.MaxLifetimeMS != 0 {
		d.MaxLifetimeMS = &a.MaxLifetimeMS
	}
	info, err := t.c.CreateSession(ctx, t.agent, d)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, info, nil
}

func (t *tools) runInSession(ctx context.Context, _ *mcp.CallToolRequest, a RunInSessionArgs) (*mcp.CallToolResult, any, error) {
	call := apitype.SessionCall{Code: a.Code, RunFiles: a.runFiles()}
	if a.Input != nil {
		in, err := json.Marshal(a.Input)
		if err != nil {
			return nil, nil, fmt.Errorf("input: %w", err)
		}
		call.Input = in
	}
	if a.TimeoutMS != 0 {
		call.TimeoutMS = &a.TimeoutMS
	}
	ans, err := t.c.RunInSession(ctx, t.agent, a.ID, call, nil)
	res, out, rerr := runResult(ans, err)
	if res != nil && ans.SessionEnded != "" {
		res.Content = append([]mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(
			"this call ended the session (%s): its state is gone; start a new one with create_session", ans.SessionEnded)}}, res.Content...)
	}
	return res, out, rerr
}

func (t *tools) listSessions(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
	list, err := t.c.ListSessions(ctx, t.agent)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, map[string]any{"sessions": list}, nil
}

// SessionIDArgs name a session.
type SessionIDArgs struct {
	ID string `json:"id" jsonschema:"the session's id (se_...)"`
}

func (t *tools) closeSession(ctx context.Context, _ *mcp.CallToolRequest, a SessionIDArgs) (*mcp.CallToolResult, any, error) {
	info, err := t.c.CloseSession(ctx, t.agent, a.ID)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, info, nil
}

const listTemplatesDoc = `List the templates you may start sessions and runs from (the template argument of create_session and run_code): your own and the ones other agents share (named AGENT/NAME), each with its status (only ready ones start) and its spec: the Debian packages, Python packages and files it adds to the default environment.`

// templateSummary is a template as list_templates answers it: no build log.
type templateSummary struct {
	Name    string               `json:"name"`
	Version int                  `json:"version"`
	Status  string               `json:"status"`
	Error   string               `json:"error,omitempty"`
	Spec    apitype.TemplateSpec `json:"spec"`
}

func (t *tools) listTemplates(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
	list, err := t.c.ListTemplates(ctx, t.agent)
	if err != nil {
		return nil, nil, toolError(err)
	}
	out := make([]templateSummary, len(list))
	for i, tm := range list {
		name := tm.Name
		if tm.Agent != t.agent {
			name = tm.Agent + "/" + tm.Name
		}
		out[i] = templateSummary{Name: name, Version: tm.Version, Status: tm.Status, Error: tm.Error, Spec: tm.Spec}
	}
	return nil, map[string]any{"templates": out}, nil
}
