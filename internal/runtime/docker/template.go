package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/template"
)

// TemplateEngine builds templates' images on a Docker engine (template.Engine): a template's
// own layer with the classic builder, as root, on a network of its own that reaches nothing
// but the daemon's build proxy (the build egress policy); then sandpit's sandbox layer on top
// of it, from the same Dockerfile, executor and bootstrap as the default image.
type TemplateEngine struct {
	API client.APIClient
	// Recipe is the default image's recipe: its executor and repository are the templates'
	// too (its base image and packages are not: a template holds what its spec asked for).
	Recipe Recipe
	// Egress gives each build its Gate: what the build's proxy may reach (the package
	// sources and template_build_allow; egress.Allowlist.ForBuild).
	Egress BuildEgress
	// Box bounds each build step's container as a slot's box is bounded: its memory (swap
	// included) and its CPU quota.
	Box Box
}

// BuildEgress is the build egress policy (egress.Allowlist).
type BuildEgress interface {
	// ForBuild returns one build's Gate, calling record with each connection's record.
	ForBuild(record func(sandbox.EgressConnection)) *egress.Gate
}

// BuildNetworkPrefix starts the name of each template build's network: internal (no route off
// the machine), so that a build step reaches the outside only through the daemon's proxy on
// the network's gateway address, whatever it runs.
const BuildNetworkPrefix = "sandpit-build-"

// labelBuildNetwork marks a build's network; staleBuildNetwork is the age past which one is
// left from a daemon that died (longer than template_build_timeout_ms's most, 2 hours).
const (
	labelBuildNetwork = "dev.sandpit.build-network"
	staleBuildNetwork = 3 * time.Hour
)

var _ template.Engine = (*TemplateEngine)(nil)

// ImageID returns the ID of the image named image (repository[:tag] or repository@digest);
// an error of class not found when the engine has none by that name. An image is found by
// its name only, never by its ID or a prefix of it: an ID names any image of the engine,
// another agent's template among them, and a prefix can be guessed.
func (e *TemplateEngine) ImageID(ctx context.Context, image string) (string, error) {
	notFound := func(err error) error {
		return errclass.Wrap(errclass.NotFound, fmt.Errorf("image %s: %w", image, err))
	}
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", notFound(fmt.Errorf("not an image name (repository:tag): %w", err))
	}
	want := reference.FamiliarString(reference.TagNameOnly(named))
	got, err := e.API.ImageInspect(ctx, image)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", notFound(err)
		}
		return "", fmt.Errorf("inspecting image %s: %w", image, err)
	}
	if !slices.Contains(got.RepoTags, want) && !slices.Contains(got.RepoDigests, want) {
		return "", notFound(errors.New("the engine has no image by that name (an image is named by repository:tag, never by its ID)"))
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

// BuildLayer builds plan as tag on a network of its own (buildNetwork), its steps' HTTP and
// HTTPS through a proxy of the daemon's that only e.Egress's Gate lets out (http_proxy and
// https_proxy, which apt, pip and curl follow); each refused or failed connection is said in
// out.
func (e *TemplateEngine) BuildLayer(ctx context.Context, plan template.Plan, tag string, out io.Writer) error {
	network, gw, err := e.buildNetwork(ctx)
	if err != nil {
		return err
	}
	defer e.removeNetwork(network)
	lw := &lockedWriter{w: out}
	out = lw
	if v, err := e.API.ServerVersion(ctx, client.ServerVersionOptions{}); err == nil && BuildDNSLeaks(v.Version) {
		fmt.Fprintf(out, "sandpit: warning: this Docker engine (%s) forwards an internal network's DNS queries through the host's resolver (CVE-2024-29018, fixed in 26.0.0, 25.0.4 and 23.0.11): a step can send data out in the names it looks up; upgrade the engine\n", v.Version)
	}
	gate := e.Egress.ForBuild(func(r sandbox.EgressConnection) {
		if r.Reason != "" {
			fmt.Fprintf(lw, "sandpit: the build's connection to %s: %s\n", net.JoinHostPort(r.Host, strconv.Itoa(r.Port)), r.Reason)
		}
	})
	// The proxy listens on the gateway's address, which the build network's containers reach
	// and nothing off the machine does.
	ln, err := net.Listen("tcp", netip.AddrPortFrom(gw, 0).String())
	if err != nil {
		gate.Close()
		return fmt.Errorf("listening for the build's proxy on %s, the gateway of the network %s (template builds need the engine on the daemon's own host): %w", gw, network, err)
	}
	password := rand.Text()
	fwd := egress.NewForward(gate, password)
	srv := &http.Server{Handler: fwd, ReadHeaderTimeout: 30 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(ln)
	// Ended in this order: no new connections, the build's connections closed (and with
	// them the requests and tunnels under way), then what the proxy still does is waited
	// for, and what it would say after that is dropped.
	defer func() {
		srv.Close()
		gate.Close()
		fwd.Close()
		lw.close()
	}()
	proxy := "http://sandpit:" + password + "@" + ln.Addr().String()
	local := "localhost,127.0.0.1,::1" // a step's own servers, tested in the step
	args := map[string]*string{}
	// Predefined build args: in every step's environment, never in the image or its history.
	for _, name := range []string{"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"} {
		args[name] = &proxy
	}
	for _, name := range []string{"no_proxy", "NO_PROXY"} {
		args[name] = &local
	}
	resp, err := e.API.ImageBuild(ctx, bytes.NewReader(plan.Context), client.ImageBuildOptions{
		Tags: []string{tag},
		// The classic builder reuses only the steps of CacheFrom's images (an agent's own
		// layers), or none (NoCache).
		CacheFrom:   plan.CacheFrom,
		NoCache:     plan.NoCache,
		Remove:      true,
		ForceRemove: true,
		NetworkMode: network,
		BuildArgs:   args,
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
	// The last step's image the builder committed: a failed build's steps are removed, so
	// that failing builds do not pile up the layers of their steps (a step's gigabytes).
	var last string
	err = func() error {
		dec := json.NewDecoder(resp.Body)
		for {
			var m jsonstream.Message
			if err := dec.Decode(&m); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return fmt.Errorf("reading the build's output: %w", err)
			}
			if m.Error != nil {
				return errors.New(m.Error.Message)
			}
			switch {
			case m.Stream != "":
				if id := committed.FindStringSubmatch(m.Stream); id != nil {
					last = id[1]
				}
				io.WriteString(out, m.Stream)
			case m.Status != "":
				fmt.Fprintln(out, m.Status)
			}
		}
	}()
	if err == nil {
		if _, err = e.ImageID(ctx, tag); err != nil {
			err = fmt.Errorf("the build ended without an image: %w", err)
		}
	}
	if err != nil && last != "" {
		e.removeStep(ctx, last)
	}
	return err
}

// removeStep removes a failed or cancelled build's last committed step image, with its
// untagged parents (a parent another image has, a ready template's or the base, stays), once
// no container uses it: a cancelled build's step container is still being killed and removed
// by the builder when the build's answer ends, and the engine keeps an image a container uses
// (the image was left behind so). It gives up after a minute.
func (e *TemplateEngine) removeStep(ctx context.Context, image string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	for {
		list, err := e.API.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("ancestor", image)})
		if err != nil || len(list.Items) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	_, _ = e.API.ImageRemove(ctx, image, client.ImageRemoveOptions{PruneChildren: true})
}

// committed matches the classic builder's line naming the image a step committed.
var committed = regexp.MustCompile(`(?m)^ ---> ([0-9a-f]{12,64})\s*$`)

// buildNetwork makes one build's network: internal (no route off the machine) and its own,
// so that builds beside each other cannot reach each other's steps (or their proxy's
// password). It returns its name and its gateway's address; removeNetwork removes it. Build
// networks left by a daemon that died are removed once they are older than any build.
func (e *TemplateEngine) buildNetwork(ctx context.Context) (string, netip.Addr, error) {
	e.pruneNetworks(ctx)
	name := BuildNetworkPrefix + strings.ToLower(rand.Text()[:12])
	if _, err := e.API.NetworkCreate(ctx, name, client.NetworkCreateOptions{Driver: "bridge", Internal: true,
		Labels: map[string]string{labelManaged: "1", labelBuildNetwork: "1"}}); err != nil {
		return "", netip.Addr{}, fmt.Errorf("creating the network %s for a template build: %w", name, err)
	}
	got, err := e.API.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if err == nil {
		for _, c := range got.Network.IPAM.Config {
			if c.Gateway.Is4() {
				return name, c.Gateway, nil
			}
		}
		err = errors.New("it has no IPv4 gateway")
	}
	e.removeNetwork(name)
	return "", netip.Addr{}, fmt.Errorf("the network %s for a template build: %w", name, err)
}

// removeNetwork removes build network name (its build has ended, whatever its context says).
// A step's container still on it (the builder removes it after a client that left, a moment
// later) is disconnected first: the removal failed on it, and each such network held a /20 of
// the engine's address pools for hours (a new user's three builds ended by leaving).
func (e *TemplateEngine) removeNetwork(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		if _, err := e.API.NetworkRemove(ctx, name, client.NetworkRemoveOptions{}); err == nil || cerrdefs.IsNotFound(err) {
			return
		}
		if got, err := e.API.NetworkInspect(ctx, name, client.NetworkInspectOptions{}); err == nil {
			for id := range got.Network.Containers {
				_, _ = e.API.NetworkDisconnect(ctx, name, client.NetworkDisconnectOptions{Container: id, Force: true})
			}
		}
		select {
		case <-ctx.Done():
			return // pruneNetworks takes it later
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// pruneNetworks removes build networks older than the longest build (a daemon died during
// theirs); one with a container on it stays.
func (e *TemplateEngine) pruneNetworks(ctx context.Context) {
	list, err := e.API.NetworkList(ctx, client.NetworkListOptions{Filters: make(client.Filters).Add("label", labelBuildNetwork)})
	if err != nil {
		return
	}
	for _, n := range list.Items {
		if time.Since(n.Created) > staleBuildNetwork {
			e.removeNetwork(n.Name)
		}
	}
}

// BuildDNSLeaks reports whether a Docker engine of version forwards an internal network's DNS
// queries to the host's resolver, a way out of a template build: before 23.0.11, 24.x and
// 25.0.0 to 25.0.3 (CVE-2024-29018).
func BuildDNSLeaks(version string) bool {
	var major, minor, patch int
	if n, _ := fmt.Sscanf(version, "%d.%d.%d", &major, &minor, &patch); n < 2 {
		return false // not a version this knows
	}
	switch {
	case major >= 26:
		return false
	case major == 25:
		return minor == 0 && patch < 4
	case major == 23:
		return minor == 0 && patch < 11
	}
	return true
}

// lockedWriter serializes writes to w (the build's output, written by its stream and by
// the proxy's records) and drops those after close (a dial that ends once the build has).
type lockedWriter struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return len(p), nil
	}
	return l.w.Write(p)
}

func (l *lockedWriter) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

// BuildSandbox builds sandpit's sandbox layer on base (unless the engine has it).
func (e *TemplateEngine) BuildSandbox(ctx context.Context, base string, out io.Writer) (string, error) {
	r := e.Recipe
	r.BaseImage, r.Packages = base, nil
	img, err := Resolve(ctx, e.API, r)
	if err != nil {
		return "", err
	}
	if ok, err := img.Exists(ctx, e.API); err != nil || ok {
		return img.Tag, err
	}
	// It installs nothing (no packages), so it needs no network: none, as the layer below
	// could have made its python3 or /bin/sh reach out around the build's proxy.
	img.Confine = &e.Box
	return img.Tag, img.Build(ctx, e.API, out)
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
