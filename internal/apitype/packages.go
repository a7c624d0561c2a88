package apitype

import "time"

// InstallRequest is the body of POST /v1/packages.
type InstallRequest struct {
	// Requirements are PEP 508 requirements ("pandas>=2").
	Requirements []string `json:"requirements"`
}

// Installed is the answer of POST /v1/packages (the last line of its stream, of type
// "installed"): each requirement's status and how many failed.
type Installed struct {
	Type         Stream             `json:"type"`
	Dependencies []DependencyStatus `json:"dependencies"`
	Failed       int                `json:"failed"`
}

// Package is a package installed in the daemon's shared dependency store.
type Package struct {
	// Name is the PEP 503 normalised name; Version the installed version.
	Name    string `json:"name"`
	Version string `json:"version"`
	// Requirement is the requirement it was installed for.
	Requirement string `json:"requirement"`
	// SizeBytes is the size of its directory (with the dependencies installed with it); 0 for
	// a package within another's directory, whose size counts it.
	SizeBytes   int64     `json:"size_bytes"`
	InstalledAt time.Time `json:"installed_at"`
	// Within names the package whose install brought this one (a dependency of it, in its
	// directory: satisfying requirements, removed with it); absent for one installed itself.
	Within string `json:"within,omitempty"`
}

// Packages is the answer of GET /v1/packages.
type Packages struct {
	Packages []Package `json:"packages"`
}

// Removed is the answer of DELETE /v1/packages/{name}: the packages removed.
type Removed struct {
	Removed []Package `json:"removed"`
}

// The statuses of a setup step (SetupEvent.Status).
const (
	SetupStarted  = "started"
	SetupProgress = "progress"
	SetupDone     = "done"
	SetupSkipped  = "skipped"
	SetupFailed   = "failed"
)

// SetupEvent is a line of POST /v1/setup's NDJSON answer (and of `sandpit setup --json`): a
// step's status.
type SetupEvent struct {
	// Step names the step: docker, homebrew, docker-cli, colima, colima-start, docker-install,
	// image, sandbox, health; and base-image for the progress of the base image's pull,
	// which the image step makes when the engine does not have it.
	Step string `json:"step"`
	// Status is one of the Setup constants.
	Status string `json:"status"`
	// Message says what happened, or for a failure what to do.
	Message string `json:"message"`
	// Progress is the step's completion from 0 to 1, when known.
	Progress float64 `json:"progress,omitempty"`
}
