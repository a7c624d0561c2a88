package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/schedule"
	"github.com/sandpit-dev/sandpit/internal/store"
)

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

// ---- jobs ----

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

func (c *Console) jobsPage(w http.ResponseWriter, r *http.Request, s session) {
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
	c.render(w, r, http.StatusOK, "jobs", s.page("Jobs", "jobs", v))
}

// jobAction pauses, resumes or runs a job now, through the REST API.
func (c *Console) jobAction(w http.ResponseWriter, r *http.Request, s session) {
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

// ---- code ----

type codeListView struct {
	Agent  string
	Agents []string
	Items  []store.Code
	Filter string
	Error  string
}

func (c *Console) codeListPage(w http.ResponseWriter, r *http.Request, s session) {
	if c.cfg.Code == nil {
		c.errorPage(w, r, http.StatusNotFound, "This daemon keeps no code library.")
		return
	}
	agent, agents, problem := c.pickAgent(r)
	v := codeListView{Agent: agent, Agents: agents, Error: problem, Filter: r.URL.Query().Get("filter")}
	if agent != "" {
		items, _, err := c.cfg.Code.List(r.Context(), agent, v.Filter, store.Page{Limit: store.MaxLimit})
		if err != nil {
			c.failed(w, r, "The code of agent "+strconv.Quote(agent), err)
			return
		}
		v.Items = items
	}
	c.render(w, r, http.StatusOK, "code_list", s.page("Code", "code", v))
}

type codeView struct {
	Code       store.Code
	Versions   []store.CodeVersion
	Diff       []DiffLine
	DiffA      int
	DiffB      int
	Input      string
	RunError   string
	Violations []library.Violation
	RunURL     string
}

func (c *Console) codePage(w http.ResponseWriter, r *http.Request, s session) {
	c.showCode(w, r, s, http.StatusOK, codeView{})
}

// showCode renders the code page of the path's code, with v's form state.
func (c *Console) showCode(w http.ResponseWriter, r *http.Request, s session, status int, v codeView) {
	if c.cfg.Code == nil {
		c.errorPage(w, r, http.StatusNotFound, "This daemon keeps no code library.")
		return
	}
	agent, name := r.PathValue("agent"), r.PathValue("name")
	q := r.URL.Query()
	version, _ := strconv.Atoi(q.Get("version"))
	code, err := c.cfg.Code.Get(r.Context(), agent, name, version)
	if err != nil {
		c.failed(w, r, fmt.Sprintf("Code %q of agent %q (version %s)", name, agent, q.Get("version")), err)
		return
	}
	versions, err := c.cfg.Code.Versions(r.Context(), agent, name)
	if err != nil {
		c.failed(w, r, fmt.Sprintf("The versions of code %q", name), err)
		return
	}
	v.Code, v.Versions = code, versions
	v.RunURL = "/ui/code/" + url.PathEscape(agent) + "/" + url.PathEscape(name) + "/run"
	if v.Input == "" {
		v.Input = "null"
		if hasJSON(code.InputSchema) {
			v.Input = "{}"
		}
	}
	a, errA := strconv.Atoi(q.Get("a"))
	b, errB := strconv.Atoi(q.Get("b"))
	if errA == nil && errB == nil && a != b {
		ca, err1 := c.cfg.Code.Get(r.Context(), agent, name, a)
		cb, err2 := c.cfg.Code.Get(r.Context(), agent, name, b)
		if err1 != nil || err2 != nil {
			c.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("Code %q has no version %d or %d to compare.", name, a, b))
			return
		}
		v.Diff, v.DiffA, v.DiffB = LineDiff(ca.Code, cb.Code), a, b
	}
	c.render(w, r, status, "code", s.page(name+" – code", "code", v))
}

// runCode runs saved code with the form's input through the REST API, then shows the
// execution's record; on a refusal (the input breaks the schema, ...) the form again with why.
func (c *Console) runCode(w http.ResponseWriter, r *http.Request, s session) {
	agent, name := r.PathValue("agent"), r.PathValue("name")
	input := r.PostFormValue("input")
	v := codeView{Input: input}
	if strings.TrimSpace(input) == "" {
		input = "null"
	}
	if !json.Valid([]byte(input)) {
		v.RunError = "The input is not valid JSON: write a JSON value such as {\"n\": 3}, or null."
		c.showCode(w, r, s, http.StatusBadRequest, v)
		return
	}
	body := map[string]any{"input": json.RawMessage(input)}
	if ver, err := strconv.Atoi(r.PostFormValue("version")); err == nil && ver > 0 {
		body["version"] = ver
	}
	raw, _ := json.Marshal(body)
	cfg := c.cfg.Engine.Config()
	limit := int64(cfg.Limits.StdoutBytes+cfg.Limits.StderrBytes+cfg.Limits.OutputBytes)*2 + 8<<20
	status, answer, err := c.callAPI(r, http.MethodPost, "/v1/agents/"+url.PathEscape(agent)+"/code/"+url.PathEscape(name)+"/run", raw, limit)
	if err != nil {
		v.RunError = err.Error()
		c.showCode(w, r, s, http.StatusBadRequest, v)
		return
	}
	var res struct {
		ID    string `json:"id"`
		Error struct {
			Message    string              `json:"message"`
			Violations []library.Violation `json:"violations"`
		} `json:"error"`
	}
	_ = json.Unmarshal(answer, &res)
	if status >= 300 || res.ID == "" {
		v.RunError = apiMessage(status, answer)
		v.Violations = res.Error.Violations
		if status < 400 {
			status = http.StatusBadGateway
		}
		c.showCode(w, r, s, status, v)
		return
	}
	http.Redirect(w, r, "/ui/executions/"+url.PathEscape(res.ID), http.StatusSeeOther)
}

// ---- health ----

type healthView struct {
	Ready       string
	Stats       engine.Stats
	Config      engine.Config
	ForkServer  ForkServer
	Resets      int64
	HasResets   bool
	Starts      map[string]int
	StartsOf    int
	Errors      []store.ExecutionSummary
	LedgerError string
}

func (c *Console) healthPage(w http.ResponseWriter, r *http.Request, s session) {
	v := healthView{Stats: c.cfg.Engine.Stats(), Config: c.cfg.Engine.Config(), ForkServer: c.cfg.ForkServer, Starts: map[string]int{}}
	if err := c.cfg.Engine.Ready(r.Context()); err != nil {
		v.Ready = err.Error()
	}
	if c.cfg.Resets != nil {
		v.Resets, v.HasResets = c.cfg.Resets(), true
	}
	if c.cfg.Ledger != nil {
		recent, _, err := c.cfg.Ledger.ListExecutions(r.Context(), store.ExecutionFilter{}, store.Page{Limit: store.MaxLimit})
		if err == nil {
			for _, e := range recent {
				if e.Start != "" {
					v.Starts[string(e.Start)]++
					v.StartsOf++
				}
			}
			v.Errors, _, err = c.cfg.Ledger.ListExecutions(r.Context(), store.ExecutionFilter{Outcome: sandbox.OutcomeSandboxError}, store.Page{Limit: 10})
		}
		if err != nil {
			c.log.Error("console: health", "error", err)
			v.LedgerError = "Reading the ledger failed; the daemon log has the details."
		}
	}
	c.render(w, r, http.StatusOK, "health", s.page("Health", "health", v))
}
