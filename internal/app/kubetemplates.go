package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"

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
	build, err := egress.New(cfg.Egress())
	if err != nil {
		api.Close()
		return nil, nil, err
	}
	eng := &nodeEngine{Engine: &docker.TemplateEngine{API: api, Recipe: rcfg.Recipe, Egress: build, Box: rcfg.Box}, api: api,
		registry: cfg.Kubernetes.TemplateRegistry, importCommand: cfg.Kubernetes.TemplateImportCommand}
	return template.NewService(st, eng, cfg.Templates(), log), api, nil
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
}

// BuildSandbox builds sandpit's sandbox layer on base and brings the image to the nodes; it
// returns the image's name as the pods run it. Errors name the push or the command, with
// what it said.
func (e *nodeEngine) BuildSandbox(ctx context.Context, base string, out io.Writer) (string, error) {
	img, err := e.Engine.BuildSandbox(ctx, base, out)
	if err != nil {
		return "", err
	}
	if e.registry != "" {
		repo, err := reference.ParseNormalizedNamed(e.registry)
		if err != nil {
			return "", fmt.Errorf("kubernetes.template_registry %q: %w", e.registry, err)
		}
		named, err := reference.WithTag(repo, ownTag(img))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(out, "pushing %s to %s\n", img, reference.FamiliarString(named))
		target, err := pushImage(ctx, e.api, img, named, out)
		if err != nil {
			return "", fmt.Errorf("the template's image could not reach the nodes (kubernetes.template_registry): %w", err)
		}
		if _, err := e.api.ImageRemove(ctx, img, client.ImageRemoveOptions{}); err != nil {
			return "", fmt.Errorf("dropping the local tag %s of the pushed %s: %w", img, target, err)
		}
		return target, nil
	}
	argv := append(append([]string(nil), e.importCommand...), img)
	fmt.Fprintf(out, "importing %s into the nodes: %s\n", img, strings.Join(argv, " "))
	var said tail
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout = io.MultiWriter(out, &said)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("the template's image could not reach the nodes: kubernetes.template_import_command %q failed (%w)%s",
			strings.Join(argv, " "), err, said.String())
	}
	return img, nil
}

// tail keeps the last 1 KiB written to it, for an error.
type tail struct{ b []byte }

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 1024 {
		t.b = t.b[len(t.b)-1024:]
	}
	return len(p), nil
}

// String is ": " and what was kept, or "" when nothing was written.
func (t *tail) String() string {
	if s := strings.TrimSpace(string(t.b)); s != "" {
		return ": " + s
	}
	return ""
}
