package sandbox

import (
	"context"
	"time"
)

// DependencyState is the status of one requirement (DependencyStatus.Status).
type DependencyState string

// The statuses of a dependency.
const (
	DependencyPresent   DependencyState = "present"   // already satisfied (by the image or an earlier install); pip did not run
	DependencyInstalled DependencyState = "installed" // installed now
	DependencyFailed    DependencyState = "failed"    // could not be installed, or conflicts with another requirement; Error says why
	DependencySkipped   DependencyState = "skipped"   // its environment marker is false in the box ("foo; python_version < '3'"): not needed, nothing installed
)

// DependencyStatus reports one requirement of a run.
// Its JSON form is the executor protocol's and the ledger's (REST writes apitype's).
type DependencyStatus struct {
	// Requirement is the PEP 508 requirement in canonical form ("tiny-pkg==1.0").
	Requirement string `json:"requirement"`
	// Status is present, installed, skipped or failed.
	Status DependencyState `json:"status"`
	// Version is the version of the package that satisfies it: "" when skipped, and when it
	// failed to install; a failed requirement with a Version is installed but conflicts with
	// another requirement (Error names it).
	Version string `json:"version,omitempty"`
	// DurationMS is how long checking and installing it took, in milliseconds.
	DurationMS int64 `json:"duration_ms"`
	// Error says why it failed: the package and pip's own reason in a few lines.
	Error string `json:"error,omitempty"`
}

// InstallRequest asks a runtime to make requirements importable.
type InstallRequest struct {
	// Requirements are PEP 508 requirements in canonical form (see package requirement).
	Requirements []string `json:"requirements"`
	// Timeout bounds each package's install (per requirement, not the whole request).
	Timeout time.Duration `json:"timeout"`
	// Offline means no install may happen (network policy none): a missing requirement fails
	// with a reason saying so instead of starting pip.
	Offline bool `json:"offline"`
	// Egress decides and dials pip's connections (network "allowlist": the package index's
	// hosts); nil refuses them. It is not sent to the executor.
	Egress EgressDialer `json:"-"`
}

// Installed is the answer to an InstallRequest.
type Installed struct {
	// Dependencies has one status per requirement, in the request's order.
	Dependencies []DependencyStatus `json:"dependencies"`
	// Paths are the directories to put first on the run's sys.path, in order.
	Paths []string `json:"paths"`
}

// Failed returns the statuses that failed.
func (in Installed) Failed() []DependencyStatus {
	var failed []DependencyStatus
	for _, d := range in.Dependencies {
		if d.Status == DependencyFailed {
			failed = append(failed, d)
		}
	}
	return failed
}

// Installer is implemented by runtimes that install dependencies. Install blocks until every
// requirement is present, installed or failed; progress, when not nil, receives each status as
// it is decided (from any goroutine, in order). An error means the system failed (not a
// package); errors wrapping ErrNotReady mean the runtime cannot take the request now.
// The Service calls it with a slot it holds: the install runs in that slot's sandbox.
type Installer interface {
	Install(ctx context.Context, slot int, req InstallRequest, progress func(DependencyStatus)) (Installed, error)
}
