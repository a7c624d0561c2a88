package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/runtime/kubernetes"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// kubeScript runs scripts/kube-cluster.sh with args on the test cluster (the environment
// `scripts/kube-cluster.sh env` exported names it) and returns its stdout.
func kubeScript(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join("..", "..", "scripts", "kube-cluster.sh"), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kube-cluster.sh %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	t.Logf("kube-cluster.sh %s: %s", strings.Join(args, " "), strings.TrimSpace(stderr.String()))
	return stdout.String()
}

// TestKubernetesNodeLost adds a second node to the test cluster (a kubelet and containerd in a
// network namespace of their own, tainted so that only this test's pods go there), spreads a
// daemon's slots and sessions over both nodes, and kills the second node's kubelet, as a node
// lost: its sessions end with a reason naming the node, the sessions on the other node keep
// their state, runs go on, the slots end up on the node that answers, a new session opens, and
// once the node is back no container of the lost pods runs on it.
func TestKubernetesNodeLost(t *testing.T) {
	t.Parallel() // it waits for the node monitor and the pods: beside the other long ones (docs/testing.md)
	cfg, client := kubeConfig(t)
	const taint = "sandpit.dev/test-node"
	node := strings.TrimSpace(kubeScript(t, "node", "add", "2", "--taint", taint+"=lost:NoSchedule"))
	t.Cleanup(func() { kubeScript(t, "node", "rm", "2") }) // after the daemon's stop (registered later)
	kubeScript(t, "import-image", cfg.Kubernetes.Image)
	cfg.Kubernetes.Tolerations = []config.Toleration{{Key: taint, Operator: "Exists", Effect: "NoSchedule"}}
	cfg.Kubernetes.WarmSessions = 2
	url := daemon(t, cfg)
	ctx := context.Background()
	ns := cfg.Kubernetes.Namespace

	pods := func(selector string) []corev1.Pod {
		t.Helper()
		list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Fatal(err)
		}
		return slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
	}
	sessionNode := func(id string) string {
		for _, p := range pods(kubernetes.LabelRole + "=" + kubernetes.RoleSession) {
			if p.Annotations[kubernetes.AnnotationSession] == id {
				return p.Spec.NodeName
			}
		}
		return ""
	}
	call := func(id, code string) (int, []byte) {
		return httpCall(t, "POST", url+"/v1/agents/alice/sessions/"+id+"/executions", code)
	}

	// Sessions until each node holds one (the pods spread over the nodes).
	onNode := map[string][]string{} // node → sessions
	for i := 0; i < 6 && (len(onNode[node]) == 0 || len(onNode) < 2); i++ {
		status, body := httpCall(t, "POST", url+"/v1/agents/alice/sessions", `{"idle_timeout_ms": 600000}`)
		var s sandbox.SessionInfo
		if status != 201 || json.Unmarshal(body, &s) != nil {
			t.Fatalf("create a session: %d %s", status, body)
		}
		if status, body := call(s.ID, fmt.Sprintf(`{"code": "x = %d"}`, 40+i)); status != 200 {
			t.Fatalf("session call: %d %s", status, body)
		}
		n := sessionNode(s.ID)
		onNode[n] = append(onNode[n], s.ID)
	}
	if len(onNode[node]) == 0 || len(onNode) < 2 {
		t.Fatalf("the sessions' pods did not spread over the two nodes: %v", onNode)
	}
	var lostPods []string // ns/name of every pod of the test on node 2
	for _, p := range pods(kubernetes.LabelManaged + "=1") {
		if p.Spec.NodeName == node {
			lostPods = append(lostPods, ns+"/"+p.Name)
		}
	}
	t.Logf("sessions by node: %v; pods on %s: %v", onNode, node, lostPods)

	kubeScript(t, "node", "kill", "2")
	killed := time.Now()

	// The sessions on the lost node end, saying so.
	for _, id := range onNode[node] {
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(time.Second) {
			status, body := httpCall(t, "GET", url+"/v1/agents/alice/sessions/"+id, "")
			var s sandbox.SessionInfo
			if status != 200 || json.Unmarshal(body, &s) != nil {
				t.Fatalf("GET session %s: %d %s", id, status, body)
			}
			if s.State == sandbox.SessionEnded {
				if s.EndReason != sandbox.EndSandboxError || !strings.Contains(s.Reason, node) {
					t.Errorf("session %s on the lost node ended with %q: %q; want %q naming %s", id, s.EndReason, s.Reason, sandbox.EndSandboxError, node)
				}
				t.Logf("session %s ended %v after the kill: %s", id, time.Since(killed).Round(time.Second), s.Reason)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("session %s on the lost node still %s 90 s after its kubelet was killed", id, s.State)
			}
		}
	}
	// The others keep their state.
	for n, ids := range onNode {
		if n == node {
			continue
		}
		for _, id := range ids {
			if status, body := call(id, `{"code": "OUTPUT = x"}`); status != 200 || !bytes.Contains(body, []byte(`"output":4`)) {
				t.Errorf("session %s on %s after the other node was lost: %d %s", id, n, status, body)
			}
		}
	}
	// Runs go on, and the slots end up on the node that answers.
	for range 4 {
		runPrint1(t, url)
	}
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		var where []string
		for _, p := range pods(kubernetes.LabelRole + "=" + kubernetes.RoleSlot) {
			if ok := p.Status.Phase == corev1.PodRunning; ok && p.Spec.NodeName != node {
				where = append(where, p.Name+"@"+p.Spec.NodeName)
			}
		}
		if len(where) == cfg.Slots {
			t.Logf("slots %v, %v after the kill", where, time.Since(killed).Round(time.Second))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot pods running off the lost node 3 minutes after: %v; want %d", where, cfg.Slots)
		}
	}
	status, body := httpCall(t, "POST", url+"/v1/agents/alice/sessions", `{}`)
	var s sandbox.SessionInfo
	if status != 201 || json.Unmarshal(body, &s) != nil {
		t.Fatalf("create a session after the node was lost: %d %s", status, body)
	}
	if status, body := call(s.ID, `{"code": "OUTPUT = 6 * 7"}`); status != 200 || !bytes.Contains(body, []byte(`"output":42`)) {
		t.Fatalf("a new session's call after the node was lost: %d %s", status, body)
	}

	// The node comes back: its kubelet stops what the cluster deleted meanwhile.
	kubeScript(t, "node", "start", "2")
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(2 * time.Second) {
		live := map[string]bool{} // a pod of the test still in the API may run on
		for _, p := range pods(kubernetes.LabelManaged + "=1") {
			live[ns+"/"+p.Name] = true
		}
		var left []string
		for _, line := range strings.Split(kubeScript(t, "node", "tasks", "2"), "\n") {
			if f := strings.Fields(line); len(f) > 0 && slices.Contains(lostPods, f[0]) && !live[f[0]] {
				left = append(left, line)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("containers of the lost pods still run on %s 2 minutes after it came back:\n%s", node, strings.Join(left, "\n"))
		}
	}
}
