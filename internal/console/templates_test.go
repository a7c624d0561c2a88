package console_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/template"
)

// fakeTemplates holds agent analyst's template "tools" (a failed rebuild's error, a log with
// markup and ANSI colour) and ops' shared "latex".
type fakeTemplates struct{}

var builtAt = time.Date(2026, 12, 5, 9, 30, 0, 0, time.UTC)

func (fakeTemplates) List(_ context.Context, agent string) ([]template.Template, error) {
	out := []template.Template{{Agent: "ops", Name: "latex", Version: 2, Shared: true, Status: "ready", SizeBytes: 300 << 20,
		Spec: apitype.TemplateSpec{Base: "sandpit-base:bookworm-2"}, UpdatedAt: builtAt}}
	if agent == "analyst" {
		t, _ := fakeTemplates{}.Get(context.Background(), "analyst", "tools")
		out = append([]template.Template{t}, out...)
	}
	return out, nil
}

func (fakeTemplates) Versions(_ context.Context, agent, name string) ([]template.Version, error) {
	if agent != "analyst" || name != "tools" {
		return nil, errclass.New(errclass.NotFound, "template not found")
	}
	return []template.Version{{Version: 2, Image: "sandpit-sandbox:v2", Tags: []string{"<b>stable</b>"}, SizeBytes: 200 << 20, CreatedAt: builtAt}}, nil
}

func (fakeTemplates) Get(_ context.Context, agent, name string) (template.Template, error) {
	if agent != "analyst" || name != "tools" {
		return template.Template{}, fmt.Errorf("agent %q has no template %q: %w", agent, name, errclass.New(errclass.NotFound, "template not found"))
	}
	return template.Template{Agent: "analyst", Name: "tools", Version: 3, Status: "failed", Image: "sandpit-template:abc",
		Error:     "step 2 (pip nosuchpkg) failed: it exited with status 1\nERROR: No matching distribution",
		Log:       "step 1: apt jq\n\x1b[31m<script>alert(1)</script>\x1b[0m\nstep 2: pip nosuchpkg\n",
		Spec:      apitype.TemplateSpec{Base: "sandpit-base:bookworm-2", Steps: []apitype.TemplateStep{{Apt: []string{"jq"}}}, Env: map[string]string{"GREETING": "hi"}},
		UpdatedAt: builtAt}, nil
}

// TestTemplatePages: the console lists an agent's templates with the shared ones, and shows
// one with its spec, its build's error and log, escaped, the log's colours as classes.
func TestTemplatePages(t *testing.T) {
	h := newHarness(t, "")
	c := client(t)
	st, body, _ := get(t, c, h, "/ui/templates?agent=analyst", nil)
	for _, want := range []string{`href="/ui/templates/analyst/tools"`, ">failed <small>step 2 (pip nosuchpkg) failed: it exited with status 1</small>",
		`href="/ui/templates/ops/latex"`, "ops (shared)", "300.0 MiB", `aria-current="page" accesskey="t">Templates`} {
		if st != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("the templates page (%d) lacks %q:\n%s", st, want, body)
		}
	}
	st, body, _ = get(t, c, h, "/ui/templates/analyst/tools", nil)
	for _, want := range []string{`<span id="status">failed</span>`, "No matching distribution", "&#34;GREETING&#34;: &#34;hi&#34;",
		`&lt;script&gt;alert(1)&lt;/script&gt;</span>`, "<code>sandpit-template:abc</code>",
		"<td><code>&lt;b&gt;stable&lt;/b&gt;</code></td>", "<code>sandpit-sandbox:v2</code>"} {
		if st != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("the template's page (%d) lacks %q:\n%s", st, want, body)
		}
	}
	if strings.Contains(body, "<script>alert") || strings.Contains(body, "\x1b") {
		t.Fatalf("the build log reached the page unescaped:\n%s", body)
	}
	if st, body, _ := get(t, c, h, "/ui/templates/analyst/nope", nil); st != http.StatusNotFound || !strings.Contains(body, "no template") {
		t.Fatalf("a template that does not exist: %d\n%s", st, body)
	}
}
