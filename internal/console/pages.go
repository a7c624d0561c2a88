package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/schedule"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// page is what every template gets.
type page struct {
	Title         string
	Nav           string // executions, jobs, code, health
	CSRF          string
	TokenRequired bool
	Data          any
}

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"whenp": func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"iso":   func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"ms":    func(n int64) string { return (time.Duration(n) * time.Millisecond).String() },
	"dur":   humanMS,
	"bytes": byteSize,
	"name":  sandbox.EscapeName,
	// cmdline shows a command line whole on one line, its control characters (newlines too)
	// escaped as file names' are (\x1b, \a, \n): never deleted, so no part of it hides.
	"cmdline": sandbox.EscapeName,
	"ibytes":  func(n int) string { return byteSize(int64(n)) },
	"firstLine": func(s string) string {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[:i]
		}
		return stripControls(s)
	},
	"ansi":       ANSISpans,
	"python":     HighlightPython,
	"fileURL":    FileURL,
	"pathEsc":    url.PathEscape,
	"sessionURL": SessionURL,
	"raster":     func(mt string) bool { _, ok := sandbox.RasterImage(mt); return ok },
	"outcomes":   func() []sandbox.Outcome { return sandbox.Outcomes },
	"sources": func() []string {
		out := make([]string, len(sandbox.Sources))
		for i, s := range sandbox.Sources {
			out[i] = string(s)
		}
		return out
	},
	"pretty": prettyJSON,
	// asJSON is v as indented JSON (a template's spec).
	"asJSON": func(v any) string {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err.Error()
		}
		return string(b)
	},
	"hasJSON":   hasJSON,
	"describe":  schedule.Describe,
	"add":       func(a, b int) int { return a + b },
	"joinComma": func(s []string) string { return strings.Join(s, ", ") },
}

var pageNames = []string{"login", "error", "executions", "execution", "jobs", "code_list", "code", "health", "sessions", "session", "template_list", "template"}

func parseTemplates() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", name, err)
		}
		out[name] = t
	}
	rows, err := template.New("rows").Funcs(funcs).ParseFS(templateFS, "templates/executions.html")
	if err != nil {
		return nil, fmt.Errorf("console template rows: %w", err)
	}
	out["rows"] = rows
	return out, nil
}

// render writes the page name with status; the template is rendered to a buffer first, so a
// failure is a clean error page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	var buf bytes.Buffer
	tmpl := "layout"
	if name == "rows" {
		tmpl = "rows"
	}
	if err := c.pages[name].ExecuteTemplate(&buf, tmpl, p); err != nil {
		c.log.Error("rendering a console page", "page", name, "path", r.URL.Path, "error", err)
		http.Error(w, "the console failed to render this page (see the daemon log)", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

func (c *Console) errorPage(w http.ResponseWriter, r *http.Request, status int, msg string) {
	w.Header().Set("Cache-Control", "no-store")
	c.render(w, r, status, "error", page{Title: http.StatusText(status), Data: map[string]any{"Status": status, "Message": msg}})
}

// failed shows err: not found as 404, anything else as 500 with the details in the log.
func (c *Console) failed(w http.ResponseWriter, r *http.Request, what string, err error) {
	if errors.Is(err, store.ErrNotFound) {
		c.errorPage(w, r, http.StatusNotFound, what+" does not exist (or was pruned by retention).")
		return
	}
	if errors.Is(err, store.ErrInvalidCursor) {
		c.errorPage(w, r, http.StatusBadRequest, "The page cursor is not valid: follow the console's own \"older\" link.")
		return
	}
	c.log.Error("console", "path", r.URL.Path, "error", err)
	c.errorPage(w, r, http.StatusInternalServerError, "Reading "+what+" failed; the daemon log has the details.")
}

func (l login) page(title, nav string, data any) page {
	return page{Title: title, Nav: nav, CSRF: l.csrf, TokenRequired: l.tokenRequired, Data: data}
}

// FileURL is the console's URL of an output file, each part of its name escaped.
func FileURL(id, name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return "/ui/executions/" + url.PathEscape(id) + "/files/" + strings.Join(parts, "/")
}

// prettyJSON indents JSON text; text that is not JSON is returned as it is.
func prettyJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "null"
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// ---- executions ----

// sinces are the time filter's choices.
var sinces = []struct{ Key, Label string }{{"", "any time"}, {"15m", "last 15 minutes"}, {"1h", "last hour"}, {"24h", "last 24 hours"}, {"168h", "last 7 days"}}

type listView struct {
	Filter  map[string]string
	Sinces  []struct{ Key, Label string }
	Items   []store.ExecutionSummary
	Next    string
	Query   string // the filters as a query string, for the live rows
	Error   string
	Cursor  string
	NextURL string
}

const listLimit = 50

// filterOf reads the list's filters from q, naming the first bad one.
func (c *Console) filterOf(q url.Values) (store.ExecutionFilter, map[string]string, error) {
	vals := map[string]string{}
	for _, k := range []string{"agent", "source", "outcome", "job", "code", "since"} {
		vals[k] = strings.TrimSpace(q.Get(k))
	}
	f := store.ExecutionFilter{Agent: vals["agent"], Source: vals["source"], Outcome: sandbox.Outcome(vals["outcome"]), JobID: vals["job"], CodeName: vals["code"]}
	if f.Agent != "" && !sandbox.ValidAgent(f.Agent) {
		return f, vals, fmt.Errorf("agent %q is not an agent name (1 to 64 lowercase letters, digits, '-' or '_')", f.Agent)
	}
	if f.Source != "" && !slices.Contains(sandbox.Sources, sandbox.Source(f.Source)) {
		return f, vals, fmt.Errorf("source %q is not one of api, cli, mcp, job", f.Source)
	}
	if f.Outcome != "" && !slices.Contains(sandbox.Outcomes, f.Outcome) {
		return f, vals, fmt.Errorf("outcome %q is not an outcome (ok, error, timeout, ...)", f.Outcome)
	}
	if len(f.JobID) > 64 || len(f.CodeName) > 128 {
		return f, vals, errors.New("job or code is too long to be a job ID or a code name")
	}
	if s := vals["since"]; s != "" {
		if !slices.ContainsFunc(sinces, func(x struct{ Key, Label string }) bool { return x.Key == s }) {
			return f, vals, fmt.Errorf("since %q is not one of the choices", s)
		}
		d, _ := time.ParseDuration(s)
		f.Since = c.cfg.Now().Add(-d)
	}
	return f, vals, nil
}

func (c *Console) list(r *http.Request) listView {
	q := r.URL.Query()
	f, vals, err := c.filterOf(q)
	v := listView{Filter: vals, Sinces: sinces, Cursor: q.Get("cursor")}
	keep := url.Values{}
	for k, val := range vals {
		if val != "" {
			keep.Set(k, val)
		}
	}
	v.Query = keep.Encode()
	if err != nil {
		v.Error = err.Error()
		return v
	}
	if c.cfg.Ledger == nil {
		v.Error = "This daemon keeps no ledger of executions."
		return v
	}
	items, next, err := c.cfg.Ledger.ListExecutions(r.Context(), f, store.Page{Limit: listLimit, Cursor: v.Cursor})
	if err != nil {
		if errors.Is(err, store.ErrInvalidCursor) {
			v.Error = "The page cursor is not valid: follow the console's own \"older\" link."
		} else {
			c.log.Error("console: listing executions", "error", err)
			v.Error = "Listing executions failed; the daemon log has the details."
		}
		return v
	}
	v.Items, v.Next = items, next
	if next != "" {
		keep.Set("cursor", next)
		v.NextURL = "/ui/?" + keep.Encode()
	}
	return v
}

func (c *Console) executionsPage(w http.ResponseWriter, r *http.Request, l login) {
	v := c.list(r)
	status := http.StatusOK
	if v.Error != "" {
		status = http.StatusBadRequest
	}
	c.render(w, r, status, "executions", l.page("Executions", "executions", v))
}

// executionRows serves the list's rows alone, which the page's script fetches to stay live.
func (c *Console) executionRows(w http.ResponseWriter, r *http.Request, l login) {
	c.render(w, r, http.StatusOK, "rows", l.page("", "", c.list(r)))
}

type fileView struct {
	sandbox.File
	URL   string
	Image bool
}

type recordView struct {
	E       store.Execution
	Files   []fileView
	Results []resultView
	Limits  sandbox.Limits
	Running bool
}

// execution reads the record of the execution r's path names; when it cannot, it answers
// with the error page and returns false.
func (c *Console) execution(w http.ResponseWriter, r *http.Request) (store.Execution, bool) {
	if c.cfg.Ledger == nil {
		c.errorPage(w, r, http.StatusNotFound, "This daemon keeps no ledger of executions.")
		return store.Execution{}, false
	}
	id := r.PathValue("id")
	e, err := c.cfg.Ledger.GetExecution(r.Context(), id)
	if err != nil {
		c.failed(w, r, "Execution "+strconv.Quote(id), err)
		return store.Execution{}, false
	}
	return e, true
}

func (c *Console) executionPage(w http.ResponseWriter, r *http.Request, l login) {
	e, ok := c.execution(w, r)
	if !ok {
		return
	}
	v := recordView{E: e, Limits: c.cfg.Engine.Config().Limits, Running: e.Status == store.StatusRunning}
	for _, f := range e.Files {
		_, img := sandbox.RasterImage(f.MediaType)
		v.Files = append(v.Files, fileView{File: f, URL: FileURL(e.ID, f.Name), Image: img})
	}
	v.Results = resultViews(e.ID, e.Results)
	c.render(w, r, http.StatusOK, "execution", l.page("Execution "+e.ID, "executions", v))
}

// executionFile serves an output file's bytes through the REST API's own route (its media
// type, attachment or inline, sandboxing CSP and 404/410 answers).
func (c *Console) executionFile(w http.ResponseWriter, r *http.Request, l login) {
	parts := strings.Split(r.PathValue("name"), "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	c.forward(w, r, http.MethodGet, "/v1/executions/"+url.PathEscape(r.PathValue("id"))+"/files/"+strings.Join(parts, "/"), nil)
}

// forward sends a request to the REST API's handler in this process and copies its answer to
// w: headers, status and body. The console's own cookie is not passed on.
func (c *Console) forward(w http.ResponseWriter, r *http.Request, method, target string, body []byte) {
	req, err := c.apiRequest(r, method, target, body)
	if err != nil {
		c.errorPage(w, r, http.StatusBadRequest, err.Error())
		return
	}
	// The file route's own headers replace the console's page headers.
	for _, k := range []string{"Content-Security-Policy", "Cache-Control"} {
		w.Header().Del(k)
	}
	c.cfg.API.ServeHTTP(w, req)
}

// apiRequest builds a request to the REST API for target (a path, escaped), carrying r's
// context and headers but not its cookies or authorization.
func (c *Console) apiRequest(r *http.Request, method, target string, body []byte) (*http.Request, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("the path %q cannot be sent to the API: %v", target, err)
	}
	req := r.Clone(r.Context())
	req.Method = method
	req.URL = u
	req.RequestURI = ""
	req.Header = http.Header{}
	for _, k := range []string{"Range", "If-None-Match", "If-Modified-Since", "If-Range", "User-Agent"} {
		if v := r.Header.Values(k); len(v) > 0 {
			req.Header[k] = v
		}
	}
	req.Body = http.NoBody
	req.ContentLength = 0
	if body != nil {
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// callAPI sends a request to the REST API and returns its status and JSON body (bounded by
// limit bytes).
func (c *Console) callAPI(r *http.Request, method, target string, body []byte, limit int64) (int, []byte, error) {
	req, err := c.apiRequest(r, method, target, body)
	if err != nil {
		return 0, nil, err
	}
	rec := &capture{header: http.Header{}, limit: limit}
	c.cfg.API.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if rec.over {
		return rec.status, nil, fmt.Errorf("the API's answer is larger than the %d bytes the console reads", limit)
	}
	return rec.status, rec.body.Bytes(), nil
}

// capture is a ResponseWriter that keeps an answer's status and up to limit bytes of its body.
type capture struct {
	header http.Header
	status int
	body   bytes.Buffer
	limit  int64
	over   bool
}

func (c *capture) Header() http.Header { return c.header }

func (c *capture) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
}

func (c *capture) Write(p []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	if int64(c.body.Len()+len(p)) > c.limit {
		c.over = true
		return 0, errors.New("the answer is larger than the console reads")
	}
	return c.body.Write(p)
}

// apiMessage is the message of a REST error answer, or a description of the status.
func apiMessage(status int, body []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
			Field   string `json:"field"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	return fmt.Sprintf("the API answered %d %s", status, http.StatusText(status))
}

// byteSize says a size in bytes for people: "512 B", "1.5 KiB", "8.0 MiB".
func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// hasJSON says whether raw holds a JSON value other than null.
func hasJSON(raw json.RawMessage) bool {
	t := strings.TrimSpace(string(raw))
	return t != "" && t != "null"
}
