package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// TestSessionLedger: a session recorded, ended, looked up; one a crashed daemon left open
// reads as ended by the daemon's stop, before and after EndOpenSessions; a session's call names
// it in its execution record.
func TestSessionLedger(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Millisecond)
	closed := sandbox.SessionInfo{ID: sandbox.NewSessionID(), Agent: "alice", State: sandbox.SessionActive, CreatedAt: now, LastUsedAt: now, IdleTimeoutMS: 1000}
	open := sandbox.SessionInfo{ID: sandbox.NewSessionID(), Agent: "bob", State: sandbox.SessionActive, CreatedAt: now, LastUsedAt: now}
	for _, info := range []sandbox.SessionInfo{closed, open} {
		if err := s.BeginSession(ctx, info); err != nil {
			t.Fatal(err)
		}
	}
	ended := now.Add(time.Second)
	closed.State, closed.EndReason, closed.Reason, closed.EndedAt, closed.Calls = sandbox.SessionEnded, sandbox.EndClosed, "its client closed it", &ended, 3
	if err := s.EndSession(ctx, closed); err != nil {
		t.Fatal(err)
	}
	got, err := s.LookupSession(ctx, closed.ID)
	if err != nil || got.State != sandbox.SessionEnded || got.EndReason != sandbox.EndClosed || got.Calls != 3 || got.Agent != "alice" || !got.EndedAt.Equal(ended) {
		t.Fatalf("closed session: %+v, %v", got, err)
	}
	if got, err := s.LookupSession(ctx, open.ID); err != nil || got.EndReason != sandbox.EndDaemonStopped {
		t.Fatalf("open session: %+v, %v", got, err)
	}
	if n, err := s.EndOpenSessions(ctx); err != nil || n != 1 {
		t.Fatalf("EndOpenSessions: %d, %v", n, err)
	}
	if got, err := s.LookupSession(ctx, open.ID); err != nil || got.EndReason != sandbox.EndDaemonStopped || got.EndedAt == nil {
		t.Fatalf("open session after EndOpenSessions: %+v, %v", got, err)
	}
	if _, err := s.LookupSession(ctx, sandbox.NewSessionID()); !errors.Is(err, sandbox.ErrSessionNotFound) {
		t.Fatalf("an unknown session: %v", err)
	}

	// A call of the session, left running by a crash, is finalised like any run and names it.
	head := sandbox.Result{ID: sandbox.NewID(), Agent: "alice", StartedAt: now, Origin: sandbox.Origin{Source: sandbox.SourceAPI}, SessionID: closed.ID}
	if err := s.Begin(ctx, sandbox.Spec{Code: "x = 1", Input: []byte("null"), TimeoutMS: 1000}, head); err != nil {
		t.Fatal(err)
	}
	if n, err := s.FinishInterrupted(ctx); err != nil || n != 1 {
		t.Fatalf("FinishInterrupted: %d, %v", n, err)
	}
	e, err := s.GetExecution(ctx, head.ID)
	if err != nil || e.SessionID != closed.ID || e.Status != StatusFinished || e.Outcome != sandbox.OutcomeSandboxError {
		t.Fatalf("the call's record: %+v, %v", e, err)
	}
	// The ledger lists a session's calls, and only its own.
	other := sandbox.Result{ID: sandbox.NewID(), Agent: "alice", StartedAt: now, Origin: sandbox.Origin{Source: sandbox.SourceAPI}}
	if err := s.Begin(ctx, sandbox.Spec{Code: "y = 1", Input: []byte("null"), TimeoutMS: 1000}, other); err != nil {
		t.Fatal(err)
	}
	calls, _, err := s.ListExecutions(ctx, ExecutionFilter{Agent: "alice", SessionID: closed.ID}, Page{})
	if err != nil || len(calls) != 1 || calls[0].ID != head.ID {
		t.Fatalf("the session's calls: %+v, %v", calls, err)
	}
}

// TestSessionCommandsRecordedAndPruned: a session's commands are recorded like calls (command
// line cut at 4096 bytes, exit, signal, outcome, bytes), read back per session and agent, and
// pruned with the executions by count and age.
func TestSessionCommandsRecordedAndPruned(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	se := sandbox.NewSessionID()
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	for i := range 5 {
		p := sandbox.ProcessInfo{ID: sandbox.NewProcessID(), SessionID: se, Command: "echo " + strings.Repeat("x", 5000*(i%2)), State: "ended",
			StartedAt: base.Add(time.Duration(i) * time.Minute), StdoutBytes: int64(i),
			End: &sandbox.ProcessEnd{ExitCode: -1, Signal: "SIGKILL", Outcome: sandbox.OutcomeTimeout, DurationMS: 7}}
		if err := s.RecordCommand(ctx, "alice", p); err != nil {
			t.Fatal(err)
		}
	}
	list, _, err := s.SessionCommands(ctx, "alice", se, Page{})
	if err != nil || len(list) != 5 || len(list[3].Command) != 4096 || !list[3].CommandTruncated || list[4].CommandTruncated || list[0].StdoutBytes != 4 || list[4].End.Signal != "SIGKILL" {
		t.Fatalf("recorded: %d %v", len(list), err)
	}
	// Pages of two, newest first, follow each other without a gap or a repeat.
	var paged []int64
	for cursor, pages := "", 0; ; pages++ {
		page, next, err := s.SessionCommands(ctx, "alice", se, Page{Limit: 2, Cursor: cursor})
		if err != nil || pages > 3 {
			t.Fatalf("page %d: %v", pages, err)
		}
		for _, p := range page {
			paged = append(paged, p.StdoutBytes)
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	if fmt.Sprint(paged) != "[4 3 2 1 0]" {
		t.Fatalf("paged: %v", paged)
	}
	if _, _, err := s.SessionCommands(ctx, "alice", se, Page{Cursor: "not-a-cursor"}); !errors.Is(err, ErrInvalidCursor) {
		t.Fatalf("a bad cursor: %v", err)
	}
	if other, _, _ := s.SessionCommands(ctx, "bob", se, Page{}); len(other) != 0 {
		t.Fatalf("another agent reads %d commands", len(other))
	}
	if _, err := s.Prune(ctx, Retention{MaxCount: 3}); err != nil {
		t.Fatal(err)
	}
	if list, _, _ = s.SessionCommands(ctx, "alice", se, Page{}); len(list) != 3 || list[2].StdoutBytes != 2 {
		t.Fatalf("after pruning to 3: %d", len(list))
	}
	if _, err := s.Prune(ctx, Retention{MaxAge: 58 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if list, _, _ = s.SessionCommands(ctx, "alice", se, Page{}); len(list) != 2 {
		t.Fatalf("after pruning by age: %d", len(list))
	}
}

// TestSessionHibernationLedger: a hibernated session stays open through EndOpenSessions and a
// dead daemon's recovery, is listed by HibernatedSessions for its daemon only, reads as
// hibernated to its daemon and as held elsewhere to another; ended, it is listed no more.
func TestSessionHibernationLedger(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	s.SetDaemon("d1")
	now := time.Now().UTC().Truncate(time.Millisecond)
	hib := sandbox.SessionInfo{ID: sandbox.NewSessionID(), Agent: "alice", State: sandbox.SessionActive, CreatedAt: now, LastUsedAt: now}
	paused := sandbox.SessionInfo{ID: sandbox.NewSessionID(), Agent: "alice", State: sandbox.SessionActive, CreatedAt: now, LastUsedAt: now}
	for _, info := range []sandbox.SessionInfo{hib, paused} {
		if err := s.BeginSession(ctx, info); err != nil {
			t.Fatal(err)
		}
	}
	hib.State, hib.Hibernation = sandbox.SessionHibernated, &sandbox.Hibernation{Daemon: "d1", Bytes: 10, SHA256: "ab", At: now}
	paused.State = sandbox.SessionPaused
	for _, info := range []sandbox.SessionInfo{hib, paused} {
		if err := s.UpdateSession(ctx, info); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.EndOpenSessions(ctx); err != nil || n != 1 {
		t.Fatalf("EndOpenSessions ended %d (%v), want only the paused one", n, err)
	}
	list, err := s.HibernatedSessions(ctx)
	if err != nil || len(list) != 1 || list[0].ID != hib.ID || list[0].Hibernation.SHA256 != "ab" {
		t.Fatalf("HibernatedSessions: %+v, %v", list, err)
	}
	if got, err := s.LookupSession(ctx, hib.ID); err != nil || got.State != sandbox.SessionHibernated {
		t.Fatalf("LookupSession of a hibernated session: %+v, %v", got, err)
	}
	if s.pg {
		s.SetDaemon("d2")
		if list, err := s.HibernatedSessions(ctx); err != nil || len(list) != 0 {
			t.Fatalf("another daemon lists d1's hibernated sessions: %+v, %v", list, err)
		}
		if _, err := s.LookupSession(ctx, hib.ID); err == nil || !strings.Contains(err.Error(), "hibernated session") || !strings.Contains(err.Error(), "daemon d1") {
			t.Fatalf("another daemon's lookup: %v", err)
		}
		if n, err := s.RecoverExpired(ctx, time.Nanosecond); err != nil || n != 0 {
			t.Fatalf("recovering d1 ended %d sessions (%v); its hibernated one must stay", n, err)
		}
		s.SetDaemon("d1")
	}
	ended := now.Add(time.Second)
	hib.State, hib.EndReason, hib.EndedAt = sandbox.SessionEnded, sandbox.EndHibernationExpired, &ended
	if err := s.EndSession(ctx, hib); err != nil {
		t.Fatal(err)
	}
	if list, err := s.HibernatedSessions(ctx); err != nil || len(list) != 0 {
		t.Fatalf("an ended session is still listed: %+v, %v", list, err)
	}
	if err := s.UpdateSession(ctx, hib); !errors.Is(err, sandbox.ErrSessionNotFound) {
		t.Fatalf("UpdateSession of an ended session: %v", err)
	}
}

// H82: a session's commands count in ledger_max_bytes and go with their agent's share, by
// bytes and by count. Before, they counted nowhere and were pruned by ledger_max_executions
// only, newest first across agents: one agent's flood of 300 commands of 4000-byte lines
// pushed every other agent's command history out.
func TestSessionCommandsCountInTheLedgerFairly(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	command := func(agent, se string, at time.Time, line string) {
		t.Helper()
		p := sandbox.ProcessInfo{ID: sandbox.NewProcessID(), SessionID: se, Command: line, State: "ended", StartedAt: at,
			End: &sandbox.ProcessEnd{Outcome: sandbox.OutcomeOK, DurationMS: 1}}
		if err := s.RecordCommand(ctx, agent, p); err != nil {
			t.Fatal(err)
		}
	}
	alice, mallory := sandbox.NewSessionID(), sandbox.NewSessionID()
	for i := range 3 {
		command("alice", alice, base.Add(time.Duration(i)*time.Second), fmt.Sprintf("echo alice %d", i))
	}
	before := s.LedgerBytes()
	const flood = 300
	for i := range flood {
		command("mallory", mallory, base.Add(time.Minute+time.Duration(i)*25*time.Millisecond), "echo "+strings.Repeat("y", 4000))
	}
	if grown := s.LedgerBytes() - before; grown < flood*4000 {
		t.Fatalf("%d commands of 4000 bytes grew the ledger's bytes by %d; want at least %d", flood, grown, flood*4000)
	}
	counted := s.LedgerBytes()
	if err := s.countLedgerBytes(ctx); err != nil || s.LedgerBytes() != counted {
		t.Fatalf("recounted, the ledger holds %d bytes (%v); want the %d counted as they were written", s.LedgerBytes(), err, counted)
	}
	aliceHas := func() int {
		t.Helper()
		list, _, err := s.SessionCommands(ctx, "alice", alice, Page{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(list)
	}
	malloryKeeps := func() []sandbox.ProcessInfo {
		t.Helper()
		list, _, err := s.SessionCommands(ctx, "mallory", mallory, Page{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return list
	}

	// By bytes: a budget of a hundred of mallory's commands.
	max := counted / 3
	if _, err := s.Prune(ctx, Retention{MaxBytes: max}); err != nil {
		t.Fatal(err)
	}
	if n := aliceHas(); n != 3 {
		t.Errorf("alice keeps %d of her 3 commands after mallory's flood; want all", n)
	}
	kept := malloryKeeps()
	if s.LedgerBytes() > max/100*LedgerLowWater || len(kept) == 0 || len(kept) >= flood {
		t.Fatalf("after Prune: the ledger holds %d bytes, mallory %d commands; want at most %d bytes, mallory's newest kept",
			s.LedgerBytes(), len(kept), max/100*LedgerLowWater)
	}
	if newest := base.Add(time.Minute + (flood-1)*25*time.Millisecond); !kept[0].StartedAt.Equal(newest) {
		t.Errorf("mallory's newest command left is of %v; want %v (the oldest go first)", kept[0].StartedAt, newest)
	}

	// By count: 20 commands in all, mallory past its share.
	if _, err := s.Prune(ctx, Retention{MaxCount: 20}); err != nil {
		t.Fatal(err)
	}
	if n, m := aliceHas(), len(malloryKeeps()); n != 3 || m != 17 {
		t.Errorf("after pruning to 20 commands: alice keeps %d, mallory %d; want 3 and 17", n, m)
	}
}
