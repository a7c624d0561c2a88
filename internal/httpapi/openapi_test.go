package httpapi_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/jobs"
	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/secrets"
	"github.com/sandpit-dev/sandpit/internal/session"
	"github.com/sandpit-dev/sandpit/internal/setup"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/template"
)

type noPackages struct{}

func (noPackages) ListPackages(context.Context) ([]protocol.Package, error) { return nil, nil }
func (noPackages) RemovePackage(context.Context, string) ([]protocol.Package, error) {
	return nil, nil
}

// appRoutes are served by the daemon around the REST handler (package app).
var appRoutes = []string{"GET /metrics", "POST /mcp", "GET /mcp", "DELETE /mcp"}

// Every route the server registers is in the OpenAPI document, and every operation of the
// document is a route.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc := engine.NewService(&outputRuntime{}, engine.Hooks{Recorder: st}, engine.DefaultConfig(), nil)
	lib := library.New(st, svc, 0)
	h := httpapi.NewHandler(httpapi.Backend{Executor: svc, Library: lib, Jobs: jobs.New(st, lib, svc, jobs.Config{}, nil),
		Ledger: st, Packages: noPackages{}, Knowledge: st, Keys: st, Shares: st, Secrets: secrets.NewKeeper(st, testCipher(t)),
		Setup:     func(context.Context, func(setup.Event)) error { return nil },
		Sessions:  session.New(svc, nil, nil, session.DefaultConfig(), nil),
		Templates: template.NewService(st, nil, template.Config{}, nil)}, nil)
	routes := append(httpapi.Routes(h), appRoutes...)
	for i, r := range routes {
		// A wildcard for the rest of the path ({name...}) is a plain parameter in OpenAPI.
		routes[i] = strings.ReplaceAll(r, "...}", "}")
	}

	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(httpapi.OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.json is not JSON: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Fatalf("openapi %q, want 3.1.x", doc.OpenAPI)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			if method != "parameters" {
				documented = append(documented, strings.ToUpper(method)+" "+path)
			}
		}
	}
	slices.Sort(routes)
	slices.Sort(documented)
	for _, r := range routes {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in openapi.json", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routes, d) {
			t.Errorf("openapi.json documents %s, which no route serves", d)
		}
	}
}
