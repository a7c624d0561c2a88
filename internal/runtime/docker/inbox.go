package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"

	"github.com/sandpit-dev/sandpit/internal/runtime/boxspec"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A session container's inbox: a directory of the data directory, one per session uid
// (<data>/inbox/<index>), bind-mounted read-only at InboxDir in that uid's session containers.
// It is empty except while a session's files are restored from a file on the daemon's host (a
// hibernation file, a fork's copy): the daemon links the file there, and tar in the container
// reads it in place instead of from the engine's exec stream, which carries about 160 MB/s
// here. Only an engine on this host (a unix socket) gets the mount; when it cannot mount the
// directory, or a restore cannot read the file, the runtime stops using it and restores go
// over the stream.

// InboxDir is where a session container sees its inbox.
const InboxDir = "/opt/sandpit/inbox"

// inboxFile is the name of the one file an inbox may hold.
const inboxFile = "files.tar"

// inbox is the runtime's inbox directories.
type inbox struct {
	root string      // <data>/inbox; "" when the engine is not on this host
	off  atomic.Bool // set once the engine or a restore could not use it
}

// errInboxUnusable: a restore could not use the inbox; the stream can still carry the files.
var errInboxUnusable = errors.New("the session container's inbox cannot be used")

// setUpInbox turns the inbox on for an engine on this host, and empties every inbox a daemon
// killed during a restore left a file in: an inbox is its uid's, and the next session with
// that uid must not see another's files. Any error leaves it off.
func (r *Runtime) setUpInbox(log *slog.Logger) {
	if !strings.HasPrefix(r.api.DaemonHost(), "unix://") || r.cfg.DataDir == "" {
		return
	}
	root := filepath.Join(r.cfg.DataDir, "inbox")
	left, err := filepath.Glob(filepath.Join(root, "*", inboxFile))
	for _, f := range left {
		err = errors.Join(err, os.Remove(f))
	}
	// The root is the daemon's alone: a container sees only its own inbox (the mount's root),
	// and no other user of the host reaches a file linked there, even in a data directory
	// others may read (a trial listed one with `su nobody`).
	if err == nil {
		err = os.MkdirAll(root, 0o700)
	}
	if err == nil {
		err = os.Chmod(root, 0o700)
	}
	if err != nil {
		log.Warn("session files are restored over the exec stream: the inbox directory cannot be used", "dir", root, "error", err)
		return
	}
	r.inbox.root = root
}

// inboxOf returns the host directory of session uid index idx's inbox, made if need be, or ""
// when the inbox is off.
func (r *Runtime) inboxOf(idx int) string {
	if r.inbox.root == "" || r.inbox.off.Load() {
		return ""
	}
	dir := filepath.Join(r.inbox.root, strconv.Itoa(idx))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.inboxUnusable(err)
		return ""
	}
	return dir
}

// inboxUnusable turns the inbox off for the runtime's life, saying why once.
func (r *Runtime) inboxUnusable(err error) {
	if r.inbox.off.CompareAndSwap(false, true) {
		r.log.Warn("session files are restored over the exec stream from now on: the session containers' inbox cannot be used", "error", err)
	}
}

// createSessionContainer creates and starts a session container of cfg and host, with the
// inbox dir mounted (none when ""). An engine that refuses the container with the mount and
// takes it without turns the inbox off.
func (r *Runtime) createSessionContainer(ctx context.Context, log *slog.Logger, cfg *container.Config, host *container.HostConfig, name, dir string) (string, error) {
	if dir == "" {
		return createContainer(ctx, r.api, log, r.cfg.Box, cfg, host, name)
	}
	without := host.Mounts
	host.Mounts = append(without[:len(without):len(without)], mount.Mount{Type: mount.TypeBind, Source: dir, Target: InboxDir, ReadOnly: true})
	cid, err := createContainer(ctx, r.api, log, r.cfg.Box, cfg, host, name)
	if err == nil || ctx.Err() != nil {
		return cid, err
	}
	host.Mounts = without
	cid, err2 := createContainer(ctx, r.api, log, r.cfg.Box, cfg, host, name)
	if err2 == nil {
		r.inboxUnusable(fmt.Errorf("the engine did not mount %s: %w", dir, err))
	}
	return cid, err2
}

// restoreInPlace unpacks hf into the session's home by reading it in the container's inbox,
// once its check has passed. It fails with errInboxUnusable, having read nothing, when the
// file cannot be put there or read there.
func (b *sessionBox) restoreInPlace(ctx context.Context, hf sandbox.HostFile) error {
	if err := hf.Check(); err != nil {
		return err
	}
	link := filepath.Join(b.inbox, inboxFile)
	_ = os.Remove(link)
	if err := os.Link(hf.Path(), link); err != nil {
		return fmt.Errorf("%w: %w", errInboxUnusable, err)
	}
	defer os.Remove(link)
	// The session's uid reads it; only this container sees the directory.
	if err := os.Chmod(link, 0o444); err != nil {
		return fmt.Errorf("%w: %w", errInboxUnusable, err)
	}
	uid := strconv.Itoa(b.r.cfg.UIDBlock.Session(b.uid))
	cmd := []string{"sh", "-c", `test -r "$1" || exit 111; exec tar --no-same-owner --no-overwrite-dir -C "$2" -xpf "$1"`,
		"sh", path.Join(InboxDir, inboxFile), sandbox.SessionHome}
	err := b.exec(ctx, uid+":"+uid, cmd, nil, io.Discard)
	if ee, ok := errors.AsType[*boxspec.ExitError](err); ok && ee.Code == 111 {
		return fmt.Errorf("%w: the container cannot read %s", errInboxUnusable, path.Join(InboxDir, inboxFile))
	}
	if err != nil {
		return fmt.Errorf("restoring the session's files: %w", err)
	}
	return nil
}
