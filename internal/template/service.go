package template

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/distribution/reference"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// The states of a template.
const (
	StatusBuilding = "building"
	StatusReady    = "ready"
	StatusFailed   = "failed"
)

// Template is a stored template (the wire's type); Version a kept version of one; Event a
// build's progress.
type (
	Template = apitype.Template
	Version  = apitype.TemplateVersion
	Event    = apitype.TemplateEvent
)

// ErrNotFound: no template of that name for the agent (class not found).
var ErrNotFound = errclass.New(errclass.NotFound, "template not found")

// Store keeps templates.
type Store interface {
	// PutTemplate inserts or replaces the template of (t.Agent, t.Name).
	PutTemplate(ctx context.Context, t Template) error
	// GetTemplate returns agent's template name; an error wrapping ErrNotFound when none.
	GetTemplate(ctx context.Context, agent, name string) (Template, error)
	// ListTemplates returns agent's templates and the shared ones of other agents, by agent
	// and name.
	ListTemplates(ctx context.Context, agent string) ([]Template, error)
	// DeleteTemplate removes agent's template name; an error wrapping ErrNotFound when none.
	DeleteTemplate(ctx context.Context, agent, name string) error
	// TemplateImageUsers counts the templates whose Image or LayerImage is image.
	TemplateImageUsers(ctx context.Context, image string) (int, error)
	// CodeNamingTemplate returns the saved code ("AGENT/NAME") whose latest version names
	// owner's template name.
	CodeNamingTemplate(ctx context.Context, owner, name string) ([]string, error)

	// PutTemplateVersion keeps v as a version of agent's template name (replacing one of the
	// same number); TemplateVersions returns the kept ones, newest first, with their tags;
	// DeleteTemplateVersion removes one and its tags (an error wrapping ErrNotFound when it is
	// not kept). DeleteTemplate removes them all.
	PutTemplateVersion(ctx context.Context, agent, name string, v Version) error
	TemplateVersions(ctx context.Context, agent, name string) ([]Version, error)
	DeleteTemplateVersion(ctx context.Context, agent, name string, version int) error
	// TemplateTags returns the tags of agent's template name and the version each names;
	// SetTemplateTag makes tag name version; DeleteTemplateTag removes it (an error wrapping
	// ErrNotFound when there is no such tag).
	TemplateTags(ctx context.Context, agent, name string) (map[string]int, error)
	SetTemplateTag(ctx context.Context, agent, name, tag string, version int) error
	DeleteTemplateTag(ctx context.Context, agent, name, tag string) error

	// ID is the store's: every daemon of one store has the same, another store another.
	ID(ctx context.Context) (string, error)
}

// Engine builds and keeps images.
type Engine interface {
	// ImageID returns the ID of image; an error of class not found when the engine lacks it.
	ImageID(ctx context.Context, image string) (string, error)
	// ImageSize returns image's size in bytes.
	ImageSize(ctx context.Context, image string) (int64, error)
	// BuildLayer builds plan's context as tag, writing the builder's output to out.
	BuildLayer(ctx context.Context, plan Plan, tag string, out io.Writer) error
	// BuildSandbox builds sandpit's sandbox layer on base and returns its image.
	BuildSandbox(ctx context.Context, base string, out io.Writer) (string, error)
	// RemoveImage removes image; an image in use is left.
	RemoveImage(ctx context.Context, image string) error
}

// Publisher is an Engine whose sandbox images must also reach where the sandboxes run (the
// nodes of runtime kubernetes). A build served from the cache publishes its image again, so
// that one lost there (removed by hand, garbage-collected) comes back with a rebuild.
type Publisher interface {
	// Publish brings image to where sandboxes run, writing what it does to out; errors say
	// why it could not.
	Publish(ctx context.Context, image string, out io.Writer) error
}

// Config bounds the builds.
type Config struct {
	// DefaultBase is the base of a spec without one.
	DefaultBase string
	// BuildTimeout caps one build; MaxImageBytes the sandbox image's size; PerAgent how many
	// templates an agent keeps.
	BuildTimeout  time.Duration
	MaxImageBytes int64
	PerAgent      int
	// VersionsKept is how many versions before the current one a template keeps (tagged ones
	// are kept besides).
	VersionsKept int
	// Pip is the daemon's index settings, for pip steps.
	Pip protocol.PipOptions
	// LayerRepository names the template layers' images (default "sandpit-template");
	// SandboxRepository the sandbox images (image_repository, default "sandpit-sandbox").
	// Neither is a base a spec may name: they hold agents' templates.
	LayerRepository, SandboxRepository string
}

// maxBuilds is how many templates the daemon builds at once (one per agent): a build step
// is a container of its own, bounded as a slot's box, and builds past this would take the
// host from the sandboxes.
const maxBuilds = 2

// Service builds, keeps and resolves templates.
type Service struct {
	store  Store
	engine Engine
	cfg    Config
	log    *slog.Logger

	mu       sync.Mutex
	building map[string]bool // agent/name
	// pending are images no template uses whose removal failed (a session of the template
	// still ran on them) or waited for a build: sweep tries again, at most every sweepEvery,
	// and when a build ends.
	pending  map[string]bool
	swept    time.Time
	sweeping bool

	// images keeps the engine's images from removal while a build runs: a build holds it for
	// reading, a removal for writing (or the image waits in pending). The engine prunes a
	// removed image's untagged parents, and a build under way may be using one of them as its
	// builder's cache: its next step then failed ("unknown parent image ID", when a template
	// built on the same base was removed beside an E2B build).
	images sync.RWMutex
}

// sweepEvery is how often the images left to remove are tried again, at most (a variable:
// tests shorten it).
var sweepEvery = 30 * time.Second

// NewService returns the templates of store, built by engine.
func NewService(store Store, engine Engine, cfg Config, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.SandboxRepository == "" {
		cfg.SandboxRepository = "sandpit-sandbox"
	}
	if cfg.LayerRepository == "" {
		cfg.LayerRepository = "sandpit-template"
	}
	return &Service{store: store, engine: engine, cfg: cfg, log: log, building: map[string]bool{}, pending: map[string]bool{}}
}

// Config returns the service's bounds.
func (s *Service) Config() Config { return s.cfg }

// BuildError is a failed build: the step that failed and its output.
type BuildError struct {
	Step   int // 1-based; 0 before any step
	Label  string
	Output string
	Err    error
}

func (e *BuildError) Error() string {
	where := "the build"
	if e.Step > 0 {
		where = fmt.Sprintf("step %d (%s)", e.Step, e.Label)
	}
	msg := fmt.Sprintf("%s failed: %v", where, e.Err)
	if out := strings.TrimSpace(e.Output); out != "" {
		msg += "\noutput:\n" + out
	}
	return msg
}

func (e *BuildError) Unwrap() error { return e.Err }

// builderExit matches the classic builder's error for a RUN that failed, which quotes the
// whole generated command line: "The command '/bin/sh -c set -e; ...' returned a non-zero
// code: 100" (and, for an exec-form RUN, "The command '[...]' ...").
var builderExit = regexp.MustCompile(`(?s)^The command .* returned a non-zero code: (\d+)$`)

// stepExit says err as the step's exit status when it is the builder's error for a failed
// RUN: the step's label and output already say what ran and what it printed.
func stepExit(err error) error {
	if m := builderExit.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Errorf("it exited with status %s", m[1])
	}
	return err
}

// BuildRequest is a template to build.
type BuildRequest struct {
	Agent  string
	Name   string
	Spec   Spec
	Shared bool
	// NoCache builds every step again, reusing no image of an earlier build (E2B's
	// skip_cache): for steps whose result changes with time, as an apt-get of today's
	// packages.
	NoCache bool
}

// Build builds req's template (or reuses the images of the same content) and stores it;
// emit receives the build's progress. A failed build is stored as failed and returned as a
// *BuildError; an invalid request is a *sandbox.FieldError; a build of the same name already
// under way is of class conflict.
func (s *Service) Build(ctx context.Context, req BuildRequest, emit func(Event)) (Template, error) {
	if emit == nil {
		emit = func(Event) {}
	}
	if err := sandbox.CheckAgent(req.Agent); err != nil {
		return Template{}, err
	}
	if err := CheckName("name", req.Name); err != nil {
		return Template{}, err
	}
	if err := Validate(req.Spec); err != nil {
		return Template{}, err
	}
	// The base first: a spec that cannot build is told so, not that the daemon is busy.
	base, err := s.base(ctx, req.Agent, req.Spec)
	if err != nil {
		return Template{}, err
	}
	baseID := ""
	if req.Spec.Dockerfile != "" {
		if err := s.dockerfileImages(ctx, req.Spec.Dockerfile); err != nil {
			return Template{}, err
		}
	} else {
		if baseID, err = s.engine.ImageID(ctx, base); err != nil {
			if errclass.Of(err) == errclass.NotFound {
				return Template{}, &sandbox.FieldError{Field: "spec.base", Message: fmt.Sprintf("the image %q is not in the engine; name an image it has (`docker images`) or template:NAME", base)}
			}
			return Template{}, err
		}
	}
	key := req.Agent + "/" + req.Name
	s.mu.Lock()
	if s.building[key] {
		s.mu.Unlock()
		return Template{}, errclass.Newf(errclass.Conflict, "template %q is being built already; wait for that build to end", req.Name)
	}
	mine := 0
	for k := range s.building {
		if strings.HasPrefix(k, req.Agent+"/") {
			mine++
		}
	}
	if mine > 0 || len(s.building) >= maxBuilds {
		s.mu.Unlock()
		return Template{}, errclass.Newf(errclass.Busy, "the daemon builds one template of an agent at a time and %d in all, and is at that now; build again when a build ends", maxBuilds)
	}
	s.building[key] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.building, key)
		s.swept = time.Time{} // the removals that waited for it are tried now
		s.mu.Unlock()
		s.sweep(ctx)
	}()

	prev, err := s.store.GetTemplate(ctx, req.Agent, req.Name)
	exists := err == nil
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Template{}, err
	}
	if !exists {
		list, err := s.store.ListTemplates(ctx, req.Agent)
		if err != nil {
			return Template{}, err
		}
		own := 0
		for _, t := range list {
			if t.Agent == req.Agent {
				own++
			}
		}
		if own >= s.cfg.PerAgent {
			return Template{}, errclass.Newf(errclass.Busy, "agent %q has %d templates, the most templates_per_agent allows; remove one (DELETE /v1/templates/{name}) first", req.Agent, own)
		}
	}
	storeID, err := s.store.ID(ctx)
	if err != nil {
		return Template{}, err
	}
	plan, err := NewPlan(storeID+"/"+req.Agent, req.Spec, base, baseID, s.cfg.Pip)
	if err != nil {
		return Template{}, err
	}
	now := time.Now().UTC()
	t := Template{Agent: req.Agent, Name: req.Name, Version: 1, Spec: req.Spec, Shared: req.Shared, Hash: plan.Hash,
		LayerImage: s.cfg.LayerRepository + ":" + plan.Hash[:16], Status: StatusBuilding, CreatedAt: now, UpdatedAt: now}
	if plan.NoCache = req.NoCache; plan.NoCache {
		// A tag of its own: the layer of the same content built before keeps its tag while
		// its versions are kept, and goes with them.
		t.LayerImage += "-" + strconv.FormatInt(now.UnixNano(), 36)
	} else if plan.CacheFrom, err = s.ownLayers(ctx, req.Agent, plan.CacheFrom); err != nil {
		return Template{}, err
	}
	if exists {
		t.CreatedAt, t.Version = prev.CreatedAt, prev.Version
		// A new image (of another spec, or built again), or the same one with another spec (a
		// start command, a preload, env without steps): a new version, so that the old
		// version's warm sessions are replaced and runs record the spec they had.
		if prev.Hash != plan.Hash || !sameSpec(prev.Spec, req.Spec) || req.NoCache {
			t.Version++
		}
	}
	steps := len(plan.Steps) + 1
	if !req.NoCache && exists && prev.Status == StatusReady && prev.Hash == plan.Hash && s.present(ctx, prev.Image) && s.present(ctx, prev.LayerImage) {
		if p, ok := s.engine.(Publisher); ok {
			out := &stepWriter{plan: plan, emit: emit, steps: steps}
			out.enter(steps, "sandpit layer")
			err := p.Publish(ctx, prev.Image, out)
			out.flush()
			if err != nil {
				return Template{}, err
			}
		}
		prev.Spec, prev.Version, prev.Shared, prev.UpdatedAt, prev.Error = req.Spec, t.Version, req.Shared, now, ""
		if err := s.ready(ctx, prev); err != nil {
			return Template{}, err
		}
		emit(Event{Type: "done", Steps: steps, Cached: true, Template: &prev})
		return prev, nil
	}
	// A ready template keeps serving its image while a new spec builds, and after it fails.
	keep := exists && prev.Status == StatusReady && s.present(ctx, prev.Image)
	if !keep {
		if err := s.store.PutTemplate(ctx, t); err != nil {
			return Template{}, err
		}
	}
	if exists && !keep {
		// The record replaced may have held images no version keeps: a failed build's layer
		// (one whose sandbox layer failed) went with nothing, and a red team's failed builds
		// of 200 MB each piled up without bound.
		s.removeUnused(context.WithoutCancel(ctx), prev.Image, prev.LayerImage)
	}
	bctx, cancel := context.WithTimeout(ctx, s.cfg.BuildTimeout)
	defer cancel()
	bctx, abort := context.WithCancelCause(bctx)
	defer abort(nil)
	out := &stepWriter{plan: plan, emit: emit, steps: steps, abort: abort}
	s.images.RLock()
	cached, err := s.build(bctx, &t, plan, out)
	s.images.RUnlock()
	out.flush()
	if cause := context.Cause(bctx); errors.Is(cause, errPlanMismatch) {
		err = cause
	}
	if err != nil && bctx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("it took longer than template_build_timeout_ms (%d ms): %w", s.cfg.BuildTimeout.Milliseconds(), err)
	}
	t.Log = out.log.String()
	t.UpdatedAt = time.Now().UTC()
	if err != nil {
		berr := &BuildError{Step: out.step, Label: out.label, Output: out.stepOutput.String(), Err: stepExit(err)}
		t.Status, t.Error = StatusFailed, berr.Error()
		stored := t
		if keep {
			stored = prev
			stored.Error, stored.Log, stored.UpdatedAt = fmt.Sprintf("the build of version %d failed; version %d still serves: %s", t.Version, prev.Version, berr.Error()), t.Log, t.UpdatedAt
		}
		if perr := s.store.PutTemplate(context.WithoutCancel(ctx), stored); perr != nil {
			s.log.Warn("recording a failed template build", "agent", t.Agent, "template", t.Name, "error", perr)
		}
		if stored.LayerImage != t.LayerImage {
			// A layer built for a version that failed after it (at sandpit's own layer, or its
			// size) belongs to no record: it went with nothing (a new user's failed builds
			// left one each, unbounded).
			s.removeUnused(context.WithoutCancel(ctx), t.LayerImage)
		}
		emit(Event{Type: "error", Step: out.step, Steps: steps, Label: out.label, Error: berr.Error()})
		return t, berr
	}
	t.Status = StatusReady
	if err := s.ready(ctx, t); err != nil {
		return Template{}, err
	}
	s.log.Info("template built", "agent", t.Agent, "template", t.Name, "version", t.Version, "image", t.Image, "cached", cached)
	emit(Event{Type: "done", Steps: steps, Cached: cached, Template: &t})
	return t, nil
}

// ready stores t, ready, as its template's current version, and removes the versions no
// longer kept (beyond VersionsKept before it and untagged) with their images.
func (s *Service) ready(ctx context.Context, t Template) error {
	if err := s.store.PutTemplate(ctx, t); err != nil {
		return err
	}
	v := Version{Version: t.Version, Spec: t.Spec, Hash: t.Hash, Image: t.Image, LayerImage: t.LayerImage,
		SizeBytes: t.SizeBytes, Shared: t.Shared, CreatedAt: t.UpdatedAt}
	if err := s.store.PutTemplateVersion(ctx, t.Agent, t.Name, v); err != nil {
		return err
	}
	versions, err := s.store.TemplateVersions(ctx, t.Agent, t.Name)
	if err != nil {
		return err
	}
	earlier := 0
	for _, v := range versions { // newest first
		if v.Version == t.Version || len(v.Tags) > 0 {
			continue
		}
		if v.Version < t.Version && earlier < s.cfg.VersionsKept {
			earlier++
			continue
		}
		if err := s.store.DeleteTemplateVersion(ctx, t.Agent, t.Name, v.Version); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		s.removeUnused(ctx, v.Image, v.LayerImage)
	}
	return nil
}

// build builds t's layer (unless the engine has it) and its sandbox image, and checks its
// size; cached says both were there.
func (s *Service) build(ctx context.Context, t *Template, plan Plan, out *stepWriter) (cached bool, err error) {
	layerCached := !plan.NoCache && s.present(ctx, t.LayerImage)
	if !layerCached {
		if err := s.engine.BuildLayer(ctx, plan, t.LayerImage, out); err != nil {
			return false, err
		}
	}
	out.enter(out.steps, "sandpit layer")
	img, err := s.engine.BuildSandbox(ctx, t.LayerImage, out)
	if err != nil {
		return false, err
	}
	t.Image = img
	if t.SizeBytes, err = s.engine.ImageSize(ctx, img); err != nil {
		return false, err
	}
	if s.cfg.MaxImageBytes > 0 && t.SizeBytes > s.cfg.MaxImageBytes {
		s.removeUnused(context.WithoutCancel(ctx), img, t.LayerImage)
		t.Image = ""
		return false, errclass.Newf(errclass.TooLarge, "the image is %d bytes, more than template_max_bytes (%d)", t.SizeBytes, s.cfg.MaxImageBytes)
	}
	return layerCached, nil
}

// ownLayers returns images and the layer images of agent's templates, every kept version's:
// the images whose steps agent's build may reuse. The builder reuses none of another agent's,
// which would tell, by their speed, what that agent's templates hold.
func (s *Service) ownLayers(ctx context.Context, agent string, images []string) ([]string, error) {
	list, err := s.store.ListTemplates(ctx, agent)
	if err != nil {
		return nil, err
	}
	for _, t := range list {
		if t.Agent != agent {
			continue // another agent's shared template
		}
		versions, err := s.store.TemplateVersions(ctx, agent, t.Name)
		if err != nil {
			return nil, err
		}
		images = append(images, t.LayerImage)
		for _, v := range versions {
			images = append(images, v.LayerImage)
		}
	}
	images = slices.DeleteFunc(images, func(img string) bool { return img == "" })
	slices.Sort(images)
	return slices.Compact(images), nil
}

// base resolves the spec's base to an image reference.
func (s *Service) base(ctx context.Context, agent string, spec Spec) (string, error) {
	if name, ok := BaseTemplate(spec); ok {
		t, err := s.store.GetTemplate(ctx, agent, name)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				return "", &sandbox.FieldError{Field: "spec.base", Message: fmt.Sprintf("agent %q has no template %q; build it first or name an image", agent, name)}
			}
			return "", err
		}
		if t.Status != StatusReady {
			return "", &sandbox.FieldError{Field: "spec.base", Message: fmt.Sprintf("template %q is %s, not ready", name, t.Status)}
		}
		return t.LayerImage, nil
	}
	if spec.Base != "" {
		if err := s.notOwnImage("spec.base", spec.Base); err != nil {
			return "", err
		}
		return spec.Base, nil
	}
	return s.cfg.DefaultBase, nil
}

// notOwnImage is a *sandbox.FieldError of field when image is one of sandpit's own images
// (a template's layer or a sandbox image, any agent's): a template starts from another of
// its agent's only as template:NAME, where ownership is checked.
func (s *Service) notOwnImage(field, image string) error {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return &sandbox.FieldError{Field: field, Message: fmt.Sprintf("%q is not an image name (repository:tag): %v", image, err)}
	}
	// Every spelling of a name (docker.io/, index.docker.io/, library/) as the engine reads it.
	repo := reference.FamiliarName(named)
	if repo == s.cfg.LayerRepository || repo == s.cfg.SandboxRepository {
		return &sandbox.FieldError{Field: field, Message: fmt.Sprintf("%q is one of sandpit's own images, which hold agents' templates; start from one of yours as template:NAME", image)}
	}
	return nil
}

func (s *Service) present(ctx context.Context, image string) bool {
	if image == "" {
		return false
	}
	_, err := s.engine.ImageID(ctx, image)
	return err == nil
}

// Get returns agent's template name, with its tags.
func (s *Service) Get(ctx context.Context, agent, name string) (Template, error) {
	t, err := s.store.GetTemplate(ctx, agent, name)
	if errors.Is(err, ErrNotFound) {
		return Template{}, fmt.Errorf("agent %q has no template %q (GET /v1/agents/%s/templates lists them): %w", agent, name, agent, err)
	}
	if err != nil {
		return Template{}, err
	}
	tags, err := s.store.TemplateTags(ctx, agent, name)
	if len(tags) > 0 {
		t.Tags = tags
	}
	return t, err
}

// Versions returns the kept versions of agent's template name, newest first.
func (s *Service) Versions(ctx context.Context, agent, name string) ([]Version, error) {
	t, err := s.Get(ctx, agent, name)
	if err != nil {
		return nil, err
	}
	versions, err := s.store.TemplateVersions(ctx, agent, name)
	for i := range versions {
		versions[i].Current = t.Status == StatusReady && versions[i].Version == t.Version
	}
	return versions, err
}

// maxTags caps a template's tags.
const maxTags = 32

// Tag makes tag name version of agent's template name (moving it from the version it named).
// Errors: a *sandbox.FieldError of field "tag" or "version" for a bad tag or a version not kept,
// one of class too large past 32 tags, and those of Get.
func (s *Service) Tag(ctx context.Context, agent, name, tag string, version int) error {
	if err := CheckTag("tag", tag); err != nil {
		return err
	}
	if version < 1 {
		return &sandbox.FieldError{Field: "version", Message: fmt.Sprintf("is %d: give the kept version the tag names, such as {\"version\": 3} (GET /v1/agents/%s/templates/%s/versions lists them)", version, agent, name)}
	}
	versions, err := s.Versions(ctx, agent, name)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(versions, func(v Version) bool { return v.Version == version }) {
		return &sandbox.FieldError{Field: "version", Message: fmt.Sprintf("template %q keeps no version %d; it keeps %s (GET /v1/agents/%s/templates/%s/versions lists them)",
			name, version, keptList(versions), agent, name)}
	}
	tags, err := s.store.TemplateTags(ctx, agent, name)
	if err != nil {
		return err
	}
	if _, ok := tags[tag]; !ok && len(tags) >= maxTags {
		return errclass.Newf(errclass.TooLarge, "template %q has %d tags, the most a template has; remove one first", name, len(tags))
	}
	return s.store.SetTemplateTag(ctx, agent, name, tag, version)
}

// keptList says versions' numbers, as "versions 4, 3 and 1".
func keptList(versions []Version) string {
	if len(versions) == 0 {
		return "no version yet"
	}
	nums := make([]string, len(versions))
	for i, v := range versions {
		nums[i] = strconv.Itoa(v.Version)
	}
	if len(nums) == 1 {
		return "version " + nums[0]
	}
	return "versions " + strings.Join(nums[:len(nums)-1], ", ") + " and " + nums[len(nums)-1]
}

// Untag removes tag of agent's template name; the version it named is kept only while
// template_versions_kept still counts it. Errors: those of Get, and one of class not found
// when the template has no such tag.
func (s *Service) Untag(ctx context.Context, agent, name, tag string) error {
	if _, err := s.Get(ctx, agent, name); err != nil {
		return err
	}
	if err := s.store.DeleteTemplateTag(ctx, agent, name, tag); err != nil {
		if errors.Is(err, ErrNotFound) {
			return errclass.Newf(errclass.NotFound, "template %q has no tag %q (GET /v1/agents/%s/templates/%s/versions lists its tags)", name, clip(tag), agent, name)
		}
		return err
	}
	return nil
}

// DeleteVersion removes a kept version of agent's template name other than its current one,
// the tags naming it, and its images when nothing else uses them. Errors: class conflict for
// the current version (remove the template, or build a new version first), one wrapping
// ErrNotFound when it is not kept, and those of Get.
func (s *Service) DeleteVersion(ctx context.Context, agent, name string, version int) error {
	versions, err := s.Versions(ctx, agent, name)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(versions, func(v Version) bool { return v.Version == version })
	switch {
	case i < 0:
		return fmt.Errorf("template %q keeps no version %d; it keeps %s: %w", name, version, keptList(versions), ErrNotFound)
	case versions[i].Current:
		return errclass.Newf(errclass.Conflict, "version %d is template %q's current version; remove the template, or build a new version first", version, name)
	}
	if err := s.store.DeleteTemplateVersion(ctx, agent, name, version); err != nil {
		return err
	}
	s.removeUnused(ctx, versions[i].Image, versions[i].LayerImage)
	return nil
}

// List returns agent's templates and the shared ones of other agents, with their tags.
func (s *Service) List(ctx context.Context, agent string) ([]Template, error) {
	list, err := s.store.ListTemplates(ctx, agent)
	if err != nil {
		return nil, err
	}
	for i, t := range list {
		tags, err := s.store.TemplateTags(ctx, t.Agent, t.Name)
		if err != nil {
			return nil, err
		}
		if t.Agent != agent {
			// Another agent's shared template: its shared versions' tags only, and not the
			// error of a build it made privately (its steps' output), as Resolve names none of
			// its private versions.
			if tags, err = s.sharedTags(ctx, t, tags); err != nil {
				return nil, err
			}
			list[i].Error = ""
		}
		if len(tags) > 0 {
			list[i].Tags = tags
		}
	}
	return list, nil
}

// sharedTags returns the tags of t (another agent's) that name one of its shared versions.
func (s *Service) sharedTags(ctx context.Context, t Template, tags map[string]int) (map[string]int, error) {
	if len(tags) == 0 {
		return nil, nil
	}
	versions, err := s.store.TemplateVersions(ctx, t.Agent, t.Name)
	if err != nil {
		return nil, err
	}
	shared := map[int]bool{}
	for _, v := range versions {
		shared[v.Version] = v.Shared
	}
	out := map[string]int{}
	for tag, v := range tags {
		if shared[v] {
			out[tag] = v
		}
	}
	return out, nil
}

// Delete removes agent's template name, its versions, and their images when no other template
// uses them; a template being built is of class conflict.
// Unless force, a template that saved code names is kept: an error of class conflict names
// agent's own code and counts other agents' (named to no one; counted only while the template
// is shared, since theirs cannot start it otherwise), whose runs and jobs' fires would fail.
func (s *Service) Delete(ctx context.Context, agent, name string, force bool) error {
	t, err := s.Get(ctx, agent, name)
	if err != nil {
		return err
	}
	s.mu.Lock()
	building := s.building[agent+"/"+name]
	s.mu.Unlock()
	if building {
		// Removed now, the build's end would store it again (a new user's DELETE answered 204
		// and the template came back ready minutes later).
		return errclass.Newf(errclass.Conflict, "template %q is being built; remove it once its build has ended", name)
	}
	if !force {
		users, err := s.store.CodeNamingTemplate(ctx, agent, name)
		if err != nil {
			return err
		}
		var own []string
		others := 0
		for _, u := range users {
			if code, ok := strings.CutPrefix(u, agent+"/"); ok {
				own = append(own, code)
			} else if t.Shared {
				others++
			}
		}
		if len(own) > 0 || others > 0 {
			return errclass.Newf(errclass.Conflict, "template %q is named by %s: their runs and their jobs' fires would fail; save them without it (or with another) first, or remove it anyway, forced (?force=true; sandpit template rm --force)",
				name, codeUsers(own, others))
		}
	}
	versions, err := s.store.TemplateVersions(ctx, agent, name)
	if err != nil {
		return err
	}
	if err := s.store.DeleteTemplate(ctx, agent, name); err != nil {
		return err
	}
	images := []string{t.Image, t.LayerImage}
	for _, v := range versions {
		images = append(images, v.Image, v.LayerImage)
	}
	s.removeUnused(ctx, images...)
	return nil
}

// codeUsers says which saved code names a template: the owner's own by name (the first 20),
// other agents' as a count.
func codeUsers(own []string, others int) string {
	var parts []string
	if len(own) > 0 {
		list := strings.Join(own[:min(len(own), 20)], ", ")
		if len(own) > 20 {
			list += fmt.Sprintf(" and %d more", len(own)-20)
		}
		parts = append(parts, "saved code "+list)
	}
	if others > 0 {
		parts = append(parts, fmt.Sprintf("%d saved code of other agents it is shared with", others))
	}
	return strings.Join(parts, ", and ")
}

// removeUnused removes the images no template uses.
func (s *Service) removeUnused(ctx context.Context, images ...string) {
	for _, img := range images {
		if img == "" {
			continue
		}
		if n, err := s.store.TemplateImageUsers(ctx, img); err != nil || n > 0 {
			continue
		}
		if err := s.removeImage(ctx, img); err != nil {
			s.log.Info("a template's image is removed once the sessions on it end and no build runs", "image", img, "error", err)
			s.mu.Lock()
			s.pending[img] = true
			s.mu.Unlock()
		}
	}
}

// errBuilding is removeImage's answer while a build runs.
var errBuilding = errors.New("a template build is under way")

// removeImage removes img from the engine unless a build runs (see Service.images).
func (s *Service) removeImage(ctx context.Context, img string) error {
	if !s.images.TryLock() {
		return errBuilding
	}
	defer s.images.Unlock()
	return s.engine.RemoveImage(ctx, img)
}

// sweep tries again, in the background, to remove the images whose removal failed or waited
// (see pending), when sweepEvery has passed since the last try or a build has ended: the
// template service has no clock of its own, so its callers' activity (a pool's filler
// resolves its template every few seconds) drives it.
func (s *Service) sweep(ctx context.Context) {
	s.mu.Lock()
	if len(s.pending) == 0 || s.sweeping || time.Since(s.swept) < sweepEvery {
		s.mu.Unlock()
		return
	}
	s.sweeping, s.swept = true, time.Now()
	images := slices.Collect(maps.Keys(s.pending))
	s.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		var done []string
		for _, img := range images {
			n, err := s.store.TemplateImageUsers(ctx, img)
			switch {
			case err != nil:
				continue
			case n > 0 || !s.present(ctx, img): // a template uses it again, or it is gone
				done = append(done, img)
			case s.removeImage(ctx, img) == nil:
				s.log.Info("a template's image was removed", "image", img)
				done = append(done, img)
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, img := range done {
			delete(s.pending, img)
		}
		s.sweeping = false
	}()
}

// Resolve returns the ready template ref names for agent, checking that the engine still has
// its image: ref is NAME (agent's own) or OWNER/NAME (another agent's, when shared). Errors:
// a *sandbox.FieldError of field "template" when there is no such template for agent or it is
// not ready, and one of class unavailable when its image was removed from the engine.
func (s *Service) Resolve(ctx context.Context, agent, ref string) (Template, error) {
	s.sweep(ctx)
	if agent == "" {
		agent = "default"
	}
	full, sel, _ := strings.Cut(ref, ":")
	owner, name, other := strings.Cut(full, "/")
	if !other {
		owner, name = agent, full
	}
	notFound := &sandbox.FieldError{Field: "template", Message: fmt.Sprintf("agent %q has no template %q it may use; GET /v1/agents/%s/templates lists them", agent, clip(full), agent)}
	if !ValidName(name) || !sandbox.ValidAgent(owner) {
		return Template{}, notFound
	}
	t, err := s.store.GetTemplate(ctx, owner, name)
	if errors.Is(err, ErrNotFound) || err == nil && owner != agent && !t.Shared {
		return Template{}, notFound
	}
	if err != nil {
		return Template{}, err
	}
	if sel != "" && sel != Latest {
		if t, err = s.version(ctx, t, sel, owner == agent); err != nil {
			return Template{}, err
		}
	}
	if t.Status != StatusReady {
		msg := fmt.Sprintf("template %q is %s, not ready: wait for its build to end (GET its template shows its status and log) and start it then", ref, t.Status)
		if t.Status != StatusBuilding {
			// The error's first line: its output is in the template's log, not in every
			// start's error.
			why, _, _ := strings.Cut(t.Error, "\n")
			msg = fmt.Sprintf("template %q is %s, not ready: %s (its log: GET /v1/agents/%s/templates/%s, or sandpit template show %s); build it again",
				ref, t.Status, why, owner, name, name)
		}
		return Template{}, &sandbox.FieldError{Field: "template", Message: msg}
	}
	if _, err := s.engine.ImageID(ctx, t.Image); err != nil {
		if errclass.Of(err) == errclass.NotFound {
			return Template{}, errclass.Newf(errclass.Unavailable, "the image %s of template %q is no longer in the engine (removed by hand?); build the template again (POST /v1/agents/%s/templates, or `sandpit template build %s --agent %s`)", t.Image, ref, owner, name, owner)
		}
		return Template{}, err
	}
	return t, nil
}

// Latest names a template's current version in a reference (NAME:latest is NAME).
const Latest = "latest"

// version returns t at the version sel names (a number, or a tag); another agent than the
// owner (own false) starts only a version built shared. Errors: a *sandbox.FieldError of field
// "template", naming the versions and tags t has to its owner only.
func (s *Service) version(ctx context.Context, t Template, sel string, own bool) (Template, error) {
	versions, err := s.store.TemplateVersions(ctx, t.Agent, t.Name)
	if err != nil {
		return Template{}, err
	}
	want, number := versionNumber(sel)
	for _, v := range versions {
		if (number && v.Version == want || !number && slices.Contains(v.Tags, sel)) && (own || v.Shared) {
			t.Version, t.Spec, t.Hash, t.Image, t.LayerImage, t.SizeBytes = v.Version, v.Spec, v.Hash, v.Image, v.LayerImage, v.SizeBytes
			t.Status, t.Error, t.Log = StatusReady, "", ""
			return t, nil
		}
	}
	if !own {
		return Template{}, &sandbox.FieldError{Field: "template", Message: fmt.Sprintf("template %s/%s has no version or tag %q shared with other agents; start %s/%s (its current version) or ask its owner",
			t.Agent, t.Name, clip(sel), t.Agent, t.Name)}
	}
	var tags []string
	for _, v := range versions {
		tags = append(tags, v.Tags...)
	}
	slices.Sort(tags)
	what := fmt.Sprintf("no tag %q", clip(sel))
	if number {
		what = fmt.Sprintf("no version %d", want)
	}
	have := keptList(versions)
	if len(tags) > 0 {
		have += " and the tags " + strings.Join(tags, ", ")
	}
	return Template{}, &sandbox.FieldError{Field: "template", Message: fmt.Sprintf("template %q keeps %s: it keeps %s (GET /v1/agents/%s/templates/%s/versions lists them)",
		t.Name, what, have, t.Agent, t.Name)}
}

// versionNumber reads sel as a version number: decimal digits without a leading zero or a
// sign ("04" and "+4" are no version, nor a tag: CheckTag refuses all digits).
func versionNumber(sel string) (int, bool) {
	if sel == "" || len(sel) > 9 || sel[0] == '0' || strings.Trim(sel, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(sel)
	return n, err == nil
}

// clip shortens what a caller gave, for a message: at most 100 bytes, then "…".
func clip(s string) string {
	if len(s) <= 100 {
		return s
	}
	return strings.ToValidUTF8(s[:100], "") + "…"
}

// stepWriter follows a build's output: it maps the builder's "Step n/m" lines to the spec's
// steps, emits them, and keeps the whole log (its last 64 KiB) and the current step's output
// (its last 8 KiB).
type stepWriter struct {
	plan       Plan
	emit       func(Event)
	steps      int
	step       int
	label      string
	partial    []byte
	log        tailBuffer
	stepOutput tailBuffer
	// instruction is the number (from 1) of the Dockerfile's last instruction the builder
	// started.
	instruction int
	// abort ends the build (errPlanMismatch): the builder counts other instructions than the
	// plan, so it reads the Dockerfile otherwise than the checks did.
	abort func(error)
}

// errPlanMismatch ends a build whose builder reads its Dockerfile otherwise than the plan.
var errPlanMismatch = errors.New("the engine's builder reads this Dockerfile otherwise than sandpit does (another number of instructions); simplify it (no heredocs, no parser tricks)")

// maxLineBytes caps one line of a build's output: the rest of a longer line is left out (a
// step's output is the agent's, and a line is held whole until it ends).
const maxLineBytes = 16 << 10

var builderStep = regexp.MustCompile(`^Step (\d+)/(\d+) :`)

// ansiEscape matches a terminal's escape sequences (CSI, such as colours, and OSC), which apt
// and pip print even into a pipe and which mean nothing in a log read as text.
var ansiEscape = regexp.MustCompile(`\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])`)

func (w *stepWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if room := maxLineBytes - len(w.partial); room > 0 {
				w.partial = append(w.partial, p[:min(room, len(p))]...)
			}
			break
		}
		if room := maxLineBytes - len(w.partial); room > 0 {
			w.partial = append(w.partial, p[:min(room, i)]...)
		}
		w.line(string(w.partial))
		w.partial, p = w.partial[:0], p[i+1:]
	}
	return n, nil
}

func (w *stepWriter) flush() {
	if len(w.partial) > 0 {
		w.line(string(w.partial))
		w.partial = nil
	}
}

// line takes one line of the build's output. The builder's "Step N/M :" lines move the
// progress on, but only to the next instruction of this plan: a step's own output may print
// such a line too (the agent writes it), and must neither move the progress elsewhere nor
// name an instruction that is not there.
func (w *stepWriter) line(l string) {
	if m := builderStep.FindStringSubmatch(l); m != nil && w.step <= len(w.plan.Steps) {
		n, _ := strconv.Atoi(m[1])
		total, _ := strconv.Atoi(m[2])
		if n == 1 && w.instruction == 0 && total != len(w.plan.StepOf) && w.abort != nil {
			w.abort(errPlanMismatch)
		}
		if n == w.instruction+1 && total == len(w.plan.StepOf) {
			w.instruction = n
			if i := w.plan.StepOf[n-1]; i >= 0 && i+1 != w.step {
				w.enter(i+1, w.plan.Steps[i])
			}
		}
	}
	l = ansiEscape.ReplaceAllString(l, "")
	w.log.add(l)
	w.stepOutput.add(l)
	w.emit(Event{Type: "log", Step: w.step, Line: l})
}

// enter starts step (1-based) labelled label.
func (w *stepWriter) enter(step int, label string) {
	w.step, w.label = step, label
	w.stepOutput = tailBuffer{max: 8 << 10}
	w.emit(Event{Type: "step", Step: step, Steps: w.steps, Label: label})
}

// tailBuffer keeps the last max bytes (64 KiB when max is 0) of the lines added.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) add(line string) {
	limit := t.max
	if limit == 0 {
		limit = 64 << 10
	}
	t.b = append(t.b, line...)
	t.b = append(t.b, '\n')
	if len(t.b) > limit {
		t.b = t.b[len(t.b)-limit:]
	}
}

func (t *tailBuffer) String() string { return string(t.b) }

// Is makes a failed build of class invalid: the spec did not build.
func (e *BuildError) Is(target error) bool { return target == errclass.Invalid }

// dockerfileImages checks that the engine has every image df builds from (it never pulls
// one: a pull would reach a registry from the host's network). Errors: a *sandbox.FieldError
// of spec.dockerfile (DockerfileImages', or an image the engine lacks), the engine's.
func (s *Service) dockerfileImages(ctx context.Context, df string) error {
	images, err := DockerfileImages(df)
	if err != nil {
		return err
	}
	for _, img := range images {
		if err := s.notOwnImage("spec.dockerfile", img); err != nil {
			return err
		}
		if _, err := s.engine.ImageID(ctx, img); err != nil {
			if errclass.Of(err) == errclass.NotFound {
				return &sandbox.FieldError{Field: "spec.dockerfile", Message: fmt.Sprintf("it builds from the image %q, which the engine does not have; a build never pulls one: name an image it has (`docker images`)", img)}
			}
			return err
		}
	}
	return nil
}

// sameSpec reports whether a and b are the same spec (as JSON: an empty map or list is none).
func sameSpec(a, b Spec) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}
