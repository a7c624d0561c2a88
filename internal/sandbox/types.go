package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"time"
)

// Request is one execution asked for by a client (REST, MCP, CLI, or a job).
type Request struct {
	// Code is the Python source to run. Required; at most Config.MaxCodeBytes bytes of UTF-8.
	Code string
	// Input is the JSON value exposed to the code as INPUT (null when absent).
	Input json.RawMessage
	// TimeoutMS is the wall-clock limit in milliseconds; nil means Config.DefaultTimeout.
	// Allowed range: 1 ..= Config.MaxTimeout.
	TimeoutMS *int64
	// Agent is the namespace the execution belongs to; empty means "default".
	// Lowercase letters, digits, '-' and '_', 1 to 64 characters, starting with a letter or digit.
	Agent string
	// Dependencies are PEP 508 requirement strings installed (when missing) before the run;
	// at most Config.MaxDependencies.
	Dependencies []string
	// ID, when not empty, is the execution's ID, chosen by the caller (a job's fire records it
	// before the run); it must have NewID's form. Empty means a new one.
	ID string
	// Origin says where the request came from; it is recorded with the execution.
	Origin Origin
	// Files are written into the run's working directory before its code starts; at most
	// Config.MaxInputFiles of them, each at most Config.MaxInputFileBytes, together at most
	// Config.MaxInputFilesBytes. Names are checked with CheckFileName and must be unique.
	Files []InputFile
	// Charts, when not nil, says whether open matplotlib figures and PIL images shown are saved
	// as output files (figure-1.png, …); nil means Config.Charts.
	Charts *bool
	// CheckOutput, when not nil, checks the program's OUTPUT (JSON text, "null" when unset) after
	// a run that ended ok; an error turns the outcome into output_invalid with the error's text
	// as the reason. Saved code uses it to hold OUTPUT to its output schema.
	CheckOutput func(output json.RawMessage) error
	// NetworkAllow, when not nil, narrows the configuration's network_allow for this run
	// (network "allowlist" only): each entry must lie within the configuration's list.
	NetworkAllow []string
	// Secrets names the secrets the run may use (network "allowlist" only; docs/secrets.md):
	// its code sees each as the environment variable of its name holding a placeholder, which
	// the egress proxy replaces with the value in a request to a host the secret is bound to.
	Secrets []string
	// Template, when not empty, names the template (NAME, or OWNER/NAME of a shared one) whose
	// sandbox runs the request: a session of it made for the run and closed after it (the
	// session registry's RunOnce). The engine's own slots refuse it.
	Template string
	// Internal: a session's call made by the daemon itself, not the user's (see Spec.Internal).
	// No client sets it.
	Internal bool
	// TracebackInErrorOnly: an uncaught exception's traceback is the result's Error only, not
	// also printed on stderr, as a Jupyter kernel reports one (E2B's /execute sets it; see
	// Spec.TracebackInErrorOnly).
	TracebackInErrorOnly bool
}

// Source names where an execution came from (Origin.Source).
type Source string

// The sources of an execution.
const (
	SourceAPI Source = "api" // the REST API
	SourceCLI Source = "cli" // the sandpit command line
	SourceMCP Source = "mcp" // a Model Context Protocol client
	SourceJob Source = "job" // a scheduled job's fire
)

// Sources lists every source.
var Sources = []Source{SourceAPI, SourceCLI, SourceMCP, SourceJob}

// Start says how a program's process was started (Result.Start).
type Start string

// The starts of a program.
const (
	StartFork Start = "fork" // forked from the box's fork server, its preloaded modules imported
	StartCold Start = "cold" // a fresh interpreter
)

// Origin says where an execution came from.
// Its JSON form is the executor protocol's and the ledger's (REST writes apitype's).
type Origin struct {
	// Source is one of the Source constants; empty means SourceAPI.
	Source Source `json:"source"`
	// JobID is the job whose fire started the execution ("job_..."), empty otherwise.
	JobID string `json:"job_id,omitempty"`
	// CodeName and CodeVersion name the saved code that ran, empty and 0 for ad hoc code.
	CodeName    string `json:"code_name,omitempty"`
	CodeVersion int    `json:"code_version,omitempty"`
	// Template and TemplateVersion name the template whose sandbox ran it (as its session names
	// it: NAME, or OWNER/NAME of a shared one) and the version the session started from; empty
	// and 0 for the daemon's own image.
	Template        string `json:"template,omitempty"`
	TemplateVersion int    `json:"template_version,omitempty"`
}

// Stream names the kind of an Event.
type Stream string

// The streams of an execution's events.
const (
	StreamStdout     Stream = "stdout"     // a chunk of the program's standard output
	StreamStderr     Stream = "stderr"     // a chunk of its standard error
	StreamLog        Stream = "log"        // an agent.log line
	StreamDependency Stream = "dependency" // a dependency's status, before the run
	StreamFile       Stream = "file"       // an output file, after the program ended
	StreamDisplay    Stream = "display"    // a display, or the last expression's value (Event.Display)
)

// Event is a piece of a running execution's output, delivered in order as it happens.
type Event struct {
	// Stream is the kind of event.
	Stream Stream `json:"stream"`
	// Data is the chunk, always valid UTF-8 (invalid bytes are replaced with U+FFFD).
	Data string `json:"data,omitempty"`
	// Dependency is set for stream "dependency".
	Dependency *DependencyStatus `json:"dependency,omitempty"`
	// Level is an agent.log line's level, for stream "log" (Data holds the message).
	Level string `json:"level,omitempty"`
	// File describes an output file, for stream "file"; Content holds its bytes on the way
	// from the runtime to the Service, which stores them and never passes them on.
	File    *File  `json:"file,omitempty"`
	Content []byte `json:"-"`
	// Display is a display or the last expression's value, for stream "display" (not
	// "result": that names the final line of an NDJSON answer).
	Display *Display `json:"display,omitempty"`
}

// Display is one rich output of a program, as a notebook shows it: what display() showed (a
// figure saved at plt.show() or left open included), or the value of the code's last
// expression (IsMainResult). Data is a MIME bundle formatted by IPython's DisplayFormatter.
// Its JSON form is the executor protocol's and the ledger's (REST writes apitype's).
type Display struct {
	// Data maps a MIME type to the object's representation in it: "text/plain" always; the
	// others ("text/html", "text/markdown", "image/png", "image/jpeg", "image/svg+xml",
	// "application/json", "text/latex", ...) when the object has them. Text and base64 (PNG,
	// JPEG) are JSON strings; JSON types hold their JSON value.
	Data map[string]json.RawMessage `json:"data"`
	// Metadata is IPython's metadata of the bundle (an image's width and height), when any.
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// IsMainResult marks the value of the code's last expression (at most one per run, last).
	IsMainResult bool `json:"is_main_result"`
	// ExecutionCount is the session call's number (1, 2, ...), on a session's main result.
	ExecutionCount int `json:"execution_count,omitempty"`
	// Note says what became of a display that did not come back whole: one over the cap on
	// displays, cut to its text/plain, or one whose _repr_*_ method raised.
	Note string `json:"note,omitempty"`
}

// Text returns d's "text/plain" (empty when it has none).
func (d Display) Text() string {
	var s string
	if raw, ok := d.Data["text/plain"]; ok && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return ""
}

// ExecError is the uncaught exception that ended a program (or a session call): its class
// name, its message (str of it) and its traceback as printed on stderr.
type ExecError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// InputFile is a file a request hands its run, written into the run's working directory
// before the code starts.
type InputFile struct {
	// Name is the file's path relative to the working directory ("data.csv", "in/a.json");
	// CheckFileName says which names are allowed.
	Name string `json:"name"`
	// Content is the file's bytes (base64 in JSON).
	Content []byte `json:"content"`
}

// InputFileInfo describes an input file a run was given (InputFile without its bytes), as
// its ledger record keeps it.
type InputFileInfo struct {
	Name      string `json:"name"`
	SizeBytes int64  `json:"size_bytes"`
	// SHA256 is the hex SHA-256 digest of its bytes.
	SHA256 string `json:"sha256"`
}

// InputFileInfos describes files without their bytes (nil for none).
func InputFileInfos(files []InputFile) []InputFileInfo {
	var out []InputFileInfo
	for _, f := range files {
		sum := sha256.Sum256(f.Content)
		out = append(out, InputFileInfo{Name: f.Name, SizeBytes: int64(len(f.Content)), SHA256: hex.EncodeToString(sum[:])})
	}
	return out
}

// File is an output file: a regular file the program created or changed under its working
// directory (not main.py, not an input file left unchanged), or a chart saved for it.
// Its JSON form is the executor protocol's and the ledger's (REST writes apitype's).
type File struct {
	// Name is its path relative to the working directory, with "/" between parts.
	Name string `json:"name"`
	// SizeBytes is its size in bytes.
	SizeBytes int64 `json:"size_bytes"`
	// MediaType is its IANA media type, from its name's extension or else its first bytes
	// ("image/png", "text/csv; charset=utf-8", "application/octet-stream").
	MediaType string `json:"media_type"`
	// SHA256 is the hex SHA-256 digest of its bytes.
	SHA256 string `json:"sha256"`
}

// SkippedFile is an entry of the run's working directory that was not collected as an output
// file, and why ("symbolic link, not followed", "larger than the 8388608-byte cap on one output
// file", …).
type SkippedFile struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Result is the record of one finished execution.
// Its JSON form is the executor protocol's and the ledger's (REST writes apitype's).
type Result struct {
	// ID identifies the execution ("ex_" followed by 26 lowercase base32 characters).
	ID string `json:"id"`
	// Agent is the namespace the execution ran for.
	Agent string `json:"agent"`
	// Outcome is the single verdict; see the Outcome constants.
	Outcome Outcome `json:"outcome"`
	// Success is true exactly when Outcome is "ok".
	Success bool `json:"success"`
	// ExitCode is the program's exit status; 128+N when it died from signal N; -1 when there is
	// no exit status (it never ran, or the sandbox failed during the run).
	ExitCode int `json:"exit_code"`
	// Signal is the number of the signal that ended the program, 0 when none did.
	Signal int `json:"signal"`
	// Reason explains any outcome other than "ok" in one sentence naming the limit involved
	// (for example "stdout passed its cap of 1048576 bytes; the run was stopped"); it is empty
	// for "ok" unless OOMKills is not 0, which it always names.
	Reason string `json:"reason,omitempty"`
	// OOMKills is how many processes the box's out-of-memory killer killed while the run was
	// going (the box's memory cgroup counter; 0 where there is none to read). In a box that
	// serves one slot they are the run's own, and any makes the outcome memory_limit even if
	// the program survived it; where slots share one box they may be another slot's run's,
	// and make it memory_limit only when the program itself was killed. An outcome sandpit
	// caused first (timeout, output_limit, killed on cancel) stays in either case.
	OOMKills int `json:"oom_kills"`
	// Stdout and Stderr hold what the program wrote, up to their caps, as valid UTF-8.
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// StdoutTruncated and StderrTruncated say that the stream passed its cap and was cut there.
	StdoutTruncated bool `json:"stdout_truncated"`
	StderrTruncated bool `json:"stderr_truncated"`
	// Output is the JSON value of the program's global OUTPUT, or null when it set none.
	Output json.RawMessage `json:"output"`
	// DurationMS is the wall-clock time from the program's start to its end, in milliseconds.
	DurationMS int64 `json:"duration_ms"`
	// TimeoutMS is the wall-clock limit that applied, in milliseconds.
	TimeoutMS int64 `json:"timeout_ms"`
	// StartedAt is when the execution was accepted (it took its slot; RFC 3339, UTC), before
	// any dependency install: the program started InstallMS later, and ran DurationMS.
	StartedAt time.Time `json:"started_at"`
	// Start says how the program's process was started: "fork" (forked from the box's fork
	// server, with its preloaded modules already imported) or "cold" (a fresh interpreter);
	// empty when it never started.
	Start Start `json:"start,omitempty"`
	// Origin says where the execution came from (source, job_id, code_name, code_version).
	Origin
	// SessionID names the session the execution was a call of ("se_..."); empty for a
	// one-shot run.
	SessionID string `json:"session_id,omitempty"`
	// SessionEnded is set when this call ended its session, to the session's end reason
	// (killed, memory_limit, exited, sandbox_error); Reason says more. Empty while the session
	// lives on, and for a one-shot run.
	SessionEnded string `json:"session_ended,omitempty"`
	// Dependencies reports each requested requirement (absent when none were requested).
	Dependencies []DependencyStatus `json:"dependencies,omitempty"`
	// InstallMS is how long checking and installing the dependencies took, in milliseconds;
	// it is not charged to the run's timeout.
	InstallMS int64 `json:"install_ms,omitempty"`
	// Calls lists the agent.* calls the program made, in order (absent when none).
	Calls []CallRecord `json:"calls,omitempty"`
	// Logs are the program's agent.log lines, in order (absent when none).
	Logs []LogLine `json:"logs,omitempty"`
	// Files lists the run's output files, in name order (absent when none).
	Files []File `json:"files,omitempty"`
	// FilesSkipped lists entries of the working directory that were not collected, at most
	// MaxSkippedFiles of them (absent when none).
	FilesSkipped []SkippedFile `json:"files_skipped,omitempty"`
	// FilesTruncated says that output files were left out beyond those listed in FilesSkipped:
	// more were skipped than it lists, or the scan of the directory stopped at its cap.
	FilesTruncated bool `json:"files_truncated,omitempty"`
	// Egress lists the outbound connections the program asked the sandbox's proxy for
	// (network "allowlist"), allowed or refused, at most egress.MaxRecords (absent when none);
	// EgressOmitted counts those left out past that.
	Egress        []EgressConnection `json:"egress,omitempty"`
	EgressOmitted int                `json:"egress_omitted,omitempty"`
	// SecretUses lists each request that carried one of the run's secrets' placeholders to a
	// host (docs/secrets.md), whether the egress proxy added the value, in order, at most 256;
	// SecretUsesOmitted counts those left out past that. Never a value.
	SecretUses        []SecretUse `json:"secret_uses,omitempty"`
	SecretUsesOmitted int         `json:"secret_uses_omitted,omitempty"`
	// Results are the program's displays in the order they were made, then the value of its
	// last expression when it ended in one that is not None (absent when none). Together
	// they are held to Limits.OutputBytes.
	Results []Display `json:"results,omitempty"`
	// Error is the uncaught exception that ended the program (absent when none did;
	// SystemExit is an exit, not an error).
	Error *ExecError `json:"error,omitempty"`
	// ExecutionCount numbers a session's calls (1 for its first), the daemon's own
	// (Spec.Internal) left out; 0 for a one-shot run and for such a call.
	ExecutionCount int `json:"execution_count,omitempty"`
}

// MaxSkippedFiles caps Result.FilesSkipped.
const MaxSkippedFiles = 100

// Limits are the per-run limits that the executor enforces inside the box.
// Sizes are in bytes; zero means "no limit of this kind" except where noted.
type Limits struct {
	// MemoryBytes caps the run's data segment (RLIMIT_DATA): heap and anonymous mappings,
	// beyond the data of the fork server's preload, which the executor allows on top (under
	// gVisor, which ignores RLIMIT_DATA, the growth of its address space: RLIMIT_AS).
	// Passing it raises MemoryError in Python, reported as outcome memory_limit.
	MemoryBytes int64 `json:"memory_bytes"`
	// StdoutBytes and StderrBytes cap each stream; passing a cap stops the run with
	// outcome output_limit and keeps the output up to the cap.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	// OutputBytes caps the serialised JSON of OUTPUT, and, separately, the displays and the
	// last expression's value together (Result.Results).
	OutputBytes int64 `json:"output_bytes"`
	// FileSizeBytes caps any single file the run writes (RLIMIT_FSIZE).
	FileSizeBytes int64 `json:"file_size_bytes"`
	// OpenFiles caps open file descriptors per process (RLIMIT_NOFILE).
	OpenFiles int64 `json:"open_files"`
	// OutputFiles caps how many output files a run returns (0: none are collected);
	// OutputFileBytes caps each one's size and OutputFilesBytes their total, in bytes. A file
	// over a cap is skipped and named in Result.FilesSkipped.
	OutputFiles      int   `json:"output_files"`
	OutputFileBytes  int64 `json:"output_file_bytes"`
	OutputFilesBytes int64 `json:"output_files_bytes"`
	// Processes caps the processes and threads of the slot's uid (RLIMIT_NPROC); under gVisor
	// a run that reaches it is stopped (outcome killed).
	Processes int64 `json:"processes"`
}

// Spec is what a Runtime runs: a validated request with its limits resolved.
type Spec struct {
	// ID is the execution's ID, already assigned.
	ID string `json:"id"`
	// Code is the Python source.
	Code string `json:"code"`
	// Input is the JSON text of INPUT ("null" when absent).
	Input json.RawMessage `json:"input"`
	// TimeoutMS is the wall-clock limit the executor enforces, in milliseconds (> 0).
	TimeoutMS int64 `json:"timeout_ms"`
	// Limits are the per-run limits.
	Limits Limits `json:"limits"`
	// Paths are directories put first on the program's sys.path: its installed dependencies.
	Paths []string `json:"paths,omitempty"`
	// Files are written into the working directory before the code starts, owned by the run.
	Files []InputFile `json:"files,omitempty"`
	// Charts: open matplotlib figures at the end of the run and at each plt.show(), and PIL
	// images shown, are saved as PNG output files (figure-1.png, image-1.png, …).
	Charts bool `json:"charts,omitempty"`
	// Plain runs the code as a plain script: no results (the last expression's value, displays)
	// and no IPython syntax (docs/notebook.md); false runs it as a notebook cell.
	Plain bool `json:"plain,omitempty"`
	// Env are environment variables the bootstrap sets (os.environ) before the code: a
	// session's env (its template's, then its request's). A session's interpreter sets them
	// again only when they differ from the last it set, so that a call's own changes to them
	// persist as other globals do. SecretEnv is set after them and wins.
	Env map[string]string `json:"env,omitempty"`
	// SecretEnv are the run's secrets' placeholders by environment variable (never a value),
	// and SecretCA the PEM of the CA that signs the certificates the egress proxy presents for
	// their hosts: the bootstrap sets both before the code starts (docs/secrets.md).
	SecretEnv map[string]string `json:"secret_env,omitempty"`
	SecretCA  string            `json:"secret_ca,omitempty"`
	// CallBytes caps one agent.* call's arguments, for the program's own check (0: no calls).
	CallBytes int `json:"call_bytes,omitempty"`
	// Session runs the code as a call in the slot's session interpreter, whose globals,
	// imports and working directory persist from call to call (see package executor), instead
	// of in a fresh program.
	Session bool `json:"session,omitempty"`
	// Internal marks a session's call as the daemon's own, not the user's (the first call
	// that starts the interpreter, one that sets a sandbox's environment): it takes no
	// execution count, so the user's first call is 1 (Result.ExecutionCount is 0 for it).
	Internal bool `json:"internal,omitempty"`
	// TracebackInErrorOnly: the bootstrap sends an uncaught exception's traceback to the
	// executor for Result.Error without printing it on stderr (it prints it when it cannot send
	// it, and a child process's always), as a Jupyter kernel sends an "error" message and no
	// stream text.
	TracebackInErrorOnly bool `json:"traceback_in_error_only,omitempty"`
	// Calls answers the program's agent.* calls while it runs; nil refuses them. It is not
	// sent to the executor.
	Calls func(ctx context.Context, call Call) (json.RawMessage, error) `json:"-"`
	// Egress decides and dials the run's outbound connections through the box's egress proxy
	// (network "allowlist"); nil refuses them all. It is not sent to the executor.
	Egress EgressDialer `json:"-"`
}

// EgressDialer decides and dials one run's (or install's) outbound connections: host is the
// name or IP literal the program asked its proxy for. A refused destination is an error whose
// text explains the refusal (the proxy's 403 answer, "... is refused: ..."); any other error
// is a connection that was allowed but failed.
type EgressDialer interface {
	DialEgress(ctx context.Context, host string, port int) (net.Conn, error)
}

// FileStore keeps the bytes of runs' output files.
type FileStore interface {
	// Put stores content as execution id's output file f. An error leaves the file out of the
	// run's result (named in FilesSkipped with the error).
	Put(ctx context.Context, id string, f File, content []byte) error
}

// Recorder keeps the ledger of executions. The Service calls Begin when a run has its slot and
// is about to start, and Finish with the run's final result; both are called for every run that
// starts, from the goroutine that called Execute.
type Recorder interface {
	// Begin records that spec is starting; head holds its ID, agent, origin, timeout and start
	// time, with no outcome yet. An error refuses the run: it does not start, and Execute
	// returns the error.
	Begin(ctx context.Context, spec Spec, head Result) error
	// Finish records res, the run's final result. On an error the Service logs it and tries
	// again in the background (a full disk may free up); the result still reaches the client.
	Finish(ctx context.Context, res Result) error
	// Discard removes the record Begin made for a run that did not start after all (the
	// sandbox was not ready): a refused request leaves no record.
	Discard(ctx context.Context, id string) error
}

// Runtime runs specs in an isolated box with a fixed number of slots.
//
// Contract:
//   - Run is called with 0 <= slot < the slot count given to the Service, and never with a slot
//     that is already running: the Service owns slot assignment.
//   - Run blocks until the program has ended and every process of it is gone, then returns a
//     Result whose Outcome, ExitCode, Signal, Reason, Stdout, Stderr, truncation flags, Output,
//     DurationMS and StartedAt are set. The caller fills ID, Agent, Success and TimeoutMS.
//   - The runtime enforces spec.TimeoutMS itself and kills every process of the run when it
//     passes. ctx is the caller's outer deadline (a little above the timeout) and cancellation:
//     when ctx ends first, Run kills the run and returns ctx's error, or a Result if the run
//     ended meanwhile.
//   - emit, when not nil, receives the output chunks in order, from the goroutine that called
//     Run, before Run returns. It must not block for long.
//   - A non-nil error means the system failed (the box or executor died, the runtime is not
//     ready); the program's own failures are Results. Errors wrapping ErrNotReady mean the run
//     never started.
type Runtime interface {
	Run(ctx context.Context, slot int, spec Spec, emit func(Event)) (Result, error)
	// Ready returns nil when a run started now would be served, or an error saying why not.
	Ready(ctx context.Context) error
}

// Settler is implemented by runtimes whose slot has work left after Run returns (removing the
// run's files) before it can take the next run. The Service offers a slot again only once
// Settle has returned, so a slow cleanup holds its own slot, never another request.
//
// Contract: Settle blocks until slot's last run is cleaned up and the slot is ready for the
// next, and returns at once for a slot with nothing pending. A runtime that cannot clean a
// slot in time replaces the slot's sandbox before it returns. An error means the slot may
// still hold something of the run; the Service logs it and offers the slot anyway (the next
// run's start clears it again). ctx ends only when the Service stops.
type Settler interface {
	Settle(ctx context.Context, slot int) error
}

// SecretUse records one request that carried a secret's placeholder to a host (docs/secrets.md).
type SecretUse struct {
	// Secret is the secret's name; Host the host the request went to.
	Secret string `json:"secret"`
	Host   string `json:"host"`
	// Added says the proxy put the value in the placeholder's place; Why, when it did not,
	// says why (another host, another place).
	Added bool   `json:"added"`
	Why   string `json:"why,omitempty"`
	// Status is the host's HTTP status (0 when no answer came).
	Status int `json:"status,omitempty"`
}

// EgressConnection records one outbound connection a run asked for through the sandbox's
// proxy (network "allowlist").
// Its JSON form is the executor protocol's and the ledger's (REST writes apitype's).
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
	// Ended says why the daemon ended it early (a cap, the run's end); empty when either
	// side closed it.
	Ended string `json:"ended,omitempty"`
	// Install marks a connection of the install of the run's dependencies (pip's, to the
	// package index), listed before the program's own.
	Install bool `json:"install,omitempty"`
}

// DefaultLimits are the per-run limits of the seed configuration: 512 MiB of memory, 1 MiB of
// stdout, stderr and OUTPUT, 64 MiB files, 256 open files, 64 processes, and 64 output files
// of 8 MiB each, 16 MiB in all.
func DefaultLimits() Limits {
	return Limits{
		MemoryBytes:      512 << 20,
		StdoutBytes:      1 << 20,
		StderrBytes:      1 << 20,
		OutputBytes:      1 << 20,
		FileSizeBytes:    64 << 20,
		OpenFiles:        256,
		Processes:        64,
		OutputFiles:      64,
		OutputFileBytes:  8 << 20,
		OutputFilesBytes: 16 << 20,
	}
}
