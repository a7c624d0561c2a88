// Package docker is the sandbox.Runtime on a Docker engine: it builds the sandbox image and
// keeps a pool of warm, locked-down containers per data directory, one per slot (adopting them
// after a daemon restart when their settings match). Each container is a slot's whole sandbox,
// with its own executor (started with `docker exec` and driven over the exec's stdin and
// stdout), fork server, network namespace, /tmp, memory, CPU and pids budget: concurrent runs
// share nothing writable. When a container or its executor dies, or a run's cleanup does not
// finish in time, that slot's container is replaced while the other slots go on serving.
package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/control"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/runtime/boxspec"
	"github.com/sandpit-dev/sandpit/internal/runtime/slotpool"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Config configures the runtime.
type Config struct {
	// DataDir is the absolute path of the data directory; it names and labels the containers.
	DataDir string
	Recipe  Recipe
	// Box is each slot's container: its limits are per slot.
	Box Box
	// Slots is how many slots, and so containers, the pool has (1 to MaxSlots).
	Slots int
	// UIDBlock is the block of the image's uids the boxes' code runs as (see boxspec.UIDBlock):
	// every runtime on one host needs a block of its own.
	UIDBlock boxspec.UIDBlock
	// ReadyWait is how long a run waits for its slot's sandbox to come back before it is
	// refused with sandbox.ErrNotReady.
	ReadyWait time.Duration
	// SettleTimeout is how long a slot's cleanup after a run may take before the slot's
	// container is replaced instead (default 5 s).
	SettleTimeout time.Duration
	// Progress receives the image build's output when the image has to be built (may be nil).
	Progress io.Writer
	// Pip holds pip's settings for dependency installs (index, mirrors, binary only).
	Pip protocol.PipOptions
	// WaitForEngine makes Start succeed when the Docker engine does not answer: the runtime is
	// then not ready (saying why) and keeps trying, building the image and starting the
	// sandboxes once the engine answers. A daemon waits; a one-off command fails at once.
	WaitForEngine bool
	// Control tunes the control lines (heartbeat); zero values take the defaults.
	Control control.Options
	// ForkServer configures each executor's fork server.
	ForkServer boxspec.ForkServer
	// StraySweep is how often, after Start, the data directory's containers that no slot and
	// no live session uses are removed again (default a minute; see sweep).
	StraySweep time.Duration
	// WarmSessions is how many session containers are kept created, started and unclaimed, so
	// that OpenSession (a new session, a resume from hibernation, a fork) claims one instead
	// of waiting for a container's start (see keepPool). 0 keeps none; at most MaxSessions.
	WarmSessions int
}

// Runtime is a sandbox.Runtime backed by a pool of warm Docker containers, one per slot.
// Create it with Start.
type Runtime struct {
	api   client.APIClient
	cfg   Config
	log   *slog.Logger
	slots *slotpool.Pool
	// cgroups caches, by slot, its container's memory cgroup directory (runscWatch).
	cgroups []cgroupCache

	imgMu sync.Mutex // held while the image is ensured
	img   Image

	// ctx ends when Close is called.
	ctx        context.Context
	close      context.CancelFunc
	supervised sync.WaitGroup // the sweep and the warm pool's loop

	sessMu   sync.Mutex
	sessUIDs map[int]bool    // session uid indexes in use (see OpenSession)
	sessions map[string]bool // the IDs of the sessions whose containers this runtime made
	warm     []warmBox       // the warm session containers ready and unclaimed, oldest first
	warmKeys map[string]bool // the keys of this runtime's warm containers not removed: true once claimed
	poolKick chan struct{}   // a session claimed a warm container or freed a uid (see keepPool)

	inbox inbox // the session containers' inboxes (inbox.go)

	// strays is set once the containers no slot or live session uses have been removed: at
	// Start, or, when the engine did not answer then, at the first connection.
	strays atomic.Bool
}

var (
	_ sandbox.Runtime   = (*Runtime)(nil)
	_ sandbox.Settler   = (*Runtime)(nil)
	_ sandbox.Installer = (*Runtime)(nil)
)

// Start builds the image if it is missing, removes the data directory's containers that no
// slot uses, ensures slot 0's container and starts its executor, and returns a ready Runtime
// that brings the other slots up in the background and keeps every slot's sandbox up until
// Close (AllReady waits for them).
func Start(ctx context.Context, api client.APIClient, cfg Config, log *slog.Logger) (*Runtime, error) {
	if cfg.Slots < 1 || cfg.Slots > MaxSlots {
		return nil, fmt.Errorf("slots is %d; allowed range is 1 to %d", cfg.Slots, MaxSlots)
	}
	if cfg.UIDBlock < 0 || cfg.UIDBlock >= boxspec.UIDBlocks {
		return nil, fmt.Errorf("uid block is %d; allowed range is 0 to %d", cfg.UIDBlock, boxspec.UIDBlocks-1)
	}
	if cfg.WarmSessions < 0 || cfg.WarmSessions > MaxSessions {
		return nil, fmt.Errorf("warm sessions is %d; allowed range is 0 to %d", cfg.WarmSessions, MaxSessions)
	}
	if cfg.SettleTimeout <= 0 {
		cfg.SettleTimeout = 5 * time.Second
	}
	if cfg.StraySweep <= 0 {
		cfg.StraySweep = time.Minute
	}
	r := &Runtime{api: api, cfg: cfg, log: log, poolKick: make(chan struct{}, 1), cgroups: make([]cgroupCache, cfg.Slots)}
	r.ctx, r.close = context.WithCancel(context.Background())
	r.setUpInbox(log)
	r.slots = slotpool.New(slotpool.Config{Slots: cfg.Slots, ReadyWait: cfg.ReadyWait, SettleTimeout: cfg.SettleTimeout,
		ConnectTimeout: 2 * time.Minute, Pip: cfg.Pip, ForkServer: cfg.ForkServer.Enabled}, slotBackend{r}, log)
	if err := r.ping(ctx); err != nil {
		if !cfg.WaitForEngine {
			r.close()
			return nil, err
		}
		log.Warn("the Docker engine does not answer; waiting for it", "error", err)
		r.slots.Down(err)
		r.superviseAll()
		return r, nil
	}
	err := r.checkRuntime(ctx)
	if err == nil {
		err = r.removeStraysOnce(ctx)
	}
	// Slot 0 first, and the runtime is ready once it is: the other slots come up beside it
	// (their supervisors connect them) and the Service offers each once it is (see Settle).
	if err == nil {
		err = r.slots.Connect(ctx, 0)
	}
	if err != nil {
		r.close()
		_ = r.slots.Close()
		return nil, err
	}
	r.superviseAll()
	return r, nil
}

func (r *Runtime) superviseAll() {
	r.slots.Supervise()
	r.supervised.Go(r.sweep)
	if r.cfg.WarmSessions > 0 {
		r.supervised.Go(r.keepPool)
	}
}

// sweep removes, every StraySweep until Close, the data directory's containers that no slot
// and no live session uses (removeStrays): those Start could not see, such as one a killed
// daemon's request had the engine make after this runtime started, and those this runtime
// lost track of, such as a session's whose removal failed or whose creation was given up
// before the engine answered. A session's container is its once OpenSession has begun, so a
// sweep never takes one being made.
func (r *Runtime) sweep() {
	tick := time.NewTicker(r.cfg.StraySweep)
	defer tick.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-tick.C:
		}
		if !r.strays.Load() {
			continue // the engine has not answered yet: the first connection removes them
		}
		ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
		err := r.removeStrays(ctx)
		cancel()
		if err != nil && r.ctx.Err() == nil {
			r.log.Warn("removing the containers no slot or session uses failed; trying again", "error", err, "retry_in", r.cfg.StraySweep)
		}
	}
}

// checkRuntime checks that the engine has the OCI runtime the box asks for, and warns when that
// runtime's own options take away the network the configuration asks for.
func (r *Runtime) checkRuntime(ctx context.Context) error {
	name := r.cfg.Box.Runtime
	if name == "" {
		return nil
	}
	info, err := r.api.Info(ctx, client.InfoOptions{})
	if err != nil {
		return fmt.Errorf("reading the Docker engine's runtimes: %w", err)
	}
	rt, ok := info.Info.Runtimes[name]
	if !ok {
		return fmt.Errorf("the Docker engine has no runtime %q (it has: %s): install it and register it in the engine's daemon.json "+
			"(for gVisor: apt-get install runsc, then scripts/register-runsc.sh), or set runtime to runc", name,
			strings.Join(slices.Sorted(maps.Keys(info.Info.Runtimes)), ", "))
	}
	if r.cfg.Box.Network == "full" && slices.Contains(rt.Args, "--network=none") {
		r.log.Warn("the runtime is registered with --network=none: the sandboxes have no network but loopback, whatever the network setting says",
			"runtime", name, "network", r.cfg.Box.Network)
	}
	return nil
}

// ping checks that the engine answers.
func (r *Runtime) ping(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := r.api.Ping(pctx, client.PingOptions{}); err != nil {
		return fmt.Errorf("cannot reach the Docker engine (%w); is it running? On Linux: `sudo systemctl start docker` or `sudo dockerd &`", err)
	}
	return nil
}

// Image returns the sandbox image in use (zero until the engine has answered).
func (r *Runtime) Image() Image {
	r.imgMu.Lock()
	defer r.imgMu.Unlock()
	return r.img
}

// image ensures the sandbox image once and returns it.
func (r *Runtime) image(ctx context.Context) (Image, error) {
	r.imgMu.Lock()
	defer r.imgMu.Unlock()
	if r.img.Tag != "" {
		return r.img, nil
	}
	progress := r.cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	img, _, err := EnsureImage(ctx, r.api, r.cfg.Recipe, progress)
	if err != nil {
		return Image{}, err
	}
	r.img = img
	return img, nil
}

// removeStrays removes the data directory's containers that belong to no slot of the pool, to
// no live session of this runtime and to none of its warm session containers: those of a
// larger pool, of an older layout, of the sessions and warm containers of an earlier daemon,
// or of sessions this runtime no longer holds.
func (r *Runtime) removeStrays(ctx context.Context) error {
	list, err := Containers(ctx, r.api, r.cfg.DataDir)
	if err != nil {
		return err
	}
	for _, c := range list {
		if slot, err := strconv.Atoi(c.Labels[labelSlot]); err == nil && slot >= 0 && slot < r.cfg.Slots {
			continue
		}
		if r.liveSession(c.Labels[labelSession]) || r.keptWarm(c.Labels[labelWarm]) {
			continue // this runtime's own session, or its warm container (claimed or not)
		}
		r.log.Info("removing a sandpit container that no slot or live session uses", "container", shortID(c.ID), "state", c.State,
			"session", c.Labels[labelSession], "warm", c.Labels[labelWarm] != "")
		if err := removeContainer(ctx, r.api, c.ID); err != nil {
			return err
		}
	}
	return nil
}

// removeStraysOnce runs removeStrays until it has succeeded once.
func (r *Runtime) removeStraysOnce(ctx context.Context) error {
	if r.strays.Load() {
		return nil
	}
	if err := r.removeStrays(ctx); err != nil {
		return err
	}
	r.strays.Store(true)
	return nil
}

// liveSession reports whether id names a session whose container this runtime made and has
// not removed.
func (r *Runtime) liveSession(id string) bool {
	if id == "" {
		return false
	}
	r.sessMu.Lock()
	defer r.sessMu.Unlock()
	return r.sessions[id]
}

var _ sandbox.Warmer = (*Runtime)(nil)

// Warmth says how many slots are up and how many start runs as forks, as each slot's executor
// last answered the heartbeat (every 2 s), and how many warm session containers are ready.
func (r *Runtime) Warmth() sandbox.Warmth {
	w := r.slots.Warmth()
	r.sessMu.Lock()
	w.Sessions = len(r.warm)
	r.sessMu.Unlock()
	return w
}

// AllReady waits until every slot's sandbox is up (or ctx ends, with ctx's error).
func (r *Runtime) AllReady(ctx context.Context) error { return r.slots.AllReady(ctx) }

// ContainerID returns slot 0's container ID ("" while it has none).
func (r *Runtime) ContainerID() string { return r.slots.Names()[0] }

// ContainerIDs returns every slot's container ID, by slot ("" for a slot that has none yet).
func (r *Runtime) ContainerIDs() []string { return r.slots.Names() }

// executorCommand is the executor's command line in slot's container: one slot, whose runs
// are the uid of slot in the runtime's block. Every slot has a uid of its own although it has
// a container of its own: the kernel counts some limits per uid across the whole host
// (RLIMIT_NPROC, inotify instances, POSIX message queue bytes), and a shared uid would let one
// slot's run use up another's.
func (r *Runtime) executorCommand(slot int) []string {
	return r.executorCommandFor(r.cfg.UIDBlock.Slot(slot), r.cfg.ForkServer.Enabled)
}

// executorCommandFor is the executor's command line for one slot run as uid, with or without
// the fork server (see boxspec.Executor).
func (r *Runtime) executorCommandFor(uid int, forkServer bool) []string {
	fs := r.cfg.ForkServer
	return boxspec.Executor{UID: uid, ForkServer: forkServer, Preload: fs.Preload, ForkServerMaxRuns: fs.MaxRuns,
		GVisor: r.cfg.Box.gVisor(), EgressProxy: r.cfg.Box.Network == "allowlist"}.Command()
}

// ProxyAddr is where the executor serves the egress proxy in a box of network "allowlist":
// the box's own loopback (each box has its own network namespace).
const ProxyAddr = boxspec.ProxyAddr

// Run runs spec in slot's container; see sandbox.Runtime.
func (r *Runtime) Run(ctx context.Context, slot int, spec sandbox.Spec, emit func(sandbox.Event)) (sandbox.Result, error) {
	line, containerID, err := r.slots.Current(ctx, slot)
	if err != nil {
		return sandbox.Result{}, err
	}
	runCtx, overMemory, stopWatch := r.runscWatch(ctx, slot, containerID)
	res, err := line.Run(runCtx, 0, spec, emit)
	stopWatch()
	if used := overMemory(); used > 0 && ctx.Err() == nil && (err == nil || !errors.Is(err, control.ErrClosed)) {
		// The daemon's watch stopped the run: what the box holds on the host came within
		// RunscMemoryMargin of the container's limit, past what the executor can see.
		res.Outcome, res.ExitCode, res.Signal = sandbox.OutcomeMemoryLimit, 128+9, 9
		res.Reason = fmt.Sprintf("the box's memory on the host (%d MiB, gVisor's kernel and the run's socket buffers included) came within "+
			"%d MiB of the container's limit, and the run was stopped", used>>20, RunscMemoryMargin>>20)
		return res, nil
	}
	if err != nil && errors.Is(err, control.ErrClosed) && !errors.Is(err, sandbox.ErrNotReady) {
		what, oom := r.whatStopped(containerID)
		if oom {
			// The box is the run's alone: memory it filled (under runsc also socket buffers
			// and what gVisor's kernel holds for it, which the executor's watch cannot see)
			// had the engine kill the whole container. The run's outcome, not the system's.
			res.Outcome, res.ExitCode, res.Signal = sandbox.OutcomeMemoryLimit, 128+9, 9
			res.Reason = fmt.Sprintf("the box ran out of memory (%d MiB, with what the kernel holds for the run's sockets) and the engine "+
				"killed its container during the run; sandpit is bringing the sandbox back", r.cfg.Box.MemoryBytes>>20)
			r.log.Warn("the sandbox container was killed for memory during a run", "slot", slot, "container", shortID(containerID), "id", spec.ID)
			return res, nil
		}
		err = fmt.Errorf("%s; sandpit is bringing the sandbox back (%w)", what, err)
	}
	return res, err
}

// Settle waits until slot's last run is cleaned up (sandbox.Settler). A cleanup that fails or
// takes longer than SettleTimeout gets the slot a new container instead; Settle then waits
// (up to ReadyWait) for it.
func (r *Runtime) Settle(ctx context.Context, slot int) error { return r.slots.Settle(ctx, slot) }

// SlotUp reports whether slot's sandbox is up now (its executor answers); the Service gives a
// run a free slot that is up before one whose sandbox is being brought back.
func (r *Runtime) SlotUp(slot int) bool { return r.slots.Up(slot) }

// Install makes req's requirements importable in slot's container (sandbox.Installer); they
// land in the package volume that every slot reads.
func (r *Runtime) Install(ctx context.Context, slot int, req sandbox.InstallRequest, progress func(sandbox.DependencyStatus)) (sandbox.Installed, error) {
	return r.slots.Install(ctx, slot, req, progress)
}

// ListPackages lists the dependencies installed in the package volume.
func (r *Runtime) ListPackages(ctx context.Context) ([]protocol.Package, error) {
	return r.slots.Packages(ctx, protocol.Packages{Op: "list"})
}

// RemovePackage removes every version of the package name from the package volume and returns
// what it removed (none when it is not installed).
func (r *Runtime) RemovePackage(ctx context.Context, name string) ([]protocol.Package, error) {
	return r.slots.Packages(ctx, protocol.Packages{Op: "remove", Name: name})
}

// Resets counts the times a slot's sandbox was lost (its container or executor died or hung,
// or a cleanup did not finish) and had to be brought back.
func (r *Runtime) Resets() int64 { return r.slots.Resets() }

// Ready returns nil when at least one slot's executor session is live, else why not.
func (r *Runtime) Ready(ctx context.Context) error { return r.slots.Ready(ctx) }

// Close ends every executor session (killing every run), stops supervising and removes the
// warm session containers no session claimed. The slots' containers keep running for the next
// daemon to adopt; sessions' containers are their sessions' to remove (sandbox.SessionBox).
func (r *Runtime) Close() error {
	if r.ctx.Err() != nil {
		return nil
	}
	r.close()
	r.supervised.Wait()
	var errs []error
	if r.cfg.WarmSessions > 0 && r.strays.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		errs = append(errs, r.removeWarm(ctx))
		cancel()
	}
	errs = append(errs, r.slots.Close())
	return errors.Join(errs...)
}

// slotBackend makes the slots' containers (slotpool.Backend).
type slotBackend struct{ r *Runtime }

// Connect ensures the image (once), removes the strays (once: the engine may not have
// answered at Start) and slot's container (adopting it unless discard), and starts a fresh
// executor in it.
func (sb slotBackend) Connect(ctx context.Context, slot int, discard bool, log *slog.Logger) (*control.Line, string, error) {
	r := sb.r
	img, err := r.image(ctx)
	if err != nil {
		return nil, "", err
	}
	if err := r.removeStraysOnce(ctx); err != nil {
		return nil, "", err
	}
	id, adopted, err := ensureContainer(ctx, r.api, log, img, r.cfg.Box, r.cfg.DataDir, slot, discard)
	if err != nil {
		return nil, "", err
	}
	line, err := r.execExecutor(ctx, id, r.executorCommand(slot), log)
	if err != nil {
		return nil, "", fmt.Errorf("starting the executor in container %s: %w", shortID(id), err)
	}
	log.Info("sandbox ready", "container", shortID(id), "adopted", adopted, "image", img.Tag, "python", line.Hello().Python)
	return line, id, nil
}

// Unreachable returns why the Docker engine does not answer (nil when it does).
func (sb slotBackend) Unreachable(ctx context.Context) error { return sb.r.ping(ctx) }

// execExecutor starts the executor in containerID with cmd and returns the control line
// with it once it has said hello; its log goes to log.
func (r *Runtime) execExecutor(ctx context.Context, containerID string, cmd []string, log *slog.Logger) (*control.Line, error) {
	api := r.api
	ex, err := api.ExecCreate(ctx, containerID, client.ExecCreateOptions{
		User:         "0",
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		Cmd:          cmd,
	})
	if err != nil {
		return nil, err
	}
	att, err := api.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, err
	}
	// The exec's stdout and stderr arrive multiplexed: stdout is the protocol, stderr the
	// executor's log.
	pr, pw := io.Pipe()
	logw := boxspec.NewLineLogger(log.With("source", "executor"))
	go func() {
		_, err := stdcopy.StdCopy(pw, logw, att.Reader)
		logw.Flush()
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
	}()
	closer := closeFunc(func() error {
		_ = att.CloseWrite() // the executor sees the end of its stdin, kills every run and exits
		att.Close()
		return nil
	})
	helloCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return control.Start(helloCtx, pr, att.Conn, closer, log, r.cfg.Control)
}

// whatStopped says whether the container or only the executor stopped, for a run's reason,
// and whether the engine killed the container for memory. A killed container can still read
// as running for a moment after its stream broke, so it looks again for up to half a second
// before it blames the executor.
func (r *Runtime) whatStopped(containerID string) (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for deadline := time.Now().Add(500 * time.Millisecond); ; time.Sleep(50 * time.Millisecond) {
		got, err := r.api.ContainerInspect(ctx, containerID, client.ContainerInspectOptions{})
		switch st := got.Container.State; {
		case err != nil && r.ping(ctx) != nil:
			return "the connection to the Docker engine was lost during the run", false
		case err != nil:
			return "the sandbox container disappeared during the run", false
		case st != nil && (!st.Running || st.Paused):
			return fmt.Sprintf("the sandbox container stopped during the run (state %s, exit code %d, killed for memory: %v)",
				st.Status, st.ExitCode, st.OOMKilled), st.OOMKilled
		case time.Now().After(deadline):
			return "the executor in the sandbox container stopped during the run", false
		}
	}
}

type closeFunc func() error

func (f closeFunc) Close() error { return f() }
