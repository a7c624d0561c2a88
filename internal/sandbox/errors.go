package sandbox

import (
	"fmt"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
)

// ErrNotReady means the sandbox cannot take runs now (the container or executor is starting
// or recovering). It is of class errclass.Unavailable; transports answer 503.
var ErrNotReady = errclass.New(errclass.Unavailable, "sandbox is not ready")

// BusyError means every slot is running and the queue is full, or (Agent set) that Agent
// already has PerAgent executions running and queued, its cap (executions_per_agent).
// Transports answer 429 with Retry-After set from RetryAfter.
type BusyError struct {
	Slots, Queue int
	RetryAfter   time.Duration
	Agent        string
	PerAgent     int
}

// Is makes a BusyError of class errclass.Busy.
func (e *BusyError) Is(target error) bool { return target == errclass.Busy }

func (e *BusyError) Error() string {
	if e.Agent != "" {
		return fmt.Sprintf("sandbox is busy for agent %q: it has %d executions running or queued, its limit (executions_per_agent); retry after %s",
			e.Agent, e.PerAgent, e.RetryAfter)
	}
	return fmt.Sprintf("sandbox is busy: all %d slots are running and %d requests are queued; retry after %s",
		e.Slots, e.Queue, e.RetryAfter)
}

// NoRoomError means the runtime has no room for another sandbox now: the cluster placed its
// pod on no node, or its quota refused the pod. Why is the cluster's reason; Room how many more
// sandboxes fit by what the runtime read ("" when unknown); Fix what makes room. It is of
// class errclass.Busy; transports answer 429.
type NoRoomError struct {
	Why, Room, Fix string
}

// Is makes a NoRoomError of class errclass.Busy.
func (e *NoRoomError) Is(target error) bool { return target == errclass.Busy }

func (e *NoRoomError) Error() string {
	msg := "no room for another sandbox: " + e.Why
	if e.Room != "" {
		msg += "; " + e.Room
	}
	return msg + "; " + e.Fix
}

// FieldError says which request field is invalid and what is allowed. Transports answer 400
// (or 413 when TooLarge is set) naming Field.
type FieldError struct {
	Field   string
	Message string
	// TooLarge marks a value over a size limit (HTTP 413).
	TooLarge bool
}

// Is makes a FieldError of class errclass.TooLarge when TooLarge is set, errclass.Invalid
// otherwise.
func (e *FieldError) Is(target error) bool {
	if e.TooLarge {
		return target == errclass.TooLarge
	}
	return target == errclass.Invalid
}

// Error is "Field: Message", or Message alone when it starts with the field's name already
// (`schedule "x": ...`, `dependencies[0] ...`), so that the name is never said twice.
func (e *FieldError) Error() string {
	if rest, ok := strings.CutPrefix(e.Message, e.Field); ok && (rest == "" || strings.ContainsRune(" :[", rune(rest[0]))) {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// CheckTimeout validates a request's timeout_ms against the daemon's max_timeout_ms (max):
// 1 ..= max milliseconds. hint, in brackets at the end, says what to do instead ("omit it for
// the default of 30000"). The one check of every interface's timeout_ms.
func CheckTimeout(ms int64, max time.Duration, hint string) error {
	if ms >= 1 && ms <= max.Milliseconds() {
		return nil
	}
	msg := fmt.Sprintf("is %d; allowed range is 1 to %d milliseconds", ms, max.Milliseconds())
	if hint != "" {
		msg += " (" + hint + ")"
	}
	return &FieldError{Field: "timeout_ms", Message: msg}
}

// CheckEnv validates environment variables a request sets (field names them in the error):
// a name is not empty and holds no '=' or NUL, a value holds no NUL.
func CheckEnv(field string, env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return &FieldError{Field: field, Message: fmt.Sprintf("%q is not a valid variable: a name without '=' or NUL, a value without NUL", k)}
		}
	}
	return nil
}
