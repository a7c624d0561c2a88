// Package docker is the sandbox.Runtime on a Docker engine: it builds the sandbox image, keeps
// one warm, locked-down container per data directory (adopting it after a daemon restart when
// its settings match), starts sandpit-executor in it with `docker exec` and drives it over the
// exec's stdin and stdout. When the container or the executor dies, in-flight runs end with an
// error and the runtime brings the sandbox back by itself.
package docker

import (
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
)

// Config configures the runtime.
type Config struct {
	// DataDir is the absolute path of the data directory; it names and labels the container.
	DataDir string
	Recipe  Recipe
	Box     Box
	// ReadyWait is how long a run waits for the sandbox to come back before it is refused
	// with sandbox.ErrNotReady.
	ReadyWait time.Duration
	// Progress receives the image build's output when the image has to be built (may be nil).
	Progress io.Writer
	// Pip holds pip's settings for dependency installs (index, mirrors, binary only).
	Pip protocol.PipOptions
	// WaitForEngine makes Start succeed when the Docker engine does not answer: the runtime is
	// then not ready (saying why) and keeps trying, building the image and starting the
	// sandbox once the engine answers. A daemon waits; a one-off command fails at once.
	WaitForEngine bool
	// Session tunes the control session (heartbeat); zero values take the defaults.
	Session session.Options
	// ForkServer configures the executor's fork server.
	ForkServer ForkServer
}

// ForkServer configures the executor's fork server: a process in the box that has imported
// Preload and forks each run from itself, so runs skip the interpreter's start and those
// imports. Off, every run starts a fresh interpreter.
type ForkServer struct {
	Enabled bool
	// Preload are the modules it imports (those the image lacks are skipped).
	Preload []string
	// MaxRuns replaces it after that many runs; 0 never does.
	MaxRuns int
}

// Runtime is a sandbox.Runtime backed by a warm Docker container. Create it with Start.
type Runtime struct {
	api client.APIClient
	cfg Config
	log *slog.Logger
	img Image

	mu          sync.Mutex
	containerID string
	sess        *session.Client // nil while the sandbox is down
	lastErr     error           // why the sandbox is down
	changed     chan struct{}   // closed and replaced whenever sess changes
	engineDown  bool            // the Docker engine does not answer: requests fail at once
	resets      atomic.Int64    // times the sandbox was lost and brought back

	// ctx ends when Close is called; it bounds every reconnection attempt.
	ctx     context.Context
	close   context.CancelFunc
	stopped chan struct{} // closed when supervise has returned
}

// Start builds the image if it is missing, ensures the warm container, starts the executor and
// returns a ready Runtime that keeps the sandbox up until Close.
func Start(ctx context.Context, api client.APIClient, cfg Config, log *slog.Logger) (*Runtime, error) {
	if cfg.Box.Slots < 1 || cfg.Box.Slots > MaxSlots {
		return nil, fmt.Errorf("slots is %d; allowed range is 1 to %d", cfg.Box.Slots, MaxSlots)
	}
	r := &Runtime{api: api, cfg: cfg, log: log, changed: make(chan struct{}), stopped: make(chan struct{})}
	r.ctx, r.close = context.WithCancel(context.Background())
	if err := r.ping(ctx); err != nil {
		if !cfg.WaitForEngine {
			r.close()
			return nil, err
		}
		log.Warn("the Docker engine does not answer; waiting for it", "error", err)
		r.mu.Lock()
		r.lastErr, r.engineDown = err, true
		r.mu.Unlock()
		go r.supervise()
		return r, nil
	}
	if err := r.connect(ctx); err != nil {
		r.close()
		return nil, err
	}
	go r.supervise()
	return r, nil
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
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.img
}

// ContainerID returns the warm container's ID.
func (r *Runtime) ContainerID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.containerID
}

// connect ensures the image (once) and the container, and starts a fresh executor session in
// it.
func (r *Runtime) connect(ctx context.Context) error {
	r.mu.Lock()
	img := r.img
	r.mu.Unlock()
	if img.Tag == "" {
		progress := r.cfg.Progress
		if progress == nil {
			progress = io.Discard
		}
		var err error
		if img, _, err = EnsureImage(ctx, r.api, r.cfg.Recipe, progress); err != nil {
			return err
		}
		r.mu.Lock()
		r.img = img
		r.mu.Unlock()
	}
	id, adopted, err := ensureContainer(ctx, r.api, r.log, img, r.cfg.Box, r.cfg.DataDir)
	if err != nil {
		return err
	}
	sess, err := r.execExecutor(ctx, id)
	if err != nil {
		return fmt.Errorf("starting the executor in container %s: %w", shortID(id), err)
	}
	r.log.Info("sandbox ready", "container", shortID(id), "adopted", adopted, "image", img.Tag,
		"python", sess.Hello().Python, "slots", sess.Hello().Slots)
	r.mu.Lock()
	r.containerID, r.sess, r.lastErr, r.engineDown = id, sess, nil, false
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	return nil
}

// executorCommand is the executor's command line in the box.
func (r *Runtime) executorCommand() []string {
	fs := r.cfg.ForkServer
	return []string{ExecutorPath, "serve", "-slots", strconv.Itoa(r.cfg.Box.Slots), "-uid-base", strconv.Itoa(UIDBase),
		"-fork-server=" + strconv.FormatBool(fs.Enabled), "-preload", strings.Join(fs.Preload, ","), "-fork-server-max-runs", strconv.Itoa(fs.MaxRuns)}
}

func (r *Runtime) execExecutor(ctx context.Context, containerID string) (*session.Client, error) {
	ex, err := r.api.ExecCreate(ctx, containerID, client.ExecCreateOptions{
		User:         "0",
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		Cmd:          r.executorCommand(),
	})
	if err != nil {
		return nil, err
	}
	att, err := r.api.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, err
	}
	// The exec's stdout and stderr arrive multiplexed: stdout is the protocol, stderr the
	// executor's log.
	pr, pw := io.Pipe()
	logw := &lineLogger{log: r.log.With("source", "executor")}
	go func() {
		_, err := stdcopy.StdCopy(pw, logw, att.Reader)
		logw.flush()
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
	return session.Start(helloCtx, pr, att.Conn, closer, r.log, r.cfg.Session)
}

// supervise waits for the session to end and brings the sandbox back, with backoff, until Close.
func (r *Runtime) supervise() {
	defer close(r.stopped)
	backoff := 250 * time.Millisecond
	for {
		r.mu.Lock()
		sess := r.sess
		r.mu.Unlock()
		if sess != nil {
			select {
			case <-r.ctx.Done():
				return
			case <-sess.Done():
			}
			r.log.Warn("sandbox lost; bringing it back", "error", sess.Err())
			r.resets.Add(1)
			r.mu.Lock()
			r.sess, r.lastErr = nil, sess.Err()
			r.mu.Unlock()
			backoff = 250 * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(r.ctx, 2*time.Minute)
		err := r.connect(ctx)
		cancel()
		if err == nil {
			continue
		}
		if r.ctx.Err() != nil {
			return // Close interrupted the attempt: not a failure
		}
		down := r.ping(r.ctx)
		r.mu.Lock()
		r.lastErr, r.engineDown = err, down != nil
		if down != nil {
			r.lastErr = down
		}
		r.mu.Unlock()
		r.log.Error("bringing the sandbox back failed; retrying", "error", err, "retry_in", backoff)
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// current returns the live session and its container, waiting up to ReadyWait (or ctx) for one.
func (r *Runtime) current(ctx context.Context) (*session.Client, string, error) {
	deadline := time.NewTimer(r.cfg.ReadyWait)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		sess, id, changed, lastErr, down := r.sess, r.containerID, r.changed, r.lastErr, r.engineDown
		r.mu.Unlock()
		if sess != nil && sess.Ready(ctx) == nil {
			return sess, id, nil
		}
		if down && sess == nil {
			return nil, "", fmt.Errorf("%w: %w", sandbox.ErrNotReady, lastErr)
		}
		select {
		case <-changed:
		case <-time.After(100 * time.Millisecond): // a silent session fails or recovers
		case <-deadline.C:
			if lastErr == nil {
				lastErr = errors.New("the sandbox is restarting")
			}
			return nil, "", fmt.Errorf("%w: %w", sandbox.ErrNotReady, lastErr)
		case <-ctx.Done():
			return nil, "", fmt.Errorf("%w: %w", sandbox.ErrNotReady, ctx.Err())
		case <-r.ctx.Done():
			return nil, "", fmt.Errorf("%w: the runtime is shutting down", sandbox.ErrNotReady)
		}
	}
}

// Run runs spec in slot in the warm container; see sandbox.Runtime.
func (r *Runtime) Run(ctx context.Context, slot int, spec sandbox.Spec, emit func(sandbox.Event)) (sandbox.Result, error) {
	sess, containerID, err := r.current(ctx)
	if err != nil {
		return sandbox.Result{}, err
	}
	res, err := sess.Run(ctx, slot, spec, emit)
	if err != nil && errors.Is(err, session.ErrClosed) && !errors.Is(err, sandbox.ErrNotReady) {
		err = fmt.Errorf("%s; sandpit is bringing the sandbox back (%w)", r.whatStopped(containerID), err)
	}
	return res, err
}

// Install makes req's requirements importable in the box (sandbox.Installer).
func (r *Runtime) Install(ctx context.Context, req sandbox.InstallRequest, progress func(sandbox.DependencyStatus)) (sandbox.Installed, error) {
	sess, _, err := r.current(ctx)
	if err != nil {
		return sandbox.Installed{}, err
	}
	return sess.Install(ctx, req, r.cfg.Pip, progress)
}

// Packages lists the installed dependencies (op "list") or removes a package's (op "remove").
func (r *Runtime) Packages(ctx context.Context, op protocol.Packages) ([]protocol.Package, error) {
	sess, _, err := r.current(ctx)
	if err != nil {
		return nil, err
	}
	return sess.Packages(ctx, op)
}

// Resets counts the times the sandbox was lost (its container or executor died or hung) and
// had to be brought back.
func (r *Runtime) Resets() int64 { return r.resets.Load() }

// whatStopped says whether the container or only the executor stopped, for a run's reason. A
// killed container can still read as running for a moment after its stream broke, so it looks
// again for up to half a second before it blames the executor.
func (r *Runtime) whatStopped(containerID string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for deadline := time.Now().Add(500 * time.Millisecond); ; time.Sleep(50 * time.Millisecond) {
		got, err := r.api.ContainerInspect(ctx, containerID, client.ContainerInspectOptions{})
		switch st := got.Container.State; {
		case err != nil && r.ping(ctx) != nil:
			return "the connection to the Docker engine was lost during the run"
		case err != nil:
			return "the sandbox container disappeared during the run"
		case st != nil && (!st.Running || st.Paused):
			return fmt.Sprintf("the sandbox container stopped during the run (state %s, exit code %d, killed for memory: %v)",
				st.Status, st.ExitCode, st.OOMKilled)
		case time.Now().After(deadline):
			return "the executor in the sandbox container stopped during the run"
		}
	}
}

// Ready returns nil when the executor session is live.
func (r *Runtime) Ready(ctx context.Context) error {
	r.mu.Lock()
	sess, lastErr := r.sess, r.lastErr
	r.mu.Unlock()
	if sess == nil {
		if lastErr == nil {
			lastErr = errors.New("the sandbox is starting")
		}
		return fmt.Errorf("%w: %w", sandbox.ErrNotReady, lastErr)
	}
	return sess.Ready(ctx)
}

// Close ends the executor session (killing every run) and stops supervising. The warm
// container keeps running for the next daemon to adopt.
func (r *Runtime) Close() error {
	if r.ctx.Err() != nil {
		return nil
	}
	r.close()
	<-r.stopped
	r.mu.Lock()
	sess := r.sess
	r.sess = nil
	r.mu.Unlock()
	if sess != nil {
		return sess.Close()
	}
	return nil
}

type closeFunc func() error

func (f closeFunc) Close() error { return f() }

// lineLogger logs each line written to it: the executor's JSON log records at their own level
// and with their own attributes, anything else as it is.
type lineLogger struct {
	log *slog.Logger
	buf []byte
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.logLine(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 64<<10 {
		l.flush()
	}
	return len(p), nil
}

func (l *lineLogger) flush() {
	if len(l.buf) > 0 {
		l.logLine(l.buf)
		l.buf = nil
	}
}

func (l *lineLogger) logLine(line []byte) {
	var rec map[string]any
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber() // integers stay integers (44126208, not 4.4126208e+07)
	if dec.Decode(&rec) != nil {
		l.log.Info(string(line))
		return
	}
	msg, _ := rec[slog.MessageKey].(string)
	var level slog.Level
	if s, ok := rec[slog.LevelKey].(string); !ok || level.UnmarshalText([]byte(s)) != nil {
		level = slog.LevelInfo
	}
	delete(rec, slog.MessageKey)
	delete(rec, slog.LevelKey)
	attrs := make([]any, 0, 2*len(rec))
	for _, k := range slices.Sorted(maps.Keys(rec)) { // in one order, line after line
		attrs = append(attrs, k, rec[k])
	}
	l.log.Log(context.Background(), level, msg, attrs...)
}
