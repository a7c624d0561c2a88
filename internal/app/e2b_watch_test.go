package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestE2BWatchSeesChangesInTheBox: E2B's watchers are the box's inotify watchers. A WatchDir
// stream that has started reports a file made by the sandbox's own command in a directory
// that did not exist when the watch began (recursive), and a CreateWatcher watcher reports a
// write, then, removed, frees its place under the cap.
func TestE2BWatchSeesChangesInTheBox(t *testing.T) {
	alice := e2bDaemon(t, "alice")["alice"]
	ctx := t.Context()
	sb, err := alice.Create(ctx, map[string]any{"templateID": "base", "timeout": 300})
	if err != nil {
		t.Fatal(err)
	}
	conn := alice.Conn(sb.SandboxID, sb.EnvdAccessToken)

	type event struct {
		Start      *struct{} `json:"start"`
		Filesystem *struct {
			Name, Type string
		} `json:"filesystem"`
	}
	found := errors.New("found")
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	ran := make(chan error, 1)
	var seen []string
	err = conn.Stream(sctx, "/filesystem.Filesystem/WatchDir", map[string]any{"path": ".", "recursive": true}, func(raw json.RawMessage) error {
		var ev event
		if err := json.Unmarshal(raw, &ev); err != nil {
			return err
		}
		switch {
		case ev.Start != nil:
			go func() {
				res, err := conn.Run(sctx, "mkdir -p new/sub && echo hi > new/sub/f.txt", nil, nil)
				if err == nil && res.ExitCode != 0 {
					err = errors.New(res.Stderr)
				}
				ran <- err
			}()
		case ev.Filesystem != nil:
			seen = append(seen, ev.Filesystem.Type+" "+ev.Filesystem.Name)
			if ev.Filesystem.Name == "new/sub/f.txt" && ev.Filesystem.Type == "EVENT_TYPE_CREATE" {
				return found
			}
		}
		return nil
	})
	if !errors.Is(err, found) {
		t.Fatalf("WatchDir ended with %v having seen %q, want the create of new/sub/f.txt", err, seen)
	}
	if err := <-ran; err != nil {
		t.Fatalf("the command making the file: %v", err)
	}

	var created struct{ WatcherID string }
	if err := conn.Unary(ctx, "/filesystem.Filesystem/CreateWatcher", map[string]any{"path": "new"}, &created); err != nil || created.WatcherID == "" {
		t.Fatalf("CreateWatcher: %+v %v", created, err)
	}
	if _, err := conn.WriteFile(ctx, "/home/user/new/w.txt", []byte("x"), false); err != nil {
		t.Fatal(err)
	}
	var got []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var evs struct {
			Events []struct{ Name, Type string }
		}
		if err := conn.Unary(ctx, "/filesystem.Filesystem/GetWatcherEvents", map[string]any{"watcherId": created.WatcherID}, &evs); err != nil {
			t.Fatalf("GetWatcherEvents: %v", err)
		}
		for _, e := range evs.Events {
			got = append(got, e.Type+" "+e.Name)
		}
		if slices.Contains(got, "EVENT_TYPE_WRITE w.txt") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watcher's events are %q, want a write of w.txt", got)
		}
	}
	if err := conn.Unary(ctx, "/filesystem.Filesystem/RemoveWatcher", map[string]any{"watcherId": created.WatcherID}, &struct{}{}); err != nil {
		t.Fatalf("RemoveWatcher: %v", err)
	}
	if err := conn.Unary(ctx, "/filesystem.Filesystem/GetWatcherEvents", map[string]any{"watcherId": created.WatcherID}, &struct{}{}); err == nil {
		t.Fatal("a removed watcher still answers")
	}
}
