package app

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sandpit-dev/sandpit/internal/runtime/kubernetes"
)

// TestCapacityCheck: doctor says how many sandboxes fit, and when none does, names the full
// quota with its numbers and how to make room.
func TestCapacityCheck(t *testing.T) {
	rcfg := kubernetes.Config{Namespace: "agents", Image: "s:1",
		Box: kubernetes.Box{MemoryBytes: 1 << 30, NanoCPUs: 1e9, RequestMemoryBytes: 256 << 20, RequestNanoCPUs: 250e6}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("4Gi")}}}
	cs := fake.NewClientset(node)
	if c := capacityCheck(context.Background(), cs, rcfg); !c.OK || !strings.HasPrefix(c.Detail, "4 more sandboxes fit") {
		t.Fatalf("capacityCheck on a 1-CPU node = %+v, want 4 fitting", c)
	}
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "agents"}, Status: corev1.ResourceQuotaStatus{
		Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10")}, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10")}}}
	cs = fake.NewClientset(node, quota)
	c := capacityCheck(context.Background(), cs, rcfg)
	if c.OK || !strings.Contains(c.Detail, `0 more sandboxes fit, bound by the namespace's ResourceQuota "q" (pods: 10 of 10 used`) ||
		!strings.Contains(c.Fix, "raise the ResourceQuota") {
		t.Fatalf("capacityCheck under a full quota = %+v", c)
	}
}
