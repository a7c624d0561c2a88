package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/runtime/boxspec"
	"github.com/sandpit-dev/sandpit/internal/runtime/kubernetes"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Sandboxes is what the app needs of a runtime, the Docker one or the Kubernetes one: runs in
// slots, sessions, installed packages, and how warm and how often reset the slots are.
type Sandboxes interface {
	sandbox.Runtime
	sandbox.SessionOpener
	AllReady(ctx context.Context) error
	Warmth() sandbox.Warmth
	Resets() int64
	ListPackages(ctx context.Context) ([]protocol.Package, error)
	RemovePackage(ctx context.Context, name string) ([]protocol.Package, error)
	Close() error
}

// leaseAccess is what the Kubernetes runtime does to its owner objects, the daemons' Leases.
var leaseAccess = kubernetes.Access{Group: "coordination.k8s.io", Resource: "leases",
	Verbs: []string{"get", "list", "create", "update", "delete"}}

// sandboxSelector selects every sandbox pod sandpit makes: the NetworkPolicy's selector.
var sandboxSelector = map[string]string{kubernetes.LabelManaged: "1"}

// KubernetesConfig derives the Kubernetes runtime's configuration from cfg (runtime
// "kubernetes"); daemon is the daemon's ID (store.Daemon). The pod template file is read
// here. Preflight is left for the caller.
func KubernetesConfig(cfg config.Config, daemon string) (kubernetes.Config, error) {
	k := cfg.Kubernetes
	reqCPUs, reqMemory := cfg.PodRequests()
	rc := kubernetes.Config{
		Kubeconfig:       k.Kubeconfig,
		Namespace:        k.Namespace,
		Image:            k.Image,
		ImagePullPolicy:  corev1.PullPolicy(k.ImagePullPolicy),
		RuntimeClassName: k.RuntimeClassName,
		GVisor:           strings.Contains(k.RuntimeClassName, "gvisor") || strings.Contains(k.RuntimeClassName, "runsc"),
		NodeSelector:     maps.Clone(k.NodeSelector),
		Tolerations:      tolerations(k.Tolerations),
		Box: kubernetes.Box{
			MemoryBytes:        cfg.MemoryBytes,
			NanoCPUs:           cfg.NanoCPUs(),
			RequestMemoryBytes: reqMemory,
			RequestNanoCPUs:    int64(math.Round(reqCPUs * 1e9)),
			PidsLimit:          cfg.PidsLimit,
			TmpBytes:           cfg.TmpBytes,
			RunDirBytes:        cfg.RunDirBytes,
			Network:            cfg.Network,
		},
		Slots:        cfg.Slots,
		UIDBlock:     boxspec.UIDBlock(cfg.UIDBlock),
		WarmSessions: min(k.WarmSessions, cfg.SessionsMax),
		DaemonID:     daemon,
		ReadyWait:    30 * time.Second,
		Pip:          pipOptions(cfg),
		ForkServer:   forkServer(cfg),
	}
	if k.PodTemplateFile == "" {
		return rc, nil
	}
	o, err := config.LoadPodOverrides(k.PodTemplateFile)
	if err != nil {
		return rc, fmt.Errorf("kubernetes.pod_template_file: %w", err)
	}
	rc.PodLabels, rc.PodAnnotations, rc.PriorityClassName = o.Labels, o.Annotations, o.PriorityClassName
	if rc.NodeSelector == nil && len(o.NodeSelector) > 0 {
		rc.NodeSelector = map[string]string{}
	}
	maps.Copy(rc.NodeSelector, o.NodeSelector) // the file's over the configuration's
	if len(o.Affinity) > 0 {
		rc.Affinity = new(corev1.Affinity)
		if err := strictJSON(o.Affinity, rc.Affinity); err != nil {
			return rc, fmt.Errorf("kubernetes.pod_template_file %s: spec.affinity: %w", k.PodTemplateFile, err)
		}
	}
	if len(o.Tolerations) > 0 {
		var more []corev1.Toleration
		if err := strictJSON(o.Tolerations, &more); err != nil {
			return rc, fmt.Errorf("kubernetes.pod_template_file %s: spec.tolerations: %w", k.PodTemplateFile, err)
		}
		rc.Tolerations = append(rc.Tolerations, more...)
	}
	return rc, nil
}

// strictJSON decodes raw into v, refusing unknown fields.
func strictJSON(raw []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func tolerations(ts []config.Toleration) []corev1.Toleration {
	var out []corev1.Toleration
	for _, t := range ts {
		out = append(out, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value,
			Effect: corev1.TaintEffect(t.Effect), TolerationSeconds: t.TolerationSeconds})
	}
	return out
}

// kubernetesPreflight is the checks the Kubernetes runtime runs at start (kubernetes.CheckStart:
// the API, the namespace, RBAC, the image) and, unless network is "full", the deny-all
// NetworkPolicy of the sandbox pods, created or updated.
func kubernetesPreflight(cfg config.Config, rcfg kubernetes.Config, log *slog.Logger) func(context.Context, k8s.Interface, *rest.Config) error {
	return func(ctx context.Context, client k8s.Interface, rc *rest.Config) error {
		_, source, _ := kubernetes.ClusterConfig(rcfg.Kubeconfig)
		err := kubernetes.CheckStart(ctx, client, kubernetes.Preflight{
			Host: rc.Host, Source: source, Namespace: rcfg.Namespace, Owner: leaseAccess,
			Image: rcfg.Image, PullPolicy: rcfg.ImagePullPolicy, RuntimeClassName: rcfg.RuntimeClassName,
			NodeSelector: rcfg.NodeSelector, Tolerations: rcfg.Tolerations, Labels: sandboxSelector,
		})
		if err != nil {
			return err
		}
		if cfg.Network == sandbox.NetworkFull {
			return nil
		}
		changed, err := kubernetes.EnsureNetworkPolicy(ctx, client, rcfg.Namespace, sandboxSelector)
		if err != nil {
			return fmt.Errorf("%w; the sandbox pods must have no network of their own (network %q)", err, cfg.Network)
		}
		if changed {
			log.Info("the sandbox pods' deny-all NetworkPolicy was created or updated", "namespace", rcfg.Namespace,
				"policy", kubernetes.NetworkPolicyName)
		}
		return nil
	}
}

// startKubernetes starts the Kubernetes runtime for cfg, with the start checks.
func startKubernetes(ctx context.Context, cfg config.Config, daemon string, log *slog.Logger) (*kubernetes.Runtime, error) {
	rcfg, err := KubernetesConfig(cfg, daemon)
	if err != nil {
		return nil, err
	}
	rcfg.Preflight = kubernetesPreflight(cfg, rcfg, log)
	rt, err := kubernetes.Start(ctx, rcfg, log)
	if err != nil {
		return nil, fmt.Errorf("starting the kubernetes runtime: %w", err)
	}
	return rt, nil
}

// KubernetesSandbox is what a data directory's daemon left in the cluster (runtime
// "kubernetes"): its pods and its Lease.
type KubernetesSandbox struct {
	// Namespace is kubernetes.namespace; Daemon is the daemon's label-safe name, "" when the
	// data directory has no daemon ID yet (no daemon ran there, and daemon_id is not set).
	Namespace, Daemon string
	// Pods are the daemon's pods: ID is the pod's name, State its phase, Slot -1 for a
	// session's.
	Pods []ContainerStatus
	// Lease is the daemon's Lease's name, "" when there is none; LeaseHeld says it was
	// renewed within its duration (the daemon runs), LeaseReleased that its daemon stopped
	// cleanly and gave it up, and Renewed when it last was renewed.
	Lease         string
	LeaseHeld     bool
	LeaseReleased bool
	Renewed       time.Time
}

// SandboxPods lists the pods and the Lease of cfg's daemon (daemon_id, or the ID kept in the
// data directory) in kubernetes.namespace, as `sandpit sandbox status` shows them.
func SandboxPods(ctx context.Context, cfg config.Config) (KubernetesSandbox, error) {
	out := KubernetesSandbox{Namespace: cfg.Kubernetes.Namespace}
	id, err := storedDaemonID(cfg)
	if err != nil || id == "" {
		return out, err
	}
	out.Daemon = kubernetes.DaemonName(id)
	client, err := kubernetesClient(ctx, cfg)
	if err != nil {
		return out, err
	}
	got, err := kubernetes.ListDaemon(ctx, client, out.Namespace, id)
	if err != nil {
		return out, err
	}
	for _, p := range got.Pods {
		slot := -1
		if p.Labels[kubernetes.LabelRole] == kubernetes.RoleSlot {
			if n, err := strconv.Atoi(p.Labels[kubernetes.LabelSlot]); err == nil {
				slot = n
			}
		}
		var image string
		if len(p.Spec.Containers) > 0 {
			image = p.Spec.Containers[0].Image
		}
		out.Pods = append(out.Pods, ContainerStatus{ID: p.Name, State: string(p.Status.Phase), Image: image,
			Created: p.CreationTimestamp.Time, Slot: slot})
	}
	if l := got.Lease; l != nil {
		out.Lease, out.LeaseHeld, out.LeaseReleased = l.Name, kubernetes.LeaseHeld(l), kubernetes.LeaseReleased(l)
		out.Renewed = l.CreationTimestamp.Time
		if l.Spec.RenewTime != nil {
			out.Renewed = l.Spec.RenewTime.Time
		}
	}
	return out, nil
}

// removeKubernetesSandbox deletes the pods and the Lease of dir's daemon (see SandboxPods);
// the caller holds dir's lock.
func removeKubernetesSandbox(ctx context.Context, cfg config.Config) (Removed, error) {
	var out Removed
	id, err := storedDaemonID(cfg)
	if err != nil || id == "" {
		return out, err
	}
	client, err := kubernetesClient(ctx, cfg)
	if err != nil {
		return out, err
	}
	pods, lease, err := kubernetes.RemoveDaemon(ctx, client, cfg.Kubernetes.Namespace, id)
	out.Containers = pods
	if lease {
		out.Lease = "sandpit-daemon-" + kubernetes.DaemonName(id)
	}
	return out, err
}

// kubernetesClient is a client of the cluster cfg's kubernetes object names, once its API
// answers (kubernetes.CheckAPI's error otherwise, which says what to check).
func kubernetesClient(ctx context.Context, cfg config.Config) (k8s.Interface, error) {
	rc, source, err := kubernetes.ClusterConfig(cfg.Kubernetes.Kubeconfig)
	if err != nil {
		return nil, err
	}
	client, err := k8s.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("configuring the Kubernetes client: %w", err)
	}
	if _, err := kubernetes.CheckAPI(ctx, client, rc.Host, source); err != nil {
		return nil, err
	}
	return client, nil
}

// capacityOf is the Kubernetes runtime's capacity in the API's words.
func capacityOf(krt *kubernetes.Runtime) func(context.Context) apitype.Capacity {
	return func(ctx context.Context) apitype.Capacity {
		c, err := krt.Capacity(ctx)
		out := apitype.Capacity{Bound: c.Bound, NodesUnknown: c.NodesUnknown}
		if c.Fit >= 0 {
			out.Fit = &c.Fit
		}
		if err != nil {
			out.Error = err.Error()
		}
		return out
	}
}
