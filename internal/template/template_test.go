package template_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/template"
)

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		spec  template.Spec
		field string // "" valid
	}{
		{template.Spec{Steps: []template.Step{{Apt: []string{"jq", "ffmpeg=7:5.1.6-0+deb12u1"}}}}, ""},
		{template.Spec{Base: "template:tools", Steps: []template.Step{{Run: "echo hi"}}}, ""},
		{template.Spec{Dockerfile: "FROM debian\n"}, ""},
		{template.Spec{}, "spec.steps"},
		{template.Spec{Dockerfile: "FROM x", Steps: []template.Step{{Run: "x"}}}, "spec.dockerfile"},
		{template.Spec{Steps: []template.Step{{Apt: []string{"jq; rm -rf /"}}}}, "spec.steps[0].apt"},
		{template.Spec{Steps: []template.Step{{Apt: []string{"-o=APT::x"}}}}, "spec.steps[0].apt"},
		{template.Spec{Steps: []template.Step{{Pip: []string{"--index-url=http://evil/"}}}}, "spec.steps[0].pip"},
		{template.Spec{Steps: []template.Step{{Run: "a", Apt: []string{"jq"}}}}, "spec.steps[0]"},
		{template.Spec{Steps: []template.Step{{File: &template.File{Path: "../etc/passwd"}}}}, "spec.steps[0].file.path"},
		{template.Spec{Steps: []template.Step{{File: &template.File{Path: "/x", Mode: "4755"}}}}, "spec.steps[0].file.mode"},
		{template.Spec{Env: map[string]string{"A B": "x"}}, "spec.env"},
		{template.Spec{Env: map[string]string{"A": "x\ny"}}, "spec.env.A"},
		{template.Spec{Workdir: "rel"}, "spec.workdir"},
		{template.Spec{Start: &template.Start{}}, "spec.start.cmd"},
		{template.Spec{Base: "template:Bad Name"}, "spec.base"},
		{template.Spec{Preload: []string{"pandas", "scipy.stats"}}, ""},
		{template.Spec{Preload: []string{"numpy", "os; import shutil"}}, "spec.preload[1]"},
	} {
		err := template.Validate(c.spec)
		var fe *sandbox.FieldError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%+v: %v, want valid", c.spec, err)
		case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
			t.Errorf("%+v: %v, want a field error of %s", c.spec, err, c.field)
		}
	}
}

func TestPlan(t *testing.T) {
	spec := template.Spec{Steps: []template.Step{{Apt: []string{"jq"}}, {Pip: []string{"tinypkg==1.0"}}, {File: &template.File{Path: "/opt/a b", Content: "x"}}, {Run: "echo \"$HOME\""}},
		Env: map[string]string{"B": "2", "A": `q"uote`}, Workdir: "/opt"}
	pip := protocol.PipOptions{IndexURL: "http://10.0.0.1:9/simple/", TrustedHosts: []string{"10.0.0.1"}}
	p, err := template.NewPlan("alice", spec, "sandpit-base:bookworm-2", "sha256:1", pip)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"FROM sandpit-base:bookworm-2\n",
		`RUN ["env","A=q\"uote","B=2","/bin/sh","-c",`,
		`"apt","jq"]`,
		`RUN ["env","A=q\"uote","B=2","env","PIP_BREAK_SYSTEM_PACKAGES=1",`,
		`"--index-url","http://10.0.0.1:9/simple/","--trusted-host","10.0.0.1","--","tinypkg==1.0"]`,
		`COPY ["files/2","/opt/a b"]`,
		`RUN ["env","PIP_INDEX_URL=http://10.0.0.1:9/simple/","PIP_TRUSTED_HOST=10.0.0.1","env","A=q\"uote","B=2","/bin/sh","-c","echo \"$HOME\""]`,
	} {
		if !strings.Contains(p.Dockerfile, want) {
			t.Errorf("Dockerfile lacks %q:\n%s", want, p.Dockerfile)
		}
	}
	// Each instruction is a container and a commit: no ENV, no ENTRYPOINT.
	for _, unwanted := range []string{"\nENV ", "\nENTRYPOINT ", "\nLABEL "} {
		if strings.Contains(p.Dockerfile, unwanted) {
			t.Errorf("Dockerfile has %q:\n%s", unwanted, p.Dockerfile)
		}
	}
	// FROM, USER, WORKDIR, 4 steps.
	if got := fmt.Sprint(p.StepOf); got != "[-1 -1 -1 0 1 2 3]" {
		t.Errorf("StepOf %s", got)
	}
	again, _ := template.NewPlan("alice", spec, "sandpit-base:bookworm-2", "sha256:1", pip)
	other, _ := template.NewPlan("alice", spec, "sandpit-base:bookworm-2", "sha256:2", pip)
	bobs, _ := template.NewPlan("bob", spec, "sandpit-base:bookworm-2", "sha256:1", pip)
	if again.Hash != p.Hash || other.Hash == p.Hash || bobs.Hash == p.Hash {
		t.Errorf("hashes: %s, again %s, on another base ID %s, another agent's %s", p.Hash, again.Hash, other.Hash, bobs.Hash)
	}
}

// An agent's build reuses only its own: another agent's build of the same spec is not cached
// (its speed would tell what the first agent's template holds), the builder may reuse the
// steps of the agent's own layers only, and NoCache reuses nothing and makes a new version.
func TestBuildCacheIsTheAgentsOwn(t *testing.T) {
	_, eng, svc := newService(t)
	ctx := t.Context()
	spec := template.Spec{Steps: []template.Step{{File: &template.File{Path: "/opt/secret", Content: "alice's guess"}}}}
	alice, err := svc.Build(ctx, template.BuildRequest{Agent: "alice", Name: "tools", Spec: spec}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var cached bool
	bob, err := svc.Build(ctx, template.BuildRequest{Agent: "bob", Name: "probe", Spec: spec}, func(e template.Event) { cached = cached || e.Cached })
	if err != nil || cached || eng.layers != 2 || bob.LayerImage == alice.LayerImage || bob.Image == alice.Image {
		t.Fatalf("bob's build of alice's spec: %+v %v, cached %v, %d layer builds; want a build of bob's own", bob, err, cached, eng.layers)
	}
	if got := fmt.Sprint(eng.last.CacheFrom); got != "[base]" || eng.last.NoCache {
		t.Errorf("bob's first build may reuse %s (no cache %v), want [base] only", got, eng.last.NoCache)
	}
	other := template.Spec{Steps: []template.Step{{Run: "true"}}}
	if _, err := svc.Build(ctx, template.BuildRequest{Agent: "alice", Name: "other", Spec: other}, nil); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(eng.last.CacheFrom); got != fmt.Sprint([]string{"base", alice.LayerImage}) {
		t.Errorf("alice's second template may reuse %s, want her first's layer and the base", got)
	}

	again, err := svc.Build(ctx, template.BuildRequest{Agent: "alice", Name: "tools", Spec: spec, NoCache: true}, func(e template.Event) { cached = cached || e.Cached })
	if err != nil || cached || !eng.last.NoCache || again.LayerImage == alice.LayerImage || again.Image == alice.Image || again.Version != alice.Version+1 {
		t.Fatalf("a no-cache rebuild: %+v %v, cached %v, plan %+v; want a new layer and version", again, err, cached, eng.last)
	}
	// The version it replaced goes with its images (versions_kept 0), its layer's tag too.
	if eng.has(alice.Image) || eng.has(alice.LayerImage) || !eng.has(again.LayerImage) {
		t.Errorf("after a no-cache rebuild the engine has the version before's images %v %v, the new layer %v",
			eng.has(alice.Image), eng.has(alice.LayerImage), eng.has(again.LayerImage))
	}

	// Another store's daemon on the same engine, with an agent of the same name: its build of
	// the spec is its own, and its removal leaves the first store's images (it was found
	// cached by the layer's name, and removed it).
	st2, err := store.Open(ctx, filepath.Join(t.TempDir(), store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	svc2 := template.NewService(st2, eng, template.Config{DefaultBase: "base", BuildTimeout: time.Minute, PerAgent: 2}, nil)
	first, err := svc.Build(ctx, template.BuildRequest{Agent: "alice", Name: "other", Spec: spec}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cached = false
	twin, err := svc2.Build(ctx, template.BuildRequest{Agent: "alice", Name: "other", Spec: spec}, func(e template.Event) { cached = cached || e.Cached })
	if err != nil || cached || twin.LayerImage == first.LayerImage || twin.Image == first.Image {
		t.Fatalf("another store's alice's build of the spec: %+v %v, cached %v; want a build of its own", twin, err, cached)
	}
	if err := svc2.Delete(ctx, "alice", "other", false); err != nil {
		t.Fatal(err)
	}
	if !eng.has(first.LayerImage) || !eng.has(first.Image) {
		t.Errorf("another store's removal of its template took the first store's images")
	}
}

// fakeEngine builds nothing: it records the builds and fails a layer whose Dockerfile has
// "exit 3" after writing the builder's step lines.
type fakeEngine struct {
	mu     sync.Mutex
	images map[string]bool
	busy   map[string]bool // images a container uses: not removed
	layers int
	last   template.Plan // the last layer build's
	// failSandbox fails the sandbox layer's builds (the template's own layer built).
	failSandbox bool
}

func (e *fakeEngine) ImageID(_ context.Context, image string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.images[image] {
		return "", errclass.Newf(errclass.NotFound, "no image %s", image)
	}
	return "sha256:" + image, nil
}
func (e *fakeEngine) ImageSize(context.Context, string) (int64, error) { return 100 << 20, nil }
func (e *fakeEngine) BuildLayer(ctx context.Context, p template.Plan, tag string, out io.Writer) error {
	e.layers++
	e.last = p
	for i := range p.StepOf {
		total := len(p.StepOf)
		if strings.Contains(p.Dockerfile, "miscounted") { // a builder that reads another Dockerfile
			total += 2
		}
		fmt.Fprintf(out, "Step %d/%d : X\n", i+1, total)
		if ctx.Err() != nil {
			return ctx.Err() // the engine ends a build whose client has gone
		}
		if strings.Contains(p.Dockerfile, "loud") {
			fmt.Fprintf(out, "%s\n", strings.Repeat("x", 1<<20))
		}
		if strings.Contains(p.Dockerfile, "spoof") { // a step's own output posing as the builder's
			fmt.Fprintf(out, "Step 0/9 : boom\nStep %d/%d : X\nStep %d/%d : X\n", len(p.StepOf), len(p.StepOf), i+2, len(p.StepOf)+5)
		}
		if p.StepOf[i] == 1 && strings.Contains(p.Dockerfile, "exit 3") {
			fmt.Fprintln(out, "\x1b[1;31mboom\x1b[0m")
			return errors.New(`The command '/bin/sh -c echo boom; exit 3' returned a non-zero code: 3`)
		}
	}
	e.mu.Lock()
	e.images[tag] = true
	e.mu.Unlock()
	return nil
}
func (e *fakeEngine) BuildSandbox(_ context.Context, base string, _ io.Writer) (string, error) {
	if e.failSandbox {
		return "", errors.New("the sandbox layer: no python3 in the image")
	}
	img := "sandbox-of-" + strings.ReplaceAll(base, ":", "-")
	e.mu.Lock()
	e.images[img] = true
	e.mu.Unlock()
	return img, nil
}

// has says whether the engine has image.
func (e *fakeEngine) has(image string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.images[image]
}
func (e *fakeEngine) RemoveImage(_ context.Context, image string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.busy[image] {
		return fmt.Errorf("conflict: image %s is used by a container", image)
	}
	delete(e.images, image)
	return nil
}

func TestServiceCacheFailureOwnership(t *testing.T) {
	st, eng, svc := newService(t)
	ctx := t.Context()
	spec := template.Spec{Steps: []template.Step{{Apt: []string{"jq"}}}}
	var steps []string
	tm, err := svc.Build(ctx, template.BuildRequest{Agent: "alice", Name: "tools", Spec: spec}, func(e template.Event) {
		if e.Type == "step" {
			steps = append(steps, e.Label)
		}
	})
	if err != nil || tm.Status != template.StatusReady || tm.Version != 1 || fmt.Sprint(steps) != "[apt jq sandpit layer]" {
		t.Fatalf("build: %+v %v, steps %q", tm, err, steps)
	}
	var cached bool
	again, err := svc.Build(ctx, template.BuildRequest{Agent: "alice", Name: "tools", Spec: spec}, func(e template.Event) { cached = cached || e.Cached })
	if err != nil || !cached || again.Image != tm.Image || eng.layers != 1 {
		t.Fatalf("rebuild: %+v %v, cached %v, %d layer builds", again, err, cached, eng.layers)
	}

	// The same image with another start command or preload is a new version holding the
	// new spec (its warm sessions are replaced), built from the cache.
	moved := spec
	moved.Start, moved.Preload = &template.Start{Cmd: "serve"}, []string{"pandas"}
	v2, err := svc.Build(ctx, template.BuildRequest{Agent: "alice", Name: "tools", Spec: moved}, nil)
	if err != nil || v2.Version != 2 || v2.Image != tm.Image || eng.layers != 1 || v2.Spec.Start == nil || v2.Spec.Start.Cmd != "serve" || len(v2.Spec.Preload) != 1 {
		t.Fatalf("a cached build of a changed spec: %+v %v, %d layer builds; want version 2 of the same image with the new spec", v2, err, eng.layers)
	}
	if got, _ := svc.Resolve(ctx, "alice", "tools"); got.Version != 2 || got.Spec.Start == nil {
		t.Errorf("resolved after the change: %+v", got)
	}
	if back, err := svc.Build(ctx, template.BuildRequest{Agent: "alice", Name: "tools", Spec: spec}, nil); err != nil || back.Version != 3 || back.Spec.Start != nil {
		t.Fatalf("back to the first spec: %+v %v, want version 3 without a start command", back, err)
	}

	// A failing step is named with its output; the template is stored as failed.
	_, err = svc.Build(ctx, template.BuildRequest{Agent: "alice", Name: "broken", Spec: template.Spec{Steps: []template.Step{{Run: "true"}, {Run: "echo boom; exit 3"}}}}, nil)
	var be *template.BuildError
	if !errors.As(err, &be) || be.Step != 2 || !strings.Contains(be.Output, "boom") || errclass.Of(err) != errclass.Invalid {
		t.Fatalf("failing build: %v", err)
	}
	// It leads with the step and its exit status, not the builder's quote of the generated
	// command line, and its output holds no terminal escapes.
	if want := "step 2 (run echo boom; exit 3) failed: it exited with status 3\noutput:\n"; !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\x1b") {
		t.Errorf("failing build's error %q, want it to start %q without escapes", err, want)
	}
	if got, _ := svc.Get(ctx, "alice", "broken"); got.Status != template.StatusFailed || !strings.Contains(got.Error, "step 2 (run echo boom; exit 3)") {
		t.Errorf("stored failure: %+v", got)
	}
	// Starting it says why in one line and where its log is, not the whole output.
	if _, err := svc.Resolve(ctx, "alice", "broken"); err == nil || strings.Contains(err.Error(), "boom\n") || strings.Contains(err.Error(), "output:") ||
		!strings.Contains(err.Error(), "failed: it exited with status 3 (its log: GET /v1/agents/alice/templates/broken, or sandpit template show broken)") {
		t.Errorf("starting the failed template: %v", err)
	}
	// A failed rebuild leaves the ready version serving, and says so.
	if _, err := svc.Build(ctx, template.BuildRequest{Agent: "alice", Name: "tools", Spec: template.Spec{Steps: []template.Step{{Run: "true"}, {Run: "exit 3"}}}}, nil); err == nil {
		t.Fatal("a failing rebuild succeeded")
	}
	if got, err := svc.Resolve(ctx, "alice", "tools"); err != nil || got.Image != tm.Image || got.Version != 3 || !strings.Contains(got.Error, "version 4 failed; version 3 still serves") {
		t.Errorf("after a failed rebuild: %+v %v", got, err)
	}
	// The cap counts the failed one too.
	if _, err := svc.Build(ctx, template.BuildRequest{Agent: "alice", Name: "third", Spec: spec}, nil); errclass.Of(err) != errclass.Busy {
		t.Errorf("a third template past templates_per_agent 2: %v", err)
	}

	// Another agent: neither resolves nor lists it, until it is shared.
	if _, err := svc.Resolve(ctx, "bob", "alice/tools"); errclass.Of(err) != errclass.Invalid {
		t.Errorf("bob resolves alice's unshared template: %v", err)
	}
	if list, _ := svc.List(ctx, "bob"); len(list) != 0 {
		t.Errorf("bob lists %+v", list)
	}
	if _, err := svc.Build(ctx, template.BuildRequest{Agent: "alice", Name: "tools", Spec: spec, Shared: true}, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := svc.Resolve(ctx, "bob", "alice/tools"); err != nil || got.Image != tm.Image {
		t.Errorf("bob resolves alice's shared template: %+v %v", got, err)
	}

	// An image removed by hand is reported, not waited for.
	delete(eng.images, tm.Image)
	if _, err := svc.Resolve(ctx, "alice", "tools"); errclass.Of(err) != errclass.Unavailable || !strings.Contains(err.Error(), "no longer in the engine") {
		t.Errorf("resolve with the image gone: %v", err)
	}
	// Saved code naming it keeps it, unless forced: bob's by its shared name, alice's own by
	// either; code that named it in an older version only does not.
	for _, c := range []store.Code{{Agent: "bob", Name: "uses", Code: "x", Template: "alice/tools"},
		{Agent: "alice", Name: "mine", Code: "x", Template: "tools"}, {Agent: "alice", Name: "left", Code: "x", Template: "tools"}} {
		if _, err := st.CreateCode(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.UpdateCode(ctx, store.Code{Agent: "alice", Name: "left", Code: "y"}, 0); err != nil {
		t.Fatal(err)
	}
	err = svc.Delete(ctx, "alice", "tools", false)
	if errclass.Of(err) != errclass.Conflict || !strings.Contains(err.Error(), "named by saved code mine, and 1 saved code of other agents it is shared with:") ||
		strings.Contains(err.Error(), "uses") {
		t.Fatalf("deleting a template saved code names: %v", err)
	}
	if _, err := svc.Get(ctx, "alice", "tools"); err != nil {
		t.Fatalf("the refused delete removed it: %v", err)
	}
	if err := svc.Delete(ctx, "alice", "tools", true); err != nil {
		t.Fatal(err)
	}
	if eng.images[tm.LayerImage] {
		t.Error("the layer image outlived its only template")
	}
	if _, err := svc.Get(ctx, "alice", "tools"); errclass.Of(err) != errclass.NotFound {
		t.Errorf("after delete: %v", err)
	}
}

// newService returns a template service on a fresh store and a fakeEngine holding the image
// "base", at most 2 templates an agent.
func newService(t *testing.T) (*store.Store, *fakeEngine, *template.Service) {
	t.Helper()
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng := &fakeEngine{images: map[string]bool{"base": true}}
	return st, eng, template.NewService(st, eng, template.Config{DefaultBase: "base", BuildTimeout: time.Minute, PerAgent: 2}, nil)
}

// blockingEngine's layer builds wait for release.
type blockingEngine struct {
	*fakeEngine
	started, release chan struct{}
}

func (e *blockingEngine) BuildLayer(ctx context.Context, p template.Plan, tag string, out io.Writer) error {
	e.started <- struct{}{}
	<-e.release
	return e.fakeEngine.BuildLayer(ctx, p, tag, out)
}

// blockingService is a service on a real store whose engine's layer builds wait for release.
func blockingService(t *testing.T) (*blockingEngine, *template.Service) {
	t.Helper()
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng := &blockingEngine{&fakeEngine{images: map[string]bool{"base": true}}, make(chan struct{}), make(chan struct{})}
	return eng, template.NewService(st, eng, template.Config{DefaultBase: "base", BuildTimeout: time.Minute, PerAgent: 5}, nil)
}

// A spec whose base the engine lacks is told so while another build runs, not that the daemon
// is busy (a new user's typo was answered 429 and retried in vain).
func TestBadBaseIsToldWhileABuildRuns(t *testing.T) {
	eng, svc := blockingService(t)
	var err error
	done := make(chan error, 1)
	go func() {
		_, err := svc.Build(t.Context(), template.BuildRequest{Agent: "alice", Name: "tools", Spec: template.Spec{Steps: []template.Step{{Run: "true"}}}}, nil)
		done <- err
	}()
	<-eng.started
	_, err = svc.Build(t.Context(), template.BuildRequest{Agent: "alice", Name: "other", Spec: template.Spec{Base: "no-such-image", Steps: []template.Step{{Run: "true"}}}}, nil)
	var fe *sandbox.FieldError
	if !errors.As(err, &fe) || fe.Field != "spec.base" {
		t.Errorf("a build on a missing base while another runs: %v, want a field error of spec.base", err)
	}
	close(eng.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// No image is removed while a build runs: the engine prunes a removed image's untagged parents,
// and the build may be using one as its cache (TestTemplates, 6 December: an E2B build's step
// failed with "unknown parent image ID" as a template on the same base was removed). The
// removal waits, and is done once the build ends.
func TestNoImageIsRemovedWhileABuildRuns(t *testing.T) {
	eng, svc := blockingService(t)
	build := func(agent, name string) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := svc.Build(t.Context(), template.BuildRequest{Agent: agent, Name: name, Spec: template.Spec{Steps: []template.Step{{Run: "echo " + name}}}}, nil)
			done <- err
		}()
		return done
	}
	first := build("alice", "old")
	<-eng.started
	eng.release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	old, _ := svc.Get(t.Context(), "alice", "old")
	running := build("bob", "new")
	<-eng.started // bob's build is under way
	if err := svc.Delete(t.Context(), "alice", "old", false); err != nil {
		t.Fatal(err)
	}
	if !eng.has(old.Image) || !eng.has(old.LayerImage) {
		t.Fatal("a removed template's images went while another build ran")
	}
	// A template being built is not removed: its build's end would store it again.
	if err := svc.Delete(t.Context(), "bob", "new", false); errclass.Of(err) != errclass.Conflict {
		t.Errorf("removing a template while it builds: %v, want a conflict", err)
	}
	eng.release <- struct{}{}
	if err := <-running; err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); eng.has(old.Image) || eng.has(old.LayerImage); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the removed template's images are still in the engine 10 s after the build ended")
		}
	}
}

// TestDockerfileFetchesNothingItself: a Dockerfile's images must be the engine's own, and
// nothing makes the engine fetch on the host's network (ADD of a URL or git repository, a
// variable that could name one), ONBUILD included; a stage is not an image.
func TestDockerfileFetchesNothingItself(t *testing.T) {
	images, err := template.DockerfileImages("# escape=`\nFROM --platform=linux/amd64 base:1 AS build\nRUN echo `\n  hi\nFROM Build\nCOPY --from=build /a /b\nCOPY --from=0 /a /c\nCOPY --from=other:2 /x /y\nADD local.tar /opt/\n")
	if err != nil || fmt.Sprint(images) != "[base:1 other:2]" {
		t.Errorf("images %q, %v; want base:1 and other:2", images, err)
	}
	for _, df := range []string{
		"FROM base\nADD http://169.254.169.254/latest/meta-data/ /m\n",
		"FROM base\nADD --checksum=sha256:00 \\\n  https://example.com/x.tar /x\n",
		"FROM base\nADD git@github.com:org/repo.git /src\n",
		"FROM base\nARG U=http://10.0.0.1/\nADD $U /x\n",
		"FROM base\nONBUILD ADD https://example.com/x /x\n",
		"ARG IMG=evil.example/x\nFROM $IMG\n",
		"FROM base\nCOPY --from=${SRC} /a /b\n",
		// A URL split across lines, as the builder joins them (a red team's way past a
		// look-alike parser that joined them with a space).
		"FROM base\nADD http:\\\n//127.0.0.1:8765/v1/executions?agent=bob /leak.json\n",
		"FROM base\nADD h\\\n  # a comment between\nttps://example.com/x /x\n",
		"# escape=`\nFROM base\nADD http:`\n//example.com/x /x\n",
		// A heredoc, which the engine's classic builder does not know: it runs the body's
		// lines as instructions (a second red team's way past).
		"FROM base\nRUN <<CMD\nADD http://127.0.0.1:8765/healthz /h\nCMD\n",
	} {
		_, err := template.DockerfileImages(df)
		var fe *sandbox.FieldError
		if !errors.As(err, &fe) || fe.Field != "spec.dockerfile" || !strings.HasPrefix(fe.Message, "line ") {
			t.Errorf("%q: %v, want a spec.dockerfile error naming the line", df, err)
		}
	}
	// A name split across lines is the name the builder uses.
	if images, err := template.DockerfileImages("FROM a\\\n.evil.example/x\n"); err != nil || fmt.Sprint(images) != "[a.evil.example/x]" {
		t.Errorf("a split FROM: %q %v", images, err)
	}
	// sandpit's own images hold agents' templates: no spec starts from one but as template:NAME.
	_, eng2, svc2 := newService(t)
	eng2.images["sandpit-template:0123456789abcdef"], eng2.images["sandpit-sandbox:0123"] = true, true
	for _, spec := range []template.Spec{{Base: "sandpit-template:0123456789abcdef", Steps: []template.Step{{Run: "cat /secret"}}},
		{Base: "docker.io/library/sandpit-sandbox:0123", Steps: []template.Step{{Run: "cat /secret"}}},
		{Base: "index.docker.io/library/sandpit-template:0123456789abcdef", Steps: []template.Step{{Run: "cat /secret"}}},
		{Base: "index.docker.io/sandpit-sandbox:0123", Steps: []template.Step{{Run: "cat /secret"}}},
		{Dockerfile: "FROM base\nCOPY --from=sandpit-template:0123456789abcdef /secret /x\n"}} {
		_, err := svc2.Build(t.Context(), template.BuildRequest{Agent: "mallory", Name: "peek", Spec: spec}, nil)
		var fe *sandbox.FieldError
		if !errors.As(err, &fe) || !strings.Contains(fe.Message, "one of sandpit's own images") {
			t.Errorf("a spec starting from another's template image %+v: %v", spec, err)
		}
	}
	// A step printing the builder's own step lines neither crashes the build (a "Step 0/9"
	// once indexed before the plan) nor moves its progress.
	var labels []string
	spoof := template.Spec{Steps: []template.Step{{Run: "echo spoof"}, {Apt: []string{"jq"}}}}
	if _, err := svc2.Build(t.Context(), template.BuildRequest{Agent: "alice", Name: "spoof", Spec: spoof}, func(e template.Event) {
		if e.Type == "step" {
			labels = append(labels, e.Label)
		}
	}); err != nil || fmt.Sprint(labels) != "[run echo spoof apt jq sandpit layer]" || eng2.layers != 1 {
		t.Errorf("a build whose step prints step lines: %v, steps %q", err, labels)
	}
	// A builder counting other instructions than the plan's ends the build.
	_, err = svc2.Build(t.Context(), template.BuildRequest{Agent: "alice", Name: "miscounted", Spec: template.Spec{Steps: []template.Step{{Run: "echo miscounted"}}}}, nil)
	if err == nil || !strings.Contains(err.Error(), "reads this Dockerfile otherwise than sandpit does") {
		t.Errorf("a build the builder counts otherwise: %v", err)
	}
	// A step's output line of any length is kept to its first 16 KiB.
	var longest int
	if _, err := svc2.Build(t.Context(), template.BuildRequest{Agent: "bob", Name: "loud", Spec: template.Spec{Steps: []template.Step{{Run: "echo loud"}}}}, func(e template.Event) {
		longest = max(longest, len(e.Line))
	}); err != nil || longest == 0 || longest > 16<<10 {
		t.Errorf("a build with a 1 MiB line: %v, its longest log line %d bytes", err, longest)
	}
	// The service refuses an image the engine lacks before it builds anything.
	_, eng, svc := newService(t)
	_, err = svc.Build(t.Context(), template.BuildRequest{Agent: "alice", Name: "pulls", Spec: template.Spec{Dockerfile: "FROM base\nCOPY --from=registry.example/tool:1 /t /t\n"}}, nil)
	var fe *sandbox.FieldError
	if !errors.As(err, &fe) || !strings.Contains(fe.Message, `"registry.example/tool:1", which the engine does not have`) || eng.layers != 0 {
		t.Errorf("a Dockerfile naming an image the engine lacks: %v (%d layer builds)", err, eng.layers)
	}
}

// TestFailedBuildsLeaveNoImage: a failed build's layer (its own steps built, sandpit's layer
// failed) goes when another build of the template replaces the failed record (a red team's
// failed builds of 200 MB each piled up without bound, 7 December 2026).
func TestFailedBuildsLeaveNoImage(t *testing.T) {
	_, eng, svc := newService(t)
	eng.failSandbox = true
	_, err := svc.Build(t.Context(), template.BuildRequest{Agent: "mallory", Name: "big", Spec: template.Spec{Steps: []template.Step{{Run: "big"}}}}, nil)
	if err == nil {
		t.Fatal("a build whose sandbox layer fails succeeded")
	}
	failed, _ := svc.Get(t.Context(), "mallory", "big")
	if !eng.has(failed.LayerImage) {
		t.Fatalf("the failed record's layer %s is not in the engine: the test proves nothing", failed.LayerImage)
	}
	eng.failSandbox = false
	if _, err := svc.Build(t.Context(), template.BuildRequest{Agent: "mallory", Name: "big", Spec: template.Spec{Steps: []template.Step{{Run: "true"}, {Run: "exit 3"}}}}, nil); err == nil {
		t.Fatal("a failing build succeeded")
	}
	if eng.has(failed.LayerImage) {
		t.Errorf("the layer %s of the failed record replaced is still in the engine", failed.LayerImage)
	}
}

// TestSharedListingHidesPrivateVersions: another agent's listing of a shared template shows
// the tags of its shared versions only, and not the error of a build made privately (its
// steps' output): a red team read "DB_PASSWORD=..." and a private tag's name there.
func TestSharedListingHidesPrivateVersions(t *testing.T) {
	_, _, svc := newService(t)
	ctx := t.Context()
	spec := template.Spec{Steps: []template.Step{{Run: "true"}}}
	public, err := svc.Build(ctx, template.BuildRequest{Agent: "alice", Name: "secret", Spec: spec, Shared: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Tag(ctx, "alice", "secret", "public", public.Version); err != nil {
		t.Fatal(err)
	}
	private, err := svc.Build(ctx, template.BuildRequest{Agent: "alice", Name: "secret", Spec: template.Spec{Steps: []template.Step{{Run: "echo private"}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Tag(ctx, "alice", "secret", "internal-q3", private.Version); err != nil {
		t.Fatal(err)
	}
	// Shared again, then a private build that fails: the shared version still serves.
	if _, err := svc.Build(ctx, template.BuildRequest{Agent: "alice", Name: "secret", Spec: spec, Shared: true}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Build(ctx, template.BuildRequest{Agent: "alice", Name: "secret", Spec: template.Spec{Steps: []template.Step{{Run: "true"}, {Run: "echo DB_PASSWORD=hunter2; exit 3"}}}}, nil); err == nil {
		t.Fatal("a failing build succeeded")
	}
	list, err := svc.List(ctx, "mallory")
	if err != nil || len(list) != 1 {
		t.Fatalf("mallory's list: %+v %v", list, err)
	}
	if got := list[0]; got.Error != "" || got.Tags["internal-q3"] != 0 || got.Tags["public"] != public.Version {
		t.Errorf("mallory sees alice's template with error %q and tags %v; want no error and the shared version's tag only", got.Error, got.Tags)
	}
	own, _ := svc.List(ctx, "alice")
	if len(own) != 1 || own[0].Error == "" || own[0].Tags["internal-q3"] == 0 {
		t.Errorf("alice's own list lost her template's error or tags: %+v", own)
	}
}

// TestImageInUseIsRemovedLater: a removed template's image that a session still runs on (a
// warm pool's) is removed once it is free, not left in the engine.
func TestImageInUseIsRemovedLater(t *testing.T) {
	every := *template.SweepEvery
	*template.SweepEvery = 10 * time.Millisecond
	t.Cleanup(func() { *template.SweepEvery = every })
	_, eng, svc := newService(t)
	tm, err := svc.Build(t.Context(), template.BuildRequest{Agent: "alice", Name: "tools", Spec: template.Spec{Steps: []template.Step{{Run: "true"}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eng.mu.Lock()
	eng.busy = map[string]bool{tm.Image: true}
	eng.mu.Unlock()
	if err := svc.Delete(t.Context(), "alice", "tools", false); err != nil {
		t.Fatal(err)
	}
	present := func() bool { _, err := eng.ImageID(t.Context(), tm.Image); return err == nil }
	if !present() {
		t.Fatal("the busy image was removed")
	}
	eng.mu.Lock()
	eng.busy = nil // its session ended
	eng.mu.Unlock()
	for deadline := time.Now().Add(5 * time.Second); present(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the image was not removed once free")
		}
		svc.Resolve(t.Context(), "alice", "other") // activity drives the sweep
	}
}

// A template keeps its current version, template_versions_kept before it and every tagged
// one, each startable as NAME:VERSION or NAME:TAG; versions no longer kept go with their
// images, and a template removed takes all of its versions' images.
func TestVersionsAndTags(t *testing.T) {
	st, eng, _ := newService(t)
	svc := template.NewService(st, eng, template.Config{DefaultBase: "base", BuildTimeout: time.Minute, PerAgent: 2, VersionsKept: 1}, nil)
	ctx := t.Context()
	build := func(pkg string) template.Template {
		t.Helper()
		tm, err := svc.Build(ctx, template.BuildRequest{Agent: "alice", Name: "env", Spec: template.Spec{Steps: []template.Step{{Apt: []string{pkg}}}}}, nil)
		if err != nil {
			t.Fatalf("build with %s: %v", pkg, err)
		}
		return tm
	}
	v1, v2, v3 := build("jq"), build("curl"), build("git")
	if v3.Version != 3 {
		t.Fatalf("third build is version %d", v3.Version)
	}
	kept := func() string {
		t.Helper()
		vs, err := svc.Versions(ctx, "alice", "env")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, v := range vs {
			s := fmt.Sprint(v.Version)
			if v.Current {
				s += "*"
			}
			for _, tag := range v.Tags {
				s += "+" + tag
			}
			out = append(out, s)
		}
		return strings.Join(out, " ")
	}
	if got := kept(); got != "3* 2" {
		t.Errorf("kept %q, want 3* 2 (template_versions_kept 1)", got)
	}
	if eng.images[v1.Image] || eng.images[v1.LayerImage] {
		t.Errorf("version 1's images %s, %s are still in the engine", v1.Image, v1.LayerImage)
	}
	if got, err := svc.Resolve(ctx, "alice", "env:2"); err != nil || got.Version != 2 || got.Image != v2.Image || got.Spec.Steps[0].Apt[0] != "curl" {
		t.Errorf("env:2 resolved to %+v, %v; want version 2 with its own image and spec", got, err)
	}
	if got, err := svc.Resolve(ctx, "alice", "env:latest"); err != nil || got.Version != 3 {
		t.Errorf("env:latest resolved to %+v, %v", got, err)
	}
	_, err := svc.Resolve(ctx, "alice", "env:1")
	if fe, ok := errors.AsType[*sandbox.FieldError](err); !ok || fe.Field != "template" || !strings.Contains(fe.Message, "versions 3 and 2") {
		t.Errorf("env:1, no longer kept: %v", err)
	}

	// A tag keeps its version past template_versions_kept; NAME:TAG starts it.
	for _, bad := range []string{"12", "latest", "Stable", ""} {
		if err := svc.Tag(ctx, "alice", "env", bad, 2); errclass.Of(err) != errclass.Invalid {
			t.Errorf("tag %q: %v, want a field error", bad, err)
		}
	}
	if err := svc.Tag(ctx, "alice", "env", "stable", 1); err == nil || !strings.Contains(err.Error(), "keeps no version 1") {
		t.Errorf("tagging a version not kept: %v", err)
	}
	if err := svc.Tag(ctx, "alice", "env", "stable", 2); err != nil {
		t.Fatal(err)
	}
	v4 := build("make")
	build("less")
	if got := kept(); got != "5* 4 2+stable" {
		t.Errorf("kept %q, want 5* 4 2+stable", got)
	}
	if !eng.images[v2.Image] || eng.images[v3.Image] {
		t.Errorf("the tagged version 2's image kept %v (want true), the untagged 3's %v (want false)", eng.images[v2.Image], eng.images[v3.Image])
	}
	if got, err := svc.Resolve(ctx, "alice", "env:stable"); err != nil || got.Version != 2 {
		t.Errorf("env:stable resolved to %+v, %v", got, err)
	}
	if got, _ := svc.Get(ctx, "alice", "env"); got.Tags["stable"] != 2 {
		t.Errorf("the template's tags %v", got.Tags)
	}
	// Another agent reaches none of it unless shared, and then only the versions built shared
	// (a new helper's rebuild with --shared opened the older private versions to every agent),
	// without learning the others.
	if _, err := svc.Resolve(ctx, "bob", "alice/env:stable"); err == nil {
		t.Error("bob started alice's unshared template's tagged version")
	}
	shared, err := svc.Build(ctx, template.BuildRequest{Agent: "alice", Name: "env", Shared: true, Spec: template.Spec{Steps: []template.Step{{Apt: []string{"less"}}}}}, nil)
	if err != nil || !shared.Shared {
		t.Fatalf("sharing by a rebuild: %+v %v", shared, err)
	}
	if got, err := svc.Resolve(ctx, "bob", "alice/env:5"); err != nil || got.Version != 5 {
		t.Errorf("bob's alice/env:5, shared: %+v %v", got, err)
	}
	_, err = svc.Resolve(ctx, "bob", "alice/env:stable")
	if err == nil || strings.Contains(err.Error(), "versions") || strings.Contains(err.Error(), "stable\" and") {
		t.Errorf("bob's alice/env:stable, a version built private: %v; want refused, naming nothing of alice's", err)
	}
	// A selector is a version's number as written, or a tag; nothing else.
	for _, ref := range []string{"env:+5", "env:05", "env:", "env::x", "env:0", "env:-1", "env:" + strings.Repeat("x", 5000)} {
		got, err := svc.Resolve(ctx, "alice", ref)
		if ref == "env:" {
			if err != nil || got.Version != 5 {
				t.Errorf("%q: %+v %v, want the current version", ref, got, err)
			}
			continue
		}
		if err == nil || len(err.Error()) > 1000 {
			t.Errorf("%.40q resolved to version %d (%.200v), want a short refusal", ref, got.Version, err)
		}
	}
	if err := svc.Tag(ctx, "alice", "env", "default", 5); errclass.Of(err) != errclass.Invalid {
		t.Errorf("the tag \"default\" (E2B's current version): %v, want refused", err)
	}

	// The current version is not removed by itself; another is, with its images.
	if err := svc.DeleteVersion(ctx, "alice", "env", 5); errclass.Of(err) != errclass.Conflict {
		t.Errorf("removing the current version: %v, want a conflict", err)
	}
	if err := svc.DeleteVersion(ctx, "alice", "env", 4); err != nil {
		t.Fatal(err)
	}
	if eng.images[v4.Image] {
		t.Error("version 4's image stayed in the engine")
	}
	if err := svc.Untag(ctx, "alice", "env", "stable"); err != nil {
		t.Fatal(err)
	}
	if err := svc.Untag(ctx, "alice", "env", "stable"); errclass.Of(err) != errclass.NotFound {
		t.Errorf("removing a tag twice: %v", err)
	}
	if err := svc.Delete(ctx, "alice", "env", false); err != nil {
		t.Fatal(err)
	}
	if eng.images[v2.Image] || eng.images[v2.LayerImage] {
		t.Error("the removed template's kept version 2 left its images")
	}
	if vs, err := st.TemplateVersions(ctx, "alice", "env"); err != nil || len(vs) != 0 {
		t.Errorf("versions after the template's removal: %v, %v", vs, err)
	}
}

// publishingEngine is a fakeEngine whose images must also reach the sandboxes' hosts: it
// records each image published.
type publishingEngine struct {
	*fakeEngine
	published []string
}

func (e *publishingEngine) Publish(_ context.Context, image string, out io.Writer) error {
	e.published = append(e.published, image)
	fmt.Fprintln(out, "published "+image)
	return nil
}

// A build served from the cache publishes its image again (a Publisher engine): an image lost
// on Kubernetes' nodes comes back with a rebuild (a new user's removed one stayed lost: the
// cached rebuild answered at once and imported nothing).
func TestCachedBuildPublishesAgain(t *testing.T) {
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng := &publishingEngine{fakeEngine: &fakeEngine{images: map[string]bool{"base": true}}}
	svc := template.NewService(st, eng, template.Config{DefaultBase: "base", BuildTimeout: time.Minute, PerAgent: 2}, nil)
	spec := template.Spec{Steps: []template.Step{{Run: "true"}}}
	first, err := svc.Build(t.Context(), template.BuildRequest{Agent: "alice", Name: "tools", Spec: spec}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var logged []string
	again, err := svc.Build(t.Context(), template.BuildRequest{Agent: "alice", Name: "tools", Spec: spec}, func(e template.Event) {
		if e.Type == "log" {
			logged = append(logged, e.Line)
		}
	})
	if err != nil || again.Image != first.Image || eng.layers != 1 {
		t.Fatalf("the cached rebuild: %+v %v, %d layer builds", again, err, eng.layers)
	}
	if len(eng.published) != 1 || eng.published[0] != first.Image || fmt.Sprint(logged) != "[published "+first.Image+"]" {
		t.Errorf("published %q, logged %q; want the cached build's image once, in its log", eng.published, logged)
	}
}
