package kubernetes_test

import (
	"context"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sandpit-dev/sandpit/internal/runtime/kubernetes"
)

// forbidden answers every action on resource as RBAC refuses it.
func forbidden(resource string) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "",
			errFromString(`User "system:serviceaccount:sandpit:sandpit" cannot `+a.GetVerb()+` resource "`+resource+`"`))
	}
}

type errFromString string

func (e errFromString) Error() string { return string(e) }

// A trial's service account, bound to a Role in another namespace, was told by doctor that the
// namespace it named (which did not exist) was "ok", and serve blamed RBAC: neither reading
// the namespace nor a dry-run pod in it is allowed, which a missing namespace and one the
// credentials have no Role in both look like.
func TestCheckNamespaceUnseen(t *testing.T) {
	cs := fake.NewClientset()
	cs.PrependReactor("get", "namespaces", forbidden("namespaces"))
	cs.PrependReactor("create", "pods", forbidden("pods"))
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authv1.SelfSubjectAccessReview{Status: authv1.SubjectAccessReviewStatus{Allowed: false}}, nil
	})
	err := kubernetes.CheckNamespace(context.Background(), cs, "agents")
	if err == nil {
		t.Fatal("CheckNamespace of a namespace the credentials can neither read nor create pods in = nil")
	}
	for _, want := range []string{`the namespace "agents" (kubernetes.namespace) does not exist or these credentials cannot see it`,
		"kubectl create namespace agents", "set kubernetes.namespace"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("CheckNamespace = %q\nwant it to contain %q", err, want)
		}
	}
	if err := kubernetes.CheckStart(context.Background(), cs, kubernetes.Preflight{Namespace: "agents"}); err == nil ||
		!strings.Contains(err.Error(), "does not exist or these credentials cannot see it") {
		t.Errorf("CheckStart = %v, want the namespace named before RBAC", err)
	}

	// Pods may be created there, and the dry run is refused by admission (a quota): the
	// namespace is there.
	cs = fake.NewClientset()
	cs.PrependReactor("get", "namespaces", forbidden("namespaces"))
	cs.PrependReactor("create", "pods", forbidden("pods"))
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authv1.SelfSubjectAccessReview{Status: authv1.SubjectAccessReviewStatus{Allowed: true}}, nil
	})
	if err := kubernetes.CheckNamespace(context.Background(), cs, "agents"); err != nil {
		t.Errorf("CheckNamespace with pods allowed but the dry run refused by admission = %v, want nil", err)
	}
}

// A trial's kubeconfig with the wrong CA was told the cluster "does not answer": it answers,
// with a certificate the kubeconfig's CA did not sign.
func TestCheckAPICertificate(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"gitVersion": "v1.32.0"}`))
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.StartTLS()
	defer srv.Close()
	cs, err := k8s.NewForConfig(&rest.Config{Host: srv.URL}) // no CA: the server's is self-signed
	if err != nil {
		t.Fatal(err)
	}
	_, err = kubernetes.CheckAPI(context.Background(), cs, srv.URL, "kubeconfig /x/kubeconfig (context c)")
	if err == nil {
		t.Fatal("CheckAPI of a server whose certificate is not trusted = nil")
	}
	t.Log(err)
	for _, want := range []string{"the Kubernetes API at " + srv.URL + " (from the kubeconfig /x/kubeconfig (context c)) answers with a certificate",
		"certificate-authority-data"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("CheckAPI = %q\nwant it to contain %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "does not answer") {
		t.Errorf("CheckAPI = %q, which says the server does not answer", err)
	}

	// With the server's CA it answers.
	cs, err = k8s.NewForConfig(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: pemCert(srv.Certificate().Raw)}})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := kubernetes.CheckAPI(context.Background(), cs, srv.URL, "kubeconfig"); err != nil || v != "v1.32.0" {
		t.Errorf("CheckAPI with the server's CA = %q, %v", v, err)
	}
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// A trial's restart on a full node: the image probe pod sat Pending behind the daemon's own
// old pods until the probe's time was up, and the error did not say why. It now says Pending
// and quotes the scheduler, and says the nodes lack CPU, not that the image is missing.
func TestProbeImageUnschedulable(t *testing.T) {
	const reason = "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
	cs := fake.NewClientset()
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		pod.Name = pod.GenerateName + "1" // the fake does not generate names
		pod.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
			Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: reason}}}
		return false, nil, nil
	})
	err := kubernetes.ProbeImage(context.Background(), cs, kubernetes.Preflight{Namespace: "agents", Image: "reg.example.com/s:1",
		ProbeTimeout: 200 * time.Millisecond})
	ue, ok := errors.AsType[*kubernetes.UnschedulableError](err)
	if !ok {
		t.Fatalf("ProbeImage of a pod no node takes = %v, want an *UnschedulableError", err)
	}
	if !ue.InsufficientResources() {
		t.Errorf("InsufficientResources of %q = false", reason)
	}
	for _, want := range []string{"stayed Pending", `"` + reason + `"`, "lack free CPU or memory", "sandpit sandbox rm"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("ProbeImage = %q\nwant it to contain %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "push") {
		t.Errorf("ProbeImage = %q, which blames the image", err)
	}
	if left, _ := cs.CoreV1().Pods("agents").List(context.Background(), metav1.ListOptions{}); len(left.Items) != 0 {
		t.Errorf("the probe pod was left: %v", left.Items)
	}

	placed := &kubernetes.UnschedulableError{Message: "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."}
	if placed.InsufficientResources() || !strings.Contains(placed.Error(), "kubernetes.node_selector") {
		t.Errorf("a placement reason: InsufficientResources %v, error %q", placed.InsufficientResources(), placed)
	}
}

// TestProbeSaysUnschedulableAtOnce: a probe pod the scheduler has no node for is answered
// after UnschedulableWait, not the whole probe timeout (a restarted daemon's probe stayed
// Pending for 3 minutes before it said anything).
func TestProbeSaysUnschedulableAtOnce(t *testing.T) {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		pod.Name = pod.GenerateName + "1"
		pod.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
			Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 Insufficient cpu."}}}
		return false, nil, nil
	})
	began := time.Now()
	err := kubernetes.ProbeImage(context.Background(), cs, kubernetes.Preflight{Namespace: "agents", Image: "reg.example.com/s:1",
		ProbeTimeout: time.Minute, UnschedulableWait: 300 * time.Millisecond})
	if _, ok := errors.AsType[*kubernetes.UnschedulableError](err); !ok || time.Since(began) > 10*time.Second {
		t.Fatalf("ProbeImage = %v after %s, want an *UnschedulableError within the unschedulable wait", err, time.Since(began))
	}
}

// A restarted daemon's own pods may fill the nodes, and the image probe then found no room
// (the daemon did not start at all). A pod of sandpit's running the image already proves it:
// the start checks make no probe pod then, and the daemon goes on to adopt its pods.
func TestCheckStartSkipsTheProbeBesideARunningPod(t *testing.T) {
	const image = "reg.example.com/s:1"
	selector := map[string]string{kubernetes.LabelManaged: "1"}
	running := func(name, image string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "agents", Labels: selector},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: kubernetes.ContainerName, Image: image}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
				{Name: kubernetes.ContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
	}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		probes bool
	}{
		{"its own pod runs the image", running("sandpit-d-slot0-a", image), false},
		{"a pod runs another image", running("sandpit-d-slot0-b", "reg.example.com/s:0"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agents"}}, tc.pod)
			cs.PrependReactor("create", "selfsubjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, &authv1.SelfSubjectAccessReview{Status: authv1.SubjectAccessReviewStatus{Allowed: true}}, nil
			})
			probed := false
			cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				probed = true
				return true, nil, errors.New("no room for a probe pod")
			})
			err := kubernetes.CheckStart(context.Background(), cs, kubernetes.Preflight{Namespace: "agents", Image: image,
				Labels: selector, ProbeTimeout: time.Second})
			if probed != tc.probes || (err == nil) != !tc.probes {
				t.Errorf("CheckStart = %v, probe pod made %v; want a probe %v", err, probed, tc.probes)
			}
		})
	}
}
