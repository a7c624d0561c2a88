package session

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Fork makes a new session of the same agent from this paused or hibernated one: a copy of its
// files and packages in a sandbox of its own, with its limits and options, independent from
// then on (its memory is not copied: the fork starts a new interpreter). The fork counts
// against the session caps. Errors: those of Resume, and a *SessionStateError for a session
// that runs.
func (s *Session) Fork(ctx context.Context) (*Session, error) {
	r := s.r
	if r.cfg.Lifecycle.Dir == "" {
		return nil, errclass.New(errclass.Invalid, "fork is off on this daemon (it has no hibernation directory)")
	}
	s.mu.Lock()
	src, paused, env, err := s.info, s.life.paused, maps.Clone(s.env), s.endedErr()
	hibernated := src.State == sandbox.SessionHibernated && s.waking == nil
	paths := slices.Clone(s.paths)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var files io.ReadCloser
	switch {
	case hibernated:
		f, err := r.openHibernation(src)
		if err == nil {
			if err = f.Wait(); err != nil {
				f.Close()
			}
		}
		if err != nil {
			return nil, fmt.Errorf("forking session %s: %w", s.id, err)
		}
		files = f
	case !paused:
		return nil, &sandbox.SessionStateError{ID: s.id, State: sandbox.SessionActive, Step: "forked",
			Fix: fmt.Sprintf("pause it first (POST /v1/agents/%s/sessions/%s/pause)", src.Agent, s.id)}
	default:
		src.Hibernation = &sandbox.Hibernation{Paths: paths}
		if files, err = s.copyPaused(ctx); err != nil {
			return nil, err
		}
	}
	defer files.Close()
	if err := r.reserve(ctx, src.Agent); err != nil {
		return nil, err
	}
	defer r.unreserve(src.Agent)
	newID := sandbox.NewSessionID()
	h, err := r.openFrom(ctx, newID, src, files)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	fork := newSession(r, sandbox.SessionInfo{ID: newID, Agent: src.Agent, Template: src.Template, State: sandbox.SessionActive, IdleTimeoutMS: src.IdleTimeoutMS,
		MaxLifetimeMS: src.MaxLifetimeMS, Limits: src.Limits, Dependencies: slices.Clone(src.Dependencies),
		NetworkAllow: slices.Clone(src.NetworkAllow), Secrets: slices.Clone(src.Secrets), CreatedAt: now, LastUsedAt: now})
	fork.info.AutoResume, fork.info.AutoPause, fork.info.ForkedFrom, fork.info.Memory = src.AutoResume, src.AutoPause, s.id, sandbox.MemoryLost
	fork.life = clock{runStart: now}
	fork.paths, fork.env = src.Hibernation.Paths, env
	r.openSecrets(ctx, fork)
	fork.info.AddEvent(now, "forked", "from "+s.id+": files and packages copied, memory not")
	fail := func(err error) (*Session, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = h.close(cctx, "the session could not start")
		return nil, err
	}
	if err := r.startTemplate(ctx, fork, h); err != nil {
		return fail(err)
	}
	if r.ledger != nil {
		if err := r.ledger.BeginSession(ctx, fork.info); err != nil {
			return fail(fmt.Errorf("%w: the ledger could not record the session (%v)", sandbox.ErrNotReady, err))
		}
	}
	if err := r.goLive(fork, h); err != nil {
		return fail(err)
	}
	r.log.Info("session forked", "session", newID, "from", s.id, "agent", src.Agent)
	return fork, nil
}

// copyPaused saves paused s's files to a temporary file (thawing it for the copy), and returns
// it opened for reading; it is removed when closed.
func (s *Session) copyPaused(ctx context.Context) (io.ReadCloser, error) {
	lc := s.r.cfg.Lifecycle
	if err := os.MkdirAll(lc.Dir, 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(lc.Dir, s.id+".*.fork")
	if err != nil {
		return nil, err
	}
	rc := &removeOnClose{File: tmp}
	s.thaw.Lock()
	defer s.thaw.Unlock()
	s.mu.Lock()
	paused, h := s.life.paused, s.cur
	s.mu.Unlock()
	if !paused || h == nil { // resumed (or hibernated) while the fork waited
		rc.Close()
		return nil, &sandbox.SessionStateError{ID: s.id, State: s.Info().State, Step: "forked", Fix: "it changed state meanwhile; pause it again"}
	}
	pb, fb := h.box.(sandbox.PausableBox), h.box.(sandbox.FilesBox)
	if err := pb.Unpause(ctx); err != nil {
		rc.Close()
		return nil, fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	// The copy counts against hibernated_max_bytes, as a hibernation does, until the fork has
	// read it (issue 51, item 6: it was bounded alone, beside the budget).
	bw := s.r.newBudgetWriter()
	bw.w = tmp
	rc.release = bw.release
	if err = bw.sizeUp(ctx, fb); err == nil {
		err = fb.SaveFiles(ctx, bw)
	}
	if perr := pb.Pause(context.WithoutCancel(ctx)); perr != nil {
		s.r.log.Error("a session copied for a fork could not be paused again", "session", s.id, "error", perr)
	}
	if err == nil {
		_, err = tmp.Seek(0, io.SeekStart)
	}
	if err != nil {
		rc.Close()
		if bw.over || bw.tooLarge {
			return nil, bw.overError("a fork's copy counts like a hibernation: close or resume hibernated sessions, or remove files from the session first")
		}
		return nil, fmt.Errorf("copying session %s's files: %w", s.id, err)
	}
	return rc, nil
}

// removeOnClose is a temporary file removed when closed; the daemon wrote it whole, so it is a
// sandbox.HostFile with nothing to check.
type removeOnClose struct {
	*os.File
	release func() // gives back what the copy took of hibernated_max_bytes; nil: nothing
}

// Path returns the file's path (sandbox.HostFile).
func (r *removeOnClose) Path() string { return r.Name() }

// Check returns nil (sandbox.HostFile).
func (r *removeOnClose) Check() error { return nil }

func (r *removeOnClose) Close() error {
	err := r.File.Close()
	_ = os.Remove(r.Name())
	if r.release != nil {
		r.release()
		r.release = nil
	}
	return err
}
