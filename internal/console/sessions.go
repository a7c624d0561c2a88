package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// Sessions reads agents' stateful sessions (the daemon wraps *session.Registry): their states,
// and while one is active its files.
type Sessions interface {
	// Agents are the agents that have sessions to List, sorted.
	Agents() []string
	List(agent string) []sandbox.SessionInfo
	Info(ctx context.Context, agent, id string) (sandbox.SessionInfo, error)
	// Look returns agent's session id to look into (an error of class not found or gone when
	// it has none, or it has ended).
	Look(ctx context.Context, agent, id string) (Files, error)
}

// Files are a session's files as someone looking on sees them (*session.Session): neither
// resumes a paused or hibernated session nor counts as its use.
type Files interface {
	LookFiles(ctx context.Context, p string, depth int) (sandbox.FileListing, error)
	LookFile(ctx context.Context, p string, offset, length int64) (sandbox.FileContent, error)
}

var _ Files = (*session.Session)(nil)

type sessionsView struct {
	Agent, Error, Message string
	// Agents are the agents that have sessions: the picker's choices.
	Agents   []string
	Sessions []sandbox.SessionInfo
}

// sessionsPage shows an agent's sessions: each one's state (active, paused, hibernated,
// ended and why), its run time and calls, what its last resume kept, its hibernation file,
// and its lifecycle's history, with the buttons of the steps its state allows.
func (c *Console) sessionsPage(w http.ResponseWriter, r *http.Request, l login) {
	if c.cfg.Sessions == nil {
		c.errorPage(w, r, http.StatusNotFound, "This daemon keeps no sessions.")
		return
	}
	agent, agents, problem := c.pickSessionAgent(r)
	v := sessionsView{Agent: agent, Agents: agents, Error: problem, Message: r.URL.Query().Get("done")}
	if agent != "" {
		v.Sessions = c.cfg.Sessions.List(agent)
	}
	c.render(w, r, http.StatusOK, "sessions", l.page("Sessions", "sessions", v))
}

// pickSessionAgent reads ?agent= for the sessions page, defaulting to "default" when it has
// sessions, else the first agent that has; agents are those that have sessions. "" with an
// error message when ?agent= is not a valid name.
func (c *Console) pickSessionAgent(r *http.Request) (agent string, agents []string, problem string) {
	agents = c.cfg.Sessions.Agents()
	agent = strings.TrimSpace(r.URL.Query().Get("agent"))
	switch {
	case agent != "" && !sandbox.ValidAgent(agent):
		return "", agents, fmt.Sprintf("agent %q is not an agent name (1 to 64 lowercase letters, digits, '-' or '_')", agent)
	case agent != "":
	case slices.Contains(agents, "default"):
		agent = "default"
	case len(agents) > 0:
		agent = agents[0]
	}
	return agent, agents, ""
}

// sessionSteps are the session list's buttons: each one's REST method and path under the
// session's, and what the notice says once it is done.
var sessionSteps = map[string]struct{ method, path, done string }{
	"pause":     {http.MethodPost, "/pause", "paused"},
	"resume":    {http.MethodPost, "/resume", "resumed"},
	"hibernate": {http.MethodPost, "/hibernate", "hibernated"},
	"close":     {http.MethodDelete, "", "closed"},
}

// sessionAction pauses, resumes, hibernates or closes a session through the REST API (its
// checks, budgets and errors are the API's), then shows the list again.
func (c *Console) sessionAction(action string) func(http.ResponseWriter, *http.Request, login) {
	step := sessionSteps[action]
	return func(w http.ResponseWriter, r *http.Request, l login) {
		agent, id := r.PathValue("agent"), r.PathValue("id")
		if !sandbox.ValidAgent(agent) {
			c.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("%q is not an agent name, so it has no sessions.", agent))
			return
		}
		status, body, err := c.callAPI(r, step.method, "/v1/agents/"+url.PathEscape(agent)+"/sessions/"+url.PathEscape(id)+step.path, nil, 1<<20)
		if err != nil || status >= 300 {
			msg := ""
			if err != nil {
				msg = err.Error()
			} else {
				msg = apiMessage(status, body)
			}
			if status < 400 {
				status = http.StatusBadGateway
			}
			c.errorPage(w, r, status, fmt.Sprintf("Session %s could not be %s: %s", id, step.done, msg))
			return
		}
		http.Redirect(w, r, "/ui/sessions?"+url.Values{"agent": {agent}, "done": {id + " " + step.done}}.Encode()+"#"+url.PathEscape(id), http.StatusSeeOther)
	}
}

// humanMS is a duration of ms milliseconds in words a person reads at a glance: "850 ms",
// "4.2 s", "3 min 12 s", "2 h 5 min", "3 d 4 h".
func humanMS(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return fmt.Sprintf("%d ms", ms)
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	case d < time.Hour:
		return pair(int64(d/time.Minute), "min", int64(d%time.Minute/time.Second), "s")
	case d < 24*time.Hour:
		return pair(int64(d/time.Hour), "h", int64(d%time.Hour/time.Minute), "min")
	default:
		return pair(int64(d/(24*time.Hour)), "d", int64(d%(24*time.Hour)/time.Hour), "h")
	}
}

// pair is "a ua b ub", or "a ua" when b is 0.
func pair(a int64, ua string, b int64, ub string) string {
	if b == 0 {
		return fmt.Sprintf("%d %s", a, ua)
	}
	return fmt.Sprintf("%d %s %d %s", a, ua, b, ub)
}

// SessionURL is the console's page of agent's session id.
func SessionURL(agent, id string) string {
	return "/ui/sessions/" + url.PathEscape(agent) + "/" + url.PathEscape(id)
}

// The session page's bounds: calls and commands per page, the bytes of a file shown as text,
// and how long a look at its files may take (a box frozen meanwhile answers nothing).
const (
	sessionRows  = 50
	viewMaxBytes = 1 << 20
	lookTimeout  = 15 * time.Second
)

type sessionView struct {
	S sandbox.SessionInfo
	// Calls and Commands are a page each; *Next the URL of the next, *Error why they are not
	// shown.
	Calls                 []store.ExecutionSummary
	CallsNext, CallsError string
	Commands              []sandbox.ProcessInfo
	CommandsNext          string
	CommandsError         string
	// Files: Browsable when active; else NotBrowsable says why. Path is the directory or file
	// shown, Crumbs its parents. Entries list a directory; File is a file shown as Text (or
	// Binary, or TooLarge to show) with its DownloadURL.
	Browsable    bool
	NotBrowsable string
	FilesError   string
	FilesStatus  int // the page's HTTP status when FilesError is set: as REST's for the error
	Path         string
	Crumbs       []crumb
	Entries      []entryView
	Truncated    bool
	// MoreEntries is how many entries of the directory are not shown (past listMaxEntries);
	// with Truncated, at least that many.
	MoreEntries int
	File        *sandbox.FileEntry
	Text        string
	Cut         bool
	Binary      bool
	DownloadURL string
	ViewMax     int64
	ReadMax     int64
	// Ports are what listens, and the shares (ports.go).
	Ports portsView
}

type crumb struct{ Name, URL string }

// listMaxEntries is the most entries of a directory a session's page shows; the rest are
// counted, and listed by sandpit session ls or the REST API.
const listMaxEntries = 1000

type entryView struct {
	sandbox.FileEntry
	URL, DownloadURL string
	TooLarge         bool
}

// sessionPage shows one session of an agent: its state and history, its calls (from the
// ledger), its commands (from the ledger) and, while it is active, its files: ?path= a
// directory lists it, a file shows it as text.
func (c *Console) sessionPage(w http.ResponseWriter, r *http.Request, l login) {
	agent, id, info, ok := c.session(w, r)
	if !ok {
		return
	}
	v := c.sessionView(r, agent, id, info)
	c.render(w, r, cmp.Or(v.FilesStatus, http.StatusOK), "session", l.page("Session "+id, "sessions", v))
}

// sessionView reads what the page of agent's session id (in state info) shows.
func (c *Console) sessionView(r *http.Request, agent, id string, info sandbox.SessionInfo) sessionView {
	q := r.URL.Query()
	v := sessionView{S: info, ViewMax: viewMaxBytes, ReadMax: session.MaxReadBytes}
	base := SessionURL(agent, id)
	if c.cfg.Ledger == nil {
		v.CallsError = "This daemon keeps no ledger of executions."
		v.CommandsError = v.CallsError
	} else {
		calls, next, err := c.cfg.Ledger.ListExecutions(r.Context(), store.ExecutionFilter{Agent: agent, SessionID: id},
			store.Page{Limit: sessionRows, Cursor: q.Get("calls")})
		v.Calls, v.CallsError = calls, c.listError(r, "calls", err)
		if next != "" {
			v.CallsNext = withQuery(base, q, "calls", next) + "#calls"
		}
		cmds, next, err := c.cfg.Ledger.SessionCommands(r.Context(), agent, id, store.Page{Limit: sessionRows, Cursor: q.Get("commands")})
		v.Commands, v.CommandsError = cmds, c.listError(r, "commands", err)
		if next != "" {
			v.CommandsNext = withQuery(base, q, "commands", next) + "#commands"
		}
	}
	c.sessionPorts(r, &v.Ports, info)
	c.sessionFiles(r, &v, agent, id, q.Get("path"))
	return v
}

// session reads the session the path names ({agent}, {id}); when it cannot (no sessions kept,
// a bad agent name, no such session), it answers with the error page and ok false.
func (c *Console) session(w http.ResponseWriter, r *http.Request) (agent, id string, info sandbox.SessionInfo, ok bool) {
	agent, id = r.PathValue("agent"), r.PathValue("id")
	switch {
	case c.cfg.Sessions == nil:
		c.errorPage(w, r, http.StatusNotFound, "This daemon keeps no sessions.")
		return agent, id, info, false
	case !sandbox.ValidAgent(agent):
		c.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("%q is not an agent name, so it has no sessions.", agent))
		return agent, id, info, false
	}
	info, err := c.cfg.Sessions.Info(r.Context(), agent, id)
	if err != nil {
		switch {
		case errors.Is(err, sandbox.ErrSessionNotFound):
			c.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("Agent %s has no session %s (or its record was pruned).", agent, id))
			return agent, id, info, false
		case errclass.Of(err) == errclass.NotFound:
			// Held by another daemon sharing the ledger: its error says which, and where it
			// answers (as REST says).
			c.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("Session %s of agent %s is not held by this daemon: %v.", id, agent, err))
			return agent, id, info, false
		}
		c.log.Error("console: reading a session", "agent", agent, "session", id, "error", err)
		c.errorPage(w, r, http.StatusInternalServerError, "Reading the session failed; the daemon log has the details.")
		return agent, id, info, false
	}
	return agent, id, info, true
}

// listError says why a listing of the session page failed ("" when it did not).
func (c *Console) listError(r *http.Request, what string, err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, store.ErrInvalidCursor):
		return "The page cursor is not valid: follow the console's own \"older\" link."
	}
	c.log.Error("console: listing a session's "+what, "path", r.URL.Path, "error", err)
	return "Listing the session's " + what + " failed; the daemon log has the details."
}

// withQuery returns base with q, key set to value.
func withQuery(base string, q url.Values, key, value string) string {
	out := url.Values{}
	for k, v := range q {
		out[k] = v
	}
	out.Set(key, value)
	return base + "?" + out.Encode()
}

// notBrowsable says why the files of a session in state info are not browsable ("" when they
// are).
func notBrowsable(info sandbox.SessionInfo) string {
	switch info.State {
	case sandbox.SessionActive:
		return ""
	case sandbox.SessionPaused:
		return "This session is paused: its box is frozen, so its files cannot be read. Resume it (POST …/resume, or sandpit session resume) to browse them; looking here does not resume it."
	case sandbox.SessionHibernated:
		return "This session is hibernated: its files are saved in its hibernation file on the daemon's disk, not in a running box, so they cannot be browsed. Resume it to browse them; looking here does not resume it."
	case sandbox.SessionEnded:
		return "This session has ended (" + string(info.EndReason) + "): its box and its files were removed with it. Its calls and commands stay in the ledger."
	}
	return "This session is " + string(info.State) + ": its files cannot be browsed."
}

// sessionFiles fills v's files part for p (a directory or a file; "": the home).
func (c *Console) sessionFiles(r *http.Request, v *sessionView, agent, id, p string) {
	if v.NotBrowsable = notBrowsable(v.S); v.NotBrowsable != "" {
		return
	}
	v.Browsable = true
	if p == "" {
		p = sandbox.SessionHome
	}
	if !strings.HasPrefix(p, "/") {
		p = path.Join(sandbox.SessionHome, p)
	}
	v.Path, v.Crumbs = p, crumbs(agent, id, p)
	ctx, cancel := context.WithTimeout(r.Context(), lookTimeout)
	defer cancel()
	sess, err := c.cfg.Sessions.Look(ctx, agent, id)
	var listing sandbox.FileListing
	if err == nil {
		listing, err = sess.LookFiles(ctx, p, 1)
	}
	if err == nil {
		v.Truncated = listing.Truncated
		entries := listing.Entries
		if len(entries) > listMaxEntries {
			v.MoreEntries, entries = len(entries)-listMaxEntries, entries[:listMaxEntries]
		}
		for _, e := range entries {
			ev := entryView{FileEntry: e, URL: FilesURL(agent, id, e.Path)}
			if e.Type == "file" {
				ev.DownloadURL, ev.TooLarge = DownloadURL(agent, id, e.Path), e.SizeBytes > session.MaxReadBytes
			}
			v.Entries = append(v.Entries, ev)
		}
		return
	}
	if errclass.Of(err) != errclass.Conflict { // not a directory: read it as a file below
		v.FilesError, v.FilesStatus = c.filesError(r, err), filesStatus(err)
		return
	}
	got, err := sess.LookFile(ctx, p, 0, viewMaxBytes)
	if err != nil {
		v.FilesError, v.FilesStatus = c.filesError(r, err), filesStatus(err)
		return
	}
	defer got.Done() // in the daemon's read budget until made into the page's text
	ent := got.Entry
	v.File, v.DownloadURL = &ent, DownloadURL(agent, id, p)
	text, cut := got.Content, ent.SizeBytes > int64(len(got.Content))
	if cut { // the last rune may be cut in two
		for i := 0; i < utf8.UTFMax && len(text) > 0 && !utf8.Valid(text); i++ {
			text = text[:len(text)-1]
		}
	}
	if !utf8.Valid(text) || strings.ContainsRune(string(text), 0) {
		v.Binary = true
		return
	}
	v.Text, v.Cut = showControls(string(text)), cut
}

// filesError says why a look at a session's files failed, in the API's words for what the
// person asked (a path outside the home, a missing file, one too large) and the session's state
// changing meanwhile; anything else goes to the log.
func (c *Console) filesError(r *http.Request, err error) string {
	switch errclass.Of(err) {
	case errclass.Invalid, errclass.NotFound, errclass.Conflict, errclass.TooLarge, errclass.Gone, errclass.Busy:
		return err.Error()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "The session's box did not answer in " + lookTimeout.String() + " (paused meanwhile, or very busy): reload to try again."
	}
	c.log.Error("console: reading a session's files", "path", r.URL.Path, "error", err)
	return "Reading the session's files failed; the daemon log has the details."
}

// FilesURL is the session page showing the file or directory p.
func FilesURL(agent, id, p string) string {
	return SessionURL(agent, id) + "?" + url.Values{"path": {p}}.Encode() + "#files"
}

// DownloadURL is the console's URL of the bytes of session file p.
func DownloadURL(agent, id, p string) string {
	return SessionURL(agent, id) + "/download?" + url.Values{"path": {p}}.Encode()
}

// crumbs are the links to p's parents from the home down, and p itself (without a link).
func crumbs(agent, id, p string) []crumb {
	out := []crumb{{Name: sandbox.SessionHome, URL: FilesURL(agent, id, sandbox.SessionHome)}}
	rest, ok := strings.CutPrefix(p, sandbox.SessionHome+"/")
	if !ok {
		if p != sandbox.SessionHome {
			out = append(out, crumb{Name: p})
		}
		out[len(out)-1].URL = ""
		return out
	}
	at := sandbox.SessionHome
	for _, part := range strings.Split(rest, "/") {
		at += "/" + part
		out = append(out, crumb{Name: part, URL: FilesURL(agent, id, at)})
	}
	out[len(out)-1].URL = ""
	return out
}

// sessionDownload sends a file of an active session as an attachment named as the file, with
// the output files' protective headers (a type the browser does not sniff, a sandboxing CSP).
func (c *Console) sessionDownload(w http.ResponseWriter, r *http.Request, l login) {
	agent, id, info, ok := c.session(w, r)
	if !ok {
		return
	}
	if why := notBrowsable(info); why != "" {
		c.errorPage(w, r, http.StatusConflict, why)
		return
	}
	p := r.URL.Query().Get("path")
	if p == "" {
		c.errorPage(w, r, http.StatusBadRequest, "Give the file to download as ?path= (a path under /home/user).")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), lookTimeout)
	defer cancel()
	sess, err := c.cfg.Sessions.Look(ctx, agent, id)
	if err != nil {
		c.errorPage(w, r, filesStatus(err), c.filesError(r, err))
		return
	}
	got, err := sess.LookFile(ctx, p, 0, 0)
	if err != nil {
		c.errorPage(w, r, filesStatus(err), c.filesError(r, err)+tooLargeHint(err))
		return
	}
	defer got.Done() // in the daemon's read budget until written
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(got.Entry.Path)}))
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	h.Set("Content-Length", strconv.Itoa(len(got.Content)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(got.Content)
}

// filesStatus is the HTTP status of a look at a session's files that failed with err: the
// REST API's for its class (httpapi.Status), and 504 when the box did not answer in the
// console's time (lookTimeout).
func filesStatus(err error) int {
	if errclass.Of(err) == nil && errors.Is(err, context.DeadlineExceeded) {
		return http.StatusGatewayTimeout
	}
	return httpapi.Status(err)
}

// tooLargeHint adds how to fetch a file too large for one read.
func tooLargeHint(err error) string {
	if errclass.Of(err) != errclass.TooLarge {
		return ""
	}
	return " Copy it with sandpit session cp ID:PATH FILE, which reads it in parts."
}
