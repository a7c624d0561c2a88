// Package kubetest gives tests the project's Kubernetes test cluster (scripts/kube-cluster.sh,
// which CI starts): a client from SANDPIT_TEST_KUBECONFIG, a namespace of their own, Docker
// images imported into the cluster's containerd (SANDPIT_TEST_KUBE_CONTAINERD), and exec into a
// pod over its exec stream. Without the cluster a test is skipped, or fails when
// SANDPIT_REQUIRE_KUBERNETES=1 (CI). Only tests import it.
package kubetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distribution/reference"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
)

// The variables scripts/kube-cluster.sh env prints, and CI's requirement switch.
const (
	// EnvKubeconfig names the cluster's admin kubeconfig file.
	EnvKubeconfig = "SANDPIT_TEST_KUBECONFIG"
	// EnvContainerd names the socket of the cluster's containerd, for image imports.
	EnvContainerd = "SANDPIT_TEST_KUBE_CONTAINERD"
	// EnvRequire, when "1", turns a missing cluster into a failure instead of a skip.
	EnvRequire = "SANDPIT_REQUIRE_KUBERNETES"
)

// ImageLabel is the containerd image label that records the Docker image ID an image was
// imported from; an import of the same ID is skipped. scripts/kube-cluster.sh sets it too.
const ImageLabel = "dev.sandpit.docker-id"

func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("%s=1 but: %s", EnvRequire, msg)
	}
	t.Skipf("skipping a Kubernetes test: %s (start the test cluster with scripts/kube-cluster.sh up and "+
		"eval \"$(scripts/kube-cluster.sh env)\"; %s=1 makes this a failure)", msg, EnvRequire)
}

// Config returns a REST config of the test cluster from the kubeconfig SANDPIT_TEST_KUBECONFIG
// names. Unset, it skips the test (fails it when SANDPIT_REQUIRE_KUBERNETES=1); a file that
// does not load fails it.
func Config(t testing.TB) *rest.Config {
	t.Helper()
	path := os.Getenv(EnvKubeconfig)
	if path == "" {
		unavailable(t, "%s is unset", EnvKubeconfig)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("%s=%s: %v", EnvKubeconfig, path, err)
	}
	return cfg
}

// Clientset returns a clientset of the test cluster (see Config), after checking that its
// apiserver answers.
func Clientset(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cfg := Config(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("a client of %s: %v", cfg.Host, err)
	}
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		unavailable(t, "the apiserver at %s does not answer: %v", cfg.Host, err)
	}
	return cs
}

// Namespace creates a namespace named after prefix with a random suffix, waits for its default
// service account (pods are refused until the controller-manager made it), and deletes the
// namespace with everything in it when the test ends. It returns the name.
func Namespace(t testing.TB, cs kubernetes.Interface, prefix string) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := prefix + "-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}},
		metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		zero := int64(0)
		err := cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Logf("deleting namespace %s: %v", name, err)
		}
	})
	sel := fields.OneTermEqualSelector("metadata.name", "default").String()
	list, err := cs.CoreV1().ServiceAccounts(name).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatalf("listing the service accounts of %s: %v", name, err)
	}
	if len(list.Items) > 0 {
		return name
	}
	w, err := cs.CoreV1().ServiceAccounts(name).Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("watching the service accounts of %s: %v", name, err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Added:
			return name
		case watch.Error:
			t.Fatalf("watching the service accounts of %s: %v", name, apierrors.FromObject(ev.Object))
		}
	}
	t.Fatalf("namespace %s got no default service account: %v", name, ctx.Err())
	return ""
}

// ContainerdName is the name under which containerd keeps a Docker image reference:
// "python:3.11-slim" is "docker.io/library/python:3.11-slim". Pods name the image so, with
// imagePullPolicy Never (the test cluster has no registry).
func ContainerdName(ref string) (string, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", err
	}
	return reference.TagNameOnly(named).String(), nil
}

// ImportImage copies the Docker engine's image ref into the test cluster's containerd
// (docker save | ctr images import, as scripts/kube-cluster.sh import-image) unless an import of
// the same image ID is there already, and returns the name pods use (see ContainerdName). It
// skips the test without SANDPIT_TEST_KUBE_CONTAINERD or a Docker engine (see Config and
// testenv.DockerClient); imports from concurrent test processes are serialized.
func ImportImage(t testing.TB, ref string) string {
	t.Helper()
	sock := os.Getenv(EnvContainerd)
	if sock == "" {
		unavailable(t, "%s is unset", EnvContainerd)
	}
	name, err := ContainerdName(ref)
	if err != nil {
		t.Fatalf("image %q: %v", ref, err)
	}
	api := testenv.DockerClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	inspect, err := api.ImageInspect(ctx, ref)
	if err != nil {
		t.Fatalf("the Docker engine has no image %s: %v", ref, err)
	}
	lock, err := os.OpenFile(filepath.Join(filepath.Dir(sock), "import.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("the import lock beside %s: %v", sock, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("locking %s: %v", lock.Name(), err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()

	ctr := func(stdin io.Reader, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "ctr", append([]string{"-a", sock, "-n", "k8s.io"}, args...)...)
		cmd.Stdin = stdin
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	label := ImageLabel + "=" + inspect.ID
	if strings.Contains(ctr(nil, "images", "ls", "name=="+name), label) {
		return name
	}
	start := time.Now()
	saved, err := api.ImageSave(ctx, []string{ref})
	if err != nil {
		t.Fatalf("docker save %s: %v", ref, err)
	}
	defer saved.Close()
	ctr(saved, "images", "import", "-")
	ctr(nil, "images", "label", name, label)
	t.Logf("imported %s into the cluster as %s in %v", ref, name, time.Since(start).Round(time.Millisecond))
	return name
}

// WaitRunning watches pod ns/name until it runs and returns it, or returns an error when it
// failed, succeeded, was deleted, or ctx ended first.
func WaitRunning(ctx context.Context, cs kubernetes.Interface, ns, name string) (*corev1.Pod, error) {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, err
	}
	check := func(p *corev1.Pod) (bool, error) {
		switch p.Status.Phase {
		case corev1.PodRunning:
			return true, nil
		case corev1.PodFailed, corev1.PodSucceeded:
			return false, fmt.Errorf("pod %s/%s %s: %s %s", ns, name, p.Status.Phase, p.Status.Reason, p.Status.Message)
		}
		return false, nil
	}
	for i := range list.Items {
		if ok, err := check(&list.Items[i]); ok || err != nil {
			return &list.Items[i], err
		}
	}
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			return nil, fmt.Errorf("watching pod %s/%s: %w", ns, name, apierrors.FromObject(ev.Object))
		}
		p, ok := ev.Object.(*corev1.Pod)
		if !ok {
			continue
		}
		if ev.Type == watch.Deleted {
			return nil, fmt.Errorf("pod %s/%s was deleted before it ran", ns, name)
		}
		if ok, err := check(p); ok || err != nil {
			return p, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pod %s/%s not running: %w", ns, name, err)
	}
	return nil, fmt.Errorf("pod %s/%s: the watch ended before it ran", ns, name)
}

// Exec runs command in container of pod ns/pod over the pod's exec stream (WebSocket, falling
// back to SPDY when the apiserver does not upgrade to it), streaming stdin (nil: none) and
// writing the command's output to stdout and stderr. It returns nil when the command exited 0,
// an error wrapping k8s.io/client-go/util/exec.ExitError when it exited otherwise, or the
// stream's error.
func Exec(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, ns, pod, container string, command []string,
	stdin io.Reader, stdout, stderr io.Writer) error {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container,
			Command:   command,
			Stdin:     stdin != nil,
			Stdout:    stdout != nil,
			Stderr:    stderr != nil,
		}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return err
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return err
	}
	executor, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	return executor.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}
