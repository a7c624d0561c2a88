package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/template"
)

// TemplateEngine builds templates' images on a Docker engine (template.Engine): a template's
// own layer with the classic builder, as root, on the default bridge network, with the
// package sources' host names resolved as the host resolves them; then sandpit's sandbox
// layer on top of it, from the same Dockerfile, executor and bootstrap as the default image.
type TemplateEngine struct {
	API client.APIClient
	// Recipe is the default image's recipe: its executor and repository are the templates'
	// too (its base image and packages are not: a template holds what its spec asked for).
	Recipe Recipe
	// AptHosts are host names resolved on the host and given to the build as extra hosts, so
	// that apt reaches the package sources the host's own apt reaches (an /etc/hosts entry or
	// a local resolver the engine's DNS does not know).
	AptHosts []string
	// Box bounds each build step's container as a slot's box is bounded: its memory (swap
	// included) and its CPU quota.
	Box Box
}

var _ template.Engine = (*TemplateEngine)(nil)

// ImageID returns image's ID; an error of class not found when the engine has none.
func (e *TemplateEngine) ImageID(ctx context.Context, image string) (string, error) {
	got, err := e.API.ImageInspect(ctx, image)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", errclass.Wrap(errclass.NotFound, fmt.Errorf("image %s: %w", image, err))
		}
		return "", fmt.Errorf("inspecting image %s: %w", image, err)
	}
	return got.ID, nil
}

// ImageSize returns image's size in bytes.
func (e *TemplateEngine) ImageSize(ctx context.Context, image string) (int64, error) {
	got, err := e.API.ImageInspect(ctx, image)
	if err != nil {
		return 0, fmt.Errorf("inspecting image %s: %w", image, err)
	}
	return got.Size, nil
}

// BuildLayer builds plan as tag.
func (e *TemplateEngine) BuildLayer(ctx context.Context, plan template.Plan, tag string, out io.Writer) error {
	resp, err := e.API.ImageBuild(ctx, bytes.NewReader(plan.Context), client.ImageBuildOptions{
		Tags:        []string{tag},
		Remove:      true,
		ForceRemove: true,
		ExtraHosts:  e.extraHosts(ctx),
		Memory:      e.Box.MemoryBytes,
		MemorySwap:  e.Box.MemorySwapBytes,
		CPUPeriod:   100_000,
		CPUQuota:    e.Box.NanoCPUs / 10_000, // of each 100 ms period, in µs
		// No labels: each is an instruction, a container and a commit (see the Dockerfile).
	})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("reading the build's output: %w", err)
		}
		if m.Error != nil {
			return errors.New(m.Error.Message)
		}
		switch {
		case m.Stream != "":
			io.WriteString(out, m.Stream)
		case m.Status != "":
			fmt.Fprintln(out, m.Status)
		}
	}
	if _, err := e.ImageID(ctx, tag); err != nil {
		return fmt.Errorf("the build ended without an image: %w", err)
	}
	return nil
}

// extraHosts resolves AptHosts as the host does ("name:ip"); a name that does not resolve is
// left to the build's own DNS.
func (e *TemplateEngine) extraHosts(ctx context.Context) []string {
	var out []string
	for _, h := range e.AptHosts {
		addrs, err := net.DefaultResolver.LookupHost(ctx, h)
		if err != nil || len(addrs) == 0 {
			continue
		}
		out = append(out, h+":"+addrs[0])
	}
	return out
}

// BuildSandbox builds sandpit's sandbox layer on base (unless the engine has it).
func (e *TemplateEngine) BuildSandbox(ctx context.Context, base string, out io.Writer) (string, error) {
	r := e.Recipe
	r.BaseImage, r.Packages = base, nil
	img, _, err := EnsureImage(ctx, e.API, r, out)
	if err != nil {
		return "", err
	}
	return img.Tag, nil
}

// RemoveImage removes image (not forced: one a container uses stays).
func (e *TemplateEngine) RemoveImage(ctx context.Context, image string) error {
	_, err := e.API.ImageRemove(ctx, image, client.ImageRemoveOptions{PruneChildren: true})
	return err
}

// OpenSessionImage starts session id's sandbox from image instead of the runtime's own (a
// template's sandbox image): a container made as OpenSession makes one, never a warm one.
func (r *Runtime) OpenSessionImage(ctx context.Context, id, image string) (sandbox.SessionBox, error) {
	if r.ctx.Err() != nil {
		return nil, fmt.Errorf("%w: the runtime is shutting down", sandbox.ErrNotReady)
	}
	if _, err := r.api.ImageInspect(ctx, image); err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, errclass.Newf(errclass.Unavailable, "the template image %s is not in the engine (removed by hand?); build the template again", image)
		}
		return nil, fmt.Errorf("%w: inspecting image %s: %w", sandbox.ErrNotReady, image, err)
	}
	box, err := r.startSession(ctx, id, Image{Tag: image}, r.log.With("session", id), "image", image)
	if err != nil {
		return nil, err
	}
	box.templateImage = true
	return box, nil
}
