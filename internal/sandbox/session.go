package sandbox

import (
	"context"
	"crypto/rand"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
)

// Sessions: an interpreter that keeps its globals, imports and working directory from call to
// call, in a sandbox of its own (a dedicated container with a slot's image, hardening and
// limits: sessions of different agents, and sessions and one-shot runs, share nothing
// writable). Calls to one session run one at a time, in the order they came. A call that
// passes its timeout is interrupted and the session lives on; one that does not stop is
// killed and the session ends, as it does on memory exhaustion, when its sandbox dies, when it
// is idle too long or reaches its lifetime, when it is closed, and when the daemon stops.
// Every later call to an ended session gets a SessionEndedError, never a new interpreter.

// SessionBox is one session's own sandbox, running its interpreter, its commands and serving
// its files.
type SessionBox interface {
	Workspace
	// Run runs spec (with Session set) as the session's next call; see Runtime.Run for the
	// contract (the slot is the box's only one).
	Run(ctx context.Context, spec Spec, emit func(Event)) (Result, error)
	// Install makes requirements importable for the session (see Installer).
	Install(ctx context.Context, req InstallRequest, progress func(DependencyStatus)) (Installed, error)
	// Done is closed when the sandbox has stopped (Err says why).
	Done() <-chan struct{}
	Err() error
	// Close stops the interpreter and removes the sandbox.
	Close(ctx context.Context) error
}

// SessionOpener starts sessions' sandboxes.
type SessionOpener interface {
	// OpenSession starts the sandbox of session id. Errors wrap ErrNotReady when the engine
	// cannot start one now.
	OpenSession(ctx context.Context, id string) (SessionBox, error)
}

// SessionLedger keeps sessions past the daemon's life: which existed, and how each ended.
type SessionLedger interface {
	// BeginSession records a new session; EndSession its end (state ended, EndReason, Reason,
	// EndedAt set).
	BeginSession(ctx context.Context, info SessionInfo) error
	EndSession(ctx context.Context, info SessionInfo) error
	// The states of pauses and hibernations (see lifecycle.go).
	HibernationLedger
	// LookupSession returns the record of session id; an error wrapping ErrSessionNotFound
	// when there is none. When another daemon sharing the ledger holds it open, the record
	// comes with an error of class not found that names that daemon.
	LookupSession(ctx context.Context, id string) (SessionInfo, error)
}

// The states of a session (and SessionPaused, SessionHibernated: see lifecycle.go).
const (
	SessionActive = "active"
	SessionEnded  = "ended"
)

// The reasons a session ends (SessionInfo.EndReason); a call's Result.SessionEnded holds one
// of the first four when the call ended its session.
const (
	EndKilled        = "killed"         // a call did not stop after its interrupt and was killed
	EndMemoryLimit   = "memory_limit"   // a call ran out of memory
	EndExited        = "exited"         // the interpreter ended by itself (os._exit, a signal)
	EndSandboxError  = "sandbox_error"  // the session's sandbox failed or stopped
	EndClosed        = "closed"         // its client closed it (DELETE)
	EndIdleTimeout   = "idle_timeout"   // no call for its idle timeout
	EndMaxLifetime   = "max_lifetime"   // it reached its maximum lifetime
	EndDaemonStopped = "daemon_stopped" // the daemon stopped or restarted
	EndDeadline      = "deadline"       // it reached its deadline (E2B's sandbox timeout)
)

// SessionInfo is a session's state. Its JSON form is the ledger's (REST writes
// apitype.Session).
type SessionInfo struct {
	// ID is "se_" and 26 lowercase base32 characters.
	ID    string `json:"id"`
	Agent string `json:"agent"`
	// Template is the template the session started from (NAME or OWNER/NAME; "" for the
	// daemon's own image).
	Template string `json:"template,omitempty"`
	// State is "active" or "ended"; EndReason (one of the End constants) and Reason say why
	// an ended session ended.
	State     string `json:"state"`
	EndReason string `json:"end_reason,omitempty"`
	Reason    string `json:"reason,omitempty"`
	// IdleTimeoutMS and MaxLifetimeMS are the session's limits, in milliseconds.
	IdleTimeoutMS int64 `json:"idle_timeout_ms"`
	MaxLifetimeMS int64 `json:"max_lifetime_ms"`
	// Limits are each call's limits; MemoryBytes holds for the interpreter's whole state.
	Limits Limits `json:"limits"`
	// Dependencies are the requirements installed for the session (absent when none).
	Dependencies []DependencyStatus `json:"dependencies,omitempty"`
	// NetworkAllow narrows the daemon's network_allow for everything the session sends out
	// (its calls, its commands, the processes they leave running); nil: the daemon's list as
	// it is, empty: nothing out. An empty list stays in the JSON (omitzero omits nil only): a
	// hibernated session's record must not widen to the daemon's list when it is read back.
	NetworkAllow []string `json:"network_allow,omitzero"`
	// Secrets names the secrets the session's calls and commands may use (docs/secrets.md):
	// their code sees placeholders, and the egress proxy adds the values. Names only.
	Secrets []string `json:"secrets,omitempty"`
	// CreatedAt, LastUsedAt (the last call's end, or the creation) and ExpiresAt (when it
	// ends if no call comes: the earliest of its idle timeout, lifetime and deadline) are RFC
	// 3339, UTC; EndedAt is set once it ended.
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt time.Time  `json:"last_used_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	EndedAt    *time.Time `json:"ended_at,omitempty"`
	// Deadline, when set, ends the session then whatever it does (or pauses it, with
	// auto_pause); it can be moved (Session.SetDeadline). E2B's sandbox timeout.
	Deadline *time.Time `json:"deadline,omitempty"`
	// Calls counts the calls that ran, the one running now among them (and the one that ended
	// the session); Busy says one runs now; Waiting how many wait.
	Calls   int  `json:"calls"`
	Busy    bool `json:"busy"`
	Waiting int  `json:"waiting"`
	// SessionLifecycle holds its pauses and hibernations (see lifecycle.go).
	SessionLifecycle
}

// SessionRequest asks for a new session.
type SessionRequest struct {
	// Agent owns the session; empty means "default".
	Agent string
	// Template names the template the session starts from (NAME, or OWNER/NAME of a shared
	// one); "" is the daemon's own image.
	Template string
	// Dependencies are PEP 508 requirements installed once, when the session is created.
	Dependencies []string
	// IdleTimeoutMS ends the session after that long without a call; nil means
	// SessionConfig.IdleTimeout. MaxLifetimeMS ends it that long after its creation; nil means
	// SessionConfig.MaxLifetime. Both are 1000 ..= SessionConfig.MaxLifetime.
	IdleTimeoutMS *int64
	MaxLifetimeMS *int64
	// NetworkAllow narrows the daemon's network_allow for all the session sends out (nil:
	// the daemon's list; empty: nothing out).
	NetworkAllow []string
	// Env is set for the session's commands (a command's own env wins). It is not recorded.
	Env map[string]string
	// Secrets names the secrets its calls and commands may use (SessionInfo.Secrets).
	Secrets []string
	// Deadline, when set, ends (or, with auto_pause, pauses) the session then; it must lie
	// within its maximum lifetime.
	Deadline *time.Time
	// SessionOptions are its lifecycle options (auto_resume, auto_pause).
	SessionOptions
}

// ErrSessionNotFound means no session has the ID for the agent. It is of class
// errclass.NotFound; transports answer 404.
var ErrSessionNotFound = errclass.New(errclass.NotFound, "session not found")

// SessionEndedError is the answer to a call to an ended session. It is of class
// errclass.Gone; transports answer 410.
type SessionEndedError struct{ Info SessionInfo }

// Is makes a SessionEndedError of class errclass.Gone.
func (e *SessionEndedError) Is(target error) bool { return target == errclass.Gone }

func (e *SessionEndedError) Error() string {
	msg := fmt.Sprintf("session %s has ended (%s)", e.Info.ID, e.Info.EndReason)
	if e.Info.Reason != "" {
		msg += ": " + e.Info.Reason
	}
	return msg + "; create a new session (its state is gone)"
}

// SessionBusyError is the answer to a call that asked not to wait while another call of the
// session runs (or found too many waiting, or waited its timeout). It is of class
// errclass.Conflict; transports answer 409.
type SessionBusyError struct {
	ID string
	// Waited is how long the call waited for its turn (its timeout), 0 when it asked not to.
	Waited time.Duration
	// Step, when set, is the lifecycle step refused while a call runs ("paused",
	// "hibernated"): it has no "wait" to give.
	Step string
	// Full says that MaxSessionWaiting calls were waiting already.
	Full bool
}

// Is makes a SessionBusyError of class errclass.Conflict.
func (e *SessionBusyError) Is(target error) bool { return target == errclass.Conflict }

func (e *SessionBusyError) Error() string {
	if e.Step != "" {
		return fmt.Sprintf("session %s is running a call, so it cannot be %s now; try again once the call has answered", e.ID, e.Step)
	}
	if e.Full {
		return fmt.Sprintf("session %s already has %d calls waiting for their turn; wait for their answers before sending more", e.ID, MaxSessionWaiting)
	}
	if e.Waited > 0 {
		return fmt.Sprintf("session %s was still running earlier calls after this call waited its timeout_ms (%d ms) for its turn; retry, or give a longer timeout_ms",
			e.ID, e.Waited.Milliseconds())
	}
	return fmt.Sprintf("session %s is running another call; send the call without \"wait\": false to wait for its turn", e.ID)
}

// SessionLimitError is the answer to a new session past a cap. It is of class errclass.Busy;
// transports answer 429.
type SessionLimitError struct {
	Agent    string
	Limit    int
	PerAgent bool
}

// Is makes a SessionLimitError of class errclass.Busy.
func (e *SessionLimitError) Is(target error) bool { return target == errclass.Busy }

func (e *SessionLimitError) Error() string {
	if e.PerAgent {
		return fmt.Sprintf("agent %q has %d active sessions, its limit (sessions_per_agent); close one (DELETE …/sessions/{id}), "+
			"hibernate one (POST …/sessions/{id}/hibernate: it keeps its state without a sandbox), let one expire, "+
			"or raise sessions_per_agent in the daemon's configuration", e.Agent, e.Limit)
	}
	if e.Limit == 0 {
		return "sessions are off on this daemon (sessions_max is 0)"
	}
	return fmt.Sprintf("the daemon has %d active sessions, its limit (sessions_max); close one, retry later, "+
		"or raise sessions_max in the daemon's configuration (each session holds a sandbox of memory_bytes)", e.Limit)
}

var sessionIDPattern = regexp.MustCompile(`^se_[a-z2-7]{26}$`)

// ValidSessionID reports whether id has the form of a session ID.
func ValidSessionID(id string) bool { return sessionIDPattern.MatchString(id) }

// NewSessionID returns a new session ID: "se_" and 26 lowercase base32 characters.
func NewSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "se_" + strings.ToLower(idEncoding.EncodeToString(b[:]))
}

// MaxSessionWaiting caps the calls that wait for one session's turn; one more gets a
// *SessionBusyError at once.
const MaxSessionWaiting = 8

// CPUWeigher is a SessionBox whose weight in the host's CPU under contention can be changed
// while it runs (the Docker runtime's; a pod's requests cannot change in place).
type CPUWeigher interface {
	// SetCPUWeight sets the box's relative CPU weight, in cgroup cpu.shares (2 to 262144;
	// DefaultCPUWeight is a slot's and a new box's). Errors come from the engine.
	SetCPUWeight(ctx context.Context, shares int64) error
}

// DefaultCPUWeight is the CPU weight of a box the daemon has not weighed (cgroup cpu.shares'
// default).
const DefaultCPUWeight = 1024

// BoxStats is one sample of what a session's sandbox uses.
type BoxStats struct {
	// At is when the sample was read.
	At time.Time
	// CPUs is the box's CPU quota rounded up to whole CPUs; CPUPercent how much of the quota
	// it used over the last second or so (0 to 100).
	CPUs       int
	CPUPercent float64
	// MemoryBytes is its memory in use, not counting the page cache (MemoryCacheBytes);
	// MemoryLimitBytes its memory limit.
	MemoryBytes, MemoryCacheBytes, MemoryLimitBytes int64
	// DiskBytes is what the session's home holds; DiskLimitBytes the home's size.
	DiskBytes, DiskLimitBytes int64
}

// StatsReader is a SessionBox that can say what it uses (the Docker runtime's).
type StatsReader interface {
	// Stats reads one sample. Errors come from the engine.
	Stats(ctx context.Context) (BoxStats, error)
}
