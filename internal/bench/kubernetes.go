package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/runtime/kubernetes"
)

// The names of the session creation and pod start measurements (Latency.Name).
const (
	// LatencySessionCreate is a session's creation through REST (POST …/sessions, to its
	// answer), closed untimed after each: on the main daemon, a container of its own; on the
	// Kubernetes daemon, a pod claimed from its warm pool (the pool full before each).
	LatencySessionCreate = "session_create"
	// LatencyPodReady is a slot pod's replacement on the Kubernetes daemon: from the new pod's
	// creation (its ADDED event at the bench's watch) to its executor answering (the daemon's
	// /readyz counting every slot up again).
	LatencyPodReady = "pod_ready"
)

// How many of the slower kinds are timed (at most; opts.SlowRuns when fewer): session
// creations (each waits for the warm pool to refill, a pod start) and slot pod replacements.
const (
	sessionCreateRuns = 10
	podReadyRuns      = 5
)

// kubePollInterval is how often the Kubernetes daemon's /readyz and warm pool are polled.
const kubePollInterval = 10 * time.Millisecond

// The Kubernetes goals (issue 32).
const (
	// MaxKubernetesOverDocker is the most REST print(1) p50 on a warm pod may be, as a multiple
	// of the Docker runtime's (the main daemon's) in the same run.
	MaxKubernetesOverDocker = 1.5
	// MaxKubernetesSessionCreateMS is the most a session's creation from the warm pool may take
	// at p50, in milliseconds.
	MaxKubernetesSessionCreateMS = 100
)

// KubernetesOptions names the daemon with the Kubernetes runtime that Run measures beside the
// main one.
type KubernetesOptions struct {
	// File is the configuration file that daemon is started with (--config after the main
	// daemon's flags): it sets runtime "kubernetes" and the kubernetes object.
	File string
	// Config is that configuration loaded as the daemon loads it (the file, SANDPIT_*
	// variables and the command line's settings); Run reads its kubeconfig, namespace and
	// warm_sessions to watch the daemon's pods and delete them at the end.
	Config config.Config
	// Density, when above 0, is the most idle sessions measureDensity opens at once on the
	// daemon (Kubernetes.Density): it stops sooner at the first the daemon refuses for room.
	// Each session is of an agent of its own; sessions_max bounds them too.
	Density int
	// DensityWindow is how long the idle requests are counted, once with no session and once
	// with them open; default a minute.
	DensityWindow time.Duration
}

// Kubernetes is what the daemon with the Kubernetes runtime measured, to compare with the main
// (Docker) daemon in the same run.
type Kubernetes struct {
	// Config is the daemon's configuration file; Namespace, Image, Slots and WarmSessions are
	// from it.
	Config       string `json:"config"`
	Namespace    string `json:"namespace"`
	Image        string `json:"image"`
	Slots        int    `json:"slots"`
	WarmSessions int    `json:"warm_sessions"`
	// ReadySeconds is the time from its start to its answering ready, in seconds (start checks,
	// Lease, slot 0's pod).
	ReadySeconds float64 `json:"ready_seconds"`
	// RESTPrint is print(1) through its REST API on the warm slot pods, timed in turns with
	// DockerPrint.
	RESTPrint Latency `json:"rest_print"`
	// DockerPrint is print(1) through the main (Docker) daemon's REST API, timed in turns with
	// RESTPrint (one run on each daemon, then the next pair, the order swapped every pair, each
	// run turnPause after the last, for its slot to settle), so that a change of the machine's
	// load meets both alike; the ratio is RESTPrint's p50 over this one's.
	DockerPrint Latency `json:"docker_rest_print"`
	// SessionCreate is LatencySessionCreate from its warm pool; absent with warm_sessions 0 or
	// sessions off.
	SessionCreate Latency `json:"session_create"`
	// PodReady is LatencyPodReady.
	PodReady Latency `json:"pod_ready"`
	// Density is what idle sessions cost (KubernetesOptions.Density); nil when not asked.
	Density *Density `json:"density,omitempty"`
}

// kubeDaemon is the bench's Kubernetes daemon as the cluster knows it: its pods and Lease
// carry the label LabelDaemon=name in namespace.
type kubeDaemon struct {
	client    k8s.Interface
	namespace string
	name      string
}

// selector selects the daemon's objects, with more label terms.
func (k *kubeDaemon) selector(more ...string) string {
	s := kubernetes.LabelManaged + "=1," + kubernetes.LabelDaemon + "=" + k.name
	for _, m := range more {
		s += "," + m
	}
	return s
}

// remove deletes the daemon's pods (the runtime keeps its slot and warm pods for a restart) and
// its Lease.
func (k *kubeDaemon) remove(ctx context.Context) error {
	zero := int64(0)
	opts := metav1.DeleteOptions{GracePeriodSeconds: &zero}
	list := metav1.ListOptions{LabelSelector: k.selector()}
	var errs []error
	if err := k.client.CoreV1().Pods(k.namespace).DeleteCollection(ctx, opts, list); err != nil {
		errs = append(errs, fmt.Errorf("deleting the bench's pods: %w (delete them with: kubectl -n %s delete pod -l %s)", err, k.namespace, list.LabelSelector))
	}
	if err := k.client.CoordinationV1().Leases(k.namespace).DeleteCollection(ctx, opts, list); err != nil {
		errs = append(errs, fmt.Errorf("deleting the bench's Lease: %w (delete it with: kubectl -n %s delete lease -l %s)", err, k.namespace, list.LabelSelector))
	}
	return errors.Join(errs...)
}

// measureKubernetes starts a daemon with opts.Kubernetes's configuration file beside main (the
// Docker daemon, still running), waits (up to settleTimeout each, then measures anyway) until
// its slot pods' fork servers and its warm pool are ready, and times print(1) through REST on
// both daemons in turns; it then stops main and measures the creation of sessions from the
// warm pool and the replacement of a slot pod (see Kubernetes), then stops the Kubernetes
// daemon and deletes its pods.
func (b *bench) measureKubernetes(ctx context.Context, main *instance) (*Kubernetes, error) {
	ko := b.opts.Kubernetes
	kc := ko.Config.Kubernetes
	rc, err := kubernetes.RESTConfig(kc.Kubeconfig, "")
	if err != nil {
		return nil, err
	}
	client, err := k8s.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("configuring the Kubernetes client: %w", err)
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	daemonID := "bench-" + hex.EncodeToString(id[:])
	kd := &kubeDaemon{client: client, namespace: kc.Namespace, name: kubernetes.DaemonName(daemonID)}
	b.say("measuring a daemon with the Kubernetes runtime (--config=%s, namespace %s, daemon %s) beside it", ko.File, kd.namespace, kd.name)
	in, err := b.launch(ctx, variant{name: "kubernetes", flags: []string{"--config=" + ko.File},
		env: []string{config.EnvName("daemon_id") + "=" + daemonID}, kube: kd})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := b.stop(ctx, in); err != nil {
			b.say("warning: %v", err)
		}
	}()
	k := &Kubernetes{Config: ko.File, Namespace: kd.namespace, Image: kc.Image, Slots: ko.Config.Slots,
		WarmSessions: min(kc.WarmSessions, ko.Config.SessionsMax), ReadySeconds: round(in.ready.Seconds(), 2)}
	b.say("kubernetes: daemon ready in %.1fs; waiting for every slot's pod and its fork server, and the warm pool", in.ready.Seconds())
	if err := in.waitWarmth(ctx, settleTimeout, func(w *apitype.Warmth) bool { return w.Warm }); err != nil {
		b.say("warning: measuring anyway: %v", err)
	}
	if k.WarmSessions > 0 {
		wctx, cancel := context.WithTimeout(ctx, settleTimeout)
		err := kd.waitWarmPool(wctx, k.WarmSessions)
		cancel()
		if err != nil {
			b.say("warning: measuring anyway: %v", err)
		}
	}
	for _, d := range []*instance{main, in} {
		if _, _, err := d.rest.sequential(ctx, printProgram(), b.opts.Warmup); err != nil {
			return nil, fmt.Errorf("warming up: %w", err)
		}
	}
	if err := b.printInTurns(ctx, main, in, k); err != nil {
		return nil, err
	}
	b.say("kubernetes: print(1) p50 %.1f ms, docker's in turns with it %.1f ms", k.RESTPrint.P50MS, k.DockerPrint.P50MS)
	if err := b.stop(ctx, main); err != nil {
		b.say("warning: %v", err)
	}
	if k.WarmSessions > 0 {
		creates, err := b.timeSessionCreates(ctx, in, min(b.opts.SlowRuns, sessionCreateRuns), func(ctx context.Context) error {
			return kd.waitWarmPool(ctx, k.WarmSessions)
		})
		if err != nil {
			return nil, err
		}
		k.SessionCreate = newLatency(LatencySessionCreate, "", "session creation from the warm pool (REST)", creates, nil)
		b.say("kubernetes: session creation p50 %.1f ms", k.SessionCreate.P50MS)
	} else {
		b.say("warning: session creation from the warm pool not measured: kubernetes.warm_sessions (or sessions_max) is 0")
	}
	readies, err := b.timePodReady(ctx, in, kd, k.Slots, min(b.opts.SlowRuns, podReadyRuns))
	if err != nil {
		return nil, err
	}
	k.PodReady = newLatency(LatencyPodReady, "", "slot pod create to its executor answering", readies, nil)
	b.say("kubernetes: slot pod create to ready p50 %.1f ms", k.PodReady.P50MS)
	if ko.Density > 0 {
		if k.WarmSessions > 0 { // the pool refilled, so that the first window is idle
			wctx, cancel := context.WithTimeout(ctx, settleTimeout)
			if err := kd.waitWarmPool(wctx, k.WarmSessions); err != nil {
				b.say("warning: measuring anyway: %v", err)
			}
			cancel()
		}
		if k.Density, err = b.measureDensity(ctx, in, ko.Density, cmp.Or(ko.DensityWindow, time.Minute)); err != nil {
			return nil, fmt.Errorf("measuring idle sessions' cost: %w", err)
		}
	}
	return k, nil
}

// turnPause is how long printInTurns waits before each run: longer than a slot's cleanup after
// a run on an idle machine (tens of milliseconds), so that each run finds its slot settled
// whatever the daemon's number of slots (a loaded machine may still be cleaning up). The pauses
// add 2 × Runs × turnPause to the bench. Without it a daemon of one slot (a Kubernetes daemon
// sized for a small node) waits for its last run's cleanup, where one of four (the Docker
// daemon) takes another slot, and the ratio measured the slot counts (3.55x on 2 December),
// not the runtimes.
const turnPause = 250 * time.Millisecond

// printInTurns times opts.Runs runs of print(1) through the REST API of each of docker and kube,
// one run on each in turn, the first of each pair alternating, each after turnPause, into
// k.DockerPrint and k.RESTPrint.
func (b *bench) printInTurns(ctx context.Context, docker, kube *instance, k *Kubernetes) error {
	type side struct {
		in        *instance
		name      string
		durations []time.Duration
		starts    map[string]int
	}
	d := &side{in: docker, name: "Docker", starts: map[string]int{}}
	kd := &side{in: kube, name: "Kubernetes", starts: map[string]int{}}
	for i := range b.opts.Runs {
		pair := [2]*side{d, kd}
		if i%2 == 1 {
			pair = [2]*side{kd, d}
		}
		for _, s := range pair {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(turnPause):
			}
			ds, st, err := s.in.rest.sequential(ctx, printProgram(), 1)
			if err != nil {
				return fmt.Errorf("measuring print(1) through REST on the %s daemon: %w", s.name, err)
			}
			s.durations = append(s.durations, ds...)
			for kind, c := range st {
				s.starts[kind] += c
			}
		}
	}
	k.RESTPrint = newLatency(LatencyRESTPrint, "", "sandpit REST print(1) on a warm pod", kd.durations, kd.starts)
	k.DockerPrint = newLatency(LatencyRESTPrint, "", "sandpit REST print(1) on a warm container", d.durations, d.starts)
	return nil
}

// timeSessionCreates creates n sessions of agent "default" through in's REST API, one after
// the other, and returns the time each creation took; before each, ready (nil: none) waits
// until the next may be timed. Each session is closed, untimed.
func (b *bench) timeSessionCreates(ctx context.Context, in *instance, n int, ready func(context.Context) error) ([]time.Duration, error) {
	api := in.rest.api
	var out []time.Duration
	for range n {
		if ready != nil {
			wctx, cancel := context.WithTimeout(ctx, readyTimeout)
			err := ready(wctx)
			cancel()
			if err != nil {
				return nil, err
			}
		}
		cctx, cancel := context.WithTimeout(ctx, requestTimeout)
		began := time.Now()
		info, err := api.CreateSession(cctx, "default", apitype.SessionCreate{})
		took := time.Since(began)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("creating a session: %w", err)
		}
		out = append(out, took)
		cctx, cancel = context.WithTimeout(ctx, time.Minute)
		_, err = api.CloseSession(cctx, "default", info.ID)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("closing the bench's session: %w", err)
		}
	}
	return out, nil
}

// waitWarmPool waits until the daemon has n warm session pods (running, their executor
// started: claimable).
func (k *kubeDaemon) waitWarmPool(ctx context.Context, n int) error {
	sel := k.selector(kubernetes.LabelRole+"="+kubernetes.RoleSession, kubernetes.LabelState+"="+kubernetes.StateWarm)
	for {
		list, err := k.client.CoreV1().Pods(k.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return fmt.Errorf("listing the bench's warm session pods: %w", err)
		}
		have := 0
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				have++
			}
		}
		if have >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d warm session pods in namespace %s (%d there): %w", n, k.namespace, have, context.Cause(ctx))
		case <-time.After(kubePollInterval):
		}
	}
}

// timePodReady deletes slot 0's pod n times and times each replacement: from the new pod's
// ADDED event at a watch to the daemon's /readyz counting all slots up again.
func (b *bench) timePodReady(ctx context.Context, in *instance, kd *kubeDaemon, slots, n int) ([]time.Duration, error) {
	pods := kd.client.CoreV1().Pods(kd.namespace)
	sel := kd.selector(kubernetes.LabelRole+"="+kubernetes.RoleSlot, kubernetes.LabelSlot+"=0")
	allUp := func(w *apitype.Warmth) bool { return w.SlotsUp == slots }
	var out []time.Duration
	for range n {
		if err := in.waitWarmth(ctx, readyTimeout, allUp); err != nil {
			return nil, err
		}
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, fmt.Errorf("listing the bench's slot pods: %w", err)
		}
		old := ""
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil {
				old = p.Name
			}
		}
		if old == "" {
			return nil, fmt.Errorf("the bench's daemon has no pod for slot 0 in namespace %s", kd.namespace)
		}
		t0, err := func() (time.Time, error) {
			wctx, cancel := context.WithTimeout(ctx, readyTimeout)
			defer cancel()
			w, err := pods.Watch(wctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
			if err != nil {
				return time.Time{}, fmt.Errorf("watching the bench's slot pods: %w", err)
			}
			defer w.Stop()
			zero := int64(0)
			if err := pods.Delete(wctx, old, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
				return time.Time{}, fmt.Errorf("deleting slot 0's pod %s: %w", old, err)
			}
			for ev := range w.ResultChan() {
				if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Added && p.Name != old {
					return time.Now(), nil
				}
			}
			return time.Time{}, fmt.Errorf("no new pod for slot 0 after deleting %s: %w", old, context.Cause(wctx))
		}()
		if err != nil {
			return nil, err
		}
		if err := in.waitWarmth(ctx, readyTimeout, allUp); err != nil {
			return nil, err
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

// waitWarmth polls the daemon's /readyz until done holds for its warmth, up to timeout.
func (in *instance) waitWarmth(ctx context.Context, timeout time.Duration, done func(*apitype.Warmth) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last *apitype.Warmth
	for {
		w, err := in.rest.api.Warmth(ctx)
		if err == nil && w != nil {
			if last = w; done(w) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if last == nil {
				return fmt.Errorf("the bench's daemon did not answer /readyz within %s", timeout)
			}
			return fmt.Errorf("the bench's daemon did not get there within %s: %d of %d slots up, %d forking", timeout, last.SlotsUp, last.Slots, last.ForkSlots)
		case <-time.After(kubePollInterval):
		}
	}
}

// kubernetesTargets are the Kubernetes goals against r's Kubernetes daemon and main daemon.
func kubernetesTargets(r Report) []Target {
	k := r.Kubernetes
	if k == nil {
		return nil
	}
	t := Target{Name: "kubernetes_print_over_docker", What: "kubernetes / docker: REST print(1) p50", Unit: "x", Op: "<=",
		Goal: MaxKubernetesOverDocker, Status: StatusNA, Note: "not measured"}
	if v, ok := Ratio(k.RESTPrint.P50MS, k.DockerPrint.P50MS); ok {
		t.Value, t.Status, t.Note = round(v, 2), evaluate(v, "<=", MaxKubernetesOverDocker), ""
	}
	out := []Target{t}
	if v := k.SessionCreate.P50MS; k.SessionCreate.Runs > 0 {
		out = append(out, Target{Name: "kubernetes_session_create_p50", What: "kubernetes: session creation from the warm pool p50",
			Unit: "ms", Op: "<=", Goal: MaxKubernetesSessionCreateMS, Value: round(v, 1), Status: evaluate(v, "<=", MaxKubernetesSessionCreateMS)})
	}
	return out
}

// writeKubernetes writes the runtimes' table: the main (Docker) daemon's rows beside the
// Kubernetes daemon's, when one was measured.
func writeKubernetes(b *strings.Builder, r Report) {
	k := r.Kubernetes
	if k == nil {
		return
	}
	fmt.Fprintf(b, "\nruntimes: this daemon (docker) and kubernetes (%s, namespace %s, %d slot(s), warm_sessions %d, ready in %.1fs)\n",
		k.Config, k.Namespace, k.Slots, k.WarmSessions, k.ReadySeconds)
	fmt.Fprintf(b, "%-58s %5s %9s %9s %9s\n", "", "runs", "p50 ms", "p95 ms", "p99 ms")
	row := func(runtime string, l Latency, what string) {
		if l.Runs == 0 {
			return
		}
		fmt.Fprintf(b, "%-58s %5d %9.1f %9.1f %9.1f\n", runtime+" "+what, l.Runs, l.P50MS, l.P95MS, l.P99MS)
	}
	row("docker    ", k.DockerPrint, "REST print(1), warm container, in turns")
	row("kubernetes", k.RESTPrint, "REST print(1), warm pod, in turns")
	row("docker    ", latencyOf(r, LatencySessionCreate), "session creation (a container)")
	row("kubernetes", k.SessionCreate, "session creation from the warm pool")
	row("kubernetes", k.PodReady, "slot pod create to its executor answering")
	if v, ok := Ratio(k.RESTPrint.P50MS, k.DockerPrint.P50MS); ok {
		fmt.Fprintf(b, "%-58s %.2fx (p95 %s)\n", "kubernetes / docker: REST print(1) p50", v, ratioText(k.RESTPrint.P95MS, k.DockerPrint.P95MS))
	}
	if d := k.Density; d != nil {
		bound := "the --kubernetes-density cap"
		if d.Refusal != "" {
			bound = "the next refused: " + d.Refusal
		}
		fmt.Fprintf(b, "kubernetes idle sessions open at once: %d (%s)\n", d.Sessions, bound)
		fmt.Fprintf(b, "  API requests per minute, idle over %.0fs: %.1f with no session, %.1f with %d (%.2f per session); %.1f to open each\n",
			d.WindowSeconds, d.APIRequestsIdle, d.APIRequestsSessions, d.Sessions, d.APIRequestsPerSandbox, d.OpenRequestsPerSandbox)
		fmt.Fprintf(b, "  daemon resident memory: %.1f MiB with no session, %.1f MiB with %d (%.0f KiB per session)\n",
			d.DaemonRSSIdleMiB, d.DaemonRSSSessionsMiB, d.Sessions, d.DaemonKiBPerSandbox)
	}
}

// ratioText is a/b as "1.23x", "n/a" when it has none.
func ratioText(a, b float64) string {
	if v, ok := Ratio(a, b); ok {
		return fmt.Sprintf("%.2fx", v)
	}
	return "n/a"
}
