package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/runtime/kubernetes"
)

// A trial's daemon (runtime kubernetes) stopped cleanly, and none came back: `sandpit sandbox
// status` showed no pods and `rm` removed nothing, while the pods and the Lease stayed. Both
// now find the data directory's daemon's, through the API server (a stand-in here).
func TestSandboxKubernetesPods(t *testing.T) {
	const ns, id = "agents", "d1"
	renewed := metav1.NewMicroTime(time.Now().Add(-time.Hour))
	secs := int32(30)
	var (
		mu      sync.Mutex
		pods    = []string{"sandpit-slot-0", "sandpit-session-a"}
		lease   = true
		deleted []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		podsPath, leasePath := "/api/v1/namespaces/"+ns+"/pods", "/apis/coordination.k8s.io/v1/namespaces/"+ns+"/leases/sandpit-daemon-"+id
		switch {
		case r.URL.Path == "/version":
			_, _ = w.Write([]byte(`{"gitVersion": "v1.32.0"}`))
		case r.Method == http.MethodGet && r.URL.Path == podsPath:
			if sel := r.URL.Query().Get("labelSelector"); !strings.Contains(sel, kubernetes.LabelDaemon+"="+id) {
				t.Errorf("pods listed with selector %q, not the daemon's", sel)
			}
			list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
			for _, name := range pods {
				role, labels := kubernetes.RoleSession, map[string]string{}
				if strings.Contains(name, "slot") {
					role, labels[kubernetes.LabelSlot] = kubernetes.RoleSlot, "0"
				}
				labels[kubernetes.LabelRole] = role
				list.Items = append(list.Items, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
					Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "reg.example.com/s:1"}}},
					Status: corev1.PodStatus{Phase: corev1.PodRunning}})
			}
			_ = json.NewEncoder(w).Encode(list)
		case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, podsPath+"/"):
			name := strings.TrimPrefix(r.URL.Path, podsPath+"/")
			deleted = append(deleted, name)
			_ = json.NewEncoder(w).Encode(corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: name}})
		case r.URL.Path == leasePath && (!lease || r.Method != http.MethodGet && r.Method != http.MethodDelete):
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure",
				Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound})
		case r.URL.Path == leasePath:
			if r.Method == http.MethodDelete {
				lease = false
				deleted = append(deleted, "lease")
			}
			_ = json.NewEncoder(w).Encode(coordv1.Lease{TypeMeta: metav1.TypeMeta{Kind: "Lease", APIVersion: "coordination.k8s.io/v1"},
				ObjectMeta: metav1.ObjectMeta{Name: "sandpit-daemon-" + id, Namespace: ns},
				Spec:       coordv1.LeaseSpec{RenewTime: &renewed, LeaseDurationSeconds: &secs}})
		default:
			t.Errorf("unexpected request %s %s", r.Method, r.URL)
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+srv.URL+`"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Runtime, cfg.DataDir, cfg.DaemonID = config.RuntimeKubernetes, t.TempDir(), id
	cfg.Kubernetes.Namespace, cfg.Kubernetes.Kubeconfig, cfg.Kubernetes.Image = ns, kubeconfig, "reg.example.com/s:1"

	got, err := app.SandboxPods(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.Daemon != id || len(got.Pods) != 2 || got.Pods[1].ID != "sandpit-slot-0" || got.Pods[1].Slot != 0 || got.Pods[0].Slot != -1 ||
		got.Lease != "sandpit-daemon-"+id || got.LeaseHeld {
		t.Fatalf("SandboxPods = %+v; want the daemon's 2 pods (a slot's, a session's) and its expired lease", got)
	}
	removed, err := app.RemoveSandbox(context.Background(), cfg, false)
	if err != nil || removed.Containers != 2 || removed.Lease != "sandpit-daemon-"+id {
		t.Fatalf("RemoveSandbox = %+v, %v; want 2 pods and the lease", removed, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(deleted, ",") != "sandpit-session-a,sandpit-slot-0,lease" {
		t.Errorf("deleted %v", deleted)
	}
}
