package session

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// fileBox is a fakeBox that pauses and keeps files (a map, carried as a tar stream).
type fileBox struct {
	*fakeBox
	fmu    sync.Mutex
	files  map[string]string
	paused bool
	// saving, when set, is told of each SaveFiles, which then waits for hold to close.
	saving chan struct{}
	hold   chan struct{}
	// wrote, when set, is told of each SaveFiles once it has written, which then waits for
	// after to close before it returns.
	wrote chan struct{}
	after chan struct{}
	// saves counts SaveFiles calls that write (not FilesSize's count); counting marks one.
	saves    int
	counting bool
}

func (b *fileBox) Pause(context.Context) error {
	b.fmu.Lock()
	defer b.fmu.Unlock()
	if b.paused {
		return errors.New("already paused")
	}
	b.paused = true
	return nil
}

func (b *fileBox) Unpause(context.Context) error {
	b.fmu.Lock()
	defer b.fmu.Unlock()
	if !b.paused {
		return errors.New("not paused")
	}
	b.paused = false
	return nil
}

// FilesSize counts what SaveFiles would write (sandbox.SizedFilesBox), as both runtimes do.
func (b *fileBox) FilesSize(ctx context.Context) (int64, error) {
	b.fmu.Lock()
	b.counting = true
	b.fmu.Unlock()
	var c countWriter
	err := b.SaveFiles(ctx, &c)
	b.fmu.Lock()
	b.counting = false
	b.fmu.Unlock()
	return int64(c), err
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

func (b *fileBox) SaveFiles(_ context.Context, w io.Writer) error {
	b.fmu.Lock()
	if !b.counting {
		b.saves++
	}
	counting := b.counting
	b.fmu.Unlock()
	if counting {
		return b.writeTar(w)
	}
	if b.saving != nil {
		b.saving <- struct{}{}
		<-b.hold
	}
	b.fmu.Lock()
	defer b.fmu.Unlock()
	if b.paused {
		return errors.New("SaveFiles on a paused box")
	}
	err := b.writeTarLocked(w)
	if b.wrote != nil {
		b.fmu.Unlock()
		b.wrote <- struct{}{}
		<-b.after
		b.fmu.Lock()
	}
	return err
}

func (b *fileBox) writeTar(w io.Writer) error {
	b.fmu.Lock()
	defer b.fmu.Unlock()
	return b.writeTarLocked(w)
}

func (b *fileBox) writeTarLocked(w io.Writer) error {
	names := make([]string, 0, len(b.files))
	for name := range b.files {
		names = append(names, name)
	}
	slices.Sort(names) // the same bytes each time, as the count needs
	tw := tar.NewWriter(w)
	for _, name := range names {
		body := b.files[name]
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(body))}); err != nil {
			return err
		}
		if _, err := io.WriteString(tw, body); err != nil {
			return err
		}
	}
	return tw.Close()
}

func (b *fileBox) RestoreFiles(_ context.Context, r io.Reader) error {
	b.fmu.Lock()
	defer b.fmu.Unlock()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		b.files[h.Name] = string(body)
	}
}

// Run writes a file for code "write NAME BODY" (else as fakeBox).
func (b *fileBox) Run(ctx context.Context, spec sandbox.Spec, emit func(sandbox.Event)) (sandbox.Result, error) {
	if name, body, ok := strings.Cut(strings.TrimPrefix(spec.Code, "write "), " "); ok && strings.HasPrefix(spec.Code, "write ") {
		b.fmu.Lock()
		paused := b.paused
		b.files[name] = body
		b.fmu.Unlock()
		if paused {
			return sandbox.Result{}, errors.New("a call ran in a paused box")
		}
	}
	return b.fakeBox.Run(ctx, spec, emit)
}

type fileOpener struct {
	mu    sync.Mutex
	boxes map[string][]*fileBox // by session ID
}

func (o *fileOpener) OpenSession(_ context.Context, id string) (sandbox.SessionBox, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b := &fileBox{fakeBox: newFakeBox(), files: map[string]string{}}
	if o.boxes == nil {
		o.boxes = map[string][]*fileBox{}
	}
	o.boxes[id] = append(o.boxes[id], b)
	return b, nil
}

func (o *fileOpener) last(id string) *fileBox {
	o.mu.Lock()
	defer o.mu.Unlock()
	list := o.boxes[id]
	return list[len(list)-1]
}

// memLedger is a session ledger in memory.
type memLedger struct {
	mu       sync.Mutex
	sessions map[string]sandbox.SessionInfo
}

func newMemLedger() *memLedger { return &memLedger{sessions: map[string]sandbox.SessionInfo{}} }

func (l *memLedger) BeginSession(_ context.Context, info sandbox.SessionInfo) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sessions[info.ID] = info
	return nil
}

func (l *memLedger) EndSession(ctx context.Context, info sandbox.SessionInfo) error {
	return l.BeginSession(ctx, info)
}

func (l *memLedger) UpdateSession(ctx context.Context, info sandbox.SessionInfo) error {
	return l.BeginSession(ctx, info)
}

func (l *memLedger) LookupSession(_ context.Context, id string) (sandbox.SessionInfo, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	info, ok := l.sessions[id]
	if !ok {
		return info, sandbox.ErrSessionNotFound
	}
	return info, nil
}

func (l *memLedger) HibernatedSessions(context.Context) ([]sandbox.SessionInfo, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var list []sandbox.SessionInfo
	for _, info := range l.sessions {
		if info.State == sandbox.SessionHibernated {
			list = append(list, info)
		}
	}
	return list, nil
}

func lifecycleConfig(dir string) Config {
	cfg := DefaultConfig()
	cfg.Lifecycle = LifecycleConfig{Dir: dir, Daemon: "d1", SessionMemoryBytes: 100, PausedMaxBytes: 200,
		HibernatedPerAgent: 2, HibernatedMaxBytes: 1 << 20}
	return cfg
}

func newLifecycle(t *testing.T, cfg Config, ledger sandbox.SessionLedger) (*keeper, *fileOpener) {
	t.Helper()
	op := &fileOpener{}
	svc := newService(engine.Hooks{})
	m := newKeeper(svc, op, ledger, cfg)
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	return m, op
}

func call(t *testing.T, m *keeper, agent, id, code string) error {
	t.Helper()
	_, err := m.Execute(t.Context(), id, sandbox.Request{Agent: agent, Code: code}, false, nil)
	return err
}

// TestPauseResume: a paused session refuses calls with a 409 saying how to resume (its box
// frozen: no call reaches it), resumes with its memory kept; with auto_resume a call resumes
// it; another agent's pause or resume is not found; the paused-memory budget is named.
func TestPauseResume(t *testing.T) {
	m, op := newLifecycle(t, lifecycleConfig(t.TempDir()), nil)
	ctx := t.Context()
	s, err := m.Create(ctx, sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Pause(ctx, "b", s.ID); !errors.Is(err, sandbox.ErrSessionNotFound) {
		t.Fatalf("another agent's pause: %v", err)
	}
	info, err := m.Pause(ctx, "a", s.ID)
	if err != nil || info.State != sandbox.SessionPaused || info.PausedAt == nil || info.ExpiresAt != nil {
		t.Fatalf("pause: %+v, %v", info, err)
	}
	if !op.last(s.ID).paused {
		t.Fatal("the box was not paused")
	}
	err = call(t, m, "a", s.ID, "write x 1")
	if p, ok := errors.AsType[*sandbox.SessionPausedError](err); !ok || errclass.Of(err) != errclass.Conflict || !strings.Contains(p.Error(), "/resume") {
		t.Fatalf("a call to a paused session: %v", err)
	}
	// Its commands and files too: a trial's command to a paused session hung until the
	// session was hibernated, its frozen box answering nothing.
	if _, err := m.Command(ctx, "a", s.ID, CommandRequest{Cmd: "true"}, nil); !errors.As(err, new(*sandbox.SessionPausedError)) {
		t.Fatalf("a command to a paused session: %v", err)
	}
	if _, err := m.ReadFile(ctx, "a", s.ID, "x", 0, 0); !errors.As(err, new(*sandbox.SessionPausedError)) {
		t.Fatalf("a file read in a paused session: %v", err)
	}
	if _, err := m.Resume(ctx, "b", s.ID); !errors.Is(err, sandbox.ErrSessionNotFound) {
		t.Fatalf("another agent's resume: %v", err)
	}
	info, err = m.Resume(ctx, "a", s.ID)
	if err != nil || info.State != sandbox.SessionActive || info.Memory != sandbox.MemoryKept {
		t.Fatalf("resume: %+v, %v", info, err)
	}
	if err := call(t, m, "a", s.ID, "write x 1"); err != nil {
		t.Fatalf("a call after resume: %v", err)
	}

	auto, err := m.Create(ctx, sandbox.SessionRequest{Agent: "a", SessionOptions: sandbox.SessionOptions{AutoResume: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Pause(ctx, "a", auto.ID); err != nil {
		t.Fatal(err)
	}
	if err := call(t, m, "a", auto.ID, "write y 2"); err != nil {
		t.Fatalf("a call to a paused auto_resume session: %v", err)
	}
	if info, _ := m.Get(ctx, "a", auto.ID); info.State != sandbox.SessionActive || info.Memory != sandbox.MemoryKept {
		t.Fatalf("after the auto-resuming call: %+v", info)
	}
	// Budget: 200 bytes, 100 per paused session: the third pause is refused, naming it.
	m.cfg.Lifecycle.PausedMaxBytes = 100
	if _, err := m.Pause(ctx, "a", s.ID); err != nil {
		t.Fatal(err)
	}
	_, err = m.Pause(ctx, "a", auto.ID)
	if errclass.Of(err) != errclass.Busy || !strings.Contains(err.Error(), "sessions_paused_max_bytes") {
		t.Fatalf("a pause past the budget: %v", err)
	}
	if st := m.Stats(); st.Paused != 1 || st.PausedBytes != 100 {
		t.Fatalf("stats: %+v", st)
	}
}

// TestPausedTimeIsNotLifetime: a session paused past its maximum lifetime is still there, and
// resumed it runs on; an idle session with auto_pause pauses instead of ending.
func TestPausedTimeIsNotLifetime(t *testing.T) {
	m, _ := newLifecycle(t, lifecycleConfig(t.TempDir()), nil)
	ctx := t.Context()
	life, idle := int64(1000), int64(1000)
	s, err := m.Create(ctx, sandbox.SessionRequest{Agent: "a", MaxLifetimeMS: &life})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Pause(ctx, "a", s.ID); err != nil {
		t.Fatal(err)
	}
	auto := true
	idler, err := m.Create(ctx, sandbox.SessionRequest{Agent: "a", IdleTimeoutMS: &idle, SessionOptions: sandbox.SessionOptions{AutoPause: &auto}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { info, _ := m.Get(ctx, "a", idler.ID); return info.State == sandbox.SessionPaused })
	time.Sleep(1200 * time.Millisecond) // past s's lifetime, had it counted paused time
	info, err := m.Resume(ctx, "a", s.ID)
	if err != nil || info.State != sandbox.SessionActive || info.RanMS >= 1000 {
		t.Fatalf("a session paused past its lifetime: %+v, %v", info, err)
	}
	if err := call(t, m, "a", s.ID, "x"); err != nil {
		t.Fatalf("a call after it: %v", err)
	}
	if info, _ := m.Get(ctx, "a", idler.ID); info.State != sandbox.SessionPaused || info.History[len(info.History)-1].Event != "paused" {
		t.Fatalf("the idle auto_pause session: %+v", info)
	}
}

// TestHibernateResumeFork: a hibernated session's files come back in a new box with the same
// ID and a new interpreter (memory lost); a fork of it has the same files and is independent;
// the per-agent count is named when full; the record survives a new keeper (a restarted
// daemon) over the same ledger and directory, which removes a file no session holds.
func TestHibernateResumeFork(t *testing.T) {
	dir := t.TempDir()
	ledger := newMemLedger()
	m, op := newLifecycle(t, lifecycleConfig(dir), ledger)
	ctx := t.Context()
	s, err := m.Create(ctx, sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := call(t, m, "a", s.ID, "write data.csv a,b"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Hibernate(ctx, "b", s.ID); !errors.Is(err, sandbox.ErrSessionNotFound) {
		t.Fatalf("another agent's hibernate: %v", err)
	}
	info, err := m.Hibernate(ctx, "a", s.ID)
	if err != nil || info.State != sandbox.SessionHibernated || info.Hibernation == nil || info.Hibernation.Bytes == 0 {
		t.Fatalf("hibernate: %+v, %v", info, err)
	}
	<-op.last(s.ID).Done() // its box is removed
	if _, err := os.Stat(filepath.Join(dir, s.ID+".tar")); err != nil {
		t.Fatal(err)
	}
	if err := call(t, m, "a", s.ID, "x"); errclass.Of(err) != errclass.Conflict {
		t.Fatalf("a call to a hibernated session: %v", err)
	}
	if got := m.List("a"); len(got) != 1 || got[0].State != sandbox.SessionHibernated {
		t.Fatalf("list: %+v", got)
	}

	// A daemon that starts again finds it; a stray file is removed.
	stray := filepath.Join(dir, sandbox.NewSessionID()+".x.part")
	if err := os.WriteFile(stray, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	m2, op2 := newLifecycle(t, lifecycleConfig(dir), ledger)
	if n, err := m2.Recover(ctx); err != nil || n != 1 {
		t.Fatalf("recover: %d, %v", n, err)
	}
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Fatalf("a stray hibernation file was kept: %v", err)
	}
	// The same directory under another daemon_id (a renamed daemon) does not load the
	// session, nor remove the file the ledger names as its.
	renamed := lifecycleConfig(dir)
	renamed.Lifecycle.Daemon = "d1-renamed"
	m3, _ := newLifecycle(t, renamed, ledger)
	if n, err := m3.Recover(ctx); err != nil || n != 0 {
		t.Fatalf("recover under another daemon_id: %d, %v", n, err)
	}
	if _, err := os.Stat(filepath.Join(dir, s.ID+".tar")); err != nil {
		t.Fatalf("another daemon's hibernated session lost its file: %v", err)
	}

	fork, err := m2.Fork(ctx, "a", s.ID)
	if err != nil || fork.ForkedFrom != s.ID || fork.ID == s.ID {
		t.Fatalf("fork: %+v, %v", fork, err)
	}
	info, err = m2.Resume(ctx, "a", s.ID)
	if err != nil || info.State != sandbox.SessionActive || info.Memory != sandbox.MemoryLost || info.ID != s.ID {
		t.Fatalf("resume: %+v, %v", info, err)
	}
	if got := op2.last(s.ID).files["data.csv"]; got != "a,b" {
		t.Fatalf("resumed files: %v", op2.last(s.ID).files)
	}
	if _, err := os.Stat(filepath.Join(dir, s.ID+".tar")); !os.IsNotExist(err) {
		t.Fatalf("the hibernation file of a resumed session is kept: %v", err)
	}
	if err := call(t, m2, "a", fork.ID, "write data.csv changed"); err != nil {
		t.Fatal(err)
	}
	if got := op2.last(s.ID).files["data.csv"]; got != "a,b" {
		t.Fatalf("a fork's write reached its source: %q", got)
	}

	// Two hibernated sessions per agent: the third is refused, naming the budget, and stays paused.
	if _, err := m2.Hibernate(ctx, "a", s.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m2.Hibernate(ctx, "a", fork.ID); err != nil {
		t.Fatal(err)
	}
	third, err := m2.Create(ctx, sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m2.Hibernate(ctx, "a", third.ID)
	if errclass.Of(err) != errclass.Busy || !strings.Contains(err.Error(), "hibernated_per_agent") {
		t.Fatalf("a hibernation past hibernated_per_agent: %v", err)
	}
	if info, _ := m2.Get(ctx, "a", third.ID); info.State != sandbox.SessionActive || !strings.Contains(info.LifecycleError, "stays running") ||
		!strings.Contains(info.LifecycleError, "hibernated_per_agent") {
		t.Fatalf("the refused session: %+v", info)
	}
}

// TestHibernationFileAltered: a hibernation file changed on disk is refused on resume, never
// loaded, and the session ends lost saying why.
func TestHibernationFileAltered(t *testing.T) {
	dir := t.TempDir()
	m, op := newLifecycle(t, lifecycleConfig(dir), newMemLedger())
	ctx := t.Context()
	s, err := m.Create(ctx, sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := call(t, m, "a", s.ID, "write secret 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Hibernate(ctx, "a", s.ID); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, s.ID+".tar")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw = bytes.Replace(raw, []byte("secret"), []byte("evil!!"), 1)
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = m.Resume(ctx, "a", s.ID)
	ended, ok := errors.AsType[*sandbox.SessionEndedError](err)
	if !ok || ended.Info.EndReason != sandbox.EndLost || !strings.Contains(err.Error(), "altered") {
		t.Fatalf("resume of an altered file: %v", err)
	}
	// The resume's box starts while the file is checked: it may have been opened, but it
	// received none of the file and was removed.
	op.mu.Lock()
	boxes := op.boxes[s.ID]
	op.mu.Unlock()
	if n := len(boxes); n < 1 || n > 2 {
		t.Fatalf("%d boxes were opened, want the session's and at most the resume's", n)
	}
	if len(boxes) == 2 {
		b := boxes[1]
		b.fmu.Lock()
		loaded := len(b.files)
		b.fmu.Unlock()
		b.mu.Lock()
		closed := b.closed
		b.mu.Unlock()
		if loaded != 0 || !closed {
			t.Fatalf("the resume's box holds %d files of the altered file (closed %v): it was loaded", loaded, closed)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the refused file is kept: %v", err)
	}
}

// TestHibernationDiskFull: the disk filling while a session is hibernated leaves it paused,
// with nothing on disk, and says so. It needs root to mount a small tmpfs.
func TestHibernationDiskFull(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mounting a small tmpfs (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	m, op := newLifecycle(t, lifecycleConfig(dir), newMemLedger())
	ctx := t.Context()
	s, err := m.Create(ctx, sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := call(t, m, "a", s.ID, "write big "+strings.Repeat("x", 200<<10)); err != nil {
		t.Fatal(err)
	}
	_, err = m.Hibernate(ctx, "a", s.ID)
	if err == nil || !strings.Contains(err.Error(), "full") || !strings.Contains(err.Error(), "stays paused") {
		t.Fatalf("hibernation on a full disk: %v", err)
	}
	info, _ := m.Get(ctx, "a", s.ID)
	if info.State != sandbox.SessionPaused || !op.last(s.ID).paused || !strings.Contains(info.LifecycleError, "full") {
		t.Fatalf("after it: %+v (box paused %v)", info, op.last(s.ID).paused)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("left on the full disk: %v", entries)
	}
	if _, err := m.Resume(ctx, "a", s.ID); err != nil {
		t.Fatalf("resume after it: %v", err)
	}
}

// TestHibernationRetention: a session hibernated longer than HibernatedMaxAge ends
// (hibernation_expired), its file removed and its end in the ledger; a younger one stays.
func TestHibernationRetention(t *testing.T) {
	dir := t.TempDir()
	ledger := newMemLedger()
	cfg := lifecycleConfig(dir)
	cfg.Lifecycle.HibernatedMaxAge = time.Hour
	m, _ := newLifecycle(t, cfg, ledger)
	ctx := t.Context()
	var ids []string
	for range 2 {
		s, err := m.Create(ctx, sandbox.SessionRequest{Agent: "a"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Hibernate(ctx, "a", s.ID); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	m.mu.Lock()
	old := m.hibernated[ids[0]]
	m.mu.Unlock()
	old.mu.Lock()
	old.info.Hibernation.At = old.info.Hibernation.At.Add(-2 * time.Hour)
	old.mu.Unlock()
	m.retain(ctx)
	info, err := m.Get(ctx, "a", ids[0])
	if err != nil || info.State != sandbox.SessionEnded || info.EndReason != sandbox.EndHibernationExpired || !strings.Contains(info.Reason, "hibernated_max_age_hours") {
		t.Fatalf("the old session: %+v, %v", info, err)
	}
	if rec, _ := ledger.LookupSession(ctx, ids[0]); rec.EndReason != sandbox.EndHibernationExpired {
		t.Fatalf("the ledger's record: %+v", rec)
	}
	if _, err := os.Stat(filepath.Join(dir, ids[0]+".tar")); !os.IsNotExist(err) {
		t.Fatalf("the expired file is kept: %v", err)
	}
	if info, _ := m.Get(ctx, "a", ids[1]); info.State != sandbox.SessionHibernated {
		t.Fatalf("the younger session: %+v", info)
	}
}

// TestHibernateRefusedWhileRunning: with the paused budget full a session is hibernated
// straight from running; refused by hibernated_per_agent, it runs on and takes calls.
func TestHibernateRefusedWhileRunning(t *testing.T) {
	cfg := lifecycleConfig(t.TempDir())
	cfg.Lifecycle.PausedMaxBytes, cfg.Lifecycle.HibernatedPerAgent = 0, 0
	m, _ := newLifecycle(t, cfg, nil)
	ctx := t.Context()
	s, err := m.Create(ctx, sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Hibernate(ctx, "a", s.ID)
	if errclass.Of(err) != errclass.Busy || !strings.Contains(err.Error(), "hibernated_per_agent") {
		t.Fatalf("hibernate: %v", err)
	}
	if err := call(t, m, "a", s.ID, "x"); err != nil {
		t.Fatalf("a call after the refused hibernation: %v", err)
	}
	if info, _ := m.Get(ctx, "a", s.ID); info.State != sandbox.SessionActive || !strings.Contains(info.LifecycleError, "stays running") {
		t.Fatalf("after it: %+v", info)
	}
}

// TestShutdownSaysWhyASessionWasNotHibernated: a session the daemon's stop could not
// hibernate ends with the hibernation's error as its reason, not a guess (trial, 2 December
// 2026: "a call ran, or session_hibernate_on_stop is off", when neither was true).
func TestShutdownSaysWhyASessionWasNotHibernated(t *testing.T) {
	cfg := lifecycleConfig(t.TempDir())
	cfg.Lifecycle.HibernateOnStop, cfg.Lifecycle.HibernatedPerAgent = true, 0
	ledger := newMemLedger()
	m, _ := newLifecycle(t, cfg, ledger)
	s, err := m.Create(t.Context(), sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	m.Shutdown(t.Context())
	info, err := ledger.LookupSession(t.Context(), s.ID)
	if err != nil || info.EndReason != sandbox.EndDaemonStopped || !strings.Contains(info.Reason, "hibernated_per_agent") ||
		strings.Contains(info.Reason, "session_hibernate_on_stop is off") {
		t.Fatalf("the session's end: %q %q, %v (want daemon_stopped naming hibernated_per_agent)", info.EndReason, info.Reason, err)
	}
}

// TestShutdownHibernatesWithoutAFreezer: the daemon's stop hibernates the sessions whose
// sandboxes cannot be frozen (pods) as it hibernates the others; they resume with their files
// (a helper, 7 December 2026: on Kubernetes every session ended at a stop, "cannot be
// paused", since the stop paused before it hibernated).
func TestShutdownHibernatesWithoutAFreezer(t *testing.T) {
	cfg := lifecycleConfig(t.TempDir())
	cfg.Lifecycle.HibernateOnStop = true
	ledger := newMemLedger()
	m := newKeeper(newService(engine.Hooks{}), &podOpener{}, ledger, cfg)
	s, err := m.Create(t.Context(), sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := call(t, m, "a", s.ID, "x"); err != nil {
		t.Fatal(err)
	}
	m.Shutdown(t.Context())
	info, err := ledger.LookupSession(t.Context(), s.ID)
	if err != nil || info.State != sandbox.SessionHibernated || info.EndReason != "" {
		t.Fatalf("after the stop: %+v, %v; want it hibernated, not ended", info, err)
	}

	again := newKeeper(newService(engine.Hooks{}), &podOpener{}, ledger, cfg)
	t.Cleanup(func() { again.Shutdown(context.Background()) })
	if n, err := again.Recover(t.Context()); err != nil || n != 1 {
		t.Fatalf("the next daemon recovered %d hibernated sessions, %v; want 1", n, err)
	}
	if info, err = again.Resume(t.Context(), "a", s.ID); err != nil || info.State != sandbox.SessionActive {
		t.Fatalf("its resume by the next daemon = %+v, %v", info, err)
	}
}

// egressBox is a fileBox that records the dialer of its commands' connections.
type egressBox struct {
	*fileBox
	mu     sync.Mutex
	egress sandbox.EgressDialer
}

func (b *egressBox) SetEgress(d sandbox.EgressDialer) {
	b.mu.Lock()
	b.egress = d
	b.mu.Unlock()
}

func (b *egressBox) dialer() sandbox.EgressDialer {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.egress
}

type egressOpener struct {
	fileOpener
	mu    sync.Mutex
	boxes map[string]*egressBox
}

func (o *egressOpener) OpenSession(ctx context.Context, id string) (sandbox.SessionBox, error) {
	fb, _ := o.fileOpener.OpenSession(ctx, id)
	b := &egressBox{fileBox: fb.(*fileBox)}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.boxes == nil {
		o.boxes = map[string]*egressBox{}
	}
	o.boxes[id] = b
	return b, nil
}

func (o *egressOpener) box(id string) *egressBox {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.boxes[id]
}

// workspacePolicy is an egress policy whose every dialer is a closable nothing.
type workspacePolicy struct{ sandbox.EgressPolicy }

func (workspacePolicy) ForWorkspace([]string, func(sandbox.EgressConnection)) sandbox.EgressRun {
	return &nullRun{}
}

type nullRun struct {
	sandbox.EgressDialer
	closed bool
}

func (r *nullRun) Close()                                         { r.closed = true }
func (r *nullRun) Connections() ([]sandbox.EgressConnection, int) { return nil, 0 }

// TestResumedAndForkedSessionsKeepEgress: a session's commands reach the network through
// the daemon's proxy with the workspace's dialer; a session resumed from hibernation, and a
// fork, had none, so a trial's `pip install` in a resumed session's command was refused the
// package index. Each new box now gets one, and a hibernated box's is closed.
func TestResumedAndForkedSessionsKeepEgress(t *testing.T) {
	op := &egressOpener{}
	svc := newService(engine.Hooks{Egress: workspacePolicy{}})
	m := newKeeper(svc, op, newMemLedger(), lifecycleConfig(t.TempDir()))
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	ctx := t.Context()
	s, err := m.Create(ctx, sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	first := op.box(s.ID)
	if first.dialer() == nil {
		t.Fatal("a new session's box has no egress dialer")
	}
	if _, err := m.Hibernate(ctx, "a", s.ID); err != nil {
		t.Fatal(err)
	}
	if !first.dialer().(*nullRun).closed {
		t.Error("the hibernated box's egress dialer was not closed")
	}
	fork, err := m.Fork(ctx, "a", s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if op.box(fork.ID).dialer() == nil {
		t.Error("a fork's box has no egress dialer")
	}
	if _, err := m.Resume(ctx, "a", s.ID); err != nil {
		t.Fatal(err)
	}
	if b := op.box(s.ID); b == first || b.dialer() == nil {
		t.Error("the resumed session's new box has no egress dialer")
	}
}

// TestResumeDuringAForksCopy: a fork of a paused session thaws its box while it copies the
// files; a resume meanwhile thawed it again and met the engine's "is not paused" (trial, 2
// December 2026). The resume now waits for the copy, and both succeed.
func TestResumeDuringAForksCopy(t *testing.T) {
	m, op := newLifecycle(t, lifecycleConfig(t.TempDir()), newMemLedger())
	ctx := t.Context()
	s, err := m.Create(ctx, sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Pause(ctx, "a", s.ID); err != nil {
		t.Fatal(err)
	}
	b := op.last(s.ID)
	b.saving, b.hold = make(chan struct{}), make(chan struct{})
	forked := make(chan error, 1)
	go func() {
		_, err := m.Fork(ctx, "a", s.ID)
		forked <- err
	}()
	<-b.saving // the fork's copy has thawed the box
	resumed := make(chan error, 1)
	go func() {
		_, err := m.Resume(ctx, "a", s.ID)
		resumed <- err
	}()
	select {
	case err := <-resumed:
		t.Fatalf("the resume did not wait for the fork's copy: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(b.hold)
	if err := <-forked; err != nil {
		t.Fatalf("fork: %v", err)
	}
	if err := <-resumed; err != nil {
		t.Fatalf("resume during the fork's copy: %v", err)
	}
	if info, err := m.Get(ctx, "a", s.ID); err != nil || info.State != sandbox.SessionActive {
		t.Fatalf("after: %+v, %v", info, err)
	}
}

// TestRefusedHibernationLeavesARunningSessionRunning: a running session asked to hibernate
// past hibernated_per_agent is paused first, and was left paused though the log said it stayed
// as it was (trial, 2 December 2026). It runs on, and a pause while a call runs is refused in
// a pause's words (it named the "wait" field of calls).
func TestRefusedHibernationLeavesARunningSessionRunning(t *testing.T) {
	cfg := lifecycleConfig(t.TempDir())
	cfg.Lifecycle.HibernatedPerAgent = 0
	m, op := newLifecycle(t, cfg, nil)
	ctx := t.Context()
	s, err := m.Create(ctx, sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Hibernate(ctx, "a", s.ID); errclass.Of(err) != errclass.Busy || !strings.Contains(err.Error(), "hibernated_per_agent") {
		t.Fatalf("hibernate: %v", err)
	}
	if info, _ := m.Get(ctx, "a", s.ID); info.State != sandbox.SessionActive {
		t.Fatalf("after the refused hibernation: %s, want active", info.State)
	}
	if err := call(t, m, "a", s.ID, "x"); err != nil {
		t.Fatalf("a call after the refused hibernation: %v", err)
	}
	b := op.last(s.ID)
	running := make(chan error, 1)
	go func() { running <- call(t, m, "a", s.ID, "block") }()
	waitFor(t, func() bool { info, _ := m.Get(t.Context(), "a", s.ID); return info.Busy })
	_, err = m.Pause(ctx, "a", s.ID)
	if errclass.Of(err) != errclass.Conflict || !strings.Contains(err.Error(), "cannot be paused now") || strings.Contains(err.Error(), "wait") {
		t.Fatalf("pause while a call runs: %v", err)
	}
	close(b.release)
	if err := <-running; err != nil {
		t.Fatal(err)
	}
}

// gatedOpener is a fileOpener whose OpenSession, once gate is set, says it entered and waits
// for gate to close.
type gatedOpener struct {
	fileOpener
	entered chan struct{}
	gate    chan struct{}
}

func (o *gatedOpener) OpenSession(ctx context.Context, id string) (sandbox.SessionBox, error) {
	if o.gate != nil {
		o.entered <- struct{}{}
		<-o.gate
	}
	return o.fileOpener.OpenSession(ctx, id)
}

// TestCloseDuringAResume: a close of a hibernated session while it resumes waits for the
// resume and closes the resumed session: it ends closed, its new sandbox is removed, and no
// session is left live (before, the close answered "closed" while the resume went on, and the
// session came back live though the ledger said it had ended).
func TestCloseDuringAResume(t *testing.T) {
	op := &gatedOpener{}
	ledger := newMemLedger()
	m := newKeeper(newService(engine.Hooks{}), op, ledger, lifecycleConfig(t.TempDir()))
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	ctx := t.Context()
	s, err := m.Create(ctx, sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := call(t, m, "a", s.ID, "x = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Hibernate(ctx, "a", s.ID); err != nil {
		t.Fatal(err)
	}
	op.entered, op.gate = make(chan struct{}), make(chan struct{})
	resumed := make(chan error, 1)
	go func() {
		_, err := m.Resume(ctx, "a", s.ID)
		resumed <- err
	}()
	<-op.entered // the resume is opening the new sandbox
	closed := make(chan sandbox.SessionInfo, 1)
	go func() {
		info, err := m.Close(ctx, "a", s.ID)
		if err != nil {
			t.Error(err)
		}
		closed <- info
	}()
	select {
	case info := <-closed:
		t.Fatalf("the close answered before the resume ended: %+v", info)
	case <-time.After(200 * time.Millisecond):
	}
	close(op.gate)
	if err := <-resumed; err != nil && !errors.Is(err, errclass.Gone) { // the close may come first after the wake
		t.Fatal(err)
	}
	info := <-closed
	if info.State != sandbox.SessionEnded || info.EndReason != sandbox.EndClosed {
		t.Fatalf("the close: %+v", info)
	}
	if n := m.Active(); n != 0 {
		t.Fatalf("%d sessions live after the close", n)
	}
	waitFor(t, func() bool { b := op.last(s.ID); b.mu.Lock(); defer b.mu.Unlock(); return b.closed })
	if rec, _ := ledger.LookupSession(ctx, s.ID); rec.State != sandbox.SessionEnded {
		t.Fatalf("the ledger's record: %+v", rec)
	}
}

// podBox is a fileBox without a freezer, as a pod is: it keeps files but cannot pause.
type podBox struct {
	sandbox.SessionBox // the fileBox's, but for Pause and Unpause
	fb                 *fileBox
}

func (p podBox) SaveFiles(ctx context.Context, w io.Writer) error { return p.fb.SaveFiles(ctx, w) }
func (p podBox) RestoreFiles(ctx context.Context, r io.Reader) error {
	return p.fb.RestoreFiles(ctx, r)
}

type podOpener struct{ fileOpener }

func (o *podOpener) OpenSession(ctx context.Context, id string) (sandbox.SessionBox, error) {
	b, _ := o.fileOpener.OpenSession(ctx, id)
	return podBox{SessionBox: b, fb: b.(*fileBox)}, nil
}

// TestAutoPauseWithoutAFreezerHibernates: a session with auto_pause whose sandbox cannot be
// frozen (a pod) is hibernated at its idle timeout, not ended; a pause asked for hibernates it
// and says so, and a resume brings it back with its memory lost.
func TestAutoPauseWithoutAFreezerHibernates(t *testing.T) {
	m := newKeeper(newService(engine.Hooks{}), &podOpener{}, newMemLedger(), lifecycleConfig(t.TempDir()))
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	ctx := t.Context()
	idle, on := int64(1000), true
	s, err := m.Create(ctx, sandbox.SessionRequest{Agent: "a", IdleTimeoutMS: &idle, SessionOptions: sandbox.SessionOptions{AutoPause: &on}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := m.Pause(ctx, "a", s.ID)
	if err != nil || info.State != sandbox.SessionHibernated || len(info.History) == 0 ||
		info.History[len(info.History)-1].Detail != PausedAsHibernation {
		t.Fatalf("a pause of a session that cannot be frozen = %+v, %v; want it hibernated, saying so", info, err)
	}
	if info, err = m.Resume(ctx, "a", s.ID); err != nil || info.State != sandbox.SessionActive || info.Memory != sandbox.MemoryLost {
		t.Fatalf("its resume = %+v, %v; want it active with its memory lost", info, err)
	}
	waitFor(t, func() bool { info, _ := m.Get(ctx, "a", s.ID); return info.State != sandbox.SessionActive })
	if info, _ := m.Get(ctx, "a", s.ID); info.State != sandbox.SessionHibernated {
		t.Fatalf("at its idle timeout: %+v", info)
	}
}

// DialPort: nothing listens on any port of a fileBox.
func (b *fileBox) DialPort(_ context.Context, port int) (net.Conn, error) {
	return nil, &sandbox.PortError{Port: port, Why: fmt.Sprintf("nothing listens on port %d in the session's sandbox (connection refused)", port)}
}

func (b *fileBox) ListeningPorts(context.Context) ([]sandbox.ListeningPort, error) { return nil, nil }

// TestPortLostToHibernation: a port nothing listens on says why its server may be gone when
// the session's sandbox came from a resume from hibernation or from a fork (a trial saw a
// bare 502 after a resume); a session that was never hibernated gets no such hint.
func TestPortLostToHibernation(t *testing.T) {
	m, _ := newLifecycle(t, lifecycleConfig(t.TempDir()), nil)
	ctx := t.Context()
	info, err := m.Create(ctx, sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	dial := func(id string) error {
		t.Helper()
		s, err := m.Registry.Get(ctx, "a", id)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.DialPort(ctx, 8000)
		if _, ok := errors.AsType[*sandbox.PortError](err); !ok {
			t.Fatalf("a dial of nothing: %v (%T), want a *sandbox.PortError", err, err)
		}
		return err
	}
	if err := dial(info.ID); strings.Contains(err.Error(), "hibernat") {
		t.Fatalf("a session never hibernated: %v", err)
	}
	if _, err := m.Hibernate(ctx, "a", info.ID); err != nil {
		t.Fatal(err)
	}
	fork, err := m.Fork(ctx, "a", info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resume(ctx, "a", info.ID); err != nil {
		t.Fatal(err)
	}
	if err := dial(info.ID); !strings.Contains(err.Error(), "nothing listens on port 8000") ||
		!strings.Contains(err.Error(), "the session was hibernated and resumed at") || !strings.Contains(err.Error(), "servers do not survive hibernation") ||
		!strings.Contains(err.Error(), "start it again") {
		t.Fatalf("after a resume from hibernation: %v", err)
	}
	// A pause and resume later (memory kept) the sandbox is still the one the resume made.
	if _, err := m.Pause(ctx, "a", info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resume(ctx, "a", info.ID); err != nil {
		t.Fatal(err)
	}
	if err := dial(info.ID); !strings.Contains(err.Error(), "servers do not survive hibernation") {
		t.Fatalf("after a pause of the resumed session: %v", err)
	}
	if err := dial(fork.ID); !strings.Contains(err.Error(), "forked from "+info.ID) || !strings.Contains(err.Error(), "a fork copies files, not processes") {
		t.Fatalf("in a fork: %v", err)
	}
}

// TestHibernationBudgetCountsWhatIsBeingWritten: hibernated_max_bytes counts the files being
// written, before their bytes reach the disk: a second hibernation while one is being written,
// and a fork's copy, are refused when they would pass it together (issue 51, item 6: each was
// checked against the hibernated files alone, or not at all).
func TestHibernationBudgetCountsWhatIsBeingWritten(t *testing.T) {
	cfg := lifecycleConfig(t.TempDir())
	cfg.Lifecycle.HibernatedMaxBytes, cfg.Lifecycle.PausedMaxBytes = 5<<19, 1000 // 2.5 MiB
	m, op := newLifecycle(t, cfg, newMemLedger())
	ctx := t.Context()
	big := strings.Repeat("x", 3<<19) // 1.5 MiB: one fits, two do not
	var ids []string
	for range 3 {
		info, err := m.Create(ctx, sandbox.SessionRequest{Agent: "a"})
		if err != nil {
			t.Fatal(err)
		}
		b := op.last(info.ID)
		b.fmu.Lock()
		b.files["big.bin"] = big
		b.fmu.Unlock()
		ids = append(ids, info.ID)
	}
	first := op.last(ids[0])
	first.wrote, first.after = make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := m.Hibernate(ctx, "a", ids[0])
		done <- err
	}()
	<-first.wrote // its 1.5 MiB are written, not yet counted as a hibernated session's
	_, err := m.Hibernate(ctx, "a", ids[1])
	if be, ok := errors.AsType[*sandbox.SessionBudgetError](err); !ok || be.Budget != "hibernated_max_bytes" || be.Need <= be.Limit {
		t.Fatalf("a hibernation while another is written: %v; want hibernated_max_bytes refused", err)
	}
	close(first.after)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := m.Pause(ctx, "a", ids[2]); err != nil {
		t.Fatal(err)
	}
	_, err = m.Fork(ctx, "a", ids[2])
	if be, ok := errors.AsType[*sandbox.SessionBudgetError](err); !ok || be.Budget != "hibernated_max_bytes" || !strings.Contains(be.Error(), "fork") {
		t.Fatalf("a fork's copy past the budget: %v; want hibernated_max_bytes refused", err)
	}
	// Nothing stays taken: with the hibernated session resumed, both fit again.
	if _, err := m.Resume(ctx, "a", ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Hibernate(ctx, "a", ids[1]); err != nil {
		t.Fatalf("a hibernation once the budget is free: %v", err)
	}
}

// TestHibernationFileBoundedByTheDisk: files of few bytes under many long names (a trial's
// 40 KiB of hard links made a 318.6 MB hibernation file) make an archive past FileMaxBytes
// (twice the session's disk): the hibernation and a fork's copy are refused saying why,
// before more than that is written, and nothing stays on disk.
func TestHibernationFileBoundedByTheDisk(t *testing.T) {
	dir := t.TempDir()
	cfg := lifecycleConfig(dir)
	cfg.Lifecycle.FileMaxBytes = 64 << 10
	m, op := newLifecycle(t, cfg, newMemLedger())
	ctx := t.Context()
	info, err := m.Create(ctx, sandbox.SessionRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b := op.last(info.ID)
	b.fmu.Lock()
	for i := range 200 {
		b.files[fmt.Sprintf("%s/link-%d", strings.Repeat("d", 200), i)] = ""
	}
	b.fmu.Unlock()
	_, err = m.Hibernate(ctx, "a", info.ID)
	if errclass.Of(err) != errclass.TooLarge || !strings.Contains(err.Error(), "twice its disk (run_dir_bytes)") || !strings.Contains(err.Error(), "hard links") {
		t.Fatalf("hibernating many long names: %v; want too large, naming run_dir_bytes", err)
	}
	if got, _ := m.Get(ctx, "a", info.ID); got.State == sandbox.SessionHibernated {
		t.Fatalf("the refused session is hibernated: %+v", got)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a refused hibernation left %v", entries)
	}
	b.fmu.Lock()
	saves := b.saves
	b.fmu.Unlock()
	if saves != 0 {
		t.Fatalf("the files were written %d times before the refusal; want counted first, none written", saves)
	}
	if got, _ := m.Get(ctx, "a", info.ID); got.State != sandbox.SessionPaused {
		if _, err := m.Pause(ctx, "a", info.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Fork(ctx, "a", info.ID); errclass.Of(err) != errclass.TooLarge {
		t.Fatalf("forking it: %v; want too large", err)
	}
}
