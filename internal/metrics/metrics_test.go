package metrics

import (
	"context"
	"io"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

type nopRecorder struct{}

func (nopRecorder) Begin(context.Context, sandbox.Spec, sandbox.Result) error { return nil }
func (nopRecorder) Finish(context.Context, sandbox.Result) error              { return nil }
func (nopRecorder) Discard(context.Context, string) error                     { return nil }

// A program chooses its call names: they must not become label values.
func TestCallMethodsAreBounded(t *testing.T) {
	m := New()
	m.Watch(func() engine.Stats { return engine.Stats{Slots: 4} }, func() int64 { return 0 })
	rec := m.Recorder(nopRecorder{})
	var calls []sandbox.CallRecord
	for i := range 100 {
		calls = append(calls, sandbox.CallRecord{Method: strings.Repeat("x", i), OK: false})
	}
	calls = append(calls, sandbox.CallRecord{Method: "get_facts", OK: true})
	if err := rec.Finish(context.Background(), sandbox.Result{Origin: sandbox.Origin{Source: "api"}, Outcome: "ok", Start: "fork", Calls: calls,
		SecretUses: []sandbox.SecretUse{{Secret: "TOKEN", Added: true}, {Secret: "TOKEN"}, {Secret: "GH", Added: true}}}); err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(w.Body)
	if n := strings.Count(string(body), "sandpit_agent_calls_total{"); n != 2 {
		t.Fatalf("%d call series, want 2 (get_facts and other):\n%s", n, body)
	}
	for _, want := range []string{`sandpit_agent_calls_total{method="other",result="error"} 100`, `sandpit_executions_total{outcome="ok",source="api"} 1`, "sandpit_slots 4", `sandpit_execution_starts_total{start="fork"} 1`,
		`sandpit_secret_uses_total{added="true"} 2`, `sandpit_secret_uses_total{added="false"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("missing %q", want)
		}
	}
}

// TestDocsNameEveryMetric: the API reference's list of metrics (docs/api.md) names each
// sandpit_ metric this package defines (it had left out sandpit_execution_starts_total and sandpit_slots). Vectors
// without observations are not gathered, so the names are read from the source.
func TestDocsNameEveryMetric(t *testing.T) {
	readme, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`Name: "(sandpit_[a-z_]+)"`).FindAllStringSubmatch(string(src), -1)
	if len(names) < 10 {
		t.Fatalf("found %d metric names in metrics.go, want at least 10", len(names))
	}
	for _, n := range names {
		if !regexp.MustCompile("`" + n[1] + "[`{]").Match(readme) {
			t.Errorf("docs/api.md does not name the metric %s", n[1])
		}
	}
}

// TestCapacityGauge: sandpit_sandboxes_fit is the runtime's capacity, NaN when unknown.
func TestCapacityGauge(t *testing.T) {
	for _, c := range []struct {
		fit  *int
		want string
	}{{new(7), "sandpit_sandboxes_fit 7\n"}, {nil, "sandpit_sandboxes_fit NaN\n"}} {
		m := New()
		m.WatchCapacity(func(context.Context) apitype.Capacity { return apitype.Capacity{Fit: c.fit} })
		w := httptest.NewRecorder()
		m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
		if body, _ := io.ReadAll(w.Body); !strings.Contains(string(body), c.want) {
			t.Errorf("missing %q:\n%s", c.want, body)
		}
	}
}

// TestKubernetesAPICounter: sandpit_kubernetes_api_requests_total is the runtime's count of
// requests, read at each scrape.
func TestKubernetesAPICounter(t *testing.T) {
	m := New()
	n := uint64(3)
	m.WatchKubernetesAPI(func() uint64 { return n })
	for _, want := range []string{"sandpit_kubernetes_api_requests_total 3\n", "sandpit_kubernetes_api_requests_total 12\n"} {
		w := httptest.NewRecorder()
		m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
		if body, _ := io.ReadAll(w.Body); !strings.Contains(string(body), want) {
			t.Errorf("missing %q:\n%s", want, body)
		}
		n = 12
	}
}
