package sandbox

import (
	"errors"
	"fmt"
	"time"
)

// ErrNotReady means the sandbox cannot take runs now (the container or executor is starting
// or recovering). Transports answer 503.
var ErrNotReady = errors.New("sandbox is not ready")

// BusyError means every slot is running and the queue is full. Transports answer 429 with
// Retry-After set from RetryAfter.
type BusyError struct {
	Slots, Queue int
	RetryAfter   time.Duration
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("sandbox is busy: all %d slots are running and %d requests are queued; retry after %s",
		e.Slots, e.Queue, e.RetryAfter)
}

// FieldError says which request field is invalid and what is allowed. Transports answer 400
// (or 413 when TooLarge is set) naming Field.
type FieldError struct {
	Field   string
	Message string
	// TooLarge marks a value over a size limit (HTTP 413).
	TooLarge bool
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }
