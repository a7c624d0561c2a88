package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
)

// defaultContext is the ID of a sandbox's own interpreter among its code contexts.
const defaultContext = "default"

// codeContext is a code context made by POST /contexts: an interpreter of its own, in a
// session of its own, owned by the sandbox.
type codeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
	sess     *session.Session
	runs     int // guarded by Server.mu
}

// interpreterRoutes is the code interpreter (port 49999): /execute and /contexts.
func (s *Server) interpreterRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("POST /execute", s.execute)
	mux.HandleFunc("POST /contexts", s.createContext)
	mux.HandleFunc("GET /contexts", s.listContexts)
	mux.HandleFunc("DELETE /contexts/{cid}", s.deleteContext)
	mux.HandleFunc("POST /contexts/{cid}/restart", s.restartContext)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("%s %s is not a route of the code interpreter: use POST /execute or /contexts", r.Method, r.URL.Path))
	})
	return mux
}

// checkLanguage refuses any language but Python.
func checkLanguage(lang string) error {
	switch strings.ToLower(lang) {
	case "", "python", "python3":
		return nil
	}
	return fmt.Errorf("language %q is not available: sandpit's sandboxes run Python only; send language \"python\" or omit it", lang)
}

// executeRequest is the body of POST /execute.
type executeRequest struct {
	Code      string            `json:"code"`
	ContextID *string           `json:"context_id"`
	Language  *string           `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	b := boxOf(r.Context())
	var req executeRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.Language != nil {
		if err := checkLanguage(*req.Language); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	sess, counter := b.sess, &b.runs
	if req.ContextID != nil && *req.ContextID != "" && *req.ContextID != defaultContext {
		s.mu.Lock()
		c := b.contexts[*req.ContextID]
		s.mu.Unlock()
		if c == nil {
			writeError(w, http.StatusNotFound, fmt.Sprintf("context_id %q is not a context of this sandbox: GET /contexts lists them", *req.ContextID))
			return
		}
		sess, counter = c.sess, &c.runs
	}
	ctx := r.Context()
	if len(req.EnvVars) > 0 {
		if err := s.setEnvForRun(ctx, sess, req.EnvVars); err != nil {
			writeEngineError(w, "setting env_vars", err)
			return
		}
		defer s.restoreEnv(context.WithoutCancel(ctx), sess)
	}

	w.Header().Set("Content-Type", "application/x-ndjson")
	var (
		mu      sync.Mutex
		started bool
		shown   int // displays streamed as they came
	)
	line := func(v any) {
		mu.Lock()
		defer mu.Unlock()
		if !started {
			w.WriteHeader(http.StatusOK)
			started = true
		}
		raw, _ := json.Marshal(v)
		_, _ = w.Write(append(raw, '\n'))
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	timeout := s.cfg.ExecTimeout.Milliseconds()
	// An uncaught exception is the stream's error line only, as E2B's Jupyter kernel sends it
	// (its traceback also on stderr showed it twice in the SDK's Execution).
	res, err := sess.Execute(ctx, sandbox.Request{Code: req.Code, TimeoutMS: &timeout, TracebackInErrorOnly: true,
		Origin: sandbox.Origin{Source: sandbox.SourceAPI}}, true, func(ev sandbox.Event) {
		switch ev.Stream {
		case sandbox.StreamStdout, sandbox.StreamStderr:
			line(outputLine{Type: string(ev.Stream), Text: ev.Data, Timestamp: time.Now().UTC().Format(time.RFC3339Nano)})
		case sandbox.StreamDisplay:
			if ev.Display != nil {
				mu.Lock()
				shown++
				mu.Unlock()
				line(resultLine(*ev.Display))
			}
		}
	})
	if cutOff(b) {
		panic(http.ErrAbortHandler)
	}
	if err != nil {
		mu.Lock()
		done := started
		mu.Unlock()
		if !done {
			writeEngineError(w, "running the code", err)
			return
		}
		line(errorLine{Type: "error", Name: "SandboxError", Value: err.Error(), Traceback: err.Error()})
		line(map[string]string{"type": "unexpected_end_of_execution"})
		return
	}
	for _, d := range res.Results[min(shown, len(res.Results)):] {
		line(resultLine(d))
	}
	if e := errorOf(res); e != nil {
		line(e)
	}
	s.mu.Lock()
	*counter++
	n := *counter
	s.mu.Unlock()
	if res.ExecutionCount > 0 && sess == b.sess {
		n = res.ExecutionCount // the interpreter's count of the user's calls (the daemon's are not counted)
	}
	line(map[string]any{"type": "number_of_executions", "execution_count": n})
	line(map[string]string{"type": "end_of_execution"})
}

// outputLine is a stdout or stderr line of /execute's stream.
type outputLine struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	Timestamp string `json:"timestamp"`
}

// errorLine is the error line of /execute's stream.
type errorLine struct {
	Type      string `json:"type"`
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// errorOf is the error a run ended with, nil for outcome ok: the uncaught exception, or the
// outcome and its reason when sandpit stopped the run (a timeout, a limit).
func errorOf(res sandbox.Result) *errorLine {
	if e := res.Error; e != nil {
		return &errorLine{Type: "error", Name: e.Name, Value: e.Value, Traceback: e.Traceback}
	}
	if res.Outcome == sandbox.OutcomeOK {
		return nil
	}
	e := &errorLine{Type: "error", Name: string(res.Outcome), Value: res.Reason, Traceback: res.Reason}
	if res.Outcome == sandbox.OutcomeTimeout {
		e.Name = "TimeoutError"
	}
	return e
}

// mimeKeys are the result line's keys of the MIME types E2B names; others go in extra.
var mimeKeys = map[string]string{
	"text/plain": "text", "text/html": "html", "text/markdown": "markdown", "image/svg+xml": "svg", "image/png": "png",
	"image/jpeg": "jpeg", "application/pdf": "pdf", "text/latex": "latex", "application/json": "json",
	"application/javascript": "javascript", "e2b/data": "data", "e2b/chart": "chart",
}

// unquote drops the quotes of a string's repr ('abc' becomes abc), as E2B's interpreter does.
func unquote(raw json.RawMessage) json.RawMessage {
	var t string
	if json.Unmarshal(raw, &t) != nil || len(t) < 2 {
		return raw
	}
	if (t[0] == '\'' && t[len(t)-1] == '\'') || (t[0] == '"' && t[len(t)-1] == '"') {
		out, _ := json.Marshal(t[1 : len(t)-1])
		return out
	}
	return raw
}

// resultLine is a display, or the main result, as a result line of /execute's stream.
func resultLine(d sandbox.Display) map[string]any {
	out := map[string]any{"type": "result", "is_main_result": d.IsMainResult}
	extra := map[string]json.RawMessage{}
	for mime, v := range d.Data {
		if mime == "text/plain" {
			v = unquote(v)
		}
		if k, ok := mimeKeys[mime]; ok {
			out[k] = v
		} else {
			extra[mime] = v
		}
	}
	if len(extra) > 0 {
		out["extra"] = extra
	}
	return out
}

// setEnvForRun sets env for one run, keeping what it replaces for restoreEnv.
func (s *Server) setEnvForRun(ctx context.Context, sess *session.Session, env map[string]string) error {
	return s.call(ctx, sess, "globals()['__e2b_saved_env__'] = {k: __import__('os').environ.get(k) for k in INPUT}\n"+
		"__import__('os').environ.update(INPUT)", env)
}

// restoreEnv undoes setEnvForRun.
func (s *Server) restoreEnv(ctx context.Context, sess *session.Session) {
	err := s.call(ctx, sess, "for __k, __v in globals().pop('__e2b_saved_env__', {}).items():\n"+
		"    __import__('os').environ.pop(__k, None) if __v is None else __import__('os').environ.__setitem__(__k, __v)\n", nil)
	if err != nil {
		s.log.Warn("restoring a sandbox's environment after a run with env_vars", "session", sess.ID(), "error", err)
	}
}

// call runs code with INPUT in sess and fails unless it ran ok.
func (s *Server) call(ctx context.Context, sess *session.Session, code string, input any) error {
	raw, err := json.Marshal(input)
	if err != nil {
		return err
	}
	timeout := int64(10_000)
	res, err := sess.Execute(ctx, sandbox.Request{Code: code, Input: raw, TimeoutMS: &timeout, Internal: true,
		Origin: sandbox.Origin{Source: sandbox.SourceAPI}}, true, nil)
	if err != nil {
		return err
	}
	if res.Outcome != sandbox.OutcomeOK {
		return fmt.Errorf("%s: %s%s", res.Outcome, res.Reason, res.Stderr)
	}
	return nil
}

func (s *Server) createContext(w http.ResponseWriter, r *http.Request) {
	b := boxOf(r.Context())
	var req struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := checkLanguage(req.Language); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.Cwd != "" && strings.TrimRight(req.Cwd, "/") != sandbox.SessionHome {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("cwd %q: a context starts in %s; change directory in its code", req.Cwd, sandbox.SessionHome))
		return
	}
	c, err := s.newContext(r.Context(), b)
	if err != nil {
		writeEngineError(w, "creating the context", err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// newContext starts a context's session, with the sandbox's properties (network narrowing,
// environment, deadline) and envVars.
func (s *Server) newContext(ctx context.Context, b *box) (*codeContext, error) {
	info := b.sess.Info()
	req := sessionRequest(b.agent, s.cfg.MaxLifetime)
	req.NetworkAllow, req.Env = info.NetworkAllow, b.env
	sess, err := s.sessions.Create(ctx, req)
	if err != nil {
		return nil, err
	}
	c := &codeContext{ID: "ctx_" + sess.ID()[3:], Language: "python", Cwd: sandbox.SessionHome, sess: sess}
	s.mu.Lock()
	b.contexts[c.ID] = c
	s.mu.Unlock()
	return c, nil
}

func (s *Server) listContexts(w http.ResponseWriter, r *http.Request) {
	b := boxOf(r.Context())
	list := []codeContext{{ID: defaultContext, Language: "python", Cwd: sandbox.SessionHome}}
	s.mu.Lock()
	for _, c := range b.contexts {
		list = append(list, *c)
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, list)
}

// takeContext removes context cid of b, or answers why it cannot.
func (s *Server) takeContext(w http.ResponseWriter, r *http.Request) (*box, *codeContext) {
	b, cid := boxOf(r.Context()), r.PathValue("cid")
	if cid == defaultContext {
		writeError(w, http.StatusBadRequest, "the default context is the sandbox's own interpreter: it lives as long as the sandbox; create a context with POST /contexts to have one to delete or restart")
		return nil, nil
	}
	s.mu.Lock()
	c := b.contexts[cid]
	delete(b.contexts, cid)
	s.mu.Unlock()
	if c == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("context %q is not a context of this sandbox: GET /contexts lists them", cid))
	}
	return b, c
}

func (s *Server) deleteContext(w http.ResponseWriter, r *http.Request) {
	_, c := s.takeContext(w, r)
	if c == nil {
		return
	}
	if _, err := c.sess.Close(r.Context()); err != nil {
		writeEngineError(w, "deleting the context", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// restartContext gives the context a new interpreter under the same ID.
func (s *Server) restartContext(w http.ResponseWriter, r *http.Request) {
	b, c := s.takeContext(w, r)
	if c == nil {
		return
	}
	if _, err := c.sess.Close(r.Context()); err != nil {
		s.log.Warn("closing a restarted context's session", "sandbox", b.id, "context", c.ID, "error", err)
	}
	fresh, err := s.newContext(r.Context(), b)
	if err != nil {
		writeEngineError(w, "restarting the context", err)
		return
	}
	s.mu.Lock()
	delete(b.contexts, fresh.ID)
	fresh.ID = c.ID
	b.contexts[c.ID] = fresh
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// takeContexts removes and returns b's contexts.
func (s *Server) takeContexts(b *box) []*codeContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := make([]*codeContext, 0, len(b.contexts))
	for id, c := range b.contexts {
		list = append(list, c)
		delete(b.contexts, id)
	}
	return list
}

// closeContexts ends the sessions of a sandbox's contexts.
func (s *Server) closeContexts(ctx context.Context, b *box, contexts []*codeContext) {
	for _, c := range contexts {
		if _, err := c.sess.Close(ctx); err != nil {
			s.log.Warn("closing a context of an ended sandbox", "sandbox", b.id, "context", c.ID, "error", err)
		}
	}
}
