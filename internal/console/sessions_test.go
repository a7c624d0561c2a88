package console_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// fakeSessions holds agent "sam"'s hibernated session and an ended fork of it.
type fakeSessions struct{}

func (fakeSessions) List(agent string) []sandbox.SessionInfo {
	if agent != "sam" {
		return nil
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	hib := sandbox.SessionInfo{ID: "se_hibernatedhibernatedhiber", Agent: "sam", State: sandbox.SessionHibernated, Calls: 3, CreatedAt: at}
	hib.PausedAt, hib.RanMS = &at, 1234
	hib.Hibernation = &sandbox.Hibernation{Bytes: 40960, SHA256: "89ba03832c45", At: at}
	hib.AddEvent(at, "created", "")
	hib.AddEvent(at, "paused", "auto_pause: idle for its idle timeout")
	hib.AddEvent(at, "hibernated", "paused for session_hibernate_after_ms (600000 ms)")
	ended := sandbox.SessionInfo{ID: "se_forkforkforkforkforkforkfo", Agent: "sam", State: sandbox.SessionEnded, EndReason: sandbox.EndLost,
		Reason: "its hibernation file was altered on disk", CreatedAt: at}
	ended.ForkedFrom = hib.ID
	return []sandbox.SessionInfo{hib, ended}
}

// TestSessionsPage: the sessions page shows each session's state, its hibernation and its
// history, and why an ended one ended.
func TestSessionsPage(t *testing.T) {
	h := newHarness(t, "")
	status, body, _ := get(t, client(t), h, "/ui/sessions?agent=sam", nil)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	for _, want := range []string{"se_hibernatedhibernatedhiber", ">hibernated<", "40960 bytes", "89ba03832c45", "ran 1234 ms",
		"<b>paused</b> auto_pause: idle for its idle timeout", ">ended<", "lost", "its hibernation file was altered on disk",
		"forked from <code>se_hibernatedhibernatedhiber</code>", `href="/ui/sessions"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if _, body, _ := get(t, client(t), h, "/ui/sessions?agent=nobody", nil); !strings.Contains(body, "Agent nobody has no sessions.") {
		t.Errorf("an agent without sessions: %s", body)
	}
}
