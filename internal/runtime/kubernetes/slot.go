package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandpit-dev/sandpit/internal/control"
	"github.com/sandpit-dev/sandpit/internal/runtime/boxspec"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// box is one slot's sandbox: its pod and the executor session in it.
type box struct {
	r    *Runtime
	slot int
	log  *slog.Logger

	mu      sync.Mutex
	pod     string
	line    *control.Line // nil while the sandbox is down
	lastErr error         // why the sandbox is down
	changed chan struct{} // closed and replaced whenever line changes
	discard bool          // the next connect replaces the pod instead of adopting it
	resets  int64
}

func (b *box) podName() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pod
}

func (b *box) down(err error) {
	b.mu.Lock()
	b.lastErr = err
	b.mu.Unlock()
}

// replace ends line, whose pod must not serve again: the supervise loop makes a new one.
func (b *box) replace(line *control.Line, why error) {
	b.mu.Lock()
	if b.line == line {
		b.discard = true
	}
	b.mu.Unlock()
	_ = line.Close()
	b.log.Info("slot's sandbox is being replaced", "reason", why)
}

// closeSession ends the live session, if any.
func (b *box) closeSession() error {
	b.mu.Lock()
	line := b.line
	b.line = nil
	b.mu.Unlock()
	if line != nil {
		return line.Close()
	}
	return nil
}

// executorCommand is the executor's command line in a pod: its runs are uid (UIDBase+slot in a
// slot's pod, a session's after the slots': the kernel counts some limits per uid across the
// node), with the fork server when forkServer, and home a session's home ("" for a slot).
func (r *Runtime) executorCommand(uid int, forkServer bool, home string) []string {
	fs := r.cfg.ForkServer
	return boxspec.Executor{UID: uid, ForkServer: forkServer, Preload: fs.Preload, ForkServerMaxRuns: fs.MaxRuns,
		GVisor: r.cfg.GVisor, EgressProxy: r.cfg.Box.Network == "allowlist", SessionHome: home}.Command()
}

// connect adopts the slot's running pod of the same template (unless discard) or creates one,
// and starts a fresh executor session in it.
func (b *box) connect(ctx context.Context) error {
	r := b.r
	b.mu.Lock()
	discard := b.discard
	b.mu.Unlock()
	list, err := r.pods().List(ctx, metav1.ListOptions{LabelSelector: LabelManaged + "=1," + LabelDaemon + "=" + r.daemon + "," +
		LabelRole + "=" + RoleSlot + "," + LabelSlot + "=" + strconv.Itoa(b.slot)})
	if err != nil {
		return fmt.Errorf("listing slot %d's pods: %w", b.slot, err)
	}
	hash := r.configHash()
	adopt := ""
	for _, p := range list.Items {
		ok, _ := podRunning(&p)
		if adopt == "" && !discard && ok && p.Labels[LabelConfig] == hash {
			adopt = p.Name
			continue
		}
		b.log.Info("removing a slot pod that is stopped, replaced or of another template", "pod", p.Name, "phase", p.Status.Phase)
		if err := r.deletePod(ctx, p.Name); err != nil {
			return err
		}
	}
	cmd := r.executorCommand(boxspec.UIDBase+b.slot, r.cfg.ForkServer.Enabled, "")
	var line *control.Line
	if adopt != "" {
		line, err = r.execExecutor(ctx, adopt, cmd, b.log)
		if err != nil {
			b.log.Warn("the slot's running pod did not take an executor; replacing it", "pod", adopt, "error", err)
			if err := r.deletePod(ctx, adopt); err != nil {
				return err
			}
			adopt = ""
		}
	}
	name := adopt
	if adopt == "" {
		start := time.Now()
		pod, err := r.createPod(ctx, r.newPod(RoleSlot, map[string]string{LabelSlot: strconv.Itoa(b.slot)}))
		if err != nil {
			return err
		}
		name = pod.Name
		running := time.Since(start)
		line, err = r.execExecutor(ctx, name, cmd, b.log)
		if err != nil {
			_ = r.deletePod(context.WithoutCancel(ctx), name)
			return fmt.Errorf("starting the executor in pod %s: %w", name, err)
		}
		b.log.Info("slot pod created", "pod", name, "running_after", running.Round(time.Millisecond),
			"ready_after", time.Since(start).Round(time.Millisecond))
	}
	b.log.Info("sandbox ready", "pod", name, "adopted", adopt != "", "image", r.cfg.Image, "python", line.Hello().Python)
	b.mu.Lock()
	b.pod, b.line, b.lastErr, b.discard = name, line, nil, false
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
	r.connected()
	return nil
}

// supervise waits for the session to end and brings the sandbox back, with backoff, until the
// runtime is closed. A lost pod is deleted before its replacement is made.
func (b *box) supervise() {
	r := b.r
	backoff := 250 * time.Millisecond
	for {
		b.mu.Lock()
		line := b.line
		b.mu.Unlock()
		if line != nil {
			select {
			case <-r.ctx.Done():
				return
			case <-line.Done():
			}
			b.log.Warn("sandbox lost; bringing it back", "error", line.Err())
			b.mu.Lock()
			b.line, b.lastErr = nil, line.Err()
			b.resets++
			b.mu.Unlock()
			backoff = 250 * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(r.ctx, r.cfg.PodReadyTimeout+time.Minute)
		err := b.connect(ctx)
		cancel()
		if err == nil {
			continue
		}
		if r.ctx.Err() != nil {
			return
		}
		b.down(err)
		b.log.Error("bringing the sandbox back failed; retrying", "error", err, "retry_in", backoff)
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(backoff):
		case <-r.nextUp():
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// current returns the live session and its pod, waiting up to ReadyWait (or ctx) for one.
func (b *box) current(ctx context.Context) (*control.Line, string, error) {
	deadline := time.NewTimer(b.r.cfg.ReadyWait)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		line, pod, changed, lastErr := b.line, b.pod, b.changed, b.lastErr
		b.mu.Unlock()
		if line != nil && line.Ready(ctx) == nil {
			return line, pod, nil
		}
		select {
		case <-changed:
		case <-time.After(100 * time.Millisecond):
		case <-deadline.C:
			if lastErr == nil {
				lastErr = errors.New("the sandbox is restarting")
			}
			return nil, "", fmt.Errorf("%w: %w", sandbox.ErrNotReady, lastErr)
		case <-ctx.Done():
			return nil, "", fmt.Errorf("%w: %w", sandbox.ErrNotReady, ctx.Err())
		case <-b.r.ctx.Done():
			return nil, "", fmt.Errorf("%w: the runtime is shutting down", sandbox.ErrNotReady)
		}
	}
}

// Ready returns nil when the box's executor session is live.
func (b *box) Ready(ctx context.Context) error {
	b.mu.Lock()
	line, lastErr := b.line, b.lastErr
	b.mu.Unlock()
	if line == nil {
		if lastErr == nil {
			lastErr = errors.New("the sandbox is starting")
		}
		return fmt.Errorf("%w: slot %d: %w", sandbox.ErrNotReady, b.slot, lastErr)
	}
	return line.Ready(ctx)
}

// podLost reports whether p can no longer serve.
func podLost(p *corev1.Pod) bool {
	return p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
}
