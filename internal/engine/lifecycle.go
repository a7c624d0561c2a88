package engine

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

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A session's lifecycle beyond active and ended (see sandbox/lifecycle.go): Pause and Resume
// freeze and thaw its sandbox where it stands; Hibernate writes its files to the data
// directory (checksummed) and removes its sandbox, and Resume brings them back in a new one
// with a new interpreter; Fork makes a new session from a paused or hibernated one's files.
// Paused sessions stay live (they hold their container and count against the session caps);
// hibernated ones are kept in lifecycle.hibernated and in the ledger, and outlive the daemon.

// LifecycleConfig bounds pauses and hibernations. Zero values turn each feature off.
type LifecycleConfig struct {
	// Dir is where hibernation files are written (one <session ID>.tar each); "" turns
	// hibernation (and fork) off.
	Dir string
	// Daemon is this daemon's ID, recorded with each hibernation.
	Daemon string
	// AutoPause is the default of a new session's auto_pause (session_auto_pause).
	AutoPause bool
	// HibernateAfter hibernates a session paused that long (session_hibernate_after_ms; 0:
	// never by time). HibernateOnStop hibernates every session when the daemon stops
	// (session_hibernate_on_stop); otherwise they end (daemon_stopped).
	HibernateAfter  time.Duration
	HibernateOnStop bool
	// SessionMemoryBytes is what each paused session counts against PausedMaxBytes: its
	// container's memory limit (memory_bytes), which bounds what it holds.
	SessionMemoryBytes int64
	// PausedMaxBytes bounds the memory of all paused sessions (sessions_paused_max_bytes).
	PausedMaxBytes int64
	// HibernatedPerAgent caps an agent's hibernated sessions (hibernated_per_agent);
	// HibernatedMaxBytes the bytes of all hibernation files (hibernated_max_bytes);
	// HibernatedMaxAge how long one is kept (hibernated_max_age_hours; 0: no limit).
	HibernatedPerAgent int
	HibernatedMaxBytes int64
	HibernatedMaxAge   time.Duration
}

// lifecycle is Sessions' state of pauses and hibernations, guarded by Sessions.mu.
type lifecycle struct {
	hibernated map[string]sandbox.SessionInfo // by ID
	waking     map[string]chan struct{}       // hibernated sessions being resumed: closed when done
}

// liveLife is a live session's run clock: its lifetime counts only the time it ran.
type liveLife struct {
	paused   bool
	runStart time.Time     // when it last started running (created or resumed)
	ran      time.Duration // time run before runStart
}

// LifecycleStats are the counts /v1/limits, doctor and /metrics show.
type LifecycleStats struct {
	Paused          int
	PausedBytes     int64
	Hibernated      int
	HibernatedBytes int64
}

// hibernationPath is session id's hibernation file.
func (m *Sessions) hibernationPath(id string) string {
	return filepath.Join(m.cfg.Lifecycle.Dir, id+".tar")
}

// startLife sets a new live session's lifecycle options and clock. Called before it is live.
func (m *Sessions) startLife(ls *liveSession, opts sandbox.SessionOptions, now time.Time) {
	ls.info.AutoResume = opts.AutoResume
	ls.info.AutoPause = m.cfg.Lifecycle.AutoPause
	if opts.AutoPause != nil {
		ls.info.AutoPause = *opts.AutoPause
	}
	ls.life.runStart = now
	ls.info.AddEvent(now, "created", "")
}

// ranFor is how long ls has run by now. Called with m.mu held.
func (ls *liveSession) ranFor(now time.Time) time.Duration {
	if ls.life.paused || ls.life.runStart.IsZero() {
		return ls.life.ran
	}
	return ls.life.ran + now.Sub(ls.life.runStart)
}

// lifeEnd is when ls reaches its maximum lifetime if it keeps running. Called with m.mu held.
func (m *Sessions) lifeEnd(ls *liveSession) time.Time {
	start := ls.life.runStart
	if start.IsZero() {
		start = ls.info.CreatedAt
	}
	return start.Add(time.Duration(ls.info.MaxLifetimeMS)*time.Millisecond - ls.life.ran)
}

// Pause freezes agent's session id where it stands: no CPU, its memory kept. A call running
// or waiting makes it a *SessionBusyError; a paused session is answered as it is; a
// hibernated one is a *SessionStateError. Past sessions_paused_max_bytes it is a
// *SessionBudgetError.
func (m *Sessions) Pause(ctx context.Context, agent, id string) (sandbox.SessionInfo, error) {
	if info, ok := m.hibernatedOf(agent, id); ok {
		return info, nil
	}
	ls, err := m.lookup(ctx, agent, id)
	if err != nil {
		return sandbox.SessionInfo{}, err
	}
	if err := m.pause(ctx, id, ls, "asked"); err != nil {
		return sandbox.SessionInfo{}, err
	}
	return m.Get(ctx, agent, id)
}

// pause pauses live session ls (why goes to its history), taking its turn: a paused session
// holds its turn until it resumes.
func (m *Sessions) pause(ctx context.Context, id string, ls *liveSession, why string) error {
	pb, ok := ls.box.(sandbox.PausableBox)
	if !ok {
		return errclass.New(errclass.Invalid, "this daemon's sandboxes cannot be paused (the kubernetes runtime has no freezer: "+
			"a pod cannot be paused); hibernate the session instead (POST …/sessions/{id}/hibernate): it saves the session's files "+
			"and frees its sandbox, and the next call or resume restores them")
	}
	m.mu.Lock()
	if ls.life.paused {
		m.mu.Unlock()
		return nil
	}
	if lc := m.cfg.Lifecycle; true {
		used := m.pausedBytes() + lc.SessionMemoryBytes
		if used > lc.PausedMaxBytes {
			m.mu.Unlock()
			return &sandbox.SessionBudgetError{Budget: "sessions_paused_max_bytes", Limit: lc.PausedMaxBytes, Need: used,
				Fix: "resume or close a paused session, or hibernate one (POST …/sessions/{id}/hibernate)"}
		}
	}
	m.mu.Unlock()
	select {
	case <-ls.turn:
	default:
		return &sandbox.SessionBusyError{ID: id, Step: "paused"}
	}
	if err := pb.Pause(ctx); err != nil {
		ls.turn <- struct{}{}
		return fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	now := time.Now().UTC()
	m.mu.Lock()
	ls.life.ran = ls.ranFor(now)
	ls.life.paused = true
	ls.info.State, ls.info.PausedAt, ls.info.RanMS = sandbox.SessionPaused, &now, ls.life.ran.Milliseconds()
	ls.info.LifecycleError = ""
	ls.info.AddEvent(now, "paused", why)
	if _, live := m.live[id]; live {
		ls.timer.Reset(m.pausedWait(ls, now))
	}
	info := ls.info
	m.mu.Unlock()
	m.record(ctx, info)
	m.log.Info("session paused", "session", id, "agent", info.Agent, "why", why)
	return nil
}

// pausedBytes is what the paused sessions count against PausedMaxBytes. Called with m.mu held.
func (m *Sessions) pausedBytes() int64 {
	var n int64
	for _, ls := range m.live {
		if ls.life.paused {
			n += m.cfg.Lifecycle.SessionMemoryBytes
		}
	}
	return n
}

// pausedWait is how long from now paused ls waits before it is hibernated (an hour when it
// never is by time: its timer then only looks again). Called with m.mu held.
func (m *Sessions) pausedWait(ls *liveSession, now time.Time) time.Duration {
	after := m.cfg.Lifecycle.HibernateAfter
	if after <= 0 || m.cfg.Lifecycle.Dir == "" || ls.info.PausedAt == nil {
		return time.Hour
	}
	return max(ls.info.PausedAt.Add(after).Sub(now), time.Millisecond)
}

// expirePaused is expire for a paused session: it hibernates it once it has been paused for
// HibernateAfter. Called with m.mu held; it unlocks it.
func (m *Sessions) expirePaused(id string, ls *liveSession) {
	now := time.Now()
	after := m.cfg.Lifecycle.HibernateAfter
	if after <= 0 || m.cfg.Lifecycle.Dir == "" || ls.info.PausedAt == nil || now.Before(ls.info.PausedAt.Add(after)) {
		ls.timer.Reset(m.pausedWait(ls, now))
		m.mu.Unlock()
		return
	}
	ls.timer.Reset(time.Minute) // looked at again if the hibernation fails
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := m.hibernate(ctx, id, ls, fmt.Sprintf("paused for session_hibernate_after_ms (%d ms)", after.Milliseconds())); err != nil {
		m.log.Warn("a paused session could not be hibernated; it stays paused and is tried again in a minute", "session", id, "error", err)
	}
}

// autoPause pauses idle session id (auto_pause) instead of ending it; when it cannot be
// paused (the paused-memory budget), it is hibernated, and when that fails too it ends as
// idle.
func (m *Sessions) autoPause(id string, ls *liveSession) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := m.pause(ctx, id, ls, "auto_pause: idle for its idle timeout")
	if _, over := errors.AsType[*sandbox.SessionBudgetError](err); over && m.cfg.Lifecycle.Dir != "" {
		m.log.Info("an idle session is hibernated instead of paused: the paused-memory budget is full", "session", id, "error", err)
		select {
		case <-ls.turn:
			if _, err = m.hibernateHeld(ctx, id, ls, "auto_pause with sessions_paused_max_bytes full"); err != nil {
				ls.turn <- struct{}{} // it runs on, as it was
			}
		default:
			err = &sandbox.SessionBusyError{ID: id, Step: "hibernated"}
		}
	}
	if _, busy := errors.AsType[*sandbox.SessionBusyError](err); busy {
		m.mu.Lock()
		if _, live := m.live[id]; live {
			ls.timer.Reset(time.Second) // a call came in: look again
		}
		m.mu.Unlock()
		return
	}
	if err != nil {
		m.log.Warn("an idle session could not be paused; it ends", "session", id, "error", err)
		m.end(id, sandbox.EndIdleTimeout, fmt.Sprintf("it had no call for its idle timeout of %d ms and could not be paused: %v", ls.info.IdleTimeoutMS, err))
	}
}

// Resume continues agent's session id: a paused one where it stood ("memory": "kept"), a
// hibernated one in a new sandbox with its files and packages and a new interpreter
// ("memory": "lost"). An active one is answered as it is. Errors: ErrSessionNotFound, a
// *SessionEndedError (a hibernation file altered on disk is refused, and the session ends
// lost), the session caps' *SessionLimitError, or an error wrapping ErrNotReady.
func (m *Sessions) Resume(ctx context.Context, agent, id string) (sandbox.SessionInfo, error) {
	if agent == "" {
		agent = "default"
	}
	for {
		m.mu.Lock()
		info, hib := m.lc.hibernated[id]
		waking := m.lc.waking[id]
		m.mu.Unlock()
		if waking != nil {
			select {
			case <-waking:
				continue
			case <-ctx.Done():
				return sandbox.SessionInfo{}, ctx.Err()
			}
		}
		if hib && info.Agent == agent {
			return m.wake(ctx, info)
		}
		break
	}
	ls, err := m.lookup(ctx, agent, id)
	if err != nil {
		return sandbox.SessionInfo{}, err
	}
	if err := m.unpause(ctx, id, ls); err != nil {
		return sandbox.SessionInfo{}, err
	}
	return m.Get(ctx, agent, id)
}

// unpause thaws paused ls and gives its turn back.
func (m *Sessions) unpause(ctx context.Context, id string, ls *liveSession) error {
	ls.thaw.Lock()
	defer ls.thaw.Unlock()
	m.mu.Lock()
	if !ls.life.paused {
		m.mu.Unlock()
		return nil
	}
	ls.life.paused = false // claimed: a second resume finds it running
	m.mu.Unlock()
	if err := ls.box.(sandbox.PausableBox).Unpause(ctx); err != nil {
		m.mu.Lock()
		ls.life.paused = true
		ls.info.LifecycleError = "resuming failed: " + err.Error()
		m.mu.Unlock()
		return fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	now := time.Now().UTC()
	m.mu.Lock()
	ls.life.runStart = now
	ls.info.State, ls.info.PausedAt, ls.info.Memory, ls.info.LastUsedAt = sandbox.SessionActive, nil, sandbox.MemoryKept, now
	ls.info.AddEvent(now, "resumed", "memory kept")
	if _, live := m.live[id]; live {
		ls.timer.Reset(m.untilExpiry(ls, now))
	}
	info := ls.info
	m.mu.Unlock()
	ls.turn <- struct{}{}
	m.record(ctx, info)
	m.log.Info("session resumed", "session", id, "agent", info.Agent)
	return nil
}

// Hibernate writes agent's session id to disk and removes its sandbox (pausing it first when
// it runs, unless its box has no freezer or the paused-memory budget is full: then straight
// from running). A hibernated one is answered as it is. Errors: a *SessionBusyError while a call
// runs, a *SessionBudgetError past hibernated_per_agent or hibernated_max_bytes, or a failure
// to write (the disk full: the session stays paused, and the error says so).
func (m *Sessions) Hibernate(ctx context.Context, agent, id string) (sandbox.SessionInfo, error) {
	if info, ok := m.hibernatedOf(agent, id); ok {
		return info, nil
	}
	ls, err := m.lookup(ctx, agent, id)
	if err != nil {
		return sandbox.SessionInfo{}, err
	}
	if _, pausable := ls.box.(sandbox.PausableBox); !pausable {
		// No freezer (the kubernetes runtime): hibernate straight from running.
		return m.hibernateRunning(ctx, id, ls)
	}
	// Past hibernated_per_agent it is refused before it is paused: it stays as it was (a
	// trial's running session was left paused).
	if err := m.perAgentRoom(ls); err != nil {
		return m.hibernateFailed(ctx, id, ls, err)
	}
	if err := m.pause(ctx, id, ls, "to hibernate"); err != nil {
		if _, over := errors.AsType[*sandbox.SessionBudgetError](err); !over {
			return sandbox.SessionInfo{}, err
		}
		// The paused-memory budget is full: hibernate straight from running.
		return m.hibernateRunning(ctx, id, ls)
	}
	return m.hibernate(ctx, id, ls, "asked")
}

// hibernateRunning hibernates running session ls without pausing it first (see
// hibernateHeld): it takes ls's turn, a *SessionBusyError while a call holds it, and gives it
// back when hibernating fails.
func (m *Sessions) hibernateRunning(ctx context.Context, id string, ls *liveSession) (sandbox.SessionInfo, error) {
	select {
	case <-ls.turn:
	default:
		return sandbox.SessionInfo{}, &sandbox.SessionBusyError{ID: id, Step: "hibernated"}
	}
	info, err := m.hibernateHeld(ctx, id, ls, "asked")
	if err != nil {
		ls.turn <- struct{}{} // it runs on, as it was
	}
	return info, err
}

// hibernate hibernates paused session ls (see hibernateHeld).
func (m *Sessions) hibernate(ctx context.Context, id string, ls *liveSession, why string) (sandbox.SessionInfo, error) {
	ls.thaw.Lock()
	defer ls.thaw.Unlock()
	m.mu.Lock()
	paused := ls.life.paused
	m.mu.Unlock()
	if !paused {
		return sandbox.SessionInfo{}, &sandbox.SessionStateError{ID: id, State: sandbox.SessionActive, Step: "hibernated", Fix: "pause it first"}
	}
	if err := ls.box.(sandbox.PausableBox).Unpause(ctx); err != nil {
		return sandbox.SessionInfo{}, fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	info, err := m.hibernateHeld(ctx, id, ls, why)
	if err != nil {
		if perr := ls.box.(sandbox.PausableBox).Pause(context.WithoutCancel(ctx)); perr != nil {
			m.log.Error("a session whose hibernation failed could not be paused again", "session", id, "error", perr)
		}
	}
	return info, err
}

// hibernateHeld writes running session ls's files to its hibernation file, records it
// hibernated and removes its sandbox; ls's turn is held by the caller (a paused session's
// turn, or taken). On failure nothing is left on disk, the session is as it was, and its
// LifecycleError and history say why.
func (m *Sessions) hibernateHeld(ctx context.Context, id string, ls *liveSession, why string) (sandbox.SessionInfo, error) {
	lc := m.cfg.Lifecycle
	fb, ok := ls.box.(sandbox.FilesBox)
	if lc.Dir == "" || !ok {
		return sandbox.SessionInfo{}, errclass.New(errclass.Invalid, "hibernation is off on this daemon (it has no hibernation directory)")
	}
	fail := func(err error) (sandbox.SessionInfo, error) { return m.hibernateFailed(ctx, id, ls, err) }
	if err := m.perAgentRoom(ls); err != nil {
		return fail(err)
	}
	m.mu.Lock()
	agent, total := ls.info.Agent, int64(0)
	for _, h := range m.lc.hibernated {
		total += h.Hibernation.Bytes
	}
	m.mu.Unlock()
	room := lc.HibernatedMaxBytes - total
	sum, n, err := m.writeHibernation(ctx, id, room, fb.SaveFiles)
	if err != nil {
		if errors.Is(err, errOverBudget) {
			return fail(&sandbox.SessionBudgetError{Budget: "hibernated_max_bytes", Limit: lc.HibernatedMaxBytes, Need: total + n,
				Fix: "close or resume hibernated sessions, or remove files from this session first"})
		}
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			return fail(errclass.Wrap(errclass.Unavailable, fmt.Errorf("the disk of %s is full (%w); the session stays paused: resume it, or free space and hibernate again", lc.Dir, err)))
		}
		return fail(fmt.Errorf("%w: %w", sandbox.ErrNotReady, err))
	}
	now := time.Now().UTC()
	m.mu.Lock()
	if cur := m.live[id]; cur != ls {
		m.mu.Unlock()
		_ = os.Remove(m.hibernationPath(id))
		_, err := m.lookup(ctx, agent, id)
		return sandbox.SessionInfo{}, cmpErr(err, fmt.Errorf("session %s ended while it was hibernated", id))
	}
	delete(m.live, id)
	ls.timer.Stop()
	if !ls.life.paused {
		ls.life.ran = ls.ranFor(now)
		ls.info.PausedAt = &now
	}
	ls.life.paused = true
	ls.info.State, ls.info.RanMS, ls.info.LifecycleError = sandbox.SessionHibernated, ls.life.ran.Milliseconds(), ""
	ls.info.Busy, ls.info.Waiting = false, 0
	ls.info.Hibernation = &sandbox.Hibernation{Daemon: lc.Daemon, Bytes: n, SHA256: sum, At: now, Paths: slices.Clone(ls.paths)}
	ls.info.AddEvent(now, "hibernated", why)
	info := ls.info
	info.ExpiresAt = nil
	m.lc.hibernated[id] = info
	m.mu.Unlock()
	m.record(ctx, info)
	// Removed before the answer: a resume at once makes a container of the same name.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := ls.close(cctx, "the session was hibernated (its files are kept, not its processes)"); err != nil {
		m.log.Warn("removing a hibernated session's sandbox", "session", id, "error", err)
	}
	m.log.Info("session hibernated", "session", id, "agent", agent, "bytes", n, "why", why)
	return info, nil
}

// perAgentRoom returns a *SessionBudgetError when ls's agent has hibernated_per_agent
// hibernated sessions already.
func (m *Sessions) perAgentRoom(ls *liveSession) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	agent, mine := ls.info.Agent, 0
	for _, h := range m.lc.hibernated {
		if h.Agent == agent {
			mine++
		}
	}
	if limit := m.cfg.Lifecycle.HibernatedPerAgent; mine >= limit {
		return &sandbox.SessionBudgetError{Budget: "hibernated_per_agent", Limit: int64(limit), Need: int64(mine + 1),
			Fix: fmt.Sprintf("agent %q must resume or close one of its hibernated sessions first", agent)}
	}
	return nil
}

// hibernateFailed records that hibernating ls failed with err, which it returns: the session
// stays as it is (running or paused), and its LifecycleError and history say why.
func (m *Sessions) hibernateFailed(ctx context.Context, id string, ls *liveSession, err error) (sandbox.SessionInfo, error) {
	now := time.Now().UTC()
	m.mu.Lock()
	state := "paused"
	if !ls.life.paused {
		state = "running"
	}
	ls.info.LifecycleError = "hibernation failed, the session stays " + state + ": " + err.Error()
	ls.info.AddEvent(now, "hibernate_failed", err.Error())
	info := ls.info
	m.mu.Unlock()
	m.record(ctx, info)
	m.log.Warn("hibernating a session failed; it stays as it was", "session", id, "state", state, "error", err)
	return sandbox.SessionInfo{}, err
}

// errOverBudget is a hibernation file passing its byte budget while written.
var errOverBudget = errors.New("past the byte budget")

// writeHibernation writes session id's hibernation file from save, through a temporary file
// synced and renamed into place, and returns its SHA-256 (hex) and size. Past room bytes it
// stops with errOverBudget (and n the bytes written so far); on any failure nothing is left.
func (m *Sessions) writeHibernation(ctx context.Context, id string, room int64, save func(context.Context, io.Writer) error) (string, int64, error) {
	dir := m.cfg.Lifecycle.Dir
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
	w := &budgetWriter{w: io.MultiWriter(tmp, h), room: room}
	if err := save(ctx, w); err != nil {
		if w.over {
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
	if err := os.Rename(tmp.Name(), m.hibernationPath(id)); err != nil {
		return "", w.n, err
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return hex.EncodeToString(h.Sum(nil)), w.n, nil
}

// budgetWriter passes writes on until room bytes have gone through.
type budgetWriter struct {
	w    io.Writer
	room int64
	n    int64
	over bool
}

func (b *budgetWriter) Write(p []byte) (int, error) {
	if b.n+int64(len(p)) > b.room {
		b.over, b.n = true, b.n+int64(len(p))
		return 0, errOverBudget
	}
	n, err := b.w.Write(p)
	b.n += int64(n)
	return n, err
}

// openHibernation opens info's hibernation file and checks it against its recorded size and
// SHA-256 in the background, so that the check runs beside the sandbox's start: the file it
// returns gives no byte until the check has passed, and fails with the check's error when it
// has not (a file altered on disk is refused before a byte of it is loaded). Wait returns the
// check's error. A missing file is an error at once.
func (m *Sessions) openHibernation(info sandbox.SessionInfo) (*checkedFile, error) {
	h := info.Hibernation
	path := m.hibernationPath(info.ID)
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

// wake resumes hibernated session info in a new sandbox with the same ID.
func (m *Sessions) wake(ctx context.Context, info sandbox.SessionInfo) (sandbox.SessionInfo, error) {
	id := info.ID
	m.mu.Lock()
	if _, still := m.lc.hibernated[id]; !still || m.lc.waking[id] != nil {
		m.mu.Unlock()
		return m.Resume(ctx, info.Agent, id)
	}
	done := make(chan struct{})
	m.lc.waking[id] = done
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.lc.waking, id)
		m.mu.Unlock()
		close(done)
	}()
	if err := m.reserve(ctx, info.Agent); err != nil {
		return sandbox.SessionInfo{}, err
	}
	defer m.unreserve(info.Agent)
	f, err := m.openHibernation(info)
	if err != nil {
		ended := m.dropHibernated(ctx, info, sandbox.EndLost, err.Error())
		m.log.Error("a hibernated session could not be resumed; it is recorded as lost", "session", id, "error", err)
		return sandbox.SessionInfo{}, &sandbox.SessionEndedError{Info: ended}
	}
	defer f.Close()
	// The sandbox starts while the file is checked; it receives no byte of a file that fails.
	ls, err := m.openFrom(ctx, id, info, f)
	if cerr := f.Wait(); cerr != nil {
		if ls != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			_ = ls.close(cctx, "the session could not start")
			cancel()
		}
		ended := m.dropHibernated(ctx, info, sandbox.EndLost, cerr.Error())
		m.log.Error("a hibernated session could not be resumed; it is recorded as lost", "session", id, "error", cerr)
		return sandbox.SessionInfo{}, &sandbox.SessionEndedError{Info: ended}
	}
	if err != nil {
		return sandbox.SessionInfo{}, err
	}
	now := time.Now().UTC()
	ls.info.State, ls.info.PausedAt, ls.info.Memory, ls.info.LastUsedAt = sandbox.SessionActive, nil, sandbox.MemoryLost, now
	ls.info.AddEvent(now, "resumed", "from hibernation: files and packages kept, memory lost (a new interpreter)")
	m.mu.Lock()
	delete(m.lc.hibernated, id)
	m.mu.Unlock()
	m.record(ctx, ls.info)
	if err := os.Remove(m.hibernationPath(id)); err != nil {
		m.log.Warn("removing a resumed session's hibernation file", "session", id, "error", err)
	}
	m.log.Info("session resumed from hibernation", "session", id, "agent", info.Agent)
	return m.goLive(ls), nil
}

// openFrom opens a new sandbox for session id with info's limits and packages, starts its
// interpreter and restores files (a stream of FilesBox.SaveFiles) into it. The session is not
// live yet (see goLive); its clock runs from now.
func (m *Sessions) openFrom(ctx context.Context, id string, info sandbox.SessionInfo, files io.Reader) (*liveSession, error) {
	began := time.Now()
	box, err := m.opener.OpenSession(ctx, id)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*liveSession, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if cerr := box.Close(cctx); cerr != nil {
			m.log.Warn("removing a session's sandbox that did not start", "session", id, "error", cerr)
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
	x := m.svc.prepare(sandbox.Request{Code: "pass", Agent: info.Agent})
	x.spec.Session, x.spec.Paths = true, paths
	res, err := box.Run(ctx, x.spec, nil)
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
	m.log.Info("a session's files were restored into a new sandbox", "session", id, "from", info.ID,
		"started_ms", started.Sub(began).Milliseconds(), "restored_ms", time.Since(started).Milliseconds())
	now := time.Now().UTC()
	ls := &liveSession{box: box, paths: paths, turn: make(chan struct{}, 1), info: info}
	m.giveEgress(ls) // a trial's resumed session's pip install was refused the index without it
	ls.info.Busy, ls.info.Waiting, ls.info.ExpiresAt, ls.info.LifecycleError = false, 0, nil, ""
	ls.life = liveLife{runStart: now, ran: time.Duration(info.RanMS) * time.Millisecond}
	return ls, nil
}

// goLive makes ls live: its turn, expiry timer and watch. It returns its info.
func (m *Sessions) goLive(ls *liveSession) sandbox.SessionInfo {
	id := ls.info.ID
	ls.turn <- struct{}{}
	m.mu.Lock()
	m.live[id] = ls
	ls.timer = time.AfterFunc(m.untilExpiry(ls, time.Now()), func() { m.expire(id) })
	info := m.snapshot(ls)
	m.mu.Unlock()
	go m.watch(id, ls.box)
	return info
}

// Fork makes a new session of agent from its paused or hibernated session id: a copy of its
// files and packages in a sandbox of its own, with its limits and options, independent from
// then on (its memory is not copied: the fork starts a new interpreter). The fork counts
// against the session caps. Errors: those of Resume, and a *SessionStateError for a session
// that runs.
func (m *Sessions) Fork(ctx context.Context, agent, id string) (sandbox.SessionInfo, error) {
	if agent == "" {
		agent = "default"
	}
	if m.cfg.Lifecycle.Dir == "" {
		return sandbox.SessionInfo{}, errclass.New(errclass.Invalid, "fork is off on this daemon (it has no hibernation directory)")
	}
	src, hib := m.hibernatedOf(agent, id)
	var files io.ReadCloser
	if hib {
		f, err := m.openHibernation(src)
		if err == nil {
			if err = f.Wait(); err != nil {
				f.Close()
			}
		}
		if err != nil {
			return sandbox.SessionInfo{}, fmt.Errorf("forking session %s: %w", id, err)
		}
		files = f
	} else {
		ls, err := m.lookup(ctx, agent, id)
		if err != nil {
			return sandbox.SessionInfo{}, err
		}
		m.mu.Lock()
		paused, info := ls.life.paused, ls.info
		m.mu.Unlock()
		if !paused {
			return sandbox.SessionInfo{}, &sandbox.SessionStateError{ID: id, State: sandbox.SessionActive, Step: "forked",
				Fix: fmt.Sprintf("pause it first (POST /v1/agents/%s/sessions/%s/pause)", agent, id)}
		}
		src = info
		src.Hibernation = &sandbox.Hibernation{Paths: slices.Clone(ls.paths)}
		if files, err = m.copyPaused(ctx, id, ls); err != nil {
			return sandbox.SessionInfo{}, err
		}
	}
	defer files.Close()
	if err := m.reserve(ctx, agent); err != nil {
		return sandbox.SessionInfo{}, err
	}
	defer m.unreserve(agent)
	newID := sandbox.NewSessionID()
	ls, err := m.openFrom(ctx, newID, src, files)
	if err != nil {
		return sandbox.SessionInfo{}, err
	}
	now := time.Now().UTC()
	ls.info = sandbox.SessionInfo{ID: newID, Agent: agent, State: sandbox.SessionActive, IdleTimeoutMS: src.IdleTimeoutMS, MaxLifetimeMS: src.MaxLifetimeMS,
		Limits: src.Limits, Dependencies: slices.Clone(src.Dependencies), CreatedAt: now, LastUsedAt: now}
	ls.info.AutoResume, ls.info.AutoPause, ls.info.ForkedFrom, ls.info.Memory = src.AutoResume, src.AutoPause, id, sandbox.MemoryLost
	ls.life = liveLife{runStart: now}
	ls.info.AddEvent(now, "forked", "from "+id+": files and packages copied, memory not")
	if m.ledger != nil {
		if err := m.ledger.BeginSession(ctx, ls.info); err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = ls.close(cctx, "the session could not start")
			return sandbox.SessionInfo{}, fmt.Errorf("%w: the ledger could not record the session (%v)", sandbox.ErrNotReady, err)
		}
	}
	m.log.Info("session forked", "session", newID, "from", id, "agent", agent)
	return m.goLive(ls), nil
}

// copyPaused saves paused session ls's files to a temporary file (thawing it for the copy),
// and returns it opened for reading; it is removed when closed.
func (m *Sessions) copyPaused(ctx context.Context, id string, ls *liveSession) (io.ReadCloser, error) {
	pb, fb := ls.box.(sandbox.PausableBox), ls.box.(sandbox.FilesBox)
	if err := os.MkdirAll(m.cfg.Lifecycle.Dir, 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(m.cfg.Lifecycle.Dir, id+".*.fork")
	if err != nil {
		return nil, err
	}
	rc := &removeOnClose{File: tmp}
	ls.thaw.Lock()
	defer ls.thaw.Unlock()
	m.mu.Lock()
	paused := ls.life.paused
	m.mu.Unlock()
	if !paused { // resumed while the fork waited
		rc.Close()
		return nil, &sandbox.SessionStateError{ID: id, State: sandbox.SessionActive, Step: "forked", Fix: "it was resumed meanwhile; pause it again"}
	}
	if err := pb.Unpause(ctx); err != nil {
		rc.Close()
		return nil, fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	err = fb.SaveFiles(ctx, &budgetWriter{w: tmp, room: m.cfg.Lifecycle.HibernatedMaxBytes})
	if perr := pb.Pause(context.WithoutCancel(ctx)); perr != nil {
		m.log.Error("a session copied for a fork could not be paused again", "session", id, "error", perr)
	}
	if err == nil {
		_, err = tmp.Seek(0, io.SeekStart)
	}
	if err != nil {
		rc.Close()
		if errors.Is(err, errOverBudget) {
			return nil, &sandbox.SessionBudgetError{Budget: "hibernated_max_bytes", Limit: m.cfg.Lifecycle.HibernatedMaxBytes,
				Need: m.cfg.Lifecycle.HibernatedMaxBytes + 1, Fix: "a fork's copy is bounded like a hibernation; remove files from the session first"}
		}
		return nil, fmt.Errorf("copying session %s's files: %w", id, err)
	}
	return rc, nil
}

// removeOnClose is a temporary file removed when closed; the daemon wrote it whole, so it is a
// sandbox.HostFile with nothing to check.
type removeOnClose struct{ *os.File }

// Path returns the file's path (sandbox.HostFile).
func (r *removeOnClose) Path() string { return r.Name() }

// Check returns nil (sandbox.HostFile).
func (r *removeOnClose) Check() error { return nil }

func (r *removeOnClose) Close() error {
	err := r.File.Close()
	_ = os.Remove(r.Name())
	return err
}

// hibernatedOf returns agent's hibernated session id.
func (m *Sessions) hibernatedOf(agent, id string) (sandbox.SessionInfo, bool) {
	if agent == "" {
		agent = "default"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	info, ok := m.lc.hibernated[id]
	if !ok || info.Agent != agent {
		return sandbox.SessionInfo{}, false
	}
	return info, true
}

// hibernatedList returns agent's hibernated sessions.
func (m *Sessions) hibernatedList(agent string) []sandbox.SessionInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	var list []sandbox.SessionInfo
	for _, info := range m.lc.hibernated {
		if info.Agent == agent {
			list = append(list, info)
		}
	}
	return list
}

// dropHibernated ends hibernated session info (code, reason), removes its file and records
// its end; it returns the session as it ended.
func (m *Sessions) dropHibernated(ctx context.Context, info sandbox.SessionInfo, code, reason string) sandbox.SessionInfo {
	now := time.Now().UTC()
	m.mu.Lock()
	delete(m.lc.hibernated, info.ID)
	info.State, info.EndReason, info.Reason, info.EndedAt = sandbox.SessionEnded, code, reason, &now
	info.AddEvent(now, "ended", code)
	m.ended[info.ID] = info
	m.order = append(m.order, info.ID)
	if len(m.order) > endedKept {
		delete(m.ended, m.order[0])
		m.order = m.order[1:]
	}
	m.mu.Unlock()
	if err := os.Remove(m.hibernationPath(info.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		m.log.Warn("removing an ended session's hibernation file", "session", info.ID, "error", err)
	}
	if m.ledger != nil {
		if err := m.ledger.EndSession(context.WithoutCancel(ctx), info); err != nil {
			m.log.Warn("the ledger could not record a session's end", "session", info.ID, "error", err)
		}
	}
	m.log.Info("hibernated session ended", "session", info.ID, "agent", info.Agent, "end_reason", code, "reason", reason)
	return info
}

// record writes info's state to the ledger (logged on failure: the session goes on).
func (m *Sessions) record(ctx context.Context, info sandbox.SessionInfo) {
	if m.ledger == nil {
		return
	}
	if err := m.ledger.UpdateSession(context.WithoutCancel(ctx), info); err != nil {
		m.log.Warn("the ledger could not record a session's state", "session", info.ID, "state", info.State, "error", err)
	}
}

// callable returns agent's live session id ready for a call: a paused or hibernated one is
// resumed when it was created with auto_resume, and is a *SessionPausedError otherwise.
func (m *Sessions) callable(ctx context.Context, agent, id string) (*liveSession, error) {
	if agent == "" {
		agent = "default"
	}
	if info, ok := m.hibernatedOf(agent, id); ok {
		if !info.AutoResume {
			return nil, &sandbox.SessionPausedError{ID: id, Agent: agent, State: sandbox.SessionHibernated}
		}
		if _, err := m.Resume(ctx, agent, id); err != nil {
			return nil, err
		}
	}
	ls, err := m.lookup(ctx, agent, id)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	paused, auto := ls.life.paused, ls.info.AutoResume
	m.mu.Unlock()
	if !paused {
		return ls, nil
	}
	if !auto {
		return nil, &sandbox.SessionPausedError{ID: id, Agent: agent, State: sandbox.SessionPaused}
	}
	if err := m.unpause(ctx, id, ls); err != nil {
		return nil, err
	}
	return ls, nil
}

// Recover loads this daemon's hibernated sessions from the ledger when it starts: each whose
// file is there (checked when resumed) stays hibernated; one whose file is missing is ended
// (lost) with the reason. Files of the directory that belong to no hibernated session (a
// hibernation or fork copy the daemon was killed in the middle of, a session ended
// meanwhile) are removed; one of another daemon's hibernated session is kept, not loaded.
// It returns how many sessions are hibernated.
func (m *Sessions) Recover(ctx context.Context) (int, error) {
	dir := m.cfg.Lifecycle.Dir
	if dir == "" || m.ledger == nil {
		return 0, nil
	}
	list, err := m.ledger.HibernatedSessions(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing the hibernated sessions: %w", err)
	}
	keep := map[string]bool{}
	for _, info := range list {
		if info.Hibernation == nil {
			m.dropHibernated(ctx, info, sandbox.EndLost, "its hibernation record has no file")
			continue
		}
		if info.Hibernation.Daemon != "" && info.Hibernation.Daemon != m.cfg.Lifecycle.Daemon {
			// Another daemon's, not loaded here; its file stays if it is in this directory (this
			// daemon under an earlier daemon_id): the ledger still names it.
			keep[info.ID+".tar"] = true
			continue
		}
		if _, err := os.Stat(m.hibernationPath(info.ID)); err != nil {
			m.dropHibernated(ctx, info, sandbox.EndLost, "its hibernation file is missing from "+dir)
			continue
		}
		keep[info.ID+".tar"] = true
		m.mu.Lock()
		m.lc.hibernated[info.ID] = info
		m.mu.Unlock()
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	for _, e := range entries {
		if keep[e.Name()] || !strings.HasPrefix(e.Name(), "se_") {
			continue
		}
		m.log.Warn("removing a hibernation file no hibernated session holds (left by a daemon stopped while writing it, or ended)", "file", e.Name())
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return 0, err
		}
	}
	m.mu.Lock()
	n := len(m.lc.hibernated)
	m.mu.Unlock()
	m.retain(ctx)
	return n, nil
}

// retain ends the hibernated sessions older than HibernatedMaxAge (hibernation_expired),
// logged and recorded in the ledger.
func (m *Sessions) retain(ctx context.Context) {
	age := m.cfg.Lifecycle.HibernatedMaxAge
	if age <= 0 {
		return
	}
	cutoff := time.Now().Add(-age)
	m.mu.Lock()
	var old []sandbox.SessionInfo
	for _, info := range m.lc.hibernated {
		if info.Hibernation != nil && info.Hibernation.At.Before(cutoff) {
			old = append(old, info)
		}
	}
	m.mu.Unlock()
	for _, info := range old {
		m.dropHibernated(ctx, info, sandbox.EndHibernationExpired,
			fmt.Sprintf("it stayed hibernated longer than hibernated_max_age_hours (%g hours); its files were removed", age.Hours()))
	}
}

// RunRetention ends hibernated sessions past HibernatedMaxAge every period until ctx ends.
func (m *Sessions) RunRetention(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.retain(ctx)
		}
	}
}

// hibernateAll hibernates every live session that takes no call now (the daemon stops), and
// returns how many it did and, by session ID, why each other could not be; the others end as
// the daemon stops.
func (m *Sessions) hibernateAll(ctx context.Context) (int, map[string]error) {
	m.mu.Lock()
	all := make(map[string]*liveSession, len(m.live))
	for id, ls := range m.live {
		if ls.info.Agent != WarmAgent { // a warm session holds nothing of anyone's: it just ends
			all[id] = ls
		}
	}
	m.mu.Unlock()
	n, failed := 0, map[string]error{}
	for id, ls := range all {
		var err error
		if err = m.pause(ctx, id, ls, "the daemon stops"); err == nil {
			_, err = m.hibernate(ctx, id, ls, "the daemon stopped")
		}
		if err != nil {
			m.log.Warn("a session could not be hibernated as the daemon stops; it ends", "session", id, "error", err)
			failed[id] = err
			continue
		}
		n++
	}
	return n, failed
}

// LifecycleStats counts the paused and hibernated sessions.
func (m *Sessions) LifecycleStats() LifecycleStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	var s LifecycleStats
	for _, ls := range m.live {
		if ls.life.paused {
			s.Paused++
		}
	}
	s.PausedBytes = m.pausedBytes()
	for _, info := range m.lc.hibernated {
		s.Hibernated++
		s.HibernatedBytes += info.Hibernation.Bytes
	}
	return s
}
