package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/template"
)

// kubeTemplates returns the template service of runtime kubernetes: the Docker engine the
// daemon reaches (docker_host) builds the templates, as for runtime docker, and each sandbox
// image built reaches the nodes (kubernetes.template_registry or template_import_command)
// before the template is ready, named as the pods then run it. It returns the engine's
// client for the caller to close.
func kubeTemplates(ctx context.Context, cfg config.Config, st template.Store, progress io.Writer, log *slog.Logger) (*template.Service, *client.Client, error) {
	api, err := DockerClient(cfg)
	if err != nil {
		return nil, nil, err
	}
	if _, err := api.Ping(ctx, client.PingOptions{}); err != nil {
		api.Close()
		return nil, nil, fmt.Errorf("templates on runtime kubernetes are built by a Docker engine, and none answers (%w): start one, point docker_host at it, "+
			"or unset kubernetes.template_registry and kubernetes.template_import_command", err)
	}
	cfg = ChooseBaseImage(ctx, api, cfg)
	rcfg, err := RuntimeConfig(cfg, progress)
	if err != nil {
		api.Close()
		return nil, nil, err
	}
	built, err := templateEngine(api, cfg, rcfg)
	if err != nil {
		api.Close()
		return nil, nil, err
	}
	eng := &nodeEngine{Engine: built, api: api, registry: cfg.Kubernetes.TemplateRegistry,
		importCommand: cfg.Kubernetes.TemplateImportCommand, log: log}
	return template.NewService(st, eng, cfg.Templates(), log), api, nil
}

// templateEngine is the Docker engine api's template builder, with rcfg's sandbox recipe and
// box, and the build egress policy (whatever network is). Errors are the policy's.
func templateEngine(api client.APIClient, cfg config.Config, rcfg docker.Config) (*docker.TemplateEngine, error) {
	build, err := egress.New(cfg.Egress())
	if err != nil {
		return nil, err
	}
	return &docker.TemplateEngine{API: api, Recipe: rcfg.Recipe, Egress: build, Box: rcfg.Box}, nil
}

// nodeEngine is the template engine of runtime kubernetes: the Docker engine builds, and
// each sandbox image built then reaches the nodes: pushed to registry (and its local tag
// dropped, so that the pushed name is the image's only one and its removal removes it), or
// made known to them by importCommand run with the image's tag.
type nodeEngine struct {
	template.Engine                  // the Docker engine's, which builds, sizes and removes
	api             client.APIClient // that engine, for the push
	registry        string
	importCommand   []string
	log             *slog.Logger
}

var _ template.Publisher = (*nodeEngine)(nil)

// BuildSandbox builds sandpit's sandbox layer on base and brings the image to the nodes; it
// returns the image's name as the pods run it. Errors are Publish's.
func (e *nodeEngine) BuildSandbox(ctx context.Context, base string, out io.Writer) (string, error) {
	img, err := e.Engine.BuildSandbox(ctx, base, out)
	if err != nil {
		return "", err
	}
	if e.registry != "" {
		return e.push(ctx, img, out)
	}
	return img, e.Publish(ctx, img, out)
}

// Publish brings image (as BuildSandbox named it) to the nodes again (template.Publisher: a
// rebuild served from the cache brings back an image lost on a node). Errors say that the
// image could not reach the nodes, and why; an import command's output goes to the daemon's
// log, not to out (the agent's build log): it is the host's.
func (e *nodeEngine) Publish(ctx context.Context, image string, out io.Writer) error {
	if e.registry != "" {
		_, err := e.push(ctx, image, out)
		return err
	}
	argv := append(append([]string(nil), e.importCommand...), image)
	fmt.Fprintf(out, "importing %s into the nodes (kubernetes.template_import_command)\n", image)
	var said tail
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &said, &said
	// A killed command's children may hold its output open: the build's end must not wait
	// for them.
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	e.log.Info("template image import", "image", image, "command", strings.Join(argv, " "), "error", err, "output", said.String())
	if err != nil {
		return fmt.Errorf("the template's image could not reach the nodes: kubernetes.template_import_command failed (%w); the daemon's log has its output", err)
	}
	return nil
}

// push tags image in the registry (kubernetes.template_registry) with its own tag and pushes
// it, then drops its local tag so that the pushed name is its only one (its removal then
// removes it); it returns the pushed name. An image named in the registry already is pushed
// again as it is.
func (e *nodeEngine) push(ctx context.Context, image string, out io.Writer) (string, error) {
	repo, err := reference.ParseNormalizedNamed(e.registry)
	if err != nil {
		return "", fmt.Errorf("kubernetes.template_registry %q: %w", e.registry, err)
	}
	named, err := reference.WithTag(repo, ownTag(image))
	if err != nil {
		return "", err
	}
	fmt.Fprintf(out, "pushing %s to %s\n", image, reference.FamiliarString(named))
	target, err := pushImage(ctx, e.api, image, named, out)
	if err != nil {
		return "", fmt.Errorf("the template's image could not reach the nodes (kubernetes.template_registry): %w", err)
	}
	if image != target {
		if _, err := e.api.ImageRemove(ctx, image, client.ImageRemoveOptions{}); err != nil {
			return "", fmt.Errorf("dropping the local tag %s of the pushed %s: %w", image, target, err)
		}
	}
	return target, nil
}

// tail keeps the last 1 KiB written to it, for the log.
type tail struct{ b []byte }

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 1024 {
		t.b = t.b[len(t.b)-1024:]
	}
	return len(p), nil
}

// String is what was kept.
func (t *tail) String() string { return strings.TrimSpace(string(t.b)) }
