package kubernetes

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// TestPodWithoutRoomIsRefused: a session's pod the scheduler places on no node is refused
// within UnschedulableWait with a *sandbox.NoRoomError (busy: 429) that quotes the scheduler
// and says how many fit, and is deleted; a slot's pod waits on. Before, a session waited the
// whole PodReadyTimeout (2 minutes) for "0/1 nodes are available: 1 Insufficient cpu" and
// then failed as not ready (issue 45).
func TestPodWithoutRoomIsRefused(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("4Gi")}}}
	cs := fake.NewClientset(node)
	const why = "0/1 nodes are available: 1 Insufficient cpu."
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		if pod.Name == "" {
			pod.Name = pod.GenerateName + "x"
		}
		pod.Status.Phase = corev1.PodPending
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: why}}
		return false, nil, nil // the tracker stores it as changed
	})
	r := &Runtime{client: cs, log: testenv.Logger(), daemon: DaemonName("host-1"),
		cfg: Config{Namespace: "agents", PodReadyTimeout: time.Minute, UnschedulableWait: 200 * time.Millisecond,
			Box: Box{MemoryBytes: 1 << 30, NanoCPUs: 2e9}}}
	ctx := t.Context()

	start := time.Now()
	_, err := r.createPod(ctx, r.newPod(RoleSession, nil), true)
	noRoom, ok := errors.AsType[*sandbox.NoRoomError](err)
	if !ok || !errors.Is(err, errclass.Busy) {
		t.Fatalf("a session pod no node takes: %v, want a NoRoomError of class busy", err)
	}
	if waited := time.Since(start); waited > 30*time.Second {
		t.Errorf("refused after %s, want about UnschedulableWait", waited)
	}
	for _, want := range []string{why, "none fits", "free requests: cpu 1", "kubernetes.requests"} {
		if !strings.Contains(noRoom.Error(), want) {
			t.Errorf("the refusal %q lacks %q", noRoom, want)
		}
	}
	if pods, _ := cs.CoreV1().Pods("agents").List(ctx, metav1.ListOptions{}); len(pods.Items) != 0 {
		t.Errorf("the refused pod was left: %v", pods.Items[0].Name)
	}

	// The daemon's own slot pod waits for room as long as PodReadyTimeout.
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	r.cfg.PodReadyTimeout = 700 * time.Millisecond
	_, err = r.createPod(sctx, r.newPod(RoleSlot, map[string]string{LabelSlot: "0"}), false)
	if err == nil || errors.As(err, &noRoom) || !strings.Contains(err.Error(), "not running after") {
		t.Errorf("a slot pod no node takes: %v, want it to wait its PodReadyTimeout", err)
	}
}

// TestCapacityIsReadOncePerTTL: Runtime.Capacity (GET /v1/limits, /metrics) answers from one
// read of the cluster for capacityTTL, however often it is asked: each read lists every
// unfinished pod of the cluster.
func TestCapacityIsReadOncePerTTL(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")}}}
	cs := fake.NewClientset(node)
	lists := 0
	cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists++
		return false, nil, nil
	})
	r := &Runtime{client: cs, log: testenv.Logger(), daemon: DaemonName("host-1"),
		cfg: Config{Namespace: "agents", Box: Box{MemoryBytes: 1 << 30, NanoCPUs: 1e9, RequestNanoCPUs: 5e8, RequestMemoryBytes: 512 << 20}}}
	for range 5 {
		c, err := r.Capacity(t.Context())
		if err != nil || c.Fit != 4 {
			t.Fatalf("Capacity = %+v, %v; want 4 on a node of 2 CPUs, each requesting 500m", c, err)
		}
	}
	if lists != 1 {
		t.Errorf("5 asks listed the pods %d times, want once", lists)
	}
	r.capacity.at = time.Now().Add(-capacityTTL)
	if _, err := r.Capacity(t.Context()); err != nil || lists != 2 {
		t.Errorf("after capacityTTL: %v, %d lists, want a second read", err, lists)
	}
}
