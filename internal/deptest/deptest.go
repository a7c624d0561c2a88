// Package deptest checks, in a test, which packages a program or a package links: a test
// fails when a package gains a dependency it must not have (the executor anything beyond the
// standard library and its protocol, the REST client the daemon's storage, the CLI's own code
// the store). Tailscale's tstest/deptest is the model.
package deptest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Module is sandpit's module path; Allowed and Denied name sandpit's packages under it.
const Module = "github.com/sandpit-dev/sandpit"

// Check lists the dependencies of pkg ("./cmd/sandpit-executor", a path relative to the test's
// directory or an import path) with `go list -deps`, for the test's GOOS and GOARCH, and
// fails t for each one that is not in the standard library and not in allowed (import paths;
// an entry ending in "/..." allows a whole tree). The failure names the import chain that
// brought the package in.
func Check(t *testing.T, pkg string, allowed ...string) {
	t.Helper()
	deps := mustList(t, pkg)
	for _, d := range deps {
		if d.Standard || permitted(d.ImportPath, allowed) {
			continue
		}
		t.Errorf("%s links %s, which it must not (allowed beyond the standard library: %s); it comes in through %s",
			pkg, d.ImportPath, strings.Join(allowed, ", "), importers(deps, d.ImportPath))
	}
}

// Deny fails t for each package of denied (import paths) that pkg links, directly or through
// other packages, naming the import chain's last step as Check does.
func Deny(t *testing.T, pkg string, denied ...string) {
	t.Helper()
	deps := mustList(t, pkg)
	for _, d := range deps {
		if slices.Contains(denied, d.ImportPath) {
			t.Errorf("%s links %s, which it must not; it comes in through %s", pkg, d.ImportPath, importers(deps, d.ImportPath))
		}
	}
}

// DenyImport fails t for each package of denied (import paths) that pkg's own non-test files
// import; what pkg links through its other imports is not checked (see Deny).
func DenyImport(t *testing.T, pkg string, denied ...string) {
	t.Helper()
	deps := mustList(t, pkg)
	self := deps[len(deps)-1] // go list -deps lists a package after its dependencies
	for _, imp := range self.Imports {
		if slices.Contains(denied, imp) {
			t.Errorf("%s imports %s, which it must not", self.ImportPath, imp)
		}
	}
}

// mustList lists pkg and its dependencies, failing t when go list fails or lists nothing.
func mustList(t *testing.T, pkg string) []dep {
	t.Helper()
	deps, err := list(pkg)
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	if len(deps) == 0 {
		t.Fatalf("go list -deps %s listed no package", pkg)
	}
	return deps
}

// dep is what `go list -json` says of a package that Check uses.
type dep struct {
	ImportPath string
	Standard   bool
	Imports    []string
}

func list(pkg string) ([]dep, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, errors.New("the go command is not on PATH; the dependency check needs it")
	}
	cmd := exec.Command(goBin, "list", "-deps", "-json=ImportPath,Standard,Imports", pkg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, errors.New(strings.TrimSpace(stderr.String()) + " (" + err.Error() + ")")
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	var deps []dep
	for {
		var d dep
		if err := dec.Decode(&d); err == io.EOF {
			return deps, nil
		} else if err != nil {
			return nil, err
		}
		deps = append(deps, d)
	}
}

func permitted(path string, allowed []string) bool {
	for _, a := range allowed {
		if tree, ok := strings.CutSuffix(a, "/..."); ok {
			if path == tree || strings.HasPrefix(path, tree+"/") {
				return true
			}
		} else if path == a {
			return true
		}
	}
	return false
}

// importers names the packages of deps that import path directly.
func importers(deps []dep, path string) string {
	var by []string
	for _, d := range deps {
		if slices.Contains(d.Imports, path) {
			by = append(by, d.ImportPath)
		}
	}
	if len(by) == 0 {
		return "the package itself"
	}
	return strings.Join(by, ", ")
}
