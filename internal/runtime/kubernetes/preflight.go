package kubernetes

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/discovery"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Access is what the daemon needs to do to one kind of object in its namespace: the API group
// ("" for the core group), the resource ("pods"), an optional subresource ("exec") and the
// verbs ("create", "get", ...).
type Access struct {
	Group, Resource, Subresource string
	Verbs                        []string
}

// String names the resource as RBAC rules do: "pods", "pods/exec",
// "networkpolicies.networking.k8s.io".
func (a Access) String() string {
	s := a.Resource
	if a.Subresource != "" {
		s += "/" + a.Subresource
	}
	if a.Group != "" {
		s += "." + a.Group
	}
	return s
}

// RequiredAccess returns every permission the runtime needs in its namespace: pods (create,
// get, list, watch, update, patch, delete), pods/exec (create, and get: client-go's WebSocket
// exec is a GET), networkpolicies (get, create, update), and owner, the kind of the per-daemon
// owner objects (its Resource empty: none).
func RequiredAccess(owner Access) []Access {
	out := []Access{
		{Resource: "pods", Verbs: []string{"create", "get", "list", "watch", "update", "patch", "delete"}},
		{Resource: "pods", Subresource: "exec", Verbs: []string{"create", "get"}},
		{Group: "networking.k8s.io", Resource: "networkpolicies", Verbs: []string{"get", "create", "update"}},
	}
	if owner.Resource != "" {
		out = append(out, owner)
	}
	return out
}

// ClusterConfig returns the client configuration for kubeconfig (a kubeconfig file's path,
// using its current context) or, when it is empty, the in-cluster service account, and a
// description of where it came from for error messages ("kubeconfig /path (context c)" or
// "in-cluster service account").
func ClusterConfig(kubeconfig string) (*rest.Config, string, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, "in-cluster service account", fmt.Errorf("kubernetes.kubeconfig is empty, so the in-cluster service account is used, "+
				"but %w; run the daemon in a pod, or set kubernetes.kubeconfig to a kubeconfig file", err)
		}
		return cfg, "in-cluster service account", nil
	}
	if _, err := os.Stat(kubeconfig); err != nil {
		return nil, "kubeconfig " + kubeconfig, fmt.Errorf("kubernetes.kubeconfig: %w", err)
	}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}, &clientcmd.ConfigOverrides{})
	source := "kubeconfig " + kubeconfig
	if raw, err := loader.RawConfig(); err == nil && raw.CurrentContext != "" {
		source += " (context " + raw.CurrentContext + ")"
	}
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, source, fmt.Errorf("reading %s: %w", source, err)
	}
	return cfg, source, nil
}

// Preflight is what CheckStart verifies before the runtime starts pods.
type Preflight struct {
	// Host is the API server's address, and Source where the client configuration came from
	// (ClusterConfig's description): both are named when the API does not answer.
	Host, Source string
	// Namespace is the namespace of the daemon's pods.
	Namespace string
	// Owner is the kind of the per-daemon owner objects, with the verbs the runtime uses on it.
	Owner Access
	// Image, PullPolicy and RuntimeClassName are those of the sandbox pods; the image probe
	// pod uses them. Image "" skips the image probe.
	Image            string
	PullPolicy       corev1.PullPolicy
	RuntimeClassName string
	// NodeSelector and Tolerations place the probe pod as the sandbox pods are placed.
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	// Labels are put on the probe pods (the sandbox pods' NetworkPolicy selects them).
	Labels map[string]string
	// ProbeTimeout bounds how long the image probe waits for its pod to pull the image and
	// start. Default 3 minutes.
	ProbeTimeout time.Duration
	// UnschedulableWait is how long the probe waits once the scheduler has said no node can
	// take its pod (a node may free room, or be added) before it answers so. Default 15 s.
	UnschedulableWait time.Duration
}

// CheckStart checks, in order, that the API answers, that the namespace exists, that the
// daemon may do all it needs there (RBAC), and that the image can be pulled (a short-lived
// probe pod). It returns the first problem found, as an error that names what is missing and
// how to fix it.
func CheckStart(ctx context.Context, cs k8s.Interface, p Preflight) error {
	if _, err := CheckAPI(ctx, cs, p.Host, p.Source); err != nil {
		return err
	}
	if err := CheckNamespace(ctx, cs, p.Namespace); err != nil {
		return err
	}
	if err := CheckAccess(ctx, cs, p.Namespace, RequiredAccess(p.Owner)); err != nil {
		return err
	}
	if p.Image == "" {
		return nil
	}
	if running, err := podRunningImage(ctx, cs, p); err == nil && running {
		// A pod of sandpit's runs the image already: a restarted daemon's own pods, which it
		// adopts after these checks, may fill the nodes, and a probe would find no room.
		return nil
	}
	return ProbeImage(ctx, cs, p)
}

// podRunningImage reports whether a pod of p.Labels in p.Namespace runs p.Image now (its
// container started: the image is on a node and starts there).
func podRunningImage(ctx context.Context, cs k8s.Interface, p Preflight) (bool, error) {
	list, err := cs.CoreV1().Pods(p.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(p.Labels).String(), ResourceVersion: "0"})
	if err != nil {
		return false, err
	}
	for _, pod := range list.Items {
		if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, c := range pod.Spec.Containers {
			for _, st := range pod.Status.ContainerStatuses {
				if c.Image == p.Image && st.Name == c.Name && st.State.Running != nil {
					return true, nil
				}
			}
		}
	}
	return false, nil
}

// CheckAPI asks the API server its version (such as "v1.32.13"). An error names host and
// source and says what to check.
func CheckAPI(ctx context.Context, cs k8s.Interface, host, source string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	v, err := discovery.ToServerVersionInterfaceWithContext(cs.Discovery()).ServerVersionWithContext(ctx)
	if err != nil {
		var hint string
		switch {
		case IsCertificateError(err):
			return "", fmt.Errorf("the Kubernetes API at %s (from the %s) answers with a certificate this client does not trust: %w; %s",
				host, source, err, certificateHint(err, source))
		case apierrors.IsUnauthorized(err):
			hint = "the API server refused the credentials: the kubeconfig's user or the service account token is not valid there"
		case apierrors.IsForbidden(err):
			hint = "the credentials are not allowed to read /version: grant the system:public-info-viewer or system:discovery ClusterRole"
		default:
			hint = "check that the cluster is up and this machine reaches that address (a firewall, a VPN, the kubeconfig's server URL)"
		}
		return "", fmt.Errorf("the Kubernetes API at %s (from the %s) does not answer: %w; %s", host, source, err, hint)
	}
	return v.GitVersion, nil
}

// IsCertificateError says whether err (such as CheckAPI's) is a TLS failure to verify the API
// server's certificate.
func IsCertificateError(err error) bool {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	return errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid) || errors.As(err, &verify) ||
		strings.Contains(err.Error(), "x509: ")
}

// certificateHint says what to check for the certificate error err, given where the client
// configuration came from (ClusterConfig's description).
func certificateHint(err error, source string) string {
	var host x509.HostnameError
	if errors.As(err, &host) || strings.Contains(err.Error(), "x509: certificate is valid for") {
		return "the server URL's host name is not one the certificate names: use one it does (kubectl config view shows the URL), " +
			"or reissue the API server's certificate with that name"
	}
	if strings.HasPrefix(source, "in-cluster") {
		return "the service account's CA (/var/run/secrets/kubernetes.io/serviceaccount/ca.crt) must be the one that signed " +
			"the API server's certificate"
	}
	return "check the kubeconfig's certificate-authority-data (or certificate-authority) for this cluster: it must be the CA " +
		"that signed the API server's certificate (a self-signed server's own certificate); " +
		"`kubectl config view --raw` shows it, and the cluster's admin kubeconfig has the right one"
}

// CheckNamespace checks that namespace ns exists. The daemon's Role is namespaced and may not
// read namespaces, so when reading it is forbidden a server-side dry run of a pod's creation
// tells instead. When that is forbidden too and the credentials may not create pods there (a
// SelfSubjectAccessReview), the namespace cannot be told from one the credentials have no
// Role in: the error says it does not exist or these credentials cannot see it, and how to
// fix either.
func CheckNamespace(ctx context.Context, cs k8s.Interface, ns string) error {
	missing := fmt.Errorf("the namespace %q (kubernetes.namespace) does not exist; create it (kubectl create namespace %s) "+
		"and the daemon's Role and RoleBinding in it (deploy/kubernetes/, docs/kubernetes.md), or name another", ns, ns)
	_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return missing
	case !apierrors.IsForbidden(err):
		return fmt.Errorf("reading the namespace %q: %w", ns, err)
	}
	pod := probePod(Preflight{Namespace: ns, Image: "sandpit.invalid/namespace-check"}, "sandpit-preflight-ns-")
	_, err = cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case apierrors.IsNotFound(err):
		return missing
	case !apierrors.IsForbidden(err):
		return nil // refused otherwise (admission, validation): the namespace is there
	}
	denied, aerr := MissingAccess(ctx, cs, ns, []Access{{Resource: "pods", Verbs: []string{"create"}}})
	if aerr != nil || len(denied) == 0 {
		return nil // an admission refusal (a quota, a namespace being deleted): the probes say more
	}
	return fmt.Errorf("the namespace %q (kubernetes.namespace) does not exist or these credentials cannot see it "+
		"(they may neither read the namespace nor create pods in it: %v); create it (kubectl create namespace %s) "+
		"and the daemon's Role and RoleBinding in it (deploy/kubernetes/, docs/kubernetes.md), "+
		"or set kubernetes.namespace to the namespace the daemon's Role is in", ns, err, ns)
}

// CheckAccess asks the API server (SelfSubjectAccessReview) whether the daemon's credentials
// allow each verb of need in namespace ns. The error lists exactly the permissions missing,
// as resource: verbs, and how to grant them.
func CheckAccess(ctx context.Context, cs k8s.Interface, ns string, need []Access) error {
	missing, err := MissingAccess(ctx, cs, ns, need)
	if err != nil {
		return err
	}
	if len(missing) == 0 {
		return nil
	}
	var parts []string
	for _, a := range missing {
		parts = append(parts, a.String()+": "+strings.Join(a.Verbs, ", "))
	}
	return fmt.Errorf("the daemon's Kubernetes credentials lack permissions in the namespace %q: %s; "+
		"grant them with a Role and RoleBinding for the daemon's user or service account (deploy/kubernetes/rbac.yaml, docs/kubernetes.md)",
		ns, strings.Join(parts, "; "))
}

// MissingAccess returns the permissions of need the API server denies in namespace ns (each
// Access with only its denied verbs), in need's order.
func MissingAccess(ctx context.Context, cs k8s.Interface, ns string, need []Access) ([]Access, error) {
	var missing []Access
	for _, a := range need {
		denied := Access{Group: a.Group, Resource: a.Resource, Subresource: a.Subresource}
		for _, verb := range a.Verbs {
			review := &authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: a.Group, Resource: a.Resource, Subresource: a.Subresource},
			}}
			got, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
			if err != nil {
				return nil, fmt.Errorf("asking the API server whether the daemon may %s %s: %w", verb, a, err)
			}
			if !got.Status.Allowed {
				denied.Verbs = append(denied.Verbs, verb)
			}
		}
		if len(denied.Verbs) > 0 {
			missing = append(missing, denied)
		}
	}
	return missing, nil
}

// ImagePullError is ProbeImage's error when the node cannot pull the image.
type ImagePullError struct {
	Image, Reason, Message string
	PullPolicy             corev1.PullPolicy
}

func (e *ImagePullError) Error() string {
	fix := "push it to a registry the nodes pull from (`sandpit image build --push REGISTRY/sandpit-sandbox`) and name that reference in kubernetes.image"
	if e.PullPolicy == corev1.PullNever || e.Reason == "ErrImageNeverPull" {
		fix = "kubernetes.image_pull_policy is Never, so the image must already be on the node: import it " +
			"(on the local test cluster: scripts/kube-cluster.sh import-image " + e.Image + "), or push it to a registry " +
			"(`sandpit image build --push REGISTRY/sandpit-sandbox`) and set image_pull_policy IfNotPresent"
	}
	return fmt.Sprintf("the sandbox image %s (kubernetes.image) cannot be pulled on the node: %s: %s; %s", e.Image, e.Reason, e.Message, fix)
}

// UnschedulableError is ProbeImage's (and the other probes') error when no node took the probe
// pod: it stayed Pending, and Message is the scheduler's reason (the pod's PodScheduled
// condition, such as "0/1 nodes are available: 1 Insufficient cpu.").
type UnschedulableError struct {
	Pod, Namespace, Image, Message string
	Waited                         time.Duration
}

// InsufficientResources says whether the scheduler's reason is the nodes' free CPU, memory or
// pod count, not the pods' placement.
func (e *UnschedulableError) InsufficientResources() bool {
	return strings.Contains(e.Message, "Insufficient ") || strings.Contains(e.Message, "Too many pods")
}

func (e *UnschedulableError) Error() string {
	fix := "check kubernetes.node_selector, kubernetes.tolerations, the pod template file and the nodes' taints and labels"
	if e.InsufficientResources() {
		fix = "the nodes lack free CPU or memory for it: pods of this daemon's last run may hold them (`sandpit sandbox status` " +
			"lists them, `sandpit sandbox rm` deletes them), or other workloads do; free some, add nodes, or lower cpus and memory_bytes"
	}
	return fmt.Sprintf("the probe pod %s of the image %s stayed Pending for %v: no node took it; the scheduler says %q; %s "+
		"(kubectl -n %s get events shows the scheduler's events)", e.Pod, e.Image, e.Waited, e.Message, fix, e.Namespace)
}

// pullFailures are the container waiting reasons that mean the image will not come.
var pullFailures = map[string]bool{"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true,
	"InvalidImageName": true, "ImageInspectError": true, "RegistryUnavailable": true}

// ProbeImage starts a short-lived pod of p.Image (with p's pull policy, RuntimeClass and
// placement; it runs `true`) and waits until its container starts or ends (the image is
// there), the node reports a pull failure (an *ImagePullError naming the image and the fix),
// or p.ProbeTimeout passes (an *UnschedulableError when no node took the pod, quoting the
// scheduler). The pod is deleted before it returns.
func ProbeImage(ctx context.Context, cs k8s.Interface, p Preflight) error {
	pod := probePod(p, "sandpit-preflight-image-")
	pod.Spec.Containers[0].Command = []string{"true"}
	_, err := runProbe(ctx, cs, p, pod, func(pod *corev1.Pod) (bool, error) {
		for _, st := range pod.Status.ContainerStatuses {
			if w := st.State.Waiting; w != nil && pullFailures[w.Reason] {
				return true, &ImagePullError{Image: p.Image, Reason: w.Reason, Message: w.Message, PullPolicy: p.PullPolicy}
			}
			if st.State.Running != nil || st.State.Terminated != nil || st.ImageID != "" {
				return true, nil
			}
		}
		return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed, nil
	})
	return err
}

// runProbe creates pod in p.Namespace, watches it until done says so or p.ProbeTimeout
// passes, deletes it, and returns its last state.
func runProbe(ctx context.Context, cs k8s.Interface, p Preflight, pod *corev1.Pod, done func(*corev1.Pod) (bool, error)) (*corev1.Pod, error) {
	timeout := p.ProbeTimeout
	if timeout <= 0 {
		timeout = 3 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pods := cs.CoreV1().Pods(p.Namespace)
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		if p.RuntimeClassName != "" && strings.Contains(err.Error(), "RuntimeClass") {
			return nil, fmt.Errorf("creating a probe pod with the RuntimeClass %q (kubernetes.runtime_class_name): %w; "+
				"create the RuntimeClass (docs/kubernetes.md), or name one that exists (kubectl get runtimeclass)", p.RuntimeClassName, err)
		}
		return nil, fmt.Errorf("creating a probe pod in the namespace %q: %w", p.Namespace, err)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer dcancel()
		_ = pods.Delete(dctx, created.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	}()
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", created.Name).String(),
		ResourceVersion: created.ResourceVersion})
	if err != nil {
		return nil, fmt.Errorf("watching the probe pod %s: %w", created.Name, err)
	}
	defer w.Stop()
	last := created
	unschedulableWait := cmp.Or(p.UnschedulableWait, 15*time.Second)
	var refused <-chan time.Time // set once the scheduler says no node can take the pod
	for {
		if ok, err := done(last); ok || err != nil {
			return last, err
		}
		if c := unschedulable(last); c != nil && refused == nil {
			refused = time.After(unschedulableWait)
		}
		select {
		case <-refused:
			// The scheduler said so and nothing changed its mind: say so now, not after the
			// whole probe timeout (a restarted daemon's probe stayed Pending for 3 minutes).
			return last, &UnschedulableError{Pod: created.Name, Namespace: p.Namespace, Image: p.Image,
				Waited: unschedulableWait, Message: unschedulable(last).Message}
		case <-ctx.Done():
			// A pod no node takes may yet be taken (pods end, nodes are added): it is
			// waited for like any other, and named when the time is up, as the API has it now.
			gctx, gcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if now, err := pods.Get(gctx, created.Name, metav1.GetOptions{}); err == nil {
				last = now
			}
			gcancel()
			if c := unschedulable(last); c != nil {
				return last, &UnschedulableError{Pod: created.Name, Namespace: p.Namespace, Image: p.Image, Waited: timeout, Message: c.Message}
			}
			return last, fmt.Errorf("the probe pod %s of the image %s did not start within %v (phase %s%s); see kubectl -n %s get events",
				created.Name, p.Image, timeout, last.Status.Phase, waitingReasons(last), p.Namespace)
		case ev, ok := <-w.ResultChan():
			if !ok {
				return last, fmt.Errorf("the watch of the probe pod %s ended early", created.Name)
			}
			if got, isPod := ev.Object.(*corev1.Pod); isPod {
				last = got
			}
		}
	}
}

// unschedulable returns pod's PodScheduled condition when the scheduler found no node for it,
// else nil.
func unschedulable(pod *corev1.Pod) *corev1.PodCondition {
	for i, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// waitingReasons lists the pod's containers' waiting reasons, for a message: ", waiting:
// ContainerCreating".
func waitingReasons(pod *corev1.Pod) string {
	var out []string
	for _, st := range pod.Status.ContainerStatuses {
		if st.State.Waiting != nil {
			out = append(out, st.State.Waiting.Reason)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return ", waiting: " + strings.Join(out, ", ")
}

// probePod returns a pod of one container of p.Image, locked down as a sandbox pod is (no
// service account token, no service links, read-only root, no capabilities, no privilege
// escalation, RuntimeDefault seccomp, small equal requests and limits), never restarted.
func probePod(p Preflight, generateName string) *corev1.Pod {
	no, yes := false, true
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	labels := map[string]string{"app.kubernetes.io/managed-by": "sandpit", "sandpit.dev/probe": "true"}
	for k, v := range p.Labels {
		labels[k] = v
	}
	var rc *string
	if p.RuntimeClassName != "" {
		rc = &p.RuntimeClassName
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: generateName, Namespace: p.Namespace, Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			RuntimeClassName:              rc,
			NodeSelector:                  p.NodeSelector,
			Tolerations:                   p.Tolerations,
			TerminationGracePeriodSeconds: new(int64),
			SecurityContext:               &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name:                     "probe",
				Image:                    p.Image,
				ImagePullPolicy:          p.PullPolicy,
				Resources:                corev1.ResourceRequirements{Requests: small, Limits: small},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no,
					ReadOnlyRootFilesystem:   &yes,
					Privileged:               &no,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

// IsLoopbackHost says whether the API server address host (a URL or host:port) is on
// loopback, which pods cannot reach as the daemon does.
func IsLoopbackHost(host string) bool {
	if u, err := url.Parse(host); err == nil && u.Host != "" {
		host = u.Host
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// errProbe marks a probe that could not decide.
var errProbe = errors.New("probe inconclusive")
