// Package testenv gives tests that need the real Docker engine what they share: the engine
// check (skip, or fail when SANDPIT_REQUIRE_DOCKER=1), a freshly built sandpit-executor, the
// base image to build on, and cleanup of a data directory's containers. Only tests import it.
package testenv

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"go.uber.org/goleak"

	"github.com/sandpit-dev/sandpit/internal/runtime/boxspec"
)

// OfflineBase is the image scripts/offline-base-image.sh builds.
const OfflineBase = "sandpit-base:bookworm-2"

var (
	once      sync.Once
	api       *client.Client
	setupErr  error
	exeDir    string
	exePath   string
	baseImage string
)

func setup() {
	c, err := client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = c.Ping(ctx, client.PingOptions{})
		cancel()
	}
	if err != nil {
		setupErr = fmt.Errorf("no Docker engine answers: %w", err)
		return
	}
	api = c
	baseImage = os.Getenv("SANDPIT_TEST_BASE_IMAGE")
	if baseImage == "" {
		baseImage = "python:3.11-slim"
		if _, err := c.ImageInspect(context.Background(), OfflineBase); err == nil {
			baseImage = OfflineBase
		}
	}
	// A missing base image would be pulled by every daemon a test starts (or, with no
	// registry, fail each after its pull's timeout): say so once, now.
	if _, err := c.ImageInspect(context.Background(), baseImage); err != nil {
		setupErr = fmt.Errorf("the base image %s is not on this engine (%v): build the offline one with scripts/offline-base-image.sh "+
			"(%s), pull it, or set SANDPIT_TEST_BASE_IMAGE to an image the engine has", baseImage, err, OfflineBase)
		return
	}
	exeDir, err = os.MkdirTemp("", "sandpit-executor-")
	if err != nil {
		setupErr = err
		return
	}
	exePath = filepath.Join(exeDir, "sandpit-executor")
	build := exec.Command("go", "build", "-o", exePath, "github.com/sandpit-dev/sandpit/cmd/sandpit-executor")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		setupErr = fmt.Errorf("building sandpit-executor: %v\n%s", err, out)
	}
}

// DockerClient returns a client of the Docker engine. Without an engine it skips the test, or
// fails it when SANDPIT_REQUIRE_DOCKER=1.
func DockerClient(t testing.TB) *client.Client {
	t.Helper()
	once.Do(setup)
	if setupErr != nil {
		if os.Getenv("SANDPIT_REQUIRE_DOCKER") == "1" {
			t.Fatalf("SANDPIT_REQUIRE_DOCKER=1 but: %v", setupErr)
		}
		t.Skipf("skipping a real-engine test: %v (set SANDPIT_REQUIRE_DOCKER=1 to make this a failure)", setupErr)
	}
	return api
}

// ContainerRuntime returns name when the engine has an OCI runtime registered under it
// (runsc: gVisor). Without it the test is skipped, or fails when SANDPIT_REQUIRE_RUNTIMES
// (a comma-separated list, set by CI) names it.
func ContainerRuntime(t testing.TB, name string) string {
	t.Helper()
	info, err := DockerClient(t).Info(context.Background(), client.InfoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := info.Info.Runtimes[name]; ok {
		return name
	}
	if slices.Contains(strings.Split(os.Getenv("SANDPIT_REQUIRE_RUNTIMES"), ","), name) {
		t.Fatalf("SANDPIT_REQUIRE_RUNTIMES names %s, but the engine has no runtime of that name (its daemon.json \"runtimes\")", name)
	}
	t.Skipf("skipping: the Docker engine has no %s runtime (register it in daemon.json, or set SANDPIT_REQUIRE_RUNTIMES=%s to make this a failure)", name, name)
	return ""
}

// Executor returns the path of a sandpit-executor built from this checkout.
func Executor(t testing.TB) string {
	DockerClient(t)
	return exePath
}

// BaseImage is SANDPIT_TEST_BASE_IMAGE, else the offline base when the engine has it, else
// python:3.11-slim.
func BaseImage(t testing.TB) string {
	DockerClient(t)
	return baseImage
}

// Cleanup removes the built executor; call it from TestMain after m.Run.
func Cleanup() {
	if exeDir != "" {
		os.RemoveAll(exeDir)
	}
}

// Main takes a block of uids for the process's daemons (see UIDBlock), runs the tests of a package that uses the
// engine, then checks with goleak that they
// left no goroutine behind, and cleans up; TestMain exits with its code. The shared Docker
// client keeps idle connections (each with net/http's read and write goroutines) for the next
// test: they are closed first, so that what goleak finds is what the code left. Streams still
// open are not idle and stay.
func Main(m *testing.M) int {
	// The daemons its tests start as commands, or from SANDPIT_* settings, take a block of
	// the process's (see UIDBlock); a test that makes a runtime's configuration takes its own.
	processBlockOnce.Do(func() { processBlock, processBlockLock, processBlockErr = lockUIDBlock() })
	if processBlockErr == nil {
		os.Setenv("SANDPIT_UID_BLOCK", strconv.Itoa(int(processBlock)))
	}
	code := m.Run()
	if api != nil {
		api.Close()
	}
	if code == 0 {
		if err := goleak.Find(kubernetesClientGoroutines...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines outlive the tests:\n%v\n", err)
			code = 1
		}
	}
	Cleanup()
	return code
}

// kubernetesClientGoroutines are the goroutines client-go keeps for the life of the process
// once a client of a kubeconfig with client certificates exists: its shared TLS transport's
// HTTP/2 connection and its certificate-file reloader. They are not the code's to stop.
var kubernetesClientGoroutines = []goleak.Option{
	goleak.IgnoreAnyFunction("k8s.io/client-go/transport.(*dynamicClientCert).run"),
	goleak.IgnoreAnyFunction("k8s.io/client-go/transport.(*dynamicClientCert).runWorker"),
	goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*delayingType[...]).waitingLoop"),
	goleak.IgnoreAnyFunction("k8s.io/apimachinery/pkg/util/wait.PollImmediateUntilWithContext.poller.func1.1"),
	goleak.IgnoreAnyFunction("k8s.io/apimachinery/pkg/util/wait.PollImmediateUntil"), // the reloader's ticker
	goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
}

// RemoveContainers removes every container and volume labelled for dataDir when the test ends.
func RemoveContainers(t testing.TB, dataDir string) {
	t.Cleanup(func() {
		RemoveContainersNow(t, dataDir)
		list, err := api.VolumeList(context.Background(), client.VolumeListOptions{
			Filters: make(client.Filters).Add("label", "dev.sandpit.data-dir="+dataDir)})
		if err != nil {
			t.Logf("listing volumes: %v", err)
			return
		}
		for _, v := range list.Items {
			_, _ = api.VolumeRemove(context.Background(), v.Name, client.VolumeRemoveOptions{Force: true})
		}
	})
}

// RemoveContainersNow removes every container labelled for dataDir (not its volumes).
func RemoveContainersNow(t testing.TB, dataDir string) {
	for _, id := range Containers(t, dataDir) {
		_, _ = api.ContainerRemove(context.Background(), id, client.ContainerRemoveOptions{Force: true})
	}
}

// Containers lists the IDs of the containers labelled for dataDir.
func Containers(t testing.TB, dataDir string) []string {
	t.Helper()
	return containers(t, make(client.Filters).Add("label", "dev.sandpit.data-dir="+dataDir))
}

// RunningContainers is Containers, of those running only (a container a stopping daemon was
// still starting is left created, and the next daemon replaces it).
func RunningContainers(t testing.TB, dataDir string) []string {
	t.Helper()
	return containers(t, make(client.Filters).Add("label", "dev.sandpit.data-dir="+dataDir).Add("status", "running"))
}

// containers lists the IDs of the containers, stopped ones too, that filters select.
func containers(t testing.TB, filters client.Filters) []string {
	t.Helper()
	list, err := api.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: filters})
	if err != nil {
		t.Fatalf("listing containers: %v", err)
	}
	var ids []string
	for _, c := range list.Items {
		ids = append(ids, c.ID)
	}
	return ids
}

// Logger logs to stderr with -v and nowhere otherwise.
func Logger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

var (
	processBlockOnce sync.Once
	processBlock     boxspec.UIDBlock
	processBlockErr  error
	// processBlockLock is the process's block's locked file, referenced so that no finalizer
	// closes it.
	processBlockLock *os.File
)

// UIDBlock locks a block of the sandbox image's uids for one runtime of t, one of 1 to
// boxspec.UIDBlocks-1 (0 is the default of a developer's own daemon), released when t ends,
// by an exclusive lock on a file in /tmp. Tests of several packages run at once (the Docker and
// the Kubernetes suites share the host's kernel), and a package runs several runtimes at once;
// Linux counts a uid's processes across every container: with one block, a fork storm held at
// its cap in one runtime's box made a fork fail in another's. With every block held, it waits
// for one.
func UIDBlock(t testing.TB) boxspec.UIDBlock {
	t.Helper()
	b, f, err := lockUIDBlock()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return b
}

// lockUIDBlock takes the first free block, trying each once, then waits for one chosen by
// the process's pid. The block is held until the returned file is closed.
func lockUIDBlock() (boxspec.UIDBlock, *os.File, error) {
	open := func(b int) (*os.File, error) {
		return os.OpenFile(fmt.Sprintf("/tmp/sandpit-test-uid-block-%d.lock", b), os.O_CREATE|os.O_RDWR, 0o600)
	}
	for b := 1; b < boxspec.UIDBlocks; b++ {
		f, err := open(b)
		if err != nil {
			return 0, nil, fmt.Errorf("locking a uid block: %w", err)
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			return boxspec.UIDBlock(b), f, nil
		}
		f.Close()
	}
	b := 1 + os.Getpid()%(boxspec.UIDBlocks-1)
	f, err := open(b)
	if err != nil {
		return 0, nil, fmt.Errorf("locking a uid block: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return 0, nil, fmt.Errorf("locking uid block %d: %w", b, err)
	}
	return boxspec.UIDBlock(b), f, nil
}
