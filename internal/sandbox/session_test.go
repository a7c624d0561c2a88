package sandbox

import (
	"encoding/json"
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

// TestSessionInfoKeepsAnEmptyNarrowing: a session narrowed to nothing is read back from its
// JSON (the ledger's) narrowed to nothing, not widened to the daemon's list; one that is not
// narrowed has no network_allow.
func TestSessionInfoKeepsAnEmptyNarrowing(t *testing.T) {
	for _, allow := range [][]string{{}, nil, {"a.example"}} {
		raw, err := json.Marshal(SessionInfo{ID: "se_x", NetworkAllow: allow})
		if err != nil {
			t.Fatal(err)
		}
		var back SessionInfo
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		if (back.NetworkAllow == nil) != (allow == nil) || len(back.NetworkAllow) != len(allow) {
			t.Errorf("%#v read back from %s as %#v", allow, raw, back.NetworkAllow)
		}
	}
}
