package console_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/console"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/jobs"
	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// noEngine is the sandbox of these tests, which read stored records: it has a configuration
// and refuses to run anything (the console's runs are tested with the real engine in
// internal/app).
type noEngine struct{}

func (noEngine) Config() engine.Config { return engine.DefaultConfig() }
func (noEngine) Stats() engine.Stats   { return engine.Stats{Slots: 4, Busy: 1} }
func (noEngine) Ready(context.Context) error {
	return nil
}
func (noEngine) Validate(sandbox.Request) error { return nil }
func (noEngine) Execute(context.Context, sandbox.Request, func(sandbox.Event)) (sandbox.Result, error) {
	return sandbox.Result{}, errors.New("these tests run no code")
}

// harness is a console over a real store, served as the daemon serves it: /ui by the console,
// the rest by the API behind its token, all behind the Host/Origin guard.
type harness struct {
	st    *store.Store
	files *store.Files
	srv   *httptest.Server
	token string
	// commands counts the commands recorded.
	commands int
}

func newHarness(t testing.TB, token string) *harness { return newHarnessWith(t, token, nil) }

// newHarnessWith is newHarness with the console's view of the API wrapped by wrap (nil: as it is).
func newHarnessWith(t testing.TB, token string, wrap func(http.Handler) http.Handler) *harness {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(dir, store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	files, err := st.OpenFiles(ctx, filepath.Join(dir, store.FilesDir), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	lib := library.New(st, noEngine{}, 10)
	sched := jobs.New(st, lib, noEngine{}, jobs.Config{}, nil)
	api := httpapi.NewHandler(httpapi.Backend{Executor: noEngine{}, Ledger: st, Files: files, Library: lib, Jobs: sched}, nil)
	consoleAPI := http.Handler(api)
	if wrap != nil {
		consoleAPI = wrap(api)
	}
	ui, err := console.New(console.Config{Token: token, API: consoleAPI, Engine: noEngine{}, Ledger: st, Jobs: sched, Code: lib, Sessions: fakeSessions{}, Templates: fakeTemplates{},
		ForkServer: console.ForkServer{Enabled: true, Preload: []string{"numpy"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ui", ui)
	mux.Handle("/ui/", ui)
	mux.Handle("/", httpapi.RequireToken(api, token))
	srv := httptest.NewServer(httpapi.Guard(mux, nil))
	t.Cleanup(srv.Close)
	return &harness{st: st, files: files, srv: srv, token: token}
}

// record is a stored execution.
type record struct {
	agent, code, stdout, stderr string
	outcome                     sandbox.Outcome
	files                       map[string][]byte
	inputFiles                  []sandbox.InputFile
	running                     bool // Begin only
	session                     string
	results                     []sandbox.Display
}

// add stores r and returns its ID.
func (h *harness) add(t testing.TB, r record) string {
	t.Helper()
	ctx := context.Background()
	id := sandbox.NewID()
	if r.agent == "" {
		r.agent = "analyst"
	}
	if r.outcome == "" {
		r.outcome = sandbox.OutcomeOK
	}
	head := sandbox.Result{ID: id, Agent: r.agent, Origin: sandbox.Origin{Source: sandbox.SourceAPI}, StartedAt: time.Now().UTC(), TimeoutMS: 30000,
		SessionID: r.session}
	if err := h.st.Begin(ctx, sandbox.Spec{ID: id, Code: r.code, Input: json.RawMessage(`{"n": 3}`), TimeoutMS: 30000, Files: r.inputFiles}, head); err != nil {
		t.Fatal(err)
	}
	if r.running {
		return id
	}
	h.finish(t, id, r)
	return id
}

// finish records the end of the run id that add began.
func (h *harness) finish(t testing.TB, id string, r record) {
	t.Helper()
	ctx := context.Background()
	if r.agent == "" {
		r.agent = "analyst"
	}
	if r.outcome == "" {
		r.outcome = sandbox.OutcomeOK
	}
	res := sandbox.Result{ID: id, Agent: r.agent, Origin: sandbox.Origin{Source: sandbox.SourceAPI}, Outcome: r.outcome, Success: r.outcome == sandbox.OutcomeOK,
		Stdout: r.stdout, Stderr: r.stderr, Output: json.RawMessage(`{"total": 6}`), DurationMS: 42, TimeoutMS: 30000, Start: "fork",
		Logs:    []sandbox.LogLine{{Level: "info", Message: "<b>log</b> line", CreatedAt: time.Now().UTC()}},
		Calls:   []sandbox.CallRecord{{Method: "search_memory", DurationMS: 3, RequestBytes: 20, ResponseBytes: 40, OK: true}},
		Results: r.results}
	for name, content := range r.files {
		sum := sha256.Sum256(content)
		mt := "application/octet-stream"
		if bytes.HasPrefix(content, []byte("\x89PNG")) {
			mt = "image/png"
		}
		f := sandbox.File{Name: name, SizeBytes: int64(len(content)), MediaType: mt, SHA256: hex.EncodeToString(sum[:])}
		if err := h.files.Put(ctx, id, f, content); err != nil {
			t.Fatal(err)
		}
		res.Files = append(res.Files, f)
	}
	if err := h.st.Finish(ctx, res); err != nil {
		t.Fatal(err)
	}
}

// command records a command of agent's session id that ended with exit, started a millisecond
// after the one recorded before it.
func (h *harness) command(t testing.TB, agent, id, line string, exit int) {
	t.Helper()
	h.commands++
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).Add(time.Duration(h.commands) * time.Millisecond)
	outcome := sandbox.OutcomeOK
	if exit != 0 {
		outcome = sandbox.OutcomeError
	}
	p := sandbox.ProcessInfo{ID: sandbox.NewProcessID(), SessionID: id, Command: line, State: "ended", StartedAt: at, StdoutBytes: 12,
		End: &sandbox.ProcessEnd{ExitCode: exit, Outcome: outcome, DurationMS: 5}}
	if err := h.st.RecordCommand(context.Background(), agent, p); err != nil {
		t.Fatal(err)
	}
}

// chartPNG is a 320x240 PNG with a diagonal line, standing in for a chart.
func chartPNG(t testing.TB) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 320, 240))
	for x := range 320 {
		for y := range 240 {
			img.Set(x, y, color.White)
		}
		img.Set(x, 239-x*240/320, color.RGBA{0x1f, 0x77, 0xb4, 0xff})
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// client is an HTTP client that keeps cookies and does not follow redirects.
func client(t testing.TB) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
