package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// PackageInstaller pre-installs dependencies into the shared package store (POST
// /v1/packages); *engine.Service satisfies it. It is not sandbox.Installer, the runtime's
// install for one box that the Service calls.
type PackageInstaller interface {
	Install(ctx context.Context, reqs []string, progress func(sandbox.DependencyStatus)) (sandbox.Installed, error)
}

// PackageManager lists and removes installed dependencies; the Docker runtime satisfies it.
type PackageManager interface {
	// ListPackages returns every installed package.
	ListPackages(ctx context.Context) ([]protocol.Package, error)
	// RemovePackage removes every version of the package name and returns what it removed
	// (none: no such package).
	RemovePackage(ctx context.Context, name string) ([]protocol.Package, error)
}

var installShape = shape{
	fields:  []string{"requirements"},
	expect:  map[string]string{"requirements": `must be a list of requirement strings such as ["pandas>=2"]`},
	example: `{"requirements": ["tinypkg==1.0"]}`,
}

func (a *api) listPackages(w http.ResponseWriter, r *http.Request) {
	list, err := a.packages.ListPackages(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := apitype.Packages{Packages: each(list, packageOf)}
	if out.Packages == nil {
		out.Packages = []apitype.Package{}
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *api) installPackages(w http.ResponseWriter, r *http.Request) {
	var b apitype.InstallRequest
	if err := readBody(w, r, bodySlack, &b, installShape); err != nil {
		writeError(w, err)
		return
	}
	inst, ok := a.ex.(PackageInstaller)
	if !ok {
		writeError(w, fmt.Errorf("%w: this daemon cannot install packages", sandbox.ErrNotReady))
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // installs take minutes; each write is bounded instead
	if !acceptsNDJSON(r.Header.Values("Accept")) {
		out, err := inst.Install(r.Context(), b.Requirements, nil)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, installedOf(out))
		return
	}
	s := newStreamer(w, rc)
	go s.run()
	defer s.close()
	out, err := inst.Install(r.Context(), b.Requirements, func(d sandbox.DependencyStatus) {
		s.emit(sandbox.Event{Stream: sandbox.StreamDependency, Dependency: &d})
	})
	s.close()
	switch {
	case err == nil:
		s.writeLine(installedOf(out))
	case !s.started:
		a.fail(w, r, err)
	default:
		a.logFailure(r, err)
		if e := classify(err); e.status != StatusClientClosedRequest {
			s.writeLine(apitype.StreamLine{Type: apitype.StreamError, Error: &e.detail})
		}
	}
}

func (a *api) removePackage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	removed, err := a.packages.RemovePackage(r.Context(), name)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if len(removed) == 0 {
		writeError(w, &requestError{status: http.StatusNotFound, code: apitype.CodeNotFound,
			msg: fmt.Sprintf("no installed package %q; GET /v1/packages lists them (packages of the image itself cannot be removed; one listed \"within\" another is removed with that one)", name)})
		return
	}
	writeJSON(w, http.StatusOK, apitype.Removed{Removed: each(removed, packageOf)})
}

// installedOf returns an install's answer: each requirement's status and how many failed.
func installedOf(in sandbox.Installed) apitype.Installed {
	return apitype.Installed{Type: apitype.StreamInstalled, Dependencies: each(in.Dependencies, dependencyOf), Failed: len(in.Failed())}
}
