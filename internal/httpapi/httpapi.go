package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/connlimit"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/ports"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Executor is what the API needs from the sandbox; *engine.Service satisfies it.
type Executor interface {
	Execute(ctx context.Context, req sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error)
	Ready(ctx context.Context) error
	Config() engine.Config
}

var _ Executor = (*engine.Service)(nil)

// Backend is what the API serves. Executor is required; the routes of a nil Library, Jobs or
// Ledger answer 404.
type Backend struct {
	Executor Executor
	Library  CodeLibrary
	Jobs     Scheduler
	Ledger   Ledger
	// Packages lists and removes installed dependencies; POST /v1/packages needs an Executor
	// that is a PackageInstaller too.
	Packages PackageManager
	// Knowledge serves /v1/agents/{agent}/memories, facts, documents, graph/nodes,
	// graph/edges and results.
	Knowledge Knowledge
	// Setup serves POST /v1/setup.
	Setup SetupRunner
	// PackageIndex is where dependencies come from, shown by GET /v1/limits.
	PackageIndex PackageIndex
	// Sessions serves /v1/agents/{agent}/sessions (stateful sessions); nil answers 404.
	Sessions Sessions
	// Streams caps the long-lived streams (a process's output) per session, per agent and in
	// all; nil: no caps.
	Streams *connlimit.Streams
	// BodiesMaxBytes is the budget of request bodies read and held at once, in bytes
	// (bodies_max_bytes); 0 is DefaultBodiesMaxBytes. It is raised to the most one request may
	// send when smaller.
	BodiesMaxBytes int64
	// Files serves runs' output files (GET /v1/executions/{id}/files/{name...}, with the
	// Ledger) and their bytes inline in answers (inline_files); nil keeps none.
	Files OutputFiles
	// Warmth says how warm the slots are, for GET /readyz; nil says nothing of it.
	Warmth func() sandbox.Warmth
	// Keys serves /v1/keys, the E2B-compatible API's keys; nil answers 404.
	Keys KeyManager
	// Secrets serves /v1/secrets, the secrets the egress proxy adds to requests (never their
	// values); nil answers 404.
	Secrets SecretManager
	// Ports forwards requests to sessions' ports (…/sessions/{id}/ports/{port}/…); nil
	// answers 404 there.
	Ports *ports.Proxy
	// DaemonToken says requests carry the daemon's bearer token as Authorization: it is
	// removed from what reaches a session's port.
	DaemonToken bool
	// Shares keeps the share links of sessions' ports (…/sessions/{id}/shares); nil answers
	// 404 there. PortsHost is the domain of the ports' own host names (config's PortsHost):
	// a share's URL is under it, and "" refuses to make one.
	Shares    PortShares
	PortsHost string
	// Templates serves /v1/agents/{agent}/templates and /v1/templates; nil answers 404.
	Templates Templates
	// Capacity says how many more sandboxes fit, for GET /v1/limits; nil says nothing of it.
	Capacity func(ctx context.Context) apitype.Capacity
}

// PackageIndex is the daemon's pip settings (its config keys index_url, extra_index_urls,
// trusted_hosts and binary_only).
type PackageIndex struct {
	// IndexURL is the index pip uses; "" is pip's default, PyPI.
	IndexURL string `json:"index_url"`
	// ExtraIndexURLs are searched too.
	ExtraIndexURLs []string `json:"extra_index_urls"`
	// TrustedHosts may be reached over plain HTTP.
	TrustedHosts []string `json:"trusted_hosts"`
	// BinaryOnly means wheels only, no source builds.
	BinaryOnly bool `json:"binary_only"`
}

// redacted returns the settings with the password of each URL replaced by "xxxxx", since
// whoever reaches the API may read them.
func (p PackageIndex) redacted() PackageIndex {
	hide := func(raw string) string {
		if u, err := url.Parse(raw); err == nil {
			return u.Redacted()
		}
		return raw
	}
	out := PackageIndex{IndexURL: hide(p.IndexURL), ExtraIndexURLs: make([]string, len(p.ExtraIndexURLs)),
		TrustedHosts: append([]string{}, p.TrustedHosts...), BinaryOnly: p.BinaryOnly}
	for i, u := range p.ExtraIndexURLs {
		out.ExtraIndexURLs[i] = hide(u)
	}
	return out
}

type api struct {
	routes      []string // the patterns registered, for Routes
	ex          Executor
	lib         CodeLibrary
	jobs        Scheduler
	ledger      Ledger
	packages    PackageManager
	knowledge   Knowledge
	setup       SetupRunner
	index       PackageIndex
	files       OutputFiles
	sessions    Sessions
	streams     *connlimit.Streams
	keys        KeyManager
	secrets     SecretManager
	ports       *ports.Proxy
	shares      PortShares
	templates   Templates
	capacity    func(ctx context.Context) apitype.Capacity
	portsHost   string
	daemonToken bool
	warmth      func() sandbox.Warmth
	// answering holds a token from a run's admission until its answer is written: a run frees
	// its slot when it ends, but a client that stops reading would keep its answer (megabytes,
	// with inline files) in memory until the write times out. At most slots + queue answers
	// are held; more runs are refused as busy.
	answering chan struct{}
	// sessionAnswering holds a token for each session call from its arrival to its answer,
	// as answering does for runs: session calls waiting their turn never take runs' tokens.
	sessionAnswering chan struct{}
	// bodies admits requests by the bytes of their bodies, before reading them; streamed holds
	// the patterns whose handler streams its body in chunks (up to a cap of its own) instead of
	// holding it, which bodies does not admit.
	bodies   *bodyBudget
	streamed map[string]bool
	log      *slog.Logger
	mux      *http.ServeMux
}

// NewHandler returns the REST API served by b. log receives one debug line per request and
// the details of internal failures; nil discards them.
//
// Runs can last minutes, so the routes that run code lift the server's WriteTimeout for their
// answer and bound each write they make instead (one minute): a server may keep a short
// WriteTimeout for everything else.
func NewHandler(b Backend, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &api{ex: b.Executor, lib: b.Library, jobs: b.Jobs, ledger: b.Ledger, packages: b.Packages, knowledge: b.Knowledge, setup: b.Setup, index: b.PackageIndex.redacted(), files: b.Files, sessions: b.Sessions, streams: b.Streams, keys: b.Keys, secrets: b.Secrets, ports: b.Ports, shares: b.Shares, portsHost: b.PortsHost, templates: b.Templates, capacity: b.Capacity, daemonToken: b.DaemonToken, warmth: b.Warmth, log: log, mux: http.NewServeMux()}
	a.answering = make(chan struct{}, 1)
	perBody := int64(maxImportBytes)
	if a.ex != nil {
		cfg := a.ex.Config()
		a.answering = make(chan struct{}, max(cfg.Slots+cfg.QueueLength, 1))
		perBody = max(perBody, maxBodyBytes(cfg))
	}
	a.bodies = newBodyBudget(cmp.Or(b.BodiesMaxBytes, DefaultBodiesMaxBytes), perBody)
	a.handle("POST /v1/executions", a.execute)
	a.handle("GET /v1/limits", a.limits)
	a.handle("GET /healthz", a.healthz)
	a.handle("GET /readyz", a.readyz)
	a.handle("GET /openapi.json", a.openapi)
	if a.ledger != nil {
		a.handle("GET /v1/executions", a.listExecutions)
		a.handle("GET /v1/executions/{id}", a.getExecution)
		a.handle("GET /v1/executions/{id}/files/{name...}", a.getExecutionFile)
	}
	if a.knowledge != nil {
		a.routeKnowledge()
	}
	if a.sessions != nil {
		sc := a.sessions.Config()
		a.sessionAnswering = make(chan struct{}, max(sc.MaxTotal*(1+sandbox.MaxSessionWaiting), 1))
		a.routeSessions()
		a.routeWorkspace()
		a.routePorts()
	}
	if a.templates != nil {
		a.routeTemplates()
	}
	if a.setup != nil {
		a.handle("POST /v1/setup", a.runSetup)
	}
	if a.keys != nil {
		a.routeKeys()
	}
	if a.secrets != nil {
		a.routeSecrets()
	}
	if a.packages != nil {
		a.handle("GET /v1/packages", a.listPackages)
		a.handle("POST /v1/packages", a.installPackages)
		a.handle("DELETE /v1/packages/{name}", a.removePackage)
	}
	if a.lib != nil {
		a.handle("POST /v1/agents/{agent}/code", a.createCode)
		a.handle("GET /v1/agents/{agent}/code", a.listCode)
		a.handle("GET /v1/agents/{agent}/code/{name}", a.getCode)
		a.handle("PUT /v1/agents/{agent}/code/{name}", a.updateCode)
		a.handle("PATCH /v1/agents/{agent}/code/{name}", a.updateCode)
		a.handle("DELETE /v1/agents/{agent}/code/{name}", a.deleteCode)
		a.handle("GET /v1/agents/{agent}/code/{name}/versions", a.listCodeVersions)
		a.handle("GET /v1/agents/{agent}/code/{name}/versions/{version}", a.getCodeVersion)
		a.handle("POST /v1/agents/{agent}/code/{name}/run", a.runCode)
	}
	if a.jobs != nil {
		a.handle("POST /v1/agents/{agent}/jobs", a.createJob)
		a.handle("GET /v1/agents/{agent}/jobs", a.listJobs)
		a.handle("GET /v1/agents/{agent}/jobs/{id}", a.getJob)
		a.handle("PUT /v1/agents/{agent}/jobs/{id}", a.updateJob)
		a.handle("PATCH /v1/agents/{agent}/jobs/{id}", a.updateJob)
		a.handle("DELETE /v1/agents/{agent}/jobs/{id}", a.deleteJob)
		a.handle("POST /v1/agents/{agent}/jobs/{id}/pause", a.pauseJob)
		a.handle("POST /v1/agents/{agent}/jobs/{id}/resume", a.resumeJob)
		a.handle("POST /v1/agents/{agent}/jobs/{id}/run", a.runJob)
		a.handle("GET /v1/agents/{agent}/jobs/{id}/history", a.jobHistory)
	}
	return a
}

// handle registers fn for pattern ("METHOD /path").
func (a *api) handle(pattern string, fn http.HandlerFunc) {
	a.routes = append(a.routes, pattern)
	a.mux.HandleFunc(pattern, fn)
}

// ServeHTTP logs the request, recovers from panics, answers unknown routes in JSON, and admits
// a request with a body by its Content-Length before any of it is read (see bodyBudget).
func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rw := &statusWriter{ResponseWriter: w}
	defer func() {
		p := recover()
		if p != nil && p != http.ErrAbortHandler {
			a.log.Error("panic in HTTP handler", "method", r.Method, "path", r.URL.Path,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			if rw.status == 0 {
				writeError(rw, errors.New("the server failed while handling the request (a panic; see the daemon log)"))
				p = nil
			} else {
				// The answer has begun and cannot be replaced: abort it, so the client sees a
				// broken answer rather than a cut one that looks complete.
				p = http.ErrAbortHandler
			}
		}
		status := rw.status
		if status == 0 {
			status = http.StatusOK
		}
		a.log.Debug("http request", "method", r.Method, "path", r.URL.Path, "status", status,
			"duration_ms", time.Since(start).Milliseconds())
		if p != nil {
			panic(p)
		}
	}()

	if p := r.URL.Path; p != cleanPath(p) {
		// The mux would redirect it (307) with an empty body: an empty ID is a client's
		// mistake to name, not a place to send it (a trial's POST …/jobs//run).
		writeError(rw, &requestError{status: http.StatusNotFound, code: apitype.CodeNotFound,
			msg: fmt.Sprintf("no endpoint %s %s: the path has an empty, \".\" or \"..\" segment; give every ID it names", r.Method, p)})
		return
	}
	h, pattern := a.mux.Handler(r)
	if pattern == "" {
		a.unrouted(rw, r, h)
		return
	}
	if !a.streamed[pattern] {
		release, ok := a.bodies.admit(rw, r, pathAgent(r.URL.Path))
		if !ok {
			return
		}
		defer release()
	}
	a.mux.ServeHTTP(rw, r)
}

// cleanPath is p without empty, "." and ".." segments, keeping a trailing slash.
func cleanPath(p string) string {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// unrouted answers a request no pattern matches, in JSON: 404, or 405 with Allow when the
// path exists for other methods. h is the mux's own answer, consulted for its status and Allow.
func (a *api) unrouted(w http.ResponseWriter, r *http.Request, h http.Handler) {
	probe := &headerProbe{header: make(http.Header)}
	h.ServeHTTP(probe, r)
	if probe.status == http.StatusMethodNotAllowed {
		allow := probe.header.Get("Allow")
		w.Header().Set("Allow", allow)
		writeError(w, &requestError{status: http.StatusMethodNotAllowed, code: apitype.CodeMethodNotAllowed,
			msg: fmt.Sprintf("method %s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, allow)})
		return
	}
	writeError(w, &requestError{status: http.StatusNotFound, code: apitype.CodeNotFound,
		msg: fmt.Sprintf("no endpoint %s %s; docs/api.md lists the endpoints (POST /v1/executions runs code)",
			r.Method, r.URL.Path)})
}

func (a *api) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, apitype.Status{Status: "ok"})
}

// readyz answers whether the daemon can run code (one slot up), with how warm its slots are.
// With ?warm=true it answers 503 until every slot is up and starts its runs as forks (a
// client that wants fast starts polls it, after Retry-After).
func (a *api) readyz(w http.ResponseWriter, r *http.Request) {
	var warmth *apitype.Warmth
	if a.warmth != nil {
		wm := a.warmth()
		warmth = &apitype.Warmth{Slots: wm.Slots, SlotsUp: wm.Up, ForkSlots: wm.Fork, ForkOff: wm.ForkOff, Warm: wm.Warm(), WarmSessions: wm.Sessions}
	}
	err := a.ex.Ready(r.Context())
	wantWarm, _ := strconv.ParseBool(r.URL.Query().Get("warm"))
	if err == nil && wantWarm && warmth != nil && !warmth.Warm {
		err = fmt.Errorf("%w: %d of %d slots are up and %d start runs as forks (their fork servers are importing the preload); "+
			"runs are accepted now, started cold", sandbox.ErrNotReady, warmth.SlotsUp, warmth.Slots, warmth.ForkSlots)
	}
	if err == nil {
		writeJSON(w, http.StatusOK, apitype.Status{Status: "ready", Warmth: warmth})
		return
	}
	if !errors.Is(err, sandbox.ErrNotReady) {
		err = fmt.Errorf("%w: %w", sandbox.ErrNotReady, err)
	}
	e := classify(err)
	setRetryAfter(w, e.retryAfter)
	writeJSON(w, http.StatusServiceUnavailable, apitype.Status{Status: "not_ready", Error: &e.detail, Warmth: warmth})
}

func (a *api) limits(w http.ResponseWriter, r *http.Request) {
	cfg := a.ex.Config()
	var quotas *apitype.Quotas
	if a.knowledge != nil {
		q := apitype.Quotas(a.knowledge.Quotas())
		quotas = &q
	}
	lim := apitype.Limits{
		Slots:               cfg.Slots,
		QueueLength:         cfg.QueueLength,
		ExecutionsPerAgent:  cfg.ExecutionsPerAgent,
		DefaultTimeoutMS:    cfg.DefaultTimeout.Milliseconds(),
		MaxTimeoutMS:        cfg.MaxTimeout.Milliseconds(),
		MaxCodeBytes:        cfg.MaxCodeBytes,
		MaxInputBytes:       cfg.MaxInputBytes,
		MaxBodyBytes:        maxBodyBytes(cfg),
		Network:             cfg.Network,
		NetworkAllow:        cfg.NetworkAllow,
		NetworkAllowInstall: cfg.NetworkAllowInstall,
		Limits:              apitype.RunLimits(cfg.Limits),
		InstallTimeoutMS:    cfg.InstallTimeout.Milliseconds(),
		MaxDependencies:     cfg.MaxDependencies,
		MaxCalls:            cfg.MaxCalls,
		MaxCallBytes:        cfg.MaxCallBytes,
		CallTimeoutMS:       cfg.CallTimeout.Milliseconds(),
		PackageIndex:        apitype.PackageIndex(a.index),
		Quotas:              quotas,
		MaxValidationCost:   library.MaxValidationCost,

		MaxInputFiles:      cfg.MaxInputFiles,
		MaxInputFileBytes:  cfg.MaxInputFileBytes,
		MaxInputFilesBytes: cfg.MaxInputFilesBytes,
		OutputFiles:        cfg.Limits.OutputFiles,
		OutputFileBytes:    cfg.Limits.OutputFileBytes,
		OutputFilesBytes:   cfg.Limits.OutputFilesBytes,
		Charts:             cfg.Charts,
		MaxInlineFileBytes: apitype.MaxInlineFileBytes,
		MaxInlineBytes:     apitype.MaxInlineBytes,
	}
	if a.files != nil {
		lim.FilesUsedBytes, lim.FilesMaxBytes = a.files.Used()
	}
	if a.ledger != nil {
		r := a.ledger.Retention()
		lim.Ledger = &apitype.LedgerLimits{LedgerMaxAgeDays: int64(r.MaxAge / (24 * time.Hour)), LedgerMaxExecutions: r.MaxCount,
			LedgerMaxBytes: r.MaxBytes, UsedBytes: a.ledger.LedgerBytes()}
	}
	if a.capacity != nil {
		c := a.capacity(r.Context())
		lim.Capacity = &c
	}
	if a.sessions != nil {
		sc := a.sessions.Config()
		lim.Sessions = &apitype.SessionLimits{IdleTimeoutMS: sc.IdleTimeout.Milliseconds(), MaxLifetimeMS: sc.MaxLifetime.Milliseconds(),
			PerAgent: sc.MaxPerAgent, Max: sc.MaxTotal}
		lifecycleLimits(lim.Sessions, sc.Lifecycle, a.sessions.Stats())
	}
	writeJSON(w, http.StatusOK, lim)
}

// statusWriter records the status written through it. Unwrap lets http.ResponseController
// reach the underlying writer (Flush, SetWriteDeadline).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// headerProbe is a ResponseWriter that keeps the status and headers and drops the body.
type headerProbe struct {
	header http.Header
	status int
}

func (p *headerProbe) Header() http.Header { return p.header }
func (p *headerProbe) WriteHeader(code int) {
	if p.status == 0 {
		p.status = code
	}
}
func (p *headerProbe) Write(b []byte) (int, error) {
	if p.status == 0 {
		p.status = http.StatusOK
	}
	return len(b), nil
}
