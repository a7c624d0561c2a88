package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/control"
	"github.com/sandpit-dev/sandpit/internal/runtime/boxspec"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// MaxSessions is how many session sandboxes a Runtime keeps at once. Each runs its calls as a
// uid of its own, after the slots' (boxspec.UIDBlock.Session): the kernel counts some limits per uid
// across the whole host (see executorCommand).
const MaxSessions = boxspec.MaxSessions

var _ sandbox.SessionOpener = (*Runtime)(nil)

// OpenSession starts session id's sandbox (sandbox.SessionOpener): a container of its own,
// made exactly as a slot's (the same image, limits, hardening, runtime and network; see
// Box.spec) but labelled for the session, running an executor with one slot and no fork
// server, whose first call starts the session's interpreter. It claims a warm session
// container when the pool has one ready (see keepPool; the pool then makes another in the
// background) and creates one when it has none, or when the claimed one's executor does not
// answer a ping within boxspec.WarmPingTimeout (frozen or hung since its last heartbeat). A
// daemon that starts removes every session container left by an earlier one, warm or
// claimed, and then every minute any container of no live session and no warm one of
// its own (see removeStrays and sweep): no session container outlives its session or its
// daemon. Errors wrap sandbox.ErrNotReady when the engine cannot start one now.
func (r *Runtime) OpenSession(ctx context.Context, id string) (sandbox.SessionBox, error) {
	if r.ctx.Err() != nil {
		return nil, fmt.Errorf("%w: the runtime is shutting down", sandbox.ErrNotReady)
	}
	log := r.log.With("session", id)
	if w, ok := r.claimWarm(id); ok {
		r.kickPool()
		err := boxspec.PingWarm(ctx, w.line)
		if err == nil {
			log.Info("session sandbox ready", "container", shortID(w.containerID), "uid", r.cfg.UIDBlock.Session(w.uid), "warm", true)
			go r.nameClaimed(w.containerID, id)
			return &sessionBox{r: r, id: id, containerID: w.containerID, warmKey: w.key, SessionLine: r.sessionLine(w.line), uid: w.uid, inbox: w.inbox, log: log}, nil
		}
		log.Warn("a warm session container's executor does not answer; starting a container of the session's own",
			"container", shortID(w.containerID), "error", err)
		_ = r.discardWarm(context.WithoutCancel(ctx), w, id)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", sandbox.ErrNotReady, ctx.Err())
		}
	}
	img, err := r.image(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	box, err := r.startSession(ctx, id, img, log, "warm", false)
	if err != nil {
		return nil, err // not a nil *sessionBox in the interface
	}
	return box, nil
}

// startSession makes session id's own container of img and starts its executor, as a
// session uid it takes (the cold path of OpenSession and OpenSessionImage); logArgs go into
// its "ready" line. Errors wrap sandbox.ErrNotReady.
func (r *Runtime) startSession(ctx context.Context, id string, img Image, log *slog.Logger, logArgs ...any) (*sessionBox, error) {
	idx, err := r.takeSessionUID(id)
	if err != nil {
		return nil, err
	}
	uid := r.cfg.UIDBlock.Session(idx)
	cfg, host := r.sessionSpec(img)
	cfg.Labels[labelSession] = id
	inbox := r.inboxOf(idx)
	cid, err := r.createSessionContainer(ctx, log, cfg, host, containerName(r.cfg.DataDir)+"-"+id, inbox)
	if err != nil {
		r.freeSessionUID(id, idx)
		return nil, fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	line, err := r.execExecutor(ctx, cid, r.sessionExecutorCommand(uid), log)
	if err != nil {
		_ = removeContainer(context.WithoutCancel(ctx), r.api, cid)
		r.freeSessionUID(id, idx)
		return nil, fmt.Errorf("%w: starting the executor in session container %s: %w", sandbox.ErrNotReady, shortID(cid), err)
	}
	log.Info("session sandbox ready", append([]any{"container", shortID(cid), "uid", uid}, logArgs...)...)
	return &sessionBox{r: r, id: id, containerID: cid, SessionLine: r.sessionLine(line), uid: idx, inbox: inbox, log: log}, nil
}

// sessionSpec is a session container's configuration, warm or made for a session: a slot's
// (Box.spec) without the slot's label, with the session's home, /home/user, a tmpfs of its
// own of run_dir_bytes (the session's disk cap for what its programs, commands and file
// writes keep). createSessionContainer adds its inbox.
func (r *Runtime) sessionSpec(img Image) (*container.Config, *container.HostConfig) {
	cfg, host, _ := r.cfg.Box.spec(img, r.cfg.DataDir, 0)
	host.Tmpfs[sandbox.SessionHome] = "rw,nosuid,nodev,mode=0700," + tmpfsSize(r.cfg.Box.RunDirBytes)
	delete(cfg.Labels, labelSlot)
	return cfg, host
}

// takeSessionUID reserves a free session uid index for session id, and records the session
// as this runtime's (removeStrays leaves its container alone).
func (r *Runtime) takeSessionUID(id string) (int, error) {
	r.sessMu.Lock()
	defer r.sessMu.Unlock()
	if r.sessUIDs == nil {
		r.sessUIDs, r.sessions = map[int]bool{}, map[string]bool{}
	}
	for i := range MaxSessions {
		if !r.sessUIDs[i] {
			r.sessUIDs[i], r.sessions[id] = true, true
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: %w", sandbox.ErrNotReady, errNoSessionUID)
}

// errNoSessionUID: every session uid is held, by a session or a warm container.
var errNoSessionUID = fmt.Errorf("all %d session sandboxes are in use", MaxSessions)

// freeSessionUID releases session id's uid index i, once its container is gone, and tells
// the warm pool (a uid may be what it waits for).
func (r *Runtime) freeSessionUID(id string, i int) {
	r.sessMu.Lock()
	delete(r.sessUIDs, i)
	delete(r.sessions, id)
	r.sessMu.Unlock()
	r.kickPool()
}

// SessionContainers lists the IDs of the session containers of the data directory (running
// or not): those made for a session, and the warm ones a session of this runtime claimed.
// Unclaimed warm containers are not listed (see WarmSessionContainers).
func (r *Runtime) SessionContainers(ctx context.Context) ([]string, error) {
	list, err := Containers(ctx, r.api, r.cfg.DataDir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, c := range list {
		if c.Labels[labelSession] != "" || r.claimedWarm(c.Labels[labelWarm]) {
			ids = append(ids, c.ID)
		}
	}
	return ids, nil
}

// sessionBox is a session's sandbox: its container and the executor session in it.
type sessionBox struct {
	r           *Runtime
	id          string
	containerID string
	warmKey     string // the key of the warm container it claimed ("" for one made for it)
	boxspec.SessionLine
	uid   int
	inbox string // the host directory of its inbox ("" for none; see inbox.go)
	// templateImage says the container runs a template's image (OpenSessionImage).
	templateImage bool
	log           *slog.Logger
	closeOnce     sync.Once
	closeErr      error
}

// Run runs spec as the session's next call (slot 0 of its executor).
func (b *sessionBox) Run(ctx context.Context, spec sandbox.Spec, emit func(sandbox.Event)) (sandbox.Result, error) {
	res, err := b.Line.Run(ctx, 0, spec, emit)
	if err != nil && errors.Is(err, control.ErrClosed) && !errors.Is(err, sandbox.ErrNotReady) {
		err = fmt.Errorf("the session's sandbox stopped during the call (%w)", err)
	}
	return res, err
}

// ContainerID returns the session's container ID.
func (b *sessionBox) ContainerID() string { return b.containerID }

// Close ends the executor session and removes the container (once).
func (b *sessionBox) Close(ctx context.Context) error {
	b.closeOnce.Do(func() {
		_ = b.Line.Close()
		b.closeErr = removeContainer(ctx, b.r.api, b.containerID)
		b.r.freeSessionUID(b.id, b.uid)
		if b.warmKey != "" {
			b.r.forgetWarm(b.warmKey) // a container not removed is a stray now: the sweep removes it
		}
		b.log.Info("session sandbox removed", "container", shortID(b.containerID), "error", b.closeErr)
	})
	return b.closeErr
}

// sessionLine is a session box's calls over line, with the daemon's pip settings.
func (r *Runtime) sessionLine(line *control.Line) boxspec.SessionLine {
	return boxspec.SessionLine{Line: line, Pip: r.cfg.Pip}
}

// sessionExecutorCommand is the executor's command line in a session's container: one slot
// run as uid, no fork server, the session's home.
func (r *Runtime) sessionExecutorCommand(uid int) []string {
	fs := r.cfg.ForkServer
	return boxspec.Executor{UID: uid, Preload: fs.Preload, ForkServerMaxRuns: fs.MaxRuns, GVisor: r.cfg.Box.gVisor(),
		EgressProxy: r.cfg.Box.Network == "allowlist", SessionHome: sandbox.SessionHome}.Command()
}

var _ sandbox.CPUWeigher = (*sessionBox)(nil)

// SetCPUWeight sets the container's CPU shares (sandbox.CPUWeigher) through the engine, in
// place: its quota, memory and everything else stay as they are.
func (b *sessionBox) SetCPUWeight(ctx context.Context, shares int64) error {
	_, err := b.r.api.ContainerUpdate(ctx, b.containerID, client.ContainerUpdateOptions{Resources: &container.Resources{CPUShares: shares}})
	if err != nil {
		return fmt.Errorf("setting the CPU shares of session container %s: %w", shortID(b.containerID), err)
	}
	return nil
}
