package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/sandpit-dev/sandpit/internal/control"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// MaxSessions is how many session sandboxes a Runtime keeps at once. Each runs its calls as a
// uid of its own, after the slots' (UIDBase+MaxSlots+i): the kernel counts some limits per uid
// across the whole host (see executorCommand).
const MaxSessions = 64

var _ sandbox.SessionOpener = (*Runtime)(nil)

// OpenSession starts session id's sandbox (sandbox.SessionOpener): a container of its own,
// made exactly as a slot's (the same image, limits, hardening, runtime and network; see
// Box.spec) but labelled for the session, running an executor with one slot and no fork
// server, whose first call starts the session's interpreter. A daemon that starts removes
// every session container left by an earlier one (see removeStrays): no session outlives its
// daemon. Errors wrap sandbox.ErrNotReady when the engine cannot start one now.
func (r *Runtime) OpenSession(ctx context.Context, id string) (sandbox.SessionBox, error) {
	if r.ctx.Err() != nil {
		return nil, fmt.Errorf("%w: the runtime is shutting down", sandbox.ErrNotReady)
	}
	idx, err := r.takeSessionUID(id)
	if err != nil {
		return nil, err
	}
	img, err := r.image(ctx)
	if err != nil {
		r.freeSessionUID(id, idx)
		return nil, fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	cfg, host, _ := r.cfg.Box.spec(img, r.cfg.DataDir, 0)
	// The session's home, /home/user: a tmpfs of its own, of run_dir_bytes (the session's
	// disk cap for what its programs, commands and file writes keep).
	host.Tmpfs[sandbox.SessionHome] = "rw,nosuid,nodev,mode=0700," + tmpfsSize(r.cfg.Box.RunDirBytes)
	delete(cfg.Labels, labelSlot)
	cfg.Labels[labelSession] = id
	log := r.log.With("session", id)
	cid, err := createContainer(ctx, r.api, log, r.cfg.Box, cfg, host, containerName(r.cfg.DataDir)+"-"+id)
	if err != nil {
		r.freeSessionUID(id, idx)
		return nil, fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	line, err := r.execExecutor(ctx, cid, append(r.executorCommandFor(UIDBase+MaxSlots+idx, false), "-session-home", sandbox.SessionHome), log)
	if err != nil {
		_ = removeContainer(context.WithoutCancel(ctx), r.api, cid)
		r.freeSessionUID(id, idx)
		return nil, fmt.Errorf("%w: starting the executor in session container %s: %w", sandbox.ErrNotReady, shortID(cid), err)
	}
	log.Info("session sandbox ready", "container", shortID(cid), "uid", UIDBase+MaxSlots+idx)
	return &sessionBox{r: r, id: id, containerID: cid, line: line, uid: idx, log: log}, nil
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
	return 0, fmt.Errorf("%w: all %d session sandboxes are in use", sandbox.ErrNotReady, MaxSessions)
}

// freeSessionUID releases session id's uid index i, once its container is gone.
func (r *Runtime) freeSessionUID(id string, i int) {
	r.sessMu.Lock()
	defer r.sessMu.Unlock()
	delete(r.sessUIDs, i)
	delete(r.sessions, id)
}

// SessionContainers lists the IDs of the session containers of the data directory (running
// or not).
func (r *Runtime) SessionContainers(ctx context.Context) ([]string, error) {
	list, err := Containers(ctx, r.api, r.cfg.DataDir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, c := range list {
		if c.Labels[labelSession] != "" {
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
	line        *control.Line
	uid         int
	log         *slog.Logger
	closeOnce   sync.Once
	closeErr    error
}

// Run runs spec as the session's next call (slot 0 of its executor).
func (b *sessionBox) Run(ctx context.Context, spec sandbox.Spec, emit func(sandbox.Event)) (sandbox.Result, error) {
	res, err := b.line.Run(ctx, 0, spec, emit)
	if err != nil && errors.Is(err, control.ErrClosed) && !errors.Is(err, sandbox.ErrNotReady) {
		err = fmt.Errorf("the session's sandbox stopped during the call (%w)", err)
	}
	return res, err
}

// Install makes req's requirements importable in the session's sandbox.
func (b *sessionBox) Install(ctx context.Context, req sandbox.InstallRequest, progress func(sandbox.DependencyStatus)) (sandbox.Installed, error) {
	return b.line.Install(ctx, req, b.r.cfg.Pip, progress)
}

// StartCommand starts a command in the session's box, with the daemon's pip settings (see
// sandbox.Workspace).
func (b *sessionBox) StartCommand(ctx context.Context, id string, spec sandbox.CommandSpec, sink func(sandbox.ProcessEvent)) (int, error) {
	return b.line.StartCommand(ctx, id, protocol.Command{Spec: spec, Pip: b.r.cfg.Pip}, sink)
}

func (b *sessionBox) ProcessInput(ctx context.Context, id string, data []byte, closeStdin bool) error {
	return b.line.ProcessInput(ctx, id, data, closeStdin)
}

func (b *sessionBox) SignalProcess(ctx context.Context, id, signal string) error {
	return b.line.SignalProcess(ctx, id, signal)
}

func (b *sessionBox) ResizeProcess(ctx context.Context, id string, size sandbox.TermSize) error {
	return b.line.ResizeProcess(ctx, id, size)
}

func (b *sessionBox) ReadFile(ctx context.Context, op sandbox.FileRead) (sandbox.FileContent, error) {
	return b.line.ReadFile(ctx, op)
}

func (b *sessionBox) WriteFile(ctx context.Context, op sandbox.FileWrite) (sandbox.FileEntry, error) {
	return b.line.WriteFile(ctx, op)
}

func (b *sessionBox) ListFiles(ctx context.Context, op sandbox.FileList) (sandbox.FileListing, error) {
	return b.line.ListFiles(ctx, op)
}

func (b *sessionBox) StatFile(ctx context.Context, op sandbox.FileStat) (sandbox.FileEntry, error) {
	return b.line.StatFile(ctx, op)
}

func (b *sessionBox) MakeDir(ctx context.Context, op sandbox.FileMkdir) (sandbox.FileEntry, error) {
	return b.line.MakeDir(ctx, op)
}

func (b *sessionBox) RenameFile(ctx context.Context, op sandbox.FileRename) (sandbox.FileEntry, error) {
	return b.line.RenameFile(ctx, op)
}

func (b *sessionBox) RemoveFile(ctx context.Context, op sandbox.FileRemove) error {
	return b.line.RemoveFile(ctx, op)
}

// SetEgress sets the dialer of the session's commands' connections.
func (b *sessionBox) SetEgress(d sandbox.EgressDialer) { b.line.SetEgress(d) }

func (b *sessionBox) Done() <-chan struct{} { return b.line.Done() }
func (b *sessionBox) Err() error            { return b.line.Err() }

// ContainerID returns the session's container ID.
func (b *sessionBox) ContainerID() string { return b.containerID }

// Close ends the executor session and removes the container (once).
func (b *sessionBox) Close(ctx context.Context) error {
	b.closeOnce.Do(func() {
		_ = b.line.Close()
		b.closeErr = removeContainer(ctx, b.r.api, b.containerID)
		b.r.freeSessionUID(b.id, b.uid)
		b.log.Info("session sandbox removed", "container", shortID(b.containerID), "error", b.closeErr)
	})
	return b.closeErr
}
