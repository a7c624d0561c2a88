package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/template"
)

// templatesDoctor checks the templates of cfg's store against the engine's images; ok is
// false when there is no store to read (nothing was ever served from the data directory).
func templatesDoctor(ctx context.Context, api client.APIClient, cfg config.Config) (c Check, ok bool) {
	var (
		st  *store.Store
		err error
	)
	if cfg.DatabaseURL != "" {
		st, err = store.OpenPostgres(ctx, cfg.DatabaseURL, 0, nil)
	} else {
		path := filepath.Join(cfg.DataDir, store.FileName)
		if _, serr := os.Stat(path); serr != nil {
			return Check{}, false
		}
		st, err = store.Open(ctx, path, nil)
	}
	if err != nil {
		return Check{Name: "templates", Detail: "reading the templates: " + err.Error(), Fix: "see the ledger's and the data directory's checks"}, true
	}
	defer st.Close()
	list, err := st.AllTemplates(ctx)
	if err != nil {
		return Check{Name: "templates", Detail: "reading the templates: " + err.Error(), Fix: "see the ledger's and the data directory's checks"}, true
	}
	return templatesCheck(list, func(image string) (bool, error) {
		_, err := api.ImageInspect(ctx, image)
		if cerrdefs.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}), true
}

// templatesCheck names the ready templates whose image the engine no longer has (exists
// says whether it has an image).
func templatesCheck(list []template.Template, exists func(image string) (bool, error)) Check {
	var missing []string
	ready := 0
	for _, t := range list {
		if t.Status != template.StatusReady {
			continue
		}
		ready++
		if ok, err := exists(t.Image); err == nil && !ok {
			missing = append(missing, fmt.Sprintf("%s/%s (%s)", t.Agent, t.Name, t.Image))
		}
	}
	c := Check{Name: "templates", OK: len(missing) == 0, Detail: fmt.Sprintf("%d templates, %d ready, each with its image", len(list), ready)}
	if len(missing) > 0 {
		c.Detail = fmt.Sprintf("%d of %d ready templates lost their image (removed from the engine): %s", len(missing), ready, strings.Join(missing, ", "))
		c.Fix = "build each again (sandpit template build NAME -f SPEC --agent AGENT) or remove it (sandpit template rm NAME --agent AGENT); starting one answers 503 until then"
	}
	return c
}

// buildNetworkCheck says whether the engine (of version) keeps a template build's network
// closed: an engine before the fix of CVE-2024-29018 forwards its DNS queries to the host's
// resolver, a way out around the build egress policy (advice: builds work, and say so too).
func buildNetworkCheck(version string) Check {
	if docker.BuildDNSLeaks(version) {
		return Check{Name: "template builds", Detail: fmt.Sprintf("Docker Engine %s forwards an internal network's DNS queries through the host's resolver (CVE-2024-29018): a template build's step can send data out in the names it looks up", version),
			Fix: "upgrade the engine to 26 or later (or 25.0.4, 23.0.11)"}
	}
	return Check{Name: "template builds", OK: true, Detail: "the engine keeps a build's internal network closed (no DNS forwarded out)"}
}

// kubeTemplateChecks are the checks of runtime kubernetes with templates: the Docker engine
// that builds them (the daemon needs it to start), the templates' images in it, and its build
// network.
func kubeTemplateChecks(ctx context.Context, cfg config.Config) []Check {
	fail := func(err error) []Check {
		return []Check{{Name: "docker engine", Required: true, Detail: "templates on runtime kubernetes are built by a Docker engine: " + err.Error(),
			Fix: "start the engine or point docker_host at one, or unset kubernetes.template_registry and kubernetes.template_import_command"}}
	}
	api, err := DockerClient(cfg)
	if err != nil {
		return fail(err)
	}
	defer api.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	version, err := serverVersion(pctx, api)
	cancel()
	if err != nil {
		return fail(err)
	}
	checks := []Check{{Name: "docker engine", OK: true, Required: true, Detail: "Docker Engine " + version + ", which builds the templates"}}
	if c, ok := templatesDoctor(ctx, api, cfg); ok {
		checks = append(checks, c)
	}
	return append(checks, buildNetworkCheck(version))
}
