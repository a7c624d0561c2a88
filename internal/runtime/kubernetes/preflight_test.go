package kubernetes_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sandpit-dev/sandpit/internal/runtime/kubernetes"
)

// kwireEnv is a test cluster's admin client and REST configuration, the sandbox image imported
// into it, and a namespace of the test's own (kwire-…, deleted at its end).
type kwireEnv struct {
	rc     *rest.Config
	client k8s.Interface
	ns     string
	image  string
}

func newKwireEnv(t *testing.T) *kwireEnv {
	t.Helper()
	kubeconfig, containerd := cluster(t)
	rc, err := kubernetes.RESTConfig(kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	client := adminClient(t, kubeconfig)
	img := sandboxImage(t, containerd)
	var b [4]byte
	_, _ = rand.Read(b[:])
	ns := "kwire-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		zero := int64(0)
		_ = client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		if err := client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("deleting namespace %s: %v", ns, err)
		}
	})
	for {
		if _, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		} else if ctx.Err() != nil {
			t.Fatalf("namespace %s has no default service account: %v", ns, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return &kwireEnv{rc: rc, client: client, ns: ns, image: img}
}

func (e *kwireEnv) preflight() kubernetes.Preflight {
	return kubernetes.Preflight{Host: e.rc.Host, Source: "test kubeconfig", Namespace: e.ns, Image: e.image,
		PullPolicy: corev1.PullNever, Labels: map[string]string{kubernetes.LabelManaged: "1"}, ProbeTimeout: 2 * time.Minute,
		Owner: kubernetes.Access{Group: "coordination.k8s.io", Resource: "leases", Verbs: []string{"get", "list", "create", "update", "delete"}}}
}

// serviceAccountClient creates a service account bound to a Role of rules in e.ns and returns
// a client that authenticates as it (a bound token).
func (e *kwireEnv) serviceAccountClient(t *testing.T, name string, rules []rbacv1.PolicyRule) k8s.Interface {
	t.Helper()
	ctx := context.Background()
	if _, err := e.client.CoreV1().ServiceAccounts(e.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.RbacV1().Roles(e.ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.RbacV1().RoleBindings(e.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: e.ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secs := int64(600)
	tok, err := e.client.CoreV1().ServiceAccounts(e.ns).CreateToken(ctx, name,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rc := rest.AnonymousClientConfig(e.rc)
	rc.BearerToken = tok.Status.Token
	c, err := k8s.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	// The API server's authorizer learns of a new RoleBinding from a watch, a moment after the
	// create returns: wait until the Role's first rule is in force for the token.
	r := rules[0]
	review := &authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authv1.ResourceAttributes{
		Namespace: e.ns, Group: r.APIGroups[0], Resource: r.Resources[0], Verb: r.Verbs[0]}}}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		got, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err == nil && got.Status.Allowed {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Role %s is not in force for its service account a minute after its binding: %v %+v", name, err, got)
		}
	}
}

// TestPreflight proves the start checks against the real cluster: all pass for the admin,
// a service account with a partial Role gets exactly its missing verbs named, a missing
// namespace and an API that does not answer are named.
func TestPreflight(t *testing.T) {
	e := newKwireEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := kubernetes.CheckStart(ctx, e.client, e.preflight()); err != nil {
		t.Fatalf("CheckStart as the cluster's admin = %v", err)
	}

	partial := e.serviceAccountClient(t, "partial", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "watch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"get"}},
	})
	err := kubernetes.CheckStart(ctx, partial, e.preflight())
	want := `lack permissions in the namespace "` + e.ns + `": pods: update, patch, delete; pods/exec: create, get; ` +
		`networkpolicies.networking.k8s.io: create, update; grant them`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("CheckStart with a partial Role = %v\nwant it to contain %q", err, want)
	}
	if !strings.Contains(err.Error(), "deploy/kubernetes/rbac.yaml") {
		t.Errorf("the RBAC error %q does not say where the Role is", err)
	}

	full := e.serviceAccountClient(t, "full", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "watch", "update", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"get", "create", "update"}},
	})
	if err := kubernetes.CheckStart(ctx, full, e.preflight()); err != nil {
		t.Errorf("CheckStart with the Role of deploy/kubernetes/rbac.yaml (namespaces not readable) = %v", err)
	}

	missing := "kwire-missing-" + e.ns[len("kwire-"):]
	err = kubernetes.CheckNamespace(ctx, e.client, missing)
	if err == nil || !strings.Contains(err.Error(), `the namespace "`+missing+`" (kubernetes.namespace) does not exist`) {
		t.Errorf("CheckNamespace(%s) = %v, want it named as missing", missing, err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0") // a port that answers nothing once closed
	if err != nil {
		t.Fatal(err)
	}
	dead := "https://" + ln.Addr().String()
	ln.Close()
	rc := rest.CopyConfig(e.rc)
	rc.Host = dead
	down, err := k8s.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	_, err = kubernetes.CheckAPI(ctx, down, dead, "kubeconfig /x/admin.kubeconfig")
	if err == nil || !strings.Contains(err.Error(), "the Kubernetes API at "+dead+" (from the kubeconfig /x/admin.kubeconfig) does not answer") {
		t.Errorf("CheckAPI of a closed port = %v", err)
	}
}

// TestPreflightImage proves the image probe: an image the node lacks, with pull policy Never
// and with IfNotPresent (no registry answers here), is an *ImagePullError naming the image and
// the way to get it there.
func TestPreflightImage(t *testing.T) {
	e := newKwireEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := e.preflight()
	p.Image = "sandpit-kwire-absent:" + e.ns
	err := kubernetes.ProbeImage(ctx, e.client, p)
	pe, ok := errors.AsType[*kubernetes.ImagePullError](err)
	if !ok || pe.Reason != "ErrImageNeverPull" {
		t.Fatalf("ProbeImage of an absent image, policy Never = %v, want an ErrImageNeverPull", err)
	}
	for _, part := range []string{"the sandbox image " + p.Image + " (kubernetes.image) cannot be pulled", "scripts/kube-cluster.sh import-image", "sandpit image build --push"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not contain %q", err, part)
		}
	}

	p.PullPolicy = corev1.PullIfNotPresent
	p.Image = "registry.invalid/sandpit-sandbox:" + e.ns
	err = kubernetes.ProbeImage(ctx, e.client, p)
	pe, ok = errors.AsType[*kubernetes.ImagePullError](err)
	if !ok || (pe.Reason != "ErrImagePull" && pe.Reason != "ImagePullBackOff") {
		t.Fatalf("ProbeImage of an unreachable registry's image = %v, want ErrImagePull or ImagePullBackOff", err)
	}
	if !strings.Contains(err.Error(), "sandpit image build --push") || !strings.Contains(err.Error(), p.Image) {
		t.Errorf("error %q names neither the image nor the push", err)
	}
	pods, err := e.client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "sandpit.dev/probe=true"})
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp == nil {
			t.Errorf("probe pod %s left behind", pod.Name)
		}
	}
}

// TestNetworkPolicy proves the deny-all policy is created, kept and restored, and runs the
// enforcement probe: a listener on every address of this machine is the target pods might
// reach. On a cluster whose pods have a network but no NetworkPolicy engine (the development
// cluster's bridge) both probe pods connect: "not enforced". On one whose pods have no
// network (the CI cluster's) neither does: enforced, but not proven by the policy.
func TestNetworkPolicy(t *testing.T) {
	e := newKwireEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sel := map[string]string{kubernetes.LabelManaged: "1"}
	if changed, err := kubernetes.EnsureNetworkPolicy(ctx, e.client, e.ns, sel); err != nil || !changed {
		t.Fatalf("EnsureNetworkPolicy (none there) = %v, %v; want created", changed, err)
	}
	if changed, err := kubernetes.EnsureNetworkPolicy(ctx, e.client, e.ns, sel); err != nil || changed {
		t.Fatalf("EnsureNetworkPolicy (already there) = %v, %v; want unchanged", changed, err)
	}
	api := e.client.NetworkingV1().NetworkPolicies(e.ns)
	pol, err := api.Get(ctx, kubernetes.NetworkPolicyName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pol.Spec.PolicyTypes = pol.Spec.PolicyTypes[:1] // someone let egress through
	if _, err := api.Update(ctx, pol, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if changed, err := kubernetes.EnsureNetworkPolicy(ctx, e.client, e.ns, sel); err != nil || !changed {
		t.Fatalf("EnsureNetworkPolicy (egress allowed) = %v, %v; want restored", changed, err)
	}
	if pol, err = api.Get(ctx, kubernetes.NetworkPolicyName, metav1.GetOptions{}); err != nil || !kubernetes.PolicyDeniesAll(pol, sel) {
		t.Fatalf("the policy after EnsureNetworkPolicy = %+v, %v; want deny-all", pol.Spec, err)
	}

	ln, err := net.Listen("tcp", "0.0.0.0:18510")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	p := kubernetes.EnforcementProbe{Preflight: e.preflight(), Targets: []string{"$SANDPIT_HOST_IP:" + port}, Control: true}
	got, err := kubernetes.ProbeEnforcement(ctx, e.client, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sandbox pod: %+v; control pod: %+v; %s", got.Sandbox, got.Control, got.Summary)
	if len(got.Sandbox) != 3 || len(got.Control) != 3 {
		t.Fatalf("probe results %+v / %+v, want three targets each", got.Sandbox, got.Control)
	}
	controlConnected := false
	for _, r := range got.Control {
		controlConnected = controlConnected || r.Result == "connected"
	}
	switch {
	case controlConnected:
		// The pods have a network, and nothing here enforces NetworkPolicy.
		if got.Enforced || !got.Proven || !strings.Contains(got.Summary, "not enforced") ||
			!strings.Contains(got.Summary, "a network plugin that enforces NetworkPolicy") {
			t.Errorf("verdict %+v; want not enforced, proven, saying what the cluster must provide", got)
		}
	default:
		if !got.Enforced || got.Proven || !strings.Contains(got.Summary, "cannot tell") {
			t.Errorf("verdict %+v; want enforced as far as can be seen", got)
		}
	}
}

// TestCheckNamespaceServiceAccount: a service account whose Role is in one namespace, naming
// one that does not exist, is told that namespace "does not exist or these credentials cannot
// see it" (a trial's doctor said "ok", and serve blamed RBAC).
func TestCheckNamespaceServiceAccount(t *testing.T) {
	e := newKwireEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sa := e.serviceAccountClient(t, "elsewhere", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "watch", "update", "patch", "delete"}},
	})
	if err := kubernetes.CheckNamespace(ctx, sa, e.ns); err != nil {
		t.Errorf("CheckNamespace of the Role's own namespace = %v", err)
	}
	missing := "kwire-missing-" + e.ns[len("kwire-"):]
	err := kubernetes.CheckNamespace(ctx, sa, missing)
	if err == nil || !strings.Contains(err.Error(), `the namespace "`+missing+`" (kubernetes.namespace) does not exist or these credentials cannot see it`) {
		t.Errorf("CheckNamespace(%s) with a service account's credentials = %v", missing, err)
	}
}
