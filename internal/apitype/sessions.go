package apitype

import (
	"encoding/json"
	"time"
)

// SessionCreate is the body of POST /v1/agents/{agent}/sessions; every field is optional.
type SessionCreate struct {
	// Template starts the session from a template (NAME, or AGENT/NAME of another agent's
	// shared one; see docs/templates.md); "" is the daemon's own image.
	Template string `json:"template,omitempty"`
	// Dependencies are PEP 508 requirements installed once, when the session is created.
	Dependencies []string `json:"dependencies,omitempty"`
	// IdleTimeoutMS ends the session after that long without a call, MaxLifetimeMS that long
	// after its creation (milliseconds, 1000 to session_max_lifetime_ms; nil: the daemon's
	// session_idle_timeout_ms and session_max_lifetime_ms).
	IdleTimeoutMS *int64 `json:"idle_timeout_ms,omitempty"`
	MaxLifetimeMS *int64 `json:"max_lifetime_ms,omitempty"`
	// AutoResume: a call to the session while it is paused or hibernated resumes it (else
	// 409). AutoPause: it pauses instead of ending at its idle timeout (nil: the daemon's
	// session_auto_pause).
	AutoResume bool  `json:"auto_resume,omitempty"`
	AutoPause  *bool `json:"auto_pause,omitempty"`
	// NetworkAllow narrows the daemon's network_allow for everything the session sends out:
	// its calls, its commands and what they leave running (nil: the daemon's list; []:
	// nothing out). Each entry must lie within network_allow.
	NetworkAllow []string `json:"network_allow,omitzero"`
	// Secrets names the secrets the session's calls and commands may use (docs/secrets.md):
	// each is an environment variable holding a placeholder the egress proxy replaces with the
	// value in a request to one of the secret's hosts. At most 16.
	Secrets []string `json:"secrets,omitempty"`
	// Env are environment variables of the session's code (os.environ) and commands, over its
	// template's env (at most 64; names of letters, digits and "_"; not a secret's name).
	Env map[string]string `json:"env,omitempty"`
}

// SessionCall is the body of POST /v1/agents/{agent}/sessions/{id}/executions: code run in
// the session's interpreter, whose globals, imports and files persist from call to call.
type SessionCall struct {
	// Code is the Python source (UTF-8).
	Code string `json:"code"`
	// Input is the JSON value this call sees as INPUT; nil sends none (null).
	Input json.RawMessage `json:"input,omitempty"`
	// TimeoutMS is the call's wall-clock limit in milliseconds; nil means the daemon's default.
	// Past it the call is interrupted (KeyboardInterrupt) and the session lives on; a call that
	// has not stopped 2 s later is killed and the session ends.
	TimeoutMS *int64 `json:"timeout_ms,omitempty"`
	// Wait, when false, answers 409 at once while another call of the session runs, instead of
	// waiting (up to TimeoutMS) for the call's turn.
	Wait *bool `json:"wait,omitempty"`
	RunFiles
}

// The states of a session (Session.State).
const (
	SessionActive     = "active"
	SessionPaused     = "paused"     // frozen where it stands, memory kept
	SessionHibernated = "hibernated" // its files on the daemon's disk, no container
	SessionEnded      = "ended"
)

// What a resume kept of the interpreter's memory (Session.Memory).
const (
	MemoryKept = "kept"
	MemoryLost = "lost"
)

// The reasons a session ends (Session.EndReason, Result.SessionEnded).
const (
	EndKilled        = "killed"         // a call did not stop within 2 s of its interrupt
	EndMemoryLimit   = "memory_limit"   // a call ran out of memory
	EndExited        = "exited"         // the interpreter ended by itself
	EndSandboxError  = "sandbox_error"  // the session's sandbox failed or stopped
	EndClosed        = "closed"         // DELETE …/sessions/{id}
	EndIdleTimeout   = "idle_timeout"   // no call for its idle timeout
	EndDeadline      = "deadline"       // it reached its deadline
	EndMaxLifetime   = "max_lifetime"   // it reached its maximum lifetime
	EndDaemonStopped = "daemon_stopped" // the daemon stopped or restarted
	EndLost          = "lost"           // its hibernation could not be brought back
	// EndHibernationExpired: hibernated longer than hibernated_max_age_hours.
	EndHibernationExpired = "hibernation_expired"
)

// Session is a stateful session, as POST, GET and DELETE /v1/agents/{agent}/sessions… answer
// it.
type Session struct {
	// ID is "se_" and 26 lowercase base32 characters.
	ID    string `json:"id"`
	Agent string `json:"agent"`
	// Template is the template the session started from ("" for the daemon's own image).
	Template string `json:"template,omitempty"`
	// State is SessionActive or SessionEnded; EndReason (an End constant) and Reason say why
	// an ended session ended.
	State     string `json:"state"`
	EndReason string `json:"end_reason,omitempty"`
	Reason    string `json:"reason,omitempty"`
	// IdleTimeoutMS and MaxLifetimeMS are its limits, in milliseconds.
	IdleTimeoutMS int64 `json:"idle_timeout_ms"`
	MaxLifetimeMS int64 `json:"max_lifetime_ms"`
	// Limits are each call's limits; memory_bytes holds for the interpreter's whole state.
	Limits RunLimits `json:"limits"`
	// Dependencies are the requirements installed for the session.
	Dependencies []DependencyStatus `json:"dependencies,omitempty"`
	// CreatedAt, LastUsedAt and ExpiresAt (when an active session ends if no call comes) are
	// RFC 3339, UTC; EndedAt is set once it ended.
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt time.Time  `json:"last_used_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	EndedAt    *time.Time `json:"ended_at,omitempty"`
	// Deadline, when set, ends the session then whatever it does (E2B's sandbox timeout).
	Deadline *time.Time `json:"deadline,omitempty"`
	// NetworkAllow is its narrowing of network_allow (absent: the daemon's list; []: nothing
	// out).
	NetworkAllow []string `json:"network_allow,omitzero"`
	// Secrets names the secrets its calls and commands may use (never their values).
	Secrets []string `json:"secrets,omitempty"`
	// Calls counts the calls that ran; Busy says one runs now; Waiting how many wait.
	Calls   int  `json:"calls"`
	Busy    bool `json:"busy"`
	Waiting int  `json:"waiting"`
	// AutoResume and AutoPause are its options (see SessionCreate).
	AutoResume bool `json:"auto_resume"`
	AutoPause  bool `json:"auto_pause"`
	// PausedAt is when it was paused (while paused or hibernated); RanMS how long it ran
	// (its lifetime counts only that).
	PausedAt *time.Time `json:"paused_at,omitempty"`
	RanMS    int64      `json:"ran_ms"`
	// Memory says what its last resume kept: MemoryKept or MemoryLost.
	Memory string `json:"memory,omitempty"`
	// Hibernation is its hibernation file (while hibernated).
	Hibernation *Hibernation `json:"hibernation,omitempty"`
	// ForkedFrom is the session it was forked from.
	ForkedFrom string `json:"forked_from,omitempty"`
	// LifecycleError says why the last pause, hibernation or resume failed (it stayed as it
	// was).
	LifecycleError string `json:"lifecycle_error,omitempty"`
	// History is its lifecycle, oldest first (the last 50 events).
	History []SessionEvent `json:"history,omitempty"`
}

// Hibernation is a hibernated session's file: its size, SHA-256 (hex), when it was written
// and the daemon holding it.
type Hibernation struct {
	Daemon string    `json:"daemon,omitempty"`
	Bytes  int64     `json:"bytes"`
	SHA256 string    `json:"sha256"`
	At     time.Time `json:"at"`
}

// SessionEvent is a step of a session's lifecycle: "created", "paused", "resumed",
// "hibernated", "hibernate_failed", "forked" or "ended", with a detail.
type SessionEvent struct {
	At     time.Time `json:"at"`
	Event  string    `json:"event"`
	Detail string    `json:"detail,omitempty"`
}

// SessionList is the answer of GET /v1/agents/{agent}/sessions: the agent's active sessions
// and those that ended while the daemon ran, newest first.
type SessionList struct {
	Sessions []Session `json:"sessions"`
}

// SessionLimits is the "sessions" object of GET /v1/limits; the names are the config keys.
type SessionLimits struct {
	IdleTimeoutMS int64 `json:"session_idle_timeout_ms"`
	MaxLifetimeMS int64 `json:"session_max_lifetime_ms"`
	PerAgent      int   `json:"sessions_per_agent"`
	Max           int   `json:"sessions_max"`
	// Pauses and hibernations: the budgets, and what is used of them now.
	AutoPause          bool  `json:"session_auto_pause"`
	HibernateAfterMS   int64 `json:"session_hibernate_after_ms"`
	HibernateOnStop    bool  `json:"session_hibernate_on_stop"`
	PausedMaxBytes     int64 `json:"sessions_paused_max_bytes"`
	HibernatedPerAgent int   `json:"hibernated_per_agent"`
	HibernatedMaxBytes int64 `json:"hibernated_max_bytes"`
	HibernatedMaxAgeH  int64 `json:"hibernated_max_age_hours"`
	Paused             int   `json:"paused"`
	PausedBytes        int64 `json:"paused_bytes"`
	Hibernated         int   `json:"hibernated"`
	HibernatedBytes    int64 `json:"hibernated_bytes"`
}
