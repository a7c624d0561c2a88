package executor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// next returns the watcher's next event that is not a chmod (tmpfs and overlay report
// attribute changes alongside writes on some kernels).
func next(t *testing.T, w *dirWatch) sandbox.WatchEvent {
	t.Helper()
	for ev := range w.Events() {
		if ev.Op != sandbox.WatchChmod {
			return ev
		}
	}
	t.Fatal("the watcher's events ended")
	return sandbox.WatchEvent{}
}

func TestDirWatchReportsWriteAtOnce(t *testing.T) {
	dir := t.TempDir()
	w, err := newDirWatch(dir, false, 8, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The events are already in the kernel's queue: reading them waits on nothing else.
	if ev := next(t, w); ev != (sandbox.WatchEvent{Name: "a.txt", Op: sandbox.WatchCreate}) {
		t.Fatalf("first event = %+v, want create a.txt", ev)
	}
	if ev := next(t, w); ev != (sandbox.WatchEvent{Name: "a.txt", Op: sandbox.WatchWrite}) {
		t.Fatalf("second event = %+v, want write a.txt", ev)
	}
	if err := os.Rename(filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt")); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w); ev != (sandbox.WatchEvent{Name: "a.txt", Op: sandbox.WatchRename}) {
		t.Fatalf("event = %+v, want rename a.txt", ev)
	}
	if ev := next(t, w); ev != (sandbox.WatchEvent{Name: "b.txt", Op: sandbox.WatchCreate}) {
		t.Fatalf("event = %+v, want create b.txt", ev)
	}
	if err := os.Remove(filepath.Join(dir, "b.txt")); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w); ev != (sandbox.WatchEvent{Name: "b.txt", Op: sandbox.WatchRemove}) {
		t.Fatalf("event = %+v, want remove b.txt", ev)
	}
}

func TestDirWatchRecursiveNewSubdirectory(t *testing.T) {
	dir := t.TempDir()
	// Watched through a descriptor of the directory, as the executor does.
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	w, err := newDirWatch(fmt.Sprintf("/proc/self/fd/%d", d.Fd()), true, 8, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// The file is written before the watcher can have added the new directory's watch: it
	// must come as created by the walk of the new directory, or by the watch itself.
	if err := os.MkdirAll(filepath.Join(dir, "sub", "deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "deeper", "f.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for {
		ev := next(t, w)
		if ev.Name == "sub/deeper/f.txt" && ev.Op == sandbox.WatchCreate {
			break
		}
	}
	// A later write in the new directory is seen through its own watch.
	if err := os.WriteFile(filepath.Join(dir, "sub", "deeper", "g.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for {
		ev := next(t, w)
		if ev.Name == "sub/deeper/g.txt" && ev.Op == sandbox.WatchCreate {
			break
		}
	}
}

func TestDirWatchNonRecursiveIgnoresSubdirectories(t *testing.T) {
	dir := t.TempDir()
	w, err := newDirWatch(dir, false, 8, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "f.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "top.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w); ev != (sandbox.WatchEvent{Name: "sub", Op: sandbox.WatchCreate}) {
		t.Fatalf("event = %+v, want create sub", ev)
	}
	if ev := next(t, w); ev != (sandbox.WatchEvent{Name: "top.txt", Op: sandbox.WatchCreate}) {
		t.Fatalf("event = %+v, want create top.txt (nothing from inside sub)", ev)
	}
}

func TestDirWatchCapsWatchesAndSaysSo(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"a", "b", "c"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w, err := newDirWatch(dir, true, 2, 64) // the root and one subdirectory
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ev := next(t, w)
	if ev.Op != sandbox.WatchOverflow || !strings.Contains(ev.Detail, "at most 2 directories") {
		t.Fatalf("event = %+v, want an overflow naming the 2-directory cap", ev)
	}
	w.mu.Lock()
	n := len(w.byDir)
	w.mu.Unlock()
	if n != 2 {
		t.Fatalf("the watcher holds %d watches, want 2", n)
	}
}

func TestDirWatchQueueOverflowSaysHowMany(t *testing.T) {
	w, err := newDirWatch(t.TempDir(), false, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// Nothing changes in the directory: the events come from here, in a known order.
	for _, n := range []string{"1", "2", "3", "4", "5"} {
		w.emit(sandbox.WatchEvent{Name: n, Op: sandbox.WatchCreate})
	}
	// Two events fit; the other three are lost and said to be once the reader catches up.
	for _, n := range []string{"1", "2"} {
		if ev := next(t, w); ev != (sandbox.WatchEvent{Name: n, Op: sandbox.WatchCreate}) {
			t.Fatalf("event = %+v, want create %s", ev, n)
		}
	}
	w.emit(sandbox.WatchEvent{Name: "6", Op: sandbox.WatchCreate})
	ev := next(t, w)
	if ev.Op != sandbox.WatchOverflow || !strings.Contains(ev.Detail, "3 events were lost") {
		t.Fatalf("event = %+v, want an overflow saying 3 events were lost", ev)
	}
	if ev := next(t, w); ev != (sandbox.WatchEvent{Name: "6", Op: sandbox.WatchCreate}) {
		t.Fatalf("event = %+v, want create 6", ev)
	}
}

func TestDirWatchCloseReleasesDescriptor(t *testing.T) {
	dir := t.TempDir()
	// A first watcher makes the runtime's poller, which stays.
	warm, err := newDirWatch(dir, false, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	warm.Close()
	before := openFDs(t)
	w, err := newDirWatch(dir, true, 8, 8)
	if err != nil {
		t.Fatal(err)
	}
	if got := openFDs(t); got != before+2 { // inotify's and the root's
		t.Fatalf("open descriptors while watching = %d, want %d", got, before+2)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-w.Events(); ok {
		t.Fatal("Events still open after Close")
	}
	if got := openFDs(t); got != before {
		t.Fatalf("open descriptors after Close = %d, want %d", got, before)
	}
}

func TestDirWatchRefusesAFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := newDirWatch(f, false, 8, 8)
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("err = %v, want not a directory", err)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestDirWatchFollowsNoLinkBelowTheRoot: a directory swapped for a link to a directory
// outside the watched one (between its creation and the watch of a subdirectory of it) leads
// the watcher nowhere: the executor watches as root, so following it would have reported the
// names in, and the changes of, a directory the session cannot read.
func TestDirWatchFollowsNoLinkBelowTheRoot(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(outside, "b"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "b", "secret-name"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "a")); err != nil {
		t.Fatal(err)
	}
	w, err := newDirWatch(root, true, 8, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// What the reader does when "a/b" is reported created: watch it, and list what it holds.
	if err := w.add("a/b"); err == nil {
		t.Fatal("a directory reached through a link was watched")
	}
	var listed []string
	w.walk("a/b", func(name string) { listed = append(listed, name) })
	if len(listed) != 0 {
		t.Fatalf("the walk listed %q through the link", listed)
	}
	if err := os.WriteFile(filepath.Join(outside, "b", "later"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.Events():
		t.Fatalf("an event from outside the root: %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
}
