package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/control"
)

// Warm session containers. The runtime keeps Config.WarmSessions session containers created,
// started and unclaimed, each with its executor started and greeted, so that OpenSession (a
// new session, a resume from hibernation, a fork) skips the container's start and the
// executor's, all of a session's opening. A warm container is made exactly as a session's
// (see sessionSpec), and its executor runs the session's programs as a session uid the warm
// container holds from its making (takeSessionUID): the session that claims it takes the uid
// over. Warm containers therefore count within MaxSessions: the pool makes one only while a
// uid is free, and a session opens on a warm container whenever one is ready, so a session
// never waits for a uid a warm container holds.
//
// Each warm container carries labelWarm with a key of its own, recorded by the runtime before
// the engine is asked to make it, and kept until the container is removed: removeStrays keeps
// the containers whose key this runtime holds (unclaimed or claimed) and removes every other,
// such as the warm containers of a daemon that died.

// labelWarm marks a warm session container; its value is the container's key.
const labelWarm = "dev.sandpit.warm-session"

// warmBox is a started, unclaimed warm session container.
type warmBox struct {
	key, containerID string
	uid              int           // the session uid index it holds (takeSessionUID)
	inbox            string        // the host directory of its inbox ("" for none)
	line             *control.Line // to its executor, greeted
}

// warmHolder is the name under which a warm container holds its session uid until a session
// claims it (takeSessionUID; claimWarm hands the uid over).
func warmHolder(key string) string { return "warm:" + key }

// newWarmKey returns a fresh key for a warm container.
func newWarmKey() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// keepWarm records key as one of this runtime's warm containers, unclaimed (removeStrays
// keeps it).
func (r *Runtime) keepWarm(key string) {
	r.sessMu.Lock()
	defer r.sessMu.Unlock()
	if r.warmKeys == nil {
		r.warmKeys = map[string]bool{}
	}
	r.warmKeys[key] = false
}

// forgetWarm drops key once its container is gone (or was never made).
func (r *Runtime) forgetWarm(key string) {
	r.sessMu.Lock()
	defer r.sessMu.Unlock()
	delete(r.warmKeys, key)
}

// keptWarm reports whether key names a warm container this runtime made and has not removed,
// claimed or not.
func (r *Runtime) keptWarm(key string) bool {
	if key == "" {
		return false
	}
	r.sessMu.Lock()
	defer r.sessMu.Unlock()
	_, ok := r.warmKeys[key]
	return ok
}

// claimWarm takes the oldest ready warm container off the pool for session id, which takes
// over its session uid (false when there is none). It stays recorded (keptWarm) until the
// session that claimed it removes it.
func (r *Runtime) claimWarm(id string) (warmBox, bool) {
	r.sessMu.Lock()
	defer r.sessMu.Unlock()
	if len(r.warm) == 0 {
		return warmBox{}, false
	}
	w := r.warm[0]
	r.warm = r.warm[1:]
	r.warmKeys[w.key] = true
	delete(r.sessions, warmHolder(w.key))
	r.sessions[id] = true
	return w, true
}

// dropWarm takes warm container w off the pool when it is still there, unclaimed (false
// otherwise).
func (r *Runtime) dropWarm(w warmBox) bool {
	r.sessMu.Lock()
	defer r.sessMu.Unlock()
	for i := range r.warm {
		if r.warm[i].key == w.key {
			r.warm = append(r.warm[:i], r.warm[i+1:]...)
			return true
		}
	}
	return false
}

// discardWarm ends warm container w's executor, removes the container and frees its uid,
// which holder held.
func (r *Runtime) discardWarm(ctx context.Context, w warmBox, holder string) error {
	_ = w.line.Close()
	err := removeContainer(ctx, r.api, w.containerID)
	r.freeSessionUID(holder, w.uid)
	if err == nil {
		r.forgetWarm(w.key) // one not removed is a stray now: the sweep removes it
	}
	return err
}

// kickPool tells keepPool to look again (a session claimed a warm container or freed a uid).
func (r *Runtime) kickPool() {
	select {
	case r.poolKick <- struct{}{}:
	default:
	}
}

// keepPool keeps WarmSessions warm session containers ready, one made at a time, until Close;
// it looks again whenever a session claims one or frees a uid. It makes none before the
// engine has answered and the earlier daemon's containers are removed, nor while every
// session uid is held. A failure is retried with backoff (1 s, doubling to 30 s); sessions
// meanwhile start containers of their own.
func (r *Runtime) keepPool() {
	backoff := time.Second
	for {
		if !r.strays.Load() { // the engine has not answered yet
			select {
			case <-r.ctx.Done():
				return
			case <-r.slots.NextUp():
			case <-time.After(time.Second):
			}
			continue
		}
		r.sessMu.Lock()
		need := r.cfg.WarmSessions - len(r.warm)
		r.sessMu.Unlock()
		if need <= 0 {
			select {
			case <-r.ctx.Done():
				return
			case <-r.poolKick:
			}
			continue
		}
		ctx, cancel := context.WithTimeout(r.ctx, 2*time.Minute)
		err := r.makeWarm(ctx)
		cancel()
		if err == nil {
			backoff = time.Second
			continue
		}
		if errors.Is(err, errNoSessionUID) { // every uid is a session's: wait for one to go
			select {
			case <-r.ctx.Done():
				return
			case <-r.poolKick:
			}
			continue
		}
		if r.ctx.Err() != nil {
			return
		}
		r.log.Warn("making a warm session container failed; sessions start their own until one is made", "error", err, "retry_in", backoff)
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// makeWarm creates and starts one warm session container, starts its executor as a session
// uid it holds, and adds it to the pool. It fails with errNoSessionUID when every uid is
// held.
func (r *Runtime) makeWarm(ctx context.Context) error {
	img, err := r.image(ctx)
	if err != nil {
		return err
	}
	key := newWarmKey()
	holder := warmHolder(key)
	idx, err := r.takeSessionUID(holder)
	if err != nil {
		return err
	}
	r.keepWarm(key) // before the engine makes it: a sweep meanwhile leaves it alone
	fail := func(cid string, err error) error {
		if cid != "" {
			err = errors.Join(err, removeContainer(context.WithoutCancel(ctx), r.api, cid))
		}
		r.freeSessionUID(holder, idx)
		r.forgetWarm(key)
		return err
	}
	cfg, host := r.sessionSpec(img)
	cfg.Labels[labelWarm] = key
	inbox := r.inboxOf(idx)
	cid, err := r.createSessionContainer(ctx, r.log, cfg, host, containerName(r.cfg.DataDir)+"-warm-"+key, inbox)
	if err != nil {
		return fail("", err)
	}
	uid := r.cfg.UIDBlock.Session(idx)
	log := r.log.With("warm_container", shortID(cid))
	line, err := r.execExecutor(ctx, cid, r.sessionExecutorCommand(uid), log)
	if err != nil {
		return fail(cid, fmt.Errorf("starting the executor in warm session container %s: %w", shortID(cid), err))
	}
	w := warmBox{key: key, containerID: cid, uid: idx, inbox: inbox, line: line}
	r.sessMu.Lock()
	if r.ctx.Err() != nil { // Close has emptied the pool already
		r.sessMu.Unlock()
		_ = line.Close()
		return errors.Join(r.ctx.Err(), fail(cid, nil))
	}
	r.warm = append(r.warm, w)
	r.sessMu.Unlock()
	// An executor that ends while its container waits (killed, crashed) takes its container
	// out of the pool, and the pool makes another.
	go func() {
		<-line.Done()
		if r.dropWarm(w) {
			log.Warn("a warm session container's executor ended; it is replaced", "error", line.Err())
			if err := r.discardWarm(context.WithoutCancel(r.ctx), w, holder); err != nil {
				log.Warn("removing a warm session container", "error", err)
			}
		}
	}()
	log.Info("warm session container ready", "uid", uid)
	return nil
}

// removeWarm removes every warm container of the data directory that no session of this
// runtime claimed (at Close, once keepPool has stopped): those of the pool, and any whose
// making Close interrupted.
func (r *Runtime) removeWarm(ctx context.Context) error {
	r.sessMu.Lock()
	pool := r.warm
	r.warm = nil
	r.sessMu.Unlock()
	for _, w := range pool {
		_ = w.line.Close()
		r.freeSessionUID(warmHolder(w.key), w.uid)
	}
	list, err := Containers(ctx, r.api, r.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("removing the warm session containers: %w", err)
	}
	var errs []error
	for _, c := range list {
		key := c.Labels[labelWarm]
		if key == "" || r.claimedWarm(key) {
			continue
		}
		if err := removeContainer(ctx, r.api, c.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		r.forgetWarm(key)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing the warm session containers: %w", err)
	}
	return nil
}

// claimedWarm reports whether a session of this runtime claimed warm container key.
func (r *Runtime) claimedWarm(key string) bool {
	r.sessMu.Lock()
	defer r.sessMu.Unlock()
	return r.warmKeys[key]
}

// WarmSessionContainers lists the IDs of the warm session containers this runtime holds ready
// and unclaimed, oldest first.
func (r *Runtime) WarmSessionContainers() []string {
	r.sessMu.Lock()
	defer r.sessMu.Unlock()
	ids := make([]string, len(r.warm))
	for i, w := range r.warm {
		ids[i] = w.containerID
	}
	return ids
}

// nameClaimed renames the warm container cid, claimed by session id, as a session's own
// container is named (docker ps then shows the session), off the claim's path. Its labels
// stay: the engine cannot change them, and the runtime finds it by the warm key it keeps.
func (r *Runtime) nameClaimed(cid, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := containerName(r.cfg.DataDir) + "-" + id
	if _, err := r.api.ContainerRename(ctx, cid, client.ContainerRenameOptions{NewName: name}); err != nil && !cerrdefs.IsNotFound(err) {
		r.log.Debug("naming a claimed warm container after its session", "container", shortID(cid), "session", id, "error", err)
	}
}
