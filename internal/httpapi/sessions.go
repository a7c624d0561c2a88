package httpapi

import (
	"context"
	"net/http"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// SessionKeeper keeps stateful sessions; *engine.Sessions satisfies it.
type SessionKeeper interface {
	Create(ctx context.Context, req sandbox.SessionRequest) (sandbox.SessionInfo, error)
	Get(ctx context.Context, agent, id string) (sandbox.SessionInfo, error)
	List(agent string) []sandbox.SessionInfo
	Close(ctx context.Context, agent, id string) (sandbox.SessionInfo, error)
	Execute(ctx context.Context, id string, req sandbox.Request, wait bool, emit func(sandbox.Event)) (sandbox.Result, error)
	Config() engine.SessionConfig
	SessionLifecycle
}

var _ SessionKeeper = (*engine.Sessions)(nil)

// routeSessions registers the session endpoints.
func (a *api) routeSessions() {
	a.handle("POST /v1/agents/{agent}/sessions", a.createSession)
	a.handle("GET /v1/agents/{agent}/sessions", a.listSessions)
	a.handle("GET /v1/agents/{agent}/sessions/{id}", a.getSession)
	a.handle("DELETE /v1/agents/{agent}/sessions/{id}", a.deleteSession)
	a.handle("POST /v1/agents/{agent}/sessions/{id}/executions", a.executeInSession)
	a.routeLifecycle()
}

var sessionShape = shape{
	fields: []string{"dependencies", "idle_timeout_ms", "max_lifetime_ms", "auto_resume", "auto_pause"},
	expect: map[string]string{
		"auto_resume":     "must be true or false (true: a call to the session while it is paused or hibernated resumes it)",
		"auto_pause":      "must be true or false (true: the session pauses instead of ending at its idle timeout)",
		"dependencies":    `must be a list of requirement strings such as ["pandas>=2"]`,
		"idle_timeout_ms": "must be an integer number of milliseconds",
		"max_lifetime_ms": "must be an integer number of milliseconds",
	},
	example: `{}`,
}

// maxSessionBody bounds a session's creation body: its requirements.
const maxSessionBody = 1 << 20

func (a *api) createSession(w http.ResponseWriter, r *http.Request) {
	agent, err := agentOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var b apitype.SessionCreate
	if r.ContentLength != 0 {
		if err := readBody(w, r, maxSessionBody, &b, sessionShape); err != nil {
			writeError(w, err)
			return
		}
	}
	info, err := a.sessions.Create(r.Context(), sandbox.SessionRequest{Agent: agent, Dependencies: b.Dependencies,
		IdleTimeoutMS: b.IdleTimeoutMS, MaxLifetimeMS: b.MaxLifetimeMS,
		SessionOptions: sandbox.SessionOptions{AutoResume: b.AutoResume, AutoPause: b.AutoPause}})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/agents/"+agent+"/sessions/"+info.ID)
	writeJSON(w, http.StatusCreated, SessionOf(info))
}

func (a *api) listSessions(w http.ResponseWriter, r *http.Request) {
	agent, err := agentOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, apitype.SessionList{Sessions: each(a.sessions.List(agent), SessionOf)})
}

func (a *api) getSession(w http.ResponseWriter, r *http.Request) {
	agent, err := agentOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	info, err := a.sessions.Get(r.Context(), agent, r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, SessionOf(info))
}

func (a *api) deleteSession(w http.ResponseWriter, r *http.Request) {
	agent, err := agentOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	info, err := a.sessions.Close(r.Context(), agent, r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, SessionOf(info))
}

// sessionExecuteBody is the JSON body of POST …/sessions/{id}/executions, its files decoded
// raw for errors that name the file.
type sessionExecuteBody struct {
	apitype.SessionCall
	Files runFiles `json:"files"` // decoded by readRunBody
}

var sessionExecuteShape = shape{
	fields: append([]string{"code", "input", "timeout_ms", "wait"}, runFieldNames...),
	expect: withRunFields(map[string]string{
		"code":       "must be a string holding the Python source",
		"timeout_ms": "must be an integer number of milliseconds",
		"wait":       "must be true or false (false: answer 409 at once while another call of the session runs)",
	}),
	example: `{"code": "x = 1"}`,
}

func (a *api) executeInSession(w http.ResponseWriter, r *http.Request) {
	agent, err := agentOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	release, ok := a.admit(w, r, a.sessionAnswering)
	if !ok {
		return
	}
	defer release()
	cfg := a.ex.Config()
	var b sessionExecuteBody
	files, ok := readRunBody(w, r, cfg, &b, sessionExecuteShape)
	if !ok {
		return
	}
	id := r.PathValue("id")
	wait := b.Wait == nil || *b.Wait
	req := sandbox.Request{Code: b.Code, Input: b.Input, TimeoutMS: b.TimeoutMS, Agent: agent,
		Origin: sandbox.Origin{Source: sourceOf(r)}, Files: files, Charts: b.Charts}
	a.run(w, r, b.InlineFiles, func(ctx context.Context, emit func(sandbox.Event)) (sandbox.Result, error) {
		return a.sessions.Execute(ctx, id, req, wait, emit)
	})
}
