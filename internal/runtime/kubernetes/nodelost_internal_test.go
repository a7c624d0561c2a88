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

// TestPodOnASilentNodeIsMadeAgain: a pod the scheduler placed on a node whose kubelet then
// went silent never starts, and nothing about the pod says so until its eviction minutes
// later. createPod gives it up within its node check (5 s) of the node's NotReady, deletes it
// and makes the pod again, which the scheduler (here: the fake) places on a node that answers;
// with no such node it fails after three pods, naming the node. Before, a session's or slot's
// pod waited the whole PodReadyTimeout (2 minutes by default).
func TestPodOnASilentNodeIsMadeAgain(t *testing.T) {
	silent := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status."}}}}
	for _, c := range []struct {
		name     string
		answers  bool // a pod after the first goes to a node that answers
		wantErr  string
		wantMade int
	}{
		{"another node answers", true, "", 2},
		{"none answers", false, "node n2 is not ready (NodeStatusUnknown: Kubelet stopped posting node status.)", 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			cs := fake.NewClientset(silent)
			made := 0
			cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
				made++
				pod.Name = pod.GenerateName + string(rune('a'+made))
				pod.Spec.NodeName, pod.Status.Phase = "n2", corev1.PodPending // bound, and Pending for good
				if made > 1 && c.answers {
					pod.Spec.NodeName, pod.Status.Phase = "n1", corev1.PodRunning
					pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
				}
				return false, nil, nil
			})
			r := &Runtime{client: cs, log: testenv.Logger(), daemon: DaemonName("host-1"),
				cfg: Config{Namespace: "agents", PodReadyTimeout: time.Minute, UnschedulableWait: time.Minute, Box: Box{MemoryBytes: 1 << 30, NanoCPUs: 1e9}}}
			start := time.Now()
			pod, err := r.createPod(t.Context(), r.newPod(RoleSlot, map[string]string{LabelSlot: "0"}), false)
			switch {
			case c.wantErr == "" && (err != nil || pod.Spec.NodeName != "n1"):
				t.Fatalf("createPod = %v, %v; want the pod made again on n1", pod, err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("createPod: %v, want an error naming the node and why (%q)", err, c.wantErr)
			}
			if made != c.wantMade {
				t.Errorf("%d pods made, want %d", made, c.wantMade)
			}
			if waited := time.Since(start); waited > time.Duration(c.wantMade)*8*time.Second {
				t.Errorf("took %s, want within the node checks' 5 s a pod", waited)
			}
			pods, _ := cs.CoreV1().Pods("agents").List(t.Context(), metav1.ListOptions{})
			for _, p := range pods.Items {
				if p.Spec.NodeName == "n2" {
					t.Errorf("the pod on the silent node was left: %v", p.Name)
				}
			}
		})
	}
}
