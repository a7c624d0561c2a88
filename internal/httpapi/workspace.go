package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/connlimit"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
)

// A session's workspace over REST: its commands and processes, and its files by path (see
// docs/sessions.md).

// maxCommandBody bounds a command's JSON body (its stdin as base64 included).
const maxCommandBody = 12 << 20

// MaxFileWriteBytes bounds a file written through REST (a raw body); the session's disk cap
// (run_dir_bytes) bounds what it keeps.
const MaxFileWriteBytes = 1 << 30

func (a *api) routeWorkspace() {
	s := "/v1/agents/{agent}/sessions/{id}"
	for _, rt := range []struct {
		pattern string
		fn      sessionHandler
	}{
		{"POST " + s + "/commands", a.command},
		{"GET " + s + "/processes", a.processes},
		{"GET " + s + "/processes/{pid}", a.process},
		{"GET " + s + "/processes/{pid}/output", a.attach},
		{"POST " + s + "/processes/{pid}/wait", a.waitProcess},
		{"POST " + s + "/processes/{pid}/input", a.processInput},
		{"POST " + s + "/processes/{pid}/signal", a.signalProcess},
		{"POST " + s + "/processes/{pid}/resize", a.resizeProcess},
		{"GET " + s + "/files", a.readSessionFile},
		{"PUT " + s + "/files", a.putFile},
		{"POST " + s + "/files", a.writeFile},
		{"DELETE " + s + "/files", a.removeFile},
		{"GET " + s + "/files/list", a.listFiles},
		{"GET " + s + "/files/stat", a.statFile},
		{"POST " + s + "/files/mkdir", a.mkdir},
		{"POST " + s + "/files/rename", a.renameFile},
	} {
		a.handle(rt.pattern, a.inSession(rt.fn, false))
	}
	// A raw file write streams its body to the session in chunks, up to MaxFileWriteBytes (a
	// trial's 100 MiB upload was refused by the held bodies' 64 MiB).
	a.streamed = map[string]bool{"PUT " + s + "/files": true}
	if a.ledger != nil {
		a.handle("GET "+s+"/commands", a.listCommands)
		a.handle("GET "+s+"/egress", a.listSessionEgress)
	}
}

// sessionHandler serves a request to one session, the path's {id} of its {agent}.
type sessionHandler func(w http.ResponseWriter, r *http.Request, s *session.Session)

// inSession looks the path's session up once and calls fn with it: 400 when {agent} is not an
// agent name, 404 when the agent has no such session, 410 when it has ended (with ended, fn
// answers an ended session itself: DELETE answers it as it ended).
func (a *api) inSession(fn sessionHandler, ended bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		agent, err := agentOf(r)
		if err != nil {
			writeError(w, err)
			return
		}
		s, err := a.sessions.Get(r.Context(), agent, r.PathValue("id"))
		if gone, ok := errors.AsType[*sandbox.SessionEndedError](err); ok && ended {
			writeJSON(w, http.StatusOK, SessionOf(gone.Info))
			return
		}
		if err != nil {
			writeError(w, err)
			return
		}
		fn(w, r, s)
	}
}

// knownSession checks that agent has (or had, as long as the ledger keeps it) session id: the
// records of an ended session stay readable, another agent's are a 404.
func (a *api) knownSession(r *http.Request, agent, id string) error {
	_, err := a.sessions.Info(r.Context(), agent, id)
	return err
}

// params reads a request's query parameters, keeping the first bad one's error in err (each
// read after it returns the zero value).
type params struct {
	q   url.Values
	err error
}

func queryOf(r *http.Request) *params { return &params{q: r.URL.Query()} }

// path returns ?path=, or def when it is absent; without def an absent path is an error.
func (p *params) path(def string) string {
	if p.err != nil {
		return ""
	}
	v := p.q.Get("path")
	if v == "" {
		if def == "" {
			p.err = invalid("path", "is missing: give ?path= a path under /home/user (relative paths start there)")
		}
		return def
	}
	return v
}

// int returns ?name= as a non-negative integer, 0 when absent.
func (p *params) int(name string) int64 {
	v := p.q.Get(name)
	if p.err != nil || v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		p.err = invalid(name, "must be a non-negative integer (in the query), not %q", v)
		return 0
	}
	return n
}

// bool returns ?name= as true or false, false when absent.
func (p *params) bool(name string) bool {
	if p.err != nil {
		return false
	}
	b, err := boolParam(p.q, name)
	p.err = err
	return b
}

func termSizeOf(t *sandbox.TermSize) *apitype.TermSize {
	if t == nil {
		return nil
	}
	return &apitype.TermSize{Rows: t.Rows, Cols: t.Cols}
}

// ProcessOf maps a process to its wire form.
func ProcessOf(p session.ProcessInfo) apitype.Process {
	out := apitype.Process{ID: p.ID, SessionID: p.SessionID, PID: p.PID, Command: p.Command, CommandTruncated: p.CommandTruncated, Argv: p.Argv, Cwd: p.Cwd,
		Background: p.Background, PTY: termSizeOf(p.PTY), TimeoutMS: p.TimeoutMS, State: p.State, StartedAt: p.StartedAt,
		EndedAt: p.EndedAt, StdoutBytes: p.StdoutBytes, StderrBytes: p.StderrBytes}
	if e := p.End; e != nil {
		out.End = &apitype.ProcessEnd{ExitCode: e.ExitCode, Signal: e.Signal, Outcome: apitype.Outcome(e.Outcome), Reason: e.Reason,
			DurationMS: e.DurationMS, StdoutTruncated: e.StdoutTruncated, StderrTruncated: e.StderrTruncated}
	}
	return out
}

// CommandEventOf maps a command's event to its wire form.
func CommandEventOf(ev session.CommandEvent) apitype.CommandEvent {
	out := apitype.CommandEvent{Type: ev.Type, Data: ev.Data, Dropped: ev.Dropped}
	if ev.Process != nil {
		p := ProcessOf(*ev.Process)
		out.Process = &p
	}
	return out
}

// FileEntryOf maps a file's entry to its wire form.
func FileEntryOf(e sandbox.FileEntry) apitype.FileEntry { return apitype.FileEntry(e) }

var commandShape = shape{
	fields: []string{"cmd", "argv", "cwd", "env", "timeout_ms", "stdin", "stdin_base64", "background", "pty"},
	expect: map[string]string{
		"cmd":          `must be a string run with bash -lc, such as "ls -la"`,
		"argv":         `must be a list of strings such as ["ls", "-la"]`,
		"cwd":          "must be a path string (relative paths start at /home/user)",
		"env":          `must be an object of strings such as {"LANG": "C"}`,
		"timeout_ms":   "must be an integer number of milliseconds",
		"stdin":        "must be a string",
		"stdin_base64": "must be a base64 string",
		"background":   "must be true or false",
		"pty":          `must be an object such as {"rows": 24, "cols": 80}`,
	},
	example: `{"cmd": "echo 1"}`,
}

// decodeB64 decodes a base64 field, or says which field is not base64.
func decodeB64(field, s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, invalid(field, "must be standard base64 (%v)", err)
	}
	return b, nil
}

// textOr returns text as bytes, or b64 decoded; giving both is an error naming the fields.
func textOr(field, text, b64Field, b64 string) ([]byte, error) {
	switch {
	case text != "" && b64 != "":
		return nil, invalid(field, "give %s or %s, not both", field, b64Field)
	case b64 != "":
		return decodeB64(b64Field, b64)
	}
	return []byte(text), nil
}

func (a *api) command(w http.ResponseWriter, r *http.Request, s *session.Session) {
	var b apitype.CommandRequest
	if err := readBody(w, r, maxCommandBody, &b, commandShape); err != nil {
		writeError(w, err)
		return
	}
	stdin, err := textOr("stdin", b.Stdin, "stdin_base64", b.StdinBase64)
	if err != nil {
		writeError(w, err)
		return
	}
	req := session.CommandRequest{Cmd: b.Cmd, Argv: b.Argv, Cwd: b.Cwd, Env: b.Env, TimeoutMS: b.TimeoutMS, Stdin: stdin, Background: b.Background}
	if b.PTY != nil {
		req.PTY = &sandbox.TermSize{Rows: b.PTY.Rows, Cols: b.PTY.Cols}
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	if b.Background || !acceptsNDJSON(r.Header.Values("Accept")) {
		res, err := s.Command(r.Context(), req, nil)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		status := http.StatusOK
		if b.Background {
			status = http.StatusCreated
			w.Header().Set("Location", "/v1/agents/"+s.Agent()+"/sessions/"+s.ID()+"/processes/"+res.Process.ID)
		}
		writeJSON(w, status, apitype.CommandResult{Process: ProcessOf(res.Process), Stdout: res.Stdout, Stderr: res.Stderr})
		return
	}
	lw := &lineWriter{w: w, rc: rc}
	_, err = s.Command(r.Context(), req, func(ev session.CommandEvent) { lw.line(CommandEventOf(ev)) })
	a.endStream(w, r, lw, err)
}

// endStream answers err at the end of a stream: an error answer when nothing was written yet,
// else an error line.
func (a *api) endStream(w http.ResponseWriter, r *http.Request, lw *lineWriter, err error) {
	switch {
	case err == nil:
	case !lw.begun():
		a.fail(w, r, err)
	default:
		a.logFailure(r, err)
		if e := classify(err); e.status != StatusClientClosedRequest {
			lw.line(apitype.StreamLine{Type: apitype.StreamError, Error: &e.detail})
		}
	}
	_ = lw.rc.Flush()
}

// lineWriter writes NDJSON lines, each flushed, starting the 200 answer with the first. Its
// lines may come from several goroutines (a command's events and its end).
type lineWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController

	mu      sync.Mutex
	started bool
	err     error
}

// begun says whether the first line has been written (the answer has started).
func (l *lineWriter) begun() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.started
}

func (l *lineWriter) line(v any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	b, err := marshal(v)
	if err != nil {
		l.err = err
		return
	}
	_ = l.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if !l.started {
		l.started = true
		startStream(l.w)
	}
	if _, err := l.w.Write(b); err != nil {
		l.err = err
		return
	}
	l.err = l.rc.Flush()
}

// listCommands answers a page of the commands the ledger recorded for the session (each as it
// ended), newest first: the session's own, also once it has ended, as long as the ledger keeps
// them. A session the agent does not have is 404, as on the session's other routes.
// listSessionEgress answers a page of the outbound connections the ledger recorded for the
// session's commands and for what its calls left running (network "allowlist"), newest first:
// also once it has ended, as long as the ledger keeps them. A call's own connections are in
// its execution's record.
func (a *api) listSessionEgress(w http.ResponseWriter, r *http.Request) {
	agent, _, p, err := listing(r)
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	if err := a.knownSession(r, agent, id); err != nil {
		writeError(w, err)
		return
	}
	list, next, err := a.ledger.SessionEgress(r.Context(), agent, id, p)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apitype.EgressList{Connections: each(list, func(c sandbox.EgressConnection) apitype.EgressConnection {
		return apitype.EgressConnection(c)
	}), NextCursor: next})
}

func (a *api) listCommands(w http.ResponseWriter, r *http.Request) {
	agent, err := agentOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	_, _, p, err := listing(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := a.knownSession(r, agent, id); err != nil {
		writeError(w, err)
		return
	}
	list, next, err := a.ledger.SessionCommands(r.Context(), agent, id, p)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apitype.CommandList{Commands: each(list, ProcessOf), NextCursor: next})
}

func (a *api) processes(w http.ResponseWriter, r *http.Request, s *session.Session) {
	list, err := s.Processes(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, apitype.ProcessList{Processes: each(list, ProcessOf)})
}

func (a *api) process(w http.ResponseWriter, r *http.Request, s *session.Session) {
	p, err := s.Process(r.Context(), r.PathValue("pid"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ProcessOf(p))
}

// attach streams a process's output from now on (NDJSON), with ?tail=true the latest output
// it kept first.
func (a *api) attach(w http.ResponseWriter, r *http.Request, s *session.Session) {
	q := queryOf(r)
	tail := q.bool("tail")
	if q.err != nil {
		writeError(w, q.err)
		return
	}
	done, err := a.streams.Open(s.Agent(), s.ID())
	if err != nil {
		writeError(w, err)
		return
	}
	defer done()
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	lw := &lineWriter{w: w, rc: rc}
	_, err = s.Attach(r.Context(), r.PathValue("pid"), tail, func(ev session.CommandEvent) { lw.line(CommandEventOf(ev)) })
	a.endStream(w, r, lw, err)
}

func (a *api) waitProcess(w http.ResponseWriter, r *http.Request, s *session.Session) {
	ctx := r.Context()
	if v := r.URL.Query().Get("timeout_ms"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			writeError(w, invalid("timeout_ms", "must be a positive integer number of milliseconds (in the query)"))
			return
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(n)*time.Millisecond)
		defer cancel()
	}
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	p, err := s.Wait(ctx, r.PathValue("pid"))
	if err != nil && ctx.Err() != nil && r.Context().Err() == nil {
		// The wait's own timeout: the process as it is now.
		p, err = s.Process(r.Context(), r.PathValue("pid"))
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ProcessOf(p))
}

var inputShape = shape{fields: []string{"data", "data_base64", "close"},
	expect:  map[string]string{"data": "must be a string", "data_base64": "must be a base64 string", "close": "must be true or false"},
	example: `{"data": "yes\n"}`}

func (a *api) processInput(w http.ResponseWriter, r *http.Request, s *session.Session) {
	var b apitype.ProcessInput
	if err := readBody(w, r, maxCommandBody, &b, inputShape); err != nil {
		writeError(w, err)
		return
	}
	data, err := textOr("data", b.Data, "data_base64", b.DataBase64)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.Input(r.Context(), r.PathValue("pid"), data, b.Close); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

var signalShape = shape{fields: []string{"signal"}, expect: map[string]string{"signal": `must be a signal name such as "SIGTERM"`},
	example: `{"signal": "SIGTERM"}`}

func (a *api) signalProcess(w http.ResponseWriter, r *http.Request, s *session.Session) {
	var b apitype.ProcessSignal
	if err := readBody(w, r, 4096, &b, signalShape); err != nil {
		writeError(w, err)
		return
	}
	if err := s.Signal(r.Context(), r.PathValue("pid"), b.Signal); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

var resizeShape = shape{fields: []string{"rows", "cols"}, expect: map[string]string{"rows": "must be an integer from 1 to 65535",
	"cols": "must be an integer from 1 to 65535"}, example: `{"rows": 24, "cols": 80}`}

func (a *api) resizeProcess(w http.ResponseWriter, r *http.Request, s *session.Session) {
	var b apitype.TermSize
	if err := readBody(w, r, 4096, &b, resizeShape); err != nil {
		writeError(w, err)
		return
	}
	if err := s.Resize(r.Context(), r.PathValue("pid"), sandbox.TermSize{Rows: b.Rows, Cols: b.Cols}); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// readSessionFile answers a file's bytes (application/octet-stream, its entry in headers), or with
// ?format=json the entry and the bytes as text or base64.
func (a *api) readSessionFile(w http.ResponseWriter, r *http.Request, s *session.Session) {
	q := queryOf(r)
	p, offset, length := q.path(""), q.int("offset"), q.int("length")
	if q.err != nil {
		writeError(w, q.err)
		return
	}
	format := q.q.Get("format")
	if format != "" && format != "json" && format != "raw" {
		writeError(w, invalid("format", `must be "raw" (the default: the bytes) or "json", not %q`, format))
		return
	}
	got, err := s.ReadFile(r.Context(), p, offset, length)
	if err != nil {
		writeError(w, err)
		return
	}
	// Its bytes count in the daemon's read budget until written: a client that stops
	// reading holds them for at most connlimit.WriteStall.
	defer got.Done()
	if format == "json" {
		out := apitype.FileContent{Entry: FileEntryOf(got.Entry)}
		if utf8.Valid(got.Content) {
			s := string(got.Content)
			out.Content = &s
		} else {
			out.ContentBase64 = base64.StdEncoding.EncodeToString(got.Content)
		}
		_ = connlimit.Write(w, answerJSON(w, http.StatusOK, out))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", "attachment")
	h.Set("Content-Length", strconv.Itoa(len(got.Content)))
	h.Set("X-Sandpit-File-Size", strconv.FormatInt(got.Entry.SizeBytes, 10))
	h.Set("Last-Modified", got.Entry.ModifiedAt.UTC().Format(http.TimeFormat))
	w.WriteHeader(http.StatusOK)
	_ = connlimit.Write(w, got.Content)
}

// putFile writes a file from the raw body (?path=, ?parents=true).
func (a *api) putFile(w http.ResponseWriter, r *http.Request, s *session.Session) {
	q := queryOf(r)
	p, parents := q.path(""), q.bool("parents")
	if q.err != nil {
		writeError(w, q.err)
		return
	}
	if r.ContentLength > MaxFileWriteBytes {
		w.Header().Set("Connection", "close")
		writeError(w, &requestError{status: http.StatusRequestEntityTooLarge, code: apitype.CodeTooLarge,
			msg: fmt.Sprintf("the file is %d bytes; one write takes at most %d bytes", r.ContentLength, MaxFileWriteBytes)})
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	body := http.MaxBytesReader(w, r.Body, MaxFileWriteBytes)
	ent, err := s.WriteFile(r.Context(), p, body, parents)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, FileEntryOf(ent))
}

var fileWriteShape = shape{fields: []string{"path", "content", "content_base64", "parents"},
	expect: map[string]string{"path": "must be a path string", "content": "must be a string (text)", "content_base64": "must be a base64 string",
		"parents": "must be true or false"},
	example: `{"path": "notes/a.txt", "content": "hello", "parents": true}`}

// writeFile writes a file from a JSON body (text or base64).
func (a *api) writeFile(w http.ResponseWriter, r *http.Request, s *session.Session) {
	var b apitype.FileWrite
	if err := readBody(w, r, maxCommandBody*4, &b, fileWriteShape); err != nil {
		writeError(w, err)
		return
	}
	if b.Path == "" {
		writeError(w, invalid("path", "is missing: give a path under /home/user (relative paths start there)"))
		return
	}
	if b.Content == nil && b.ContentBase64 == "" {
		// Not an empty file: a body without either would have emptied one that existed.
		writeError(w, invalid("content", `is missing: give content (the file's text; "" for an empty file) or content_base64`))
		return
	}
	text := ""
	if b.Content != nil {
		text = *b.Content
	}
	data, err := textOr("content", text, "content_base64", b.ContentBase64)
	if err != nil {
		writeError(w, err)
		return
	}
	ent, err := s.WriteFile(r.Context(), b.Path, bytes.NewReader(data), b.Parents)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, FileEntryOf(ent))
}

func (a *api) removeFile(w http.ResponseWriter, r *http.Request, s *session.Session) {
	q := queryOf(r)
	p, recursive := q.path(""), q.bool("recursive")
	if q.err != nil {
		writeError(w, q.err)
		return
	}
	if err := s.RemoveFile(r.Context(), p, recursive); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *api) listFiles(w http.ResponseWriter, r *http.Request, s *session.Session) {
	q := queryOf(r)
	p, depth := q.path(apitype.SessionHome), q.int("depth")
	if q.err != nil {
		writeError(w, q.err)
		return
	}
	if depth == 0 {
		depth = 1
	}
	l, err := s.ListFiles(r.Context(), p, int(min(depth, 1000)))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, apitype.FileListing{Entries: each(l.Entries, FileEntryOf), Truncated: l.Truncated})
}

func (a *api) statFile(w http.ResponseWriter, r *http.Request, s *session.Session) {
	q := queryOf(r)
	p := q.path("")
	if q.err != nil {
		writeError(w, q.err)
		return
	}
	ent, err := s.StatFile(r.Context(), p)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, FileEntryOf(ent))
}

var mkdirShape = shape{fields: []string{"path", "parents"}, expect: map[string]string{"path": "must be a path string", "parents": "must be true or false"},
	example: `{"path": "data/raw", "parents": true}`}

func (a *api) mkdir(w http.ResponseWriter, r *http.Request, s *session.Session) {
	var b apitype.FileMkdir
	if err := readBody(w, r, 8192, &b, mkdirShape); err != nil {
		writeError(w, err)
		return
	}
	ent, err := s.MakeDir(r.Context(), b.Path, b.Parents)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, FileEntryOf(ent))
}

var renameShape = shape{fields: []string{"from", "to", "overwrite"}, expect: map[string]string{"from": "must be a path string", "to": "must be a path string",
	"overwrite": "must be true or false"}, example: `{"from": "a.txt", "to": "done/a.txt"}`}

func (a *api) renameFile(w http.ResponseWriter, r *http.Request, s *session.Session) {
	var b apitype.FileRename
	if err := readBody(w, r, 16384, &b, renameShape); err != nil {
		writeError(w, err)
		return
	}
	ent, err := s.RenameFile(r.Context(), b.From, b.To, b.Overwrite)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, FileEntryOf(ent))
}
