package kubernetes_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandpit-dev/sandpit/internal/runtime/boxspec"
	"github.com/sandpit-dev/sandpit/internal/runtime/kubernetes"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/sandbox/sandboxtest"
)

// TestConformanceKubernetes runs the runtime conformance suite on two slot pods, runs started
// cold (a fresh interpreter each) and forked from the fork server.
func TestConformanceKubernetes(t *testing.T) {
	t.Parallel() // the package's long suites run beside each other: they mostly wait
	e := newEnv(t)
	conformance(t, e, []sandbox.Start{sandbox.StartCold, sandbox.StartFork}, false, nil)
}

// TestConformanceKubernetesGVisor runs the suite again with the pods under the test cluster's
// gVisor RuntimeClass (SANDPIT_TEST_KUBE_RUNTIME_CLASS), forked runs only: the cold path differs
// from runc's in nothing gVisor decides, and CI's time is counted.
func TestConformanceKubernetesGVisor(t *testing.T) {
	t.Parallel()
	class := gvisorClass(t)
	e := newEnv(t)
	conformance(t, e, []sandbox.Start{sandbox.StartFork}, true, func(c *kubernetes.Config) {
		c.RuntimeClassName, c.GVisor = class, true
		// The Docker runtime's runsc suite's preload, for its reason: under gVisor the default
		// one's fork server leaves a 512 MiB box too little room for the cases that fill memory.
		c.ForkServer.Preload = []string{"numpy", "pandas", "matplotlib", "scipy"}
	})
}

// conformance runs the suite on two slot pods of e's configuration changed by mutate, once for
// each way of starting a run in starts (slowWrites: see the harness).
func conformance(t *testing.T, e *env, starts []sandbox.Start, slowWrites bool, mutate func(*kubernetes.Config)) {
	for _, start := range starts {
		t.Run(string(start), func(t *testing.T) {
			t.Parallel()
			rt := e.start(t, e.config("conf-"+string(start)), func(c *kubernetes.Config) {
				c.ForkServer.Enabled = start == sandbox.StartFork
				if mutate != nil {
					mutate(c)
				}
			})
			sandboxtest.WaitForStartInSlots(t, rt, 2, start, 3*time.Minute)
			sandboxtest.Run(t, sandboxtest.Harness{
				Runtime:       rt,
				Slots:         2,
				ReadOnlyRoot:  true,
				IsolatedSlots: true,
				SlowWrites:    slowWrites,
				Start:         start,
				Close:         rt.Close,
				HasModule: func(name string) bool {
					res := sandboxtest.Exec(t, rt, 0, sandboxtest.Spec("import "+name, 30*time.Second), nil)
					return res.Outcome == sandbox.OutcomeOK
				},
			})
		})
	}
}

// TestPodTemplate: every pod is as locked down as the Docker runtime's container, owned by the
// daemon's Lease and labelled for it.
func TestPodTemplate(t *testing.T) {
	e := newEnv(t)
	cfg := e.config("tmpl")
	rt := e.start(t, cfg, func(c *kubernetes.Config) { c.Slots = 1 })
	pods := e.pods(t, kubernetes.LabelDaemon+"=tmpl,"+kubernetes.LabelRole+"=slot")
	if len(pods) != 1 {
		t.Fatalf("%d slot pods, want 1", len(pods))
	}
	p := pods[0]
	s := p.Spec
	c := s.Containers[0]
	sc := c.SecurityContext
	switch {
	case s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken:
		t.Error("the service account token is mounted")
	case s.EnableServiceLinks == nil || *s.EnableServiceLinks:
		t.Error("service links are on")
	case s.HostNetwork || s.HostPID || s.HostIPC:
		t.Error("a host namespace is shared")
	case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("the root filesystem is writable")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("privilege escalation is allowed")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
		t.Errorf("capabilities %+v", sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != "RuntimeDefault":
		t.Errorf("seccomp %+v", sc.SeccompProfile)
	case c.Resources.Limits.Memory().Value() != 512<<20 || c.Resources.Limits.Cpu().MilliValue() != 500:
		t.Errorf("limits %v, want 512 MiB and half a CPU", c.Resources.Limits)
	case c.Resources.Requests.Memory().Value() != testRequestMemory || c.Resources.Requests.Cpu().MilliValue() != testRequestNanoCPUs/1e6:
		t.Errorf("requests %v, want what the configuration reserves, below the limits", c.Resources.Requests)
	case p.Status.QOSClass != corev1.PodQOSBurstable:
		t.Errorf("QoS class %q, want Burstable", p.Status.QOSClass)
	}
	for _, v := range s.Volumes {
		if v.HostPath != nil {
			t.Errorf("volume %s is a host path", v.Name)
		}
	}
	if len(p.OwnerReferences) != 1 || p.OwnerReferences[0].Kind != "Lease" || p.OwnerReferences[0].Name != "sandpit-daemon-tmpl" {
		t.Errorf("owner references %+v", p.OwnerReferences)
	}
	// Inside: the run's uid has no capability, /tmp is sticky, the package directory is the
	// installer's and not writable by the run.
	res := sandboxtest.Exec(t, rt, 0, sandboxtest.Spec(`import os, stat
caps = [l.split()[1] for l in open("/proc/self/status") if l.startswith(("CapEff", "CapPrm", "CapBnd"))]
st = os.stat("/opt/sandpit/packages")
print(os.getuid(), caps[0], caps[1], oct(os.stat("/tmp").st_mode & 0o7777), st.st_uid, oct(st.st_mode & 0o777), os.access("/opt/sandpit/packages", os.W_OK))`,
		30*time.Second), nil)
	want := fmt.Sprintf("%d 0000000000000000 0000000000000000 0o1777 %d 0o755 False\n", cfg.UIDBlock.Slot(0), boxspec.InstallerUID)
	if res.Outcome != sandbox.OutcomeOK || res.Stdout != want {
		t.Fatalf("inside the pod: %s %q (stderr %q), want %q", res.Outcome, res.Stdout, res.Stderr, want)
	}
}

// TestSlotPodDeletedIsReplaced: a slot whose pod is deleted during a run answers that run with
// an error, and its next runs are served by a new pod.
func TestSlotPodDeletedIsReplaced(t *testing.T) {
	e := newEnv(t)
	rt := e.start(t, e.config("repl"), func(c *kubernetes.Config) { c.Slots = 1 })
	before := rt.PodNames()[0]
	done := make(chan error, 1)
	go func() {
		_, err := rt.Run(context.Background(), 0, sandboxtest.Spec("import time; time.sleep(60)", 2*time.Minute), nil)
		done <- err
	}()
	time.Sleep(time.Second)
	zero := int64(0)
	if err := e.client.CoreV1().Pods(e.ns).Delete(context.Background(), before, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("the run in the deleted pod succeeded")
	} else {
		t.Logf("the run in the deleted pod: %v", err)
	}
	res := sandboxtest.Exec(t, rt, 0, sandboxtest.Spec("print(1)", 30*time.Second), nil)
	if res.Outcome != sandbox.OutcomeOK || res.Stdout != "1\n" {
		t.Fatalf("the next run: %+v", res)
	}
	if after := rt.PodNames()[0]; after == before || rt.Resets() < 1 {
		t.Fatalf("pod %s after %s, %d resets", after, before, rt.Resets())
	}
}

// TestRestartAdoptsTheSlotPods: a daemon that restarts with the same ID adopts its running slot
// pods instead of making new ones.
func TestRestartAdoptsTheSlotPods(t *testing.T) {
	e := newEnv(t)
	cfg := e.config("adopt")
	rt := e.start(t, cfg, nil)
	before := rt.PodNames()
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	rt2 := e.start(t, cfg, nil)
	if after := rt2.PodNames(); !slices.Equal(after, before) {
		t.Fatalf("pods %v after the restart, %v before", after, before)
	}
	res := sandboxtest.Exec(t, rt2, 1, sandboxtest.Spec("print(1)", 30*time.Second), nil)
	if res.Outcome != sandbox.OutcomeOK {
		t.Fatalf("a run in an adopted pod: %+v", res)
	}
}

// TestTwoDaemonsNeverClaimOnePod: two runtimes with different daemon IDs share a namespace and
// their warm session pods; sessions opened on both at once, more than the pools hold, each get
// a pod of their own, and each pod ends up labelled and owned by the daemon that claimed it.
func TestTwoDaemonsNeverClaimOnePod(t *testing.T) {
	e := newEnv(t)
	small := func(c *kubernetes.Config) {
		c.Slots, c.WarmSessions = 1, 3
		c.Box.NanoCPUs, c.Box.MemoryBytes = 1e8, 256<<20
	}
	a := e.start(t, e.config("race-a"), small)
	b := e.start(t, e.config("race-b"), small)
	waitFor(t, 3*time.Minute, "6 warm session pods", func() bool {
		wa, _ := a.WarmSessionPods(context.Background())
		wb, _ := b.WarmSessionPods(context.Background())
		return len(wa) == 3 && len(wb) == 3
	})
	const each = 4 // 8 sessions for 6 warm pods: every pod is raced for, and 2 are made
	type opened struct {
		daemon, pod string
		box         sandbox.SessionBox
		err         error
	}
	var (
		mu  sync.Mutex
		got []opened
		wg  sync.WaitGroup
	)
	start := make(chan struct{})
	for _, rt := range []*kubernetes.Runtime{a, b} {
		for i := range each {
			wg.Go(func() {
				<-start
				box, err := rt.OpenSession(context.Background(), fmt.Sprintf("se_%s_%d", rt.Daemon(), i))
				o := opened{daemon: rt.Daemon(), box: box, err: err}
				if err == nil {
					o.pod = kubernetes.SessionPodName(box)
				}
				mu.Lock()
				got = append(got, o)
				mu.Unlock()
			})
		}
	}
	close(start)
	wg.Wait()
	pods := map[string]string{}
	for _, o := range got {
		if o.err != nil {
			t.Errorf("%s: open: %v", o.daemon, o.err)
			continue
		}
		t.Cleanup(func() { o.box.Close(context.Background()) })
		if other, dup := pods[o.pod]; dup {
			t.Errorf("pod %s was handed to a session of %s and one of %s", o.pod, other, o.daemon)
		}
		pods[o.pod] = o.daemon
		res, err := o.box.Run(context.Background(), sessionSpec("print(2)"), nil)
		if err != nil || res.Stdout != "2\n" {
			t.Errorf("%s: a call in %s: %+v, %v", o.daemon, o.pod, res, err)
		}
	}
	for name, daemon := range pods {
		p, err := e.client.CoreV1().Pods(e.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Labels[kubernetes.LabelDaemon] != daemon || p.Labels[kubernetes.LabelState] != kubernetes.StateClaimed ||
			len(p.OwnerReferences) != 1 || p.OwnerReferences[0].Name != "sandpit-daemon-"+daemon {
			t.Errorf("pod %s, claimed by %s: labels %v, owners %+v", name, daemon, p.Labels, p.OwnerReferences)
		}
	}
}

// TestDeadDaemonsPodsAreCollected: a daemon that stops renewing its Lease (killed: its pods
// stay) has its Lease deleted by another daemon once it is long expired, and the cluster's
// garbage collector deletes its pods.
func TestDeadDaemonsPodsAreCollected(t *testing.T) {
	e := newEnv(t)
	dead := e.start(t, e.config("dead"), func(c *kubernetes.Config) {
		c.Slots, c.WarmSessions, c.LeaseDuration = 1, 1, 3*time.Second
		c.Box.NanoCPUs = 1e8
	})
	waitFor(t, 3*time.Minute, "the warm session pod", func() bool {
		w, _ := dead.WarmSessionPods(context.Background())
		return len(w) == 1
	})
	dead.Close() // its slot pod and warm session pod stay, as after a kill
	if n := len(e.pods(t, kubernetes.LabelDaemon+"=dead")); n != 2 {
		t.Fatalf("%d pods of the dead daemon, want 2", n)
	}
	e.start(t, e.config("alive"), func(c *kubernetes.Config) {
		c.Slots, c.ReapAfter = 1, time.Second
		c.Box.NanoCPUs = 1e8
	})
	waitFor(t, 2*time.Minute, "the dead daemon's pods to be collected", func() bool {
		return len(e.pods(t, kubernetes.LabelDaemon+"=dead")) == 0
	})
	if _, err := e.client.CoordinationV1().Leases(e.ns).Get(context.Background(), "sandpit-daemon-dead", metav1.GetOptions{}); err == nil {
		t.Fatal("the dead daemon's lease is still there")
	}
}

// TestSessionBoxFiles: Kubernetes has no freezer, so a session box is not a PausableBox;
// it is a FilesBox whose files go and come back as a tar stream.
func TestSessionBoxFiles(t *testing.T) {
	e := newEnv(t)
	rt := e.start(t, e.config("files"), func(c *kubernetes.Config) { c.Slots = 1 })
	ctx := context.Background()
	open := func(id string) sandbox.SessionBox {
		box, err := rt.OpenSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { box.Close(ctx) })
		return box
	}
	src := open("se_src")
	if _, ok := src.(sandbox.PausableBox); ok {
		t.Fatal("a kubernetes session box claims to pause")
	}
	res, err := src.Run(ctx, sessionSpec(`open("a.txt", "w").write("kept"); import os; os.makedirs("d", exist_ok=True)`), nil)
	if err != nil || res.Outcome != sandbox.OutcomeOK {
		t.Fatalf("%+v %v", res, err)
	}
	var tar bytes.Buffer
	if err := src.(sandbox.FilesBox).SaveFiles(ctx, &tar); err != nil {
		t.Fatal(err)
	}
	dst := open("se_dst")
	if res, err := dst.Run(ctx, sessionSpec("1"), nil); err != nil || res.Outcome != sandbox.OutcomeOK {
		t.Fatalf("%+v %v", res, err)
	}
	if err := dst.(sandbox.FilesBox).RestoreFiles(ctx, &tar); err != nil {
		t.Fatal(err)
	}
	res, err = dst.Run(ctx, sessionSpec(`import os; print(open("a.txt").read(), os.stat("a.txt").st_uid == os.getuid())`), nil)
	if err != nil || res.Stdout != "kept True\n" {
		t.Fatalf("after the restore: %+v %v", res, err)
	}
	if err := src.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-src.Done():
	default:
		t.Fatal("a closed session box is not done")
	}
	if err := src.Close(ctx); err != nil {
		t.Fatalf("a second close: %v", err)
	}
}

// sessionSpec is a spec for code as a session's call.
func sessionSpec(code string) sandbox.Spec {
	spec := sandboxtest.Spec(code, 30*time.Second)
	spec.Session = true
	return spec
}
