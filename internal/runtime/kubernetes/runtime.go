// Package kubernetes is the sandbox.Runtime on a Kubernetes cluster: each slot's sandbox and
// each session's is a pod of its own, made from one locked-down template (the sandbox image
// that the Docker runtime builds, with sandpit-executor inside), and the executor runs over the
// pod's exec stream (stdin and stdout) carrying the same control protocol as over `docker exec`.
//
// Slots keep one warm pod each, supervised and replaced when it dies. Sessions claim a pod from
// a warm pool: an Update of the pod's labels conditioned on its resourceVersion, so daemons
// sharing a namespace never hand one pod to two sessions. Every pod is labelled with its
// daemon's ID and owned (ownerReference) by a Lease named after the daemon, renewed while the
// daemon lives: a daemon that finds another's lease long expired deletes it, and the cluster's
// garbage collector then deletes that daemon's pods.
//
// Kubernetes has no freezer: session boxes are not sandbox.PausableBox, and the session layer
// hibernates a session asked to pause (SaveFiles and RestoreFiles carry the session's files as
// a tar stream over exec).
package kubernetes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandpit-dev/sandpit/internal/control"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/runtime/boxspec"
	"github.com/sandpit-dev/sandpit/internal/runtime/slotpool"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Config configures the runtime.
type Config struct {
	// Kubeconfig is the path of a kubeconfig file; "" uses the in-cluster service account
	// (the daemon runs in a pod).
	Kubeconfig string
	// Context is the kubeconfig context to use ("" for its current one).
	Context string
	// Namespace is where the sandbox pods, and the daemons' Leases, live (required).
	Namespace string
	// Image is the sandbox image as the nodes know it (the Docker runtime's image, pushed to a
	// registry or imported into the nodes' containerd), e.g. "sandpit-sandbox:0123abcd".
	Image string
	// ImagePullPolicy is the pods' pull policy: "Never" for an image imported into the nodes,
	// "IfNotPresent" or "Always" for a registry ("" is IfNotPresent).
	ImagePullPolicy corev1.PullPolicy
	// ImagePullSecrets name the namespace's secrets used to pull Image (may be empty).
	ImagePullSecrets []string
	// RuntimeClassName is the pods' RuntimeClass ("" for the cluster's default), e.g. "gvisor".
	RuntimeClassName string
	// GVisor says RuntimeClassName runs pods under gVisor (runsc): the executor then keeps a
	// memory reserve (added to the pod's memory limit) and bounds socket buffers itself.
	GVisor bool
	// NodeSelector places the pods (may be nil).
	NodeSelector map[string]string
	// Tolerations, Affinity and PriorityClassName place the pods too (may be empty): the
	// configuration's kubernetes.tolerations and its pod template file.
	Tolerations       []corev1.Toleration
	Affinity          *corev1.Affinity
	PriorityClassName string
	// PodLabels and PodAnnotations are added to every pod's metadata (sandpit's own labels
	// win over PodLabels).
	PodLabels, PodAnnotations map[string]string
	// SeccompLocalhostProfile, when set, is the path (relative to the kubelet's seccomp
	// directory) of sandpit's seccomp profile installed on every node (`sandpit seccomp`
	// writes it); "" uses the runtime's default profile (RuntimeDefault).
	SeccompLocalhostProfile string
	// Box is each pod's limits: every pod serves one slot or one session.
	Box Box
	// Slots is how many slots, and so slot pods, the daemon keeps (1 to boxspec.MaxSlots).
	Slots int
	// UIDBlock is the block of the image's uids the pods' code runs as (see boxspec.UIDBlock):
	// every runtime whose boxes may share a node's kernel (two daemons on one cluster, a
	// Docker daemon on a node) needs a block of its own.
	UIDBlock boxspec.UIDBlock
	// WarmSessions is how many session pods this daemon keeps warm for OpenSession to claim
	// (0: every session waits for a pod to be created).
	WarmSessions int
	// DaemonID names this daemon: its pods' label sandpit.dev/daemon and its Lease. Two daemons
	// sharing a namespace must have different IDs; a restarted daemon with the same ID adopts
	// its slot pods. It is made label-safe (lowercase letters, digits and '-', at most 40
	// characters; see DaemonName).
	DaemonID string
	// LeaseDuration is how long the daemon's Lease holds without renewal (default 30 s); it
	// is renewed every third of it.
	LeaseDuration time.Duration
	// ReapAfter is how long past its expiry another daemon's Lease is deleted, and with it
	// (by the cluster's garbage collector) that daemon's pods (default 5 min).
	ReapAfter time.Duration
	// ReadyWait is how long a run waits for its slot's sandbox to come back before it is
	// refused with sandbox.ErrNotReady.
	ReadyWait time.Duration
	// PodReadyTimeout bounds a pod's creation until it runs (default 2 min).
	PodReadyTimeout time.Duration
	// UnschedulableWait is how long a pod the scheduler placed on no node waits for room (a
	// node may free some) before its creation fails with a *sandbox.NoRoomError (default
	// 10 s).
	UnschedulableWait time.Duration
	// SettleTimeout is how long a slot's cleanup after a run may take before the slot's pod
	// is replaced instead (default 5 s).
	SettleTimeout time.Duration
	// Pip holds pip's settings for dependency installs (index, mirrors, binary only).
	Pip protocol.PipOptions
	// Control tunes the control lines (heartbeat); zero values take the defaults.
	Control control.Options
	// ForkServer configures each slot executor's fork server.
	ForkServer boxspec.ForkServer
	// Preflight, when set, runs at Start before anything is created, with the client and the
	// REST configuration Start built: checks of the API, RBAC, image and network policy. Its
	// error fails Start as it is.
	Preflight func(ctx context.Context, client k8s.Interface, rc *rest.Config) error
}

// Box is each pod's limits and network. Every pod serves one slot or one session, so they are
// per slot and per session.
type Box struct {
	// MemoryBytes is the pod's memory limit (swap is the node's affair); NanoCPUs its CPU limit
	// in billionths of a CPU (1e9 = one CPU).
	MemoryBytes int64
	NanoCPUs    int64
	// RequestMemoryBytes and RequestNanoCPUs are what the pod reserves on its node (its
	// requests); 0 is the limit (a Guaranteed pod). Below the limits the pod is Burstable: a
	// node holds more idle sandboxes, and under memory pressure the kubelet evicts first the
	// pods that use more than they reserved.
	RequestMemoryBytes int64
	RequestNanoCPUs    int64
	// PidsLimit is the docker runtime's per-box cap on processes; a pod has none of its own
	// (the kubelet's podPidsLimit is node-wide configuration), so it is only recorded. The
	// executor's per-run process limit still holds.
	PidsLimit int64
	// TmpBytes and RunDirBytes size the memory-backed emptyDirs of /tmp and /sandbox (the run
	// directories); a session's home gets RunDirBytes too.
	TmpBytes, RunDirBytes int64
	// PackagesBytes sizes the pod's package directory (installed dependencies; 0: 1 GiB).
	PackagesBytes int64
	// Network is "full" (the pod network), "none" or "allowlist" (the executor serves the
	// egress proxy on the pod's loopback). For "none" and "allowlist" the pods' own network
	// must be denied by a NetworkPolicy that the cluster enforces (or a RuntimeClass with no
	// network): the pod has an interface either way.
	Network string
	// SocketSysctls sets the pods' net.ipv4.tcp_rmem and tcp_wmem maxima to
	// boxspec.SocketBufferMax (namespaced sysctls, "safe" since Kubernetes 1.32; older clusters
	// refuse them unless the kubelet allows them).
	SocketSysctls bool
}

// Runtime is a sandbox.Runtime backed by pods, one per slot and one per session. Create it
// with Start.
type Runtime struct {
	client   k8s.Interface
	rc       *rest.Config
	requests *atomic.Uint64 // requests to the API server (countRequests)
	cfg      Config
	log      *slog.Logger
	daemon   string // DaemonName(cfg.DaemonID)
	slots    *slotpool.Pool

	hashOnce sync.Once
	hash     string // configHash

	ownerMu sync.Mutex
	owner   ownerRef // the daemon's Lease, every pod's owner

	ctx        context.Context // ends when Close is called
	close      context.CancelFunc
	supervised sync.WaitGroup

	sessMu   sync.Mutex
	sessUIDs map[int]bool // session uid indexes in use
	opened   map[string]*sessionBox
	warm     map[string]*warmLine // executors started in this daemon's warm session pods, by pod
	poolKick chan struct{}        // wakes the warm pool's loop

	capacity capacityCache // see Capacity
}

var (
	_ sandbox.Runtime       = (*Runtime)(nil)
	_ sandbox.Settler       = (*Runtime)(nil)
	_ sandbox.Installer     = (*Runtime)(nil)
	_ sandbox.Warmer        = (*Runtime)(nil)
	_ sandbox.SessionOpener = (*Runtime)(nil)
)

// RESTConfig returns the REST configuration for kubeconfig (a file's path) and context, or
// the in-cluster one when kubeconfig is "".
func RESTConfig(kubeconfig, context string) (*rest.Config, error) {
	if kubeconfig == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no kubeconfig given and not in a cluster: %w", err)
		}
		return rc, nil
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig},
		&clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig %s: %w", kubeconfig, err)
	}
	return rc, nil
}

// Start connects to the cluster, runs cfg.Preflight, creates (or renews) the daemon's Lease,
// deletes the Leases of daemons long dead and this daemon's stray pods, brings slot 0's pod up
// (adopting a running one of this daemon's with the same template) and returns a ready
// Runtime that brings the other slots and the warm session pods up in the background and keeps
// them up until Close (AllReady waits for the slots).
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Runtime, error) {
	if cfg.Slots < 1 || cfg.Slots > boxspec.MaxSlots {
		return nil, fmt.Errorf("slots is %d; allowed range is 1 to %d", cfg.Slots, boxspec.MaxSlots)
	}
	if cfg.UIDBlock < 0 || cfg.UIDBlock >= boxspec.UIDBlocks {
		return nil, fmt.Errorf("uid block is %d; allowed range is 0 to %d", cfg.UIDBlock, boxspec.UIDBlocks-1)
	}
	if cfg.WarmSessions < 0 || cfg.WarmSessions > boxspec.MaxSessions {
		return nil, fmt.Errorf("warm sessions is %d; allowed range is 0 to %d", cfg.WarmSessions, boxspec.MaxSessions)
	}
	if cfg.Namespace == "" {
		return nil, errors.New("the kubernetes runtime needs a namespace")
	}
	if cfg.Image == "" {
		return nil, errors.New("the kubernetes runtime needs the sandbox image's name")
	}
	if cfg.DaemonID == "" {
		return nil, errors.New("the kubernetes runtime needs a daemon ID")
	}
	cfg.SettleTimeout = cmp.Or(cfg.SettleTimeout, 5*time.Second)
	cfg.LeaseDuration = cmp.Or(cfg.LeaseDuration, 30*time.Second)
	cfg.ReapAfter = cmp.Or(cfg.ReapAfter, 5*time.Minute)
	cfg.PodReadyTimeout = cmp.Or(cfg.PodReadyTimeout, 2*time.Minute)
	cfg.UnschedulableWait = cmp.Or(cfg.UnschedulableWait, 10*time.Second)
	cfg.ReadyWait = cmp.Or(cfg.ReadyWait, 30*time.Second)
	rc, err := RESTConfig(cfg.Kubeconfig, cfg.Context)
	if err != nil {
		return nil, err
	}
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = max(rc.QPS, 50), max(rc.Burst, 100)
	requests := new(atomic.Uint64)
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countRequests{rt, requests} })
	client, err := k8s.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("configuring the Kubernetes client: %w", err)
	}
	if cfg.Preflight != nil {
		if err := cfg.Preflight(ctx, client, rc); err != nil {
			return nil, err
		}
	}
	r := &Runtime{client: client, rc: rc, requests: requests, cfg: cfg, log: log, daemon: DaemonName(cfg.DaemonID),
		opened: map[string]*sessionBox{}, warm: map[string]*warmLine{}, sessUIDs: map[int]bool{}, poolKick: make(chan struct{}, 1)}
	r.ctx, r.close = context.WithCancel(context.Background())
	r.slots = slotpool.New(slotpool.Config{Slots: cfg.Slots, ReadyWait: cfg.ReadyWait, SettleTimeout: cfg.SettleTimeout,
		ConnectTimeout: cfg.PodReadyTimeout + time.Minute, Pip: cfg.Pip, ForkServer: cfg.ForkServer.Enabled}, slotBackend{r}, log)
	fail := func(err error) (*Runtime, error) {
		r.close()
		_ = r.slots.Close()
		return nil, err
	}
	if err := r.renewLease(ctx); err != nil {
		return fail(err)
	}
	if err := r.reapDaemons(ctx); err != nil {
		return fail(err)
	}
	if err := r.removeStrays(ctx); err != nil {
		return fail(err)
	}
	if err := r.slots.Connect(ctx, 0); err != nil {
		return fail(err)
	}
	r.slots.Supervise()
	r.supervised.Go(r.keepLease)
	r.supervised.Go(r.keepPool)
	return r, nil
}

// Client returns the runtime's Kubernetes client (for checks and tests).
func (r *Runtime) Client() k8s.Interface { return r.client }

// Namespace returns the namespace of the runtime's pods.
func (r *Runtime) Namespace() string { return r.cfg.Namespace }

// Daemon returns the label-safe daemon name of the runtime's pods and Lease.
func (r *Runtime) Daemon() string { return r.daemon }

// Image returns the sandbox image the pods run.
func (r *Runtime) Image() string { return r.cfg.Image }

// Warmth says how many slots are up and how many start runs as forks, as each slot's executor
// last answered the heartbeat, and how many warm session pods hold an executor this daemon
// started, ready to claim.
func (r *Runtime) Warmth() sandbox.Warmth {
	w := r.slots.Warmth()
	r.sessMu.Lock()
	w.Sessions = len(r.warm)
	r.sessMu.Unlock()
	return w
}

// AllReady waits until every slot's sandbox is up (or ctx ends, with ctx's error).
func (r *Runtime) AllReady(ctx context.Context) error { return r.slots.AllReady(ctx) }

// PodNames returns every slot's pod name, by slot ("" for a slot that has none yet).
func (r *Runtime) PodNames() []string { return r.slots.Names() }

// Run runs spec in slot's pod; see sandbox.Runtime.
func (r *Runtime) Run(ctx context.Context, slot int, spec sandbox.Spec, emit func(sandbox.Event)) (sandbox.Result, error) {
	line, pod, err := r.slots.Current(ctx, slot)
	if err != nil {
		return sandbox.Result{}, err
	}
	res, err := line.Run(ctx, 0, spec, emit)
	if err != nil && errors.Is(err, control.ErrClosed) && !errors.Is(err, sandbox.ErrNotReady) {
		what, oom := r.whatStopped(pod)
		if oom {
			res.Outcome, res.ExitCode, res.Signal = sandbox.OutcomeMemoryLimit, 128+9, 9
			res.Reason = fmt.Sprintf("the box ran out of memory (%d MiB) and the node killed its pod's container during the run; "+
				"sandpit is bringing the sandbox back", r.cfg.Box.MemoryBytes>>20)
			r.log.Warn("the sandbox pod was killed for memory during a run", "slot", slot, "pod", pod, "id", spec.ID)
			return res, nil
		}
		err = fmt.Errorf("%s; sandpit is bringing the sandbox back (%w)", what, err)
	}
	return res, err
}

// Settle waits until slot's last run is cleaned up (sandbox.Settler). A cleanup that fails or
// takes longer than SettleTimeout gets the slot a new pod instead; Settle then waits (up to
// ReadyWait) for it.
func (r *Runtime) Settle(ctx context.Context, slot int) error { return r.slots.Settle(ctx, slot) }

// SlotUp reports whether slot's sandbox is up now (its executor answers); the Service gives a
// run a free slot that is up before one whose sandbox is being brought back.
func (r *Runtime) SlotUp(slot int) bool { return r.slots.Up(slot) }

// Install makes req's requirements importable in slot's pod (sandbox.Installer). Each pod has
// its own package directory: what one slot installs the others do not see, and a replaced
// pod starts without it.
func (r *Runtime) Install(ctx context.Context, slot int, req sandbox.InstallRequest, progress func(sandbox.DependencyStatus)) (sandbox.Installed, error) {
	return r.slots.Install(ctx, slot, req, progress)
}

// ListPackages lists the dependencies installed in the first ready slot's pod.
func (r *Runtime) ListPackages(ctx context.Context) ([]protocol.Package, error) {
	return r.slots.Packages(ctx, protocol.Packages{Op: "list"})
}

// RemovePackage removes every version of the package name from the first ready slot's pod and
// returns what it removed (none when it is not installed).
func (r *Runtime) RemovePackage(ctx context.Context, name string) ([]protocol.Package, error) {
	return r.slots.Packages(ctx, protocol.Packages{Op: "remove", Name: name})
}

// Resets counts the times a slot's sandbox was lost (its pod or executor died or hung, or a
// cleanup did not finish) and had to be brought back.
func (r *Runtime) Resets() int64 { return r.slots.Resets() }

// Ready returns nil when at least one slot's executor session is live, else why not.
func (r *Runtime) Ready(ctx context.Context) error { return r.slots.Ready(ctx) }

// Close ends every executor session (killing every run) and stops supervising. The slot pods
// and the warm session pods keep running for the next daemon of the same ID to adopt (or,
// once its Lease has long expired, for another daemon to have collected); open sessions'
// pods are deleted. Its Lease is released (LeaseReleased): the daemon no longer holds it.
func (r *Runtime) Close() error {
	if r.ctx.Err() != nil {
		return nil
	}
	r.close()
	r.supervised.Wait()
	r.closeWarmLines()
	errs := []error{r.slots.Close()}
	r.sessMu.Lock()
	open := make([]*sessionBox, 0, len(r.opened))
	for _, s := range r.opened {
		open = append(open, s)
	}
	r.sessMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range open {
		errs = append(errs, s.Close(ctx))
	}
	// Nothing renews the Lease now (keepLease has returned): release it, so that `sandpit
	// sandbox rm` need not wait for it to expire (in a time of its own: closing the sessions
	// may have used all of theirs).
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	errs = append(errs, r.releaseLease(rctx))
	return errors.Join(errs...)
}

// APIRequests is how many requests the runtime has sent the Kubernetes API server since it
// started: every get, list, create, update, patch and delete, each watch and each exec
// stream counted once (a watch or stream open for hours is one request).
func (r *Runtime) APIRequests() uint64 { return r.requests.Load() }

// countRequests counts the requests that go through it.
type countRequests struct {
	next http.RoundTripper
	n    *atomic.Uint64
}

func (c countRequests) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(req)
}
