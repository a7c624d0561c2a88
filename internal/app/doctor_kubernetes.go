package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/runtime/kubernetes"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// kubernetesChecks are Doctor's checks of runtime "kubernetes": the API (reachable, its
// version), the namespace, the RBAC verbs the daemon needs, the RuntimeClass, the image
// (pullable: a probe pod), the sandbox pods' NetworkPolicy (present, and enforced: a probe
// pod under it tries to connect out). A check that cannot be made for an earlier failure is
// left out.
func kubernetesChecks(ctx context.Context, cfg config.Config) []Check {
	var checks []Check
	add := func(c Check) { checks = append(checks, c) }
	rcfg, err := KubernetesConfig(cfg, "doctor")
	if err != nil {
		return append(checks, Check{Name: "kubernetes configuration", Required: true, Detail: err.Error(),
			Fix: "correct the pod template file named (docs/kubernetes.md)"})
	}
	rc, source, err := kubernetes.ClusterConfig(rcfg.Kubeconfig)
	var client k8s.Interface
	if err == nil {
		client, err = k8s.NewForConfig(rc)
	}
	if err != nil {
		return append(checks, Check{Name: "kubernetes API", Required: true, Detail: err.Error(),
			Fix: "set kubernetes.kubeconfig to a kubeconfig file, or run the daemon in a pod with a service account"})
	}
	version, err := kubernetes.CheckAPI(ctx, client, rc.Host, source)
	if err != nil {
		fix := "start the cluster, or correct kubernetes.kubeconfig"
		if kubernetes.IsCertificateError(err) {
			fix = "give the kubeconfig the CA of the API server's certificate (certificate-authority-data), or correct kubernetes.kubeconfig"
		}
		return append(checks, Check{Name: "kubernetes API", Required: true, Detail: err.Error(), Fix: fix})
	}
	add(Check{Name: "kubernetes API", OK: true, Required: true, Detail: fmt.Sprintf("Kubernetes %s at %s (%s)", version, rc.Host, source)})
	ns := rcfg.Namespace
	if err := kubernetes.CheckNamespace(ctx, client, ns); err != nil {
		return append(checks, Check{Name: "kubernetes namespace", Required: true, Detail: err.Error(),
			Fix: fmt.Sprintf("kubectl create namespace %s, then apply deploy/kubernetes/ there; or set kubernetes.namespace to the namespace the daemon's Role is in", ns)})
	}
	add(Check{Name: "kubernetes namespace", OK: true, Required: true, Detail: ns})

	need := kubernetes.RequiredAccess(leaseAccess)
	missing, err := kubernetes.MissingAccess(ctx, client, ns, need)
	switch {
	case err != nil:
		add(Check{Name: "kubernetes RBAC", Required: true, Detail: err.Error(), Fix: "check that the API server allows SelfSubjectAccessReviews"})
	case len(missing) > 0:
		add(Check{Name: "kubernetes RBAC", Required: true, Detail: kubernetes.CheckAccess(ctx, client, ns, missing).Error(),
			Fix: "grant the verbs named with the Role in deploy/kubernetes/rbac.yaml, bound to the daemon's user or service account"})
	default:
		var parts []string
		for _, a := range need {
			parts = append(parts, a.String()+": "+strings.Join(a.Verbs, ","))
		}
		add(Check{Name: "kubernetes RBAC", OK: true, Required: true, Detail: "allowed in " + ns + ": " + strings.Join(parts, "; ")})
	}
	if len(missing) > 0 || err != nil {
		return checks // the probes below need pods
	}

	if name := rcfg.RuntimeClassName; name != "" {
		add(runtimeClassCheck(ctx, client, name))
	}
	probe := kubernetes.Preflight{Namespace: ns, Image: rcfg.Image, PullPolicy: rcfg.ImagePullPolicy, RuntimeClassName: rcfg.RuntimeClassName,
		NodeSelector: rcfg.NodeSelector, Tolerations: rcfg.Tolerations, Labels: sandboxSelector, ProbeTimeout: 2 * time.Minute}
	if err := kubernetes.ProbeImage(ctx, client, probe); err != nil {
		fix := "see kubectl -n " + ns + " get events"
		if pe, ok := errors.AsType[*kubernetes.ImagePullError](err); ok {
			fix = "push the image the nodes pull (`sandpit image build --push REGISTRY/sandpit-sandbox`) and set kubernetes.image to it"
			if pe.PullPolicy == corev1.PullNever {
				fix = "import the image into the nodes (test cluster: scripts/kube-cluster.sh import-image " + rcfg.Image + ")"
			}
		} else if ue, ok := errors.AsType[*kubernetes.UnschedulableError](err); ok {
			fix = "correct the placement (kubernetes.node_selector, kubernetes.tolerations, the pod template file) to match the nodes"
			if ue.InsufficientResources() {
				fix = "free CPU or memory on the nodes (a stopped daemon's pods: `sandpit sandbox rm`), add nodes, or lower cpus and memory_bytes"
			}
		}
		return append(checks, Check{Name: "sandbox image", Required: true, Detail: err.Error(), Fix: fix})
	}
	add(Check{Name: "sandbox image", OK: true, Required: true, Detail: rcfg.Image + " starts on a node (a probe pod pulled and ran it)"})
	add(capacityCheck(ctx, client, rcfg))
	return append(checks, networkPolicyChecks(ctx, client, cfg, probe, rc.Host)...)
}

// runtimeClassCheck reports whether the RuntimeClass name exists. RuntimeClasses are
// cluster-scoped, which the daemon's Role does not cover: when reading is forbidden it says so
// (the image probe, which runs under it, still shows whether pods start).
func runtimeClassCheck(ctx context.Context, client k8s.Interface, name string) Check {
	c := Check{Name: "kubernetes RuntimeClass", Required: true}
	got, err := client.NodeV1().RuntimeClasses().Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		c.OK, c.Detail = true, fmt.Sprintf("%s (handler %s)", name, got.Handler)
	case apierrors.IsNotFound(err):
		c.Detail = fmt.Sprintf("the RuntimeClass %q (kubernetes.runtime_class_name) does not exist", name)
		c.Fix = "create it for the nodes' handler (gVisor: handler runsc; docs/kubernetes.md), or name one of `kubectl get runtimeclass`"
	case apierrors.IsForbidden(err):
		c.OK, c.Required = true, false
		c.Detail = fmt.Sprintf("%s: not readable with these credentials (RuntimeClasses are cluster-wide; the sandbox image check below starts a pod under it)", name)
	default:
		c.Detail = err.Error()
	}
	return c
}

// networkPolicyChecks report the sandbox pods' deny-all NetworkPolicy: present, and enforced
// (a probe pod with the sandbox pods' labels, and one without them, try to connect to the
// node's kubelet, the API server's service and the API server's address when pods can reach
// it).
func networkPolicyChecks(ctx context.Context, client k8s.Interface, cfg config.Config, probe kubernetes.Preflight, apiHost string) []Check {
	required := cfg.Network != sandbox.NetworkFull
	pol := Check{Name: "kubernetes NetworkPolicy", Required: required}
	got, err := client.NetworkingV1().NetworkPolicies(probe.Namespace).Get(ctx, kubernetes.NetworkPolicyName, metav1.GetOptions{})
	switch {
	case err == nil && kubernetes.PolicyDeniesAll(got, sandboxSelector):
		pol.OK, pol.Detail = true, fmt.Sprintf("%s denies the sandbox pods all ingress and egress", kubernetes.NetworkPolicyName)
	case err == nil:
		pol.Detail = fmt.Sprintf("%s exists but does not deny the sandbox pods everything", kubernetes.NetworkPolicyName)
		pol.Fix = "start the daemon (it updates the policy), or apply deploy/kubernetes/networkpolicy.yaml"
	case apierrors.IsNotFound(err) && !required:
		pol.OK, pol.Detail = true, "none, as network is \"full\" (the sandbox pods use the pod network)"
	case apierrors.IsNotFound(err):
		pol.Detail = fmt.Sprintf("%s is missing in %s", kubernetes.NetworkPolicyName, probe.Namespace)
		pol.Fix = "start the daemon once (it creates the policy), or apply deploy/kubernetes/networkpolicy.yaml"
	default:
		pol.Detail = err.Error()
	}
	checks := []Check{pol}
	if !required {
		return checks
	}
	var targets []string
	if !kubernetes.IsLoopbackHost(apiHost) {
		if host := strings.TrimPrefix(strings.TrimPrefix(apiHost, "https://"), "http://"); host != "" {
			if !strings.Contains(host, ":") {
				host += ":443"
			}
			targets = append(targets, host)
		}
	}
	if !pol.OK {
		// Probe under a policy of the doctor's own? No: report what the pods would meet now.
		checks = append(checks, Check{Name: "NetworkPolicy enforcement", Required: true,
			Detail: "not probed: the sandbox pods' NetworkPolicy is not in place", Fix: pol.Fix})
		return checks
	}
	e, err := kubernetes.ProbeEnforcement(ctx, client, kubernetes.EnforcementProbe{Preflight: probe, Targets: targets, Control: true})
	enf := Check{Name: "NetworkPolicy enforcement", Required: true}
	switch {
	case err != nil:
		enf.Detail, enf.Fix = err.Error(), "see kubectl -n "+probe.Namespace+" get events"
	case !e.Enforced:
		enf.Detail = e.Summary
		enf.Fix = "install a network plugin that enforces NetworkPolicy (Calico, Cilium, ...), or give the sandbox pods a RuntimeClass or CNI with no network"
	default:
		enf.OK, enf.Detail = true, e.Summary
	}
	return append(checks, enf)
}

// capacityCheck says how many more sandbox pods of rcfg's requests and limits fit under the
// namespace's ResourceQuotas and on the nodes (kubernetes.ReadCapacity), and what bounds it.
// It is advice: a full cluster may free room.
func capacityCheck(ctx context.Context, client k8s.Interface, rcfg kubernetes.Config) Check {
	c := Check{Name: "kubernetes capacity"}
	got, err := kubernetes.ReadCapacity(ctx, client, rcfg.Namespace, kubernetes.SandboxResources(rcfg), rcfg.NodeSelector, rcfg.Tolerations)
	switch {
	case err != nil:
		c.Detail, c.Fix = err.Error(), "grant the daemon list on resourcequotas in its namespace (and on nodes and pods cluster-wide to count the nodes)"
		return c
	case got.Fit < 0:
		c.OK, c.Detail = true, "not known: "+got.NodesUnknown
		return c
	}
	c.Detail = fmt.Sprintf("%d more sandboxes fit", got.Fit)
	if got.Bound != "" {
		c.Detail += ", bound by " + got.Bound
	}
	if got.NodesUnknown != "" {
		c.Detail += "; the nodes were not counted: " + got.NodesUnknown
	}
	c.OK = got.Fit > 0
	if !c.OK {
		c.Fix = "free room (a stopped daemon's pods: `sandpit sandbox rm`), raise the ResourceQuota, add nodes, " +
			"or lower kubernetes.requests.cpus and kubernetes.requests.memory_bytes"
	}
	return c
}
