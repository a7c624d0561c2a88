package store

import (
	"errors"
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
