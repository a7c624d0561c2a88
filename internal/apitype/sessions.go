package apitype

import (
	"encoding/json"
	"time"
)

// SessionCreate is the body of POST /v1/agents/{agent}/sessions; every field is optional.
type SessionCreate struct {
	// Dependencies are PEP 508 requirements installed once, when the session is created.
	Dependencies []string `json:"dependencies,omitempty"`
	// IdleTimeoutMS ends the session after that long without a call, MaxLifetimeMS that long
	// after its creation (milliseconds, 1000 to session_max_lifetime_ms; nil: the daemon's
	// session_idle_timeout_ms and session_max_lifetime_ms).
	IdleTimeoutMS *int64 `json:"idle_timeout_ms,omitempty"`
	MaxLifetimeMS *int64 `json:"max_lifetime_ms,omitempty"`
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
	SessionActive = "active"
	SessionEnded  = "ended"
)

// The reasons a session ends (Session.EndReason, Result.SessionEnded).
const (
	EndKilled        = "killed"         // a call did not stop within 2 s of its interrupt
	EndMemoryLimit   = "memory_limit"   // a call ran out of memory
	EndExited        = "exited"         // the interpreter ended by itself
	EndSandboxError  = "sandbox_error"  // the session's sandbox failed or stopped
	EndClosed        = "closed"         // DELETE …/sessions/{id}
	EndIdleTimeout   = "idle_timeout"   // no call for its idle timeout
	EndMaxLifetime   = "max_lifetime"   // it reached its maximum lifetime
	EndDaemonStopped = "daemon_stopped" // the daemon stopped or restarted
)

// Session is a stateful session, as POST, GET and DELETE /v1/agents/{agent}/sessions… answer
// it.
type Session struct {
	// ID is "se_" and 26 lowercase base32 characters.
	ID    string `json:"id"`
	Agent string `json:"agent"`
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
	// Calls counts the calls that ran; Busy says one runs now; Waiting how many wait.
	Calls   int  `json:"calls"`
	Busy    bool `json:"busy"`
	Waiting int  `json:"waiting"`
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
}
