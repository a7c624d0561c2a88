package apitype

import "time"

// TemplateSpec is what a template is built from: Base and Steps (with Env, Workdir), or Dockerfile
// alone. Its JSON form is the body's "spec" in POST /v1/templates.
type TemplateSpec struct {
	// Base is the image the template starts from: an image the engine has, or "template:NAME"
	// for another of the agent's templates (its own layer, without sandpit's). Empty: the
	// daemon's base image.
	Base string `json:"base,omitempty"`
	// Steps run in order, as root, at build time.
	Steps []TemplateStep `json:"steps,omitempty"`
	// Env is set for the later steps, the start command and every session's commands and
	// calls (a request's own env wins).
	Env map[string]string `json:"env,omitempty"`
	// Workdir is the working directory of the later steps and of the start command (an
	// absolute path, created when missing).
	Workdir string `json:"workdir,omitempty"`
	// Start, when set, is run when a session of the template starts.
	Start *TemplateStart `json:"start,omitempty"`
	// Dockerfile, instead of Base and Steps, is a Dockerfile built as is (no build context:
	// COPY and ADD of local files fail). Env, Workdir, Start and Preload still apply.
	Dockerfile string `json:"dockerfile,omitempty"`
	// Preload are Python modules (dotted names, at most 64) a warm session of the template
	// imports before it is claimed (its warm pool's, template_pools), as the default image's
	// fork server imports the daemon's preload; a module the image lacks is skipped. Empty:
	// the daemon's preload (none with fork_server off).
	Preload []string `json:"preload,omitempty"`
}

// TemplateStep is one build step: exactly one field is set.
type TemplateStep struct {
	// Apt installs Debian packages (names, optionally name=version).
	Apt []string `json:"apt,omitempty"`
	// Pip installs Python packages (PEP 508 requirements) through the daemon's index settings.
	Pip []string `json:"pip,omitempty"`
	// File writes a file.
	File *TemplateFile `json:"file,omitempty"`
	// Run is a shell command (/bin/sh -c) run as root.
	Run string `json:"run,omitempty"`
}

// TemplateFile is a file written into the image.
type TemplateFile struct {
	// Path is absolute; Content its bytes (UTF-8 text); Mode its octal mode ("0644" when
	// empty, "0755" for an executable).
	Path    string `json:"path"`
	Content string `json:"content"`
	Mode    string `json:"mode,omitempty"`
}

// TemplateStart is a template's start command: run in the background, as the session's user, when a
// session of the template starts; the session is ready once Ready exits 0 (when set).
type TemplateStart struct {
	// Cmd is a shell command (/bin/sh -c).
	Cmd string `json:"cmd"`
	// Ready is a shell command run every 200 ms until it exits 0 (empty: none).
	Ready string `json:"ready,omitempty"`
	// ReadyTimeoutMS is how long Ready may take to succeed; default 30000, at most 300000.
	ReadyTimeoutMS int64 `json:"ready_timeout_ms,omitempty"`
}

// Template is a stored template: its current version (its latest ready build), or the build
// under way or failed when none is ready.
type Template struct {
	Agent string `json:"agent"`
	Name  string `json:"name"`
	// Version goes up by one with every build of a new spec under the name.
	Version int          `json:"version"`
	Spec    TemplateSpec `json:"spec"`
	// Shared lets every agent start it, as "AGENT/NAME".
	Shared bool `json:"shared"`
	// Hash is the content hash (see Plan); Image the sandbox image sessions start from;
	// LayerImage the template's own layer, the base of templates built on it.
	Hash       string `json:"hash"`
	Image      string `json:"image,omitempty"`
	LayerImage string `json:"layer_image,omitempty"`
	// SizeBytes is the image's size.
	SizeBytes int64  `json:"size_bytes"`
	Status    string `json:"status"`
	// Error says why its build failed; Log is the build's output (its last 64 KiB).
	Error     string    `json:"error,omitempty"`
	Log       string    `json:"log,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Tags are the template's tags, each naming a kept version (GET …/versions lists them);
	// "latest" names Version and is not among them.
	Tags map[string]int `json:"tags,omitempty"`
}

// TemplateVersion is a kept version of a template: a session of NAME:VERSION, or of NAME:TAG
// when a tag names it, starts from its image. A template keeps its current version, the
// template_versions_kept newest before it and every tagged one.
type TemplateVersion struct {
	Version    int          `json:"version"`
	Spec       TemplateSpec `json:"spec"`
	Hash       string       `json:"hash"`
	Image      string       `json:"image"`
	LayerImage string       `json:"layer_image"`
	SizeBytes  int64        `json:"size_bytes"`
	// Shared says other agents may start this version: it was built (or last rebuilt) shared.
	Shared bool `json:"shared"`
	// Tags name this version; Current says it is the template's Version ("latest").
	Tags      []string  `json:"tags,omitempty"`
	Current   bool      `json:"current"`
	CreatedAt time.Time `json:"created_at"`
}

// TemplateVersionList is the answer of GET …/templates/{name}/versions, newest first.
type TemplateVersionList struct {
	Versions []TemplateVersion `json:"versions"`
}

// TemplateTag is the body of PUT …/templates/{name}/tags/{tag}: the version the tag names.
type TemplateTag struct {
	Version int `json:"version"`
}

// TemplateEvent is a build's progress: a step starting (Type "step"), a line of output ("log"), or
// the end ("done", with the template; "error", with Error and the failing step).
type TemplateEvent struct {
	Type string `json:"type"`
	// Step is the 1-based index of the step (Steps+1 is sandpit's own layer), Steps their number.
	Step  int    `json:"step,omitempty"`
	Steps int    `json:"steps,omitempty"`
	Label string `json:"label,omitempty"`
	Line  string `json:"line,omitempty"`
	// Cached says the build reused the images of an earlier build of the same content.
	Cached   bool      `json:"cached,omitempty"`
	Template *Template `json:"template,omitempty"`
	Error    string    `json:"error,omitempty"`
}

// TemplateBuild is the body of POST /v1/agents/{agent}/templates (and POST /v1/templates, for
// agent "default"): the template's name and spec. The answer is the build's progress as NDJSON
// TemplateEvents, ending with one of type "done" (with the template) or "error".
type TemplateBuild struct {
	Name string       `json:"name"`
	Spec TemplateSpec `json:"spec"`
	// Shared lets every agent start it, as "AGENT/NAME".
	Shared bool `json:"shared,omitempty"`
	// NoCache builds every step again, reusing no image of the agent's earlier builds (for
	// steps whose result changes with time, as an apt-get of today's packages).
	NoCache bool `json:"no_cache,omitempty"`
}

// TemplateList is the answer of GET /v1/agents/{agent}/templates: the agent's templates and
// the shared ones of other agents, without their build logs.
type TemplateList struct {
	Templates []Template `json:"templates"`
}
