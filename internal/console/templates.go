package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/template"
)

// Templates reads the agents' templates; *template.Service satisfies it.
type Templates interface {
	Get(ctx context.Context, agent, name string) (template.Template, error)
	List(ctx context.Context, agent string) ([]template.Template, error)
	Versions(ctx context.Context, agent, name string) ([]template.Version, error)
}

var _ Templates = (*template.Service)(nil)

// The templates' pages: an agent's templates (its own and the shared ones) and one template
// with its spec, its build's error and log, and its kept versions with their tags.

type templateListView struct {
	Agent  string
	Agents []string
	Items  []template.Template
	Error  string
}

func (c *Console) templateListPage(w http.ResponseWriter, r *http.Request, l login) {
	if c.cfg.Templates == nil {
		c.errorPage(w, r, http.StatusNotFound, "This daemon builds no templates.")
		return
	}
	agent, agents, problem := c.pickAgent(r)
	v := templateListView{Agent: agent, Agents: agents, Error: problem}
	if agent != "" {
		items, err := c.cfg.Templates.List(r.Context(), agent)
		if err != nil {
			c.failed(w, r, "The templates of agent "+strconv.Quote(agent), err)
			return
		}
		v.Items = items
	}
	c.render(w, r, http.StatusOK, "template_list", l.page("Templates", "templates", v))
}

func (c *Console) templatePage(w http.ResponseWriter, r *http.Request, l login) {
	if c.cfg.Templates == nil {
		c.errorPage(w, r, http.StatusNotFound, "This daemon builds no templates.")
		return
	}
	agent, name := r.PathValue("agent"), r.PathValue("name")
	t, err := c.cfg.Templates.Get(r.Context(), agent, name)
	if err != nil {
		if errors.Is(err, errclass.NotFound) {
			c.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("Agent %q has no template %q.", agent, name))
			return
		}
		c.failed(w, r, fmt.Sprintf("Template %q of agent %q", name, agent), err)
		return
	}
	versions, err := c.cfg.Templates.Versions(r.Context(), agent, name)
	if err != nil {
		c.failed(w, r, fmt.Sprintf("The versions of template %q of agent %q", name, agent), err)
		return
	}
	c.render(w, r, http.StatusOK, "template", l.page("Template "+t.Name, "templates", templateView{Template: t, Versions: versions}))
}

type templateView struct {
	Template template.Template
	Versions []template.Version
}
