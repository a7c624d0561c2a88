package kubernetes

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
)

// TestJudge covers the enforcement verdicts a cluster may give (TestNetworkPolicy meets one or
// two of them on the cluster at hand).
func TestJudge(t *testing.T) {
	none := []Reach{{Target: "10.0.0.1:10250", Result: "timeout"}, {Target: "10.96.0.1:443", Result: "unreachable"}, {Target: "127.0.0.1:10250", Result: "refused"}}
	conn := []Reach{{Target: "10.0.0.1:10250", Result: "connected"}, {Target: "10.96.0.1:443", Result: "timeout"}}
	// A reset from a host is an answer from it: the trial that found this had a pod reach a
	// host listener while doctor, counting "refused" as blocked, said "enforced".
	refused := []Reach{{Target: "192.0.2.2:10250", Result: "refused"}, {Target: "10.96.0.1:443", Result: "timeout"}}
	for _, c := range []struct {
		name             string
		sandbox, control []Reach
		hadControl       bool
		enforced, proven bool
		summary          string
	}{
		{"sandbox connects", conn, conn, true, false, true, "not enforced: a pod with the sandbox pods' labels reached 10.0.0.1:10250"},
		{"a host refuses the sandbox", refused, refused, true, false, true, "not enforced: a pod with the sandbox pods' labels reached 192.0.2.2:10250"},
		{"only the control connects", none, conn, true, true, true, "enforced: a pod without the sandbox pods' labels reached 10.0.0.1:10250"},
		{"nothing connects", none, none, true, true, false, "cannot tell the policy's effect"},
		{"no control", none, nil, false, true, false, "enforced: a pod with the sandbox pods' labels reached nothing (10.0.0.1:10250 timeout, 10.96.0.1:443 unreachable, 127.0.0.1:10250 refused)"},
	} {
		enforced, proven, summary := judge(c.sandbox, c.control, c.hadControl)
		if enforced != c.enforced || proven != c.proven || !strings.Contains(summary, c.summary) {
			t.Errorf("%s: judge = %v, %v, %q; want %v, %v, containing %q", c.name, enforced, proven, summary, c.enforced, c.proven, c.summary)
		}
	}
	_, _, summary := judge(conn, nil, false)
	if !strings.Contains(summary, "a network plugin that enforces NetworkPolicy") || !strings.Contains(summary, "no network") {
		t.Errorf("the not-enforced verdict %q does not say what the cluster must provide", summary)
	}
}

func TestParseReach(t *testing.T) {
	pod := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Message: "noise\n" + `[{"target": "1.2.3.4:5", "result": "connected"}]` + "\n"}}}}}}
	got, err := parseReach(pod)
	if err != nil || len(got) != 1 || got[0].Result != "connected" {
		t.Errorf("parseReach = %+v, %v", got, err)
	}
	pod.Status.ContainerStatuses[0].State.Terminated.ExitCode = 1
	if _, err := parseReach(pod); err == nil {
		t.Error("parseReach of a crashed probe gave no error")
	}
}

func TestDenyAllPolicy(t *testing.T) {
	sel := map[string]string{LabelManaged: "1"}
	p := DenyAllPolicy("ns", sel)
	if !PolicyDeniesAll(p, sel) {
		t.Fatalf("DenyAllPolicy does not deny all: %+v", p.Spec)
	}
	p.Spec.Egress = []netv1.NetworkPolicyEgressRule{{}} // allows all egress
	if PolicyDeniesAll(p, sel) {
		t.Error("a policy with an allow-all egress rule counts as deny-all")
	}
	if PolicyDeniesAll(DenyAllPolicy("ns", map[string]string{"other": "1"}), sel) {
		t.Error("a policy selecting other pods counts as the sandbox pods'")
	}
}

func TestIsLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{"https://127.0.0.1:6443": true, "https://localhost:6443": true, "[::1]:443": true,
		"https://10.0.0.1:6443": false, "https://api.example.com": false} {
		if got := IsLoopbackHost(host); got != want {
			t.Errorf("IsLoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestRequiredAccess(t *testing.T) {
	var names []string
	for _, a := range RequiredAccess(Access{Group: "coordination.k8s.io", Resource: "leases", Verbs: []string{"get"}}) {
		names = append(names, a.String()+"="+strings.Join(a.Verbs, ","))
	}
	want := "pods=create,get,list,watch,update,patch,delete pods/exec=create,get networkpolicies.networking.k8s.io=get,create,update leases.coordination.k8s.io=get"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("RequiredAccess = %s\nwant %s", got, want)
	}
}
