package app

import (
	"context"
	"io"
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
// with the image's tag as its last argument; a command that fails fails the build, naming
// the command and the last of what it said.
func TestNodeEngineImports(t *testing.T) {
	const img = "sandpit-sandbox:0123456789abcdef"
	got := filepath.Join(t.TempDir(), "imported")
	var log strings.Builder
	e := &nodeEngine{Engine: builtEngine{image: img}, importCommand: []string{"sh", "-c", `echo "$1" > "$0"; echo imported`, got}}
	ref, err := e.BuildSandbox(context.Background(), "base", &log)
	if err != nil || ref != img {
		t.Fatalf("BuildSandbox = %q, %v; want %s", ref, err, img)
	}
	if arg, _ := os.ReadFile(got); strings.TrimSpace(string(arg)) != img {
		t.Errorf("the command's last argument was %q, want the image's tag %s", arg, img)
	}
	if !strings.Contains(log.String(), "importing "+img+" into the nodes") || !strings.Contains(log.String(), "imported\n") {
		t.Errorf("the build's log %q does not show the import and its output", log.String())
	}

	e.importCommand = []string{"sh", "-c", `echo "no space left on the node" >&2; exit 3`}
	_, err = e.BuildSandbox(context.Background(), "base", io.Discard)
	for _, want := range []string{"kubernetes.template_import_command", "exit status 3", "no space left on the node"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("BuildSandbox with a failing import = %v, want it to name %q", err, want)
		}
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
