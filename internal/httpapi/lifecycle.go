package httpapi

import (
	"context"
	"net/http"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// SessionLifecycle pauses, resumes, hibernates and forks sessions; *engine.Sessions
// satisfies it. Each takes the agent and the session's ID and answers the session as it is
// after the step (Fork: the new session).
type SessionLifecycle interface {
	Pause(ctx context.Context, agent, id string) (sandbox.SessionInfo, error)
	Resume(ctx context.Context, agent, id string) (sandbox.SessionInfo, error)
	Hibernate(ctx context.Context, agent, id string) (sandbox.SessionInfo, error)
	Fork(ctx context.Context, agent, id string) (sandbox.SessionInfo, error)
	LifecycleStats() engine.LifecycleStats
}

// routeLifecycle registers the lifecycle's endpoints: POST …/sessions/{id}/pause, resume,
// hibernate and fork (201 with the new session).
func (a *api) routeLifecycle() {
	steps := []struct {
		name   string
		step   func(context.Context, string, string) (sandbox.SessionInfo, error)
		status int
	}{
		{"pause", a.sessions.Pause, http.StatusOK},
		{"resume", a.sessions.Resume, http.StatusOK},
		{"hibernate", a.sessions.Hibernate, http.StatusOK},
		{"fork", a.sessions.Fork, http.StatusCreated},
	}
	for _, s := range steps {
		a.handle("POST /v1/agents/{agent}/sessions/{id}/"+s.name, func(w http.ResponseWriter, r *http.Request) {
			agent, err := agentOf(r)
			if err != nil {
				writeError(w, err)
				return
			}
			info, err := s.step(r.Context(), agent, r.PathValue("id"))
			if err != nil {
				a.fail(w, r, err)
				return
			}
			if s.status == http.StatusCreated {
				w.Header().Set("Location", "/v1/agents/"+agent+"/sessions/"+info.ID)
			}
			writeJSON(w, s.status, SessionOf(info))
		})
	}
}

// lifecycleLimits adds the lifecycle's budgets and their use to GET /v1/limits' sessions.
func lifecycleLimits(l *apitype.SessionLimits, c engine.LifecycleConfig, st engine.LifecycleStats) {
	l.AutoPause, l.HibernateAfterMS, l.HibernateOnStop = c.AutoPause, c.HibernateAfter.Milliseconds(), c.HibernateOnStop
	l.PausedMaxBytes, l.HibernatedPerAgent, l.HibernatedMaxBytes = c.PausedMaxBytes, c.HibernatedPerAgent, c.HibernatedMaxBytes
	l.HibernatedMaxAgeH = int64(c.HibernatedMaxAge.Hours())
	l.Paused, l.PausedBytes, l.Hibernated, l.HibernatedBytes = st.Paused, st.PausedBytes, st.Hibernated, st.HibernatedBytes
}
