package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Installer pre-installs dependencies; *sandbox.Service satisfies it.
type Installer interface {
	Install(ctx context.Context, reqs []string, progress func(sandbox.DependencyStatus)) (sandbox.Installed, error)
}

// PackageManager lists and removes installed dependencies; the Docker runtime satisfies it.
type PackageManager interface {
	Packages(ctx context.Context, op protocol.Packages) ([]protocol.Package, error)
}

var installShape = shape{
	fields:  []string{"requirements"},
	expect:  map[string]string{"requirements": `must be a list of requirement strings such as ["pandas>=2"]`},
	example: `{"requirements": ["tinypkg==1.0"]}`,
}

// installedLine is the last line of a streamed POST /v1/packages.
type installedLine struct {
	Type         string                     `json:"type"` // "installed"
	Dependencies []sandbox.DependencyStatus `json:"dependencies"`
	Failed       int                        `json:"failed"`
}

func (a *api) listPackages(w http.ResponseWriter, r *http.Request) {
	list, err := a.packages.Packages(r.Context(), protocol.Packages{Op: "list"})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if list == nil {
		list = []protocol.Package{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"packages": list})
}

func (a *api) installPackages(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Requirements []string `json:"requirements"`
	}
	if err := readBody(w, r, bodySlack, &b, installShape); err != nil {
		writeError(w, err)
		return
	}
	inst, ok := a.ex.(Installer)
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
		writeJSON(w, http.StatusOK, installedLine{Type: "installed", Dependencies: out.Dependencies, Failed: len(out.Failed())})
		return
	}
	s := newStreamer(w, rc)
	go s.run()
	defer s.close()
	out, err := inst.Install(r.Context(), b.Requirements, func(d sandbox.DependencyStatus) {
		s.emit(sandbox.Event{Stream: "dependency", Dependency: &d})
	})
	s.close()
	switch {
	case err == nil:
		s.writeLine(installedLine{Type: "installed", Dependencies: out.Dependencies, Failed: len(out.Failed())})
	case !s.started:
		a.fail(w, r, err)
	default:
		a.logFailure(r, err)
		if e := classify(err); e.status != StatusClientClosedRequest {
			s.writeLine(errorLine{Type: "error", Error: e.detail})
		}
	}
}

func (a *api) removePackage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	removed, err := a.packages.Packages(r.Context(), protocol.Packages{Op: "remove", Name: name})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if len(removed) == 0 {
		writeError(w, &requestError{status: http.StatusNotFound, code: CodeNotFound,
			msg: fmt.Sprintf("no installed package %q; GET /v1/packages lists them (packages of the image itself cannot be removed)", name)})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"removed": removed})
}
