package app

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/template"
)

// builtEngine is a template.Engine whose sandbox layer is always image.
type builtEngine struct {
	template.Engine
	image string
}

func (e builtEngine) BuildSandbox(context.Context, string, io.Writer) (string, error) {
	return e.image, nil
}

// A built template's image reaches the nodes through kubernetes.template_import_command, run
// with the image's tag as its last argument, at each build, one served from the cache too
// (Publish); the command's output goes to the daemon's log, not to the agent's build log (it
// is the host's), and a command that fails fails the build, naming the setting.
func TestNodeEngineImports(t *testing.T) {
	const img = "sandpit-sandbox:0123456789abcdef"
	got := filepath.Join(t.TempDir(), "imported")
	var daemonLog, buildLog strings.Builder
	e := &nodeEngine{Engine: builtEngine{image: img}, log: slog.New(slog.NewTextHandler(&daemonLog, nil)),
		importCommand: []string{"sh", "-c", `echo "$1" >> "$0"; echo imported from /host/path`, got}}
	ref, err := e.BuildSandbox(context.Background(), "base", &buildLog)
	if err != nil || ref != img {
		t.Fatalf("BuildSandbox = %q, %v; want %s", ref, err, img)
	}
	if err := e.Publish(context.Background(), img, &buildLog); err != nil {
		t.Fatalf("Publish = %v", err)
	}
	if arg, _ := os.ReadFile(got); string(arg) != img+"\n"+img+"\n" {
		t.Errorf("the command's last arguments were %q, want the image's tag %s twice", arg, img)
	}
	if !strings.Contains(buildLog.String(), "importing "+img+" into the nodes") || strings.Contains(buildLog.String(), "/host/path") {
		t.Errorf("the build's log %q: want the import said, and nothing of the command's output", buildLog.String())
	}
	if !strings.Contains(daemonLog.String(), "/host/path") {
		t.Errorf("the daemon's log %q does not have the command's output", daemonLog.String())
	}

	e.importCommand = []string{"sh", "-c", `echo "no space left on the node" >&2; exit 3`}
	daemonLog.Reset()
	_, err = e.BuildSandbox(context.Background(), "base", io.Discard)
	for _, want := range []string{"kubernetes.template_import_command", "exit status 3", "the daemon's log"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("BuildSandbox with a failing import = %v, want it to name %q", err, want)
		}
	}
	if !strings.Contains(daemonLog.String(), "no space left on the node") {
		t.Errorf("the daemon's log %q does not have the failing command's output", daemonLog.String())
	}
}

// doctor on runtime kubernetes with templates checks the Docker engine that builds them, and
// says how to do without it.
func TestKubeTemplateChecksNameTheEngine(t *testing.T) {
	cfg := config.Config{DockerHost: "unix://" + filepath.Join(t.TempDir(), "no-engine.sock")}
	checks := kubeTemplateChecks(context.Background(), cfg)
	if len(checks) != 1 || checks[0].Name != "docker engine" || checks[0].OK || !checks[0].Required ||
		!strings.Contains(checks[0].Fix, "kubernetes.template_import_command") {
		t.Errorf("kubeTemplateChecks without an engine = %+v, want one failing docker engine check naming how to do without", checks)
	}
}
