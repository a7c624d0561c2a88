package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/runtime/kubernetes"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/testenv/kubetest"
	"github.com/sandpit-dev/sandpit/internal/testenv/pgtest"
)

// kubeCluster returns the test cluster's admin kubeconfig and containerd socket, skipping the
// test without them (failing it when SANDPIT_REQUIRE_KUBERNETES=1).
func kubeCluster(t *testing.T) (kubeconfig, containerd string) {
	t.Helper()
	kubeconfig, containerd = os.Getenv("SANDPIT_TEST_KUBECONFIG"), os.Getenv("SANDPIT_TEST_KUBE_CONTAINERD")
	if kubeconfig == "" || containerd == "" {
		if os.Getenv("SANDPIT_REQUIRE_KUBERNETES") == "1" {
			t.Fatal("SANDPIT_REQUIRE_KUBERNETES=1 but SANDPIT_TEST_KUBECONFIG or SANDPIT_TEST_KUBE_CONTAINERD is unset")
		}
		t.Skip("skipping a real-cluster test: set SANDPIT_TEST_KUBECONFIG and SANDPIT_TEST_KUBE_CONTAINERD")
	}
	return kubeconfig, containerd
}

var (
	kubeImageOnce sync.Once
	kubeImage     string
	kubeImageErr  error
)

// kubeSandboxImage builds the sandbox image of cfg (app.BuildImage) and imports it into the
// cluster's containerd unless it is there (kubetest.ImportImage); it returns its tag.
func kubeSandboxImage(t *testing.T, cfg config.Config) string {
	t.Helper()
	kubeImageOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		kubeImage, _, kubeImageErr = app.BuildImage(ctx, cfg, io.Discard)
	})
	if kubeImageErr != nil {
		t.Fatal(kubeImageErr)
	}
	kubetest.ImportImage(t, kubeImage)
	return kubeImage
}

// kubeConfig is a daemon configuration of runtime kubernetes on the test cluster, in a new
// namespace, with its image imported (pull policy Never), 2 slots of a tenth of a CPU and 1
// warm session pod.
func kubeConfig(t *testing.T) (config.Config, k8s.Interface) {
	t.Helper()
	kubeconfig, _ := kubeCluster(t)
	cfg := testConfig(t)
	rc, _, err := kubernetes.ClusterConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client, err := k8s.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	// Registered before the daemon's stop, so run after it: the runtime ends its exec streams
	// asynchronously (a closed control line's stream gets up to 5 s to end on its own), and
	// goleak looks as soon as the tests end.
	t.Cleanup(func() { waitExecStreams(t, 15*time.Second) })
	cfg.Runtime = config.RuntimeKubernetes
	cfg.Slots = 2
	// The test cluster is one node of 2 CPUs, shared with other tests: small requests, and no
	// fork server to preload at them.
	cfg.CPUs = 0.1
	cfg.ForkServer = false
	cfg.Kubernetes.Kubeconfig = kubeconfig
	cfg.Kubernetes.Namespace = kubetest.Namespace(t, client, "kwire")
	cfg.Kubernetes.Image = kubeSandboxImage(t, cfg)
	cfg.Kubernetes.ImagePullPolicy = "Never"
	cfg.Kubernetes.WarmSessions = 1
	return cfg, client
}

// waitExecStreams waits, up to within, until no goroutine of client-go's remotecommand (an
// exec stream) is left, and names them when some are.
func waitExecStreams(t *testing.T, within time.Duration) {
	buf := make([]byte, 8<<20)
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		stacks := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "k8s.io/client-go/tools/remotecommand.") {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("exec streams are left %v after the daemon stopped", within)
			return
		}
	}
}

// runPrint1 runs print(1) through url's REST API and returns the result.
func runPrint1(t *testing.T, url string) sandbox.Result {
	t.Helper()
	resp, body := post(t, url, `{"code": "print(1)"}`)
	var res sandbox.Result
	if resp.StatusCode != 200 || json.Unmarshal(body, &res) != nil || res.Outcome != "ok" || res.Stdout != "1\n" {
		t.Fatalf("print(1) at %s: %d %s", url, resp.StatusCode, body)
	}
	return res
}

// TestKubernetesDaemon runs a daemon with runtime kubernetes against the real cluster:
// print(1) through REST, a session keeping state over two calls, the deny-all NetworkPolicy
// in place, the slot pods labelled as the daemon's, and /v1/limits and /metrics answering.
func TestKubernetesDaemon(t *testing.T) {
	cfg, client := kubeConfig(t)
	url := daemon(t, cfg)
	runPrint1(t, url)
	// The kubelet's termination message file is a file of the node's disk, bound into every pod
	// writable by every uid: a run could leave data in it for the next run of its slot (another
	// agent's) and write to the node's disk past the pod's limits. Found by a helper's attack.
	for _, code := range []string{`open('/dev/termination-log', 'a').write('left by a run')`, `print(open('/dev/termination-log').read())`} {
		if resp, body := post(t, url, `{"code": `+strconv.Quote(code)+`}`); resp.StatusCode != 200 || !bytes.Contains(body, []byte("PermissionError")) {
			t.Errorf("%s in a run: %d %s; want a PermissionError", code, resp.StatusCode, body)
		}
	}

	status, body := httpCall(t, "POST", url+"/v1/agents/alice/sessions", `{"idle_timeout_ms": 60000}`)
	var s sandbox.SessionInfo
	if status != 201 || json.Unmarshal(body, &s) != nil || s.State != "active" {
		t.Fatalf("create a session: %d %s", status, body)
	}
	exec := url + "/v1/agents/alice/sessions/" + s.ID + "/executions"
	if status, body = httpCall(t, "POST", exec, `{"code": "x = 41\nprint('set')"}`); status != 200 || !bytes.Contains(body, []byte(`"stdout":"set\n"`)) {
		t.Fatalf("first call: %d %s", status, body)
	}
	if status, body = httpCall(t, "POST", exec, `{"code": "OUTPUT = x + 1"}`); status != 200 || !bytes.Contains(body, []byte(`"output":42`)) {
		t.Fatalf("second call, keeping x: %d %s", status, body)
	}
	if status, body = httpCall(t, "DELETE", url+"/v1/agents/alice/sessions/"+s.ID, ""); status != 200 {
		t.Fatalf("closing the session: %d %s", status, body)
	}

	ctx := context.Background()
	ns := cfg.Kubernetes.Namespace
	pol, err := client.NetworkingV1().NetworkPolicies(ns).Get(ctx, kubernetes.NetworkPolicyName, metav1.GetOptions{})
	if err != nil || !kubernetes.PolicyDeniesAll(pol, map[string]string{kubernetes.LabelManaged: "1"}) {
		t.Errorf("the daemon's NetworkPolicy: %v %+v", err, pol)
	}
	// Slot 1's pod comes up in the background: wait for it (up to its pod timeout).
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		slots, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelRole + "=" + kubernetes.RoleSlot})
		n := 0
		if err == nil {
			n = len(slots.Items)
		}
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("slot pods: %v, %d; want 2", err, n)
			break
		}
	}
	if status, body = httpCall(t, "GET", url+"/v1/limits", ""); status != 200 || !bytes.Contains(body, []byte(`"slots":2`)) {
		t.Errorf("GET /v1/limits: %d %s", status, body)
	}
	if status, body = httpCall(t, "GET", url+"/metrics", ""); status != 200 || !regexp.MustCompile(`(?m)^sandpit_kubernetes_api_requests_total [1-9]`).Match(body) {
		t.Errorf("GET /metrics: %d, want the runtime's API requests counted: %.300s", status, body)
	}

	// doctor reports the cluster: every check of the kubernetes runtime passes here (the
	// probes' targets answer no pod on this cluster, so enforcement is as far as can be seen).
	dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	checks := app.Doctor(dctx, cfg, app.ConfigSource{Name: "the test's"}, url)
	got := map[string]app.Check{}
	for _, c := range checks {
		got[c.Name] = c
		t.Logf("doctor: %s ok=%v: %s", c.Name, c.OK, c.Detail)
	}
	for _, name := range []string{"kubernetes API", "kubernetes namespace", "kubernetes RBAC", "sandbox image", "kubernetes NetworkPolicy", "NetworkPolicy enforcement", "daemon"} {
		if c, ok := got[name]; !ok || !c.OK {
			t.Errorf("doctor's %q check: %+v (present %v)", name, c, ok)
		}
	}
	if c := got["kubernetes API"]; !strings.Contains(c.Detail, "Kubernetes v1.") {
		t.Errorf("doctor's API check does not give the version: %q", c.Detail)
	}
	if _, ok := got["docker engine"]; ok {
		t.Errorf("doctor checked the Docker engine for runtime kubernetes")
	}
}

// TestKubernetesTwoDaemons runs two daemons sharing the cluster's namespace and one
// PostgreSQL database: both serve runs and sessions, each from pods labelled as its own, and
// neither takes the other's slot pods.
func TestKubernetesTwoDaemons(t *testing.T) {
	cfg, client := kubeConfig(t)
	cfg.DatabaseURL = pgtest.URL(t)
	cfg.Slots = 1
	cfgA, cfgB := cfg, cfg
	cfgA.DaemonID, cfgB.DaemonID = "kwire-a", "kwire-b"
	cfgB.DataDir = t.TempDir()
	urlA, urlB := daemon(t, cfgA), daemon(t, cfgB)
	ns := cfg.Kubernetes.Namespace
	podsOf := func(daemon string) []string {
		list, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{
			LabelSelector: kubernetes.LabelRole + "=" + kubernetes.RoleSlot + "," + kubernetes.LabelDaemon + "=" + kubernetes.DaemonName(daemon)})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil {
				names = append(names, p.Name)
			}
		}
		return names
	}
	beforeA, beforeB := podsOf("kwire-a"), podsOf("kwire-b")
	if len(beforeA) != 1 || len(beforeB) != 1 {
		t.Fatalf("slot pods: a %v, b %v; want 1 each", beforeA, beforeB)
	}
	var wg sync.WaitGroup
	ids := make([][]string, 2)
	for i, url := range []string{urlA, urlB} {
		wg.Go(func() {
			for range 4 {
				ids[i] = append(ids[i], runPrint1(t, url).ID)
			}
		})
	}
	wg.Wait()
	// Each daemon's runs are in the shared ledger, readable from the other.
	for i, url := range []string{urlB, urlA} {
		if status, body := httpCall(t, "GET", url+"/v1/executions/"+ids[i][0], ""); status != 200 {
			t.Errorf("daemon %d's run from the other daemon: %d %s", i, status, body)
		}
	}
	for _, url := range []string{urlA, urlB} {
		status, body := httpCall(t, "POST", url+"/v1/agents/bob/sessions", `{}`)
		var s sandbox.SessionInfo
		if status != 201 || json.Unmarshal(body, &s) != nil {
			t.Fatalf("create a session at %s: %d %s", url, status, body)
		}
		exec := url + "/v1/agents/bob/sessions/" + s.ID + "/executions"
		if status, body = httpCall(t, "POST", exec, `{"code": "y = 6"}`); status != 200 {
			t.Fatalf("session call at %s: %d %s", url, status, body)
		}
		if status, body = httpCall(t, "POST", exec, `{"code": "OUTPUT = y * 7"}`); status != 200 || !bytes.Contains(body, []byte(`"output":42`)) {
			t.Fatalf("session call keeping y at %s: %d %s", url, status, body)
		}
	}
	afterA, afterB := podsOf("kwire-a"), podsOf("kwire-b")
	if strings.Join(afterA, ",") != strings.Join(beforeA, ",") || strings.Join(afterB, ",") != strings.Join(beforeB, ",") {
		t.Errorf("slot pods changed hands or were replaced: a %v → %v, b %v → %v", beforeA, afterA, beforeB, afterB)
	}
}

// TestKubernetesTemplates builds templates on a daemon of runtime kubernetes whose
// kubernetes.template_import_command brings each image into the test cluster's containerd:
// the template's warm pool, a session and a one-shot run all run in pods of its image.
func TestKubernetesTemplates(t *testing.T) {
	cfg, client := kubeConfig(t)
	_, containerd := kubeCluster(t)
	// $0 is the cluster's containerd socket, $1 the image built.
	cfg.Kubernetes.TemplateImportCommand = []string{"sh", "-c", `docker save "$1" | ctr -a "$0" -n k8s.io images import -`, containerd}
	cfg.TemplatePools = map[string]int{"alice/kt": 1}
	url := daemon(t, cfg)
	base := url + "/v1/agents/alice/templates"
	events := buildTemplate(t, base, `{"name": "kt", "spec": {"steps": [
		{"file": {"path": "/opt/kt/hello.txt", "content": "hello from the template\n"}},
		{"run": "echo built > /opt/kt/mark && chmod 0644 /opt/kt/mark"}], "env": {"GREETING": "hi there"}}}`)
	last := events[len(events)-1]
	if last.Type != "done" || last.Template == nil || last.Template.Status != "ready" {
		t.Fatalf("the build's last event: %+v", last)
	}
	img, layer := last.Template.Image, last.Template.LayerImage
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", img, layer).Run() })
	imported := false
	for _, e := range events {
		imported = imported || (e.Type == "log" && strings.Contains(e.Line, "importing "+img+" into the nodes"))
	}
	if !imported {
		t.Errorf("the build's log does not say the image was imported: %+v", events)
	}

	// The pod of a session of kt runs the template's image.
	podImage := func(session string) string {
		t.Helper()
		pods, err := client.CoreV1().Pods(cfg.Kubernetes.Namespace).List(context.Background(), metav1.ListOptions{
			LabelSelector: kubernetes.LabelRole + "=" + kubernetes.RoleSession})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.Annotations[kubernetes.AnnotationSession] == session {
				return p.Spec.Containers[0].Image
			}
		}
		return ""
	}
	code := `import os; print(open('/opt/kt/hello.txt').read().strip(), open('/opt/kt/mark').read().strip(), os.environ['GREETING'])`
	want := "hello from the template built hi there\n"
	status, body := httpCall(t, "POST", url+"/v1/agents/alice/sessions", `{"template": "kt"}`)
	var s sandbox.SessionInfo
	if status != 201 || json.Unmarshal(body, &s) != nil {
		t.Fatalf("create a session of kt: %d %s", status, body)
	}
	raw, _ := json.Marshal(map[string]string{"code": code})
	status, body = httpCall(t, "POST", url+"/v1/agents/alice/sessions/"+s.ID+"/executions", string(raw))
	var res sandbox.Result
	if status != 200 || json.Unmarshal(body, &res) != nil || res.Stdout != want {
		t.Errorf("a call in a session of kt: %d %s, want %q", status, body, want)
	}
	if got := podImage(s.ID); got != img {
		t.Errorf("the session's pod runs %q, want the template's image %s", got, img)
	}
	httpCall(t, "DELETE", url+"/v1/agents/alice/sessions/"+s.ID, "")

	raw, _ = json.Marshal(map[string]string{"agent": "alice", "template": "kt", "code": code})
	resp, body := post(t, url, string(raw))
	if resp.StatusCode != 200 || json.Unmarshal(body, &res) != nil || res.Stdout != want || res.Template != "kt" {
		t.Errorf("a one-shot run of kt: %d %s, want %q", resp.StatusCode, body, want)
	}

	// The template's pool keeps a warm session of it, in a pod of its image.
	waitMetric(t, url, `sandpit_template_pool_ready{template="alice/kt"} 1`, 3*time.Minute)
	pods, err := client.CoreV1().Pods(cfg.Kubernetes.Namespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: kubernetes.LabelRole + "=" + kubernetes.RoleSession})
	n := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Spec.Containers[0].Image == img {
			n++
		}
	}
	if err != nil || n != 1 {
		t.Errorf("session pods of the template's image with its pool full: %d (%v), want 1", n, err)
	}
}
