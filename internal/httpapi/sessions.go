package httpapi

import (
	"context"
	"net/http"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
)

// Sessions keeps stateful sessions; *session.Registry is one. A route looks its session up
// once (Get) and then calls the session's own methods.
type Sessions interface {
	Create(ctx context.Context, req sandbox.SessionRequest) (*session.Session, error)
	// Get returns an agent's session that has not ended; Info any, ended ones included.
	Get(ctx context.Context, agent, id string) (*session.Session, error)
	Info(ctx context.Context, agent, id string) (sandbox.SessionInfo, error)
	List(agent string) []sandbox.SessionInfo
	Config() session.Config
	Stats() session.Stats
	// RunOnce runs a request in a session of its template made for it and closed after it.
	RunOnce(ctx context.Context, req sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error)
}

var _ Sessions = (*session.Registry)(nil)

// routeSessions registers the session endpoints.
func (a *api) routeSessions() {
	a.handle("POST /v1/agents/{agent}/sessions", a.createSession)
	a.handle("GET /v1/agents/{agent}/sessions", a.listSessions)
	a.handle("GET /v1/agents/{agent}/sessions/{id}", a.getSession)
	a.handle("DELETE /v1/agents/{agent}/sessions/{id}", a.inSession(a.deleteSession, true))
	a.handle("POST /v1/agents/{agent}/sessions/{id}/executions", a.executeInSession)
	a.routeLifecycle()
}

var sessionShape = shape{
	fields: []string{"template", "dependencies", "idle_timeout_ms", "max_lifetime_ms", "auto_resume", "auto_pause", "network_allow", "secrets", "env"},
	expect: map[string]string{
		"template":        "must be a string: a template's name (GET /v1/agents/{agent}/templates lists them)",
		"secrets":         secretsExpect,
		"env":             `must be an object of strings, such as {"MODE": "fast"}`,
		"auto_resume":     "must be true or false (true: a call to the session while it is paused or hibernated resumes it)",
		"auto_pause":      "must be true or false (true: the session pauses instead of ending at its idle timeout)",
		"dependencies":    `must be a list of requirement strings such as ["pandas>=2"]`,
		"idle_timeout_ms": "must be an integer number of milliseconds",
		"max_lifetime_ms": "must be an integer number of milliseconds",
		"network_allow":   `must be a list of hosts, CIDRs or host:port entries within the daemon's network_allow, such as ["api.example.com"]`,
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
	s, err := a.sessions.Create(r.Context(), sandbox.SessionRequest{Agent: agent, Template: b.Template, Dependencies: b.Dependencies,
		IdleTimeoutMS: b.IdleTimeoutMS, MaxLifetimeMS: b.MaxLifetimeMS, NetworkAllow: b.NetworkAllow, Secrets: b.Secrets, Env: b.Env,
		SessionOptions: sandbox.SessionOptions{AutoResume: b.AutoResume, AutoPause: b.AutoPause}})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	info := s.Info()
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
	info, err := a.sessions.Info(r.Context(), agent, r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, SessionOf(info))
}

// deleteSession ends a session; one that had ended already is answered as it ended.
func (a *api) deleteSession(w http.ResponseWriter, r *http.Request, s *session.Session) {
	info, err := s.Close(r.Context())
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
		s, err := a.sessions.Get(ctx, agent, id)
		if err != nil {
			return sandbox.Result{}, err
		}
		return s.Execute(ctx, req, wait, emit)
	})
}
