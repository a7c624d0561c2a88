package kubernetes

import (
	"context"
	"fmt"
	"sort"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
)

// DaemonObjects are what one daemon made in its namespace and leaves when it stops: its pods
// (slots' and warm sessions', by name) and its Lease (nil when there is none).
type DaemonObjects struct {
	Pods  []corev1.Pod
	Lease *coordv1.Lease
}

// ListDaemon returns the pods and the Lease of the daemon whose ID is id (as Config.DaemonID:
// DaemonName is applied) in namespace ns, without a running Runtime: for the commands that
// inspect and remove a stopped daemon's sandboxes.
func ListDaemon(ctx context.Context, cs k8s.Interface, ns, id string) (DaemonObjects, error) {
	var out DaemonObjects
	daemon := DaemonName(id)
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: LabelManaged + "=1," + LabelDaemon + "=" + daemon})
	if err != nil {
		return out, fmt.Errorf("listing the pods of daemon %s in namespace %s: %w", daemon, ns, err)
	}
	out.Pods = pods.Items
	sort.Slice(out.Pods, func(i, j int) bool { return out.Pods[i].Name < out.Pods[j].Name })
	l, err := cs.CoordinationV1().Leases(ns).Get(ctx, leaseName(daemon), metav1.GetOptions{})
	switch {
	case err == nil:
		out.Lease = l
	case !apierrors.IsNotFound(err):
		return out, fmt.Errorf("reading the lease %s in namespace %s: %w", leaseName(daemon), ns, err)
	}
	return out, nil
}

// LeaseHeld says whether the daemon's Lease l was renewed within its duration and not
// released: its daemon is running (or stopped, not cleanly, less than a duration ago).
func LeaseHeld(l *coordv1.Lease) bool { return l != nil && !LeaseReleased(l) && !leaseDead(*l, 0) }

// LeaseReleased says whether the daemon's Lease l was given up: its daemon stopped cleanly
// and set its holder to "" (as client-go's leader election releases a Lease).
func LeaseReleased(l *coordv1.Lease) bool {
	return l != nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == ""
}

// RemoveDaemon deletes the pods (at once) and the Lease of the daemon whose ID is id in
// namespace ns, and returns how many pods it deleted and whether it deleted a Lease. It is
// refused while the Lease is held (LeaseHeld): that daemon is running, and would make new
// pods at once.
func RemoveDaemon(ctx context.Context, cs k8s.Interface, ns, id string) (pods int, lease bool, err error) {
	got, err := ListDaemon(ctx, cs, ns, id)
	if err != nil {
		return 0, false, err
	}
	if LeaseHeld(got.Lease) {
		return 0, false, fmt.Errorf("the daemon %s holds its lease %s in namespace %s (renewed within its duration): "+
			"it is running; stop it first (or wait until its lease expires)", DaemonName(id), got.Lease.Name, ns)
	}
	zero := int64(0)
	for _, p := range got.Pods {
		err := cs.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		switch {
		case err == nil:
			pods++
		case !apierrors.IsNotFound(err):
			return pods, false, fmt.Errorf("deleting pod %s in namespace %s: %w", p.Name, ns, err)
		}
	}
	if got.Lease == nil {
		return pods, false, nil
	}
	fg := metav1.DeletePropagationBackground
	switch err := cs.CoordinationV1().Leases(ns).Delete(ctx, got.Lease.Name, metav1.DeleteOptions{PropagationPolicy: &fg}); {
	case apierrors.IsNotFound(err):
		return pods, false, nil
	case err != nil:
		return pods, false, fmt.Errorf("deleting the lease %s in namespace %s: %w", got.Lease.Name, ns, err)
	}
	return pods, true, nil
}
