package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
)

// NetworkPolicyName is the name of the NetworkPolicy the daemon keeps in its namespace.
const NetworkPolicyName = "sandpit-sandboxes-deny-all"

// DenyAllPolicy returns the NetworkPolicy that denies all ingress and all egress of the pods
// selector selects in namespace ns: the sandboxes need no network, since their egress rides
// the exec stream to the daemon's proxy.
func DenyAllPolicy(ns string, selector map[string]string) *netv1.NetworkPolicy {
	return &netv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: NetworkPolicyName, Namespace: ns,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "sandpit"}},
		Spec: netv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: maps.Clone(selector)},
			PolicyTypes: []netv1.PolicyType{netv1.PolicyTypeIngress, netv1.PolicyTypeEgress},
			// No ingress and no egress rules: nothing is allowed either way.
		},
	}
}

// EnsureNetworkPolicy creates the deny-all NetworkPolicy (DenyAllPolicy) in ns, or updates the
// one there when its selector or rules differ (as several daemons sharing the namespace may
// each do: an update conditioned on the resourceVersion read, retried on conflict). It
// returns whether it created or changed the policy.
func EnsureNetworkPolicy(ctx context.Context, cs k8s.Interface, ns string, selector map[string]string) (bool, error) {
	want := DenyAllPolicy(ns, selector)
	api := cs.NetworkingV1().NetworkPolicies(ns)
	for attempt := 0; ; attempt++ {
		_, err := api.Create(ctx, want, metav1.CreateOptions{})
		if err == nil {
			return true, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("creating the NetworkPolicy %s in %q: %w", NetworkPolicyName, ns, err)
		}
		have, err := api.Get(ctx, NetworkPolicyName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && attempt < 3 {
			continue // deleted between the two calls
		}
		if err != nil {
			return false, fmt.Errorf("reading the NetworkPolicy %s in %q: %w", NetworkPolicyName, ns, err)
		}
		if PolicyDeniesAll(have, selector) {
			return false, nil
		}
		have.Spec = want.Spec
		_, err = api.Update(ctx, have, metav1.UpdateOptions{})
		if err == nil {
			return true, nil
		}
		if !apierrors.IsConflict(err) || attempt >= 3 {
			return false, fmt.Errorf("updating the NetworkPolicy %s in %q: %w", NetworkPolicyName, ns, err)
		}
	}
}

// PolicyDeniesAll says whether p selects exactly the pods selector selects and denies them
// all ingress and egress.
func PolicyDeniesAll(p *netv1.NetworkPolicy, selector map[string]string) bool {
	s := p.Spec
	types := map[netv1.PolicyType]bool{}
	for _, t := range s.PolicyTypes {
		types[t] = true
	}
	return maps.Equal(s.PodSelector.MatchLabels, selector) && len(s.PodSelector.MatchExpressions) == 0 &&
		types[netv1.PolicyTypeIngress] && types[netv1.PolicyTypeEgress] && len(s.Ingress) == 0 && len(s.Egress) == 0
}

// Reach is what a probe pod got when it tried to connect to one address.
type Reach struct {
	// Target is the address tried (host:port), or what named it ("$KUBERNETES_SERVICE_HOST").
	Target string `json:"target"`
	// Result is "connected", "refused", "timeout", "unreachable" or "error".
	Result string `json:"result"`
	Detail string `json:"detail,omitempty"`
}

// Enforcement is the verdict of ProbeEnforcement.
type Enforcement struct {
	// Enforced is true when no probe pod under the policy reached any target (see reached).
	Enforced bool
	// Proven is true when a pod outside the policy connected where the sandbox pod did not
	// (the policy, not an unreachable target, stopped it), or when the sandbox pod connected
	// (not enforced, beyond doubt).
	Proven bool
	// Sandbox is what the pod with the sandbox pods' labels got; Control what the pod
	// without them got (empty when no control ran).
	Sandbox, Control []Reach
	// Summary says it in a sentence, with what the cluster must provide when not enforced.
	Summary string
}

// EnforcementProbe is what ProbeEnforcement needs.
type EnforcementProbe struct {
	Preflight
	// Targets are more host:port addresses to try besides the node's kubelet (the pod's
	// hostIP, port 10250) and the API server's in-cluster service
	// (KUBERNETES_SERVICE_HOST:PORT), such as the API server's address outside the cluster.
	Targets []string
	// Control also runs a pod without the policy's labels, to tell "blocked by the policy"
	// from "nothing answers there".
	Control bool
}

// probeScript is run by the probe pods' python3: it tries to connect to each target (argv;
// "$VAR" parts are read from the environment), prints one JSON list of Reach and exits 3
// when any connected, 2 otherwise (a non-zero exit puts the log into the termination message).
const probeScript = `
import json, os, socket, sys
out = []
for t in sys.argv[1:]:
    h, _, p = t.rpartition(":")
    h = os.environ.get(h[1:], "") if h.startswith("$") else h
    p = os.environ.get(p[1:], "") if p.startswith("$") else p
    r = {"target": t}
    if not h or not p:
        r["result"] = "error"; r["detail"] = "not set"; out.append(r); continue
    r["target"] = "%s:%s" % (h, p)
    try:
        s = socket.create_connection((h.strip("[]"), int(p)), timeout=4)
        s.close(); r["result"] = "connected"
    except ConnectionRefusedError:
        r["result"] = "refused"
    except socket.timeout:
        r["result"] = "timeout"
    except OSError as e:
        r["result"] = "unreachable"; r["detail"] = str(e)[:80]
    out.append(r)
print(json.dumps(out))
sys.exit(3 if any(r["result"] == "connected" for r in out) else 2)
`

// ProbeEnforcement tells whether the NetworkPolicy of the sandbox pods is enforced: a
// short-lived pod with the policy's labels (p.Labels) and the sandbox image tries to connect
// to the node's kubelet, the API server's service and p.Targets. Connected, or refused by a
// host other than the pod's own loopback, means not enforced (the packets got there); timed out
// or unreachable everywhere means enforced. With p.Control a pod
// without the labels tries the same first, so the verdict can say whether the policy (rather
// than the targets) made the difference. The pods are deleted before it returns.
func ProbeEnforcement(ctx context.Context, cs k8s.Interface, p EnforcementProbe) (Enforcement, error) {
	targets := append([]string{"$SANDPIT_HOST_IP:10250", "$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"}, p.Targets...)
	run := func(labels map[string]string, prefix string) ([]Reach, error) {
		pp := p.Preflight
		pp.Labels = labels
		pod := probePod(pp, prefix)
		c := &pod.Spec.Containers[0]
		c.Command = append([]string{"python3", "-c", probeScript}, targets...)
		c.Env = []corev1.EnvVar{{Name: "SANDPIT_HOST_IP", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}}}
		last, err := runProbe(ctx, cs, pp, pod, func(pod *corev1.Pod) (bool, error) {
			for _, st := range pod.Status.ContainerStatuses {
				if w := st.State.Waiting; w != nil && pullFailures[w.Reason] {
					return true, &ImagePullError{Image: p.Image, Reason: w.Reason, Message: w.Message, PullPolicy: p.PullPolicy}
				}
				if st.State.Terminated != nil {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return nil, err
		}
		return parseReach(last)
	}
	var out Enforcement
	var err error
	if p.Control {
		control := map[string]string{"sandpit.dev/probe-control": "true"}
		if out.Control, err = run(control, "sandpit-netprobe-control-"); err != nil {
			return out, err
		}
	}
	if out.Sandbox, err = run(p.Labels, "sandpit-netprobe-"); err != nil {
		return out, err
	}
	out.Enforced, out.Proven, out.Summary = judge(out.Sandbox, out.Control, p.Control)
	return out, nil
}

// judge returns the verdict of a probe: sandbox is what the pod under the policy got,
// control what the pod outside it got (when hadControl).
func judge(sandbox, control []Reach, hadControl bool) (enforced, proven bool, summary string) {
	connected := func(rs []Reach) []string {
		var out []string
		for _, r := range rs {
			if reached(r) {
				out = append(out, r.Target)
			}
		}
		return out
	}
	if got := connected(sandbox); len(got) > 0 {
		return false, true, fmt.Sprintf("not enforced: a pod with the sandbox pods' labels reached %s (connected, or refused by the host there: either way its packets got through) despite the deny-all NetworkPolicy %s; "+
			"the cluster must provide a network plugin that enforces NetworkPolicy (Calico, Cilium, ...), or a CNI or runtime that gives the sandbox pods no network",
			strings.Join(got, ", "), NetworkPolicyName)
	}
	var tried []string
	for _, r := range sandbox {
		tried = append(tried, r.Target+" "+r.Result)
	}
	if !hadControl {
		return true, false, "enforced: a pod with the sandbox pods' labels reached nothing (" + strings.Join(tried, ", ") + ")"
	}
	if got := connected(control); len(got) > 0 {
		return true, true, fmt.Sprintf("enforced: a pod without the sandbox pods' labels reached %s, a pod with them reached nothing (%s)",
			strings.Join(got, ", "), strings.Join(tried, ", "))
	}
	return true, false, "enforced as far as can be seen: a pod with the sandbox pods' labels reached nothing (" + strings.Join(tried, ", ") +
		"), but neither did a pod without them, so the probe cannot tell the policy's effect from targets that do not answer pods"
}

// reached says whether a probe's packets got to r's target: it connected, or a host there
// refused the connection (a TCP reset is an answer from the target; policies drop). A refusal
// from a loopback address is the probe pod's own loopback, not the target's host.
func reached(r Reach) bool {
	switch r.Result {
	case "connected":
		return true
	case "refused":
		host, _, err := net.SplitHostPort(r.Target)
		if err != nil {
			host = r.Target
		}
		ip := net.ParseIP(strings.Trim(host, "[]"))
		return ip == nil || !ip.IsLoopback()
	}
	return false
}

// parseReach reads the probe script's JSON from the pod's termination message.
func parseReach(pod *corev1.Pod) ([]Reach, error) {
	for _, st := range pod.Status.ContainerStatuses {
		t := st.State.Terminated
		if t == nil {
			continue
		}
		msg := strings.TrimSpace(t.Message)
		if i := strings.LastIndex(msg, "\n["); i >= 0 {
			msg = msg[i+1:]
		}
		var out []Reach
		if err := json.Unmarshal([]byte(msg), &out); err != nil || (t.ExitCode != 2 && t.ExitCode != 3) {
			return nil, fmt.Errorf("%w: the probe pod %s exited %s with %q", errProbe, pod.Name, strconv.Itoa(int(t.ExitCode)), t.Message)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: the probe pod %s has no terminated container", errProbe, pod.Name)
}
