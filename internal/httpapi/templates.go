package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/template"
)

// Templates builds and keeps the agents' templates; *template.Service is one.
type Templates interface {
	Build(ctx context.Context, req template.BuildRequest, emit func(template.Event)) (template.Template, error)
	Get(ctx context.Context, agent, name string) (template.Template, error)
	List(ctx context.Context, agent string) ([]template.Template, error)
	Delete(ctx context.Context, agent, name string, force bool) error
	Versions(ctx context.Context, agent, name string) ([]template.Version, error)
	DeleteVersion(ctx context.Context, agent, name string, version int) error
	Tag(ctx context.Context, agent, name, tag string, version int) error
	Untag(ctx context.Context, agent, name, tag string) error
}

var _ Templates = (*template.Service)(nil)

// routeTemplates registers the template endpoints: under /v1/agents/{agent}/templates, and
// under /v1/templates for agent "default".
func (a *api) routeTemplates() {
	for _, prefix := range []string{"/v1/agents/{agent}/templates", "/v1/templates"} {
		a.handle("POST "+prefix, a.buildTemplate)
		a.handle("GET "+prefix, a.listTemplates)
		a.handle("GET "+prefix+"/{name}", a.getTemplate)
		a.handle("DELETE "+prefix+"/{name}", a.deleteTemplate)
		a.handle("GET "+prefix+"/{name}/versions", a.templateVersions)
		a.handle("DELETE "+prefix+"/{name}/versions/{version}", a.deleteTemplateVersion)
		a.handle("PUT "+prefix+"/{name}/tags/{tag}", a.tagTemplate)
		a.handle("DELETE "+prefix+"/{name}/tags/{tag}", a.untagTemplate)
	}
}

var tagShape = shape{
	flat:    true,
	fields:  []string{"version"},
	expect:  map[string]string{"version": "must be a whole number: a version the template keeps (GET …/versions lists them)"},
	example: `{"version": 3}`,
}

var templateShape = shape{
	fields: []string{"name", "spec", "shared", "no_cache", "base", "steps", "env", "workdir", "start", "preload", "dockerfile",
		"apt", "pip", "file", "run", "path", "content", "mode", "cmd", "ready", "ready_timeout_ms"},
	expect: map[string]string{
		"name":     "must be a string: the template's name",
		"spec":     `must be an object such as {"steps": [{"apt": ["jq"]}]}`,
		"shared":   "must be true or false",
		"no_cache": "must be true or false",
		"steps":    `must be a list of steps such as [{"apt": ["jq"]}, {"pip": ["requests"]}, {"run": "echo hi"}]`,
		"env":      "must be an object of string values",
	},
	example: `{"name": "my-env", "spec": {"steps": [{"apt": ["jq"]}]}}`,
}

// maxTemplateBody bounds a template's build body: its spec, files included.
const maxTemplateBody = template.MaxSpecBytes + 1<<20

// templateAgent is the {agent} of the path, or "default" on /v1/templates.
func templateAgent(r *http.Request) (string, error) {
	if r.PathValue("agent") == "" {
		return "default", nil
	}
	return agentOf(r)
}

// buildTemplate builds a template. With "Accept: application/x-ndjson" the answer is the
// build's progress, one apitype.TemplateEvent per line, ending with "done" or "error"; else
// it is the template (201) once built, or the error. A request refused before its build
// starts (a bad spec, a cap) is answered with its status either way.
func (a *api) buildTemplate(w http.ResponseWriter, r *http.Request) {
	agent, err := templateAgent(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var b apitype.TemplateBuild
	if err := readBody(w, r, maxTemplateBody, &b, templateShape); err != nil {
		writeError(w, err)
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a build takes minutes; each write is bounded instead
	stream := acceptsNDJSON(r.Header.Values("Accept"))
	var (
		mu      sync.Mutex
		started bool
	)
	emit := func(e template.Event) {
		if !stream {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !started {
			started = true
			h := w.Header()
			h.Set("Content-Type", apitype.NDJSONContentType)
			h.Set("Cache-Control", "no-store")
			h.Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusOK)
		}
		line, _ := marshal(e)
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, _ = w.Write(line)
		_ = rc.Flush()
	}
	t, err := a.templates.Build(r.Context(), template.BuildRequest{Agent: agent, Name: b.Name, Spec: b.Spec, Shared: b.Shared, NoCache: b.NoCache}, emit)
	mu.Lock()
	defer mu.Unlock()
	if started {
		return // the stream's last event said how it ended
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, t)
}

func (a *api) listTemplates(w http.ResponseWriter, r *http.Request) {
	agent, err := templateAgent(r)
	if err != nil {
		writeError(w, err)
		return
	}
	list, err := a.templates.List(r.Context(), agent)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apitype.TemplateList{Templates: append([]template.Template{}, list...)})
}

func (a *api) getTemplate(w http.ResponseWriter, r *http.Request) {
	agent, err := templateAgent(r)
	if err != nil {
		writeError(w, err)
		return
	}
	t, err := a.templates.Get(r.Context(), agent, r.PathValue("name"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (a *api) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	agent, err := templateAgent(r)
	force, ferr := forceParam(r)
	if err != nil || ferr != nil {
		writeError(w, firstErr(err, ferr))
		return
	}
	if err := a.templates.Delete(r.Context(), agent, r.PathValue("name"), force); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *api) templateVersions(w http.ResponseWriter, r *http.Request) {
	agent, err := templateAgent(r)
	if err != nil {
		writeError(w, err)
		return
	}
	versions, err := a.templates.Versions(r.Context(), agent, r.PathValue("name"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, apitype.TemplateVersionList{Versions: append([]template.Version{}, versions...)})
}

func (a *api) deleteTemplateVersion(w http.ResponseWriter, r *http.Request) {
	agent, err := templateAgent(r)
	if err != nil {
		writeError(w, err)
		return
	}
	version, err := strconv.Atoi(r.PathValue("version"))
	if err != nil || version < 1 {
		writeError(w, &sandbox.FieldError{Field: "version", Message: fmt.Sprintf("%q is not a version: give its number, as GET …/versions lists them", r.PathValue("version"))})
		return
	}
	if err := a.templates.DeleteVersion(r.Context(), agent, r.PathValue("name"), version); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// tagTemplate is PUT …/templates/{name}/tags/{tag} with {"version": N}: the tag then names
// version N (a session of NAME:TAG starts from it).
func (a *api) tagTemplate(w http.ResponseWriter, r *http.Request) {
	agent, err := templateAgent(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var b apitype.TemplateTag
	if err := readBody(w, r, 1<<10, &b, tagShape); err != nil {
		writeError(w, err)
		return
	}
	name := r.PathValue("name")
	if err := a.templates.Tag(r.Context(), agent, name, r.PathValue("tag"), b.Version); err != nil {
		writeError(w, err)
		return
	}
	t, err := a.templates.Get(r.Context(), agent, name)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (a *api) untagTemplate(w http.ResponseWriter, r *http.Request) {
	agent, err := templateAgent(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := a.templates.Untag(r.Context(), agent, r.PathValue("name"), r.PathValue("tag")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
