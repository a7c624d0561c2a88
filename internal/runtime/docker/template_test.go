package docker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/template"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// TestTemplateSessionFilesAreReadAsItsUser: a template's image is the agent's choice (its
// steps may replace tar), so its session's files are saved for hibernation as the session's
// user, never as root; a box of sandpit's own image reads them as root. A file the session
// made unreadable to itself shows who reads: root reads it, the session's user cannot.
func TestTemplateSessionFilesAreReadAsItsUser(t *testing.T) {
	rt, cfg := startRuntime(t, func(c *docker.Config) { c.Slots = 1; c.ForkServer.Enabled = false })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	img, _, err := docker.EnsureImage(ctx, api, cfg.Recipe, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	save := func(box sandbox.SessionBox) error {
		t.Helper()
		defer box.Close(context.Background())
		if _, err := box.WriteFile(ctx, sandbox.FileWrite{Path: "x", Content: []byte("1")}); err != nil {
			t.Fatal(err)
		}
		ended := make(chan struct{})
		if _, err := box.StartCommand(ctx, "chmod", sandbox.CommandSpec{Argv: []string{"chmod", "000", "x"}, TimeoutMS: 10_000}, func(ev sandbox.ProcessEvent) {
			if ev.End != nil {
				close(ended)
			}
		}); err != nil {
			t.Fatal(err)
		}
		<-ended
		return box.(sandbox.FilesBox).SaveFiles(ctx, io.Discard)
	}
	own, err := rt.OpenSession(ctx, "se_own")
	if err != nil {
		t.Fatal(err)
	}
	if err := save(own); err != nil {
		t.Fatalf("saving a session's files in sandpit's image (as root): %v", err)
	}
	tmpl, err := rt.OpenSessionImage(ctx, "se_tmpl", img.Tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := save(tmpl); err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Fatalf("saving a template session's files read a file its user cannot: %v", err)
	}
}

// TestTemplateEntrypointDoesNotRun: the box's own process is sandpit's executor, whatever
// the image says: an image (a template's raw Dockerfile) with an ENTRYPOINT that would run as
// root at the box's start does not run it.
func TestTemplateEntrypointDoesNotRun(t *testing.T) {
	rt, cfg := startRuntime(t, func(c *docker.Config) { c.Slots = 1; c.ForkServer.Enabled = false })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	img, _, err := docker.EnsureImage(ctx, api, cfg.Recipe, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	dockerfile := "FROM " + img.Tag + "\nENTRYPOINT [\"/bin/sh\", \"-c\", \"touch /tmp/entrypoint-ran; exec \\\"$@\\\"\", \"--\"]\n"
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile))}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(dockerfile))
	tw.Close()
	tag := "sandpit-test-entrypoint:" + strings.ToLower(t.Name())
	resp, err := api.ImageBuild(ctx, &buf, client.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(out), "Successfully tagged") {
		t.Fatalf("building the test image: %s", out)
	}
	t.Cleanup(func() { api.ImageRemove(context.Background(), tag, client.ImageRemoveOptions{Force: true}) })

	box, err := rt.OpenSessionImage(ctx, "se_entry", tag)
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close(context.Background())
	var stdout strings.Builder
	ended := make(chan *sandbox.ProcessEnd, 1)
	if _, err := box.StartCommand(ctx, "probe", sandbox.CommandSpec{Argv: []string{"sh", "-c", "ls /tmp; cat /proc/1/cmdline | tr '\\0' ' '; echo; cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '"}, TimeoutMS: 10_000},
		func(ev sandbox.ProcessEvent) {
			if ev.Stream == sandbox.StreamStdout {
				stdout.WriteString(ev.Data)
			}
			if ev.End != nil {
				ended <- ev.End
			}
		}); err != nil {
		t.Fatal(err)
	}
	<-ended
	if strings.Contains(stdout.String(), "entrypoint-ran") || !strings.Contains(stdout.String(), "sandpit-executor idle") {
		t.Fatalf("the box's processes, with the image's entrypoint: %s", stdout.String())
	}
}

// TestTemplateImagesAreFoundByNameOnly: a template's base is an image's name, never its ID or
// a prefix of it, which could name any image of the engine (another agent's template) and be
// guessed a few hex digits at a time.
func TestTemplateImagesAreFoundByNameOnly(t *testing.T) {
	eng := &docker.TemplateEngine{API: testenv.DockerClient(t)}
	base := testenv.BaseImage(t)
	id, err := eng.ImageID(t.Context(), base)
	if err != nil {
		t.Fatalf("the base image by its name: %v", err)
	}
	hex := strings.TrimPrefix(id, "sha256:")
	for _, ref := range []string{id, hex, hex[:12], hex[:4]} {
		if _, err := eng.ImageID(t.Context(), ref); errclass.Of(err) != errclass.NotFound {
			t.Errorf("the base image by %q: %v, want not found", ref, err)
		}
	}
}

// TestTemplateLayerBuild: the builder counts a Dockerfile's instructions as the plan does (a
// difference ends a build: it reads the file otherwise than the checks did), reuses the steps
// of the agent's own layers only (another agent's reuse would tell, by its speed, what the
// first one built), and a failed build leaves no image of its steps behind (failing builds
// piled up gigabytes before).
func TestTemplateLayerBuild(t *testing.T) {
	c := testenv.DockerClient(t)
	eng := &docker.TemplateEngine{API: c, Egress: buildEgress(t), Box: docker.Box{MemoryBytes: 512 << 20, MemorySwapBytes: 512 << 20, NanoCPUs: 1e9}}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	base := testenv.BaseImage(t)
	// build builds agent's plan of df, whose builder may reuse the steps of own (and base's).
	build := func(agent, df string, own ...string) (template.Plan, string, string, error) {
		t.Helper()
		plan, err := template.NewPlan(agent, template.Spec{Dockerfile: df}, base, "", protocol.PipOptions{})
		if err != nil {
			t.Fatal(err)
		}
		plan.CacheFrom = append(plan.CacheFrom, own...)
		var out bytes.Buffer
		tag := "sandpit-template-test:" + strings.ToLower(rand.Text()[:8])
		err = eng.BuildLayer(ctx, plan, tag, &out)
		t.Cleanup(func() { c.ImageRemove(context.Background(), tag, client.ImageRemoveOptions{PruneChildren: true}) })
		return plan, tag, out.String(), err
	}
	df := "FROM " + base + "\n# a comment\nRUN echo one \\\n  two > /a\n\nRUN cat /a\n"
	plan, alice, out, err := build("alice", df)
	if err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("Step 1/%d :", len(plan.StepOf)); !strings.Contains(out, want) {
		t.Errorf("the builder's steps are not the plan's %d:\n%s", len(plan.StepOf), out)
	}
	if _, _, out, err := build("bob", df); err != nil || strings.Contains(out, "Using cache") {
		t.Errorf("bob's build of alice's Dockerfile reused her steps (or failed: %v):\n%s", err, out)
	}
	if _, _, out, err := build("alice", df, alice); err != nil || strings.Count(out, "Using cache") != 2 {
		t.Errorf("alice's build again did not reuse her two steps (%v):\n%s", err, out)
	}
	_, _, out, err = build("alice", "FROM "+base+"\nRUN head -c 5000000 /dev/zero > /big\nRUN exit 3\n")
	if err == nil {
		t.Fatalf("a failing build succeeded:\n%s", out)
	}
	m := regexp.MustCompile(`(?m)^ ---> ([0-9a-f]{12})\s*$`).FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		t.Fatalf("no committed step in the output:\n%s", out)
	}
	for _, id := range m { // the base's own ID (FROM's line) is tagged: it stays
		if got, err := c.ImageInspect(ctx, id[1]); err == nil && len(got.RepoTags) == 0 {
			t.Errorf("the failed build's step image %s is still in the engine", id[1])
		}
	}

	// A build cancelled in its last step (its client gone, or its timeout): the step before
	// it stays no more than a failed one's (it did: the builder's container still used it).
	plan, err = template.NewPlan("alice", template.Spec{Dockerfile: "FROM " + base + "\nRUN head -c 4000000 /dev/zero > /big\nRUN sleep 60\n"}, base, "", protocol.PipOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	w := &cancelOn{mark: "RUN sleep 60", cancel: stop}
	if err := eng.BuildLayer(cctx, plan, "sandpit-template-test:cancelled", w); err == nil {
		t.Fatalf("a cancelled build succeeded:\n%s", w.String())
	}
	m = regexp.MustCompile(`(?m)^ ---> ([0-9a-f]{12})\s*$`).FindAllStringSubmatch(w.String(), -1)
	if len(m) < 2 {
		t.Fatalf("no committed step in the output:\n%s", w.String())
	}
	for _, id := range m[1:] {
		if _, err := c.ImageInspect(ctx, id[1]); err == nil {
			t.Errorf("the cancelled build's step image %s is still in the engine", id[1])
		}
	}
}

// cancelOn keeps what is written and calls cancel once a container runs the step mark names.
type cancelOn struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	mark   string
	cancel func()
}

func (w *cancelOn) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	s := w.buf.String()
	if i := strings.Index(s, w.mark); i >= 0 && strings.Contains(s[i:], "Running in") {
		w.cancel()
	}
	return len(p), nil
}

func (w *cancelOn) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// buildEgress is a build egress policy of Debian's sources alone.
func buildEgress(t *testing.T) *egress.Allowlist {
	a, err := egress.New(egress.Config{PackageHosts: []string{"deb.debian.org"}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}
