package e2b

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/template"
)

// Templates builds and keeps the agents' templates (*template.Service): E2B's template
// builder (the SDKs' Template.build) is translated into a template spec and built by it.
type Templates interface {
	// Build builds req; emit receives its progress. A failed build is a *template.BuildError.
	Build(ctx context.Context, req template.BuildRequest, emit func(template.Event)) (template.Template, error)
	// Get, List and Delete are the agent's templates (Get's error wraps template.ErrNotFound).
	Get(ctx context.Context, agent, name string) (template.Template, error)
	List(ctx context.Context, agent string) ([]template.Template, error)
	Delete(ctx context.Context, agent, name string, force bool) error
	// Versions, Tag and Untag are a template's kept versions and their tags (template.Service).
	Versions(ctx context.Context, agent, name string) ([]template.Version, error)
	Tag(ctx context.Context, agent, name, tag string, version int) error
	Untag(ctx context.Context, agent, name, tag string) error
}

// defaultTag is E2B's name for a template's current build (NAME is NAME:default), sandpit's
// "latest".
const defaultTag = "default"

// currentTag reports whether tag names a template's current version.
func currentTag(tag string) bool { return tag == "" || tag == defaultTag || tag == template.Latest }

// SetTemplates serves E2B's template API from t; without it (a runtime with no templates)
// the template routes answer 501.
func (s *Server) SetTemplates(t Templates) {
	s.mu.Lock()
	s.templates = t
	s.mu.Unlock()
}

// Bounds of E2B template builds: the build records kept (in memory: a build's status is asked
// while it runs and just after), the uploaded file archives kept, and one archive's size. An
// agent holds at most a quarter of the records and of the archives' bytes, and what one agent
// sends never drops another agent's record or archive younger than keepIdle (red team: the
// pools were shared, so one agent's requests evicted another's build, whose start then
// answered 404, or its upload, "not uploaded").
const (
	maxBuildRecords   = 256 // every agent's together
	agentBuildRecords = maxBuildRecords / 4
	maxUploadBytes    = 64 << 20 // every agent's archives together
	agentUploadBytes  = maxUploadBytes / 4
	keepIdle          = time.Hour // a record since it ended (or was requested, never started); an archive since its last use
	maxArchiveBytes   = template.MaxSpecBytes
	maxUnpackedBytes  = 2 * maxArchiveBytes // an archive's tar stream, headers and content, unpacked
	uploadLinkTimeout = time.Hour
	maxStatusEntries  = 100 // E2B's limit on the log entries of one status answer
	maxBuildEntries   = 10_000
	maxBuildLogBytes  = 1 << 20 // one build's entries' messages together (256 records: 256 MiB at most)
	maxArchiveEntries = 4096    // files and directories of one archive
	maxUploadLinks    = 256     // an agent's upload links not used yet
)

// The step names E2B's SDKs map to their stack traces (BASE_STEP_NAME, FINALIZE_STEP_NAME).
const (
	baseStep     = "base"
	finalizeStep = "finalize"
)

// templateBuild is one build of E2B's flow: requested (POST /v3/templates), started (POST
// /v2/templates/{id}/builds/{buildID}), then building until ready or error.
type templateBuild struct {
	id, agent, name string
	tags            []string
	created         time.Time
	// noCache: the build or a step asked for force (the SDK's skip_cache): every step is
	// built again.
	noCache bool

	// guarded by templateState.mu
	status   string // waiting, building, ready, error
	entries  []buildLogEntry
	bytes    int // of the entries' messages
	reason   *buildReason
	finished time.Time
}

type buildLogEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Message   string    `json:"message"`
	Level     string    `json:"level"`
	Step      string    `json:"step,omitempty"`
}

type buildReason struct {
	Message    string          `json:"message"`
	Step       string          `json:"step,omitempty"`
	LogEntries []buildLogEntry `json:"logEntries"`
}

// archive is an uploaded file archive (a COPY step's files), by agent and files hash.
type archive struct {
	agent string
	data  []byte
	used  time.Time // uploaded, found present, or read by a build
}

// uploadLink is an upload URL handed out and not used yet.
type uploadLink struct {
	agent, hash string
	expires     time.Time
}

// templateState is the server's E2B template builds: records, archives and upload links.
type templateState struct {
	mu       sync.Mutex
	builds   map[string]*templateBuild // by build ID
	archives map[string]archive        // by agent + "/" + hash
	links    map[string]uploadLink     // by token
	ctx      context.Context           // the builds' (ended by Close)
	cancel   context.CancelFunc
	running  sync.WaitGroup
}

func newTemplateState() *templateState {
	ctx, cancel := context.WithCancel(context.Background())
	return &templateState{builds: map[string]*templateBuild{}, archives: map[string]archive{}, links: map[string]uploadLink{}, ctx: ctx, cancel: cancel}
}

// close ends the builds under way and waits for them.
func (t *templateState) close() {
	t.cancel()
	t.running.Wait()
}

// templateRoutes adds E2B's template API (spec/openapi.yml, the "templates" tag) to mux.
func (s *Server) templateRoutes(mux *http.ServeMux, authed func(func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc) {
	with := func(h func(http.ResponseWriter, *http.Request, string, Templates)) http.HandlerFunc {
		return authed(func(w http.ResponseWriter, r *http.Request, agent string) {
			s.mu.Lock()
			t := s.templates
			s.mu.Unlock()
			if t == nil {
				writeError(w, http.StatusNotImplemented, "this daemon builds no templates: on runtime kubernetes, its configuration needs kubernetes.template_registry or kubernetes.template_import_command")
				return
			}
			h(w, r, agent, t)
		})
	}
	mux.HandleFunc("POST /v3/templates", with(s.requestBuild))
	mux.HandleFunc("POST /v2/templates/{id}/builds/{build}", with(s.startBuild))
	mux.HandleFunc("GET /templates/{id}/builds/{build}/status", with(s.buildStatus))
	mux.HandleFunc("GET /templates/{id}/files/{hash}", with(s.uploadLink))
	mux.HandleFunc("PUT /templates/{id}/files/{hash}", s.uploadArchive) // the link's token is its key
	mux.HandleFunc("GET /templates", with(s.listTemplates))
	mux.HandleFunc("GET /templates/{id}", with(s.getTemplate))
	mux.HandleFunc("DELETE /templates/{id}", with(s.deleteTemplate))
	// GET /templates/aliases/{alias} and GET /templates/{templateID}/tags overlap as patterns
	// (a template named "aliases"): one route serves both, the alias first, as E2B's API does.
	mux.HandleFunc("GET /templates/{id}/{sub}", with(func(w http.ResponseWriter, r *http.Request, agent string, t Templates) {
		switch {
		case r.PathValue("id") == "aliases":
			s.templateAlias(w, r, r.PathValue("sub"), agent, t)
		case r.PathValue("sub") == "tags":
			s.templateTags(w, r, agent, t)
		default:
			unsupported(otherTemplateRoutes)(w, r)
		}
	}))
	mux.HandleFunc("POST /templates/tags", with(s.assignTags))
	mux.HandleFunc("DELETE /templates/tags", with(s.deleteTags))
	// The rest: the deprecated first API, updates, logs apart from the status.
	other := unsupported(otherTemplateRoutes)
	for _, p := range []string{"/templates/", "/v2/templates/", "POST /templates", "POST /v2/templates"} {
		mux.Handle(p, authed(func(w http.ResponseWriter, r *http.Request, _ string) { other(w, r) }))
	}
}

// otherTemplateRoutes are E2B's template routes sandpit does not serve.
const otherTemplateRoutes = "template routes other than build, status, files, list, get, delete, aliases and tags (updates, the first API)"

// templateName splits E2B's "name[:tag]" into sandpit's template name and the tag.
func (s *Server) templateName(field, ref string) (name, tag string, err error) {
	name, tag, _ = strings.Cut(ref, ":")
	if name == "" {
		return "", "", fmt.Errorf("%s is empty: name the template (Template.build(template, \"my-env\"))", field)
	}
	if !template.ValidName(name) {
		return "", "", fmt.Errorf("%s %q is not a sandpit template name: use 1 to 63 lowercase letters, digits, '_', '.' or '-', starting with a letter or digit", field, name)
	}
	if slices.Contains(s.cfg.Templates, name) {
		return "", "", fmt.Errorf("%s %q is one of the daemon's own templates (e2b_templates: %s); choose another name", field, name, strings.Join(s.cfg.Templates, ", "))
	}
	return name, tag, nil
}

// requestBuild is POST /v3/templates: a build is recorded, to be started by startBuild.
func (s *Server) requestBuild(w http.ResponseWriter, r *http.Request, agent string, _ Templates) {
	var req struct {
		Name  string   `json:"name"`
		Alias string   `json:"alias"`
		Tags  []string `json:"tags"`
	}
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	field, ref := "name", req.Name
	if ref == "" {
		field, ref = "alias", req.Alias
	}
	name, tag, err := s.templateName(field, ref)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	tags := []string{}
	for _, t := range append(slices.Clone(req.Tags), tag) {
		if t != "" && !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
		if len(tags) > maxRequestTags {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("tags has more than %d tags; a template has at most %d", maxRequestTags, maxRequestTags))
			return
		}
	}
	for _, tag := range tags {
		if currentTag(tag) {
			continue
		}
		if err := template.CheckTag("tags", tag); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	b := &templateBuild{id: uuid.NewString(), agent: agent, name: name, tags: tags, created: time.Now().UTC(), status: "waiting"}
	ts := s.tmpl
	ts.mu.Lock()
	err = ts.roomForBuildLocked(agent, time.Now())
	if err == nil {
		ts.builds[b.id] = b
	}
	ts.mu.Unlock()
	if err != nil {
		writeError(w, http.StatusTooManyRequests, err.Error())
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"templateID": name, "buildID": b.id, "public": false,
		"aliases": []string{name}, "names": []string{name}, "tags": tags})
}

// roomForBuildLocked makes room for one more build record of agent's, or says why there is
// none. Records idle (ended, or requested and never started) for keepIdle go first; past the
// agent's share, its own oldest idle record; another agent's younger records stay.
func (t *templateState) roomForBuildLocked(agent string, now time.Time) error {
	mine := 0
	var oldest *templateBuild
	for id, b := range t.builds {
		if b.status == "building" {
			if b.agent == agent {
				mine++
			}
			continue
		}
		since := b.created
		if !b.finished.IsZero() {
			since = b.finished
		}
		if now.Sub(since) >= keepIdle {
			delete(t.builds, id)
			continue
		}
		if b.agent == agent {
			mine++
			if oldest == nil || b.created.Before(oldest.created) {
				oldest = b
			}
		}
	}
	if mine >= agentBuildRecords {
		if oldest == nil {
			return fmt.Errorf("this API key's agent has %d template builds under way, the most it may; wait until one ends", mine)
		}
		delete(t.builds, oldest.id)
	}
	if len(t.builds) >= maxBuildRecords {
		return fmt.Errorf("the daemon holds %d template build records of its agents, the most it keeps (each until an hour after it ended, or was requested if never started); try again later", len(t.builds))
	}
	return nil
}

// buildFor returns the agent's build the request's path names, or answers why not.
func (s *Server) buildFor(w http.ResponseWriter, r *http.Request, agent string) *templateBuild {
	ts := s.tmpl
	ts.mu.Lock()
	b := ts.builds[r.PathValue("build")]
	ts.mu.Unlock()
	if b == nil || b.agent != agent || b.name != r.PathValue("id") {
		writeError(w, http.StatusNotFound, fmt.Sprintf("build %s of template %s is not one this API key's agent requested (POST /v3/templates), or the daemon restarted since", r.PathValue("build"), r.PathValue("id")))
		return nil
	}
	return b
}

// buildStart is E2B's TemplateBuildStartV2.
type buildStart struct {
	FromImage         string         `json:"fromImage"`
	FromTemplate      string         `json:"fromTemplate"`
	FromImageRegistry map[string]any `json:"fromImageRegistry"`
	Force             bool           `json:"force"`
	Steps             []buildStep    `json:"steps"`
	StartCmd          string         `json:"startCmd"`
	ReadyCmd          string         `json:"readyCmd"`
}

// buildStep is E2B's TemplateStep.
type buildStep struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	FilesHash string   `json:"filesHash"`
	Force     bool     `json:"force"`
}

// startBuild is POST /v2/templates/{id}/builds/{build}: the steps become a template spec,
// built in the background; the SDK follows it with buildStatus.
func (s *Server) startBuild(w http.ResponseWriter, r *http.Request, agent string, t Templates) {
	b := s.buildFor(w, r, agent)
	if b == nil {
		return
	}
	var req buildStart
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "the request body is not E2B's TemplateBuildStartV2: "+err.Error())
		return
	}
	spec, origin, notes, err := s.templateSpec(agent, req)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := template.Validate(spec); err != nil {
		writeError(w, http.StatusBadRequest, "the template's steps are not a template sandpit builds: "+err.Error())
		return
	}
	ts := s.tmpl
	ts.mu.Lock()
	if b.status != "waiting" {
		ts.mu.Unlock()
		writeError(w, http.StatusConflict, fmt.Sprintf("build %s was started already (it is %s); request a new build with POST /v3/templates", b.id, b.status))
		return
	}
	b.status = "building"
	b.noCache = req.Force || slices.ContainsFunc(req.Steps, func(st buildStep) bool { return st.Force })
	now := time.Now().UTC()
	for _, n := range notes {
		b.entries = append(b.entries, buildLogEntry{Timestamp: now, Level: "warn", Message: n})
	}
	ts.running.Add(1)
	ts.mu.Unlock()
	go func() {
		defer ts.running.Done()
		s.runBuild(ts.ctx, t, b, spec, origin)
	}()
	w.WriteHeader(http.StatusAccepted)
}

// build runs t.Build in a build's own goroutine, where no HTTP server's recovery stands: a
// panic (a fault of sandpit's, such as one an agent's build output once set off) fails the
// build, logged with its stack, instead of ending the daemon. The version built then gets
// tags (E2B's build tags; "default" is the current version already).
func (s *Server) build(ctx context.Context, t Templates, req template.BuildRequest, tags []string, emit func(template.Event)) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("a template build panicked", "agent", req.Agent, "template", req.Name, "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("sandpit failed while building (a fault of the daemon's, in its log): %v", r)
		}
	}()
	built, err := t.Build(ctx, req, emit)
	if err != nil {
		return err
	}
	for _, tag := range tags {
		if currentTag(tag) {
			continue
		}
		if err := t.Tag(ctx, req.Agent, req.Name, tag, built.Version); err != nil {
			return fmt.Errorf("version %d was built, but its tag %q was not given: %w", built.Version, tag, err)
		}
	}
	return nil
}

// runBuild builds spec as b, recording its progress as E2B's log entries; origin maps each of
// the spec's steps to the E2B step it came from.
func (s *Server) runBuild(ctx context.Context, t Templates, b *templateBuild, spec template.Spec, origin []int) {
	ts := s.tmpl
	stepName := func(step, steps int) string {
		switch {
		case step <= 0:
			return baseStep
		case step > len(origin) || step > steps && steps > 0:
			return finalizeStep
		default:
			return strconv.Itoa(origin[step-1])
		}
	}
	add := func(e buildLogEntry) {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		switch n := len(b.entries); {
		case b.bytes < 0: // the cap was said
		case n < maxBuildEntries-1 && b.bytes+len(e.Message) <= maxBuildLogBytes:
			b.entries = append(b.entries, e)
			b.bytes += len(e.Message)
		default:
			b.entries = append(b.entries, buildLogEntry{Timestamp: e.Timestamp, Level: "warn", Step: e.Step,
				Message: fmt.Sprintf("the build's log passed %d entries or %d bytes; the rest is left out (the template's own log keeps its end: GET /v1/agents/{agent}/templates/{name})", maxBuildEntries, maxBuildLogBytes)})
			b.bytes = -1
		}
	}
	err := s.build(ctx, t, template.BuildRequest{Agent: b.agent, Name: b.name, Spec: spec, NoCache: b.noCache}, b.tags, func(ev template.Event) {
		now := time.Now().UTC()
		switch ev.Type {
		case "step":
			add(buildLogEntry{Timestamp: now, Level: "info", Step: stepName(ev.Step, ev.Steps), Message: fmt.Sprintf("[%d/%d] %s", ev.Step, ev.Steps, ev.Label)})
		case "log":
			add(buildLogEntry{Timestamp: now, Level: "info", Step: stepName(ev.Step, 0), Message: ev.Line})
		case "done":
			msg := "Template built"
			if ev.Cached {
				msg = "Template built (cached: its own layer, the same steps, was built before)"
			}
			add(buildLogEntry{Timestamp: now, Level: "info", Step: finalizeStep, Message: msg})
		}
	})
	ts.mu.Lock()
	defer ts.mu.Unlock()
	b.finished = time.Now().UTC()
	if err == nil {
		b.status = "ready"
		return
	}
	b.status = "error"
	reason := &buildReason{Message: err.Error(), Step: baseStep}
	if berr, ok := errors.AsType[*template.BuildError](err); ok {
		reason.Step = stepName(berr.Step, len(spec.Steps)+1)
	}
	if fe, ok := errors.AsType[*sandbox.FieldError](err); ok {
		reason.Message = fe.Message
	}
	entry := buildLogEntry{Timestamp: b.finished, Level: "error", Step: reason.Step, Message: reason.Message}
	reason.LogEntries = []buildLogEntry{entry}
	b.entries = append(b.entries, entry)
	b.reason = reason
	s.log.Info("e2b template build failed", "agent", b.agent, "template", b.name, "build", b.id, "error", err)
}

// buildStatus is GET /templates/{id}/builds/{build}/status: the status and the log entries
// from logsOffset (at most limit, 100).
func (s *Server) buildStatus(w http.ResponseWriter, r *http.Request, agent string, _ Templates) {
	b := s.buildFor(w, r, agent)
	if b == nil {
		return
	}
	q := r.URL.Query()
	offset, limit := 0, maxStatusEntries
	for _, p := range []struct {
		name string
		v    *int
	}{{"logsOffset", &offset}, {"limit", &limit}} {
		if v := q.Get(p.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("%s %q is not a whole number of at least 0", p.name, v))
				return
			}
			*p.v = n
		}
	}
	limit = min(limit, maxStatusEntries)
	level := q.Get("level")
	ts := s.tmpl
	ts.mu.Lock()
	var entries []buildLogEntry
	for _, e := range b.entries {
		if level == "" || levelAtLeast(e.Level, level) {
			entries = append(entries, e)
		}
	}
	entries = append([]buildLogEntry{}, entries[min(offset, len(entries)):]...) // [] when none, as E2B's schema has it
	entries = entries[:min(limit, len(entries))]
	status, reason := b.status, b.reason
	ts.mu.Unlock()
	logs := make([]string, len(entries))
	for i, e := range entries {
		logs[i] = e.Message
	}
	body := map[string]any{"templateID": b.name, "buildID": b.id, "status": status, "logs": logs, "logEntries": entries}
	if reason != nil {
		body["reason"] = reason
	}
	writeJSON(w, http.StatusOK, body)
}

var logLevels = []string{"debug", "info", "warn", "error"}

// levelAtLeast reports whether level is min or above (E2B's LogLevel order).
func levelAtLeast(level, min string) bool {
	return slices.Index(logLevels, level) >= slices.Index(logLevels, min)
}

var filesHashPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// uploadLink is GET /templates/{id}/files/{hash}: whether the daemon has the archive of that
// hash, and a URL of the daemon's own to PUT it to, valid for an hour and once.
func (s *Server) uploadLink(w http.ResponseWriter, r *http.Request, agent string, _ Templates) {
	hash := r.PathValue("hash")
	if !filesHashPattern.MatchString(hash) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("files hash %q is not a hash: 1 to 128 letters, digits, '_' or '-'", hash))
		return
	}
	token := newToken()
	ts := s.tmpl
	ts.mu.Lock()
	now := time.Now()
	_, present := ts.useArchiveLocked(agent, hash, now) // kept for the build that follows
	for k, l := range ts.links {
		if now.After(l.expires) {
			delete(ts.links, k)
		}
	}
	mine := 0
	for _, l := range ts.links {
		if l.agent == agent {
			mine++
		}
	}
	if mine >= maxUploadLinks {
		ts.mu.Unlock()
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("this API key's agent has %d upload links not used yet, the most it may; use them, or wait until they expire (an hour after they were made)", mine))
		return
	}
	ts.links[token] = uploadLink{agent: agent, hash: hash, expires: now.Add(uploadLinkTimeout)}
	ts.mu.Unlock()
	u := externalBase(r) + "/templates/" + url.PathEscape(r.PathValue("id")) + "/files/" + hash + "?upload_token=" + token
	writeJSON(w, http.StatusCreated, map[string]any{"present": present, "url": u})
}

// externalBase is the URL the client reached this API at, without the route: the scheme, the
// Host header and the mount prefix (the request's path less the routed one).
func externalBase(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	raw, _, _ := strings.Cut(r.RequestURI, "?")
	prefix := strings.TrimSuffix(raw, r.URL.EscapedPath())
	return scheme + "://" + r.Host + prefix
}

// uploadArchive is the PUT to an upload link: the archive (tar, gzipped or not) of a COPY
// step's files, at most maxArchiveBytes.
func (s *Server) uploadArchive(w http.ResponseWriter, r *http.Request) {
	ts := s.tmpl
	token := r.URL.Query().Get("upload_token")
	ts.mu.Lock()
	l, ok := ts.links[token]
	if ok {
		delete(ts.links, token)
	}
	ts.mu.Unlock()
	if !ok || time.Now().After(l.expires) || l.hash != r.PathValue("hash") {
		writeError(w, http.StatusForbidden, "the upload link is not valid: it was used already, has expired (after an hour) or names another files hash; ask for a new one (GET /templates/{templateID}/files/{hash})")
		return
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxArchiveBytes+1))
	if err != nil || len(data) > maxArchiveBytes {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the archive is larger than %d bytes, the most a template's files may hold", maxArchiveBytes))
		return
	}
	if _, err := readArchive(data); err != nil {
		writeError(w, http.StatusBadRequest, "the upload is not a tar archive (gzipped or not) of regular files and directories: "+err.Error())
		return
	}
	ts.mu.Lock()
	err = ts.storeArchiveLocked(l.agent, l.hash, data, time.Now())
	ts.mu.Unlock()
	if err != nil {
		writeError(w, http.StatusTooManyRequests, err.Error())
		return
	}
	w.WriteHeader(http.StatusOK)
}

// useArchiveLocked returns agent's archive of hash, marked used at now, and whether there is
// one.
func (t *templateState) useArchiveLocked(agent, hash string, now time.Time) (archive, bool) {
	a, ok := t.archives[agent+"/"+hash]
	if ok {
		a.used = now
		t.archives[agent+"/"+hash] = a
	}
	return a, ok
}

// storeArchiveLocked keeps data as agent's archive of hash, or says why it cannot. Archives
// not used for keepIdle go first; past the agent's share of the bytes, its own least recently
// used; another agent's archives used within keepIdle stay.
func (t *templateState) storeArchiveLocked(agent, hash string, data []byte, now time.Time) error {
	key := agent + "/" + hash
	total, mine := len(data), len(data)
	for k, a := range t.archives {
		if k == key {
			continue // replaced
		}
		if now.Sub(a.used) >= keepIdle {
			delete(t.archives, k)
			continue
		}
		total += len(a.data)
		if a.agent == agent {
			mine += len(a.data)
		}
	}
	for mine > agentUploadBytes {
		oldest := ""
		for k, a := range t.archives {
			if a.agent == agent && k != key && (oldest == "" || a.used.Before(t.archives[oldest].used)) {
				oldest = k
			}
		}
		mine -= len(t.archives[oldest].data)
		total -= len(t.archives[oldest].data)
		delete(t.archives, oldest)
	}
	if total > maxUploadBytes {
		return fmt.Errorf("the daemon holds %d MiB of its agents' template files, the most it keeps (each until an hour after its last use); try again later", (total-len(data))>>20)
	}
	t.archives[key] = archive{agent: agent, data: data, used: now}
	return nil
}

// archiveFile is a regular file of an archive: its path (relative, slash-separated), mode and
// content.
type archiveFile struct {
	name    string
	mode    int64
	content []byte
}

// readArchive reads a tar archive, gzipped or not, of regular files and directories (at most
// maxArchiveBytes of content in all); its files in order.
func readArchive(data []byte) ([]archiveFile, error) {
	var in io.Reader = bytes.NewReader(data)
	if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b {
		zr, err := gzip.NewReader(in)
		if err != nil {
			return nil, err
		}
		in = zr
	}
	// Bounded as it unpacks: the entry and content caps below count no header, and a
	// gzipped archive of PAX headers (which the tar reader reads without counting them as
	// entries) unpacked 500 MB from 520 KB (red team).
	tr := tar.NewReader(&boundedReader{r: in, left: maxUnpackedBytes})
	var files []archiveFile
	total := int64(0)
	for entries := 0; ; entries++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if entries >= maxArchiveEntries {
			return nil, fmt.Errorf("it holds more than %d entries", maxArchiveEntries)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return nil, fmt.Errorf("%q is outside the build's context", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg:
		default:
			return nil, fmt.Errorf("%q is not a regular file or directory (a symlink? build with resolve_symlinks)", h.Name)
		}
		if len(files) == template.MaxSteps {
			return nil, fmt.Errorf("it holds more than %d files, the most steps a template has (each file is one)", template.MaxSteps)
		}
		total += h.Size
		if total > maxArchiveBytes {
			return nil, fmt.Errorf("its files hold more than %d bytes", maxArchiveBytes)
		}
		content, err := io.ReadAll(io.LimitReader(tr, h.Size))
		if err != nil {
			return nil, err
		}
		files = append(files, archiveFile{name: name, mode: h.Mode & 0o777, content: content})
	}
}

// boundedReader reads r until left bytes are read, then fails with errUnpacked.
type boundedReader struct {
	r    io.Reader
	left int64
}

var errUnpacked = fmt.Errorf("it unpacks to more than %d bytes (its files and their tar headers)", maxUnpackedBytes)

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errUnpacked
	}
	p = p[:min(int64(len(p)), b.left)]
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// e2bBaseImages are E2B's own base images, which stand for sandpit's default base (the SDKs'
// Template() starts from e2bdev/base).
var e2bBaseImages = []string{"e2bdev/base", "e2bdev/code-interpreter"}

// templateSpec translates E2B's build into sandpit's template spec. origin maps each spec step
// (0-based) to its E2B step's number (1-based, as the SDKs count their stack traces); notes
// are what the translation left out, for the build's log. The error names the E2B step.
func (s *Server) templateSpec(agent string, req buildStart) (spec template.Spec, origin []int, notes []string, err error) {
	switch {
	case req.FromImageRegistry != nil:
		return spec, nil, nil, errors.New("fromImageRegistry: sandpit pulls no image from a registry; load the image into the daemon's Docker engine (docker load) and name it in from_image")
	case req.FromTemplate != "":
		if !slices.Contains(s.cfg.Templates, req.FromTemplate) {
			name, _, _ := strings.Cut(req.FromTemplate, ":")
			spec.Base = "template:" + name
		}
	case req.FromImage != "":
		repo, _, _ := strings.Cut(req.FromImage, ":")
		if !slices.Contains(e2bBaseImages, repo) {
			spec.Base = req.FromImage
		}
	}
	workdir := "/"
	content := 0 // the COPY steps' files' bytes so far
	for i, st := range req.Steps {
		// Checked as the steps are made, not after: each COPY step unpacks its archive, and a
		// build of 300 COPY steps of one 8 MiB archive took the daemon's memory to 3.5 GiB
		// before its step count was refused (red team).
		if len(spec.Steps) > template.MaxSteps {
			break
		}
		n := i + 1
		stepErr := func(format string, args ...any) error {
			return fmt.Errorf("step %d (%s %s): %s", n, st.Type, strings.Join(st.Args, " "), fmt.Sprintf(format, args...))
		}
		switch st.Type {
		case "RUN":
			if len(st.Args) == 0 || strings.TrimSpace(st.Args[0]) == "" {
				return spec, nil, nil, stepErr("has no command")
			}
			spec.Steps = append(spec.Steps, template.Step{Run: st.Args[0]})
			origin = append(origin, n)
		case "ENV":
			if len(st.Args)%2 != 0 {
				return spec, nil, nil, stepErr("has an odd number of arguments; give name, value pairs")
			}
			if spec.Env == nil {
				spec.Env = map[string]string{}
			}
			for j := 0; j < len(st.Args); j += 2 {
				spec.Env[st.Args[j]] = st.Args[j+1]
			}
		case "WORKDIR":
			if len(st.Args) != 1 {
				return spec, nil, nil, stepErr("needs one directory")
			}
			workdir = st.Args[0]
			if !path.IsAbs(workdir) {
				workdir = path.Join(spec.Workdir, workdir)
				if !path.IsAbs(workdir) {
					workdir = "/" + workdir
				}
			}
			spec.Workdir = workdir
		case "USER":
			notes = append(notes, fmt.Sprintf("step %d (USER %s): build steps run as root and the sandbox's code as sandpit's own unprivileged user, whatever the template says", n, strings.Join(st.Args, " ")))
		case "COPY":
			files, err := s.copyStep(agent, st, workdir)
			if err != nil {
				return spec, nil, nil, stepErr("%v", err)
			}
			for _, f := range files {
				spec.Steps = append(spec.Steps, template.Step{File: f})
				origin = append(origin, n)
				content += len(f.Content)
			}
			if content > template.MaxSpecBytes {
				return spec, nil, nil, stepErr("the COPY steps' files hold more than %d bytes together, the most a template's files may", template.MaxSpecBytes)
			}
		default:
			return spec, nil, nil, stepErr("%q is not a builder step sandpit runs (it runs RUN, COPY, ENV, WORKDIR and USER)", st.Type)
		}
	}
	if len(spec.Steps) > template.MaxSteps {
		return spec, nil, nil, fmt.Errorf("the template has %d steps, its COPY steps' files counted one each; sandpit's templates take at most %d", len(spec.Steps), template.MaxSteps)
	}
	switch {
	case req.StartCmd != "":
		spec.Start = &template.Start{Cmd: req.StartCmd, Ready: req.ReadyCmd}
	case req.ReadyCmd != "":
		notes = append(notes, "readyCmd without startCmd: there is nothing to wait for, so it is not run")
	}
	return spec, origin, notes, nil
}

// copyStep is a COPY step's files (args: source, destination, user, mode) from the archive
// uploaded for its filesHash: a file that is the source goes to the destination (into it when
// that ends in '/'), the files under a source directory or matched by a pattern keep their
// path below it.
func (s *Server) copyStep(agent string, st buildStep, workdir string) ([]*template.File, error) {
	if len(st.Args) < 2 {
		return nil, errors.New("needs a source and a destination")
	}
	src, dest := path.Clean(strings.TrimPrefix(st.Args[0], "./")), st.Args[1]
	if !path.IsAbs(dest) {
		into := strings.HasSuffix(dest, "/")
		dest = path.Join(workdir, dest)
		if into {
			dest += "/"
		}
	}
	mode := ""
	if len(st.Args) > 3 && st.Args[3] != "" {
		mode = st.Args[3]
		if len(mode) > 4 {
			mode = mode[len(mode)-4:]
		}
	}
	s.tmpl.mu.Lock()
	a, ok := s.tmpl.useArchiveLocked(agent, st.FilesHash, time.Now())
	s.tmpl.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("its files (hash %q) were not uploaded, or the daemon restarted since; build again", st.FilesHash)
	}
	files, err := readArchive(a.data)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, errors.New("its archive holds no file")
	}
	// The part of the source before any pattern is the directory the files keep their paths
	// below.
	root := src
	if i := strings.IndexAny(src, "*?["); i >= 0 {
		root = path.Dir(src[:i] + "x")
	}
	var out []*template.File
	for _, f := range files {
		var target string
		switch {
		case f.name == src && len(files) == 1 && !strings.HasSuffix(dest, "/"):
			target = dest
		case f.name == src:
			target = path.Join(dest, path.Base(f.name))
		case root == ".":
			target = path.Join(dest, f.name)
		case strings.HasPrefix(f.name, root+"/"):
			target = path.Join(dest, strings.TrimPrefix(f.name, root+"/"))
		default:
			target = path.Join(dest, path.Base(f.name))
		}
		m := mode
		if m == "" {
			m = fmt.Sprintf("%04o", f.mode&0o777)
		}
		out = append(out, &template.File{Path: target, Content: string(f.content), Mode: m})
	}
	return out, nil
}

// templateJSON is E2B's Template for the agent's template t.
func (s *Server) templateJSON(t template.Template) map[string]any {
	status := map[string]string{template.StatusReady: "ready", template.StatusBuilding: "building", template.StatusFailed: "error"}[t.Status]
	if status == "" {
		status = t.Status
	}
	return map[string]any{"templateID": t.Name, "buildID": buildUUID(t), "cpuCount": s.cfg.CPUs, "memoryMB": s.cfg.MemoryMB,
		"diskSizeMB": s.cfg.DiskMB, "public": false, "aliases": []string{t.Name}, "names": []string{t.Name},
		"createdAt": t.CreatedAt, "updatedAt": t.UpdatedAt, "createdBy": nil, "lastSpawnedAt": nil, "spawnCount": 0,
		"buildCount": t.Version, "envdVersion": EnvdVersion, "buildStatus": status}
}

// buildUUID is a stored template's build as E2B names builds, a UUID (TemplateBuild's buildID
// is of format uuid): a name-based UUID (RFC 9562 version 5) of its content hash and
// version, so that two versions of one image, their specs apart, are two builds.
func buildUUID(t template.Template) string {
	return uuid.NewSHA1(uuid.NameSpaceOID, []byte(t.Hash+"/"+strconv.Itoa(t.Version))).String()
}

// listTemplates is GET /templates: the agent's own templates (not the shared ones of others).
func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request, agent string, t Templates) {
	list, err := t.List(r.Context(), agent)
	if err != nil {
		writeEngineError(w, "listing the templates", err)
		return
	}
	out := []map[string]any{}
	for _, tm := range list {
		if tm.Agent == agent {
			out = append(out, s.templateJSON(tm))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// getTemplate is GET /templates/{id}: E2B's TemplateWithBuilds, the one build being the
// template's current version.
func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request, agent string, t Templates) {
	tm, err := t.Get(r.Context(), agent, r.PathValue("id"))
	if err != nil {
		writeEngineError(w, "template "+r.PathValue("id"), err)
		return
	}
	j := s.templateJSON(tm)
	build := map[string]any{"buildID": buildUUID(tm), "status": j["buildStatus"], "createdAt": tm.CreatedAt, "updatedAt": tm.UpdatedAt,
		"cpuCount": s.cfg.CPUs, "memoryMB": s.cfg.MemoryMB, "diskSizeMB": s.cfg.DiskMB, "envdVersion": EnvdVersion}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": tm.Name, "public": false, "aliases": j["aliases"], "names": j["names"],
		"createdAt": tm.CreatedAt, "updatedAt": tm.UpdatedAt, "lastSpawnedAt": nil, "spawnCount": 0, "builds": []any{build}})
}

// deleteTemplate is DELETE /templates/{id}.
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request, agent string, t Templates) {
	// Not forced: a template saved code names is kept (409 naming the code).
	if err := t.Delete(r.Context(), agent, r.PathValue("id"), false); err != nil {
		writeEngineError(w, "deleting template "+r.PathValue("id"), err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// templateAlias is GET /templates/aliases/{alias}: 200 when the agent has a template of that
// name, else 404 (the SDKs' Template.alias_exists).
func (s *Server) templateAlias(w http.ResponseWriter, r *http.Request, alias, agent string, t Templates) {
	name, _, _ := strings.Cut(alias, ":")
	if _, err := t.Get(r.Context(), agent, name); err != nil {
		writeEngineError(w, "template "+name, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": name, "public": false})
}

// templateTags is GET /templates/{id}/tags: E2B's TemplateTag of each tag, "default" (the
// current version) first.
func (s *Server) templateTags(w http.ResponseWriter, r *http.Request, agent string, t Templates) {
	name := r.PathValue("id")
	versions, err := t.Versions(r.Context(), agent, name)
	if err != nil {
		writeEngineError(w, "template "+name, err)
		return
	}
	out := []map[string]any{}
	for _, v := range versions {
		id := buildUUID(template.Template{Hash: v.Hash, Version: v.Version})
		if v.Current {
			out = append([]map[string]any{{"tag": defaultTag, "buildID": id, "createdAt": v.CreatedAt}}, out...)
		}
		for _, tag := range v.Tags {
			out = append(out, map[string]any{"tag": tag, "buildID": id, "createdAt": v.CreatedAt})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// assignTags is POST /templates/tags (E2B's AssignTemplateTagsRequest): tags then name the
// version target ("name" or "name:tag", a tag or a version number) names.
func (s *Server) assignTags(w http.ResponseWriter, r *http.Request, agent string, t Templates) {
	var req struct {
		Target string   `json:"target"`
		Tags   []string `json:"tags"`
	}
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	name, sel, err := s.templateName("target", req.Target)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if len(req.Tags) == 0 {
		writeError(w, http.StatusBadRequest, "tags is empty: name at least one tag to assign")
		return
	}
	versions, err := t.Versions(r.Context(), agent, name)
	if err != nil {
		writeEngineError(w, "template "+name, err)
		return
	}
	i := slices.IndexFunc(versions, func(v template.Version) bool {
		return currentTag(sel) && v.Current || slices.Contains(v.Tags, sel) || strconv.Itoa(v.Version) == sel
	})
	if i < 0 {
		writeError(w, http.StatusNotFound, fmt.Sprintf("target %q: template %s has no such tag or version (GET /templates/%s/tags lists its tags)", req.Target, name, name))
		return
	}
	v := versions[i]
	tags, msg := tagList(req.Tags)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	for _, tag := range tags {
		if err := t.Tag(r.Context(), agent, name, tag, v.Version); err != nil {
			writeEngineError(w, "tag "+tag, err)
			return
		}
	}
	writeJSON(w, http.StatusCreated, map[string]any{"tags": tags, "buildID": buildUUID(template.Template{Hash: v.Hash, Version: v.Version})})
}

// deleteTags is DELETE /templates/tags (E2B's DeleteTemplateTagsRequest): the tags of the
// template name are removed.
func (s *Server) deleteTags(w http.ResponseWriter, r *http.Request, agent string, t Templates) {
	var req struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	name, _, err := s.templateName("name", req.Name)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if len(req.Tags) == 0 {
		writeError(w, http.StatusBadRequest, "tags is empty: name at least one tag to remove")
		return
	}
	tags, msg := tagList(req.Tags)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	for _, tag := range tags {
		if err := t.Untag(r.Context(), agent, name, tag); err != nil {
			writeEngineError(w, "tag "+tag, err)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// maxRequestTags bounds the tags of one E2B tag request (a template has at most 32).
const maxRequestTags = 32

// tagList returns tags without repeats, checked whole before any is applied, or why not (a
// 400's message): at most maxRequestTags, none naming the current build (E2B's "default"),
// each a tag sandpit takes (a helper's 200 000 copies of one tag cost 85 s of writes, and a
// bad tag after good ones left those applied).
func tagList(tags []string) ([]string, string) {
	var out []string
	for _, tag := range tags {
		if !slices.Contains(out, tag) {
			out = append(out, tag)
		}
		if len(out) > maxRequestTags {
			return nil, fmt.Sprintf("tags has more than %d tags; a template has at most 32", maxRequestTags)
		}
	}
	for _, tag := range out {
		if currentTag(tag) {
			return nil, fmt.Sprintf("tag %q always names the template's current build: build it again to move it, or delete the template", tag)
		}
		if err := template.CheckTag("tags", tag); err != nil {
			return nil, err.Error()
		}
	}
	return out, ""
}
