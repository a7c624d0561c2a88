package httpapi

import (
	"context"
	"net/http"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
)

// routeLifecycle registers the lifecycle's endpoints: POST …/sessions/{id}/pause, resume,
// hibernate and fork (201 with the new session). Each answers the session as it is after the
// step (fork: the new session).
func (a *api) routeLifecycle() {
	steps := []struct {
		name   string
		step   func(*session.Session, context.Context) (sandbox.SessionInfo, error)
		status int
	}{
		{"pause", (*session.Session).Pause, http.StatusOK},
		{"resume", (*session.Session).Resume, http.StatusOK},
		{"hibernate", (*session.Session).Hibernate, http.StatusOK},
		{"fork", func(s *session.Session, ctx context.Context) (sandbox.SessionInfo, error) {
			fork, err := s.Fork(ctx)
			if err != nil {
				return sandbox.SessionInfo{}, err
			}
			return fork.Info(), nil
		}, http.StatusCreated},
	}
	for _, st := range steps {
		a.handle("POST /v1/agents/{agent}/sessions/{id}/"+st.name, a.inSession(func(w http.ResponseWriter, r *http.Request, s *session.Session) {
			info, err := st.step(s, r.Context())
			if err != nil {
				a.fail(w, r, err)
				return
			}
			if st.status == http.StatusCreated {
				w.Header().Set("Location", "/v1/agents/"+info.Agent+"/sessions/"+info.ID)
			}
			writeJSON(w, st.status, SessionOf(info))
		}, false))
	}
}

// lifecycleLimits adds the lifecycle's budgets and their use to GET /v1/limits' sessions.
func lifecycleLimits(l *apitype.SessionLimits, c session.LifecycleConfig, st session.Stats) {
	l.AutoPause, l.HibernateAfterMS, l.HibernateOnStop = c.AutoPause, c.HibernateAfter.Milliseconds(), c.HibernateOnStop
	l.PausedMaxBytes, l.HibernatedPerAgent, l.HibernatedMaxBytes = c.PausedMaxBytes, c.HibernatedPerAgent, c.HibernatedMaxBytes
	l.HibernatedMaxAgeH = int64(c.HibernatedMaxAge.Hours())
	l.Paused, l.PausedBytes, l.Hibernated, l.HibernatedBytes = st.Paused, st.PausedBytes, st.Hibernated, st.HibernatedBytes
}
