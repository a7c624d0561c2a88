package console_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/console"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// TestResults: a run's HTML result is shown in a frame that may run no script and has no
// origin of its own (its route answers with a sandboxing CSP), its image inline, and the
// value of the last expression is marked; a figure's chart as data is named.
func TestResults(t *testing.T) {
	h := newHarness(t, "")
	str := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	png := chartPNG(t)
	html := `<table><tr><td>Oslo</td></tr></table><script>parent.document.title="pwned"</script>`
	id := h.add(t, record{results: []sandbox.Display{
		{Data: map[string]json.RawMessage{"text/plain": str("<Figure size 640x480 with 1 Axes>"), "image/png": str(base64.StdEncoding.EncodeToString(png)),
			"e2b/chart": json.RawMessage(`{"type": "bar", "title": "Sales", "elements": [{"label": "Oslo", "group": "g", "value": 3.0}]}`)}},
		{IsMainResult: true, Data: map[string]json.RawMessage{"text/plain": str("   city\n0  Oslo"), "text/html": str(html)}},
	}})
	c := client(t)
	status, body, _ := get(t, c, h, "/ui/executions/"+id, nil)
	if status != http.StatusOK {
		t.Fatalf("record page: %d\n%s", status, body)
	}
	frame := console.ResultURL(id, 2, "html")
	for _, want := range []string{`<iframe sandbox="" src="` + frame + `"`, `<img src="` + console.ResultURL(id, 1, "png") + `"`,
		"Value of the last expression", `<span class="chart">bar chart &#34;Sales&#34; (1 bar)</span>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(body, "<table><tr><td>Oslo") {
		t.Error("the result's HTML is inline in the page, not in its frame")
	}
	status, got, resp := get(t, c, h, frame, nil)
	csp := resp.Header.Get("Content-Security-Policy")
	if status != http.StatusOK || got != html || !strings.HasPrefix(csp, "sandbox;") || strings.Contains(csp, "script-src") ||
		!strings.Contains(csp, "frame-ancestors 'self'") || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET %s: %d %q, headers %v", frame, status, got, resp.Header)
	}
	status, got, resp = get(t, c, h, console.ResultURL(id, 1, "png"), nil)
	if status != http.StatusOK || got != string(png) || resp.Header.Get("Content-Type") != "image/png" {
		t.Fatalf("the image: %d, %d bytes, %v", status, len(got), resp.Header)
	}
	if status, _, _ := get(t, c, h, console.ResultURL(id, 3, "html"), nil); status != http.StatusNotFound {
		t.Fatalf("a result that does not exist: %d", status)
	}
}
