package engine

import (
	"github.com/sandpit-dev/sandpit/internal/requirement"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// markSkipped returns d, reported as skipped when the runtime found it present without a
// version: only a requirement whose environment marker is false in the box is satisfied by no
// distribution.
func markSkipped(d sandbox.DependencyStatus) sandbox.DependencyStatus {
	if d.Status == sandbox.DependencyPresent && d.Version == "" {
		if r, err := requirement.Parse(d.Requirement); err == nil && r.Marker != "" {
			d.Status = sandbox.DependencySkipped
		}
	}
	return d
}

// conflicts reports whether d, a failed requirement, is installed but cannot be used with the
// others: the runtime gives it the version it has.
func conflicts(d sandbox.DependencyStatus) bool {
	return d.Status == sandbox.DependencyFailed && d.Version != ""
}
