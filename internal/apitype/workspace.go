package apitype

import "time"

// A session's workspace: commands and files by path (POST …/sessions/{id}/commands,
// …/processes, …/files). Paths are the session's view: its home is SessionHome, and relative
// paths start there.

// SessionHome is a session's home directory as its commands and files see it.
const SessionHome = "/home/user"

// CommandRequest is the body of POST /v1/agents/{agent}/sessions/{id}/commands.
type CommandRequest struct {
	// Cmd is run with `bash -lc`; Argv instead is run as it is. Exactly one is given.
	Cmd  string   `json:"cmd,omitempty"`
	Argv []string `json:"argv,omitempty"`
	// Cwd is the working directory (default SessionHome); Env adds environment variables to
	// the command's minimal environment.
	Cwd string            `json:"cwd,omitempty"`
	Env map[string]string `json:"env,omitempty"`
	// TimeoutMS bounds a foreground command (default and maximum: the daemon's
	// default_timeout_ms and max_timeout_ms); past it the command is killed with every
	// process it started. A background command has none.
	TimeoutMS *int64 `json:"timeout_ms,omitempty"`
	// Stdin (text) or StdinBase64 is written to its standard input first; a foreground
	// command's stdin is then closed.
	Stdin       string `json:"stdin,omitempty"`
	StdinBase64 string `json:"stdin_base64,omitempty"`
	// Background answers at once with the process (its ID), which runs on until it ends, is
	// signalled, or the session ends.
	Background bool `json:"background,omitempty"`
	// PTY runs the command in a terminal of that size (stdout carries what it shows).
	PTY *TermSize `json:"pty,omitempty"`
}

// TermSize is a terminal's size, in characters.
type TermSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// ProcessEnd is how a command's process ended.
type ProcessEnd struct {
	// ExitCode is its exit status, -1 when a signal (Signal) killed it.
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	// Outcome is ok, error, timeout, output_limit, killed or sandbox_error.
	Outcome         Outcome `json:"outcome"`
	Reason          string  `json:"reason,omitempty"`
	DurationMS      int64   `json:"duration_ms"`
	StdoutTruncated bool    `json:"stdout_truncated,omitempty"`
	StderrTruncated bool    `json:"stderr_truncated,omitempty"`
}

// Process is one command of a session.
type Process struct {
	// ID is "pr_" and 26 lowercase base32 characters; PID its process ID in the sandbox.
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	PID       int    `json:"pid"`
	Command   string `json:"command"`
	// CommandTruncated says Command holds only the start of a longer line (a recorded
	// command's first 4096 bytes).
	CommandTruncated bool      `json:"command_truncated,omitempty"`
	Argv             []string  `json:"argv"`
	Cwd              string    `json:"cwd"`
	Background       bool      `json:"background"`
	PTY              *TermSize `json:"pty,omitempty"`
	TimeoutMS        int64     `json:"timeout_ms,omitempty"`
	// State is "running" or "ended" (End set).
	State       string      `json:"state"`
	StartedAt   time.Time   `json:"started_at"`
	EndedAt     *time.Time  `json:"ended_at,omitempty"`
	End         *ProcessEnd `json:"end,omitempty"`
	StdoutBytes int64       `json:"stdout_bytes"`
	StderrBytes int64       `json:"stderr_bytes"`
}

// CommandResult is a foreground command's answer (JSON), or a background command's (Process
// only).
type CommandResult struct {
	Process Process `json:"process"`
	Stdout  string  `json:"stdout"`
	Stderr  string  `json:"stderr"`
}

// CommandEvent is one line of a command's NDJSON stream: "start" (Process, with its pid),
// "stdout" or "stderr" (Data), then "end" (Process, with End). Dropped, on a background
// command's kept output (?tail=true), counts the bytes of the stream before Data that its
// sandbox did not keep.
type CommandEvent struct {
	Type    string   `json:"type"`
	Data    string   `json:"data,omitempty"`
	Dropped int64    `json:"dropped,omitempty"`
	Process *Process `json:"process,omitempty"`
}

// ProcessList is the answer of GET …/processes.
type ProcessList struct {
	Processes []Process `json:"processes"`
}

// CommandList is the answer of GET …/sessions/{id}/commands: a page of the commands the
// ledger recorded for the session as each ended, newest first (their command lines cut at 4096
// bytes, without argv), and the cursor of the next page ("" after the last).
type CommandList struct {
	Commands   []Process `json:"commands"`
	NextCursor string    `json:"next_cursor"`
}

// ProcessInput is the body of POST …/processes/{pid}/input: Data (text) or DataBase64, then
// the end of its stdin when Close is set.
type ProcessInput struct {
	Data       string `json:"data,omitempty"`
	DataBase64 string `json:"data_base64,omitempty"`
	Close      bool   `json:"close,omitempty"`
}

// ProcessSignal is the body of POST …/processes/{pid}/signal.
type ProcessSignal struct {
	// Signal is SIGINT, SIGTERM, SIGKILL, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGSTOP or
	// SIGCONT ("TERM" and "term" name SIGTERM too).
	Signal string `json:"signal"`
}

// FileEntry is one file of a session.
type FileEntry struct {
	Path string `json:"path"`
	Name string `json:"name"`
	// Type is "file", "dir", "symlink" or "other".
	Type       string    `json:"type"`
	SizeBytes  int64     `json:"size_bytes"`
	Mode       string    `json:"mode"`
	ModifiedAt time.Time `json:"modified_at"`
	Target     string    `json:"target,omitempty"`
}

// FileListing is the answer of GET …/files/list.
type FileListing struct {
	Entries   []FileEntry `json:"entries"`
	Truncated bool        `json:"truncated,omitempty"`
}

// FileContent is the JSON answer of GET …/files?format=json: the file, and its bytes as text
// (Content, when they are UTF-8) or base64 (ContentBase64).
type FileContent struct {
	Entry         FileEntry `json:"entry"`
	Content       *string   `json:"content,omitempty"`
	ContentBase64 string    `json:"content_base64,omitempty"`
}

// FileWrite is the body of POST …/files: Content (text) or ContentBase64 written to Path
// (created or replaced), with its missing parent directories when Parents is set.
type FileWrite struct {
	Path          string  `json:"path"`
	Content       *string `json:"content,omitempty"`
	ContentBase64 string  `json:"content_base64,omitempty"`
	Parents       bool    `json:"parents,omitempty"`
}

// FileMkdir is the body of POST …/files/mkdir.
type FileMkdir struct {
	Path    string `json:"path"`
	Parents bool   `json:"parents,omitempty"`
}

// FileRename is the body of POST …/files/rename: From is moved to To, replacing an existing
// To only when Overwrite is set.
type FileRename struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Overwrite bool   `json:"overwrite,omitempty"`
}
