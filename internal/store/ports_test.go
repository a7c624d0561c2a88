package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/ports"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

var _ ports.Recorder = (*Store)(nil)

// TestPortRequestsRecordedAndPruned: the requests to a session's ports are recorded, read back
// per session and agent newest first in pages, and pruned with the commands by count and age.
func TestPortRequestsRecordedAndPruned(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	se := sandbox.NewSessionID()
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	for i := range 5 {
		rec := sandbox.PortRequest{SessionID: se, Agent: "alice", Port: 8000, Method: "GET", Path: fmt.Sprintf("/%d?q=\x00", i),
			Status: 200, Client: "127.0.0.1:5000", WebSocket: i == 2, BytesIn: int64(i), BytesOut: 10, StartedAt: base.Add(time.Duration(i) * time.Minute), DurationMS: 3}
		if i == 4 {
			rec.Status, rec.Error = 502, "nothing listens"
		}
		if err := s.RecordPortRequest(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	list, _, err := s.SessionPortRequests(ctx, "alice", se, Page{})
	if err != nil || len(list) != 5 || list[0].Error != "nothing listens" || list[0].Status != 502 || !list[2].WebSocket || list[1].WebSocket ||
		list[4].BytesIn != 0 || !list[4].StartedAt.Equal(base) || list[0].ID == "" || list[0].Agent != "alice" {
		t.Fatalf("recorded: %+v %v", list, err)
	}
	var paged []int64
	for cursor, pages := "", 0; ; pages++ {
		page, next, err := s.SessionPortRequests(ctx, "alice", se, Page{Limit: 2, Cursor: cursor})
		if err != nil || pages > 3 {
			t.Fatalf("page %d: %v", pages, err)
		}
		for _, p := range page {
			paged = append(paged, p.BytesIn)
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	if fmt.Sprint(paged) != "[4 3 2 1 0]" {
		t.Fatalf("paged: %v", paged)
	}
	if _, _, err := s.SessionPortRequests(ctx, "alice", se, Page{Cursor: "not-a-cursor"}); !errors.Is(err, ErrInvalidCursor) {
		t.Fatalf("a bad cursor: %v", err)
	}
	if other, _, _ := s.SessionPortRequests(ctx, "bob", se, Page{}); len(other) != 0 {
		t.Fatalf("another agent reads %d requests", len(other))
	}
	if _, err := s.Prune(ctx, Retention{MaxCount: 3}); err != nil {
		t.Fatal(err)
	}
	if list, _, _ = s.SessionPortRequests(ctx, "alice", se, Page{}); len(list) != 3 || list[2].BytesIn != 2 {
		t.Fatalf("after pruning to 3: %d", len(list))
	}
	if _, err := s.Prune(ctx, Retention{MaxAge: 58 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if list, _, _ = s.SessionPortRequests(ctx, "alice", se, Page{}); len(list) != 2 {
		t.Fatalf("after pruning by age: %d", len(list))
	}
}

// TestPortShares: a share is found by its secret alone until it expires, is revoked, or its
// session ends; only its digest is stored; a session holds at most MaxPortShares.
func TestPortShares(t *testing.T) {
	s := open(t)
	ctx := t.Context()
	clock := time.Now().UTC().Truncate(time.Millisecond)
	s.now = func() time.Time { return clock }
	info := sandbox.SessionInfo{ID: sandbox.NewSessionID(), Agent: "alice", State: sandbox.SessionActive, CreatedAt: clock}
	if err := s.BeginSession(ctx, info); err != nil {
		t.Fatal(err)
	}
	se := info.ID
	secret, sh, err := s.CreatePortShare(ctx, "alice", se, 8000, clock.Add(time.Hour))
	if err != nil || len(secret) != 43 || sh.ID[:3] != "sh_" || !sh.ExpiresAt.Equal(clock.Add(time.Hour)) {
		t.Fatalf("created: %q %+v %v", secret, sh, err)
	}
	var stored int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM port_shares WHERE digest = ?`, secret).Scan(&stored); err != nil || stored != 0 {
		t.Fatalf("the secret itself is stored: %d %v", stored, err)
	}
	got, err := s.PortShareOf(ctx, secret)
	if err != nil || got.ID != sh.ID || got.Agent != "alice" || got.SessionID != se || got.Port != 8000 {
		t.Fatalf("by its secret: %+v %v", got, err)
	}
	if _, err := s.PortShareOf(ctx, secret+"x"); !errors.Is(err, ErrShareUnknown) {
		t.Fatalf("a wrong secret: %v", err)
	}
	short, _, _ := s.CreatePortShare(ctx, "alice", se, 9000, clock.Add(time.Minute))
	if list, err := s.PortShares(ctx, "alice", se); err != nil || len(list) != 2 || list[0].Port != 9000 && list[1].Port != 9000 {
		t.Fatalf("listed: %+v %v", list, err)
	}
	if list, _ := s.PortShares(ctx, "bob", se); len(list) != 0 {
		t.Fatalf("another agent lists %d shares", len(list))
	}
	// Expired: refused and unlisted at once, deleted by Prune.
	clock = clock.Add(2 * time.Minute)
	if _, err := s.PortShareOf(ctx, short); !errors.Is(err, ErrShareUnknown) {
		t.Fatalf("an expired share: %v", err)
	}
	if _, err := s.Prune(ctx, Retention{}); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.PortShares(ctx, "alice", se); len(list) != 1 || list[0].ID != sh.ID {
		t.Fatalf("after expiry: %+v", list)
	}
	// Revoked: refused at once; revoking again, or another agent's, is not found.
	if err := s.RevokePortShare(ctx, "bob", se, sh.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bob revokes alice's share: %v", err)
	}
	if err := s.RevokePortShare(ctx, "alice", se, sh.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PortShareOf(ctx, secret); !errors.Is(err, ErrShareUnknown) {
		t.Fatalf("a revoked share: %v", err)
	}
	if err := s.RevokePortShare(ctx, "alice", se, sh.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoked twice: %v", err)
	}
	// At most MaxPortShares; the session's end takes them all.
	var last string
	for range MaxPortShares {
		if last, _, err = s.CreatePortShare(ctx, "alice", se, 8000, clock.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.CreatePortShare(ctx, "alice", se, 8000, clock.Add(time.Hour)); errclass.Of(err) != errclass.Conflict {
		t.Fatalf("one share too many: %v", err)
	}
	ended := clock
	info.State, info.EndedAt = sandbox.SessionEnded, &ended
	if err := s.EndSession(ctx, info); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PortShareOf(ctx, last); !errors.Is(err, ErrShareUnknown) {
		t.Fatalf("a share of an ended session: %v", err)
	}
}
