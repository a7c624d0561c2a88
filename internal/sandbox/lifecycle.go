package sandbox

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
)

// A session's lifecycle beyond active and ended: paused (every process of it frozen where it
// stands, memory kept, no CPU), hibernated (its files written to the daemon's data directory
// and its sandbox removed; resumed in a new sandbox with the same ID, files and packages and a
// new interpreter) and forked (a new session from a paused or hibernated one's files).

// The states of a session besides SessionActive and SessionEnded.
const (
	SessionPaused     = "paused"
	SessionHibernated = "hibernated"
)

// What a resumed session kept of its interpreter's memory (SessionLifecycle.Memory).
const (
	MemoryKept = "kept" // resumed from a pause: the same processes, globals and all
	MemoryLost = "lost" // resumed from a hibernation: a new interpreter over the same files
)

// The reasons a hibernated session ends without a resume (SessionInfo.EndReason).
const (
	// EndLost: its hibernation could not be brought back (its file is missing, or was altered
	// on disk and refused), or the daemon was killed while it was written.
	EndLost = "lost"
	// EndHibernationExpired: it stayed hibernated past hibernated_max_age (retention).
	EndHibernationExpired = "hibernation_expired"
)

// SessionLifecycle is the part of a session's state about pauses and hibernations; it is
// embedded in SessionInfo.
type SessionLifecycle struct {
	// AutoResume: a call to the session while it is paused or hibernated resumes it (else the
	// call is refused with a *SessionPausedError). AutoPause: the session pauses instead of
	// ending when its idle timeout passes.
	AutoResume bool `json:"auto_resume,omitempty"`
	AutoPause  bool `json:"auto_pause,omitempty"`
	// PausedAt is when it was paused (set while paused or hibernated).
	PausedAt *time.Time `json:"paused_at,omitempty"`
	// RanMS is how long it has run, in milliseconds: the time not paused nor hibernated. Its
	// maximum lifetime counts this time only.
	RanMS int64 `json:"ran_ms"`
	// Memory says what its last resume kept of the interpreter's memory: MemoryKept or
	// MemoryLost (empty before any resume).
	Memory string `json:"memory,omitempty"`
	// Hibernation is its hibernation file while hibernated (and after, for the record).
	Hibernation *Hibernation `json:"hibernation,omitempty"`
	// ForkedFrom is the session this one was forked from.
	ForkedFrom string `json:"forked_from,omitempty"`
	// LifecycleError says why the last pause, hibernation or resume asked for failed (the
	// session stayed as it was), empty when it did not.
	LifecycleError string `json:"lifecycle_error,omitempty"`
	// History lists its lifecycle's events, oldest first (the last MaxSessionHistory).
	History []SessionEvent `json:"history,omitempty"`
}

// Hibernation is where a hibernated session's files are, and what they must hash to.
type Hibernation struct {
	// Daemon is the daemon whose data directory holds the file (empty with one daemon).
	Daemon string `json:"daemon,omitempty"`
	// Bytes is the file's size; SHA256 its digest, hex. A file that does not match is refused.
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	// At is when it was written.
	At time.Time `json:"at"`
	// Paths are the session's installed dependencies' directories (in the package volume).
	Paths []string `json:"paths,omitempty"`
}

// SessionEvent is one step of a session's lifecycle.
type SessionEvent struct {
	At time.Time `json:"at"`
	// Event is "created", "adopted" (from the warm pool), "paused", "resumed", "hibernated",
	// "forked" (from Detail's session), "hibernate_failed" or "ended" (Detail: the end
	// reason); Detail adds why or how ("auto_pause", "memory lost", …).
	Event  string `json:"event"`
	Detail string `json:"detail,omitempty"`
}

// MaxSessionHistory bounds SessionLifecycle.History.
const MaxSessionHistory = 50

// AddEvent appends an event to the session's history, dropping the oldest past
// MaxSessionHistory.
func (l *SessionLifecycle) AddEvent(at time.Time, event, detail string) {
	l.History = append(l.History, SessionEvent{At: at.UTC(), Event: event, Detail: detail})
	if n := len(l.History); n > MaxSessionHistory {
		l.History = append([]SessionEvent(nil), l.History[n-MaxSessionHistory:]...)
	}
}

// SessionOptions are a new session's lifecycle options (embedded in SessionRequest).
type SessionOptions struct {
	// AutoResume: a call to the session while it is paused or hibernated resumes it.
	AutoResume bool
	// AutoPause: the session pauses instead of ending at its idle timeout; nil means
	// SessionConfig's default (session_auto_pause).
	AutoPause *bool
}

// PausableBox is a SessionBox whose processes can be frozen where they stand and thawed.
type PausableBox interface {
	// Pause freezes every process of the sandbox (no CPU; memory kept); Unpause thaws them.
	Pause(ctx context.Context) error
	Unpause(ctx context.Context) error
}

// FilesBox is a SessionBox whose files can be saved and restored: the session's working
// directory and home (everything it wrote or installed there), as one tar stream.
type FilesBox interface {
	// SaveFiles writes the session's files to w as a tar stream. The box must be running (not
	// paused).
	SaveFiles(ctx context.Context, w io.Writer) error
	// RestoreFiles unpacks a stream SaveFiles wrote into this box's session, as the session's
	// own user, after its interpreter started. When r is a HostFile, a box that can read the
	// daemon's files may read it in place instead of the stream.
	RestoreFiles(ctx context.Context, r io.Reader) error
}

// SizedFilesBox is a FilesBox that can say, before writing it, how many bytes SaveFiles would
// write now (without reading the files' bytes): a hibernation or fork is refused before a
// byte of a file too large is written. Both runtimes' boxes are.
type SizedFilesBox interface {
	FilesBox
	// FilesSize returns the bytes SaveFiles would write now. The box must be running.
	FilesSize(ctx context.Context) (int64, error)
}

// HostFile is a stream for FilesBox.RestoreFiles that is also a whole file on the daemon's
// host (a hibernation file), read from its start. A box may read the file at Path instead of
// the stream, once Check has returned nil: Check waits for the file's integrity check and
// returns its error (the file must then not be read at all). The stream stays unread until a
// box reads it, so a box that cannot read the file in place can still fall back to it.
type HostFile interface {
	io.Reader
	Path() string
	Check() error
}

// HibernationLedger keeps the lifecycle's states past the daemon's life.
type HibernationLedger interface {
	// UpdateSession records info's state as it is now (paused, hibernated or active again).
	UpdateSession(ctx context.Context, info SessionInfo) error
	// HibernatedSessions returns this daemon's hibernated sessions.
	HibernatedSessions(ctx context.Context) ([]SessionInfo, error)
}

// SessionPausedError is the answer to a call to a paused or hibernated session created
// without auto_resume. It is of class errclass.Conflict; transports answer 409.
type SessionPausedError struct {
	ID, Agent, State string
}

// Is makes a SessionPausedError of class errclass.Conflict.
func (e *SessionPausedError) Is(target error) bool { return target == errclass.Conflict }

func (e *SessionPausedError) Error() string {
	return fmt.Sprintf("session %s is %s; resume it first (POST /v1/agents/%s/sessions/%s/resume), or create sessions with \"auto_resume\": true so that a call resumes them",
		e.ID, e.State, e.Agent, e.ID)
}

// SessionBudgetError refuses a pause, hibernation or fork that would pass a budget, named by
// its configuration key. It is of class errclass.Busy; transports answer 429.
type SessionBudgetError struct {
	// Budget is the configuration key (sessions_paused_max_bytes, hibernated_per_agent,
	// hibernated_max_bytes); Limit its value; Need what the step would take it to.
	Budget      string
	Limit, Need int64
	// Fix says what frees room.
	Fix string
}

// Is makes a SessionBudgetError of class errclass.Busy.
func (e *SessionBudgetError) Is(target error) bool { return target == errclass.Busy }

func (e *SessionBudgetError) Error() string {
	return fmt.Sprintf("this would take %s to %d, past its limit of %d; %s", e.Budget, e.Need, e.Limit, e.Fix)
}

// SessionStateError refuses a lifecycle step the session's state does not allow (pause of a
// paused session, fork of an active one). It is of class errclass.Conflict.
type SessionStateError struct {
	ID, State, Step, Fix string
}

// Is makes a SessionStateError of class errclass.Conflict.
func (e *SessionStateError) Is(target error) bool { return target == errclass.Conflict }

func (e *SessionStateError) Error() string {
	return fmt.Sprintf("session %s is %s, so it cannot be %s; %s", e.ID, e.State, e.Step, e.Fix)
}
