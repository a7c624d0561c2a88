package console

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/schedule"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// The jobs page and the agent picker it shares with the code pages.

// agentsSeen returns the agents of the latest executions (at most a page of them), sorted,
// with extra added: the agent pickers' choices.
func (c *Console) agentsSeen(r *http.Request, extra string) []string {
	var out []string
	if c.cfg.Ledger != nil {
		items, _, err := c.cfg.Ledger.ListExecutions(r.Context(), store.ExecutionFilter{}, store.Page{Limit: store.MaxLimit})
		if err == nil {
			for _, e := range items {
				if !slices.Contains(out, e.Agent) {
					out = append(out, e.Agent)
				}
			}
		}
	}
	if extra != "" && !slices.Contains(out, extra) {
		out = append(out, extra)
	}
	slices.Sort(out)
	return out
}

// pickAgent reads ?agent=, defaulting to the agent "default" (what runs without an agent
// use) when it has been seen, else the first agent seen; "" with an error message when it is
// not a valid name.
func (c *Console) pickAgent(r *http.Request) (agent string, agents []string, problem string) {
	agent = strings.TrimSpace(r.URL.Query().Get("agent"))
	if agent != "" && !sandbox.ValidAgent(agent) {
		return "", c.agentsSeen(r, ""), fmt.Sprintf("agent %q is not an agent name (1 to 64 lowercase letters, digits, '-' or '_')", agent)
	}
	agents = c.agentsSeen(r, agent)
	switch {
	case agent != "":
	case slices.Contains(agents, "default"):
		agent = "default"
	case len(agents) > 0:
		agent = agents[0]
	}
	return agent, agents, ""
}

type jobView struct {
	store.Job
	Words     string
	NextFires []time.Time
	Fires     []store.Fire
}

type jobsView struct {
	Agent   string
	Agents  []string
	Jobs    []jobView
	Error   string
	Message string
}

// firesShown is how many recent fires a job's strip shows.
const firesShown = 20

func (c *Console) jobsPage(w http.ResponseWriter, r *http.Request, l login) {
	if c.cfg.Jobs == nil {
		c.errorPage(w, r, http.StatusNotFound, "This daemon runs no jobs.")
		return
	}
	agent, agents, problem := c.pickAgent(r)
	v := jobsView{Agent: agent, Agents: agents, Error: problem, Message: r.URL.Query().Get("done")}
	if agent != "" {
		list, _, err := c.cfg.Jobs.List(r.Context(), agent, store.Page{Limit: listLimit})
		if err != nil {
			c.failed(w, r, "The jobs of agent "+strconv.Quote(agent), err)
			return
		}
		for _, j := range list {
			jv := jobView{Job: j, Words: schedule.Describe(j.Schedule, j.Timezone)}
			if sj, err := c.cfg.Jobs.Get(r.Context(), agent, j.ID); err == nil {
				jv.NextFires = sj.NextFires
			}
			if fires, _, err := c.cfg.Jobs.History(r.Context(), agent, j.ID, store.FireFilter{}, store.Page{Limit: firesShown}); err == nil {
				slices.Reverse(fires) // oldest first, left to right
				jv.Fires = fires
			}
			v.Jobs = append(v.Jobs, jv)
		}
	}
	c.render(w, r, http.StatusOK, "jobs", l.page("Jobs", "jobs", v))
}

// jobAction pauses, resumes or runs a job now, through the REST API.
func (c *Console) jobAction(w http.ResponseWriter, r *http.Request, l login) {
	agent, id, action := r.PathValue("agent"), r.PathValue("id"), r.PathValue("action")
	verb := map[string]string{"pause": "pause", "resume": "resume", "run": "run"}[action]
	if verb == "" {
		c.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("A job has no action %q: use pause, resume or run.", action))
		return
	}
	status, body, err := c.callAPI(r, http.MethodPost, "/v1/agents/"+url.PathEscape(agent)+"/jobs/"+url.PathEscape(id)+"/"+verb, nil, 1<<20)
	if err != nil || status >= 300 {
		msg := ""
		if err != nil {
			msg = err.Error()
		} else {
			msg = apiMessage(status, body)
		}
		if status == 0 {
			status = http.StatusBadRequest
		}
		c.errorPage(w, r, status, "The job could not be "+map[string]string{"pause": "paused", "resume": "resumed", "run": "run"}[verb]+": "+msg)
		return
	}
	done := map[string]string{"pause": "paused", "resume": "resumed", "run": "fired now"}[verb]
	http.Redirect(w, r, "/ui/jobs?agent="+url.QueryEscape(agent)+"&done="+url.QueryEscape(id+" "+done), http.StatusSeeOther)
}
