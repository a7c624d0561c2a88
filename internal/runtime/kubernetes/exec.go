package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/sandpit-dev/sandpit/internal/control"
	"github.com/sandpit-dev/sandpit/internal/runtime/boxspec"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// executor returns an exec of cmd in pod's sandbox container: over a websocket (the v5
// protocol, which can close stdin alone), falling back to SPDY where the API server or a
// proxy does not upgrade websockets.
func (r *Runtime) executor(pod string, cmd []string, stdin bool) (remotecommand.Executor, error) {
	req := r.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(r.cfg.Namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: ContainerName, Command: cmd, Stdin: stdin, Stdout: true, Stderr: true},
			scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(r.rc, "GET", req.URL().String())
	if err != nil {
		return nil, fmt.Errorf("exec over websocket: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(r.rc, "POST", req.URL())
	if err != nil {
		return nil, fmt.Errorf("exec over SPDY: %w", err)
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// prepare is the shell prefix of the executor's command: the pod's emptyDirs come world
// writable, and take the modes and owners the Docker runtime's tmpfs mounts and package volume
// have (sticky /tmp, /sandbox 0711, the session home 0700, the package directory the
// installer's) before the executor starts. The kubelet's termination message file
// (TerminationMessagePath) is a file of the node's disk bound in writable by every uid, which
// outlives the runs: emptied and made root's alone, a run can neither leave data in it for the
// next run (another agent's) nor fill the node's disk through it.
var prepare = []string{"/bin/sh", "-c", "chmod 1777 /tmp && chmod 0711 /sandbox && chmod 0700 " + sandbox.SessionHome +
	" && chown " + strconv.Itoa(boxspec.InstallerUID) + ":" + strconv.Itoa(boxspec.InstallerUID) + " " + boxspec.PackagesDir +
	" && chmod 0755 " + boxspec.PackagesDir +
	" && { [ ! -e " + corev1.TerminationMessagePathDefault + " ] || { chmod 0600 " + corev1.TerminationMessagePathDefault +
	" && : >" + corev1.TerminationMessagePathDefault + "; }; }" + ` && exec "$@"`, "sandpit-prepare"}

// execExecutor starts the executor in pod with cmd over an exec stream and returns the control
// line with it once it has said hello; its log goes to log. The stream lives until the line
// closes: closing it closes the executor's stdin (it then kills every run and exits), and a
// stream still open 5 s later is cut.
func (r *Runtime) execExecutor(ctx context.Context, pod string, cmd []string, log *slog.Logger) (*control.Line, error) {
	ex, err := r.executor(pod, append(append([]string{}, prepare...), cmd...), true)
	if err != nil {
		return nil, err
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	logw := boxspec.NewLineLogger(log.With("source", "executor"))
	sctx, cut := context.WithCancel(context.Background())
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		err := ex.StreamWithContext(sctx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: logw})
		logw.Flush()
		if err == nil {
			err = io.EOF
		}
		outW.CloseWithError(err)
		inR.CloseWithError(err)
	}()
	var once sync.Once
	closer := closeFunc(func() error {
		once.Do(func() {
			_ = inW.Close() // the executor sees the end of its stdin, kills every run and exits
			go func() {
				select {
				case <-ended:
				case <-time.After(5 * time.Second):
				}
				cut()
			}()
		})
		return nil
	})
	helloCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	line, err := control.Start(helloCtx, outR, inW, closer, log, r.cfg.Control)
	if err != nil {
		cut()
		return nil, err
	}
	return line, nil
}

// execOnce runs cmd in pod with stdin (nil: none) and its stdout to stdout, and fails with its
// stderr when it exits non-zero.
func (r *Runtime) execOnce(ctx context.Context, pod string, cmd []string, stdin io.Reader, stdout io.Writer) error {
	ex, err := r.executor(pod, cmd, stdin != nil)
	if err != nil {
		return err
	}
	stderr := &capped{max: 4 << 10}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	var code utilexec.CodeExitError
	if errors.As(err, &code) {
		return &boxspec.ExitError{Cmd: cmd, Code: code.Code, Stderr: strings.TrimSpace(stderr.String())}
	}
	return err
}

type closeFunc func() error

func (f closeFunc) Close() error { return f() }

// capped keeps the first max bytes written to it.
type capped struct {
	strings.Builder
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); room > 0 {
		c.Builder.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
