package kubernetes_test

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

func rl(cpu, mem string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
}

// TestReadCapacity: the nodes' free requests and the namespace's quota each bound how many
// sandboxes fit; a node the selector or a taint leaves out is not counted.
func TestReadCapacity(t *testing.T) {
	node := func(name string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.NodeSpec{Taints: taints}, Status: corev1.NodeStatus{Allocatable: rl("2", "4Gi")}}
	}
	busy := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "kube-system"},
		Spec:   corev1.PodSpec{NodeName: "a", Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: rl("1500m", "1Gi")}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	pool := map[string]string{"pool": "sandbox"}
	cs := fake.NewClientset(node("a", pool), node("b", pool), node("c", nil),
		node("d", pool, corev1.Taint{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}), busy)
	p := kubernetes.PodResources{Requests: rl("250m", "256Mi"), Limits: rl("1", "1Gi")}
	ctx := context.Background()

	got, err := kubernetes.ReadCapacity(ctx, cs, "agents", p, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	// a: 500m free → 2; b: 2 CPUs → 8 (memory: 16); c: not selected; d: tainted.
	if got.Fit != 10 || !strings.Contains(got.Bound, "2 of 4 match") {
		t.Fatalf("ReadCapacity = %+v, want 10 on the nodes a and b", got)
	}
	gpu := []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	if got, err = kubernetes.ReadCapacity(ctx, cs, "agents", p, pool, gpu); err != nil || got.Fit != 18 {
		t.Fatalf("ReadCapacity tolerating the taint = %+v, %v; want 18 with the node d", got, err)
	}

	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "agents"}, Status: corev1.ResourceQuotaStatus{
		Hard: corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse("2"), corev1.ResourceLimitsMemory: resource.MustParse("8Gi")},
		Used: corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse("1"), corev1.ResourceLimitsMemory: resource.MustParse("6Gi")}}}
	if _, err := cs.CoreV1().ResourceQuotas("agents").Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err = kubernetes.ReadCapacity(ctx, cs, "agents", p, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	// requests.cpu: 1 free / 250m → 4; limits.memory: 2Gi free / 1Gi → 2.
	if got.Fit != 2 || !strings.Contains(got.Bound, `ResourceQuota "q" (limits.memory: 6Gi of 8Gi used, each sandbox takes 1Gi)`) {
		t.Fatalf("ReadCapacity under a quota = %+v, want 2, bound by limits.memory", got)
	}
}
