package session

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Hibernation writes a session's files to the data directory (checksummed) and removes its
// sandbox; a resume brings them back in a new sandbox with a new interpreter. Hibernated
// sessions are kept in the ledger and outlive the daemon (Recover).

// hibernationPath is session id's hibernation file.
func (r *Registry) hibernationPath(id string) string {
	return filepath.Join(r.cfg.Lifecycle.Dir, id+".tar")
}

// Hibernate writes the session to disk and removes its sandbox (pausing it first when it
// runs, unless its box has no freezer or the paused-memory budget is full: then straight from
// running). A hibernated one is answered as it is. Errors: a *SessionBusyError while a call
// runs, a *SessionBudgetError past hibernated_per_agent or hibernated_max_bytes, or a failure
// to write (the disk full: the session stays paused, and the error says so).
func (s *Session) Hibernate(ctx context.Context) (sandbox.SessionInfo, error) {
	return s.hibernate(ctx, "asked")
}

// hibernate is Hibernate, why going to the session's history.
func (s *Session) hibernate(ctx context.Context, why string) (sandbox.SessionInfo, error) {
	s.mu.Lock()
	h, err := s.cur, s.endedErr()
	hibernated := s.info.State == sandbox.SessionHibernated
	s.mu.Unlock()
	switch {
	case err != nil:
		return sandbox.SessionInfo{}, err
	case hibernated:
		return s.Info(), nil
	case h == nil:
		return sandbox.SessionInfo{}, fmt.Errorf("%w: session %s has no sandbox now", sandbox.ErrNotReady, s.id)
	}
	if _, pausable := h.box.(sandbox.PausableBox); !pausable {
		// No freezer (the kubernetes runtime): hibernate straight from running.
		return s.hibernateRunning(ctx, why)
	}
	// Past hibernated_per_agent it is refused before it is paused: it stays as it was (a
	// trial's running session was left paused).
	if err := s.r.perAgentRoom(s.Agent()); err != nil {
		return s.hibernateFailed(ctx, err)
	}
	if err := s.pause(ctx, "to hibernate"); err != nil {
		if _, over := errors.AsType[*sandbox.SessionBudgetError](err); !over {
			return sandbox.SessionInfo{}, err
		}
		// The paused-memory budget is full: hibernate straight from running.
		return s.hibernateRunning(ctx, why)
	}
	return s.hibernatePaused(ctx, why)
}

// hibernateRunning hibernates running s without pausing it first (see hibernateHeld): it takes
// s's turn, a *SessionBusyError while a call holds it, and gives it back when hibernating
// fails.
func (s *Session) hibernateRunning(ctx context.Context, why string) (sandbox.SessionInfo, error) {
	select {
	case <-s.turn:
	default:
		return sandbox.SessionInfo{}, &sandbox.SessionBusyError{ID: s.id, Step: "hibernated"}
	}
	info, err := s.hibernateHeld(ctx, why)
	if err != nil {
		s.releaseTurn() // it runs on, as it was
	}
	return info, err
}

// hibernatePaused hibernates paused s (see hibernateHeld).
func (s *Session) hibernatePaused(ctx context.Context, why string) (sandbox.SessionInfo, error) {
	s.thaw.Lock()
	defer s.thaw.Unlock()
	s.mu.Lock()
	paused, h := s.life.paused, s.cur
	s.mu.Unlock()
	if !paused || h == nil {
		return sandbox.SessionInfo{}, &sandbox.SessionStateError{ID: s.id, State: sandbox.SessionActive, Step: "hibernated", Fix: "pause it first"}
	}
	pb := h.box.(sandbox.PausableBox)
	if err := pb.Unpause(ctx); err != nil {
		return sandbox.SessionInfo{}, fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	info, err := s.hibernateHeld(ctx, why)
	if err != nil {
		if perr := pb.Pause(context.WithoutCancel(ctx)); perr != nil {
			s.r.log.Error("a session whose hibernation failed could not be paused again", "session", s.id, "error", perr)
		}
	}
	return info, err
}

// hibernateHeld writes running s's files to its hibernation file, records it hibernated and
// removes its sandbox; s's turn is held by the caller (a paused session's turn, or taken). On
// failure nothing is left on disk, the session is as it was, and its LifecycleError and
// history say why.
func (s *Session) hibernateHeld(ctx context.Context, why string) (sandbox.SessionInfo, error) {
	r := s.r
	lc := r.cfg.Lifecycle
	s.mu.Lock()
	h, agent := s.cur, s.info.Agent
	s.mu.Unlock()
	if h == nil {
		return sandbox.SessionInfo{}, cmpErr(s.stateErr(), fmt.Errorf("session %s has no sandbox to hibernate", s.id))
	}
	fb, ok := h.box.(sandbox.FilesBox)
	if lc.Dir == "" || !ok {
		return sandbox.SessionInfo{}, errclass.New(errclass.Invalid, "hibernation is off on this daemon (it has no hibernation directory)")
	}
	if err := r.perAgentRoom(agent); err != nil {
		return s.hibernateFailed(ctx, err)
	}
	// Its bytes are taken from hibernated_max_bytes before they are written, as are those of
	// the other hibernations and fork copies being written (issue 51, item 6).
	w := r.newBudgetWriter()
	defer w.release()
	err := w.sizeUp(ctx, fb)
	var (
		sum string
		n   int64
	)
	if err == nil {
		sum, n, err = r.writeHibernation(ctx, s.id, w, fb.SaveFiles)
	}
	if err != nil {
		if errors.Is(err, errOverBudget) {
			return s.hibernateFailed(ctx, w.overError("close or resume hibernated sessions, or remove files from this session first"))
		}
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			return s.hibernateFailed(ctx, errclass.Wrap(errclass.Unavailable, fmt.Errorf("the disk of %s is full (%w); the session stays paused: resume it, or free space and hibernate again", lc.Dir, err)))
		}
		return s.hibernateFailed(ctx, fmt.Errorf("%w: %w", sandbox.ErrNotReady, err))
	}
	now := time.Now().UTC()
	r.mu.Lock()
	s.mu.Lock()
	if r.live[s.id] != s || s.cur != h {
		s.mu.Unlock()
		r.mu.Unlock()
		_ = os.Remove(r.hibernationPath(s.id))
		return sandbox.SessionInfo{}, cmpErr(s.stateErr(), fmt.Errorf("session %s ended while it was hibernated", s.id))
	}
	delete(r.live, s.id)
	r.hibernated[s.id] = s
	w.counted() // its file counts from here on, through hibernatedBytes
	s.cur = nil
	s.timer.Stop()
	if !s.life.paused {
		s.life.ran = s.ranFor(now)
		s.info.PausedAt = &now
	}
	s.life.paused = true
	s.info.State, s.info.RanMS, s.info.LifecycleError = sandbox.SessionHibernated, s.life.ran.Milliseconds(), ""
	s.info.Busy, s.info.Waiting, s.info.ExpiresAt = false, 0, nil
	s.info.Hibernation = &sandbox.Hibernation{Daemon: lc.Daemon, Bytes: n, SHA256: sum, At: now, Paths: slices.Clone(s.paths)}
	s.info.AddEvent(now, "hibernated", why)
	info := s.info
	s.mu.Unlock()
	r.mu.Unlock()
	r.record(ctx, info)
	// Removed before the answer: a resume at once makes a container of the same name.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := h.close(cctx, "the session was hibernated (its files are kept, not its processes)"); err != nil {
		r.log.Warn("removing a hibernated session's sandbox", "session", s.id, "error", err)
	}
	r.log.Info("session hibernated", "session", s.id, "agent", agent, "bytes", n, "why", why)
	r.shareCPU(agent)
	return info, nil
}

// hibernatedBytes is the size of every hibernation file. Called with r.mu held.
func (r *Registry) hibernatedBytes() int64 {
	var n int64
	for _, h := range r.hibernated {
		h.mu.Lock()
		if hib := h.info.Hibernation; hib != nil {
			n += hib.Bytes
		}
		h.mu.Unlock()
	}
	return n
}

// perAgentRoom returns a *SessionBudgetError when agent has hibernated_per_agent hibernated
// sessions already.
func (r *Registry) perAgentRoom(agent string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	mine := 0
	for _, h := range r.hibernated {
		if h.Agent() == agent {
			mine++
		}
	}
	if limit := r.cfg.Lifecycle.HibernatedPerAgent; mine >= limit {
		return &sandbox.SessionBudgetError{Budget: "hibernated_per_agent", Limit: int64(limit), Need: int64(mine + 1),
			Fix: fmt.Sprintf("agent %q must resume or close one of its hibernated sessions first", agent)}
	}
	return nil
}

// hibernateFailed records that hibernating s failed with err, which it returns: the session
// stays as it is (running or paused), and its LifecycleError and history say why.
func (s *Session) hibernateFailed(ctx context.Context, err error) (sandbox.SessionInfo, error) {
	now := time.Now().UTC()
	s.mu.Lock()
	state := "paused"
	if !s.life.paused {
		state = "running"
	}
	s.info.LifecycleError = "hibernation failed, the session stays " + state + ": " + err.Error()
	s.info.AddEvent(now, "hibernate_failed", err.Error())
	info := s.info
	s.mu.Unlock()
	s.r.record(ctx, info)
	s.r.log.Warn("hibernating a session failed; it stays as it was", "session", s.id, "state", state, "error", err)
	return sandbox.SessionInfo{}, err
}

// errOverBudget is a hibernation file passing its byte budget while written.
var errOverBudget = errors.New("past the byte budget")

// writeHibernation writes session id's hibernation file from save, through a temporary file
// synced and renamed into place, and returns its SHA-256 (hex) and size. Past room bytes it
// stops with errOverBudget (and n the bytes written so far); on any failure nothing is left.
func (r *Registry) writeHibernation(ctx context.Context, id string, bw *budgetWriter, save func(context.Context, io.Writer) error) (string, int64, error) {
	dir := r.cfg.Lifecycle.Dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", 0, err
	}
	tmp, err := os.CreateTemp(dir, id+".*.part")
	if err != nil {
		return "", 0, err
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	w := bw
	w.w = io.MultiWriter(tmp, h)
	if err := save(ctx, w); err != nil {
		if w.over || w.tooLarge {
			return "", w.n, errOverBudget
		}
		return "", w.n, err
	}
	if err := tmp.Sync(); err != nil {
		return "", w.n, err
	}
	if err := tmp.Close(); err != nil {
		return "", w.n, err
	}
	if err := os.Rename(tmp.Name(), r.hibernationPath(id)); err != nil {
		return "", w.n, err
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return hex.EncodeToString(h.Sum(nil)), w.n, nil
}

// budgetStep is how much of hibernated_max_bytes a budgetWriter takes at once.
const budgetStep = 1 << 20

// budgetWriter passes writes on to w while the registry's hibernated_max_bytes has room for
// them: it takes the room before each write (budgetStep at a time), counted with the files
// hibernated and every other hibernation and fork copy being written, so that two written at
// once cannot pass the budget together. release gives back what it took, unless counted said
// its file is counted by then as a hibernated session's.
type budgetWriter struct {
	r     *Registry
	w     io.Writer
	n     int64 // bytes written
	taken int64 // bytes taken from the budget
	over  bool
	need  int64 // with over: what the budget would have had to hold
	// tooLarge says the file passed LifecycleConfig.FileMaxBytes.
	tooLarge bool
}

// newBudgetWriter returns a budgetWriter of r that has taken nothing yet; set w.
func (r *Registry) newBudgetWriter() *budgetWriter { return &budgetWriter{r: r} }

func (b *budgetWriter) Write(p []byte) (int, error) {
	if most := b.r.cfg.Lifecycle.FileMaxBytes; most > 0 && b.n+int64(len(p)) > most {
		b.tooLarge = true
		return 0, errOverBudget
	}
	if want := b.n + int64(len(p)); want > b.taken {
		short := want - b.taken
		step := max(short, budgetStep)
		ok, need := b.r.takeBudget(step)
		if !ok && step > short { // near the budget's end: only what this write needs
			step = short
			ok, need = b.r.takeBudget(step)
		}
		if !ok {
			b.over, b.need = true, need
			return 0, errOverBudget
		}
		b.taken += step
	}
	n, err := b.w.Write(p)
	b.n += int64(n)
	return n, err
}

// counted says the bytes written are counted from now on as a hibernated session's file:
// release gives back only what was taken beyond them. Call it with r.mu held.
func (b *budgetWriter) counted() {
	b.r.writing -= b.taken
	b.taken = 0
}

// sizeUp counts the bytes fb's SaveFiles will write, when fb can say, and takes them from the
// budget before any is written: errOverBudget (see overError) when they pass FileMaxBytes or
// the budget's room. A box that cannot count is bounded as it writes.
func (b *budgetWriter) sizeUp(ctx context.Context, fb sandbox.FilesBox) error {
	sb, ok := fb.(sandbox.SizedFilesBox)
	if !ok {
		return nil
	}
	n, err := sb.FilesSize(ctx)
	if err != nil {
		b.r.log.Warn("a session's files could not be counted before they are written; they are bounded as they are", "error", err)
		return nil
	}
	if most := b.r.cfg.Lifecycle.FileMaxBytes; most > 0 && n > most {
		b.tooLarge = true
		return errOverBudget
	}
	if n > b.taken {
		ok, need := b.r.takeBudget(n - b.taken)
		if !ok {
			b.over, b.need = true, need
			return errOverBudget
		}
		b.taken = n
	}
	return nil
}

// release gives back what b took from the budget.
func (b *budgetWriter) release() {
	if b.taken == 0 {
		return
	}
	b.r.mu.Lock()
	b.r.writing -= b.taken
	b.r.mu.Unlock()
	b.taken = 0
}

// overError is the error of a write refused past hibernated_max_bytes (a *SessionBudgetError
// saying fix), or past FileMaxBytes (invalid: the session's files must change).
func (b *budgetWriter) overError(fix string) error {
	lc := b.r.cfg.Lifecycle
	if b.tooLarge {
		return errclass.New(errclass.TooLarge, fmt.Sprintf("the session's files make an archive of more than %d bytes, twice its disk (run_dir_bytes): "+
			"many names that hold few bytes (hard links, empty files, long paths) make it far larger than the files; "+
			"remove them (such as with find /home/user -links +1), then try again", lc.FileMaxBytes))
	}
	return &sandbox.SessionBudgetError{Budget: "hibernated_max_bytes", Limit: lc.HibernatedMaxBytes, Need: b.need, Fix: fix}
}

// takeBudget takes n bytes of hibernated_max_bytes for a file being written, when the files
// hibernated, those being written and n fit; else it answers false and what they would need.
func (r *Registry) takeBudget(n int64) (bool, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	need := r.hibernatedBytes() + r.writing + n
	if need > r.cfg.Lifecycle.HibernatedMaxBytes {
		return false, need
	}
	r.writing += n
	return true, need
}

// openHibernation opens info's hibernation file and checks it against its recorded size and
// SHA-256 in the background, so that the check runs beside the sandbox's start: the file it
// returns gives no byte until the check has passed, and fails with the check's error when it
// has not (a file altered on disk is refused before a byte of it is loaded). Wait returns the
// check's error. A missing file is an error at once.
func (r *Registry) openHibernation(info sandbox.SessionInfo) (*checkedFile, error) {
	h := info.Hibernation
	path := r.hibernationPath(info.ID)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("its hibernation file is missing: %w", err)
	}
	c := &checkedFile{f: f, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		sum := sha256.New()
		// Through ReadAt: the file's own offset stays at 0 for Read.
		n, err := io.Copy(sum, io.NewSectionReader(f, 0, math.MaxInt64))
		if err != nil {
			c.err = fmt.Errorf("reading its hibernation file: %w", err)
			return
		}
		if got := hex.EncodeToString(sum.Sum(nil)); n != h.Bytes || got != h.SHA256 {
			c.err = fmt.Errorf("its hibernation file %s was altered on disk (%d bytes with SHA-256 %s; %d bytes with SHA-256 %s were written): it was refused, not loaded",
				path, n, got, h.Bytes, h.SHA256)
		}
	}()
	return c, nil
}

// Both are streams of a file on the daemon's host that a box may read in place.
var (
	_ sandbox.HostFile = (*checkedFile)(nil)
	_ sandbox.HostFile = (*removeOnClose)(nil)
)

// checkedFile is a hibernation file whose check runs in the background (see openHibernation);
// it is a sandbox.HostFile.
type checkedFile struct {
	f    *os.File
	done chan struct{} // closed when the check has finished
	err  error         // the check's error, once done is closed
}

// Wait waits for the check and returns its error.
func (c *checkedFile) Wait() error {
	<-c.done
	return c.err
}

// Check is Wait (sandbox.HostFile).
func (c *checkedFile) Check() error { return c.Wait() }

// Path returns the file's path (sandbox.HostFile).
func (c *checkedFile) Path() string { return c.f.Name() }

// Read reads the file once its check has passed.
func (c *checkedFile) Read(p []byte) (int, error) {
	if err := c.Wait(); err != nil {
		return 0, err
	}
	return c.f.Read(p)
}

// Close closes the file once the check has finished with it.
func (c *checkedFile) Close() error {
	<-c.done
	return c.f.Close()
}

// holdHibernated marks hibernated s as taken by one step (a wake, a close, the retention's
// end), so that no other starts meanwhile (Resume and Close wait for it); it returns false when
// s is not hibernated or another step holds it. release ends the mark.
func (s *Session) holdHibernated() (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.info.State != sandbox.SessionHibernated || s.waking != nil {
		return nil, false
	}
	done := make(chan struct{})
	s.waking = done
	return func() {
		s.mu.Lock()
		s.waking = nil
		s.mu.Unlock()
		close(done)
	}, true
}

// wake resumes hibernated s in a new sandbox with the same ID. A wake under way is waited
// for (Resume loops).
func (s *Session) wake(ctx context.Context) error {
	r := s.r
	release, ok := s.holdHibernated()
	if !ok {
		return nil
	}
	defer release()
	info := s.Info()
	if err := r.reserve(ctx, info.Agent); err != nil {
		return err
	}
	defer r.unreserve(info.Agent)
	f, err := r.openHibernation(info)
	if err != nil {
		ended := r.dropHibernated(ctx, s, sandbox.EndLost, err.Error())
		r.log.Error("a hibernated session could not be resumed; it is recorded as lost", "session", s.id, "error", err)
		return &sandbox.SessionEndedError{Info: ended}
	}
	defer f.Close()
	s.mu.Lock()
	unopened := s.secrets == nil && len(info.Secrets) > 0
	s.mu.Unlock()
	if unopened { // hibernated by this daemon's last run: its secrets as they are now
		r.openSecrets(ctx, s)
	}
	// The sandbox starts while the file is checked; it receives no byte of a file that fails.
	h, err := r.openFrom(ctx, s.id, info, f)
	if cerr := f.Wait(); cerr != nil {
		if h != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			_ = h.close(cctx, "the session could not start")
			cancel()
		}
		ended := r.dropHibernated(ctx, s, sandbox.EndLost, cerr.Error())
		r.log.Error("a hibernated session could not be resumed; it is recorded as lost", "session", s.id, "error", cerr)
		return &sandbox.SessionEndedError{Info: ended}
	}
	if err != nil {
		return err
	}
	// A new sandbox: the template's start command runs in it again, as in a new session.
	if err := r.startTemplate(ctx, s, h); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = h.close(cctx, "the session could not start")
		return err
	}
	now := time.Now().UTC()
	s.mu.Lock()
	prev, prevLife, prevPaths := s.info, s.life, s.paths
	s.paths = nil
	if info.Hibernation != nil {
		s.paths = info.Hibernation.Paths
	}
	s.info.State, s.info.PausedAt, s.info.Memory, s.info.LastUsedAt = sandbox.SessionActive, nil, sandbox.MemoryLost, now
	s.info.Busy, s.info.Waiting, s.info.ExpiresAt, s.info.LifecycleError = false, 0, nil, ""
	s.info.AddEvent(now, "resumed", "from hibernation: files and packages kept, memory lost (a new interpreter)")
	s.life = clock{runStart: now, ran: time.Duration(info.RanMS) * time.Millisecond}
	recorded := s.info
	s.mu.Unlock()
	if err := r.goLive(s, h); err != nil { // the daemon stops: it stays hibernated
		s.mu.Lock()
		s.info, s.life, s.paths = prev, prevLife, prevPaths
		s.mu.Unlock()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = h.close(cctx, "the session could not start")
		return err
	}
	r.record(ctx, recorded)
	if err := os.Remove(r.hibernationPath(s.id)); err != nil {
		r.log.Warn("removing a resumed session's hibernation file", "session", s.id, "error", err)
	}
	r.log.Info("session resumed from hibernation", "session", s.id, "agent", info.Agent)
	return nil
}

// openFrom opens a new sandbox for session id with info's limits and packages, starts its
// interpreter and restores files (a stream of FilesBox.SaveFiles) into it. The session does
// not hold it yet (see goLive).
func (r *Registry) openFrom(ctx context.Context, id string, info sandbox.SessionInfo, files io.Reader) (*held, error) {
	began := time.Now()
	tmpl, err := r.resolveTemplate(ctx, info.Agent, info.Template)
	if err != nil {
		return nil, fmt.Errorf("the session's template: %w", err)
	}
	box, err := r.openBox(ctx, id, tmpl)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*held, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if cerr := box.Close(cctx); cerr != nil {
			r.log.Warn("removing a session's sandbox that did not start", "session", id, "error", cerr)
		}
		return nil, err
	}
	fb, ok := box.(sandbox.FilesBox)
	if !ok {
		return fail(errclass.New(errclass.Invalid, "this daemon's sandboxes cannot restore a session's files"))
	}
	var paths []string
	if info.Hibernation != nil {
		paths = info.Hibernation.Paths
	}
	// The interpreter's start makes the session's directories afresh: start it first.
	spec := r.svc.Prepare(sandbox.Request{Code: "pass", Agent: info.Agent, Internal: true}, engine.InBox{Session: id, Box: box, Paths: paths}).Spec()
	res, err := box.Run(ctx, spec, nil)
	if err != nil {
		return fail(fmt.Errorf("%w: starting the session's interpreter: %w", sandbox.ErrNotReady, err))
	}
	if res.Outcome != sandbox.OutcomeOK {
		return fail(fmt.Errorf("%w: starting the session's interpreter: %s %s", sandbox.ErrNotReady, res.Outcome, res.Reason))
	}
	started := time.Now()
	if err := fb.RestoreFiles(ctx, files); err != nil {
		return fail(fmt.Errorf("%w: %w", sandbox.ErrNotReady, err))
	}
	r.log.Info("a session's files were restored into a new sandbox", "session", id, "from", info.ID,
		"started_ms", started.Sub(began).Milliseconds(), "restored_ms", time.Since(started).Milliseconds())
	return &held{box: box, template: tmpl, started: true, cpuWeight: sandbox.DefaultCPUWeight}, nil
}

// dropHibernated ends hibernated session s (code, reason), removes its file and records its
// end; it returns the session as it ended.
func (r *Registry) dropHibernated(ctx context.Context, s *Session, code, reason string) sandbox.SessionInfo {
	now := time.Now().UTC()
	r.mu.Lock()
	delete(r.hibernated, s.id)
	s.mu.Lock()
	s.info.State, s.info.EndReason, s.info.Reason, s.info.EndedAt = sandbox.SessionEnded, code, reason, &now
	s.info.AddEvent(now, "ended", code)
	info := s.info
	close(s.done)
	s.mu.Unlock()
	r.remember(info)
	r.mu.Unlock()
	if err := os.Remove(r.hibernationPath(s.id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.log.Warn("removing an ended session's hibernation file", "session", s.id, "error", err)
	}
	if r.ledger != nil {
		if err := r.ledger.EndSession(context.WithoutCancel(ctx), info); err != nil {
			r.log.Warn("the ledger could not record a session's end", "session", s.id, "error", err)
		}
	}
	r.log.Info("hibernated session ended", "session", s.id, "agent", info.Agent, "end_reason", code, "reason", reason)
	return info
}

// Recover loads this daemon's hibernated sessions from the ledger when it starts: each whose
// file is there (checked when resumed) stays hibernated; one whose file is missing is ended
// (lost) with the reason. Files of the directory that belong to no hibernated session (a
// hibernation or fork copy the daemon was killed in the middle of, a session ended
// meanwhile) are removed; one of another daemon's hibernated session is kept, not loaded.
// It returns how many sessions are hibernated.
func (r *Registry) Recover(ctx context.Context) (int, error) {
	dir := r.cfg.Lifecycle.Dir
	if dir == "" || r.ledger == nil {
		return 0, nil
	}
	list, err := r.ledger.HibernatedSessions(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing the hibernated sessions: %w", err)
	}
	keep := map[string]bool{}
	for _, info := range list {
		s := newSession(r, info)
		s.life = clock{paused: true, ran: time.Duration(info.RanMS) * time.Millisecond}
		switch {
		case info.Hibernation == nil:
			r.dropHibernated(ctx, s, sandbox.EndLost, "its hibernation record has no file")
			continue
		case info.Hibernation.Daemon != "" && info.Hibernation.Daemon != r.cfg.Lifecycle.Daemon:
			// Another daemon's, not loaded here; its file stays if it is in this directory (this
			// daemon under an earlier daemon_id): the ledger still names it.
			keep[info.ID+".tar"] = true
			continue
		}
		if _, err := os.Stat(r.hibernationPath(info.ID)); err != nil {
			r.dropHibernated(ctx, s, sandbox.EndLost, "its hibernation file is missing from "+dir)
			continue
		}
		keep[info.ID+".tar"] = true
		r.mu.Lock()
		r.hibernated[info.ID] = s
		r.mu.Unlock()
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	for _, e := range entries {
		if keep[e.Name()] || !strings.HasPrefix(e.Name(), "se_") {
			continue
		}
		r.log.Warn("removing a hibernation file no hibernated session holds (left by a daemon stopped while writing it, or ended)", "file", e.Name())
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return 0, err
		}
	}
	r.mu.Lock()
	n := len(r.hibernated)
	r.mu.Unlock()
	r.retain(ctx)
	return n, nil
}

// retain ends the hibernated sessions older than HibernatedMaxAge (hibernation_expired),
// logged and recorded in the ledger.
func (r *Registry) retain(ctx context.Context) {
	age := r.cfg.Lifecycle.HibernatedMaxAge
	if age <= 0 {
		return
	}
	cutoff := time.Now().Add(-age)
	r.mu.Lock()
	var old []*Session
	for _, s := range r.hibernated {
		s.mu.Lock()
		if h := s.info.Hibernation; h != nil && h.At.Before(cutoff) {
			old = append(old, s)
		}
		s.mu.Unlock()
	}
	r.mu.Unlock()
	for _, s := range old {
		if release, ok := s.holdHibernated(); ok {
			r.dropHibernated(ctx, s, sandbox.EndHibernationExpired,
				fmt.Sprintf("it stayed hibernated longer than hibernated_max_age_hours (%g hours); its files were removed", age.Hours()))
			release()
		}
	}
}

// RunRetention ends hibernated sessions past HibernatedMaxAge every period until ctx ends.
func (r *Registry) RunRetention(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.retain(ctx)
		}
	}
}

// hibernateAll hibernates every live session that takes no call now (the daemon stops), and
// returns how many it did and, by session ID, why each other could not be; the others end as
// the daemon stops.
func (r *Registry) hibernateAll(ctx context.Context) (int, map[string]error) {
	r.mu.Lock()
	var all []*Session
	for _, s := range r.live {
		if s.Agent() != WarmAgent { // a warm session holds nothing of anyone's: it just ends
			all = append(all, s)
		}
	}
	r.mu.Unlock()
	n, failed := 0, map[string]error{}
	for _, s := range all {
		if _, err := s.hibernate(ctx, "the daemon stopped"); err != nil {
			r.log.Warn("a session could not be hibernated as the daemon stops; it ends", "session", s.id, "error", err)
			failed[s.id] = err
			continue
		}
		n++
	}
	return n, failed
}
