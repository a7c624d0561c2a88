package sessiontest

import (
	"context"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// TestWatch: a directory watcher is the box's inotify: a file a command makes in a
// subdirectory that did not exist when the watch began is reported (recursive); the box
// holds at most 16 watchers of a session, and a stopped one frees its place; a watcher whose
// session ends is told so.
func (s *Suite) TestWatch(t *testing.T) {
	ctx := context.Background()
	sess := s.create(t, "watcher", nil)
	type got struct {
		events []sandbox.WatchEvent
		end    error
	}
	ch := make(chan got, 1024)
	sink := func(events []sandbox.WatchEvent, end error) {
		select {
		case ch <- got{events, end}:
		default:
		}
	}
	stop, err := sess.WatchDir(ctx, "w_first", sandbox.WatchSpec{Path: ".", Recursive: true}, sink)
	if err != nil {
		t.Fatalf("WatchDir: %v", err)
	}
	sh(t, sess, "mkdir -p new/sub && echo hi > new/sub/f.txt")
	var seen []sandbox.WatchEvent
	for found := false; !found; {
		select {
		case g := <-ch:
			if g.end != nil {
				t.Fatalf("the watcher ended: %v", g.end)
			}
			seen = append(seen, g.events...)
			for _, ev := range g.events {
				found = found || ev == sandbox.WatchEvent{Name: "new/sub/f.txt", Op: sandbox.WatchCreate}
			}
		case <-time.After(time.Minute):
			t.Fatalf("no create of new/sub/f.txt; events: %+v", seen)
		}
	}

	// The box's cap: 16 watchers, the 17th refused; a stopped one frees its place.
	stops := []func(){stop}
	defer func() {
		for _, st := range stops {
			st()
		}
	}()
	for i := 1; i < 16; i++ {
		st, err := sess.WatchDir(ctx, "w_"+string(rune('a'+i)), sandbox.WatchSpec{Path: "new"}, func([]sandbox.WatchEvent, error) {})
		if err != nil {
			t.Fatalf("watcher %d of 16: %v", i+1, err)
		}
		stops = append(stops, st)
	}
	if _, err := sess.WatchDir(ctx, "w_over", sandbox.WatchSpec{Path: "new"}, func([]sandbox.WatchEvent, error) {}); errclass.Of(err) != errclass.Conflict {
		t.Fatalf("a 17th watcher: %v, want a conflict naming the cap", err)
	}
	stops[0]()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		st, err := sess.WatchDir(ctx, "w_again", sandbox.WatchSpec{Path: "new"}, sink)
		if err == nil {
			stops = append(stops, st)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a watcher after one stopped: %v", err)
		}
	}

	// The session ends: its watchers are told.
	for len(ch) > 0 {
		<-ch
	}
	if _, err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case g := <-ch:
			if g.end != nil {
				return
			}
		case <-time.After(time.Minute):
			t.Fatal("a watcher of an ended session was not told it ended")
		}
	}
}
