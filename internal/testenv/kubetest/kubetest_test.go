package kubetest

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/testenv"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

func TestContainerdName(t *testing.T) {
	for ref, want := range map[string]string{
		"python:3.11-slim":          "docker.io/library/python:3.11-slim",
		"sandpit-base:bookworm-2":   "docker.io/library/sandpit-base:bookworm-2",
		"busybox":                   "docker.io/library/busybox:latest",
		"example.com:5000/a/b:c":    "example.com:5000/a/b:c",
		"ghcr.io/sandpit-dev/x:1.0": "ghcr.io/sandpit-dev/x:1.0",
	} {
		if got, err := ContainerdName(ref); err != nil || got != want {
			t.Errorf("ContainerdName(%q) = %q, %v; want %q", ref, got, err, want)
		}
	}
}

// probe runs in the pod: it lists the pod's network interfaces and tries each address given
// (host:port); it prints {"interfaces": [...], "connect": {"host:port": "connected" | error}}.
const probe = `
import json, socket, sys
res = {"interfaces": sorted(n for _, n in socket.if_nameindex()), "connect": {}}
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect((host, int(port)))
        res["connect"][target] = "connected"
    except OSError as e:
        res["connect"][target] = "%s: %s" % (type(e).__name__, e)
    finally:
        s.close()
print(json.dumps(res))
`

// TestPodExecNoNetwork runs a pod of the sandbox base image on the test cluster, executes
// Python in it over the exec stream (with stdin), checks that the pod has no network beyond
// loopback (a listener on every host address cannot be reached), and deletes the pod.
func TestPodExecNoNetwork(t *testing.T) {
	cs := Clientset(t)
	cfg := Config(t)
	image := ImportImage(t, testenv.BaseImage(t))
	ns := Namespace(t, cs, "kubetest")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	grace, no, yes := int64(1), false, true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sandbox"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			RestartPolicy:                 corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           image,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sleep", "infinity"},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no,
					ReadOnlyRootFilesystem:   &yes,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
			}},
		},
	}
	start := time.Now()
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the pod: %v", err)
	}
	running, err := WaitRunning(ctx, cs, ns, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pod create -> Running: %v (pod IP %q)", time.Since(start).Round(time.Millisecond), running.Status.PodIP)

	exec := func(stdin string, command ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		start := time.Now()
		if err := Exec(ctx, cfg, cs, ns, pod.Name, "main", command, strings.NewReader(stdin), &stdout, &stderr); err != nil {
			t.Fatalf("exec %q: %v\nstdout: %s\nstderr: %s", command, err, stdout.String(), stderr.String())
		}
		t.Logf("exec %q: %v", command[:2], time.Since(start).Round(time.Millisecond))
		return stdout.String()
	}
	if out := exec("", "python3", "-c", "print(1)"); out != "1\n" {
		t.Errorf("python3 -c 'print(1)' printed %q, want \"1\\n\"", out)
	}
	if out := exec("1\n2\n3\n", "python3", "-c", "import sys; print(sum(int(l) for l in sys.stdin))"); out != "6\n" {
		t.Errorf("the sum of stdin printed %q, want \"6\\n\"", out)
	}

	// A listener on every address of the host: with any network the pod could reach one.
	ln, err := net.Listen("tcp", ":0")
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
	targets := []string{"127.0.0.1:" + port, strings.TrimPrefix(cfg.Host, "https://")}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil && !ip.IP.IsLoopback() {
			targets = append(targets, net.JoinHostPort(ip.IP.String(), port))
		}
	}
	targets = append(targets, gateways(t)...)
	var res struct {
		Interfaces []string          `json:"interfaces"`
		Connect    map[string]string `json:"connect"`
	}
	out := exec("", append([]string{"python3", "-c", probe}, targets...)...)
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("the probe printed %q: %v", out, err)
	}
	if len(res.Interfaces) != 1 || res.Interfaces[0] != "lo" {
		t.Errorf("the pod has network interfaces %q, want only lo", res.Interfaces)
	}
	for _, target := range targets {
		got := res.Connect[target]
		t.Logf("pod -> %s: %s", target, got)
		if got == "connected" || got == "" {
			t.Errorf("the pod connected to %s", target)
		}
	}

	// Deleted, the pod is gone once the kubelet stopped it (the watch starts from a version the
	// watch cache has: etcd 3.4 gives the apiserver no progress notifications to catch up on).
	start = time.Now()
	if err := cs.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting the pod: %v", err)
	}
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String(), ResourceVersion: running.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Deleted:
			t.Logf("pod delete -> gone: %v", time.Since(start).Round(time.Millisecond))
			return
		case watch.Error:
			t.Fatalf("watching the pod: %v", apierrors.FromObject(ev.Object))
		}
	}
	t.Fatalf("the pod was not gone: %v", ctx.Err())
}

// gateways returns the host's IPv4 gateways (from /proc/net/route) as host:port targets on a
// port of the DNS, which a gateway is likely to answer.
func gateways(t *testing.T) []string {
	data, err := os.ReadFile("/proc/net/route")
	if err != nil {
		t.Logf("no routes: %v", err)
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 3 || f[2] == "00000000" {
			continue
		}
		v, err := strconv.ParseUint(f[2], 16, 32)
		if err != nil {
			continue
		}
		ip := net.IPv4(byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
		out = append(out, net.JoinHostPort(ip.String(), "53"))
	}
	return out
}
