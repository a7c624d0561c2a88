package kubernetes_test

import (
	"context"
	"strings"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sandpit-dev/sandpit/internal/runtime/kubernetes"
)

// A trial's daemon stopped cleanly and none returned: its pods and Lease stayed, and `sandpit
// sandbox status` and `rm` did not see them. ListDaemon finds exactly that daemon's, and
// RemoveDaemon deletes them, but not while the Lease is held.
func TestListAndRemoveDaemon(t *testing.T) {
	ctx := context.Background()
	pod := func(name, daemon string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "agents",
			Labels: map[string]string{kubernetes.LabelManaged: "1", kubernetes.LabelDaemon: daemon}}}
	}
	lease := func(daemon string, renewed time.Time) *coordv1.Lease {
		secs, at := int32(30), metav1.NewMicroTime(renewed)
		return &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "sandpit-daemon-" + daemon, Namespace: "agents",
			Labels: map[string]string{kubernetes.LabelManaged: "1", kubernetes.LabelDaemon: daemon}},
			Spec: coordv1.LeaseSpec{LeaseDurationSeconds: &secs, RenewTime: &at}}
	}
	id := "Host_1-abc" // not label-safe: DaemonName applies
	mine := kubernetes.DaemonName(id)
	cs := fake.NewClientset(pod("sandpit-slot-0", mine), pod("sandpit-session-x", mine), pod("sandpit-other", "other"),
		lease(mine, time.Now()), lease("other", time.Now().Add(-time.Hour)))

	got, err := kubernetes.ListDaemon(ctx, cs, "agents", id)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Pods) != 2 || got.Pods[0].Name != "sandpit-session-x" || got.Pods[1].Name != "sandpit-slot-0" ||
		got.Lease == nil || got.Lease.Name != "sandpit-daemon-"+mine {
		t.Fatalf("ListDaemon = %d pods %v, lease %v; want this daemon's 2 pods and its lease", len(got.Pods), got.Pods, got.Lease)
	}
	if !kubernetes.LeaseHeld(got.Lease) {
		t.Error("LeaseHeld of a lease renewed now = false")
	}
	if _, _, err := kubernetes.RemoveDaemon(ctx, cs, "agents", id); err == nil || !strings.Contains(err.Error(), "stop it first") {
		t.Fatalf("RemoveDaemon while the lease is held = %v, want a refusal", err)
	}

	l := lease(mine, time.Now().Add(-2*time.Minute))
	if _, err := cs.CoordinationV1().Leases("agents").Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, removed, err := kubernetes.RemoveDaemon(ctx, cs, "agents", id)
	if err != nil || pods != 2 || !removed {
		t.Fatalf("RemoveDaemon = %d pods, lease %v, %v; want 2 and the lease", pods, removed, err)
	}
	left, _ := cs.CoreV1().Pods("agents").List(ctx, metav1.ListOptions{})
	leases, _ := cs.CoordinationV1().Leases("agents").List(ctx, metav1.ListOptions{})
	if len(left.Items) != 1 || left.Items[0].Name != "sandpit-other" || len(leases.Items) != 1 {
		t.Errorf("after RemoveDaemon: pods %v, %d leases; want only the other daemon's", left.Items, len(leases.Items))
	}
	if got, err := kubernetes.ListDaemon(ctx, cs, "agents", id); err != nil || len(got.Pods) != 0 || got.Lease != nil {
		t.Errorf("ListDaemon after RemoveDaemon = %+v, %v", got, err)
	}
}
