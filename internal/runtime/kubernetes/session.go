package kubernetes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandpit-dev/sandpit/internal/control"
	"github.com/sandpit-dev/sandpit/internal/runtime/boxspec"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// OpenSession starts session id's sandbox (sandbox.SessionOpener): it claims a running warm
// session pod of the same template from the namespace's pool (this daemon's first, then any
// other daemon's) with an Update of the pod's labels and owner conditioned on its
// resourceVersion, so that two daemons never claim one pod (a Conflict means another took it:
// the next is tried); when the pool is empty it creates a pod. It then starts an executor with
// one slot and no fork server in the pod, whose first call starts the session's interpreter.
// Errors wrap sandbox.ErrNotReady when no pod can serve now.
func (r *Runtime) OpenSession(ctx context.Context, id string) (sandbox.SessionBox, error) {
	return r.openSession(ctx, id, "")
}

// OpenSessionImage starts session id's sandbox from image (a template's sandbox image, as the
// nodes know it: imported into their containerd or in the registry they pull from) instead of
// the runtime's own: a pod created for it, never a warm one (the session layer keeps warm
// sessions of a template itself). Errors are OpenSession's; a pod whose image the nodes lack
// fails at once, its error naming the image and the kubelet's reason.
func (r *Runtime) OpenSessionImage(ctx context.Context, id, image string) (sandbox.SessionBox, error) {
	return r.openSession(ctx, id, image)
}

// openSession is OpenSession, from image when it is not "" (OpenSessionImage).
func (r *Runtime) openSession(ctx context.Context, id, image string) (sandbox.SessionBox, error) {
	if r.ctx.Err() != nil {
		return nil, fmt.Errorf("%w: the runtime is shutting down", sandbox.ErrNotReady)
	}
	idx, err := r.takeSessionUID()
	if err != nil {
		return nil, err
	}
	log := r.log.With("session", id)
	defer r.kickPool()
	var (
		pod     string
		claimed bool
		line    *control.Line
	)
	// A warm pod that takes no executor (its node stopped answering since it was made) is
	// deleted, and the next one tried: a few times, then a pod of the session's own.
	for try := 1; line == nil; try++ {
		if image == "" && try <= 3 {
			pod, claimed, err = r.claimPod(ctx, id, log)
		} else {
			claimed = false
			pod, err = r.createSessionPod(ctx, id, image)
		}
		if err != nil {
			r.freeSessionUID(idx)
			return nil, fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
		}
		if w := r.takeWarmLine(pod); w != nil && boxspec.PingWarm(ctx, w.line) == nil {
			// This daemon started the pod's executor while it was warm: the session takes it,
			// and its uid, and gives back the one it reserved.
			r.freeSessionUID(idx)
			line, idx = w.line, w.uid
			break
		} else if w != nil {
			_ = w.line.Close()
			r.freeSessionUID(w.uid)
		}
		cmd := r.executorCommand(r.cfg.UIDBlock.Session(idx), false, sandbox.SessionHome)
		line, err = r.execExecutor(ctx, pod, cmd, log)
		if err != nil {
			_ = r.deletePod(context.WithoutCancel(ctx), pod)
			if !claimed || ctx.Err() != nil {
				r.freeSessionUID(idx)
				return nil, fmt.Errorf("%w: starting the executor in session pod %s: %w", sandbox.ErrNotReady, pod, err)
			}
			log.Warn("a warm session pod took no executor; deleted it, trying another", "pod", pod, "error", err)
		}
	}
	log.Info("session sandbox ready", "pod", pod, "from_pool", claimed, "uid", r.cfg.UIDBlock.Session(idx), "image", cmp.Or(image, r.cfg.Image))
	sb := &sessionBox{r: r, id: id, pod: pod, SessionLine: boxspec.SessionLine{Line: line, Pip: r.cfg.Pip}, uid: idx, log: log}
	r.sessMu.Lock()
	r.opened[id] = sb
	r.sessMu.Unlock()
	return sb, nil
}

// claimPod claims a warm session pod for session id, or creates one when none is left, and
// returns its name and whether it came from the pool.
func (r *Runtime) claimPod(ctx context.Context, id string, log *slog.Logger) (string, bool, error) {
	hash := r.configHash()
	list, err := r.pods().List(ctx, metav1.ListOptions{LabelSelector: LabelManaged + "=1," + LabelRole + "=" + RoleSession + "," +
		LabelState + "=" + StateWarm + "," + LabelConfig + "=" + hash, ResourceVersion: "0"})
	if err != nil {
		return "", false, fmt.Errorf("listing warm session pods: %w", err)
	}
	warm := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { ok, _ := podRunning(&p); return !ok })
	// This daemon's own first (it keeps those warm), then the oldest.
	slices.SortStableFunc(warm, func(a, b corev1.Pod) int {
		if ao, bo := a.Labels[LabelDaemon] == r.daemon, b.Labels[LabelDaemon] == r.daemon; ao != bo {
			if ao {
				return -1
			}
			return 1
		}
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	for i := range warm {
		p := &warm[i]
		from := p.Labels[LabelDaemon]
		r.claimLabels(p, id)
		// The Update carries the resourceVersion the list read: it fails with a Conflict when
		// the pod changed since, that is when another daemon claimed it first.
		if _, err := r.pods().Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				log.Debug("a warm session pod was claimed by another daemon; trying the next", "pod", p.Name, "error", err)
				continue
			}
			return "", false, fmt.Errorf("claiming session pod %s: %w", p.Name, err)
		}
		log.Debug("claimed a warm session pod", "pod", p.Name, "from_daemon", from)
		return p.Name, true, nil
	}
	name, err := r.createSessionPod(ctx, id, "")
	return name, false, err
}

// createSessionPod creates a pod for session id, of image ("": the runtime's own), and
// returns its name once it runs (createPod's errors).
func (r *Runtime) createSessionPod(ctx context.Context, id, image string) (string, error) {
	pod := r.newPod(RoleSession, nil)
	if image != "" {
		pod.Spec.Containers[0].Image = image
	}
	r.claimLabels(pod, id)
	created, err := r.createPod(ctx, pod, true)
	if err != nil {
		if image != "" {
			return "", fmt.Errorf("a session pod of image %s: %w", image, err)
		}
		return "", err
	}
	return created.Name, nil
}

// claimLabels marks p as this daemon's, claimed by session id.
func (r *Runtime) claimLabels(p *corev1.Pod, id string) {
	p.Labels[LabelState] = StateClaimed
	p.Labels[LabelDaemon] = r.daemon
	p.Labels[LabelSession] = labelValue(id)
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[AnnotationSession] = id
	p.OwnerReferences = []metav1.OwnerReference{r.ownerReference()}
}

func (r *Runtime) kickPool() {
	select {
	case r.poolKick <- struct{}{}:
	default:
	}
}

// keepPool keeps WarmSessions running warm session pods of this daemon's, deleting those that
// stopped, until Close. It looks again when a session claimed one and every 5 s.
func (r *Runtime) keepPool() {
	if r.cfg.WarmSessions == 0 {
		return
	}
	var creating sync.WaitGroup
	defer creating.Wait()
	var mu sync.Mutex
	pending := 0
	backoff := time.Second
	for {
		ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
		list, err := r.pods().List(ctx, metav1.ListOptions{LabelSelector: LabelManaged + "=1," + LabelDaemon + "=" + r.daemon + "," +
			LabelRole + "=" + RoleSession + "," + LabelState + "=" + StateWarm})
		cancel()
		wait := 5 * time.Second
		if err != nil {
			if r.ctx.Err() != nil {
				return
			}
			r.log.Warn("listing the warm session pods failed", "error", err)
		} else {
			hash, have := r.configHash(), 0
			for _, p := range list.Items {
				if podLost(&p) || p.Labels[LabelConfig] != hash {
					_ = r.deletePod(r.ctx, p.Name)
					continue
				}
				have++
			}
			mu.Lock()
			need := r.cfg.WarmSessions - have - pending
			pending += max(need, 0)
			mu.Unlock()
			for range max(need, 0) {
				creating.Go(func() {
					ctx, cancel := context.WithTimeout(r.ctx, r.cfg.PodReadyTimeout+time.Minute)
					defer cancel()
					// Claimable (state warm) only once its executor runs: a claimant's executor then
					// replaces this daemon's, never the other way round.
					pod, err := r.createPod(ctx, r.newPod(RoleSession, map[string]string{LabelState: StateStarting}), false)
					if err == nil {
						r.prestart(ctx, pod.Name)
						err = r.offer(ctx, pod.Name)
					}
					mu.Lock()
					pending--
					if err != nil && r.ctx.Err() == nil {
						r.log.Warn("creating a warm session pod failed", "error", err)
						backoff = min(backoff*2, 30*time.Second)
					} else {
						backoff = time.Second
					}
					mu.Unlock()
					r.kickPool()
				})
			}
			if need > 0 {
				mu.Lock()
				wait = backoff
				mu.Unlock()
			}
		}
		select {
		case <-r.ctx.Done():
			return
		case <-r.poolKick:
		case <-time.After(wait):
		}
	}
}

// WarmSessionPods lists the names of this daemon's running warm session pods.
func (r *Runtime) WarmSessionPods(ctx context.Context) ([]string, error) {
	list, err := r.pods().List(ctx, metav1.ListOptions{LabelSelector: LabelManaged + "=1," + LabelDaemon + "=" + r.daemon + "," +
		LabelRole + "=" + RoleSession + "," + LabelState + "=" + StateWarm})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range list.Items {
		if ok, _ := podRunning(&p); ok {
			names = append(names, p.Name)
		}
	}
	return names, nil
}

// SessionPods lists the names of the session pods this daemon has claimed.
func (r *Runtime) SessionPods(ctx context.Context) ([]string, error) {
	list, err := r.pods().List(ctx, metav1.ListOptions{LabelSelector: LabelManaged + "=1," + LabelDaemon + "=" + r.daemon + "," +
		LabelRole + "=" + RoleSession + "," + LabelState + "=" + StateClaimed})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			names = append(names, p.Name)
		}
	}
	return names, nil
}

// takeSessionUID reserves a free session uid index.
func (r *Runtime) takeSessionUID() (int, error) {
	r.sessMu.Lock()
	defer r.sessMu.Unlock()
	for i := range boxspec.MaxSessions {
		if !r.sessUIDs[i] {
			r.sessUIDs[i] = true
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: all %d session sandboxes are in use", sandbox.ErrNotReady, boxspec.MaxSessions)
}

func (r *Runtime) freeSessionUID(i int) {
	r.sessMu.Lock()
	defer r.sessMu.Unlock()
	delete(r.sessUIDs, i)
}

// sessionBox is a session's sandbox: its pod and the executor session in it.
type sessionBox struct {
	r   *Runtime
	id  string
	pod string
	boxspec.SessionLine
	uid       int
	log       *slog.Logger
	closeOnce sync.Once
	closeErr  error
	closing   atomic.Bool // Close was called: the line's end is ours
	errOnce   sync.Once
	err       error
}

var (
	_ sandbox.SessionBox = (*sessionBox)(nil)
	_ sandbox.Workspace  = (*sessionBox)(nil)
	_ sandbox.FilesBox   = (*sessionBox)(nil)
)

// Run runs spec as the session's next call (slot 0 of its executor).
func (b *sessionBox) Run(ctx context.Context, spec sandbox.Spec, emit func(sandbox.Event)) (sandbox.Result, error) {
	res, err := b.Line.Run(ctx, 0, spec, emit)
	if err != nil && errors.Is(err, control.ErrClosed) && !errors.Is(err, sandbox.ErrNotReady) {
		what, oom := b.r.whatStopped(b.pod)
		if oom {
			res.Outcome, res.ExitCode, res.Signal = sandbox.OutcomeMemoryLimit, 128+9, 9
			res.Reason = fmt.Sprintf("the session's box ran out of memory (%d MiB) and the node killed its pod's container", b.r.cfg.Box.MemoryBytes>>20)
			return res, nil
		}
		err = fmt.Errorf("the session's sandbox stopped during the call: %s (%w)", what, err)
	}
	return res, err
}

// Err is why the session's sandbox stopped by itself (sandbox.SessionBox), nil while it runs:
// the line's error, after what stopped (whatStopped: the pod, its container, or its node).
func (b *sessionBox) Err() error {
	err := b.Line.Err()
	if err == nil || b.closing.Load() {
		return err
	}
	b.errOnce.Do(func() {
		what, _ := b.r.whatStopped(b.pod)
		b.err = fmt.Errorf("%s (%w)", what, err)
	})
	return b.err
}

// SessionPodName returns the name of the pod of a session box of this runtime ("" for another
// runtime's box).
func SessionPodName(b sandbox.SessionBox) string {
	if sb, ok := b.(*sessionBox); ok {
		return sb.pod
	}
	return ""
}

// SaveFiles writes the session's home to w as a tar stream (sandbox.FilesBox), read as root in
// the pod over exec (boxspec.SaveFiles).
func (b *sessionBox) SaveFiles(ctx context.Context, w io.Writer) error {
	return boxspec.SaveFiles(b.log, sandbox.SessionHome, func(cmd []string) error { return b.r.execOnce(ctx, b.pod, cmd, nil, w) })
}

// FilesSize returns the bytes SaveFiles would write now (sandbox.SizedFilesBox), counted as root
// in the pod (boxspec.FilesSize).
func (b *sessionBox) FilesSize(ctx context.Context) (int64, error) {
	return boxspec.FilesSize(sandbox.SessionHome, func(cmd []string, w io.Writer) error { return b.r.execOnce(ctx, b.pod, cmd, nil, w) })
}

// RestoreFiles unpacks a stream of SaveFiles into the session's home (sandbox.FilesBox), as the
// session's own uid (an exec runs as root: setpriv drops to the uid first): the files become
// its, and nothing in the stream can write where that uid could not. Its interpreter must have
// started (which makes the home its own).
func (b *sessionBox) RestoreFiles(ctx context.Context, rd io.Reader) error {
	uid := strconv.Itoa(b.r.cfg.UIDBlock.Session(b.uid))
	cmd := []string{"setpriv", "--reuid=" + uid, "--regid=" + uid, "--clear-groups", "--inh-caps=-all",
		"tar", "--no-same-owner", "--no-overwrite-dir", "-C", sandbox.SessionHome, "-xpf", "-"}
	if err := b.r.execOnce(ctx, b.pod, cmd, rd, io.Discard); err != nil {
		return fmt.Errorf("restoring the session's files: %w", err)
	}
	return nil
}

// Close ends the executor session and deletes the pod (once).
func (b *sessionBox) Close(ctx context.Context) error {
	b.closeOnce.Do(func() {
		b.closing.Store(true)
		_ = b.Line.Close()
		b.closeErr = b.r.deletePod(ctx, b.pod)
		b.r.freeSessionUID(b.uid)
		b.r.sessMu.Lock()
		delete(b.r.opened, b.id)
		b.r.sessMu.Unlock()
		b.log.Info("session sandbox removed", "pod", b.pod, "error", b.closeErr)
	})
	return b.closeErr
}

// warmLine is an executor this daemon started in one of its warm session pods, with the
// session uid index it reserved: the session that claims the pod takes both, and opens in the
// time of a claim. A pod another daemon claims gets that daemon's executor, which replaces
// this one (the executor kills a stale one it finds in its box): the line then ends, and its
// uid goes back.
type warmLine struct {
	line *control.Line
	uid  int
}

// prestart starts a session executor in warm pod name and keeps its line for the claim; a
// failure only costs the claim the executor's start.
func (r *Runtime) prestart(ctx context.Context, name string) {
	idx, err := r.takeSessionUID()
	if err != nil {
		return
	}
	log := r.log.With("warm_pod", name)
	line, err := r.execExecutor(ctx, name, r.executorCommand(r.cfg.UIDBlock.Session(idx), false, sandbox.SessionHome), log)
	if err != nil {
		r.freeSessionUID(idx)
		if r.ctx.Err() == nil { // not the runtime's close
			log.Warn("starting the executor in a warm session pod failed; the session that claims the pod starts its own", "error", err)
		}
		return
	}
	w := &warmLine{line: line, uid: idx}
	r.sessMu.Lock()
	if r.ctx.Err() != nil {
		r.sessMu.Unlock()
		_ = line.Close()
		r.freeSessionUID(idx)
		return
	}
	r.warm[name] = w
	r.sessMu.Unlock()
	go func() {
		<-line.Done()
		r.sessMu.Lock()
		mine := r.warm[name] == w
		if mine {
			delete(r.warm, name)
		}
		r.sessMu.Unlock()
		if mine { // not taken by a session: the pod was claimed elsewhere, or it stopped
			r.freeSessionUID(idx)
			r.dropWarmPod(name, line.Err())
		}
	}()
}

// dropWarmPod deletes warm pod name whose executor ended with err while the pod was still this
// daemon's and warm (its node stopped answering, or it stopped): keepPool makes another. A pod
// another daemon claimed (its executor replaced this one's) is left alone.
func (r *Runtime) dropWarmPod(name string, err error) {
	if r.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	p, gerr := r.pods().Get(ctx, name, metav1.GetOptions{})
	if gerr != nil || p.Labels[LabelDaemon] != r.daemon || p.Labels[LabelState] != StateWarm {
		return
	}
	r.log.Warn("the executor of a warm session pod ended; replacing the pod", "pod", name, "error", err)
	_ = r.deletePod(ctx, name)
	r.kickPool()
}

// takeWarmLine removes and returns the executor started in warm pod name (nil for none).
func (r *Runtime) takeWarmLine(name string) *warmLine {
	r.sessMu.Lock()
	defer r.sessMu.Unlock()
	w := r.warm[name]
	delete(r.warm, name)
	return w
}

// closeWarmLines ends every executor started in a warm pod (the pods stay warm).
func (r *Runtime) closeWarmLines() {
	r.sessMu.Lock()
	ws := r.warm
	r.warm = map[string]*warmLine{}
	r.sessMu.Unlock()
	for _, w := range ws {
		_ = w.line.Close()
		r.freeSessionUID(w.uid)
	}
}

// offer makes this daemon's starting session pod name claimable (state warm). Nobody else
// changes a starting pod, so a merge patch of its label needs no precondition. A pod that
// cannot be offered is deleted.
func (r *Runtime) offer(ctx context.Context, name string) error {
	patch := []byte(`{"metadata":{"labels":{"` + LabelState + `":"` + StateWarm + `"}}}`)
	if _, err := r.pods().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		if w := r.takeWarmLine(name); w != nil {
			_ = w.line.Close()
			r.freeSessionUID(w.uid)
		}
		_ = r.deletePod(context.WithoutCancel(ctx), name)
		return fmt.Errorf("offering session pod %s: %w", name, err)
	}
	return nil
}
