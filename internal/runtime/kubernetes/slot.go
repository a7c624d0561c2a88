package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandpit-dev/sandpit/internal/control"
	"github.com/sandpit-dev/sandpit/internal/runtime/boxspec"
)

// executorCommand is the executor's command line in a pod: its runs are uid (the slot's of the
// runtime's block in a slot's pod, a session's after the slots': the kernel counts some limits per uid across the
// node), with the fork server when forkServer, and home a session's home ("" for a slot).
func (r *Runtime) executorCommand(uid int, forkServer bool, home string) []string {
	fs := r.cfg.ForkServer
	return boxspec.Executor{UID: uid, ForkServer: forkServer, Preload: fs.Preload, ForkServerMaxRuns: fs.MaxRuns,
		GVisor: r.cfg.GVisor, EgressProxy: r.cfg.Box.Network == "allowlist", SessionHome: home}.Command()
}

// slotBackend makes the slots' pods (slotpool.Backend).
type slotBackend struct{ r *Runtime }

// Connect adopts the slot's running pod of the same template (unless discard) or creates one,
// and starts a fresh executor in it.
func (sb slotBackend) Connect(ctx context.Context, slot int, discard bool, log *slog.Logger) (*control.Line, string, error) {
	r := sb.r
	list, err := r.pods().List(ctx, metav1.ListOptions{LabelSelector: LabelManaged + "=1," + LabelDaemon + "=" + r.daemon + "," +
		LabelRole + "=" + RoleSlot + "," + LabelSlot + "=" + strconv.Itoa(slot)})
	if err != nil {
		return nil, "", fmt.Errorf("listing slot %d's pods: %w", slot, err)
	}
	hash := r.configHash()
	adopt := ""
	var adopted *corev1.Pod
	for i, p := range list.Items {
		ok, _ := podRunning(&p)
		if adopt == "" && !discard && ok && p.Labels[LabelConfig] == hash {
			adopt, adopted = p.Name, &list.Items[i]
			continue
		}
		log.Info("removing a slot pod that is stopped, replaced or of another template", "pod", p.Name, "phase", p.Status.Phase)
		if err := r.deletePod(ctx, p.Name); err != nil {
			return nil, "", err
		}
	}
	cmd := r.executorCommand(r.cfg.UIDBlock.Slot(slot), r.cfg.ForkServer.Enabled, "")
	var line *control.Line
	if adopt != "" {
		// A pod whose node stopped answering would hold the executor's start for its whole
		// hello timeout (30 s): an exec of true asks the node first (5 s at most).
		if lost := r.nodeLost(ctx, adopted); lost != nil {
			log.Warn("the slot's running pod is on a node that does not answer; replacing it", "pod", adopt, "error", lost)
			if err := r.deletePod(ctx, adopt); err != nil {
				return nil, "", err
			}
			adopt = ""
		}
	}
	if adopt != "" {
		line, err = r.execExecutor(ctx, adopt, cmd, log)
		if err != nil {
			log.Warn("the slot's running pod did not take an executor; replacing it", "pod", adopt, "error", err)
			if err := r.deletePod(ctx, adopt); err != nil {
				return nil, "", err
			}
			adopt = ""
		}
	}
	name := adopt
	if adopt == "" {
		start := time.Now()
		pod, err := r.createPod(ctx, r.newPod(RoleSlot, map[string]string{LabelSlot: strconv.Itoa(slot)}), false)
		if err != nil {
			return nil, "", err
		}
		name = pod.Name
		running := time.Since(start)
		line, err = r.execExecutor(ctx, name, cmd, log)
		if err != nil {
			_ = r.deletePod(context.WithoutCancel(ctx), name)
			return nil, "", fmt.Errorf("starting the executor in pod %s: %w", name, err)
		}
		log.Info("slot pod created", "pod", name, "running_after", running.Round(time.Millisecond),
			"ready_after", time.Since(start).Round(time.Millisecond))
	}
	log.Info("sandbox ready", "pod", name, "adopted", adopt != "", "image", r.cfg.Image, "python", line.Hello().Python)
	return line, name, nil
}

// Unreachable is nil: a cluster that does not answer fails each connect, and runs wait
// ReadyWait for their slot.
func (slotBackend) Unreachable(context.Context) error { return nil }

// podLost reports whether p can no longer serve.
func podLost(p *corev1.Pod) bool {
	return p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
}
