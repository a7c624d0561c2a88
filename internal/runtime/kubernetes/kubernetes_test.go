package kubernetes_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/runtime/boxspec"
	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/runtime/kubernetes"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/internal/testenv/kubetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

// cluster returns the test cluster's admin kubeconfig (SANDPIT_TEST_KUBECONFIG) and its
// containerd socket (SANDPIT_TEST_KUBE_CONTAINERD), skipping the test without them, or failing
// it when SANDPIT_REQUIRE_KUBERNETES=1.
func cluster(t testing.TB) (kubeconfig, containerd string) {
	t.Helper()
	kubeconfig, containerd = os.Getenv("SANDPIT_TEST_KUBECONFIG"), os.Getenv("SANDPIT_TEST_KUBE_CONTAINERD")
	if kubeconfig == "" || containerd == "" {
		if os.Getenv("SANDPIT_REQUIRE_KUBERNETES") == "1" {
			t.Fatal("SANDPIT_REQUIRE_KUBERNETES=1 but SANDPIT_TEST_KUBECONFIG or SANDPIT_TEST_KUBE_CONTAINERD is unset")
		}
		t.Skip("skipping a real-cluster test: set SANDPIT_TEST_KUBECONFIG and SANDPIT_TEST_KUBE_CONTAINERD " +
			"(or SANDPIT_REQUIRE_KUBERNETES=1 to make this a failure)")
	}
	return kubeconfig, containerd
}

// gvisorClass returns the test cluster's gVisor RuntimeClass (SANDPIT_TEST_KUBE_RUNTIME_CLASS,
// which scripts/kube-cluster.sh env exports when the cluster has one), skipping the test
// without it, or failing it when SANDPIT_REQUIRE_KUBE_GVISOR=1 (as CI sets).
func gvisorClass(t testing.TB) string {
	t.Helper()
	class := os.Getenv("SANDPIT_TEST_KUBE_RUNTIME_CLASS")
	if class == "" {
		if os.Getenv("SANDPIT_REQUIRE_KUBE_GVISOR") == "1" {
			t.Fatal("SANDPIT_REQUIRE_KUBE_GVISOR=1 but SANDPIT_TEST_KUBE_RUNTIME_CLASS is unset: " +
				"build and start the cluster with SANDPIT_KUBE_GVISOR=1 (scripts/kube-cluster.sh build, up) and eval its env")
		}
		t.Skip("skipping a gVisor test: the test cluster has no gVisor RuntimeClass (set SANDPIT_TEST_KUBE_RUNTIME_CLASS, " +
			"as scripts/kube-cluster.sh env does when built with gVisor, or SANDPIT_REQUIRE_KUBE_GVISOR=1 to make this a failure)")
	}
	return class
}

var (
	imageOnce sync.Once
	imageTag  string
	imageErr  error
)

// sandboxImage builds the sandbox image with the Docker runtime's builder (from
// SANDPIT_TEST_BASE_IMAGE, as the Docker runtime's tests do) and imports it into the cluster's
// containerd unless it is there already; it returns its tag.
func sandboxImage(t testing.TB, containerd string) string {
	t.Helper()
	api := testenv.DockerClient(t)
	recipe := docker.Recipe{
		BaseImage:    testenv.BaseImage(t),
		Packages:     []string{"pandas", "numpy", "matplotlib", "scipy", "requests", "beautifulsoup4", "Pillow"},
		Repository:   "sandpit-sandbox",
		ExecutorPath: testenv.Executor(t),
	}
	imageOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		img, _, err := docker.EnsureImage(ctx, api, recipe, io.Discard)
		if err != nil {
			imageErr = err
			return
		}
		imageTag = img.Tag
		ref := "docker.io/library/" + img.Tag
		out, err := exec.CommandContext(ctx, "ctr", "-a", containerd, "-n", "k8s.io", "images", "ls", "-q", "name=="+ref).Output()
		if err != nil {
			imageErr = fmt.Errorf("listing the cluster's images: %w", err)
			return
		}
		if strings.TrimSpace(string(out)) == ref {
			return
		}
		cmd := exec.CommandContext(ctx, "sh", "-c", `docker save "$1" | ctr -a "$2" -n k8s.io images import -`, "sh", img.Tag, containerd)
		if out, err := cmd.CombinedOutput(); err != nil {
			imageErr = fmt.Errorf("importing %s into the cluster's containerd: %v: %s", img.Tag, err, out)
		}
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return imageTag
}

// adminClient is a client of the test cluster with its admin kubeconfig.
func adminClient(t testing.TB, kubeconfig string) k8s.Interface {
	t.Helper()
	rc, err := kubernetes.RESTConfig(kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := k8s.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// env is a test's cluster, image and namespace.
type env struct {
	kubeconfig string
	client     k8s.Interface
	ns         string
	image      string
	// t is the test the env was made for: each configuration takes a block of uids of its
	// own for t's life (testenv.UIDBlock), since the node shares the host's kernel with the
	// other runtimes of this test and of other packages.
	t testing.TB
}

func newEnv(t testing.TB) *env {
	t.Helper()
	kubeconfig, containerd := cluster(t)
	img := sandboxImage(t, containerd)
	client := adminClient(t, kubeconfig)
	return &env{kubeconfig: kubeconfig, client: client, ns: kubetest.Namespace(t, client, "kruntime"), image: img, t: t}
}

// What each test pod reserves on the test cluster's one node of 2 CPUs: little, so that the
// suites' pods fit beside each other (their limits stay 512 MiB and half a CPU).
const (
	testRequestNanoCPUs = 5e7 // 50m
	testRequestMemory   = 128 << 20
)

// config is the tests' runtime configuration: 2 slots of 512 MiB and half a CPU each (each
// reserving testRequest*), no warm sessions, network full, image imported (pull policy Never).
func (e *env) config(daemon string) kubernetes.Config {
	return kubernetes.Config{
		Kubeconfig:      e.kubeconfig,
		Namespace:       e.ns,
		Image:           e.image,
		ImagePullPolicy: corev1.PullNever,
		Box: kubernetes.Box{MemoryBytes: 512 << 20, NanoCPUs: 5e8, PidsLimit: 512, TmpBytes: 256 << 20, RunDirBytes: 256 << 20,
			Network: "full", RequestMemoryBytes: testRequestMemory, RequestNanoCPUs: testRequestNanoCPUs},
		Slots:      2,
		UIDBlock:   testenv.UIDBlock(e.t),
		DaemonID:   daemon,
		ReadyWait:  30 * time.Second,
		ForkServer: boxspec.ForkServer{Enabled: false, Preload: config.DefaultPreload(), MaxRuns: 1000},
	}
}

// start starts a runtime of cfg changed by mutate, waits for every slot, and closes it when
// the test ends.
func (e *env) start(t testing.TB, cfg kubernetes.Config, mutate func(*kubernetes.Config)) *kubernetes.Runtime {
	t.Helper()
	if mutate != nil {
		mutate(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rt, err := kubernetes.Start(ctx, cfg, testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	if err := rt.AllReady(ctx); err != nil {
		t.Fatal(err)
	}
	return rt
}

// pods lists the namespace's pods matching selector (running or not, not being deleted).
func (e *env) pods(t testing.TB, selector string) []corev1.Pod {
	t.Helper()
	list, err := e.client.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			pods = append(pods, p)
		}
	}
	return pods
}

// waitFor polls ok every 100 ms for up to limit, and fails the test with what when it never
// holds.
func waitFor(t testing.TB, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", limit, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
