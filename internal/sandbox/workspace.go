package sandbox

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
)

// A session is also a workspace: besides its interpreter it runs commands (foreground,
// background or in a terminal) and serves its files by path, all in the session's own box, as
// its uid, under its limits and egress policy. These are the types the engine, the control
// line and the executor share for that; the files' and processes' paths are the session's
// view, where its home is SessionHome.

// SessionHome is the session's home directory as its commands and the files API see it:
// relative paths are taken from there. In the box it is the session's working directory
// (the interpreter's too), which the executor maps to this name.
const SessionHome = "/home/user"

// CommandSpec is one command to start in a session.
type CommandSpec struct {
	// Argv is the program and its arguments (a cmd string is sent as ["bash", "-lc", cmd]).
	Argv []string `json:"argv"`
	// Cwd is the working directory (the session's view; "" is SessionHome).
	Cwd string `json:"cwd,omitempty"`
	// AnyCwd lets Cwd name any directory of the box the session's user may enter and read
	// ("/" too, as E2B's commands and terminals); without it Cwd lies under SessionHome.
	AnyCwd bool `json:"any_cwd,omitempty"`
	// Env is added to the command's minimal environment (nothing of the daemon's).
	Env map[string]string `json:"env,omitempty"`
	// SecretCA is the PEM of the CA that signs the certificates the egress proxy presents
	// for the session's secrets' hosts ("" when it has none): the command trusts it beside
	// the box's own roots (docs/secrets.md).
	SecretCA string `json:"secret_ca,omitempty"`
	// TimeoutMS kills a foreground command and every process it started after that long; 0
	// (background commands) means until the session ends.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Stdin is written to the command's standard input, which is then closed unless the
	// command runs in the background or a terminal (where Input sends more).
	Stdin []byte `json:"stdin,omitempty"`
	// KeepStdin leaves standard input open after Stdin (background commands).
	KeepStdin bool `json:"keep_stdin,omitempty"`
	// PTY runs the command in a terminal of that size (stdout then carries what the terminal
	// shows; there is no separate stderr).
	PTY *TermSize `json:"pty,omitempty"`
	// StdoutBytes and StderrBytes cap each stream (0: no cap); a command that passes one is
	// killed with outcome output_limit.
	StdoutBytes int64 `json:"stdout_bytes,omitempty"`
	StderrBytes int64 `json:"stderr_bytes,omitempty"`
	// Background keeps the command's output in the box, the latest ProcessTailBytes of each
	// stream, and passes it on only while a reader is attached (Workspace.AttachProcess): a
	// command no one reads costs the daemon nothing per byte. A foreground command's output
	// is always passed on.
	Background bool `json:"background,omitempty"`
	// Processes and OpenFiles are the per-run limits of processes (of the session's uid;
	// under gVisor, of the command's own) and of each process's open files (0: none): a
	// fork storm fails inside the command, never ending the session.
	Processes int64 `json:"processes,omitempty"`
	OpenFiles int64 `json:"open_files,omitempty"`
}

// ProcessTailBytes is how much of a background command's latest output its box keeps, per
// stream, for a reader that attaches later.
const ProcessTailBytes = 64 << 10

// ProcessEvent is one event of a command's process: a chunk of its output (Stream "stdout"
// or "stderr", Data), what its box kept of its output (Tail, for the reader that attached,
// before any output passed on after it), or its end (End set; the last event; for a
// background command with Tail, what the box kept at its end, Reader "").
type ProcessEvent struct {
	Stream Stream       `json:"stream,omitempty"`
	Data   string       `json:"data,omitempty"`
	Tail   *ProcessTail `json:"tail,omitempty"`
	End    *ProcessEnd  `json:"end,omitempty"`
}

// ProcessTail is what a background command's box kept of its latest output (at most
// ProcessTailBytes of each stream, starting on a character), and how much it wrote in all:
// the bytes written before Stdout that were not kept are StdoutBytes-len(Stdout).
type ProcessTail struct {
	// Reader is the reader that attached (Workspace.AttachProcess); Stdout and Stderr are
	// empty when it asked for no tail.
	Reader      string `json:"reader,omitempty"`
	Stdout      string `json:"stdout,omitempty"`
	Stderr      string `json:"stderr,omitempty"`
	StdoutBytes int64  `json:"stdout_bytes"`
	StderrBytes int64  `json:"stderr_bytes"`
}

// Workspace is a session box's commands and files (implemented by the session's sandbox).
// Errors are of the classes the operations name (invalid, not found, conflict, too large), or
// wrap ErrNotReady when the sandbox is gone.
type Workspace interface {
	// StartCommand starts spec as process id and returns its PID in the box; sink then gets
	// its events in order, from one goroutine, the end last.
	StartCommand(ctx context.Context, id string, spec CommandSpec, sink func(ProcessEvent)) (int, error)
	// ProcessInput writes to process id's stdin (then closes it when closeStdin is set);
	// SignalProcess sends its process group a signal (one of Signals); ResizeProcess sizes
	// its terminal. An unknown or ended process is of class not found.
	ProcessInput(ctx context.Context, id string, data []byte, closeStdin bool) error
	SignalProcess(ctx context.Context, id, signal string) error
	ResizeProcess(ctx context.Context, id string, size TermSize) error
	// AttachProcess makes reader a reader of background process id: its sink gets a Tail
	// event for reader (with the output kept when tail is set), then the output the process
	// writes, until DetachProcess. Output passes over the line only while a reader is
	// attached. An ended process is of class not found (its end, with its tail, is on its
	// way).
	AttachProcess(ctx context.Context, id, reader string, tail bool) error
	DetachProcess(ctx context.Context, id, reader string) error

	ReadFile(ctx context.Context, op FileRead) (FileContent, error)
	WriteFile(ctx context.Context, op FileWrite) (FileEntry, error)
	ListFiles(ctx context.Context, op FileList) (FileListing, error)
	StatFile(ctx context.Context, op FileStat) (FileEntry, error)
	MakeDir(ctx context.Context, op FileMkdir) (FileEntry, error)
	RenameFile(ctx context.Context, op FileRename) (FileEntry, error)
	RemoveFile(ctx context.Context, op FileRemove) error
	// SetEgress sets the dialer of the connections its commands open through the egress
	// proxy (network "allowlist"; nil: none), and of its interpreter's between calls.
	SetEgress(d EgressDialer)

	// DialPort connects to port on the box's loopback (a server the session runs), through
	// the executor: the box has no other network. Errors: a *PortError (nothing listens
	// there), or one wrapping ErrNotReady when the sandbox is gone.
	DialPort(ctx context.Context, port int) (net.Conn, error)
	// ListeningPorts lists the TCP ports the session's processes listen on, by port.
	ListeningPorts(ctx context.Context) ([]ListeningPort, error)

	// WatchDir watches spec as watcher id, with inotify in the box: sink gets its events in
	// order, from one goroutine, as they happen, until stop is called; a watcher that ends
	// without stop (the box ended) gets a last call with end set. Errors: of class invalid
	// (a path outside the home), not found (a missing directory), conflict (the box's
	// watcher cap), or wrapping ErrNotReady.
	WatchDir(ctx context.Context, id string, spec WatchSpec, sink func(events []WatchEvent, end error)) (stop func(), err error)
}

// ListeningPort is a TCP port a session's process listens on, reachable through the daemon
// when it listens on the box's loopback or on every address.
type ListeningPort struct {
	Port int `json:"port"`
	// Address is where it listens: "127.0.0.1", "::1", "0.0.0.0" or "::".
	Address string `json:"address"`
}

// PortError refuses a connection to a session's port: nothing listens there, or the port is
// not the session's to serve. Transports answer 502 Bad Gateway with its text.
type PortError struct {
	Port int
	// Why is the executor's reason ("connection refused: nothing listens on port 8000").
	Why string
}

func (e *PortError) Error() string { return e.Why }

// PortRequest is the ledger's record of one request to a session's port (a WebSocket is one
// request, from its upgrade to its close).
type PortRequest struct {
	// ID is "rq_" and 26 lowercase base32 characters, given by the ledger as it records it.
	ID        string `json:"id,omitempty"`
	SessionID string `json:"session_id"`
	Agent     string `json:"agent"`
	Port      int    `json:"port"`
	Method    string `json:"method"`
	// Path is the path on the port's server, its first 1024 bytes.
	Path string `json:"path"`
	// Status is the HTTP status the client got (101 for a WebSocket; 0 when none was sent).
	Status int `json:"status"`
	// Client is who sent it: the remote address.
	Client    string `json:"client"`
	WebSocket bool   `json:"websocket,omitempty"`
	// BytesIn is what the client sent (its body, or its WebSocket frames), BytesOut what it
	// got, in bytes.
	BytesIn    int64     `json:"bytes_in"`
	BytesOut   int64     `json:"bytes_out"`
	StartedAt  time.Time `json:"started_at"`
	DurationMS int64     `json:"duration_ms"`
	// Error is why the proxy failed it, "" when the server answered.
	Error string `json:"error,omitempty"`
}

// WorkspaceEgressOwner is the owner the executor gives a connection of a session's uid while
// no call of its interpreter runs: its commands' (and what they left running).
const WorkspaceEgressOwner = "workspace"

// ProcessInfo is one of a session's commands.
type ProcessInfo struct {
	// ID is "pr_" and 26 lowercase base32 characters; PID its process ID in the box.
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	PID       int    `json:"pid"`
	// Command is the command line as given: cmd, or argv shell-quoted (ShellQuote), so the
	// line shows what ran.
	Command string `json:"command"`
	// CommandTruncated says Command holds only the start of a longer line (the ledger keeps
	// its first 4096 bytes).
	CommandTruncated bool      `json:"command_truncated,omitempty"`
	Argv             []string  `json:"argv"`
	Cwd              string    `json:"cwd"`
	Background       bool      `json:"background"`
	PTY              *TermSize `json:"pty,omitempty"`
	TimeoutMS        int64     `json:"timeout_ms,omitempty"`
	// State is "running" or "ended"; End says how it ended.
	State     string      `json:"state"`
	StartedAt time.Time   `json:"started_at"`
	EndedAt   *time.Time  `json:"ended_at,omitempty"`
	End       *ProcessEnd `json:"end,omitempty"`
	// StdoutBytes and StderrBytes count what it wrote: of a background command, as of its
	// last reader's attach or what has reached the daemon since (its box keeps the count).
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
}

// CommandRecorder keeps the ledger of a session's commands (the store implements it); nil records
// nothing.
type CommandRecorder interface {
	RecordCommand(ctx context.Context, agent string, p ProcessInfo) error
}

// SessionEgressRecorder keeps the ledger of the outbound connections of a session's commands
// and of what its calls left running (network "allowlist"; a call's own are in its run's
// record): one record as each ends. The store implements it; nil records nothing.
type SessionEgressRecorder interface {
	RecordSessionEgress(ctx context.Context, agent, sessionID string, c EgressConnection) error
}

// TermSize is a terminal's size in characters.
type TermSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// ProcessEnd is how a command's process ended.
type ProcessEnd struct {
	// ExitCode is the exit status, -1 when it was killed by a signal (Signal names it).
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	// Outcome: ok (exit 0), error (another status or a signal), timeout, output_limit,
	// killed (the session ended, or a SIGKILL through the API), sandbox_error.
	Outcome         Outcome `json:"outcome"`
	Reason          string  `json:"reason,omitempty"`
	DurationMS      int64   `json:"duration_ms"`
	StdoutTruncated bool    `json:"stdout_truncated,omitempty"`
	StderrTruncated bool    `json:"stderr_truncated,omitempty"`
}

// Signals a client may send a command's process, by name.
var Signals = []string{"SIGINT", "SIGTERM", "SIGKILL", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGSTOP", "SIGCONT"}

// CheckSignal returns the canonical name of a signal ("INT", "sigterm" and "SIGTERM" are
// SIGTERM), or a *FieldError naming the allowed ones.
func CheckSignal(name string) (string, error) {
	n := strings.ToUpper(strings.TrimSpace(name))
	if !strings.HasPrefix(n, "SIG") {
		n = "SIG" + n
	}
	for _, s := range Signals {
		if s == n {
			return s, nil
		}
	}
	return "", &FieldError{Field: "signal", Message: fmt.Sprintf("%q is not a signal sandpit sends; use one of %s", name, strings.Join(Signals, ", "))}
}

// The file operations on a session's files. Paths are the session's view (absolute under
// SessionHome, or relative to it); every operation refuses a path outside the session's home
// (FieldError of class invalid naming the path and the rule), never follows a symbolic link
// (one on the way is refused, also when it was swapped in after a check), and refuses FIFOs,
// sockets and devices by name.

// FileRead reads a file: Length bytes from Offset (Length 0: to the end, up to MaxBytes).
type FileRead struct {
	Path     string `json:"path"`
	Offset   int64  `json:"offset,omitempty"`
	Length   int64  `json:"length,omitempty"`
	MaxBytes int64  `json:"max_bytes"`
}

// FileWrite creates or replaces a file with Content (Append adds to its end instead),
// making missing parent directories when Parents is set.
type FileWrite struct {
	Path    string `json:"path"`
	Content []byte `json:"content"`
	Parents bool   `json:"parents,omitempty"`
	Append  bool   `json:"append,omitempty"`
}

// FileList lists a directory's entries, Depth levels down (1: its own entries), at most
// MaxEntries (the answer says when it stopped there).
type FileList struct {
	Path       string `json:"path"`
	Depth      int    `json:"depth"`
	MaxEntries int    `json:"max_entries"`
}

// FileStat describes one path.
type FileStat struct {
	Path string `json:"path"`
}

// FileMkdir makes a directory (Parents: and its missing parents; an existing directory is
// then no error).
type FileMkdir struct {
	Path    string `json:"path"`
	Parents bool   `json:"parents,omitempty"`
}

// FileRename renames or moves From to To (within the session's home); an existing To is
// replaced only when Overwrite is set.
type FileRename struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Overwrite bool   `json:"overwrite,omitempty"`
}

// FileRemove removes a file or an empty directory; a directory with entries only when
// Recursive is set.
type FileRemove struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// FileEntry describes one file of a session.
type FileEntry struct {
	// Path is the session's view ("/home/user/data/a.csv"); Name its last element.
	Path string `json:"path"`
	Name string `json:"name"`
	// Type is "file", "dir", "symlink" or "other" (a FIFO, socket or device).
	Type       string    `json:"type"`
	SizeBytes  int64     `json:"size_bytes"`
	Mode       string    `json:"mode"` // permission bits in octal, "0644"
	ModifiedAt time.Time `json:"modified_at"`
	// Target is a symbolic link's target, as written (never followed).
	Target string `json:"target,omitempty"`
}

// FileListing is a FileList's answer: entries in path order, Truncated when MaxEntries
// stopped it.
type FileListing struct {
	Entries   []FileEntry `json:"entries"`
	Truncated bool        `json:"truncated,omitempty"`
}

// FileContent is a FileRead's answer: the bytes, and the file's size. Release, when set,
// frees what the read holds in the daemon's budget of reads (see session.Session.ReadFile):
// call Done once the answer is written.
type FileContent struct {
	Entry   FileEntry `json:"entry"`
	Content []byte    `json:"content"`
	Release func()    `json:"-"`
}

// Done calls Release, if set (more than once is harmless when Release is, as the engine's is).
func (c FileContent) Done() {
	if c.Release != nil {
		c.Release()
	}
}

// ErrProcessNotFound means a session has no process of that ID. It is of class
// errclass.NotFound.
var ErrProcessNotFound = errclass.New(errclass.NotFound, "process not found")

var processIDPattern = regexp.MustCompile(`^pr_[a-z2-7]{26}$`)

// ValidProcessID reports whether id has the form of a process ID.
func ValidProcessID(id string) bool { return processIDPattern.MatchString(id) }

var shareIDPattern = regexp.MustCompile(`^sh_[a-z2-7]{26}$`)

// ValidShareID reports whether id has the form of a port share's ID.
func ValidShareID(id string) bool { return shareIDPattern.MatchString(id) }

// NewShareID returns a new port share ID: "sh_" and 26 lowercase base32 characters.
func NewShareID() string { return "sh_" + NewSessionID()[3:] }

// NewProcessID returns a new process ID: "pr_" and 26 lowercase base32 characters.
func NewProcessID() string { return "pr_" + NewSessionID()[3:] }

// ShellQuote renders argv as a POSIX shell would need it typed: arguments joined by spaces,
// each one holding anything but letters, digits and @%+=:,./_- (or empty) in single quotes,
// a single quote in it closed, escaped and opened again:
//
//	["echo", "a b", "c;d", "it's"] is echo 'a b' 'c;d' 'it'\''s'
func ShellQuote(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a != "" && strings.IndexFunc(a, needsQuote) < 0 {
			b.WriteString(a)
			continue
		}
		b.WriteByte('\'')
		b.WriteString(strings.ReplaceAll(a, "'", `'\''`))
		b.WriteByte('\'')
	}
	return b.String()
}

func needsQuote(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	}
	return !strings.ContainsRune("@%+=:,./_-", r)
}
