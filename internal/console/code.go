package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// The saved code's pages: the list of an agent's code, one code with its versions and
// diffs, and the form that runs it.

type codeListView struct {
	Agent  string
	Agents []string
	Items  []store.Code
	Filter string
	Error  string
}

func (c *Console) codeListPage(w http.ResponseWriter, r *http.Request, l login) {
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
	c.render(w, r, http.StatusOK, "code_list", l.page("Code", "code", v))
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

func (c *Console) codePage(w http.ResponseWriter, r *http.Request, l login) {
	c.showCode(w, r, l, http.StatusOK, codeView{})
}

// showCode renders the code page of the path's code, with v's form state.
func (c *Console) showCode(w http.ResponseWriter, r *http.Request, l login, status int, v codeView) {
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
		// An input the schema accepts, for the person to edit ({} broke schemas with required
		// properties); null without a schema.
		v.Input = "null"
		if hasJSON(code.InputSchema) {
			v.Input = "{}"
			if ex := library.Example(code.InputSchema); ex != nil {
				v.Input = string(ex)
			}
		}
	}
	a, errA := strconv.Atoi(q.Get("a"))
	b, errB := strconv.Atoi(q.Get("b"))
	// The comparison offered by default is the shown version's changes: from the version
	// before it (it compared the latest version with itself).
	v.DiffA, v.DiffB = previousVersion(versions, code.Version), code.Version
	if errA == nil && errB == nil && a != b {
		ca, err1 := c.cfg.Code.Get(r.Context(), agent, name, a)
		cb, err2 := c.cfg.Code.Get(r.Context(), agent, name, b)
		if err1 != nil || err2 != nil {
			c.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("Code %q has no version %d or %d to compare.", name, a, b))
			return
		}
		v.Diff, v.DiffA, v.DiffB = LineDiff(ca.Code, cb.Code), a, b
	}
	c.render(w, r, status, "code", l.page(name+" – code", "code", v))
}

// runCode runs saved code with the form's input through the REST API, then shows the
// execution's record; on a refusal (the input breaks the schema, ...) the form again with why.
func (c *Console) runCode(w http.ResponseWriter, r *http.Request, l login) {
	agent, name := r.PathValue("agent"), r.PathValue("name")
	input := r.PostFormValue("input")
	v := codeView{Input: input}
	if strings.TrimSpace(input) == "" {
		input = "null"
	}
	if !json.Valid([]byte(input)) {
		v.RunError = "The input is not valid JSON: write a JSON value such as {\"n\": 3}, or null."
		c.showCode(w, r, l, http.StatusBadRequest, v)
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
		c.showCode(w, r, l, http.StatusBadRequest, v)
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
		c.showCode(w, r, l, status, v)
		return
	}
	http.Redirect(w, r, "/ui/executions/"+url.PathEscape(res.ID), http.StatusSeeOther)
}

// previousVersion returns the newest of versions older than v, v itself when there is none.
func previousVersion(versions []store.CodeVersion, v int) int {
	prev := v
	for _, cv := range versions {
		if cv.Version < v && (prev == v || cv.Version > prev) {
			prev = cv.Version
		}
	}
	return prev
}
