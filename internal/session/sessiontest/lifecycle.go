package sessiontest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
)

// writeFiles is a call that writes the session's files: 8 MiB of random bytes in its
// directory, a module in it, and a file in its home; OUTPUT is the big file's SHA-256.
const writeFiles = `import hashlib, os
data = os.urandom(8 << 20)
open("big.bin", "wb").write(data)
open("mymod.py", "w").write("VALUE = 7\n")
os.makedirs(os.path.expanduser("~/.config/app"), exist_ok=True)
open(os.path.expanduser("~/.config/app/settings"), "w").write("kept")
g = 42
OUTPUT = hashlib.sha256(data).hexdigest()`

const readFiles = `import hashlib, os
OUTPUT = [hashlib.sha256(open("big.bin", "rb").read()).hexdigest(), open(os.path.expanduser("~/.config/app/settings")).read(),
    "g" in globals(), sorted(os.listdir("."))]`

// TestPauseAndResume: a paused session's sandbox is frozen as its engine reports it, its line
// outlives heartbeat timeouts, a call is refused with how to resume, another agent cannot
// resume it, and it resumes with its globals. On a runtime that cannot freeze, the pause is a
// hibernation and says so, and the resume keeps the files but not the memory.
func (s *Suite) TestPauseAndResume(t *testing.T) {
	ctx := context.Background()
	sess := s.create(t, "pat", nil)
	mustCall(t, sess, "g = 42")
	if s.Frozen == nil {
		info, err := sess.Pause(ctx)
		if err != nil || info.State != sandbox.SessionHibernated || len(info.History) == 0 ||
			info.History[len(info.History)-1].Detail != session.PausedAsHibernation {
			t.Fatalf("pause of a sandbox that cannot be frozen = %+v, %v (want it hibernated, saying so)", info, err)
		}
		if info, err = sess.Resume(ctx); err != nil || info.Memory != sandbox.MemoryLost {
			t.Fatalf("its resume = %+v, %v (want its memory lost)", info, err)
		}
		return
	}
	var pauses, resumes []time.Duration
	for range 5 {
		began := time.Now()
		if _, err := sess.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		pauses = append(pauses, time.Since(began))
		began = time.Now()
		if _, err := sess.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		resumes = append(resumes, time.Since(began))
		// The engine says so at once: an exec (hibernation's tar) is refused while it still
		// reports the sandbox paused.
		if frozen, err := s.Frozen(ctx, sess.ID()); err != nil || frozen {
			t.Fatalf("the resumed session's sandbox reads as paused: %v, %v", frozen, err)
		}
	}
	slices.Sort(pauses)
	slices.Sort(resumes)
	t.Logf("pause p50 %s max %s; resume p50 %s max %s", pauses[2], pauses[4], resumes[2], resumes[4])

	if _, err := sess.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if frozen, err := s.Frozen(ctx, sess.ID()); err != nil || !frozen {
		t.Fatalf("the paused session's sandbox is not frozen: %v, %v", frozen, err)
	}
	time.Sleep(s.HeartbeatTimeout + time.Second) // past the control line's heartbeat timeout
	_, err := call(sess, "print(1)", 5*time.Second)
	if _, ok := errors.AsType[*sandbox.SessionPausedError](err); !ok {
		t.Fatalf("a call to the paused session: %v", err)
	}
	if _, err := s.reg.Get(ctx, "bob", sess.ID()); !errors.Is(err, sandbox.ErrSessionNotFound) {
		t.Fatalf("another agent's look-up: %v", err)
	}
	info, err := sess.Resume(ctx)
	if err != nil || info.Memory != sandbox.MemoryKept {
		t.Fatalf("resume: %+v, %v", info, err)
	}
	if got := output(t, mustCall(t, sess, "OUTPUT = g")); got != float64(42) {
		t.Fatalf("g after the pause: %v", got)
	}
}

// TestHibernateResumeAndFork: hibernated, a session's sandbox goes and its files are on disk;
// a fork of it has the same files and is independent; resumed, it comes back with the same ID
// and files in a new sandbox with a new interpreter, and leaves no file behind.
func (s *Suite) TestHibernateResumeAndFork(t *testing.T) {
	ctx := context.Background()
	sess := s.create(t, "pat", nil)
	sum := output(t, mustCall(t, sess, writeFiles)).(string)
	began := time.Now()
	info, err := sess.Hibernate(ctx)
	if err != nil || info.State != sandbox.SessionHibernated {
		t.Fatalf("hibernate: %+v, %v", info, err)
	}
	t.Logf("hibernate of %d bytes: %s", info.Hibernation.Bytes, time.Since(began))
	s.waitSandboxes(t, 0)
	if _, err := os.Stat(filepath.Join(s.dir, sess.ID()+".tar")); err != nil {
		t.Fatal(err)
	}

	fork, err := sess.Fork(ctx)
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	t.Cleanup(func() { _, _ = fork.Close(context.Background()) })

	began = time.Now()
	info, err = sess.Resume(ctx)
	if err != nil || info.Memory != sandbox.MemoryLost || info.ID != sess.ID() {
		t.Fatalf("resume from hibernation: %+v, %v", info, err)
	}
	res := mustCall(t, sess, readFiles)
	t.Logf("resume from hibernation to the first answered call: %s", time.Since(began))
	got := output(t, res).([]any)
	if got[0] != sum || got[1] != "kept" || got[2] != false {
		t.Fatalf("after the resume: %v (want the big file's sum %s, the home's file, no g)", got, sum)
	}
	if got := output(t, mustCall(t, sess, "import mymod\nOUTPUT = mymod.VALUE")); got != float64(7) {
		t.Fatalf("a module of the session's directory: %v", got)
	}
	mustCall(t, fork, `open("big.bin", "wb").write(b"fork's own")`)
	if got := output(t, mustCall(t, sess, readFiles)).([]any); got[0] != sum {
		t.Fatalf("a fork's write reached its source: %v", got)
	}
	if entries, _ := os.ReadDir(s.dir); len(entries) != 0 {
		t.Fatalf("hibernation files left after the resume: %v", entries)
	}
}

// TestHibernateALiveWriterAndASparseFile: a session whose background command rewrites files
// all the while hibernates (the files kept as read), and a sparse file of 60 MiB comes back
// with its size, sparse in the hibernation file where the runtime reports holes (Sparse) (trial, 2 December 2026: the
// hibernation failed 3 times of 3, and the sparse file made a 180 MB hibernation no resume
// could unpack).
func (s *Suite) TestHibernateALiveWriterAndASparseFile(t *testing.T) {
	ctx := context.Background()
	sess := s.create(t, "lw", nil)
	sh(t, sess, "truncate -s 60M holes.bin && mkdir -p busy")
	writer := session.CommandRequest{Background: true,
		Cmd: `while :; do for i in $(seq 1 50); do head -c 65536 /dev/urandom > busy/f$i; done; done`}
	run(t, sess, writer)
	time.Sleep(time.Second)
	for range 3 { // each a fresh chance for tar to meet a file being rewritten
		info, err := sess.Hibernate(ctx)
		if err != nil {
			t.Fatalf("hibernate with a live writer: %v", err)
		}
		if s.Sparse && info.Hibernation.Bytes > 20<<20 {
			t.Fatalf("hibernation of %d bytes: the sparse file was stored whole", info.Hibernation.Bytes)
		}
		if _, err := sess.Resume(ctx); err != nil {
			t.Fatalf("resume: %v", err)
		}
		if got := output(t, mustCall(t, sess, "import os\nOUTPUT = os.path.getsize('holes.bin')")); got != float64(60<<20) {
			t.Fatalf("holes.bin after the resume: %v bytes", got)
		}
		run(t, sess, writer)
	}
}
