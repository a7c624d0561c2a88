package apitype

import (
	"encoding/json"
	"time"
)

// CodeDraft is the body of POST /v1/agents/{agent}/code (with Name) and of PUT and PATCH
// /v1/agents/{agent}/code/{name} (with ExpectedVersion): saved code's source, dependencies,
// schemas and description.
type CodeDraft struct {
	// Name names the code, on create only: 1 to 64 lowercase letters, digits, '-' or '_'.
	Name string `json:"name,omitempty"`
	// Code is the Python source.
	Code string `json:"code"`
	// Dependencies are PEP 508 requirements installed before each run.
	Dependencies []string `json:"dependencies"`
	// InputSchema and OutputSchema are JSON Schemas INPUT and OUTPUT must meet (null: any).
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema"`
	Description  string          `json:"description"`
	// Template names the template whose sandbox runs the code (NAME, or OWNER/NAME of a
	// shared one); absent or "" for the daemon's own image. It must be ready when saved.
	Template string `json:"template,omitempty"`
	// ExpectedVersion, on update, is the version the change is based on (0: any); another
	// answers conflict.
	ExpectedVersion int `json:"expected_version,omitempty"`
}

// Code is one version of an agent's saved code.
type Code struct {
	Agent string `json:"agent"`
	Name  string `json:"name"`
	// Version counts from 1; each change makes a new one.
	Version      int             `json:"version"`
	Code         string          `json:"code"`
	Dependencies []string        `json:"dependencies"`
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema"`
	Description  string          `json:"description"`
	// Template names the template whose sandbox runs this version (absent: the daemon's image).
	Template string `json:"template,omitempty"`
	// CreatedAt is when the code was first saved; UpdatedAt when this version was.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// CodeVersion is an item of GET /v1/agents/{agent}/code/{name}/versions.
type CodeVersion struct {
	Version     int    `json:"version"`
	Description string `json:"description"`
	CodeSHA256  string `json:"code_sha256"`
	// Template names the template whose sandbox runs this version (absent: the daemon's image).
	Template  string    `json:"template,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// CodeVersions is the answer of GET /v1/agents/{agent}/code/{name}/versions.
type CodeVersions struct {
	Versions []CodeVersion `json:"versions"`
}

// CodeSummary is an item of the code listing: saved code without its source and schemas.
type CodeSummary struct {
	Name         string    `json:"name"`
	Version      int       `json:"version"`
	Description  string    `json:"description"`
	Dependencies []string  `json:"dependencies"`
	Template     string    `json:"template,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// CodeList is the answer of GET /v1/agents/{agent}/code: a page of summaries and the cursor
// of the next page ("" after the last).
type CodeList struct {
	Code       []CodeSummary `json:"code"`
	NextCursor string        `json:"next_cursor"`
}

// CodeDeleted is the answer of DELETE /v1/agents/{agent}/code/{name}: its name and the IDs of
// the jobs that ran it, now disabled (with ?force=true).
type CodeDeleted struct {
	Deleted      string   `json:"deleted"`
	DisabledJobs []string `json:"disabled_jobs"`
}

// JobDraft is the body of POST /v1/agents/{agent}/jobs (and, whole, of PUT
// /v1/agents/{agent}/jobs/{id}; PATCH takes any of its fields).
type JobDraft struct {
	// CodeName is the saved code the job runs; CodeVersion pins a version (0: the latest).
	CodeName    string `json:"code_name"`
	CodeVersion int    `json:"code_version"`
	// Schedule is a cron spec ("*/5 * * * *", "@hourly"); Timezone the IANA zone it is read
	// in ("": UTC).
	Schedule string `json:"schedule"`
	Timezone string `json:"timezone"`
	// Input is the JSON value each run gets as INPUT.
	Input json.RawMessage `json:"input"`
	// TimeoutMS is each run's timeout in milliseconds; nil means the daemon's default.
	TimeoutMS *int64 `json:"timeout_ms"`
	// Enabled, when not nil, says whether the job fires (nil: true).
	Enabled *bool `json:"enabled"`
	// Charts is each run's chart setting (nil: the daemon's).
	Charts *bool `json:"charts"`
	// Secrets names the secrets each run may use (docs/secrets.md); checked as the job is
	// saved and at each fire.
	Secrets []string `json:"secrets,omitempty"`
	// Overlap is "skip" (default) or "queue"; CatchUp is "skip" (default) or "once".
	Overlap     string `json:"overlap"`
	CatchUp     string `json:"catch_up"`
	Description string `json:"description"`
	// Files are the input files of each run.
	Files []InputFile `json:"files,omitempty"`
}

// Job is an agent's schedule for running saved code.
type Job struct {
	// ID is "job_" and 26 base32 letters.
	ID    string `json:"id"`
	Agent string `json:"agent"`
	// CodeName is the saved code the job runs; CodeVersion pins a version (nil: the latest).
	CodeName    string `json:"code_name"`
	CodeVersion *int   `json:"code_version"`
	// Schedule is the cron spec; Timezone the IANA zone it is read in.
	Schedule string `json:"schedule"`
	Timezone string `json:"timezone"`
	// Input is the JSON value each run gets as INPUT.
	Input json.RawMessage `json:"input"`
	// TimeoutMS is each run's timeout in milliseconds; null means the daemon's default.
	TimeoutMS *int64 `json:"timeout_ms"`
	Enabled   bool   `json:"enabled"`
	// Files lists the input files each fire's run gets (empty when none).
	Files []JobFile `json:"files"`
	// Charts is each run's chart setting (nil: the daemon's).
	Charts *bool `json:"charts"`
	// Secrets names the secrets each run may use (absent when none; never their values).
	Secrets []string `json:"secrets,omitempty"`
	// Overlap is "skip" or "queue"; CatchUp is "skip" or "once".
	Overlap     string `json:"overlap"`
	CatchUp     string `json:"catch_up"`
	Description string `json:"description"`
	// NextRunAt is the next scheduled fire; null while the job is disabled.
	NextRunAt *time.Time `json:"next_run_at"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
}

// JobFile describes one of a job's input files.
type JobFile struct {
	Name      string `json:"name"`
	SizeBytes int64  `json:"size_bytes"`
}

// JobList is the answer of GET /v1/agents/{agent}/jobs.
type JobList struct {
	Jobs       []Job  `json:"jobs"`
	NextCursor string `json:"next_cursor"`
}

// Fire is one entry of a job's history: a time its schedule came due, and what happened.
type Fire struct {
	ID    int64  `json:"id"`
	JobID string `json:"job_id"`
	Agent string `json:"agent"`
	// Kind is "scheduled", "manual", "missed" or "catch_up".
	Kind string `json:"kind"`
	// Status is "running", "started", "skipped", "failed" or "missed".
	Status string `json:"status"`
	// ScheduledAt is the fire's time by the schedule; FiredAt when the scheduler handled it.
	ScheduledAt time.Time `json:"scheduled_at"`
	FiredAt     time.Time `json:"fired_at"`
	// Missed counts the fires a "missed" or "catch_up" entry stands for.
	Missed      int    `json:"missed,omitempty"`
	ExecutionID string `json:"execution_id,omitempty"`
	Reason      string `json:"reason,omitempty"`
	// Outcome is the execution's outcome once it has finished.
	Outcome string `json:"outcome,omitempty"`
	// Daemon is the ID of the daemon that handled the fire (its daemon_id; absent for fires
	// recorded before daemons had IDs).
	Daemon string `json:"daemon,omitempty"`
}

// FireList is the answer of GET /v1/agents/{agent}/jobs/{id}/history.
type FireList struct {
	Fires      []Fire `json:"fires"`
	NextCursor string `json:"next_cursor"`
}

// The statuses of a ledger record (Execution.Status).
const (
	StatusRunning  = "running"
	StatusFinished = "finished"
)

// Execution is one record of the ledger (GET /v1/executions/{id}): the run's result and the
// request that started it. While Status is "running", Outcome is empty and the result fields
// are zero.
type Execution struct {
	Result
	// Status is "running" or "finished".
	Status string `json:"status"`
	// CodeSHA256 is the hex SHA-256 of the code that ran; Code is that code.
	CodeSHA256 string `json:"code_sha256"`
	Code       string `json:"code,omitempty"`
	// Input is the JSON value the code got as INPUT.
	Input json.RawMessage `json:"input"`
	// EndedAt is when the run ended; null while it runs.
	EndedAt *time.Time `json:"ended_at"`
	// Daemon is the ID of the daemon that ran it (its daemon_id; absent for records made
	// before daemons had IDs).
	Daemon string `json:"daemon,omitempty"`
	// InputFiles are the input files the request handed the run: their names, sizes and
	// SHA-256, not their bytes (absent when it had none).
	InputFiles []InputFileInfo `json:"input_files,omitempty"`
}

// InputFileInfo describes an input file a run was given (Execution.InputFiles).
type InputFileInfo struct {
	Name      string `json:"name"`
	SizeBytes int64  `json:"size_bytes"`
	SHA256    string `json:"sha256"`
}

// ExecutionSummary is an item of GET /v1/executions: an Execution without its code, input and
// outputs, with the start of its stdout and the end of its stderr.
type ExecutionSummary struct {
	ID            string     `json:"id"`
	Agent         string     `json:"agent"`
	Status        string     `json:"status"`
	Outcome       Outcome    `json:"outcome"`
	Success       bool       `json:"success"`
	ExitCode      int        `json:"exit_code"`
	Reason        string     `json:"reason,omitempty"`
	DurationMS    int64      `json:"duration_ms"`
	TimeoutMS     int64      `json:"timeout_ms"`
	StartedAt     time.Time  `json:"started_at"`
	EndedAt       *time.Time `json:"ended_at"`
	CodeSHA256    string     `json:"code_sha256"`
	Start         Start      `json:"start,omitempty"`
	StdoutPreview string     `json:"stdout_preview"`
	StderrPreview string     `json:"stderr_preview"`
	Origin
}

// ExecutionList is the answer of GET /v1/executions.
type ExecutionList struct {
	Executions []ExecutionSummary `json:"executions"`
	NextCursor string             `json:"next_cursor"`
}

// KnowledgeList is the answer of a knowledge listing (GET /v1/agents/{agent}/memories, facts,
// documents, graph/nodes, graph/edges, results): items whose fields depend on the kind.
type KnowledgeList struct {
	Items      []json.RawMessage `json:"items"`
	NextCursor string            `json:"next_cursor"`
}

// Deleted is the answer of a DELETE that names what it deleted (a job, a knowledge item).
type Deleted struct {
	Deleted string `json:"deleted"`
}

// ScheduledJob is a job with its next fire times: the answer of creating, reading, changing,
// pausing and resuming a job.
type ScheduledJob struct {
	Job
	// NextFires are the next five fire times (UTC), empty while the job is disabled.
	NextFires []time.Time `json:"next_fires"`
}
