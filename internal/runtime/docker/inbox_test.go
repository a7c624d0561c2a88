package docker_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/control"
	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
	"github.com/sandpit-dev/sandpit/internal/session/sessiontest"
)

// inboxMount returns the session container's mount at docker.InboxDir ("" for none) and
// whether it is writable.
func inboxMount(t *testing.T, e *sessionEnv) (string, bool) {
	t.Helper()
	ids, err := e.rt.SessionContainers(context.Background())
	if err != nil || len(ids) != 1 {
		t.Fatalf("session containers: %v, %v", ids, err)
	}
	out, err := exec.Command("docker", "inspect", "-f", "{{json .Mounts}}", ids[0]).Output()
	if err != nil {
		t.Fatalf("docker inspect: %v", err)
	}
	var mounts []struct {
		Type, Source, Destination string
		RW                        bool
	}
	if err := json.Unmarshal(out, &mounts); err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if m.Destination == docker.InboxDir {
			if m.Type != "bind" {
				t.Fatalf("the inbox is a %s mount", m.Type)
			}
			return m.Source, m.RW
		}
	}
	return "", false
}

// lifecycleSessions is startSessions with pauses and hibernations on (the session suite's
// configuration), its hibernation files in dir, and a heartbeat of 200 ms that gives up after
// 2 s (a paused session must outlive several of those).
func lifecycleSessions(t *testing.T, dir string, mutate ...func(*docker.Config)) *sessionEnv {
	t.Helper()
	return startSessions(t, sessiontest.Config(dir), append([]func(*docker.Config){func(c *docker.Config) {
		c.Control = control.Options{HeartbeatInterval: 200 * time.Millisecond, HeartbeatTimeout: 2 * time.Second}
	}}, mutate...)...)
}

// call runs code as s's next call with timeout.
func call(s *session.Session, code string, timeout time.Duration) (sandbox.Result, error) {
	ms := timeout.Milliseconds()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	return s.Execute(ctx, sandbox.Request{Code: code, TimeoutMS: &ms}, true, nil)
}

// hibernateAndResume writes a file in s, hibernates and resumes it, and checks the file came
// back.
func hibernateAndResume(t *testing.T, e *sessionEnv, s *session.Session) {
	t.Helper()
	ctx := t.Context()
	sum := output(t, e.mustCall(t, s, "import hashlib, os\ndata = os.urandom(1 << 20)\nopen('f.bin', 'wb').write(data)\nOUTPUT = hashlib.sha256(data).hexdigest()"))
	if _, err := s.Hibernate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if got := output(t, e.mustCall(t, s, "import hashlib\nOUTPUT = hashlib.sha256(open('f.bin', 'rb').read()).hexdigest()")); got != sum {
		t.Fatalf("after the resume: %v, want %v", got, sum)
	}
}

// emptyInbox is a call whose OUTPUT is the inbox's listing and whether a write into it
// failed.
const emptyInbox = `import os
try:
    open("/opt/sandpit/inbox/mine", "w").write("x")
    refused = False
except OSError:
    refused = True
OUTPUT = [os.listdir("/opt/sandpit/inbox"), refused]`

// TestInboxRestoresInPlace: a session container's inbox is read-only and empty to its code,
// a file a killed daemon left in one is removed when the runtime starts (the next session with
// that uid must not read another's files), and a resume from hibernation restores the files
// through it: the container made after a resume has the inbox again, which it would not had
// the restore fallen back to the stream (that turns the inbox off).
func TestInboxRestoresInPlace(t *testing.T) {
	data := t.TempDir()
	left := filepath.Join(data, "inbox", "0", "files.tar")
	if err := os.MkdirAll(filepath.Dir(left), 0o755); err != nil { // as an older daemon made it
		t.Fatal(err)
	}
	if err := os.WriteFile(left, []byte("another session's files"), 0o444); err != nil {
		t.Fatal(err)
	}
	e := lifecycleSessions(t, t.TempDir(), func(c *docker.Config) { c.DataDir = data })
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Fatalf("the file a killed daemon left in an inbox is still there: %v", err)
	}
	if st, err := os.Stat(filepath.Join(data, "inbox")); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("the inbox directory: %v, %v; want mode 0700 (the daemon's alone)", st.Mode(), err)
	}
	s := e.create(t, "pat", nil)
	for round := range 2 {
		src, rw := inboxMount(t, e)
		if src == "" || rw {
			t.Fatalf("round %d: the session container's inbox is %q, writable %v: want a read-only bind mount", round, src, rw)
		}
		if got := output(t, e.mustCall(t, s, emptyInbox)).([]any); len(got[0].([]any)) != 0 || got[1] != true {
			t.Fatalf("round %d: the inbox as the session sees it: %v (want empty, and a write refused)", round, got)
		}
		hibernateAndResume(t, e, s)
		entries, _ := os.ReadDir(src)
		if len(entries) != 0 {
			t.Fatalf("round %d: the inbox holds %v after the restore", round, entries)
		}
	}
}

// TestInboxFallsBackToTheStream: a hibernation file that cannot be linked into the inbox (it
// is on another filesystem, /dev/shm) is restored over the exec stream, and the runtime stops
// mounting the inbox.
func TestInboxFallsBackToTheStream(t *testing.T) {
	shm, err := os.MkdirTemp("/dev/shm", "sandpit-hibernated-")
	if err != nil {
		t.Skipf("no /dev/shm to put the hibernation files on another filesystem: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	e := lifecycleSessions(t, shm)
	s := e.create(t, "pat", nil)
	if src, _ := inboxMount(t, e); src == "" {
		t.Fatal("the session container has no inbox")
	}
	hibernateAndResume(t, e, s)
	e.create(t, "pat", nil) // a container made after the fallback
	if _, err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.waitContainers(t, 1)
	if src, _ := inboxMount(t, e); src != "" {
		t.Fatalf("a session container made after the fallback has the inbox %s", src)
	}
}
