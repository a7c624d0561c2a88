package sandbox

import (
	"strings"
	"testing"
)

// TestSessionLimitErrorSaysTheWaysOut: an agent at its session limit is told every way to make
// room, hibernation among them (a hibernated session holds no sandbox and leaves the count;
// a trial at the limit was told only to close one or wait).
func TestSessionLimitErrorSaysTheWaysOut(t *testing.T) {
	msg := (&SessionLimitError{Agent: "alice", Limit: 2, PerAgent: true}).Error()
	for _, want := range []string{`agent "alice" has 2 active sessions`, "sessions_per_agent", "DELETE …/sessions/{id}", "POST …/sessions/{id}/hibernate"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
}
