package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Labels of sandpit's pods and Leases.
const (
	LabelManaged = "sandpit.dev/managed" // "1" on every pod and Lease sandpit makes
	LabelDaemon  = "sandpit.dev/daemon"  // the owning daemon's DaemonName
	LabelRole    = "sandpit.dev/role"    // RoleSlot or RoleSession
	LabelSlot    = "sandpit.dev/slot"    // a slot pod's slot number
	LabelState   = "sandpit.dev/state"   // a session pod's StateWarm or StateClaimed
	LabelSession = "sandpit.dev/session" // a claimed session pod's session (label-safe)
	LabelConfig  = "sandpit.dev/config"  // a hash of the pod's template: only equal ones are adopted or claimed

	// AnnotationSession holds a claimed pod's session ID as it is.
	AnnotationSession = "sandpit.dev/session-id"

	RoleSlot      = "slot"
	RoleSession   = "session"
	StateStarting = "starting" // a session pod whose executor its daemon is starting: not claimable yet
	StateWarm     = "warm"
	StateClaimed  = "claimed"
)

// ownerRef is the daemon's Lease as an owner of its pods.
type ownerRef struct {
	name string
	uid  types.UID
}

// DaemonName makes a daemon ID label-safe: lowercase letters, digits and '-', at most 40
// characters, starting and ending with a letter or digit. An ID that is already so is kept;
// another is cleaned up and suffixed with a hash of it, so distinct IDs stay distinct.
func DaemonName(id string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(id) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteRune(c)
		} else {
			b.WriteByte('-')
		}
	}
	s := strings.Trim(b.String(), "-")
	if s == id && len(s) <= 40 && s != "" {
		return s
	}
	sum := sha256.Sum256([]byte(id))
	return strings.Trim(s[:min(len(s), 31)], "-") + "-" + hex.EncodeToString(sum[:])[:8]
}

// labelValue makes s a valid label value: kept when it is one, else a hash of it.
func labelValue(s string) string {
	ok := len(s) <= 63 && s != ""
	for i, c := range s {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || i == len(s)-1 || (c != '-' && c != '_' && c != '.')) {
			ok = false
		}
	}
	if ok {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "h-" + hex.EncodeToString(sum[:])[:40]
}

// leaseName is the name of daemon's Lease.
func leaseName(daemon string) string { return "sandpit-daemon-" + daemon }

// renewLease creates the daemon's Lease or renews it, and records it as the pods' owner.
func (r *Runtime) renewLease(ctx context.Context) error {
	leases := r.client.CoordinationV1().Leases(r.cfg.Namespace)
	now := metav1.NewMicroTime(time.Now())
	secs := int32(r.cfg.LeaseDuration / time.Second)
	l, err := leases.Get(ctx, leaseName(r.daemon), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		l, err = leases.Create(ctx, &coordv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: leaseName(r.daemon), Labels: map[string]string{LabelManaged: "1", LabelDaemon: r.daemon}},
			Spec:       coordv1.LeaseSpec{HolderIdentity: &r.daemon, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating the daemon's lease %s in namespace %s: %w", leaseName(r.daemon), r.cfg.Namespace, err)
		}
	case err != nil:
		return fmt.Errorf("reading the daemon's lease %s in namespace %s: %w", leaseName(r.daemon), r.cfg.Namespace, err)
	default:
		l.Spec.RenewTime, l.Spec.LeaseDurationSeconds, l.Spec.HolderIdentity = &now, &secs, &r.daemon
		if l, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("renewing the daemon's lease %s: %w", leaseName(r.daemon), err)
		}
	}
	r.ownerMu.Lock()
	r.owner = ownerRef{name: l.Name, uid: l.UID}
	r.ownerMu.Unlock()
	return nil
}

// releaseLease gives up the daemon's Lease on a clean stop: it sets its holder to "" (as
// client-go's leader election does with ReleaseOnCancel), so that LeaseHeld is false at once
// and `sandpit sandbox rm` need not wait for the Lease to expire. The Lease itself stays, the
// owner of the pods left for the next daemon of the same ID, and renewLease takes it back.
// A Lease another holder has taken meanwhile is left as it is.
func (r *Runtime) releaseLease(ctx context.Context) error {
	leases := r.client.CoordinationV1().Leases(r.cfg.Namespace)
	l, err := leases.Get(ctx, leaseName(r.daemon), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading the daemon's lease %s in namespace %s: %w", leaseName(r.daemon), r.cfg.Namespace, err)
	case l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != r.daemon:
		return nil
	}
	none := ""
	l.Spec.HolderIdentity = &none
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("releasing the daemon's lease %s in namespace %s: %w", leaseName(r.daemon), r.cfg.Namespace, err)
	}
	return nil
}

// ownerReference is the daemon's Lease as an ownerReference of its pods.
func (r *Runtime) ownerReference() metav1.OwnerReference {
	r.ownerMu.Lock()
	defer r.ownerMu.Unlock()
	return metav1.OwnerReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Name: r.owner.name, UID: r.owner.uid}
}

// keepLease renews the Lease every third of its duration and, every ReapAfter/2, deletes the
// Leases of daemons dead that long, until Close.
func (r *Runtime) keepLease() {
	renew := time.NewTicker(r.cfg.LeaseDuration / 3)
	defer renew.Stop()
	reap := time.NewTicker(max(r.cfg.ReapAfter/2, time.Second))
	defer reap.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-renew.C:
			ctx, cancel := context.WithTimeout(r.ctx, r.cfg.LeaseDuration/3)
			if err := r.renewLease(ctx); err != nil && r.ctx.Err() == nil {
				r.log.Error("renewing the daemon's lease failed; its pods are collected if it stays unrenewed", "error", err,
					"reap_after", r.cfg.ReapAfter)
			}
			cancel()
		case <-reap.C:
			ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
			if err := r.reapDaemons(ctx); err != nil && r.ctx.Err() == nil {
				r.log.Warn("collecting dead daemons' pods failed", "error", err)
			}
			cancel()
		}
	}
}

// reapDaemons deletes the Leases of other daemons whose renewal is older than their duration
// plus ReapAfter: the garbage collector then deletes the pods they own. Pods of such a daemon
// that no Lease owns (made before it had one) are deleted as well.
func (r *Runtime) reapDaemons(ctx context.Context) error {
	leases := r.client.CoordinationV1().Leases(r.cfg.Namespace)
	list, err := leases.List(ctx, metav1.ListOptions{LabelSelector: LabelManaged + "=1"})
	if err != nil {
		return fmt.Errorf("listing the daemons' leases in namespace %s: %w", r.cfg.Namespace, err)
	}
	for _, l := range list.Items {
		if l.Labels[LabelDaemon] == r.daemon || !leaseDead(l, r.cfg.ReapAfter) {
			continue
		}
		r.log.Info("deleting a dead daemon's lease: the cluster collects its pods", "lease", l.Name, "daemon", l.Labels[LabelDaemon])
		fg := metav1.DeletePropagationBackground
		err := leases.Delete(ctx, l.Name, metav1.DeleteOptions{PropagationPolicy: &fg,
			Preconditions: &metav1.Preconditions{ResourceVersion: &l.ResourceVersion}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting lease %s: %w", l.Name, err)
		}
	}
	return nil
}

// leaseDead reports whether l was last renewed longer ago than its duration plus grace.
func leaseDead(l coordv1.Lease, grace time.Duration) bool {
	last := l.CreationTimestamp.Time
	if l.Spec.RenewTime != nil {
		last = l.Spec.RenewTime.Time
	}
	d := 30 * time.Second
	if l.Spec.LeaseDurationSeconds != nil {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return time.Since(last) > d+grace
}

// removeStrays deletes this daemon's pods that nothing uses: slot pods of slots the pool does
// not have, session pods claimed before (no session outlives its daemon), pods of another
// template, and pods that stopped. Warm pods of the same template stay, for the slots to adopt
// and the sessions to claim.
func (r *Runtime) removeStrays(ctx context.Context) error {
	list, err := r.pods().List(ctx, metav1.ListOptions{LabelSelector: LabelManaged + "=1," + LabelDaemon + "=" + r.daemon})
	if err != nil {
		return fmt.Errorf("listing the daemon's pods in namespace %s: %w", r.cfg.Namespace, err)
	}
	hash := r.configHash()
	for _, p := range list.Items {
		keep := p.Labels[LabelConfig] == hash && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed &&
			p.Status.Phase != corev1.PodSucceeded
		switch p.Labels[LabelRole] {
		case RoleSlot:
			slot, err := strconv.Atoi(p.Labels[LabelSlot])
			keep = keep && err == nil && slot >= 0 && slot < r.cfg.Slots
		case RoleSession:
			keep = keep && p.Labels[LabelState] == StateWarm
		default:
			keep = false
		}
		if keep {
			continue
		}
		r.log.Info("removing a sandpit pod that nothing uses", "pod", p.Name, "phase", p.Status.Phase, "role", p.Labels[LabelRole])
		if err := r.deletePod(ctx, p.Name); err != nil {
			return err
		}
	}
	return nil
}
