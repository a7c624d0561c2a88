package console

import (
	"net/http"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Sessions lists an agent's stateful sessions; *engine.Sessions satisfies it.
type Sessions interface {
	List(agent string) []sandbox.SessionInfo
}

type sessionsView struct {
	Agent, Error string
	Agents       []string
	Sessions     []sandbox.SessionInfo
}

// sessionsPage shows an agent's sessions: each one's state (active, paused, hibernated,
// ended and why), its run time and calls, what its last resume kept, its hibernation file,
// and its lifecycle's history.
func (c *Console) sessionsPage(w http.ResponseWriter, r *http.Request, l login) {
	if c.cfg.Sessions == nil {
		c.errorPage(w, r, http.StatusNotFound, "This daemon keeps no sessions.")
		return
	}
	agent, agents, problem := c.pickAgent(r)
	v := sessionsView{Agent: agent, Agents: agents, Error: problem}
	if agent != "" {
		v.Sessions = c.cfg.Sessions.List(agent)
	}
	c.render(w, r, http.StatusOK, "sessions", l.page("Sessions", "sessions", v))
}
