package executor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Starts of a run (sandbox.Result.Start).
const (
	startFork = sandbox.StartFork // forked from the fork server
	startCold = sandbox.StartCold // a fresh interpreter
)

// errForkServerGone is the error of a child whose fork server died before reporting its exit.
var errForkServerGone = errors.New("the fork server died during the run (it is being replaced)")

// forkServer is one running forkserver.py: a root Python process that has imported the preload
// modules and forks a child per run, which becomes the slot's uid before it reads the run's
// code. It serves any number of slots at once.
type forkServer struct {
	cmd  *exec.Cmd
	conn *net.UnixConn
	log  *slog.Logger

	pid       int             // in the box's pid namespace
	modules   map[string]bool // top-level names of every module it imported or looked for in vain
	dataBytes int64           // the data segment (VmData) its preload added, which each child inherits

	mu       sync.Mutex
	children map[string]*forkChild // by execution ID, until exited
	forks    int
	gone     bool // the reader has ended: no more reports will come
	retired  bool // no new runs: it ends when its children have
	done     chan struct{}
}

// forkChild is one run's process, forked by a fork server.
type forkChild struct {
	started chan forkReply // one started or failed report
	exited  chan forkReply // one exited report; closed without one when the server is gone
	pid     int
}

type forkReply struct {
	Type      string            `json:"type"`
	ID        string            `json:"id"`
	PID       int               `json:"pid"`
	Status    int               `json:"status"`
	CPUNS     int64             `json:"cpu_ns"` // an exited child's CPU time (user and system), in nanoseconds
	Error     string            `json:"error"`
	Broken    bool              `json:"broken"`
	Preloaded []string          `json:"preloaded"`
	Skipped   map[string]string `json:"skipped"`
	Modules   []string          `json:"modules"`
	Missing   []string          `json:"missing"`
	DataBytes int64             `json:"data_bytes"`
	HugeBytes int64             `json:"huge_bytes"` // the server's memory in transparent huge pages (see forkserver.py)
}

// startForkServer starts a fork server and waits (up to timeout) until it has imported its
// preload and is ready to fork. dir is its home and state directory.
func startForkServer(cfg Config, dir string, timeout time.Duration, quit <-chan struct{}, log *slog.Logger) (*forkServer, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the fork server's directory: %w", err)
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("creating the fork server's socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "fork-server"), os.NewFile(uintptr(fds[1]), "fork-server-child")
	defer ours.Close()
	defer theirs.Close()
	c, err := net.FileConn(ours)
	if err != nil {
		return nil, fmt.Errorf("opening the fork server's socket: %w", err)
	}
	conn := c.(*net.UnixConn)

	logR, logW, err := os.Pipe()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("creating the fork server's log pipe: %w", err)
	}
	cmd := exec.Command(cfg.Python, append([]string{"-u", "-I", "-X", "utf8", cfg.ForkServer, cfg.Bootstrap}, cfg.Preload...)...)
	cmd.Dir = dir
	cmd.Env = runEnvironment(dir, dir, cfg.proxyEnv())
	cmd.Stdout, cmd.Stderr = logW, logW
	cmd.ExtraFiles = []*os.File{theirs} // descriptor 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	logW.Close()
	if err != nil {
		logR.Close()
		conn.Close()
		return nil, fmt.Errorf("starting the fork server: %w", err)
	}
	go logForkServer(logR, log)
	s := &forkServer{cmd: cmd, conn: conn, log: log, pid: cmd.Process.Pid,
		children: map[string]*forkChild{}, done: make(chan struct{})}
	buf := make([]byte, maxForkPacket)
	hello, err := s.awaitReady(buf, timeout, quit)
	if err != nil {
		s.kill()
		_ = cmd.Wait()
		return nil, err
	}
	s.modules = map[string]bool{}
	for _, m := range append(hello.Modules, hello.Missing...) {
		s.modules[m] = true
	}
	s.dataBytes = hello.DataBytes
	for name, reason := range hello.Skipped {
		log.Info("fork server: not preloading a module", "module", name, "reason", reason)
	}
	log.Info("fork server ready", "pid", s.pid, "preloaded", strings.Join(hello.Preloaded, ","),
		"modules", len(hello.Modules), "data_bytes", hello.DataBytes, "huge_bytes", hello.HugeBytes)
	go s.readLoop(buf)
	return s, nil
}

// logForkServer sends what the fork server prints (import warnings, tracebacks) to the
// executor's log, a line at a time, until r ends; then closes r.
func logForkServer(r *os.File, log *slog.Logger) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		log.Warn("fork server: " + sc.Text())
	}
}

// awaitReady reads the server's first report into buf, waiting up to timeout (or until quit
// closes: the executor is stopping, and does not wait for the preload). It is an error unless
// the report says ready: an *unsafeError when the server found itself unsafe to fork from.
func (s *forkServer) awaitReady(buf []byte, timeout time.Duration, quit <-chan struct{}) (forkReply, error) {
	_ = s.conn.SetReadDeadline(time.Now().Add(timeout))
	helloDone := make(chan struct{})
	go func() {
		select {
		case <-quit:
			_ = s.conn.SetReadDeadline(time.Now())
		case <-helloDone:
		}
	}()
	hello, err := s.read(buf)
	close(helloDone)
	_ = s.conn.SetReadDeadline(time.Time{})
	switch {
	case err != nil:
		return hello, fmt.Errorf("the fork server ended, or did not get ready within %s: %w", timeout, err)
	case hello.Type == "unsafe":
		return hello, &unsafeError{hello.Error}
	case hello.Type != "ready":
		return hello, fmt.Errorf("the fork server said %q before it was ready", hello.Type)
	}
	return hello, nil
}

// forkRefusedError is a fork the server could not make for this run, the server being fine.
type forkRefusedError struct{ reason string }

func (e *forkRefusedError) Error() string { return "the fork server could not fork: " + e.reason }

// unsafeError is a fork server that refused to serve because forking it would be unsafe
// (its preload started threads). Starting another would not help.
type unsafeError struct{ reason string }

func (e *unsafeError) Error() string { return "the fork server is unsafe to fork: " + e.reason }

// maxForkPacket is the largest report of a fork server (its ready report lists every module it
// imported), in bytes.
const maxForkPacket = 1 << 20

// read reads one report into buf (maxForkPacket bytes).
func (s *forkServer) read(buf []byte) (forkReply, error) {
	n, err := s.conn.Read(buf)
	if err != nil {
		return forkReply{}, err
	}
	if n == 0 {
		return forkReply{}, errors.New("the fork server closed its socket")
	}
	var r forkReply
	if err := json.Unmarshal(buf[:n], &r); err != nil {
		return forkReply{}, fmt.Errorf("reading the fork server: %w", err)
	}
	return r, nil
}

// readLoop delivers the server's reports to their children until the server is gone, then
// fails every child still waiting and reaps the server.
func (s *forkServer) readLoop(buf []byte) {
	for {
		r, err := s.read(buf)
		if err != nil {
			break
		}
		s.mu.Lock()
		child := s.children[r.ID]
		switch {
		case child == nil:
			s.log.Warn("fork server: report for an unknown run", "type", r.Type, "id", r.ID)
		case r.Type == "started" || r.Type == "failed":
			select {
			case child.started <- r:
			default: // a second report: ignored
			}
			if r.Type == "failed" {
				delete(s.children, r.ID)
			}
		case r.Type == "exited":
			child.exited <- r // the only send: the child leaves the map with it
			delete(s.children, r.ID)
		}
		idle := s.retired && len(s.children) == 0
		s.mu.Unlock()
		if idle {
			break
		}
	}
	s.mu.Lock()
	s.gone = true
	for id, child := range s.children {
		close(child.started)
		close(child.exited)
		delete(s.children, id)
	}
	s.mu.Unlock()
	s.kill()
	_ = s.cmd.Wait()
	close(s.done)
}

// kill ends the server, and so its children (their parent-death signal); its read loop then
// ends and reaps it.
func (s *forkServer) kill() {
	_ = s.cmd.Process.Kill()
	s.conn.Close()
}

// isRetired reports whether the server takes no more runs.
func (s *forkServer) isRetired() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retired
}

// retire stops the server taking runs; it ends when its last child has exited.
func (s *forkServer) retire() {
	s.mu.Lock()
	s.retired = true
	idle := len(s.children) == 0
	s.mu.Unlock()
	if idle {
		_ = s.conn.SetReadDeadline(time.Now()) // ends the read loop, which ends the server
	}
}

// fork asks the server for a child that becomes uid in dir with env, with stdout, stderr and
// control as its descriptors 1, 2 and 3, and returns it once it exists. An error means no
// child was made; the caller starts the run cold instead, and replaces the server unless the
// error is a *forkRefusedError (the server is fine; the fork failed, as for lack of memory).
func (s *forkServer) fork(id string, uid int, dir string, env []string, stdout, stderr, control *os.File) (*forkChild, error) {
	envMap := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		envMap[k] = v
	}
	req, err := json.Marshal(map[string]any{"id": id, "uid": uid, "dir": dir, "env": envMap})
	if err != nil {
		return nil, err
	}
	child := &forkChild{started: make(chan forkReply, 1), exited: make(chan forkReply, 1)}
	s.mu.Lock()
	if s.gone || s.retired {
		s.mu.Unlock()
		return nil, errors.New("the fork server is not taking runs")
	}
	s.children[id] = child
	s.forks++
	s.mu.Unlock()
	rights := syscall.UnixRights(int(stdout.Fd()), int(stderr.Fd()), int(control.Fd()))
	if _, _, err := s.conn.WriteMsgUnix(req, rights, nil); err != nil {
		s.mu.Lock()
		delete(s.children, id)
		s.mu.Unlock()
		return nil, fmt.Errorf("sending the run to the fork server: %w", err)
	}
	select {
	case r, ok := <-child.started:
		switch {
		case !ok:
			return nil, errForkServerGone
		case r.Type == "failed" && r.Broken:
			return nil, fmt.Errorf("the fork server could not fork: %s", r.Error)
		case r.Type == "failed":
			return nil, &forkRefusedError{r.Error}
		}
		child.pid = r.PID
		return child, nil
	case <-time.After(10 * time.Second):
		// A server that cannot fork in 10 s is broken: end it (and any child it made).
		s.kill()
		return nil, errors.New("the fork server did not answer within 10 s")
	}
}

// killChild asks the server to kill c, a child it has not reaped yet (so its pid is still
// c's): the way to end one child without touching the other processes of its uid.
func (s *forkServer) killChild(c *forkChild) {
	req, _ := json.Marshal(map[string]any{"kill": c.pid})
	if _, err := s.conn.Write(req); err != nil {
		s.log.Debug("asking the fork server to kill a child", "pid", c.pid, "error", err)
	}
}

// wait waits for the child's exit and returns its wait status, or errForkServerGone.
func (c *forkChild) wait() (exit, error) {
	r, ok := <-c.exited
	if !ok {
		return exit{}, errForkServerGone
	}
	return exit{status: syscall.WaitStatus(r.Status), cpu: time.Duration(r.CPUNS)}, nil
}

// shadows reports whether a run whose sys.path starts with paths would import a different
// module than the server has already imported under the same top-level name (an installed
// dependency of another version than the image's), or would have one the server looked for
// and did not find (an optional dependency of a preloaded module, which that module decided
// at its import it does not have). Such a run must start cold.
func (s *forkServer) shadows(paths []string) bool {
	for _, dir := range paths {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return true // cannot tell: be safe
		}
		for _, e := range entries {
			name, _, _ := strings.Cut(e.Name(), ".")
			if s.modules[name] && !strings.HasSuffix(e.Name(), "-info") {
				return true
			}
		}
	}
	return false
}

// forkServers keeps the box's fork server: started in the background, replaced after
// cfg.ForkServerMaxRuns runs or when it dies, and given up when forking it is unsafe.
type forkServers struct {
	cfg Config
	dir string
	log *slog.Logger

	mu       sync.Mutex
	current  *forkServer // nil while (re)starting or when disabled
	starting bool
	disabled string // why no fork server is used, when none ever will be
	preload  int64  // data the last ready server's preload took, in bytes
	failures int    // consecutive failed starts
	draining int    // retired servers still alive (waiting for their children)
	// onRetire is told of a server that takes no more runs (the executor drops the programs
	// it forked ahead of time), without f.mu held.
	onRetire func(*forkServer)
	all      sync.WaitGroup
	closed   bool
	quit     chan struct{} // closed by close
}

// forkServerStartTimeout bounds a fork server's preload.
const forkServerStartTimeout = 2 * time.Minute

func newForkServers(cfg Config, log *slog.Logger) *forkServers {
	f := &forkServers{cfg: cfg, dir: filepath.Join(cfg.RunRoot, "fork-server"), log: log, quit: make(chan struct{})}
	if cfg.ForkServer == "" {
		f.disabled = "the fork server is off"
	} else if _, err := os.Stat(cfg.ForkServer); err != nil {
		f.disabled = fmt.Sprintf("the fork server is missing: %v", err)
		log.Warn("starting every run cold", "reason", f.disabled)
	}
	return f
}

// startLocked starts a new server in the background unless one is starting.
func (f *forkServers) startLocked() {
	if f.starting || f.disabled != "" || f.closed {
		return
	}
	f.starting = true
	f.all.Go(func() {
		f.mu.Lock()
		backoff := min(time.Duration(f.failures)*time.Second, 30*time.Second)
		f.mu.Unlock()
		select { // a server that keeps dying is not restarted in a tight loop
		case <-time.After(backoff):
		case <-f.quit:
		}
		s, err := startForkServer(f.cfg, f.dir, forkServerStartTimeout, f.quit, f.log)
		f.mu.Lock()
		f.starting = false
		var unsafe *unsafeError
		var old *forkServer
		switch {
		case errors.As(err, &unsafe):
			f.disabled = err.Error()
			f.log.Error("starting every run cold", "reason", f.disabled)
		case err != nil:
			f.failures++
			f.log.Error("starting the fork server", "error", err, "attempt", f.failures)
			f.startLocked()
		case f.closed:
			s.kill()
			f.watch(s)
		default:
			f.failures = 0
			f.preload = s.dataBytes
			old, f.current = f.current, s // a server it replaces served until now
			f.watch(s)
			if old != nil {
				f.retireLocked(old)
			}
		}
		f.mu.Unlock()
		if old != nil && f.onRetire != nil {
			f.onRetire(old)
		}
	})
}

// retireLocked stops s taking runs; it ends when its last child has.
func (f *forkServers) retireLocked(s *forkServer) {
	if f.current == s {
		f.current = nil
	}
	f.draining++
	s.retire()
}

// watch replaces s when it dies.
func (f *forkServers) watch(s *forkServer) {
	f.all.Go(func() {
		<-s.done
		f.mu.Lock()
		defer f.mu.Unlock()
		switch {
		case f.current == s: // it died
			f.current = nil
			f.failures++
			f.log.Warn("the fork server died; starting another")
			f.startLocked()
		case s.isRetired():
			f.draining--
		}
	})
}

// preloadData is the data segment the preload takes (as the last server that got ready
// measured it, rounded up to a MiB), in bytes; 0 before any did, or with the fork server off.
// Every run's memory limit allows it on top, whether the run is forked (and inherits it) or
// cold (and may import the same modules itself): code that fits when forked fits when cold.
func (f *forkServers) preloadData() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	const mib = 1 << 20
	return (f.preload + mib - 1) / mib * mib // whole MiB: one figure from one server to the next
}

// state says whether runs start as forks now (protocol.ForkReady, ForkStarting or ForkOff,
// with why it is off).
func (f *forkServers) state() (string, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.disabled != "":
		return protocol.ForkOff, f.disabled
	case f.current != nil:
		return protocol.ForkReady, ""
	}
	return protocol.ForkStarting, ""
}

// start starts the first server in the background.
func (f *forkServers) start() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.startLocked()
}

// server returns the server a run with the given sys.path additions should be forked from, or
// nil and the reason it must start cold.
func (f *forkServers) server(paths []string) (*forkServer, string) {
	f.mu.Lock()
	s, disabled := f.current, f.disabled
	f.mu.Unlock()
	switch {
	case disabled != "":
		return nil, disabled
	case s == nil:
		return nil, "the fork server is starting"
	}
	if why := s.unsuitable(paths); why != "" {
		return nil, why
	}
	return s, ""
}

// unsuitable says why a run with the given sys.path additions must not be a fork of s, or ""
// when it may.
func (s *forkServer) unsuitable(paths []string) string {
	if len(paths) > 0 && s.shadows(paths) {
		return "an installed dependency replaces (or is probed for by) a preloaded module"
	}
	return ""
}

// forked counts a fork of s. Once s has made cfg.ForkServerMaxRuns children, a new server is
// started; s serves until it is ready. At most two servers live at once: while a replaced one
// still waits for its children, s serves on.
func (f *forkServers) forked(s *forkServer) {
	s.mu.Lock()
	n := s.forks
	s.mu.Unlock()
	if f.cfg.ForkServerMaxRuns <= 0 || n < f.cfg.ForkServerMaxRuns {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.current == s && f.draining == 0 {
		f.startLocked()
	}
}

// failed reports that s could not fork: it takes no more runs (those it has finish) and
// another is started.
func (f *forkServers) failed(s *forkServer) {
	f.mu.Lock()
	retired := f.current == s
	if retired {
		f.retireLocked(s)
		f.startLocked()
	}
	f.mu.Unlock()
	if retired && f.onRetire != nil {
		f.onRetire(s)
	}
}

// close ends every server (and so their children) and waits for them.
func (f *forkServers) close() {
	f.mu.Lock()
	if !f.closed {
		close(f.quit)
	}
	f.closed = true
	s := f.current
	f.current = nil
	f.mu.Unlock()
	if s != nil {
		s.kill()
	}
	f.all.Wait()
}
