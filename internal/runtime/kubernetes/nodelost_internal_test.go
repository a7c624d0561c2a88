package kubernetes

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// TestPodOnASilentNodeIsGivenUp: a pod the scheduler placed on a node whose kubelet then went
// silent never starts, and nothing about the pod says so until its eviction minutes later;
// createPod gives it up within its node check (5 s) of the node's NotReady, naming the node,
// and deletes it, so that the slot's next pod goes to a node that answers. Before, it waited
// the whole PodReadyTimeout (2 minutes by default).
func TestPodOnASilentNodeIsGivenUp(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status."}}}}
	cs := fake.NewClientset(node)
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		pod.Name = pod.GenerateName + "x"
		pod.Spec.NodeName = "n2" // bound, and Pending for good
		pod.Status.Phase = corev1.PodPending
		return false, nil, nil
	})
	r := &Runtime{client: cs, log: testenv.Logger(), daemon: DaemonName("host-1"),
		cfg: Config{Namespace: "agents", PodReadyTimeout: time.Minute, UnschedulableWait: time.Minute, Box: Box{MemoryBytes: 1 << 30, NanoCPUs: 1e9}}}
	start := time.Now()
	_, err := r.createPod(t.Context(), r.newPod(RoleSlot, map[string]string{LabelSlot: "0"}), false)
	if err == nil || !strings.Contains(err.Error(), "node n2 is not ready (NodeStatusUnknown: Kubelet stopped posting node status.)") {
		t.Fatalf("a pod on a silent node: %v, want an error naming the node and why", err)
	}
	if waited := time.Since(start); waited > 15*time.Second {
		t.Errorf("given up after %s, want within the node check's 5 s", waited)
	}
	if pods, _ := cs.CoreV1().Pods("agents").List(t.Context(), metav1.ListOptions{}); len(pods.Items) != 0 {
		t.Errorf("the pod on the silent node was left: %v", pods.Items[0].Name)
	}
}
