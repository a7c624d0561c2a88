package kubernetes

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/sandpit-dev/sandpit/internal/runtime/boxspec"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// ContainerName is the name of the sandbox container in every pod.
const ContainerName = "sandbox"

func (r *Runtime) pods() typedcorev1.PodInterface { return r.client.CoreV1().Pods(r.cfg.Namespace) }

// podSpec is every sandbox pod's spec: one container running `sleep infinity` from the sandbox
// image as root (the executor switches to the slot's uid for each run: runAsNonRoot cannot
// hold), read-only root, every capability dropped but boxspec.Capabilities, no privilege
// escalation, the runtime's default seccomp profile (or sandpit's, installed on the nodes),
// /tmp, /sandbox and the session home as memory-backed emptyDirs of the box's sizes, memory and
// CPU limits of the box and requests of what it reserves (see Box), no service account token, no service links, no host
// namespaces or paths. The pod's process namespace is shared with the pause container, which
// reaps the orphans of runs (Docker's init does so in the Docker runtime).
func (r *Runtime) podSpec() corev1.PodSpec {
	b := r.cfg.Box
	memory := b.MemoryBytes
	if r.cfg.GVisor && memory > 0 {
		memory += boxspec.RunscMemoryReserve
	}
	list := func(memory, nanoCPUs int64) corev1.ResourceList {
		res := corev1.ResourceList{}
		if memory > 0 {
			res[corev1.ResourceMemory] = *resource.NewQuantity(memory, resource.BinarySI)
		}
		if nanoCPUs > 0 {
			res[corev1.ResourceCPU] = *resource.NewMilliQuantity(max(nanoCPUs/1e6, 1), resource.DecimalSI)
		}
		return res
	}
	limits := list(memory, b.NanoCPUs)
	requests := list(cmp.Or(min(b.RequestMemoryBytes, memory), memory), cmp.Or(min(b.RequestNanoCPUs, b.NanoCPUs), b.NanoCPUs))
	mem := func(name string, bytes int64) corev1.Volume {
		v := corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}
		if bytes > 0 {
			v.EmptyDir.SizeLimit = resource.NewQuantity(bytes, resource.BinarySI)
		}
		return v
	}
	pkgBytes := b.PackagesBytes
	if pkgBytes <= 0 {
		pkgBytes = 1 << 30
	}
	caps := make([]corev1.Capability, len(boxspec.Capabilities))
	for i, c := range boxspec.Capabilities {
		caps[i] = corev1.Capability(c)
	}
	seccomp := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	if r.cfg.SeccompLocalhostProfile != "" {
		seccomp = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &r.cfg.SeccompLocalhostProfile}
	}
	spec := corev1.PodSpec{
		Containers: []corev1.Container{{
			Name:            ContainerName,
			Image:           r.cfg.Image,
			ImagePullPolicy: r.cfg.ImagePullPolicy,
			Command:         []string{"sleep", "infinity"},
			WorkingDir:      "/sandbox",
			Resources:       corev1.ResourceRequirements{Limits: limits, Requests: requests},
			SecurityContext: &corev1.SecurityContext{
				RunAsUser:                ptr(int64(0)),
				RunAsNonRoot:             ptr(false),
				ReadOnlyRootFilesystem:   ptr(true),
				AllowPrivilegeEscalation: ptr(false),
				Privileged:               ptr(false),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: caps},
				SeccompProfile:           seccomp,
			},
			VolumeMounts: []corev1.VolumeMount{
				{Name: "tmp", MountPath: "/tmp"},
				{Name: "rundir", MountPath: "/sandbox"},
				{Name: "home", MountPath: sandbox.SessionHome},
				{Name: "packages", MountPath: boxspec.PackagesDir},
			},
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		}},
		Volumes: []corev1.Volume{
			mem("tmp", b.TmpBytes),
			mem("rundir", b.RunDirBytes),
			mem("home", b.RunDirBytes),
			{Name: "packages", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
				SizeLimit: resource.NewQuantity(pkgBytes, resource.BinarySI)}}},
		},
		RestartPolicy:                 corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: ptr(int64(1)),
		AutomountServiceAccountToken:  ptr(false),
		EnableServiceLinks:            ptr(false),
		ShareProcessNamespace:         ptr(true),
		HostNetwork:                   false,
		HostPID:                       false,
		HostIPC:                       false,
		NodeSelector:                  r.cfg.NodeSelector,
		Tolerations:                   r.cfg.Tolerations,
		Affinity:                      r.cfg.Affinity,
		PriorityClassName:             r.cfg.PriorityClassName,
		SecurityContext: &corev1.PodSecurityContext{
			SeccompProfile: seccomp,
		},
	}
	// Sandboxes spread over the nodes where the rest allows (a soft rule): a node lost takes
	// as few of them as it can. Counted per namespace, by the label every sandbox pod has.
	spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
		WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelManaged: "1"}}}}
	if b.SocketSysctls {
		spec.SecurityContext.Sysctls = []corev1.Sysctl{
			{Name: "net.ipv4.tcp_rmem", Value: "4096 131072 " + strconv.Itoa(boxspec.SocketBufferMax)},
			{Name: "net.ipv4.tcp_wmem", Value: "4096 16384 " + strconv.Itoa(boxspec.SocketBufferMax)},
		}
	}
	if b.Network == "none" || b.Network == "allowlist" {
		// No resolver: names resolve through the egress proxy (allowlist) or not at all.
		spec.DNSPolicy = corev1.DNSNone
		spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1"}}
	} else {
		spec.DNSPolicy = corev1.DNSDefault
	}
	if r.cfg.RuntimeClassName != "" {
		spec.RuntimeClassName = &r.cfg.RuntimeClassName
	}
	for _, s := range r.cfg.ImagePullSecrets {
		spec.ImagePullSecrets = append(spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	return spec
}

// configHash is a hash of the pod template: pods of another template are not adopted, claimed
// or kept.
func (r *Runtime) configHash() string {
	r.hashOnce.Do(func() { r.hash = r.computeHash() })
	return r.hash
}

func (r *Runtime) computeHash() string {
	raw, _ := json.Marshal(r.podSpec())
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])[:16]
}

// newPod returns a pod of the template for role, with labels (added to the daemon's).
func (r *Runtime) newPod(role string, labels map[string]string) *corev1.Pod {
	l := map[string]string{}
	for k, v := range r.cfg.PodLabels {
		l[k] = v
	}
	for k, v := range map[string]string{LabelManaged: "1", LabelDaemon: r.daemon, LabelRole: role, LabelConfig: r.configHash()} {
		l[k] = v
	}
	for k, v := range labels {
		l[k] = v
	}
	prefix := "sandpit-" + r.daemon + "-"
	if role == RoleSlot {
		prefix += "slot" + labels[LabelSlot] + "-"
	} else {
		prefix += "sess-"
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    prefix,
			Labels:          l,
			Annotations:     r.cfg.PodAnnotations,
			OwnerReferences: []metav1.OwnerReference{r.ownerReference()},
		},
		Spec: r.podSpec(),
	}
}

// createPod creates pod and waits until its container runs; a pod that does not get there in
// PodReadyTimeout is deleted. With refuse (a request waits for it), one the scheduler places
// on no node for UnschedulableWait, or the quota refuses, is a *sandbox.NoRoomError; without
// (the daemon's own slots and warm pool), it waits its whole time for room.
//
// A pod placed on a node that then goes silent (see waitRunning) is deleted and made again, up
// to twice, within the same PodReadyTimeout: the scheduler no longer places pods on a node
// marked not Ready, so the next goes to one that answers.
func (r *Runtime) createPod(ctx context.Context, pod *corev1.Pod, refuse bool) (*corev1.Pod, error) {
	wctx, cancel := context.WithTimeout(ctx, r.cfg.PodReadyTimeout)
	defer cancel()
	for try := 1; ; try++ {
		created, err := r.pods().Create(ctx, pod, metav1.CreateOptions{})
		if refuse && apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota") {
			return nil, r.noRoom(ctx, fmt.Sprintf("the namespace %s's ResourceQuota refused the pod (%v)", r.cfg.Namespace, err))
		}
		if err != nil {
			return nil, fmt.Errorf("creating a sandbox pod in namespace %s: %w", r.cfg.Namespace, err)
		}
		running, err := r.waitRunning(wctx, created, refuse)
		if err == nil {
			return running, nil
		}
		_ = r.deletePod(context.WithoutCancel(ctx), created.Name)
		if u, ok := errors.AsType[*noNodeError](err); ok {
			return nil, r.noRoom(ctx, fmt.Sprintf("no node took the pod for %s; the scheduler says %q", r.cfg.UnschedulableWait, u.message))
		}
		if _, lost := errors.AsType[*nodeLostError](err); lost && try < 3 && wctx.Err() == nil {
			r.log.Warn("the node of a starting sandbox pod stopped answering; making the pod again", "pod", created.Name, "error", err)
			continue
		}
		return nil, fmt.Errorf("sandbox pod %s: %w", created.Name, err)
	}
}

// nodeLostError is waitRunning's error for a pod whose node is not Ready.
type nodeLostError struct{ node, why string }

func (e *nodeLostError) Error() string { return "node " + e.node + " " + e.why }

// noNodeError is waitRunning's error for a pod the scheduler placed on no node for
// UnschedulableWait; message is its reason.
type noNodeError struct{ message string }

func (e *noNodeError) Error() string { return "no node took the pod: " + e.message }

// noRoom is the *sandbox.NoRoomError of why, with how many sandboxes fit now (ReadCapacity;
// left out when it cannot be read).
func (r *Runtime) noRoom(ctx context.Context, why string) error {
	e := &sandbox.NoRoomError{Why: why, Fix: "close or hibernate a session and retry, or give the sandboxes more room: lower kubernetes.requests, add nodes, " +
		"or raise the namespace's ResourceQuota (`sandpit doctor` says how many fit and what bounds them)"}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	c, err := ReadCapacity(rctx, r.client, r.cfg.Namespace, SandboxResources(r.cfg), r.cfg.NodeSelector, r.cfg.Tolerations)
	switch {
	case err != nil || c.Fit < 0:
	case c.Fit == 0 && c.Bound != "":
		e.Room = "none fits, bound by " + c.Bound
	case c.Fit == 0:
		e.Room = "none fits"
	default:
		// The scheduler saw less room than the daemon reads (pods just ended, or spread).
		e.Room = fmt.Sprintf("%d more fit by the nodes' and quota's numbers now", c.Fit)
	}
	return e
}

// waitRunning watches pod until its sandbox container runs, and fails at once when it cannot
// (the pod failed, the image cannot be pulled, the kubelet refused the pod), within 5 s of its
// node turning not Ready (its kubelet stopped reporting), or, with refuse,
// with a *noNodeError once the scheduler has placed it on no node for UnschedulableWait: a
// request must not wait minutes for room that may never come.
func (r *Runtime) waitRunning(ctx context.Context, pod *corev1.Pod, refuse bool) (*corev1.Pod, error) {
	var noRoom <-chan time.Time // fires UnschedulableWait after the scheduler first said no
	var stopNoRoom func() bool
	defer func() {
		if stopNoRoom != nil {
			stopNoRoom()
		}
	}()
	nodeCheck := time.NewTicker(5 * time.Second)
	defer nodeCheck.Stop()
	watchRoom := func() {
		switch ok := refuse && unschedulable(pod) != nil; {
		case ok && noRoom == nil:
			t := time.NewTimer(r.cfg.UnschedulableWait)
			noRoom, stopNoRoom = t.C, t.Stop
		case !ok && noRoom != nil:
			stopNoRoom()
			noRoom, stopNoRoom = nil, nil
		}
	}
	for {
		watchRoom()
		if done, err := podRunning(pod); done || err != nil {
			return pod, err
		}
		w, err := r.pods().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String(),
			ResourceVersion: pod.ResourceVersion})
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("not running after %s (%w)", r.cfg.PodReadyTimeout, ctx.Err())
			}
			return nil, fmt.Errorf("watching the pod: %w", err)
		}
		restart := false
		for !restart {
			select {
			case <-ctx.Done():
				w.Stop()
				return nil, fmt.Errorf("not running after %s: %s (%w)", r.cfg.PodReadyTimeout, podState(pod), ctx.Err())
			case <-noRoom:
				w.Stop()
				return nil, &noNodeError{message: unschedulable(pod).Message}
			case <-nodeCheck.C:
				// A pod placed on a node that stopped answering never starts, and nothing
				// about the pod says so until its eviction, minutes later.
				if pod.Spec.NodeName != "" {
					if err := r.nodeNotReady(ctx, pod.Spec.NodeName); err != nil {
						w.Stop()
						return nil, err
					}
				}
			case ev, ok := <-w.ResultChan():
				if !ok {
					restart = true // the watch ended: look again from the last version seen
					break
				}
				switch ev.Type {
				case watch.Deleted:
					w.Stop()
					return nil, errors.New("deleted while starting")
				case watch.Error:
					restart = true
					if st, ok := ev.Object.(*metav1.Status); ok && st.Code == 410 { // too old: read it again
						got, err := r.pods().Get(ctx, pod.Name, metav1.GetOptions{})
						if err != nil {
							w.Stop()
							return nil, err
						}
						pod = got
					}
				case watch.Added, watch.Modified:
					if p, ok := ev.Object.(*corev1.Pod); ok {
						pod = p
						watchRoom()
						if done, err := podRunning(pod); done || err != nil {
							w.Stop()
							return pod, err
						}
					}
				}
			}
		}
		w.Stop()
	}
}

// podRunning reports whether pod's sandbox container runs, or an error when it never will.
func podRunning(pod *corev1.Pod) (bool, error) {
	if pod.DeletionTimestamp != nil {
		return false, errors.New("the pod is being deleted")
	}
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return false, fmt.Errorf("the pod stopped: %s", podState(pod))
	}
	for _, c := range pod.Status.ContainerStatuses {
		if c.Name != ContainerName {
			continue
		}
		if c.State.Running != nil {
			return pod.Status.Phase == corev1.PodRunning, nil
		}
		if w := c.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
				return false, fmt.Errorf("the container cannot start: %s: %s", w.Reason, w.Message)
			case "ErrImagePull", "ImagePullBackOff":
				return false, fmt.Errorf("the image cannot be pulled: %s: %s", w.Reason, w.Message)
			}
		}
		if c.State.Terminated != nil {
			return false, fmt.Errorf("the container stopped: %s", podState(pod))
		}
	}
	return false, nil // Unschedulable may pass (a node frees room): waitRunning decides
}

// podState says in a few words where pod stands, for errors.
func podState(pod *corev1.Pod) string {
	var parts []string
	parts = append(parts, "phase "+string(pod.Status.Phase))
	if pod.Status.Reason != "" {
		parts = append(parts, "reason "+pod.Status.Reason)
	}
	if pod.Status.Message != "" {
		parts = append(parts, pod.Status.Message)
	}
	for _, c := range pod.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil:
			parts = append(parts, fmt.Sprintf("container waiting: %s %s", c.State.Waiting.Reason, c.State.Waiting.Message))
		case c.State.Terminated != nil:
			parts = append(parts, fmt.Sprintf("container terminated: %s, exit code %d", c.State.Terminated.Reason, c.State.Terminated.ExitCode))
		}
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Status == corev1.ConditionFalse && cond.Message != "" {
			parts = append(parts, fmt.Sprintf("%s: %s", cond.Type, cond.Message))
		}
	}
	return strings.Join(parts, "; ")
}

// deletePod deletes pod name at once (no grace); one already gone is not an error.
func (r *Runtime) deletePod(ctx context.Context, name string) error {
	err := r.pods().Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting pod %s: %w", name, err)
	}
	return nil
}

// whatStopped says whether the pod or only the executor stopped, for a run's reason, and
// whether the node killed the container for memory. A killed container can still read as
// running for a moment after its stream broke, so it looks again for up to a second before it
// blames the executor.
func (r *Runtime) whatStopped(name string) (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for deadline := time.Now().Add(time.Second); ; time.Sleep(100 * time.Millisecond) {
		pod, err := r.pods().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return "the sandbox pod disappeared during the run", false
		case err != nil:
			return "the connection to the Kubernetes API was lost during the run", false
		case pod.DeletionTimestamp != nil:
			return "the sandbox pod was deleted during the run", false
		}
		for _, c := range pod.Status.ContainerStatuses {
			if t := c.State.Terminated; c.Name == ContainerName && t != nil {
				return fmt.Sprintf("the sandbox pod's container stopped during the run (%s, exit code %d)", t.Reason, t.ExitCode),
					t.Reason == "OOMKilled"
			}
		}
		if time.Now().After(deadline) {
			if lost := r.nodeLost(context.Background(), pod); lost != nil {
				return "the sandbox pod's " + lost.Error(), false
			}
			return "the executor in the sandbox pod stopped during the run", false
		}
	}
}

// nodeLost returns why the node of running pod cannot serve it, or nil when it answers: the
// node not Ready (the controller-manager marks a node whose kubelet stopped reporting after its
// node-monitor-grace-period, 40 s by default), or, before that, an exec of `true` in the pod
// that fails to reach the kubelet within 5 s (a kubelet killed, a node cut off).
func (r *Runtime) nodeLost(ctx context.Context, pod *corev1.Pod) error {
	name := pod.Spec.NodeName
	if name == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.nodeNotReady(ctx, name); err != nil {
		return err
	}
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	err := r.execOnce(pctx, pod.Name, []string{"true"}, nil, io.Discard)
	if _, exited := errors.AsType[*boxspec.ExitError](err); err == nil || exited {
		return nil
	}
	// The error holds the kubelet's address and the pod's path: the daemon's log has it, the
	// agent's reason only the node.
	r.log.Warn("a sandbox pod's node did not answer an exec", "pod", pod.Name, "node", name, "error", err)
	if pctx.Err() != nil {
		return fmt.Errorf("node %s did not answer within 5 s", name)
	}
	return fmt.Errorf("node %s did not answer", name)
}

// nodeNotReady returns why node name is not Ready, or nil when it is (or cannot be read).
func (r *Runtime) nodeNotReady(ctx context.Context, name string) error {
	node, err := r.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return &nodeLostError{node: name, why: "was removed from the cluster"}
	}
	if err != nil {
		return nil
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return &nodeLostError{node: name, why: fmt.Sprintf("is not ready (%s: %s)", c.Reason, c.Message)}
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
