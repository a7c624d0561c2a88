package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/runtime/boxspec"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A session's pause and its files. Pause is the engine's pause (the cgroup freezer under runc,
// the sandbox's own under runsc): every process stops where it stands and keeps its memory.
// The files are the session's home, sandbox.SessionHome (its working directory too:
// everything its calls and commands wrote, and whatever they installed with pip --user),
// carried as a tar stream by GNU tar run in the container.

var (
	_ sandbox.PausableBox = (*sessionBox)(nil)
	_ sandbox.FilesBox    = (*sessionBox)(nil)
)

// Pause freezes the session's container (sandbox.PausableBox). The control line's heartbeat
// stops first: a frozen executor answers no ping.
func (b *sessionBox) Pause(ctx context.Context) error {
	b.Line.Suspend()
	if err := freeze(ctx, b.r.api, b.containerID, freezeWait); err != nil {
		b.Line.Resume()
		return err
	}
	return nil
}

// A freeze the engine could not finish is tried again: on a busy machine the cgroup freezer
// may not settle in runc's time ("unable to freeze", about one pause in seven at load 10).
// Each failed try is thawed (it may have frozen some of the processes), then, after a wait
// that doubles from freezeWait, tried again, freezeTries times in all (about 3 s of waits).
const (
	freezeTries = 5
	freezeWait  = 200 * time.Millisecond
)

// staleWait bounds how long a pause or resume waits for the engine's record of the container
// to catch up with containerd's events (see settle).
const staleWait = 10 * time.Second

// freezer is what freeze and thaw ask of the engine.
type freezer interface {
	ContainerPause(ctx context.Context, id string, opts client.ContainerPauseOptions) (client.ContainerPauseResult, error)
	ContainerUnpause(ctx context.Context, id string, opts client.ContainerUnpauseOptions) (client.ContainerUnpauseResult, error)
	ContainerInspect(ctx context.Context, id string, opts client.ContainerInspectOptions) (client.ContainerInspectResult, error)
}

// freeze pauses container id, trying a failed freeze again (see freezeTries); an error that
// no try would mend (the container is gone, or not running) is answered at once. An engine
// that still records the container paused from an earlier pause (see settle) is waited for.
func freeze(ctx context.Context, api freezer, id string, wait time.Duration) error {
	start := time.Now()
	for try := 1; ; try++ {
		_, err := api.ContainerPause(ctx, id, client.ContainerPauseOptions{})
		if err == nil {
			return nil
		}
		if stale(err, "already paused") && try < freezeTries {
			if err := settle(ctx, api, id, false, staleWait); err != nil {
				return fmt.Errorf("pausing session container %s: %w", shortID(id), err)
			}
			continue
		}
		if !freezeMayMend(err) || ctx.Err() != nil {
			return fmt.Errorf("pausing session container %s: %w", shortID(id), err)
		}
		// Thaw what the failed try froze; "not paused" is what a clean failure answers.
		_, _ = api.ContainerUnpause(context.WithoutCancel(ctx), id, client.ContainerUnpauseOptions{})
		if try == freezeTries {
			return errclass.Wrap(errclass.Unavailable, fmt.Errorf("pausing session container %s: the engine could not freeze its processes in %d tries over %s "+
				"(the machine is likely too busy for the freezer to settle); the session runs on: try again later: %w",
				shortID(id), try, time.Since(start).Round(100*time.Millisecond), err))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pausing session container %s: %w (after %d tries: %w)", shortID(id), ctx.Err(), try, err)
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// thaw unpauses container id and waits until the engine reports it running. An engine that
// still records the container running from an earlier resume (see settle) is waited for.
func thaw(ctx context.Context, api freezer, id string) error {
	for try := 1; ; try++ {
		_, err := api.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{})
		if err == nil {
			break
		}
		if !stale(err, "not paused") || try == freezeTries {
			return fmt.Errorf("resuming session container %s: %w", shortID(id), err)
		}
		if err := settle(ctx, api, id, true, staleWait); err != nil {
			return fmt.Errorf("resuming session container %s: %w", shortID(id), err)
		}
	}
	if err := settle(ctx, api, id, false, time.Minute); err != nil {
		return fmt.Errorf("resuming session container %s: %w", shortID(id), err)
	}
	return nil
}

// stale says whether the engine refused a pause or resume for the state it records, in its
// words: "Container … is already paused", "Container … is not paused".
func stale(err error, words string) bool {
	return strings.Contains(strings.ToLower(err.Error()), words)
}

// settle waits, at most limit, until the engine records container id as paused (or not).
// Docker sets its record when a pause or resume answers, and again when containerd's event
// for it arrives, which under load can come after the next one answered: a pause's record
// then reads running for a while (a resume meets "is not paused"), a resume's paused (an
// exec meets "is paused"; trial, 4 December 2026, runsc). The events come in order, so the
// record ends right.
func settle(ctx context.Context, api freezer, id string, paused bool, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		got, err := api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil {
			return err
		}
		if st := got.Container.State; st != nil && st.Paused == paused {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the engine still does not report it paused=%t after %s: %w", paused, limit, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// freezeMayMend says whether another try may succeed where the engine answered err: not when
// the container is gone, not running or paused already, nor when the request was refused.
func freezeMayMend(err error) bool {
	return !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) && !cerrdefs.IsInvalidArgument(err) &&
		!cerrdefs.IsNotImplemented(err) && !cerrdefs.IsPermissionDenied(err) && !cerrdefs.IsUnauthorized(err)
}

// Unpause thaws the session's container (sandbox.PausableBox), waits until the engine reports
// it running (see thaw), then resumes the heartbeat.
func (b *sessionBox) Unpause(ctx context.Context) error {
	if err := thaw(ctx, b.r.api, b.containerID); err != nil {
		return err
	}
	b.Line.Resume()
	return nil
}

// SaveFiles writes the session's home to w as a tar stream (sandbox.FilesBox), read in the
// container (boxspec.SaveFiles) as its files' reader (see filesUser). The container must be
// running.
func (b *sessionBox) SaveFiles(ctx context.Context, w io.Writer) error {
	return boxspec.SaveFiles(b.log, sandbox.SessionHome, func(cmd []string) error { return b.exec(ctx, b.filesUser(), cmd, nil, w) })
}

// FilesSize returns the bytes SaveFiles would write now (sandbox.SizedFilesBox), counted in the
// container (boxspec.FilesSize) as its files' reader (see filesUser). The container must be
// running.
func (b *sessionBox) FilesSize(ctx context.Context) (int64, error) {
	return boxspec.FilesSize(sandbox.SessionHome, func(cmd []string, w io.Writer) error { return b.exec(ctx, b.filesUser(), cmd, nil, w) })
}

// filesUser is who reads the session's files for SaveFiles and FilesSize: root in a box of
// sandpit's image (every file, whatever its mode), the session's user in a template's, whose
// tar the template's steps may have replaced: nothing of a template's image runs as root.
func (b *sessionBox) filesUser() string {
	if !b.templateImage {
		return "0"
	}
	uid := strconv.Itoa(b.r.cfg.UIDBlock.Session(b.uid))
	return uid + ":" + uid
}

// RestoreFiles unpacks a stream of SaveFiles into the session's home (sandbox.FilesBox), as
// the session's own uid: the files become its, and nothing in the stream can write where that
// uid could not. Its interpreter must have started (which makes the home its own). A
// sandbox.HostFile is read in place through the container's inbox when it can be (see
// inbox.go), else streamed.
func (b *sessionBox) RestoreFiles(ctx context.Context, r io.Reader) error {
	if hf, ok := r.(sandbox.HostFile); ok && b.inbox != "" && !b.r.inbox.off.Load() {
		err := b.restoreInPlace(ctx, hf)
		if !errors.Is(err, errInboxUnusable) {
			return err
		}
		b.r.inboxUnusable(err)
	}
	uid := strconv.Itoa(b.r.cfg.UIDBlock.Session(b.uid))
	cmd := []string{"tar", "--no-same-owner", "--no-overwrite-dir", "-C", sandbox.SessionHome, "-xpf", "-"}
	if err := b.exec(ctx, uid+":"+uid, cmd, r, io.Discard); err != nil {
		return fmt.Errorf("restoring the session's files: %w", err)
	}
	return nil
}

// exec runs cmd in the session's container as user, with stdin (nil: none) and its stdout to
// stdout, and fails with its stderr when it exits non-zero.
func (b *sessionBox) exec(ctx context.Context, user string, cmd []string, stdin io.Reader, stdout io.Writer) error {
	api := b.r.api
	ex, err := api.ExecCreate(ctx, b.containerID, client.ExecCreateOptions{User: user, Cmd: cmd,
		AttachStdin: stdin != nil, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return err
	}
	att, err := api.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return err
	}
	defer att.Close()
	stop := context.AfterFunc(ctx, att.Close)
	defer stop()
	fed := make(chan error, 1)
	if stdin != nil {
		go func() {
			_, err := io.Copy(att.Conn, stdin)
			fed <- errors.Join(err, att.CloseWrite())
		}()
	} else {
		fed <- nil
	}
	stderr := &capped{max: 4 << 10}
	_, copyErr := stdcopy.StdCopy(stdout, stderr, att.Reader)
	if copyErr != nil {
		att.Close()
	}
	feedErr := <-fed
	if err := ctx.Err(); err != nil {
		return err
	}
	if copyErr != nil {
		return copyErr
	}
	in, err := api.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
	if err != nil {
		return err
	}
	if in.ExitCode != 0 {
		return &boxspec.ExitError{Cmd: cmd, Code: in.ExitCode, Stderr: strings.TrimSpace(stderr.String())}
	}
	return feedErr
}

// capped keeps the first max bytes written to it.
type capped struct {
	bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
