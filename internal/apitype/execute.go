package apitype

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"
)

// ExecuteRequest is the body of POST /v1/executions.
type ExecuteRequest struct {
	// Code is the Python source to run (UTF-8).
	Code string `json:"code"`
	// Input is the JSON value the code sees as INPUT; nil sends none (null).
	Input json.RawMessage `json:"input,omitempty"`
	// TimeoutMS is the wall-clock limit in milliseconds; nil means the daemon's default.
	TimeoutMS *int64 `json:"timeout_ms,omitempty"`
	// Agent is the namespace of the run; empty means "default".
	Agent string `json:"agent,omitempty"`
	// Template runs the code in a fresh session of the agent's template (NAME, or AGENT/NAME
	// of a shared one), closed after the run; "" runs it in a warm slot of the daemon's own
	// image.
	Template string `json:"template,omitempty"`
	// Dependencies are PEP 508 requirements installed (when missing) before the run.
	Dependencies []string `json:"dependencies,omitempty"`
	// NetworkAllow, with the daemon's network "allowlist", narrows its network_allow for this
	// run: host names, IP addresses and CIDRs within the daemon's list (nil: the daemon's list).
	NetworkAllow []string `json:"network_allow,omitempty"`
	// Secrets names the secrets the run may use (docs/secrets.md): its code sees each as the
	// environment variable of its name holding "sandpit-secret:NAME", which the egress proxy
	// replaces with the value in a request to one of the secret's hosts.
	Secrets []string `json:"secrets,omitempty"`
	RunFiles
}

// RunFiles are the fields about files of a request that runs code (an execution, a saved-code
// run).
type RunFiles struct {
	// Files are written into the run's working directory before its code starts. The daemon's
	// caps on their count and bytes are in GET /v1/limits.
	Files []InputFile `json:"files,omitempty"`
	// Charts, when not nil, says whether open matplotlib figures and PIL images shown are saved
	// as output files (figure-1.png, …); nil means the daemon's setting.
	Charts *bool `json:"charts,omitempty"`
	// InlineFiles asks for the bytes of each output file of at most MaxInlineFileBytes in the
	// answer (File.ContentBase64); larger ones are fetched from
	// GET /v1/executions/{id}/files/{name}.
	InlineFiles bool `json:"inline_files,omitempty"`
}

// InputFile is a file handed to a run.
type InputFile struct {
	// Name is its path relative to the run's working directory ("data.csv", "in/a.json"):
	// relative, with "/" between parts, no "." or ".." part, at most 255 bytes.
	Name string `json:"name"`
	// Content is its bytes: the text itself with Encoding "utf-8", standard base64 with
	// "base64".
	Content string `json:"content"`
	// Encoding is "utf-8" (also when empty) or "base64".
	Encoding string `json:"encoding,omitempty"`
}

// The encodings of InputFile.Content.
const (
	EncodingUTF8   = "utf-8"
	EncodingBase64 = "base64"
)

// CodeRun is the body of POST /v1/agents/{agent}/code/{name}/run.
type CodeRun struct {
	// Input is the JSON value the code sees as INPUT (checked against its input schema).
	Input json.RawMessage `json:"input"`
	// TimeoutMS is the wall-clock limit in milliseconds; nil means the daemon's default.
	TimeoutMS *int64 `json:"timeout_ms"`
	// Version runs that version; 0 runs the latest.
	Version int `json:"version"`
	// Secrets names the secrets the run may use (as ExecuteRequest.Secrets).
	Secrets []string `json:"secrets,omitempty"`
	RunFiles
}

// MaxInlineFileBytes is the largest output file whose bytes an answer holds inline
// (inline_files): 1 MiB. MaxInlineBytes caps the bytes of all the output files one answer
// holds inline: 4 MiB; files past it are listed without content_base64.
const (
	MaxInlineFileBytes = 1 << 20
	MaxInlineBytes     = 4 << 20
)

// Outcome is the single verdict of an execution.
type Outcome string

// The outcomes of an execution; docs/api.md says what each means.
const (
	OutcomeOK              Outcome = "ok"
	OutcomeError           Outcome = "error"
	OutcomeTimeout         Outcome = "timeout"
	OutcomeMemoryLimit     Outcome = "memory_limit"
	OutcomeOutputLimit     Outcome = "output_limit"
	OutcomeOutputInvalid   Outcome = "output_invalid"
	OutcomeDependencyError Outcome = "dependency_error"
	OutcomeKilled          Outcome = "killed"
	OutcomeRejected        Outcome = "rejected"
	OutcomeSandboxError    Outcome = "sandbox_error"
)

// Result is the record of one finished execution: the answer of a run, and the body of
// GET /v1/executions/{id} (as Execution).
type Result struct {
	// ID identifies the execution ("ex_" followed by 26 lowercase base32 characters).
	ID    string `json:"id"`
	Agent string `json:"agent"`
	// Outcome is the single verdict; Success is true exactly when it is "ok".
	Outcome Outcome `json:"outcome"`
	Success bool    `json:"success"`
	// ExitCode is the program's exit status; 128+N when it died from signal N; -1 when there is
	// no exit status. Signal is the number of the signal that ended it, 0 when none did.
	ExitCode int `json:"exit_code"`
	Signal   int `json:"signal"`
	// Reason explains any outcome other than "ok" in one sentence naming the limit involved.
	Reason string `json:"reason,omitempty"`
	// OOMKills is how many processes the box's out-of-memory killer killed during the run.
	OOMKills int `json:"oom_kills"`
	// Stdout and Stderr hold what the program wrote, up to their caps, as valid UTF-8; the
	// Truncated flags say a stream passed its cap and was cut there.
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	// Output is the JSON value of the program's global OUTPUT, or null when it set none.
	Output json.RawMessage `json:"output"`
	// DurationMS is the program's wall-clock time; TimeoutMS the limit that applied (ms).
	DurationMS int64 `json:"duration_ms"`
	TimeoutMS  int64 `json:"timeout_ms"`
	// StartedAt is when the execution was accepted (RFC 3339, UTC).
	StartedAt time.Time `json:"started_at"`
	// Start is StartFork or StartCold; empty when the program never started.
	Start Start `json:"start,omitempty"`
	// Origin says where the execution came from.
	Origin
	// Dependencies reports each requested requirement (absent when none were requested);
	// InstallMS is how long checking and installing them took, in milliseconds.
	Dependencies []DependencyStatus `json:"dependencies,omitempty"`
	InstallMS    int64              `json:"install_ms,omitempty"`
	// Calls lists the agent.* calls the program made; Logs its agent.log lines, in order.
	Calls []CallRecord `json:"calls,omitempty"`
	Logs  []LogLine    `json:"logs,omitempty"`
	// Files lists the run's output files, in name order; FilesSkipped the entries of the
	// working directory that were not collected; FilesTruncated that more were left out.
	Files          []File        `json:"files,omitempty"`
	FilesSkipped   []SkippedFile `json:"files_skipped,omitempty"`
	FilesTruncated bool          `json:"files_truncated,omitempty"`
	// Egress lists the outbound connections the program (and the install of its dependencies,
	// marked Install, first) asked the sandbox's proxy for under network "allowlist", allowed
	// or refused; EgressOmitted counts the program's left out past 256.
	Egress        []EgressConnection `json:"egress,omitempty"`
	EgressOmitted int                `json:"egress_omitted,omitempty"`
	// SecretUses lists each request that carried one of the run's secrets' placeholders to a
	// host, in order, at most 256 (secret_uses_omitted counts more): whether the value was
	// added (added; else why), and the host's HTTP status. Never a value.
	SecretUses        []SecretUse `json:"secret_uses,omitempty"`
	SecretUsesOmitted int         `json:"secret_uses_omitted,omitempty"`
	// SessionID names the session the execution was a call of ("se_..."); empty for a
	// one-shot run. SessionEnded is set when this call ended its session: why (an End
	// constant); Reason says more.
	SessionID    string `json:"session_id,omitempty"`
	SessionEnded string `json:"session_ended,omitempty"`
	// Results are the program's displays in the order they were made, then the value of its
	// last expression (IsMainResult) when it ended in one that is not None (absent when none).
	Results []Display `json:"results,omitempty"`
	// Error is the uncaught exception that ended the program (absent when none did).
	Error *ExecError `json:"error,omitempty"`
	// ExecutionCount numbers a session's calls (1 for its first); absent for a one-shot run.
	ExecutionCount int `json:"execution_count,omitempty"`
}

// Display is one rich output, as a notebook shows it: what display() showed (a matplotlib
// figure included), or the value of the code's last expression (IsMainResult). Data is a
// MIME bundle formatted by IPython's DisplayFormatter: "text/plain" always; "text/html",
// "text/markdown", "image/png" and "image/jpeg" (base64), "image/svg+xml",
// "application/json" (a JSON value), "text/latex", ... when the object has them.
type Display struct {
	Data map[string]json.RawMessage `json:"data"`
	// Metadata is IPython's metadata of the bundle (an image's width and height), when any.
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// IsMainResult marks the value of the code's last expression (at most one, last).
	IsMainResult bool `json:"is_main_result"`
	// ExecutionCount is the session call's number, on a session's main result.
	ExecutionCount int `json:"execution_count,omitempty"`
	// Note says what became of a display that did not come back whole (over the cap on
	// displays: cut to its text/plain; a _repr_*_ method that raised).
	Note string `json:"note,omitempty"`
}

// ExecError is the uncaught exception that ended a program: its class name, its message and
// its traceback as printed on stderr.
type ExecError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// EgressConnection is one outbound connection asked of the sandbox's proxy.
type EgressConnection struct {
	// Host and Port are the destination the program asked for (a name or an IP literal).
	Host string `json:"host"`
	Port int    `json:"port"`
	// Address is the address the daemon dialed (empty when refused before resolving).
	Address string `json:"address,omitempty"`
	// Allowed says whether the destination was allowed; Rule is the network_allow entry that
	// allowed it, Reason why it was refused (or why an allowed one failed to connect).
	Allowed bool   `json:"allowed"`
	Rule    string `json:"rule,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// BytesSent and BytesReceived count the bytes carried each way.
	BytesSent     int64 `json:"bytes_sent"`
	BytesReceived int64 `json:"bytes_received"`
	// StartedAt is when it was asked for; DurationMS how long it stayed open.
	StartedAt  time.Time `json:"started_at"`
	DurationMS int64     `json:"duration_ms"`
	// Ended says why the daemon ended it early (a cap, the run's end).
	Ended string `json:"ended,omitempty"`
	// Install marks a connection of the install of the run's dependencies.
	Install bool `json:"install,omitempty"`
}

// EgressList is the answer of GET …/sessions/{id}/egress: a page of the outbound connections
// of the session's commands and of what its calls left running, newest first, and the cursor
// of the next page ("" after the last).
type EgressList struct {
	Connections []EgressConnection `json:"connections"`
	NextCursor  string             `json:"next_cursor"`
}

// Origin says where an execution came from.
type Origin struct {
	// Source is one of the Source constants.
	Source Source `json:"source"`
	// JobID is the job whose fire started the execution ("job_..."), empty otherwise.
	JobID string `json:"job_id,omitempty"`
	// CodeName and CodeVersion name the saved code that ran, empty and 0 for ad hoc code.
	CodeName    string `json:"code_name,omitempty"`
	CodeVersion int    `json:"code_version,omitempty"`
	// Template and TemplateVersion name the template whose sandbox ran it (NAME, or OWNER/NAME
	// of a shared one, as its session names it) and its version; absent for the daemon's own
	// image.
	Template        string `json:"template,omitempty"`
	TemplateVersion int    `json:"template_version,omitempty"`
}

// Start says how a program's process was started (Result.Start).
type Start string

// The starts of a program.
const (
	StartFork Start = "fork" // forked from the box's fork server, its preloaded modules imported
	StartCold Start = "cold" // a fresh interpreter
	// StartSession: a call in a session's long-lived interpreter (see Session).
	StartSession Start = "session"
)

// DependencyState is the status of one requirement (DependencyStatus.Status).
type DependencyState string

// The statuses of a dependency.
const (
	DependencyPresent   DependencyState = "present"   // already satisfied; pip did not run
	DependencyInstalled DependencyState = "installed" // installed now
	DependencyFailed    DependencyState = "failed"    // could not be installed, or conflicts; Error says why
	DependencySkipped   DependencyState = "skipped"   // its environment marker is false in the box: not needed
)

// DependencyStatus reports one requirement of a run or of an install.
type DependencyStatus struct {
	// Requirement is the PEP 508 requirement in canonical form ("tiny-pkg==1.0").
	Requirement string `json:"requirement"`
	// Status is one of the Dependency constants.
	Status DependencyState `json:"status"`
	// Version is the version that satisfies it ("" when skipped or failed to install).
	Version string `json:"version,omitempty"`
	// DurationMS is how long checking and installing it took, in milliseconds.
	DurationMS int64 `json:"duration_ms"`
	// Error says why it failed.
	Error string `json:"error,omitempty"`
}

// CallRecord is one agent.* call a program made.
type CallRecord struct {
	Method        string `json:"method"`
	DurationMS    int64  `json:"duration_ms"`
	RequestBytes  int    `json:"request_bytes"`
	ResponseBytes int    `json:"response_bytes"`
	OK            bool   `json:"ok"`
	Error         string `json:"error,omitempty"`
}

// LogLine is one agent.log line of a run.
type LogLine struct {
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	CreatedAt time.Time `json:"created_at"`
}

// File is an output file of a run.
type File struct {
	// Name is its path relative to the working directory, with "/" between parts.
	Name string `json:"name"`
	// SizeBytes is its size in bytes.
	SizeBytes int64 `json:"size_bytes"`
	// MediaType is its IANA media type ("image/png", "text/csv; charset=utf-8", …).
	MediaType string `json:"media_type"`
	// SHA256 is the hex SHA-256 digest of its bytes.
	SHA256 string `json:"sha256"`
	// ContentBase64 is its bytes in standard base64, in a run's answer that asked for them
	// (inline_files) when it is at most MaxInlineFileBytes; "" otherwise.
	ContentBase64 string `json:"content_base64,omitempty"`
	// Evicted is true, in a ledger record (GET /v1/executions/{id}), when the file's bytes are
	// no longer kept: the quota on all runs' files (files_max_bytes) removed them to make room
	// for newer runs' files, and GET …/files/{name} answers 410. Absent when they are kept.
	Evicted bool `json:"evicted,omitempty"`
}

// SkippedFile is an entry of a run's working directory that was not collected, and why.
type SkippedFile struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Stream names the kind of an Event, and the type of a StreamLine.
type Stream string

// The streams of a run's events, and the types of the lines that end a stream.
const (
	StreamStdout     Stream = "stdout"     // a chunk of the program's standard output
	StreamStderr     Stream = "stderr"     // a chunk of its standard error
	StreamLog        Stream = "log"        // an agent.log line
	StreamDependency Stream = "dependency" // a dependency's status, before the run
	StreamFile       Stream = "file"       // an output file, after the program ended
	StreamDisplay    Stream = "display"    // a display or the last expression's value (Display), as it happens
	StreamResult     Stream = "result"     // the last line of a run: its Result
	StreamInstalled  Stream = "installed"  // the last line of an install: Installed
	StreamError      Stream = "error"      // the last line of a stream that failed: its error
)

// Event is a piece of a running execution's output, delivered in order as it happens.
type Event struct {
	Stream Stream `json:"stream"`
	// Data is the chunk (stdout, stderr) or the message (log), valid UTF-8.
	Data string `json:"data,omitempty"`
	// Dependency is set for stream "dependency".
	Dependency *DependencyStatus `json:"dependency,omitempty"`
	// Level is a log line's level.
	Level string `json:"level,omitempty"`
	// File describes an output file, for stream "file" (never with its content).
	File *File `json:"file,omitempty"`
	// Display is a display or the last expression's value, for stream "display".
	Display *Display `json:"display,omitempty"`
}

// StreamLine is any line of an NDJSON answer of a run (and of POST /v1/packages): events
// first, then one result or error line (an install ends with Installed instead of a result).
type StreamLine struct {
	Type Stream `json:"type"`
	// Data, Dependency, Level, File and Display are an event's (see Event).
	Data       string            `json:"data,omitempty"`
	File       *File             `json:"file,omitempty"`
	Dependency *DependencyStatus `json:"dependency,omitempty"`
	Level      string            `json:"level,omitempty"`
	Display    *Display          `json:"display,omitempty"`
	// Result is the run's result, for type "result".
	Result *Result `json:"result,omitempty"`
	// Error is why the stream failed after it started, for type "error".
	Error *ErrorDetail `json:"error,omitempty"`
}

// Holds says whether content is the bytes f describes: its size and SHA-256.
func (f File) Holds(content []byte) bool {
	sum := sha256.Sum256(content)
	return int64(len(content)) == f.SizeBytes && strings.EqualFold(hex.EncodeToString(sum[:]), f.SHA256)
}

// SecretUse is one request that carried a secret's placeholder (Result.SecretUses).
type SecretUse struct {
	Secret string `json:"secret"`
	Host   string `json:"host"`
	Added  bool   `json:"added"`
	Why    string `json:"why,omitempty"`
	Status int    `json:"status,omitempty"`
}
