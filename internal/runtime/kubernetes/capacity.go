package kubernetes

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	k8s "k8s.io/client-go/kubernetes"
)

// Capacity is how many more sandbox pods fit, and what bounds that number.
type Capacity struct {
	// Fit is how many more pods of the sandbox's requests and limits fit under the namespace's
	// ResourceQuotas and on the schedulable nodes, whichever is fewer; -1 when neither could
	// be read (nothing is known).
	Fit int
	// Bound names what bounds Fit, in sandpit's words with the numbers, such as `the
	// ResourceQuota "q" (requests.cpu: 1900m of 2 used, each sandbox requests 200m)`; "" when
	// nothing does.
	Bound string
	// NodesUnknown says why the nodes were not counted (their list is cluster-wide, which the
	// daemon's Role may not read); "" when they were.
	NodesUnknown string
}

// PodResources is what one sandbox pod asks for: its requests and its limits.
type PodResources struct {
	Requests, Limits corev1.ResourceList
}

// SandboxResources returns the requests and limits of every sandbox pod of cfg.
func SandboxResources(cfg Config) PodResources {
	res := (&Runtime{cfg: cfg}).podSpec().Containers[0].Resources
	return PodResources{Requests: res.Requests, Limits: res.Limits}
}

// quota is what one pod counts against a quota's hard resource name, and whether it counts.
func (p PodResources) quota(name corev1.ResourceName) (resource.Quantity, bool) {
	switch name {
	case corev1.ResourcePods, "count/pods":
		return *resource.NewQuantity(1, resource.DecimalSI), true
	case corev1.ResourceCPU, corev1.ResourceRequestsCPU:
		q, ok := p.Requests[corev1.ResourceCPU]
		return q, ok
	case corev1.ResourceMemory, corev1.ResourceRequestsMemory:
		q, ok := p.Requests[corev1.ResourceMemory]
		return q, ok
	case corev1.ResourceLimitsCPU:
		q, ok := p.Limits[corev1.ResourceCPU]
		return q, ok
	case corev1.ResourceLimitsMemory:
		q, ok := p.Limits[corev1.ResourceMemory]
		return q, ok
	}
	return resource.Quantity{}, false
}

// ReadCapacity reads once how many more pods of p fit in namespace ns: the namespace's
// ResourceQuotas (hard minus used, for pods, requests.* and limits.* of cpu and memory) and
// the schedulable nodes that nodeSelector selects and whose NoSchedule taints tolerations
// tolerate (allocatable minus the requests of the pods running or pending on them). It costs
// one List of ResourceQuotas, one of nodes and one of pods (all namespaces, not finished).
// Nodes the credentials may not list are left out, and NodesUnknown says so.
func ReadCapacity(ctx context.Context, cs k8s.Interface, ns string, p PodResources, nodeSelector map[string]string,
	tolerations []corev1.Toleration) (Capacity, error) {
	out := Capacity{Fit: -1}
	take := func(n int, bound string) {
		if out.Fit < 0 || n < out.Fit {
			out.Fit, out.Bound = max(n, 0), bound
		}
	}
	quotas, err := cs.CoreV1().ResourceQuotas(ns).List(ctx, metav1.ListOptions{})
	if err != nil && !apierrors.IsForbidden(err) {
		return out, fmt.Errorf("listing the ResourceQuotas of namespace %s: %w", ns, err)
	}
	if err == nil {
		for _, q := range quotas.Items {
			for name, hard := range q.Status.Hard {
				each, ok := p.quota(name)
				if !ok || each.IsZero() {
					continue
				}
				used := q.Status.Used[name]
				free := hard.DeepCopy()
				free.Sub(used)
				take(fits(free, each), fmt.Sprintf("the namespace's ResourceQuota %q (%s: %s of %s used, each sandbox takes %s)",
					q.Name, name, used.String(), hard.String(), each.String()))
			}
		}
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		out.NodesUnknown = "the daemon's credentials may not list nodes (a cluster-wide read): grant nodes list, or count on the ResourceQuota"
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("listing the nodes: %w", err)
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed))).String()})
	if err != nil {
		return out, fmt.Errorf("listing the pods on the nodes: %w", err)
	}
	requested := map[string]corev1.ResourceList{}
	for _, pod := range pods.Items {
		if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		sum := requested[pod.Spec.NodeName]
		if sum == nil {
			sum = corev1.ResourceList{}
			requested[pod.Spec.NodeName] = sum
		}
		for _, c := range pod.Spec.Containers {
			for name, q := range c.Resources.Requests {
				have := sum[name]
				have.Add(q)
				sum[name] = have
			}
		}
	}
	total, counted := 0, 0
	var cpuFree, memFree resource.Quantity
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable || !selects(nodeSelector, n.Labels) || !tolerated(n.Spec.Taints, tolerations) {
			continue
		}
		counted++
		fit := math.MaxInt
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			each, ok := p.Requests[name]
			if !ok || each.IsZero() {
				continue
			}
			free := n.Status.Allocatable[name].DeepCopy()
			free.Sub(requested[n.Name][name])
			if name == corev1.ResourceCPU {
				cpuFree.Add(free)
			} else {
				memFree.Add(free)
			}
			fit = min(fit, fits(free, each))
		}
		if fit == math.MaxInt {
			continue // no requests: nothing bounds it here but the pod count, left to the quota
		}
		total += fit
	}
	cpu, mem := p.Requests[corev1.ResourceCPU], p.Requests[corev1.ResourceMemory]
	take(total, fmt.Sprintf("the schedulable nodes (%d of %d match kubernetes.node_selector and tolerations; free requests: cpu %s, memory %s; "+
		"each sandbox requests cpu %s, memory %s)", counted, len(nodes.Items), cpuFree.String(), memFree.String(), cpu.String(), mem.String()))
	return out, nil
}

// capacityTTL is how long Runtime.Capacity answers from its last read: a read lists every
// unfinished pod of the cluster, and /metrics and GET /v1/limits may be asked often.
const capacityTTL = 10 * time.Second

// capacityCache is the last read of Runtime.Capacity.
type capacityCache struct {
	mu   sync.Mutex
	at   time.Time
	last Capacity
	err  error
}

// Capacity returns how many more sandboxes fit now (ReadCapacity on the runtime's namespace,
// with its pods' requests, node selector and tolerations), read at most once per capacityTTL;
// concurrent callers share one read. Errors are ReadCapacity's.
func (r *Runtime) Capacity(ctx context.Context) (Capacity, error) {
	c := &r.capacity
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < capacityTTL {
		return c.last, c.err
	}
	c.last, c.err = ReadCapacity(ctx, r.client, r.cfg.Namespace, SandboxResources(r.cfg), r.cfg.NodeSelector, r.cfg.Tolerations)
	c.at = time.Now()
	return c.last, c.err
}

// fits is how many whole each fit in free (0 when free is not positive).
func fits(free, each resource.Quantity) int {
	if free.Sign() <= 0 || each.Sign() <= 0 {
		return 0
	}
	return int(free.MilliValue() / each.MilliValue())
}

// selects says whether labels match every key of selector.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// tolerated says whether tolerations tolerate every NoSchedule and NoExecute taint.
func tolerated(taints []corev1.Taint, tolerations []corev1.Toleration) bool {
	for i := range taints {
		t := &taints[i]
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		ok := false
		for j := range tolerations {
			if tolerates(&tolerations[j], t) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// tolerates says whether tl tolerates t, as the scheduler matches them: the same effect (or
// none given), and the same key and value (Equal) or key (Exists; an empty key with Exists
// tolerates every taint).
func tolerates(tl *corev1.Toleration, t *corev1.Taint) bool {
	if tl.Effect != "" && tl.Effect != t.Effect {
		return false
	}
	if tl.Key != "" && tl.Key != t.Key {
		return false
	}
	switch tl.Operator {
	case corev1.TolerationOpExists:
		return true
	case corev1.TolerationOpEqual, "":
		return tl.Key != "" && tl.Value == t.Value
	}
	return false
}
