package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/jobs"
	"github.com/sandpit-dev/sandpit/internal/library"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// pngBytes starts as a PNG does.
var pngBytes = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR fake chart")

// echoRuntime "runs" code by returning each input file as an output file "out/<name>"
// (text/plain) and a chart "figure-1.png" when charts are on, as the executor would: one file
// event with the bytes per file, then the result listing them in name order. It keeps the specs.
type echoRuntime struct {
	mu    sync.Mutex
	specs []sandbox.Spec
}

func (r *echoRuntime) Ready(context.Context) error { return nil }

func (r *echoRuntime) Run(_ context.Context, _ int, spec sandbox.Spec, emit func(sandbox.Event)) (sandbox.Result, error) {
	r.mu.Lock()
	r.specs = append(r.specs, spec)
	r.mu.Unlock()
	type out struct {
		file    sandbox.File
		content []byte
	}
	var outs []out
	add := func(name, media string, content []byte) {
		sum := sha256.Sum256(content)
		outs = append(outs, out{sandbox.File{Name: name, SizeBytes: int64(len(content)), MediaType: media, SHA256: hex.EncodeToString(sum[:])}, content})
	}
	if spec.Charts {
		add("figure-1.png", "image/png", pngBytes)
	}
	for _, f := range spec.Files {
		add("out/"+f.Name, "text/plain; charset=utf-8", f.Content)
	}
	res := sandbox.Result{Outcome: sandbox.OutcomeOK, StartedAt: time.Now().UTC()}
	for _, o := range outs {
		if emit != nil {
			emit(sandbox.Event{Stream: sandbox.StreamFile, File: &o.file, Content: o.content})
		}
		res.Files = append(res.Files, o.file)
	}
	return res, nil
}

func (r *echoRuntime) last() sandbox.Spec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.specs[len(r.specs)-1]
}

func (r *echoRuntime) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.specs)
}

type fileStack struct {
	stack
	echo  *echoRuntime
	files *store.Files
	sch   *jobs.Scheduler
}

// newFileStack serves the API over a real store keeping files under quota, with cfg's limits.
func newFileStack(t *testing.T, cfg engine.Config, quota int64) *fileStack {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(t.Context(), filepath.Join(dir, store.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	st.SetRetention(store.Retention{MaxAge: 30 * 24 * time.Hour, MaxCount: 1000, MaxBytes: 1 << 30})
	files, err := st.OpenFiles(t.Context(), filepath.Join(dir, store.FilesDir), quota)
	if err != nil {
		t.Fatal(err)
	}
	rt := &echoRuntime{}
	svc := engine.NewService(rt, engine.Hooks{Recorder: st, Files: files}, cfg, nil)
	lib := library.New(st, svc, 0)
	sch := jobs.New(st, lib, svc, jobs.Config{}, nil)
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Backend{Executor: svc, Library: lib, Jobs: sch, Ledger: st, Files: files}, nil))
	t.Cleanup(srv.Close)
	return &fileStack{stack: stack{url: srv.URL, st: st}, echo: rt, files: files, sch: sch}
}

// get fetches path and returns the status, headers and bytes.
func (s *fileStack) get(t *testing.T, path string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.Get(s.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func fileJSON(name, content, encoding string) string {
	v := map[string]string{"name": name, "content": content}
	if encoding != "" {
		v["encoding"] = encoding
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// Every bad input file is refused before anything runs, with a 400 or 413 naming the file
// (its field) and the limit.
func TestBadInputFilesAreRefused(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.MaxInputFiles, cfg.MaxInputFileBytes, cfg.MaxInputFilesBytes = 3, 100, 150
	s := newFileStack(t, cfg, 1<<20)
	s.call(t, "POST", "/v1/agents/a/code", `{"name": "c", "code": "x"}`)
	x := func(n int) string { return strings.Repeat("x", n) }
	cases := []struct {
		name   string
		files  string
		status int
		field  string
		says   []string
	}{
		{"parent directory", `[` + fileJSON("../x", "a", "") + `]`, 400, "files[0].name", []string{`"../x"`}},
		{"absolute", `[` + fileJSON("ok", "", "") + `,` + fileJSON("/etc/passwd", "a", "") + `]`, 400, "files[1].name", []string{`"/etc/passwd"`, "absolute"}},
		{"NUL", `[{"name": "a\u0000b", "content": "a"}]`, 400, "files[0].name", []string{"U+0000"}},
		{"backslash", `[{"name": "a\\b", "content": "a"}]`, 400, "files[0].name", []string{"U+005C"}},
		{"duplicate", `[` + fileJSON("a.csv", "1", "") + `,` + fileJSON("a.csv", "2", "") + `]`, 400, "files[1].name", []string{`"a.csv"`, "twice"}},
		{"no name", `[{"content": "a"}]`, 400, "files[0].name", []string{"no name"}},
		{"too many", `[` + fileJSON("a", "", "") + `,` + fileJSON("b", "", "") + `,` + fileJSON("c", "", "") + `,` + fileJSON("d", "", "") + `]`,
			413, "files", []string{"4 files", "limit is 3", "max_input_files"}},
		{"one too large", `[` + fileJSON("big.txt", x(101), "") + `]`, 413, "files[0].content", []string{`"big.txt"`, "101 bytes", "limit is 100", "max_input_file_bytes"}},
		{"one too large in base64", `[` + fileJSON("big.bin", base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xff}, 101)), "base64") + `]`,
			413, "files[0].content", []string{`"big.bin"`, "101 bytes", "max_input_file_bytes"}},
		{"together too large", `[` + fileJSON("a", x(80), "") + `,` + fileJSON("b", x(80), "") + `]`, 413, "files", []string{"160 bytes", "150 bytes", `"b"`, "max_input_files_bytes"}},
		{"bad base64", `[` + fileJSON("a.bin", "not base64!", "base64") + `]`, 400, "files[0].content", []string{"files[0].content", "base64", `"a.bin"`}},
		{"unpadded base64", `[` + fileJSON("a.bin", "YQ", "base64") + `]`, 400, "files[0].content", []string{"base64"}},
		{"unknown encoding", `[` + fileJSON("a", "x", "latin-1") + `]`, 400, "files[0].encoding", []string{"files[0].encoding", `"latin-1"`, "utf-8", "base64"}},
		{"unknown field", `[{"name": "a", "contents": "x"}]`, 400, "files[0].contents", []string{"contents", "name, content and encoding"}},
		{"field in other case", `[{"Name": "a"}]`, 400, "files[0].Name", []string{"Name"}},
		{"not an object", `["a.csv"]`, 400, "files[0]", []string{"object"}},
		{"content not a string", `[{"name": "a", "content": [1]}]`, 400, "files[0].content", []string{"string"}},
		{"files not a list", `{"name": "a"}`, 400, "files", []string{"list of files"}},
	}
	for _, c := range cases {
		for _, route := range []struct{ path, body string }{
			{"/v1/executions", `{"code": "print(1)", "files": ` + c.files + `}`},
			{"/v1/agents/a/code/c/run", `{"files": ` + c.files + `}`},
			{"/v1/agents/a/jobs", `{"code_name": "c", "schedule": "@daily", "files": ` + c.files + `}`},
		} {
			t.Run(c.name+" "+route.path, func(t *testing.T) {
				st, v := s.call(t, "POST", route.path, route.body)
				e, _ := v["error"].(map[string]any)
				msg, _ := e["message"].(string)
				if st != c.status || e["field"] != c.field {
					t.Fatalf("%d field %v (%s), want %d naming %s", st, e["field"], msg, c.status, c.field)
				}
				for _, w := range c.says {
					if !strings.Contains(msg, w) {
						t.Errorf("message %q does not say %q", msg, w)
					}
				}
			})
		}
	}
	if n := s.echo.count(); n != 0 {
		t.Errorf("%d runs; a refused request must run nothing", n)
	}
	if _, v := s.call(t, "GET", "/v1/agents/a/jobs", ""); len(v["jobs"].([]any)) != 0 {
		t.Errorf("jobs %v; a refused job must not be saved", v["jobs"])
	}
}

// A body whose files pass the body limit is refused as too large before it is read, and the
// limit fits files at their caps: the largest files allowed, in base64, are taken.
func TestBodyLimitFitsTheFiles(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.MaxInputFiles, cfg.MaxInputFileBytes, cfg.MaxInputFilesBytes = 2, 3<<20, 6<<20
	s := newFileStack(t, cfg, 64<<20)
	big := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfe}, 3<<20))
	body := `{"code": "` + strings.Repeat("x", cfg.MaxCodeBytes) + `", "files": [` + fileJSON("a.bin", big, "base64") + `,` + fileJSON("b.bin", big, "base64") + `]}`
	if st, v := s.call(t, "POST", "/v1/executions", body); st != 200 || v["outcome"] != "ok" {
		t.Fatalf("files at their caps: %d %v", st, v)
	}
	_, limits := s.call(t, "GET", "/v1/limits", "")
	over := `{"code": "x", "files": [` + fileJSON("a.bin", strings.Repeat("A", int(limits["max_body_bytes"].(float64))), "base64") + `]}`
	st, v := s.call(t, "POST", "/v1/executions", over)
	if e, _ := v["error"].(map[string]any); st != 413 || e["code"] != "too_large" || !strings.Contains(e["message"].(string), "input files at most") {
		t.Fatalf("over the body limit: %d %v", st, v)
	}
	for k, want := range map[string]float64{"max_input_files": 2, "max_input_file_bytes": 3 << 20, "max_input_files_bytes": 6 << 20,
		"output_files": 64, "output_file_bytes": 8 << 20, "output_files_bytes": 16 << 20, "max_inline_file_bytes": 1 << 20} {
		if limits[k] != want {
			t.Errorf("limits %s = %v, want %v", k, limits[k], want)
		}
	}
	// The ledger's retention, and what the run above takes: its code and files at their caps.
	ledger, _ := limits["ledger"].(map[string]any)
	if ledger["ledger_max_age_days"] != 30.0 || ledger["ledger_max_executions"] != 1000.0 || ledger["ledger_max_bytes"] != float64(1<<30) {
		t.Errorf("limits ledger = %v, want 30 days, 1000 records, 1 GiB", ledger)
	}
	if used, _ := ledger["used_bytes"].(float64); used < float64(cfg.MaxCodeBytes) {
		t.Errorf("limits ledger used_bytes = %v, want at least the run's code (%d bytes)", ledger["used_bytes"], cfg.MaxCodeBytes)
	}
	if limits["charts"] != true {
		t.Errorf("limits charts = %v, want true", limits["charts"])
	}
}

// Input files reach the run byte-exact (UTF-8 text and binary), and the run's output files come
// back: listed in the answer (inline when asked), as file lines of the stream before the
// result, and at GET /v1/executions/{id}/files/{name} with headers that keep a browser from
// running them.
func TestFilesRoundTrip(t *testing.T) {
	s := newFileStack(t, engine.DefaultConfig(), 1<<20)
	text := "a,b\n1,2\n测试 😀\n"
	binary := []byte{0, 1, 2, 0xff, 0xfe, '\n', '\r', 0x80}
	body := `{"code": "print(1)", "inline_files": true, "files": [` + fileJSON("data.csv", text, "") + `,` +
		fileJSON("in/raw.bin", base64.StdEncoding.EncodeToString(binary), "base64") + `]}`
	st, v := s.call(t, "POST", "/v1/executions", body)
	if st != 200 {
		t.Fatalf("%d %v", st, v)
	}
	spec := s.echo.last()
	if len(spec.Files) != 2 || string(spec.Files[0].Content) != text || !bytes.Equal(spec.Files[1].Content, binary) || !spec.Charts {
		t.Fatalf("spec files %+v charts %v: want the files byte-exact, charts on by default", spec.Files, spec.Charts)
	}
	id := v["id"].(string)
	files := v["files"].([]any)
	if len(files) != 3 {
		t.Fatalf("files %v, want the chart and two files", files)
	}
	want := map[string][]byte{"figure-1.png": pngBytes, "out/data.csv": []byte(text), "out/in/raw.bin": binary}
	for _, f := range files {
		f := f.(map[string]any)
		name := f["name"].(string)
		inline, err := base64.StdEncoding.DecodeString(f["content_base64"].(string))
		if err != nil || !bytes.Equal(inline, want[name]) || f["size_bytes"] != float64(len(want[name])) {
			t.Errorf("answer's %s: content_base64 %q size %v, want %q", name, f["content_base64"], f["size_bytes"], want[name])
		}
	}
	// Not inline unless asked.
	if _, v := s.call(t, "POST", "/v1/executions", `{"code": "1", "files": [`+fileJSON("a", "x", "")+`]}`); v["files"].([]any)[0].(map[string]any)["content_base64"] != nil {
		t.Errorf("content_base64 without inline_files: %v", v["files"])
	}

	for name, content := range want {
		status, h, b := s.get(t, "/v1/executions/"+id+"/files/"+name)
		if status != 200 || !bytes.Equal(b, content) {
			t.Fatalf("GET %s: %d %q, want %q", name, status, b, content)
		}
		wantType, disposition := "text/plain; charset=utf-8", "attachment; filename="+filepath.Base(name)
		if name == "figure-1.png" {
			wantType, disposition = "image/png", "inline; filename=figure-1.png"
		}
		sum := sha256.Sum256(content)
		for k, w := range map[string]string{"Content-Type": wantType, "X-Content-Type-Options": "nosniff",
			"Content-Security-Policy": "sandbox; default-src 'none'", "Content-Disposition": disposition,
			"Content-Length": fmt.Sprint(len(content)), "ETag": `"` + hex.EncodeToString(sum[:]) + `"`} {
			if got := h.Get(k); got != w {
				t.Errorf("GET %s: %s = %q, want %q", name, k, got, w)
			}
		}
	}
	// Scoped to the agent, as GET /v1/executions/{id} is.
	if status, _, b := s.get(t, "/v1/executions/"+id+"/files/figure-1.png?agent=other"); status != 404 {
		t.Errorf("another agent's file: %d %s, want 404", status, b)
	}
	if status, _, b := s.get(t, "/v1/executions/"+id+"/files/figure-1.png?agent=default"); status != 200 {
		t.Errorf("the agent's own file: %d %s", status, b)
	}
	status, _, b := s.get(t, "/v1/executions/"+id+"/files/nope.txt")
	if status != 404 || !bytes.Contains(b, []byte(`\"nope.txt\"`)) {
		t.Errorf("a file the record does not list: %d %s, want 404 naming it", status, b)
	}
	if status, _, _ := s.get(t, "/v1/executions/ex_aaaaaaaaaaaaaaaaaaaaaaaaaa/files/figure-1.png"); status != 404 {
		t.Errorf("no such execution: %d, want 404", status)
	}
	// The record keeps the list.
	if _, rec := s.call(t, "GET", "/v1/executions/"+id, ""); len(rec["files"].([]any)) != 3 {
		t.Errorf("record files %v", rec["files"])
	}
}

func TestFilesStream(t *testing.T) {
	s := newFileStack(t, engine.DefaultConfig(), 1<<20)
	req, _ := http.NewRequest("POST", s.url+"/v1/executions", strings.NewReader(`{"code": "1", "charts": false, "files": [`+fileJSON("a.txt", "hi", "")+`]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var types []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var line struct {
			Type string          `json:"type"`
			File *sandbox.File   `json:"file"`
			Raw  json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("line %q: %v", sc.Bytes(), err)
		}
		types = append(types, line.Type)
		if line.Type == "file" && (line.File == nil || line.File.Name != "out/a.txt" || line.File.SizeBytes != 2 || bytes.Contains(sc.Bytes(), []byte("content"))) {
			t.Errorf("file line %s, want out/a.txt's description without its bytes", sc.Bytes())
		}
	}
	if strings.Join(types, ",") != "file,result" {
		t.Errorf("lines %v, want one file line (charts off) before the result", types)
	}
}

// Retention deletes a record's files with it; the quota evicts the oldest executions' files
// first, and a file the record lists whose bytes were evicted answers 410 naming the quota.
func TestFilesQuotaAndRetention(t *testing.T) {
	// Each file is charged in 4 KiB blocks, plus one: a small file takes 2 of the 5 blocks.
	s := newFileStack(t, engine.DefaultConfig(), 5*4096)
	run := func(n int) string {
		_, v := s.call(t, "POST", "/v1/executions", `{"code": "1", "charts": false, "files": [`+fileJSON("f", strings.Repeat("x", n), "")+`]}`)
		time.Sleep(2 * time.Millisecond) // distinct started_at
		return v["id"].(string)
	}
	first, second := run(40), run(40)
	third := run(40) // 6 > 5 blocks: the first's file goes
	status, _, b := s.get(t, "/v1/executions/"+first+"/files/out/f")
	if status != 410 || !bytes.Contains(b, []byte("files_max_bytes")) || !bytes.Contains(b, []byte(`"gone"`)) {
		t.Errorf("evicted file: %d %s, want 410 gone naming files_max_bytes", status, b)
	}
	// The file's name is in the path, not a field of the request: the body names no field, so
	// a client does not prefix the message with "name:".
	if bytes.Contains(b, []byte(`"field"`)) {
		t.Errorf("evicted file: %s names a field", b)
	}
	for _, id := range []string{second, third} {
		if status, _, _ := s.get(t, "/v1/executions/"+id+"/files/out/f"); status != 200 {
			t.Errorf("%s: %d, want its file kept", id, status)
		}
	}
	// The record says which of its files were evicted, and only those.
	for id, evicted := range map[string]string{first: "true", second: "<nil>"} {
		_, v := s.call(t, "GET", "/v1/executions/"+id, "")
		files, _ := v["files"].([]any)
		if len(files) != 1 {
			t.Fatalf("record %s lists files %v, want one", id, v["files"])
		}
		if got := fmt.Sprint(files[0].(map[string]any)["evicted"]); got != evicted {
			t.Errorf("record %s: evicted %s, want %s", id, got, evicted)
		}
	}
	if used, _ := s.files.Used(); used != 4*4096 {
		t.Errorf("used %d bytes, want %d", used, 4*4096)
	}
	// A file over the whole quota is not kept, and the result says so.
	_, v := s.call(t, "POST", "/v1/executions", `{"code": "1", "charts": false, "files": [`+fileJSON("big", strings.Repeat("x", 5*4096), "")+`]}`)
	if v["files"] != nil || !strings.Contains(fmt.Sprint(v["files_skipped"]), "files_max_bytes") {
		t.Errorf("a file over the quota: files %v skipped %v", v["files"], v["files_skipped"])
	}
	// Retention keeping one record deletes the others' files.
	if _, err := s.st.Prune(t.Context(), store.Retention{MaxCount: 1}); err != nil {
		t.Fatal(err)
	}
	if used, _ := s.files.Used(); used != 0 {
		t.Errorf("used %d bytes after pruning, want 0 (the newest record has no file kept)", used)
	}
	if status, _, _ := s.get(t, "/v1/executions/"+third+"/files/out/f"); status != 404 {
		t.Errorf("a pruned record's file: %d, want 404", status)
	}
}

// A job keeps its files (shown by name and size), hands them to each fire, keeps them through a
// PATCH that does not name them, and drops them on "files": [].
func TestJobKeepsItsFiles(t *testing.T) {
	s := newFileStack(t, engine.DefaultConfig(), 1<<20)
	s.call(t, "POST", "/v1/agents/a/code", `{"name": "c", "code": "x"}`)
	binary := []byte{0xff, 0, 0xfe}
	st, v := s.call(t, "POST", "/v1/agents/a/jobs", `{"code_name": "c", "schedule": "@daily", "charts": false, "files": [`+
		fileJSON("a.csv", "x,y\n", "")+`,`+fileJSON("b.bin", base64.StdEncoding.EncodeToString(binary), "base64")+`]}`)
	if st != 201 {
		t.Fatalf("create: %d %v", st, v)
	}
	id := v["id"].(string)
	if fmt.Sprint(v["files"]) != "[map[name:a.csv size_bytes:4] map[name:b.bin size_bytes:3]]" || v["charts"] != false {
		t.Errorf("job files %v charts %v", v["files"], v["charts"])
	}
	if st, v := s.call(t, "PATCH", "/v1/agents/a/jobs/"+id, `{"description": "d"}`); st != 200 || len(v["files"].([]any)) != 2 {
		t.Fatalf("patch: %d %v; want the files kept", st, v)
	}
	if _, err := s.sch.RunNow(t.Context(), "a", id); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.echo.count() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s.echo.count() == 0 {
		t.Fatal("the fire did not run")
	}
	spec := s.echo.last()
	if len(spec.Files) != 2 || string(spec.Files[0].Content) != "x,y\n" || !bytes.Equal(spec.Files[1].Content, binary) || spec.Charts {
		t.Errorf("the fire's spec: files %+v charts %v", spec.Files, spec.Charts)
	}
	if _, v := s.call(t, "GET", "/v1/agents/a/jobs", ""); fmt.Sprint(v["jobs"].([]any)[0].(map[string]any)["files"]) != "[map[name:a.csv size_bytes:4] map[name:b.bin size_bytes:3]]" {
		t.Errorf("listed job files %v", v["jobs"])
	}
	if st, v := s.call(t, "PATCH", "/v1/agents/a/jobs/"+id, `{"files": []}`); st != 200 || len(v["files"].([]any)) != 0 {
		t.Errorf("patch files []: %d %v; want none", st, v)
	}
}
