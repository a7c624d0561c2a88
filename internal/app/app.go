// Package app is sandpit's composition root: it turns a config.Config into a running engine
// (data directory lock, store, Docker client, warm-container runtime, execution service,
// sessions, code library, jobs, metrics) and serves it over HTTP (the REST API, MCP at /mcp,
// the console at /ui). Nothing else wires packages together.
package app

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"k8s.io/klog/v2"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/callback"
	apiclient "github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/connlimit"
	"github.com/sandpit-dev/sandpit/internal/datadir"
	"github.com/sandpit-dev/sandpit/internal/e2b"
	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/jobs"
	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/mcpserver"
	"github.com/sandpit-dev/sandpit/internal/metrics"
	"github.com/sandpit-dev/sandpit/internal/ports"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/runtime/boxspec"
	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/secrets"
	"github.com/sandpit-dev/sandpit/internal/session"
	"github.com/sandpit-dev/sandpit/internal/setup"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/template"
)

// Core is a running sandbox: it owns the data directory, its database and its warm
// container until Close.
type Core struct {
	Service *engine.Service
	// Runtime holds the sandboxes: a *docker.Runtime, or a *kubernetes.Runtime with runtime
	// "kubernetes".
	Runtime Sandboxes
	Store   *store.Store
	// Secrets keeps the secrets the egress proxy adds to requests, sealed with the key of the
	// data directory's secrets.key or SANDPIT_SECRETS_KEY.
	Secrets *secrets.Keeper
	// Files keeps runs' output files in the data directory.
	Files   *store.Files
	Library *library.Library
	Jobs    *jobs.Scheduler
	Metrics *metrics.Metrics
	// Address is the daemon's API address (host:port), recorded with its heartbeat so that
	// other daemons sharing database_url can name where its live records are; set by Serve.
	Address string
	// Sessions keeps the stateful sessions, each in a container of its own.
	Sessions *session.Registry
	// E2B serves the E2B-compatible API (mounted under /e2b by Serve).
	E2B *e2b.Server
	// Ports forwards requests to the sessions' ports (REST's …/ports/{port}/…, E2B's).
	Ports *ports.Proxy
	// Streams caps the long-lived streams (E2B's Connect streams, REST's process output) per
	// sandbox, per agent and in all, below max_connections.
	Streams *connlimit.Streams
	// Image is the sandbox image the runtime runs (its tag, or the reference the nodes pull).
	Image string
	// Templates builds and keeps the agents' templates (nil with runtime "kubernetes" unless
	// kubernetes.template_registry or template_import_command says how images reach the nodes).
	Templates *template.Service
	api       *client.Client // nil with runtime "kubernetes" unless it builds templates
	lock      *datadir.Lock
	// boxes names the runtime's warm slot sandboxes (short container IDs, or pod names), for
	// the log when it stops; boxKind says which ("containers" or "pods").
	boxes   func() []string
	boxKind string
	// capacity says how many more sandboxes fit (the Kubernetes runtime's); nil: unknown.
	capacity func(context.Context) apitype.Capacity
}

// DockerClient returns a client for the engine named by cfg.DockerHost, or by the Docker
// environment (DOCKER_HOST, ...) when it is empty.
func DockerClient(cfg config.Config) (*client.Client, error) {
	opts := []client.Opt{client.FromEnv}
	if cfg.DockerHost != "" {
		opts = append(opts, client.WithHost(cfg.DockerHost))
	}
	c, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("configuring the Docker client: %w", err)
	}
	return c, nil
}

// ChooseBaseImage returns cfg with its base image chosen when it names none (base_image ""),
// as the tests choose theirs: the registry image config.RegistryBaseImage when the engine has
// it, else the offline base config.OfflineBaseImage when the engine has it (the quickstart
// builds it with scripts/offline-base-image.sh when no registry answers), else the registry
// image, to be pulled.
func ChooseBaseImage(ctx context.Context, api client.APIClient, cfg config.Config) config.Config {
	if cfg.BaseImage != "" {
		return cfg
	}
	cfg.BaseImage = config.RegistryBaseImage
	if _, err := api.ImageInspect(ctx, config.RegistryBaseImage); err != nil {
		if _, err := api.ImageInspect(ctx, config.OfflineBaseImage); err == nil {
			cfg.BaseImage = config.OfflineBaseImage
		}
	}
	return cfg
}

// RuntimeConfig derives the Docker runtime's configuration from cfg, whose base image is
// chosen (ChooseBaseImage).
func RuntimeConfig(cfg config.Config, progress io.Writer) (docker.Config, error) {
	exe, err := cfg.Executor()
	if err != nil {
		return docker.Config{}, err
	}
	return docker.Config{
		DataDir: cfg.DataDir,
		Recipe: docker.Recipe{
			BaseImage:    cfg.BaseImage,
			Packages:     cfg.Packages,
			Repository:   cfg.ImageRepository,
			ExecutorPath: exe,
		},
		Box: docker.Box{
			MemoryBytes:     cfg.MemoryBytes,
			MemorySwapBytes: cfg.MemorySwap(),
			NanoCPUs:        cfg.NanoCPUs(),
			PidsLimit:       cfg.PidsLimit,
			TmpBytes:        cfg.TmpBytes,
			RunDirBytes:     cfg.RunDirBytes,
			Network:         cfg.Network,
			Runtime:         cfg.ContainerRuntime(),
		},
		Slots:        cfg.Slots,
		UIDBlock:     boxspec.UIDBlock(cfg.UIDBlock),
		WarmSessions: min(cfg.WarmSessions, cfg.SessionsMax),
		Pip:          pipOptions(cfg),
		ForkServer:   forkServer(cfg),
		ReadyWait:    30 * time.Second,
		Progress:     progress,
	}, nil
}

// pipOptions is pip's settings for the sandboxes' dependency installs, from cfg (either
// runtime).
func pipOptions(cfg config.Config) protocol.PipOptions {
	return protocol.PipOptions{IndexURL: cfg.IndexURL, ExtraIndexURLs: cfg.ExtraIndexURLs, TrustedHosts: cfg.TrustedHosts,
		BinaryOnly: cfg.BinaryOnly}
}

// forkServer is the executors' fork server settings, from cfg (either runtime).
func forkServer(cfg config.Config) boxspec.ForkServer {
	return boxspec.ForkServer{Enabled: cfg.ForkServer, Preload: cfg.Preload, MaxRuns: cfg.ForkServerMaxRuns}
}

// Open validates cfg, takes the data directory's lock (a *datadir.LockedError when another
// engine owns it), opens its database (finalising the records of runs a stopped engine left
// running), builds the sandbox image if it is missing (its output goes to progress), and
// starts the warm container. Jobs fire only while RunBackground runs.
func Open(ctx context.Context, cfg config.Config, log *slog.Logger, progress io.Writer) (*Core, error) {
	return open(ctx, cfg, log, progress, false)
}

// OpenServing is Open for a process that serves the engine for a long time (the daemon, and
// `sandpit mcp` without one): a Docker engine that does not answer yet is waited for in the
// background (the sandbox reports not ready until it answers) instead of an error.
func OpenServing(ctx context.Context, cfg config.Config, log *slog.Logger, progress io.Writer) (*Core, error) {
	return open(ctx, cfg, log, progress, true)
}

// open is Open; with waitForEngine, an engine that does not answer yet is waited for (the
// daemon starts and reports not ready) instead of an error.
func open(ctx context.Context, cfg config.Config, log *slog.Logger, progress io.Writer, waitForEngine bool) (_ *Core, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	lock, err := datadir.Acquire(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	var closers []func() error
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				_ = closers[i]()
			}
		}
	}()
	closers = append(closers, lock.Release)
	cfg.DataDir = lock.Dir()
	switch why, err := datadir.Exposed(cfg.DataDir); {
	case err != nil:
		return nil, err
	case why != "" && cfg.Token != "":
		return nil, fmt.Errorf("%s; a daemon with a token keeps its data private: refusing to start", why)
	case why != "":
		log.Warn("the data directory is readable by other users", "why", why)
	}
	st, err := openStore(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	closers = append(closers, st.Close)
	st.SetQuotas(cfg.Quotas())
	st.SetRetention(cfg.Retention())
	sealer, err := secrets.LoadCipher(cfg.DataDir, os.LookupEnv, true)
	if err != nil {
		return nil, err
	}
	keeper := secrets.NewKeeper(st, sealer)
	files, err := st.OpenFiles(ctx, filepath.Join(cfg.DataDir, store.FilesDir), cfg.FilesMaxBytes)
	if err != nil {
		return nil, err
	}
	if err := recoverStopped(ctx, st, log); err != nil {
		return nil, err
	}
	var (
		rt      Sandboxes
		api     *client.Client
		image   string
		boxes   func() []string
		boxKind string
		tmpl    *template.Service
		room    func(context.Context) apitype.Capacity
		apiReqs func() uint64 // the Kubernetes runtime's requests to the API server
	)
	if cfg.Runtime == config.RuntimeKubernetes {
		// client-go logs through klog, a process-wide logger that writes its own format to
		// stderr: its lines (an exec stream cut by a lost node) go to the daemon's log instead.
		klog.SetSlogLogger(log.With("source", "client-go"))
		krt, err := startKubernetes(ctx, cfg, st.Daemon(), log)
		if err != nil {
			return nil, err
		}
		rt, image, boxes, boxKind, room, apiReqs = krt, krt.Image(), krt.PodNames, "pods", capacityOf(krt), krt.APIRequests
		if cfg.Kubernetes.Templates() {
			if tmpl, api, err = kubeTemplates(ctx, cfg, st, progress, log); err != nil {
				krt.Close()
				return nil, err
			}
			closers = append(closers, api.Close)
		}
	} else {
		if api, err = DockerClient(cfg); err != nil {
			return nil, err
		}
		closers = append(closers, api.Close)
		cfg = ChooseBaseImage(ctx, api, cfg)
		rcfg, err := RuntimeConfig(cfg, progress)
		if err != nil {
			return nil, err
		}
		rcfg.WaitForEngine = waitForEngine
		if !waitForEngine {
			rcfg.WarmSessions = 0 // a one-off command: no session would claim them
		}
		drt, err := docker.Start(ctx, api, rcfg, log)
		if err != nil {
			return nil, err
		}
		rt, image, boxKind = drt, drt.Image().Tag, "containers"
		eng, err := templateEngine(api, cfg, rcfg)
		if err != nil {
			return nil, err
		}
		tmpl = template.NewService(st, eng, cfg.Templates(), log)
		boxes = func() []string {
			ids := drt.ContainerIDs()
			for i, id := range ids {
				ids[i] = id[:min(12, len(id))] // as docker ps shows it
			}
			return ids
		}
	}
	m := metrics.New()
	if room != nil {
		m.WatchCapacity(room)
	}
	if apiReqs != nil {
		m.WatchKubernetesAPI(apiReqs)
	}
	hooks, scfg, err := serviceHooks(cfg, st, files, m)
	if err != nil {
		return nil, err
	}
	if hooks.Egress != nil {
		inj, err := secretsInjector(cfg, log)
		if err != nil {
			return nil, err
		}
		hooks.Secrets = secrets.NewSource(keeper, inj)
	}
	svc := engine.NewService(rt, hooks, scfg, log)
	m.Watch(svc.Stats, rt.Resets)
	sessCfg := cfg.Sessions()
	sessCfg.Lifecycle.Daemon = st.Daemon()
	sessions := session.New(svc, rt, st, sessCfg, log)
	sessions.SetCommandRecorder(st)
	sessions.SetEgressRecorder(st)
	runner := templateRunner{Service: svc, sessions: sessions}
	lib := library.New(st, runner, cfg.MaxDependencies)
	if tmpl != nil {
		sessions.SetTemplates(tmpl)
		lib.SetTemplates(tmpl)
	}
	if n, err := sessions.Recover(ctx); err != nil {
		rt.Close()
		return nil, fmt.Errorf("loading the hibernated sessions: %w", err)
	} else if n > 0 {
		log.Info("hibernated sessions kept from an earlier run; each resumes on demand", "sessions", n)
	}
	m.WatchSessions(sessions.Stats, func() int { return rt.Warmth().Sessions })
	proxy := ports.New(cfg.PortLimits(), st, log)
	streams := connlimit.NewStreams(connlimit.CapsFor(int(cfg.MaxConnections)))
	ecfg := E2BConfig(cfg)
	ecfg.Streams = streams
	e2bServer := e2b.New(ecfg, sessions, st, proxy, log)
	if tmpl != nil {
		e2bServer.SetTemplates(tmpl)
	}
	m.WatchE2B(e2bServer.Active, func() int { return sessions.PoolStats().Ready })
	m.WatchPool(sessions.PoolStats)
	m.WatchTemplatePools(sessions.TemplatePoolStats)
	return &Core{
		Service:   svc,
		Runtime:   rt,
		Store:     st,
		Secrets:   keeper,
		Files:     files,
		Library:   lib,
		Jobs:      jobs.New(m.JobStore(st), lib, runner, jobsConfig(st, scfg.MaxTimeout), log),
		Metrics:   m,
		Sessions:  sessions,
		E2B:       e2bServer,
		Ports:     proxy,
		Streams:   streams,
		Image:     image,
		Templates: tmpl,
		api:       api,
		lock:      lock,
		boxes:     boxes,
		boxKind:   boxKind,
		capacity:  room,
	}, nil
}

// recoverStopped records what a stopped daemon left going: its runs as interrupted, its
// sessions as ended.
func recoverStopped(ctx context.Context, st *store.Store, log *slog.Logger) error {
	if n, err := st.FinishInterrupted(ctx); err != nil {
		return fmt.Errorf("finalising the records of interrupted runs: %w", err)
	} else if n > 0 {
		log.Warn("runs left unfinished by a stopped daemon were recorded as sandbox_error (interrupted)", "executions", n)
	}
	if n, err := st.EndOpenSessions(ctx); err != nil {
		return fmt.Errorf("ending the sessions of a stopped daemon: %w", err)
	} else if n > 0 {
		log.Warn("sessions left open by a stopped daemon were ended (daemon_stopped); their containers are removed as the sandbox starts", "sessions", n)
	}
	return nil
}

// serviceHooks returns the Service's hooks (the ledger through m, agent calls to the knowledge
// store or cfg's webhook, output files, and the egress allowlist under network "allowlist")
// and its configuration, with the allowlist's rules.
func serviceHooks(cfg config.Config, st *store.Store, files *store.Files, m *metrics.Metrics) (engine.Hooks, engine.Config, error) {
	scfg := cfg.Sandbox()
	var handler callback.Handler = callback.Store{DB: st, AnswerBytes: scfg.MaxCallBytes}
	if cfg.CallbackURL != "" {
		handler = &callback.Webhook{URL: cfg.CallbackURL, Secret: []byte(cfg.CallbackSecret), Timeout: scfg.CallTimeout,
			MaxBytes: int64(scfg.MaxCallBytes)}
	}
	hooks := engine.Hooks{Recorder: m.Recorder(st), Callbacks: callback.Dispatch{Handler: handler}, Files: files}
	if cfg.Network == sandbox.NetworkAllowlist {
		allow, err := egress.New(cfg.Egress())
		if err != nil {
			return engine.Hooks{}, engine.Config{}, fmt.Errorf("network_allow: %w", err)
		}
		hooks.Egress = allow
		scfg.NetworkAllow, scfg.NetworkAllowInstall = allow.Rules()
	}
	return hooks, scfg, nil
}

// RunBackground fires jobs and prunes the ledger by retention (hourly, and whenever a write takes
// the ledger past its byte budget: Store.PruneDue; with the records' output files) until ctx
// ends, then waits for the job runs it started (end them with Service.Interrupt).
func (e *Core) RunBackground(ctx context.Context, retention store.Retention, log *slog.Logger) {
	var wg sync.WaitGroup
	wg.Go(func() { e.heartbeat(ctx, Advertised(e.Address), log) })
	wg.Go(func() {
		if err := e.Jobs.Run(ctx); err != nil {
			log.Error("the job scheduler stopped; jobs will not fire until the daemon restarts", "error", err)
		}
	})
	wg.Go(func() { pruneLedger(ctx, e.Store, retention, time.Hour, log) })
	wg.Go(func() { e.Sessions.FillPool(ctx) })
	wg.Go(func() { e.Sessions.RunRetention(ctx, time.Minute) })
	wg.Wait()
}

// pruneLedger prunes st by retention now, every period, and whenever a write takes the ledger
// past its byte budget (Store.PruneDue), until ctx ends.
func pruneLedger(ctx context.Context, st *store.Store, retention store.Retention, period time.Duration, log *slog.Logger) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		if n, err := st.Prune(ctx, retention); err != nil && ctx.Err() == nil {
			log.Error("pruning the ledger failed", "error", err)
		} else if n > 0 {
			log.Info("pruned old execution records", "records", n, "max_age", retention.MaxAge, "max_count", retention.MaxCount,
				"max_bytes", retention.MaxBytes, "bytes_left", st.LedgerBytes())
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-st.PruneDue():
		}
	}
}

// Handler returns the engine's REST API (package httpapi) with every group served: what the
// daemon serves, and what a command that runs the engine itself calls in process
// (client.InProcess), so both go through the same limits and decoding. log receives its
// request lines and internal failures.
func (e *Core) Handler(cfg config.Config, log *slog.Logger) http.Handler {
	backend := httpapi.Backend{BodiesMaxBytes: cfg.BodiesMaxBytes, Executor: e.Service, Library: e.Library, Jobs: e.Jobs, Ledger: e.Store, Files: e.Files, Packages: e.Runtime,
		Knowledge: e.Store, Sessions: e.Sessions, Keys: e.Store, Secrets: e.Secrets, Ports: e.Ports, Streams: e.Streams, DaemonToken: cfg.Token != "", Shares: e.Store, PortsHost: cfg.PortsHost(), Templates: templatesOf(e), Setup: func(ctx context.Context, emit func(setup.Event)) error {
			_, err := setup.Run(ctx, setup.DetectPlatform(runtime.GOOS), setup.ExecRunner{}, daemonSetup{e}, setup.Options{}, emit)
			return err
		},
		PackageIndex: httpapi.PackageIndex{IndexURL: cfg.IndexURL, ExtraIndexURLs: cfg.ExtraIndexURLs, TrustedHosts: cfg.TrustedHosts, BinaryOnly: cfg.BinaryOnly},
		Warmth:       e.Runtime.Warmth, Capacity: e.capacity}
	return httpapi.NewHandler(backend, log)
}

// Close stops the engine: running executions are killed, the warm container stays for the next
// engine to adopt, and the database and data directory are released.
func (e *Core) Close() error {
	e.E2B.Close() // its sandboxes' timers; the sandboxes are sessions, below
	e.Ports.Close()
	e.stopSessions()
	err := e.Runtime.Close()
	if e.api != nil {
		e.api.Close()
	}
	return errors.Join(err, e.Store.Close(), e.lock.Release())
}

// BuildImage builds (or finds) the sandbox image for cfg, writing the build's output to
// progress, and returns its tag and whether it had to build it.
func BuildImage(ctx context.Context, cfg config.Config, progress io.Writer) (string, bool, error) {
	api, err := DockerClient(cfg)
	if err != nil {
		return "", false, err
	}
	defer api.Close()
	rcfg, err := RuntimeConfig(ChooseBaseImage(ctx, api, cfg), progress)
	if err != nil {
		return "", false, err
	}
	img, built, err := docker.EnsureImage(ctx, api, rcfg.Recipe, progress)
	return img.Tag, built, err
}

// ContainerStatus describes one container of a data directory (or, runtime "kubernetes", one
// pod of its daemon: ID is the pod's name and State its phase).
type ContainerStatus struct {
	ID, State, Image string
	Created          time.Time
	// Slot is the slot the container serves; -1 for a session's container.
	Slot int
}

// Sandbox lists the containers of cfg's data directory and the pid of the engine that owns it
// (0 when none does). With runtime "kubernetes" it lists no containers (SandboxPods lists the
// pods).
func Sandbox(ctx context.Context, cfg config.Config) (dir string, owner int, containers []ContainerStatus, err error) {
	dir, err = datadir.Canonical(cfg.DataDir)
	if err != nil {
		return "", 0, nil, err
	}
	if lock, err := datadir.Acquire(dir); err == nil {
		lock.Release()
	} else if locked, ok := errors.AsType[*datadir.LockedError](err); ok {
		owner = locked.PID
	} else {
		return "", 0, nil, err
	}
	if cfg.Runtime == config.RuntimeKubernetes {
		return dir, owner, nil, nil // its pods: SandboxPods
	}
	api, err := DockerClient(cfg)
	if err != nil {
		return "", 0, nil, err
	}
	defer api.Close()
	list, err := docker.Containers(ctx, api, dir)
	if err != nil {
		return "", 0, nil, err
	}
	for _, c := range list {
		slot, ok := docker.SlotOf(c)
		if !ok {
			slot = -1
		}
		containers = append(containers, ContainerStatus{ID: c.ID, State: string(c.State), Image: c.Image, Created: time.Unix(c.Created, 0), Slot: slot})
	}
	return dir, owner, containers, nil
}

// Removed is what RemoveSandbox removed.
type Removed struct {
	// Containers is how many containers (slots' and sessions', running or stopped).
	Containers int
	// Volume is the package volume's name when it was removed, "" when it was kept or there
	// was none; Kept is its name when it was kept.
	Volume, Kept string
	// Lease is the daemon's Lease's name (runtime "kubernetes"), "" when there was none.
	Lease string
}

// RemoveSandbox removes the containers of cfg's data directory and, with volume, its package
// volume when it has one (the installed dependencies and pip's cache): everything the data
// directory made in the engine but the images, which other data directories share. With runtime "kubernetes" it
// removes the daemon's pods (counted as Containers) and its Lease instead, refused while the
// Lease is held. It takes the directory's lock first, so it refuses (a *datadir.LockedError)
// while an engine uses them.
func RemoveSandbox(ctx context.Context, cfg config.Config, volume bool) (Removed, error) {
	var out Removed
	lock, err := datadir.Acquire(cfg.DataDir)
	if err != nil {
		return out, err
	}
	defer lock.Release()
	if cfg.Runtime == config.RuntimeKubernetes {
		return removeKubernetesSandbox(ctx, cfg)
	}
	api, err := DockerClient(cfg)
	if err != nil {
		return out, err
	}
	defer api.Close()
	if out.Containers, err = docker.RemoveContainers(ctx, api, lock.Dir()); err != nil {
		return out, err
	}
	// Looked up first: a forced removal answers success for a volume that does not exist, and
	// the CLI said it removed one that was never made.
	name := docker.VolumeName(lock.Dir())
	if _, err := api.VolumeInspect(ctx, name, client.VolumeInspectOptions{}); err != nil {
		if cerrdefs.IsNotFound(err) {
			err = nil
		}
		return out, err
	}
	if !volume {
		out.Kept = name
		return out, nil
	}
	switch _, err := api.VolumeRemove(ctx, name, client.VolumeRemoveOptions{Force: true}); {
	case cerrdefs.IsNotFound(err):
	case err != nil:
		return out, fmt.Errorf("removing the package volume %s: %w (remove it with: docker volume rm %s)", name, err, name)
	default:
		out.Volume = name
	}
	return out, nil
}

// Serve runs the daemon: it opens the engine, serves the REST API on cfg.Listen until ctx
// ends, then shuts down gracefully (in-flight requests get ShutdownGrace to finish).
// ready, when not nil, receives the listener's address once the API accepts connections.
// version is the build's version, which the daemon gives as its MCP serverInfo.version.
func Serve(ctx context.Context, cfg config.Config, version string, log *slog.Logger, progress io.Writer, ready func(addr string)) error {
	if err := CheckExposure(cfg); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w (set listen, SANDPIT_LISTEN or --listen to another address)", cfg.Listen, err)
	}
	// max_connections, and a few places beyond it for health checks alone: a listener cannot
	// tell agents apart, so the long-lived streams are capped well below it (connlimit).
	ln = connlimit.Listener(ln, int(cfg.MaxConnections))
	defer ln.Close()
	// The address bound (port 0 takes a free one): the egress policy refuses it to sandboxed
	// code, and other daemons are told it.
	cfg.Listen = ln.Addr().String()
	eng, err := OpenServing(ctx, cfg, log, progress)
	if err != nil {
		return err
	}
	defer eng.Close()

	handler, err := routes(ctx, cfg, eng, version, log)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           connlimit.HealthOnly(handler),
		ConnContext:       connlimit.ConnContext,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute, // for the body; runs outlive it (see httpapi's tests)
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBackground()
	bgDone := make(chan struct{})
	eng.Address = ln.Addr().String()
	go func() { eng.RunBackground(bgCtx, cfg.Retention(), log); close(bgDone) }()
	if ip := net.ParseIP(hostOf(ln.Addr().String())); ip == nil || !ip.IsLoopback() {
		log.Warn("the API listens beyond this machine: only requests with the bearer token are served, "+
			"and they must name a host in allowed_hosts", "address", ln.Addr().String(), "allowed_hosts", cfg.AllowedHosts)
	}
	log.Info("sandpit is serving", "address", "http://"+ln.Addr().String(), "data_dir", cfg.DataDir,
		"image", eng.Image, "runtime", cfg.Runtime, "slots", cfg.Slots, "network", cfg.Network)
	if ready != nil {
		ready(ln.Addr().String())
	}
	select {
	case err := <-errc:
		return fmt.Errorf("serving HTTP: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: no more job fires; waiting for in-flight executions", "grace", ShutdownGrace)
	stopBackground()
	shutdown(srv, eng, bgDone, log)
	logStopped(eng, log)
	return nil
}

// routes is the daemon's handler: the REST API at /, MCP at /mcp and the metrics behind the
// token, the console at /ui, all behind the Host and Origin guard.
func routes(ctx context.Context, cfg config.Config, eng *Core, version string, log *slog.Logger) (http.Handler, error) {
	root := http.NewServeMux()
	api := eng.Handler(cfg, log)
	root.Handle("/", api)
	mcpHandler, err := mcpserver.Endpoint(ctx, apiclient.InProcess(api), version)
	if err != nil {
		return nil, err
	}
	root.Handle("/mcp", httpapi.LimitBodies(api, mcpHandler, nil))
	root.Handle("GET /metrics", eng.Metrics.Handler())
	console, err := withConsole(cfg, eng, api, httpapi.RequireToken(root, cfg.Token), log)
	if err != nil {
		return nil, err
	}
	handler := http.NewServeMux()
	handler.Handle("/", console)
	// The E2B API authenticates by its own keys (X-API-Key) and sandboxes' access tokens.
	// Its bodies count against the same budget as the REST API's (bodies_max_bytes), in the
	// share of the agent of their key or sandbox.
	handler.Handle(E2BPrefix+"/", http.StripPrefix(E2BPrefix, httpapi.LimitBodies(api, eng.E2B, eng.E2B.AgentOf)))
	// The SDKs' signed file URLs are {E2B_SANDBOX_URL's origin}/files?…&signature=…: the
	// signature names the sandbox (see e2b's files.go).
	handler.Handle("/files", httpapi.LimitBodies(api, eng.E2B, eng.E2B.AgentOf))
	return portHosts(httpapi.Guard(handler, cfg.AllowedHosts), portHostDoor{domain: cfg.PortsHost(), e2b: eng.E2B,
		sessions: registrySessions{eng.Sessions}, shares: eng.Store, proxy: eng.Ports, token: cfg.Token}), nil
}

// shutdown stops srv gracefully: in-flight requests and the background work (bgDone) get
// ShutdownGrace to finish; after it the runs still going are interrupted and their requests
// get answerGrace to answer with that result.
func shutdown(srv *http.Server, eng *Core, bgDone <-chan struct{}, log *slog.Logger) {
	shutdownCtx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if err == nil {
		err = waitFor(shutdownCtx, bgDone)
	}
	if err == nil {
		return
	}
	log.Warn("in-flight executions did not finish in time; interrupting them", "error", err)
	eng.Service.Interrupt()
	// Not with shutdownCtx, which has passed: the sessions' hibernation failed at once with it,
	// and every session of every agent was ended without its files when one request outlasted
	// the grace (trial, 2 December 2026).
	eng.stopSessions()
	answerCtx, cancelAnswer := context.WithTimeout(context.Background(), answerGrace)
	defer cancelAnswer()
	if err := errors.Join(srv.Shutdown(answerCtx), waitFor(answerCtx, bgDone)); err != nil {
		log.Error("interrupted executions did not answer in time", "error", err)
	}
}

// logStopped says the daemon stopped, naming the warm containers it leaves up.
func logStopped(eng *Core, log *slog.Logger) {
	var up []string
	for _, id := range eng.boxes() {
		if id != "" { // a slot that never had one
			up = append(up, id)
		}
	}
	if len(up) > 0 {
		log.Info("stopped; the warm "+eng.boxKind+" stay up for the next daemon (`sandpit sandbox rm` removes them)",
			eng.boxKind, strings.Join(up, ","))
	} else {
		log.Info("stopped; no warm " + eng.boxKind + " were started (the runtime never reached its engine)")
	}
}

// CheckExposure refuses a listen address beyond loopback without a bearer token.
func CheckExposure(cfg config.Config) error {
	host := hostOf(cfg.Listen)
	if ip := net.ParseIP(host); (ip == nil || !ip.IsLoopback()) && !strings.EqualFold(host, "localhost") && cfg.Token == "" {
		return fmt.Errorf("listen %s reaches beyond this machine, and then a bearer token is required: set token (SANDPIT_TOKEN) "+
			"to a long random string, and give it to clients; or listen on 127.0.0.1", cfg.Listen)
	}
	return nil
}

// waitFor waits until done is closed or ctx ends.
func waitFor(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("job runs still going: %w", ctx.Err())
	}
}

// sessionsStopGrace is how long the sessions get to hibernate as the engine stops.
const sessionsStopGrace = time.Minute

// stopSessions hibernates the sessions (session_hibernate_on_stop) or ends them, within
// sessionsStopGrace of its own; their containers go.
func (e *Core) stopSessions() {
	ctx, cancel := context.WithTimeout(context.Background(), sessionsStopGrace)
	defer cancel()
	e.Sessions.Shutdown(ctx)
}

// answerGrace is how long interrupted executions get to write their results.
const answerGrace = 5 * time.Second

func hostOf(addr string) string {
	host, _, _ := net.SplitHostPort(addr)
	return host
}

// ShutdownGrace is how long an engine that stops (the daemon, `sandpit mcp` on its own engine)
// waits for the runs in flight, its job fires' among them, before it interrupts them.
const ShutdownGrace = 10 * time.Second

// secretsInjector is the egress proxy's injector of secrets: the data directory's CA (made on
// first use), hosts verified against the system's trust store and secrets_trust_ca_file's.
func secretsInjector(cfg config.Config, log *slog.Logger) (*secrets.Injector, error) {
	ca, err := secrets.LoadCA(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if cfg.SecretsTrustCAFile != "" {
		pem, err := os.ReadFile(cfg.SecretsTrustCAFile)
		if err != nil {
			return nil, fmt.Errorf("secrets_trust_ca_file: %w", err)
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("secrets_trust_ca_file: %s holds no PEM certificate", cfg.SecretsTrustCAFile)
		}
	}
	return secrets.NewInjector(ca, roots, log), nil
}

// templatesOf is e's templates for the API (nil, a nil interface, without them).
func templatesOf(e *Core) httpapi.Templates {
	if e.Templates == nil {
		return nil
	}
	return e.Templates
}
