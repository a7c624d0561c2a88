// Package console serves sandpit's web console at /ui on the daemon's own listener: the
// executions ledger (a live list and each record's page), jobs, the code library, stateful
// sessions (each one's calls, commands and, while it is active, files), templates (each with
// its spec and build log) and the daemon's health,
// as HTML pages rendered with html/template and a little same-origin JavaScript, all embedded
// in the binary (nothing is fetched from elsewhere; it works offline).
//
// It reads the domain services through the small interfaces below, and sends every state
// change (a job's pause and resume, run now, run saved code, a session's pause, resume,
// hibernate and close) and every output file's bytes through the
// REST API's own handler, so validation, limits and file headers are the API's. A session's
// files are read as someone looking on (Sessions.LookFiles): the page neither resumes a paused
// session nor keeps one from its idle timeout.
//
// Security: every page is served under a strict Content-Security-Policy (scripts and styles
// from /ui/static only, no inline script); program output, code and file names are escaped by
// html/template, and ANSI sequences become class names from a fixed set, never markup. With a
// daemon token, a browser signs in once (POST /ui/login) and gets an HttpOnly SameSite=Strict
// cookie valid for /ui only; a request with the API's bearer token is accepted too. Every POST
// must come from the console's own origin (Origin or Sec-Fetch-Site) and carry the page's CSRF
// token.
package console

import (
	"context"
	"embed"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/jobs"
	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// Ledger reads execution records; *store.Store satisfies it.
type Ledger interface {
	GetExecution(ctx context.Context, id string) (store.Execution, error)
	ListExecutions(ctx context.Context, f store.ExecutionFilter, p store.Page) ([]store.ExecutionSummary, string, error)
	SessionCommands(ctx context.Context, agent, id string, p store.Page) ([]sandbox.ProcessInfo, string, error)
}

// Jobs reads jobs and their fires; *jobs.Scheduler satisfies it.
type Jobs interface {
	List(ctx context.Context, agent string, p store.Page) ([]store.Job, string, error)
	Get(ctx context.Context, agent, id string) (jobs.Scheduled, error)
	History(ctx context.Context, agent, id string, f store.FireFilter, p store.Page) ([]store.Fire, string, error)
}

// Code reads saved code; *library.Library satisfies it.
type Code interface {
	Get(ctx context.Context, agent, name string, version int) (store.Code, error)
	Versions(ctx context.Context, agent, name string) ([]store.CodeVersion, error)
	List(ctx context.Context, agent, filter string, p store.Page) ([]store.Code, string, error)
}

// Engine is the sandbox's state; *engine.Service satisfies it.
type Engine interface {
	Config() engine.Config
	Stats() engine.Stats
	Ready(ctx context.Context) error
}

var (
	_ Ledger = (*store.Store)(nil)
	_ Jobs   = (*jobs.Scheduler)(nil)
	_ Code   = (*library.Library)(nil)
	_ Engine = (*engine.Service)(nil)
)

// ForkServer is the fork server's configuration (config keys fork_server, preload and
// fork_server_max_runs), shown on the health page.
type ForkServer struct {
	Enabled bool
	Preload []string
	MaxRuns int
	// Warmth, when not nil, says how many slots start runs as forks now.
	Warmth func() sandbox.Warmth
}

// Config is what the console serves.
type Config struct {
	// Token is the daemon's bearer token (config key token); "" requires no sign-in.
	Token string
	// API is the REST API's handler without its token check (the console authenticates
	// first): state changes and output files go through it. Required.
	API http.Handler
	// Engine is required; Ledger, Jobs and Code may be nil (their pages then say so).
	Engine Engine
	Ledger Ledger
	Jobs   Jobs
	Code   Code
	// Sessions may be nil (its page then says so).
	Sessions Sessions
	// Templates may be nil (its pages then say so).
	Templates Templates
	// ForkServer and Resets (how many boxes were replaced since the daemon started; nil:
	// unknown) are shown on the health page.
	ForkServer ForkServer
	Resets     func() int64
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Console is the web console's handler; mount it at /ui/ (and /ui).
type Console struct {
	cfg   Config
	auth  *authenticator
	pages map[string]*template.Template
	log   *slog.Logger
	mux   *http.ServeMux
}

// LoginTTL is how long a sign-in lasts.
const LoginTTL = 12 * time.Hour

// New returns the console for cfg. log receives failures; nil discards them.
func New(cfg Config, log *slog.Logger) (*Console, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	pages, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	auth, err := newAuthenticator(cfg.Token, cfg.Now)
	if err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, auth: auth, pages: pages, log: log, mux: http.NewServeMux()}
	static, _ := fs.Sub(staticFS, "static")
	c.mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", staticHandler(static)))
	c.mux.HandleFunc("GET /ui/login", c.loginPage)
	c.mux.HandleFunc("POST /ui/login", c.submitLogin)
	c.mux.HandleFunc("POST /ui/logout", c.signedIn(c.logout))
	c.mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
	})
	c.mux.HandleFunc("GET /ui/{$}", c.signedIn(c.executionsPage))
	c.mux.HandleFunc("GET /ui/rows", c.signedIn(c.executionRows))
	c.mux.HandleFunc("GET /ui/executions/{id}", c.signedIn(c.executionPage))
	c.mux.HandleFunc("GET /ui/executions/{id}/files/{name...}", c.signedIn(c.executionFile))
	c.mux.HandleFunc("GET /ui/executions/{id}/results/{n}/{kind}", c.signedIn(c.executionResult))
	c.mux.HandleFunc("GET /ui/jobs", c.signedIn(c.jobsPage))
	c.mux.HandleFunc("POST /ui/jobs/{agent}/{id}/{action}", c.signedIn(c.jobAction))
	c.mux.HandleFunc("GET /ui/code", c.signedIn(c.codeListPage))
	c.mux.HandleFunc("GET /ui/code/{agent}/{name}", c.signedIn(c.codePage))
	c.mux.HandleFunc("POST /ui/code/{agent}/{name}/run", c.signedIn(c.runCode))
	c.mux.HandleFunc("GET /ui/templates", c.signedIn(c.templateListPage))
	c.mux.HandleFunc("GET /ui/templates/{agent}/{name}", c.signedIn(c.templatePage))
	c.mux.HandleFunc("GET /ui/health", c.signedIn(c.healthPage))
	c.mux.HandleFunc("GET /ui/sessions", c.signedIn(c.sessionsPage))
	c.mux.HandleFunc("GET /ui/sessions/{agent}/{id}", c.signedIn(c.sessionPage))
	c.mux.HandleFunc("GET /ui/sessions/{agent}/{id}/download", c.signedIn(c.sessionDownload))
	c.mux.HandleFunc("POST /ui/sessions/{agent}/{id}/shares", c.signedIn(c.createShare))
	c.mux.HandleFunc("POST /ui/sessions/{agent}/{id}/shares/{share}/revoke", c.signedIn(c.revokeShare))
	for action := range sessionSteps {
		c.mux.HandleFunc("POST /ui/sessions/{agent}/{id}/"+action, c.signedIn(c.sessionAction(action)))
	}
	return c, nil
}

// ServeHTTP serves the console's routes with its security headers.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin") // not no-referrer: Chromium then sends "Origin: null" with forms
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	if _, pattern := c.mux.Handler(r); pattern == "" {
		c.errorPage(w, r, http.StatusNotFound, "There is no console page at "+r.URL.Path+".")
		return
	}
	c.mux.ServeHTTP(w, r)
}

// CSP is the console's Content-Security-Policy: scripts, styles, images, frames and requests
// from its own origin only (the frames: a run's HTML results, sandboxed by their own CSP), no
// inline script or style, no framing of the console, forms posting only to itself.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; frame-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// staticHandler serves the embedded static files, cacheable for an hour.
func staticHandler(static fs.FS) http.Handler {
	files := http.FileServerFS(static)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "private, max-age=3600")
		files.ServeHTTP(w, r)
	})
}
