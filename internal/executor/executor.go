// Package executor is the server side of the control line: it runs inside the sandbox
// container as root (with a few capabilities), receives runs from the daemon over one
// protocol.Conn, and executes each as its slot's uid with the Python bootstrap, streaming
// output back and answering with one result.
//
// Per run it provides: a fresh private directory holding the run's input files, a minimal
// environment, empty stdin, rlimits (applied by the bootstrap), a wall-clock deadline that
// kills every process of the slot's uid, byte caps on stdout and stderr, out-of-memory
// detection, the output files the run left in its directory (read once its processes are
// dead, never through a link; see files.go), and cleanup of everything the run left. When the
// control line ends (the daemon went away) every run is killed and Serve returns.
//
// It imports only the standard library and sandpit's stdlib-only packages: it is built as a
// static binary and copied into the image.
package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Config says where things are inside the box. The zero value is not usable; see DefaultConfig.
type Config struct {
	// Slots is how many runs may execute at once; slot N runs as uid UIDBase+N.
	Slots int
	// UIDBase is the uid (and gid) of slot 0. It must not be 0.
	UIDBase int
	// Python is the interpreter: a path, or a name looked up in PATH.
	Python string
	// Bootstrap is the path of bootstrap.py. The executor compiles it once, when it starts,
	// into RunRoot/bootstrap.pyc, from which runs and fork servers then load it.
	Bootstrap string
	// RunRoot holds the run directories (RunRoot/slot-N) and the executor's pid file.
	RunRoot string
	// TmpDirs are shared writable directories (and the POSIX message queue directory) cleaned
	// of a slot's files after each run.
	TmpDirs []string
	// MatplotlibCache is a directory of prebuilt matplotlib cache files copied into each run's
	// MPLCONFIGDIR; missing means none.
	MatplotlibCache string
	// KillTimeout bounds how long killing a slot's processes may take before the run is
	// reported as a sandbox_error.
	KillTimeout time.Duration
	// PackagesRoot is the package directory (a named volume) dependencies are installed into;
	// "" or missing disables installs. InstallerUID is the uid pip runs as; Checker the path of
	// deps.py.
	PackagesRoot string
	InstallerUID int
	Checker      string
	// ForkServer is the path of forkserver.py; "" starts every run cold (a fresh interpreter).
	// The fork server runs as root, imports Preload (modules the image lacks are skipped) and
	// forks each run's process, which becomes the slot's uid before it reads the run's code.
	ForkServer string
	Preload    []string
	// ForkServerMaxRuns replaces the fork server after that many runs; 0 never does.
	ForkServerMaxRuns int
	// GVisor is true when the box's kernel is gVisor (the runtime runsc), which differs from
	// Linux where the limits are enforced: it ignores RLIMIT_DATA, so a run's memory limit is
	// an address-space limit (RLIMIT_AS) there; it has no memory cgroup whose out-of-memory
	// killer would pick the run (the host's kills the whole sandbox), so the executor watches
	// the box's free memory during a run; and a fork storm at the process cap exhausts the
	// sandbox's host threads (ptrace platform), so a run that reaches its process cap is
	// stopped. See run.watch.
	GVisor bool
	// Self is the executor's binary, which starts a session's commands under their limits in
	// its mode LimitedExec (see limits.go); "" starts them without (processes are then
	// still capped under gVisor).
	Self string
	// MemoryReserve is, under gVisor, the free memory of the box (MemAvailable in
	// /proc/meminfo, bytes) below which the running program is stopped with outcome
	// memory_limit: the room the sandbox's own kernel needs and the watch's reaction time.
	MemoryReserve int64
	// SessionHome, when set, is the working directory and home of slot 0 (a session's
	// executor: its own tmpfs at sandbox.SessionHome), made once and kept for the session's
	// life; its interpreter, commands and files share it.
	SessionHome string
	// SocketBufferMax, when not 0, is written under gVisor as the maximum of the box's
	// net.ipv4.tcp_rmem and tcp_wmem (bytes): gVisor ignores the container's sysctls, and its
	// network stack's buffers are memory of the sandbox that the watch of MemAvailable does not
	// see (a run that queues them fills the box until the engine kills it).
	SocketBufferMax int64
	// Proxy is the loopback address ("127.0.0.1:3128") the egress proxy listens on for network
	// "allowlist" ("" serves none): runs and installs get HTTP_PROXY, HTTPS_PROXY and pip's
	// proxy set to it, and the daemon decides and dials each connection (see proxy.go).
	Proxy string
}

// proxyEnv is the environment that points a program's HTTP clients at the egress proxy;
// empty without one. Loopback stays direct: a program's own servers in the box.
func (c Config) proxyEnv() []string {
	if c.Proxy == "" {
		return nil
	}
	u := "http://" + c.Proxy
	return []string{"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u, "PIP_PROXY=" + u,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1"}
}

// DefaultConfig is the layout of the sandpit image.
func DefaultConfig() Config {
	return Config{
		Slots:     4,
		UIDBase:   10000,
		Python:    "python3",
		Bootstrap: "/opt/sandpit/bootstrap.py",
		RunRoot:   "/sandbox",
		TmpDirs:   []string{"/tmp", "/dev/shm", "/dev/mqueue"},

		MatplotlibCache: "/opt/sandpit/matplotlib",
		KillTimeout:     5 * time.Second,
		PackagesRoot:    "/opt/sandpit/packages",
		InstallerUID:    9999,
		Checker:         "/opt/sandpit/deps.py",

		ForkServer:        "/opt/sandpit/forkserver.py",
		Preload:           []string{"numpy", "pandas", "matplotlib", "scipy"},
		ForkServerMaxRuns: 1000,
	}
}

// Executor serves one control line.
type Executor struct {
	cfg  Config
	conn *protocol.Conn
	log  *slog.Logger

	installer *installer
	forks     *forkServers
	proxy     *proxy // nil without Config.Proxy
	ports     *ports // a session's (see ports.go)
	// ipcListed: the kernel lists System V IPC objects (/proc/sysvipc), as Linux does and
	// gVisor does not; read once, at start.
	ipcListed bool
	// boxMemory is the box's memory limit in bytes (its memory cgroup's: the container's
	// memory_bytes), 0 when unknown (no limit, or under gVisor); read once, at start.
	boxMemory int64

	// changingUID is held for writing while a program is started or forked as a slot's uid,
	// until it has become that uid, and for reading while /proc is scanned: under gVisor, the
	// first lookup of /proc/<pid> fixes the owner of /proc/<pid>/fd for good, and a lookup
	// while the new process was still root's left a run unable to read its own descriptors.
	changingUID sync.RWMutex

	mu       sync.Mutex
	runs     map[string]*run               // by execution ID
	busy     map[int]bool                  // by slot
	installs map[string]context.CancelFunc // by install request ID
	next     map[int]*nextProgram          // by slot: its next program (see reserveNext)
	interps  map[int]*interp               // by slot: its session interpreter (see interp.go)
	procs    map[string]*proc              // by process ID: a session's commands (see commands.go)
	watches  watchers                      // a session's directory watchers (see watch.go)
	// homesReady: by slot, its session home is made (see sessionHome).
	homesReady map[int]bool
	// pythonVersion is the interpreter's ("3.11.2"); gidSeq counts the commands' groups.
	pythonVersion string
	gidSeq        int
	stopping      bool
	wg            sync.WaitGroup
}

// Serve prepares the box (killing a stale executor and every slot's leftover processes and
// files), greets the daemon and serves runs until the session ends or ctx is cancelled. On
// return, every run has been killed and cleaned up. It returns nil when the daemon closed the
// session cleanly.
func Serve(ctx context.Context, conn *protocol.Conn, cfg Config, log *slog.Logger) error {
	if cfg.UIDBase <= 0 || cfg.Slots <= 0 {
		return fmt.Errorf("executor: invalid config: uid base %d, %d slots", cfg.UIDBase, cfg.Slots)
	}
	if cfg.UIDBase <= killerUID && killerUID < cfg.UIDBase+cfg.Slots {
		return fmt.Errorf("executor: invalid config: the slots' uids %d to %d take in %d, the uid of the executor's kill thread",
			cfg.UIDBase, cfg.UIDBase+cfg.Slots-1, killerUID)
	}
	e := &Executor{cfg: cfg, conn: conn, log: log, runs: map[string]*run{}, busy: map[int]bool{},
		installs: map[string]context.CancelFunc{}, next: map[int]*nextProgram{}, interps: map[int]*interp{},
		procs: map[string]*proc{}, homesReady: map[int]bool{}, ipcListed: ipcListed(), boxMemory: cgroupMemoryLimit()}
	python, err := e.prepare()
	if err != nil {
		return err
	}
	e.pythonVersion = python
	if e.installer, err = newInstaller(e, e.cfg.Python, python); err != nil {
		return err
	}
	e.forks = newForkServers(e.cfg, log)
	e.forks.onRetire = e.dropNext
	if cfg.Proxy != "" {
		if e.proxy, err = startProxy(e, cfg.Proxy); err != nil {
			return err
		}
		defer e.proxy.close() // after stopAll: the runs that used it are gone
	}
	e.ports = newPorts(e)
	defer e.ports.close()
	if err := conn.Send(&protocol.Message{Kind: protocol.KindHello, Hello: &protocol.Hello{
		Version: protocol.Version, Slots: cfg.Slots, Python: python, PID: os.Getpid(),
	}}); err != nil {
		return fmt.Errorf("executor: greeting the daemon: %w", err)
	}

	msgs := make(chan *protocol.Message)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := conn.Receive()
			if err != nil {
				recvErr <- err
				return
			}
			// The streams take their messages here, without a hop to the loop below (their
			// handlers never block): a connection's bytes are most of the frames.
			if m.Kind.IsEgress() {
				e.streamMessage(m)
				continue
			}
			msgs <- m
		}
	}()
	e.forks.start()
	defer e.forks.close() // after stopAll: the runs it forked are gone by then
	defer e.stopAll()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("executor: reading from the daemon: %w", err)
		case m := <-msgs:
			e.handle(m)
		}
	}
}

func (e *Executor) handle(m *protocol.Message) {
	switch m.Kind {
	case protocol.KindRun:
		if m.Run == nil {
			e.refuse(m.ID, "run message without run")
			return
		}
		e.start(m.ID, m.Run.Slot, m.Run.Spec)
	case protocol.KindReply:
		e.mu.Lock()
		r := e.runs[m.ID]
		e.mu.Unlock()
		if r != nil && m.AgentReply != nil {
			select {
			case r.replies <- m.AgentReply:
			default: // a reply nobody waits for (a duplicate): dropped
			}
		}
	case protocol.KindInstall:
		if m.Install == nil {
			e.send(&protocol.Message{Kind: protocol.KindInstalled, ID: m.ID, Error: "install message without install"})
			return
		}
		e.wg.Go(func() {
			progress := func(d sandbox.DependencyStatus) {
				e.send(&protocol.Message{Kind: protocol.KindInstallStatus, ID: m.ID, Dependency: &d})
			}
			ctx, cancel := context.WithCancel(context.Background())
			e.mu.Lock()
			e.installs[m.ID] = cancel
			e.mu.Unlock()
			defer func() {
				e.mu.Lock()
				delete(e.installs, m.ID)
				e.mu.Unlock()
				cancel()
			}()
			out := e.installer.install(ctx, *m.Install, progress)
			e.send(&protocol.Message{Kind: protocol.KindInstalled, ID: m.ID, Installed: &out})
		})
	case protocol.KindPackages:
		e.wg.Go(func() {
			if m.Packages == nil {
				e.send(&protocol.Message{Kind: protocol.KindPackagesResult, ID: m.ID, Error: "packages message without packages"})
				return
			}
			list, err := e.installer.packages(*m.Packages)
			reply := &protocol.Message{Kind: protocol.KindPackagesResult, ID: m.ID, PackageList: list}
			if err != nil {
				reply.Error = err.Error()
			}
			e.send(reply)
		})
	case protocol.KindPortOpen:
		e.ports.open(m)
	case protocol.KindPortList:
		e.wg.Go(func() { e.ports.list(m.ID) })
	case protocol.KindWatch:
		e.wg.Go(func() { e.watch(0, m) })
	case protocol.KindUnwatch:
		e.unwatch(m.ID)
	case protocol.KindCommand:
		if m.Command == nil {
			e.send(&protocol.Message{Kind: protocol.KindProcStarted, ID: m.ID, Error: "command message without command"})
			return
		}
		e.wg.Go(func() { e.startCommand(0, m.ID, *m.Command) })
	case protocol.KindProcInput, protocol.KindProcSignal, protocol.KindProcResize, protocol.KindProcAttach, protocol.KindProcDetach:
		e.wg.Go(func() { e.procOp(m) })
	case protocol.KindFileRead, protocol.KindFileWrite, protocol.KindFileList, protocol.KindFileStat,
		protocol.KindFileMkdir, protocol.KindFileRename, protocol.KindFileRemove:
		e.wg.Go(func() { e.fileOp(0, m) })
	case protocol.KindPing:
		fork, why := e.forks.state()
		if err := e.conn.Send(&protocol.Message{Kind: protocol.KindPong, ID: m.ID, Fork: fork, Error: why}); err != nil {
			e.log.Warn("answering a ping", "error", err)
		}
	case protocol.KindCancel:
		e.mu.Lock()
		r, cancelInstall := e.runs[m.ID], e.installs[m.ID]
		e.mu.Unlock()
		if r != nil {
			r.stop(stopCancelled)
		}
		if cancelInstall != nil {
			cancelInstall()
		}
	default:
		e.log.Warn("ignoring unknown message", "kind", m.Kind)
	}
}

// streamMessage passes a stream's message to its holder: a port's (PortStreamBit) or the
// egress proxy's.
func (e *Executor) streamMessage(m *protocol.Message) {
	switch {
	case m.Egress == nil:
	case m.Egress.Stream&protocol.PortStreamBit != 0 && m.Kind != protocol.KindEgressOpened:
		e.ports.handle(m)
	case e.proxy != nil:
		e.proxy.handleMessage(m)
	}
}

// send sends m, logging a failure (the session's end shows in the read loop).
func (e *Executor) send(m *protocol.Message) {
	if err := e.conn.Send(m); err != nil {
		e.log.Warn("sending a message", "kind", m.Kind, "id", m.ID, "error", err)
	}
}

func (e *Executor) refuse(id, reason string) {
	if err := e.conn.Send(&protocol.Message{Kind: protocol.KindRefused, ID: id, Error: reason}); err != nil {
		e.log.Warn("sending refusal", "id", id, "error", err)
	}
}

func (e *Executor) start(id string, slot int, spec sandbox.Spec) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case id == "":
		e.refuse(id, "run without an execution ID")
	case slot < 0 || slot >= e.cfg.Slots:
		e.refuse(id, fmt.Sprintf("slot %d does not exist; the executor has slots 0 to %d", slot, e.cfg.Slots-1))
	case e.busy[slot]:
		e.refuse(id, fmt.Sprintf("slot %d is already running", slot))
	case e.runs[id] != nil:
		e.refuse(id, "an execution with this ID is already running")
	case spec.TimeoutMS <= 0:
		e.refuse(id, "timeout_ms must be positive")
	default:
		var caFile string
		if spec.SecretCA != "" {
			f, err := e.secretCABundle(spec.SecretCA)
			if err != nil {
				e.refuse(id, err.Error())
				return
			}
			caFile = f
		}
		r := newRun(e, id, slot, spec)
		r.caFile = caFile
		e.busy[slot], e.runs[id] = true, r
		if spec.Session {
			r.session = true
			e.wg.Go(func() { e.serveSessionCall(r) })
			return
		}
		e.wg.Go(func() {
			// The result goes out as soon as every process of the run is gone; the slot stays
			// busy until its files are gone too, and then reports itself settled. In a box
			// shared by slots the other slots' runs would see what the run left (System V IPC,
			// files in /tmp): there it is removed before the result goes out.
			res := r.execute()
			e.mu.Lock()
			delete(e.runs, id)
			e.mu.Unlock()
			shared := e.cfg.Slots > 1
			var cleanErr error
			if shared {
				cleanErr = e.clean(slot)
			}
			if err := e.conn.Send(&protocol.Message{Kind: protocol.KindResult, ID: id, Result: res}); err != nil {
				e.log.Warn("sending result", "id", id, "error", err)
			}
			if !shared {
				cleanErr = e.clean(slot)
			}
			settled := &protocol.Message{Kind: protocol.KindSettled, Slot: slot}
			var next *nextProgram
			if err := cleanErr; err != nil {
				e.log.Error("cleaning a slot after its run", "slot", slot, "id", id, "error", err)
				settled.Error = err.Error()
			} else {
				// The slot's next program is reserved while the slot is busy and made once it
				// is settled: a run that comes meanwhile waits for it.
				next = e.reserveNext(slot)
			}
			e.mu.Lock()
			delete(e.busy, slot)
			e.mu.Unlock()
			e.send(settled)
			if next != nil {
				e.prepareNext(slot, next)
			}
		})
	}
}

// clean removes what slot's last run left: its directories, its files in the shared temporary
// directories and its IPC objects. Its processes are already gone.
func (e *Executor) clean(slot int) error {
	uid := e.cfg.UIDBase + slot
	var errs []error
	dirs := []string{e.slotDir(slot), e.homeDir(slot)}
	if dirs[0] != e.cfg.SessionHome {
		dirs = append(dirs, e.stateDir(slot)) // a session's is kept with its home (see sessionHome)
	}
	for _, dir := range dirs {
		if dir == e.cfg.SessionHome {
			if err := clearDir(dir); err != nil {
				errs = append(errs, fmt.Errorf("clearing the session's home: %w", err))
			}
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("removing the run's directory: %w", err))
		}
	}
	if err := removeOwned(uid, e.cfg.TmpDirs); err != nil {
		errs = append(errs, fmt.Errorf("removing the run's temporary files: %w", err))
	}
	if err := removeIPC(uid); err != nil {
		errs = append(errs, fmt.Errorf("removing the run's IPC objects: %w", err))
	} else if !e.ipcListed {
		// Where the kernel does not list them (gVisor), it still counts them: any left can
		// only be a run's, and only a new box removes them.
		if n, err := ipcObjectsLeft(); err != nil || n > 0 {
			errs = append(errs, fmt.Errorf("the run may have left System V IPC objects that this kernel does not list (%d counted, %v)", n, err))
		}
	}
	return errors.Join(errs...)
}

// stopAll kills every run and waits for their cleanup, then discards the ready programs.
func (e *Executor) stopAll() {
	defer e.discardNext()
	e.mu.Lock()
	e.stopping = true
	for _, r := range e.runs {
		r.stop(stopCancelled)
	}
	for _, cancel := range e.installs {
		cancel()
	}
	e.mu.Unlock()
	e.stopWatches()
	e.wg.Wait()
	e.closeInterps()
}

// prepare makes the box ready: a stale executor is killed, every slot's processes and files
// are removed, and the Python version is read.
func (e *Executor) prepare() (string, error) {
	if err := os.MkdirAll(e.cfg.RunRoot, 0o711); err != nil {
		return "", fmt.Errorf("executor: creating run root: %w", err)
	}
	if err := e.replaceStale(); err != nil {
		return "", err
	}
	for slot := range e.cfg.Slots {
		if err := e.killAndWait(e.cfg.UIDBase+slot, e.cfg.KillTimeout); err != nil {
			return "", fmt.Errorf("executor: clearing slot %d: %w", slot, err)
		}
		if err := e.clean(slot); err != nil {
			return "", fmt.Errorf("executor: clearing slot %d: %w", slot, err)
		}
	}
	if e.cfg.GVisor && e.cfg.SocketBufferMax > 0 {
		if err := boundSocketBuffers(e.cfg.SocketBufferMax); err != nil {
			return "", err
		}
	}
	python, err := exec.LookPath(e.cfg.Python)
	if err != nil {
		return "", fmt.Errorf("executor: finding the interpreter: %w", err)
	}
	e.cfg.Python = python
	src, err := os.ReadFile(e.cfg.Bootstrap)
	if err != nil {
		return "", fmt.Errorf("executor: bootstrap: %w", err)
	}
	// Not as root: a template's steps chose what this interpreter and its site-packages run
	// (a .pth file runs at startup), and root in the box is the executor's alone. The same
	// interpreter compiles the bootstrap (see compiledBootstrap).
	probe := exec.Command(python, "-I", "-c", probeProgram, e.cfg.Bootstrap)
	asUser(probe, checkerUID, "/")
	probe.Stdin = bytes.NewReader(src)
	var stderr bytes.Buffer
	probe.Stderr = &stderr
	out, err := probe.Output()
	if err != nil {
		return "", fmt.Errorf("executor: running %s: %w: %s", python, err, lastLines(stderr.String(), 3))
	}
	version, code, _ := bytes.Cut(out, []byte("\n"))
	if len(code) == 0 {
		e.log.Warn("runs compile the bootstrap each time", "error", lastLines(stderr.String(), 3))
	} else if e.cfg.Bootstrap, err = e.writeCompiled(code); err != nil {
		return "", err
	}
	return strings.TrimSpace(string(version)), nil
}

// probeProgram prints the interpreter's version on a line, then the bootstrap's source
// (stdin), compiled under its path (argv[1]) into the form of a .pyc file: the magic number,
// 12 bytes of zeros (no flags, no source time or size: nothing checks them), then the code.
// Nothing follows the version when the source does not compile (the reason is on stderr).
const probeProgram = `import importlib.util, marshal, platform, sys
print(platform.python_version(), flush=True)
try:
    code = compile(sys.stdin.buffer.read(), sys.argv[1], "exec", dont_inherit=True)
except Exception as e:
    print("compiling the bootstrap:", e, file=sys.stderr)
else:
    sys.stdout.buffer.write(importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(code))
`

// compiledBootstrap is the bootstrap's compiled code in RunRoot, which runs started cold and
// fork servers load instead of its source: a script run as such is compiled on every start
// (the image's root is read-only and runs write no .pyc): about 1 900 lines, whose compile
// was a quarter of a cold REST print(1) (122 ms against 85–94 under runc, 278 against 218
// under gVisor, on an idle machine of the CI kind, 7 December: docs/performance.md). It is
// root's, readable by every slot's uid through RunRoot (0711).
const compiledBootstrap = "bootstrap.pyc"

// writeCompiled writes code as RunRoot's compiledBootstrap and returns its path.
func (e *Executor) writeCompiled(code []byte) (string, error) {
	path := filepath.Join(e.cfg.RunRoot, compiledBootstrap)
	if err := publish(path, code); err != nil {
		return "", fmt.Errorf("executor: writing the compiled bootstrap: %w", err)
	}
	return path, nil
}

// publish writes data as path, root's and readable by all (0644), by rename from a file
// beside it: a process that opens path meanwhile reads the old file or the new one whole.
func publish(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	err = errors.Join(err, tmp.Chmod(0o644), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// replaceStale kills an earlier executor still serving this box (its daemon died without the
// session's end reaching it) and records this one's pid.
func (e *Executor) replaceStale() error {
	pidFile := filepath.Join(e.cfg.RunRoot, "executor.pid")
	if data, err := os.ReadFile(pidFile); err == nil {
		pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		self, _ := os.ReadFile("/proc/self/comm")
		if pid > 0 && pid != os.Getpid() && len(comm) > 0 && string(comm) == string(self) {
			e.log.Info("killing a stale executor", "pid", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			for i := 0; i < 500 && syscall.Kill(pid, 0) == nil; i++ {
				time.Sleep(2 * time.Millisecond)
			}
		}
	}
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return fmt.Errorf("executor: writing pid file: %w", err)
	}
	return nil
}

// clearDir removes everything in dir (a mount point, which itself stays).
func clearDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, ent := range entries {
		errs = append(errs, os.RemoveAll(filepath.Join(dir, ent.Name())))
	}
	return errors.Join(errs...)
}

// slotDir is slot's working directory (the run's cwd); homeDir its home (HOME, XDG's
// directories); stateDir the interpreter's own state (matplotlib's and IPython's
// directories), outside both, which the user's listing of its files never shows. All are
// private to the slot's uid (0700) and made afresh for each run (a session's once).
func (e *Executor) slotDir(slot int) string {
	if slot == 0 && e.cfg.SessionHome != "" {
		return e.cfg.SessionHome
	}
	return filepath.Join(e.cfg.RunRoot, "slot-"+strconv.Itoa(slot))
}

func (e *Executor) homeDir(slot int) string {
	if slot == 0 && e.cfg.SessionHome != "" {
		return e.cfg.SessionHome
	}
	return filepath.Join(e.cfg.RunRoot, "home-"+strconv.Itoa(slot))
}

func (e *Executor) stateDir(slot int) string {
	return filepath.Join(e.cfg.RunRoot, "state-"+strconv.Itoa(slot))
}

// boundSocketBuffers sets the box's TCP buffer maxima (net.ipv4.tcp_rmem and tcp_wmem, keeping
// their minimum and default) to max bytes, under gVisor, whose network stack keeps them.
func boundSocketBuffers(max int64) error {
	for _, name := range []string{"tcp_rmem", "tcp_wmem"} {
		path := "/proc/sys/net/ipv4/" + name
		raw, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("executor: reading %s: %w", path, err)
		}
		f := strings.Fields(string(raw))
		if len(f) != 3 {
			return fmt.Errorf("executor: %s holds %q, not three numbers", path, raw)
		}
		def, _ := strconv.ParseInt(f[1], 10, 64)
		line := fmt.Sprintf("%s %d %d\n", f[0], min(def, max), max)
		if err := os.WriteFile(path, []byte(line), 0); err != nil {
			return fmt.Errorf("executor: bounding the box's socket buffers (%s): %w", path, err)
		}
	}
	return nil
}
