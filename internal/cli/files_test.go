package cli

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

const filesExecID = "ex_cccccccccccccccccccccccccc"

// outFile is an output file a fake daemon answers: listed in the result, its bytes inline
// (when inline) and at GET /v1/executions/{id}/files/{name}; served, when not nil, replaces the
// bytes the GET answers (a lying daemon).
type outFile struct {
	name, mediaType string
	content         []byte
	inline          bool
	served          []byte
	gone            bool // its bytes were evicted: GET answers the daemon's 410
}

func (f outFile) entry() apitype.File {
	sum := sha256.Sum256(f.content)
	return apitype.File{Name: f.name, SizeBytes: int64(len(f.content)), MediaType: f.mediaType, SHA256: hex.EncodeToString(sum[:])}
}

// filesDaemon is a fake daemon in the REST shape: every run answers files (as JSON, or as an
// NDJSON stream with a file line each when asked), and the record and the bytes of execution
// filesExecID are served. It records the bodies of the runs (and of other POSTs and PATCHes).
type filesDaemon struct {
	limits string // the answer of GET /v1/limits; "{}" when empty
	files  []outFile
	mu     sync.Mutex
	runs   []map[string]any
	gets   []string
}

func (d *filesDaemon) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	res := apitype.Result{ID: filesExecID, Agent: "default", Outcome: apitype.OutcomeOK, Success: true, Stdout: "ran\n", Output: json.RawMessage("null")}
	for _, f := range d.files {
		res.Files = append(res.Files, f.entry())
	}
	res.FilesSkipped = []apitype.SkippedFile{{Name: "link", Reason: "symbolic link, not followed"}}
	answer := func(inline bool) map[string]any {
		b, _ := json.Marshal(res)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		if inline {
			for i, f := range d.files {
				if f.inline {
					m["files"].([]any)[i].(map[string]any)["content_base64"] = base64.StdEncoding.EncodeToString(f.content)
				}
			}
		}
		return m
	}
	switch {
	case r.URL.Path == "/healthz":
		_, _ = io.WriteString(w, `{"status": "ok"}`)
	case r.URL.Path == "/v1/limits":
		_, _ = io.WriteString(w, cmp.Or(d.limits, `{}`))
	case r.Method == http.MethodPost || r.Method == http.MethodPatch:
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		d.mu.Lock()
		d.runs = append(d.runs, body)
		d.mu.Unlock()
		inline, _ := body["inline_files"].(bool)
		if strings.Contains(r.Header.Get("Accept"), "ndjson") {
			w.Header().Set("Content-Type", "application/x-ndjson")
			enc := json.NewEncoder(w)
			_ = enc.Encode(map[string]any{"type": "stdout", "data": "ran\n"})
			for _, f := range res.Files {
				_ = enc.Encode(map[string]any{"type": "file", "file": f})
			}
			_ = enc.Encode(map[string]any{"type": "result", "result": answer(inline)})
			return
		}
		_ = json.NewEncoder(w).Encode(answer(inline))
	case r.URL.Path == "/v1/executions/"+filesExecID:
		rec := answer(false)
		rec["status"] = "finished"
		_ = json.NewEncoder(w).Encode(rec)
	case strings.HasPrefix(r.URL.Path, "/v1/executions/"+filesExecID+"/files/"):
		name := strings.TrimPrefix(r.URL.Path, "/v1/executions/"+filesExecID+"/files/")
		d.mu.Lock()
		d.gets = append(d.gets, name)
		d.mu.Unlock()
		for _, f := range d.files {
			if f.name == name && f.gone {
				w.WriteHeader(http.StatusGone)
				_, _ = fmt.Fprintf(w, `{"error": {"code": "gone", "message": "output file %q of execution %s is no longer kept: the quota on all runs' files (files_max_bytes) evicted it"}}`, name, filesExecID)
				return
			}
			if f.name == name {
				w.Header().Set("Content-Type", f.mediaType)
				_, _ = w.Write(cmpBytes(f.served, f.content))
				return
			}
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error": {"code": "not_found", "message": "no such file"}}`)
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error": {"code": "not_found", "message": "not found"}}`)
	}
}

func cmpBytes(a, b []byte) []byte {
	if a != nil {
		return a
	}
	return b
}

// sandpit runs the command line against the daemon at url and returns its exit code, stdout
// and stderr.
func sandpit(t *testing.T, url string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	dataDir := t.TempDir()
	code := Main(context.Background(), append(args, "--url", url), Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
		Lookup: func(k string) (string, bool) { return dataDir, k == "SANDPIT_DATA_DIR" }})
	return code, stdout.String(), stderr.String()
}

func writeFile(t *testing.T, path string, content []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
}

// tree lists the regular files beneath dir with their contents.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if e.Type()&fs.ModeSymlink != 0 {
			out[rel] = "-> symlink"
			return nil
		}
		b, err := os.ReadFile(p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRunFiles: --file sends each file (UTF-8 as text, other bytes as base64, named by
// PATH=NAME), --no-charts turns charts off, and --output-dir writes every output file: the
// inline ones from the answer, the others fetched; stream mode lists them on stderr as they
// come, and a line per file saved.
func TestRunFiles(t *testing.T) {
	png := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 300)...)
	d := &filesDaemon{files: []outFile{
		{name: "figure-1.png", mediaType: "image/png", content: png, inline: true},
		{name: "out/deep/result.csv", mediaType: "text/csv", content: []byte("a,b\n1,2\n")},
	}}
	srv := httptest.NewServer(d)
	defer srv.Close()
	dir := t.TempDir()
	bin := []byte{0xff, 0xfe, 0, 1, 2}
	writeFile(t, filepath.Join(dir, "sales.csv"), []byte("région,€\n"))
	writeFile(t, filepath.Join(dir, "blob.bin"), bin)
	out := filepath.Join(dir, "out")

	code, stdout, stderr := sandpit(t, srv.URL, "run", "-c", "print(1)", "--file", filepath.Join(dir, "sales.csv"),
		"--file", filepath.Join(dir, "blob.bin")+"=in/data.bin", "--no-charts", "--output-dir", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	body := d.runs[0]
	files, _ := json.Marshal(body["files"])
	want := `[{"content":"région,€\n","encoding":"utf-8","name":"sales.csv"},{"content":"` + base64.StdEncoding.EncodeToString(bin) + `","encoding":"base64","name":"in/data.bin"}]`
	if string(files) != want {
		t.Errorf("files sent %s\nwant       %s", files, want)
	}
	if body["charts"] != false || body["inline_files"] != true {
		t.Errorf("charts %v, inline_files %v", body["charts"], body["inline_files"])
	}
	got := tree(t, out)
	if len(got) != 2 || got["figure-1.png"] != string(png) || got[filepath.FromSlash("out/deep/result.csv")] != "a,b\n1,2\n" {
		t.Errorf("--output-dir holds %q", got)
	}
	if !slices.Equal(d.gets, []string{"out/deep/result.csv"}) {
		t.Errorf("fetched %v; want only the file not inline", d.gets)
	}
	if stdout != "ran\n" {
		t.Errorf("stdout %q", stdout)
	}
	for _, line := range []string{"sandpit: output file figure-1.png (image/png, ", "sandpit: saved " + filepath.Join(out, "figure-1.png"),
		"sandpit: saved " + filepath.Join(out, "out", "deep", "result.csv"), `output file "link" skipped: symbolic link, not followed`} {
		if !strings.Contains(stderr, line) {
			t.Errorf("stderr %q lacks %q", stderr, line)
		}
	}

	// Without --output-dir nothing is written, and the files are named with how to get them.
	code, _, stderr = sandpit(t, srv.URL, "run", "-c", "print(1)", "--json")
	if code != 0 || !strings.Contains(stderr, "") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if d.runs[1]["inline_files"] != nil || d.runs[1]["files"] != nil || d.runs[1]["charts"] != nil {
		t.Errorf("a run without file flags sent %v", d.runs[1])
	}
	code, _, stderr = sandpit(t, srv.URL, "run", "-c", "print(1)")
	if code != 0 || !strings.Contains(stderr, "sandpit exec files "+filesExecID+" --output-dir DIR") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// TestOutputDirRefusesHostileNames: a compromised daemon naming files outside --output-dir
// (absolute, with "..", through a symbolic link in DIR) gets nothing written outside it.
func TestOutputDirRefusesHostileNames(t *testing.T) {
	for _, name := range []string{"../../etc/x", "/abs", "a/../../b", "..", "../x", "a/./b", "a//b", `..\x`, "x\x00y", "link/escaped.txt"} {
		t.Run(name, func(t *testing.T) {
			d := &filesDaemon{files: []outFile{{name: "fine.txt", mediaType: "text/plain", content: []byte("ok")},
				{name: name, mediaType: "text/plain", content: []byte("pwned"), inline: true}}}
			srv := httptest.NewServer(d)
			defer srv.Close()
			top := t.TempDir()
			out := filepath.Join(top, "a", "b", "out")
			if err := os.MkdirAll(out, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(top, filepath.Join(out, "link")); err != nil {
				t.Fatal(err)
			}
			code, _, stderr := sandpit(t, srv.URL, "run", "-c", "print(1)", "--output-dir", out, "--force")
			if code == 0 {
				t.Errorf("exit 0 for a file named %q; stderr %q", name, stderr)
			}
			got := tree(t, top)
			delete(got, filepath.Join("a", "b", "out", "fine.txt")) // written before the bad one, inside DIR
			if want := map[string]string{filepath.Join("a", "b", "out", "link"): "-> symlink"}; !mapsEqual(got, want) {
				t.Errorf("after a daemon named %q the tree holds %q", name, got)
			}
			if !strings.Contains(stderr, strconv.Quote(name)) {
				t.Errorf("stderr %q does not say which file was refused", stderr)
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestOutputDirOfNothingSaysSo: a run or an execution without output files says that nothing
// was written (a new user's `exec files ID --output-dir DIR` printed nothing at all).
func TestOutputDirOfNothingSaysSo(t *testing.T) {
	srv := httptest.NewServer(&filesDaemon{})
	defer srv.Close()
	out := t.TempDir()
	for _, args := range [][]string{{"run", "-c", "1", "--output-dir", out}, {"exec", "files", filesExecID, "--output-dir", out}} {
		code, stdout, stderr := sandpit(t, srv.URL, args...)
		if code != 0 || !strings.Contains(stdout+stderr, "no output files; nothing was written to "+out) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want it to say nothing was written", args[0], code, stdout, stderr)
		}
	}
}

// TestExecFileToStdout: --stdout writes the one file named to standard output (a new user had
// no way but a directory), nothing when its bytes are not those listed, and is a usage error
// with no name, two, or --output-dir.
func TestExecFileToStdout(t *testing.T) {
	d := &filesDaemon{files: []outFile{{name: "out/result.csv", mediaType: "text/csv", content: []byte("a,b\n1,2\n")},
		{name: "bad.txt", mediaType: "text/plain", content: []byte("listed"), served: []byte("altered")}}}
	srv := httptest.NewServer(d)
	defer srv.Close()
	if code, stdout, stderr := sandpit(t, srv.URL, "exec", "files", filesExecID, "out/result.csv", "--stdout"); code != 0 || stdout != "a,b\n1,2\n" {
		t.Errorf("--stdout: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, stdout, stderr := sandpit(t, srv.URL, "exec", "files", filesExecID, "bad.txt", "--stdout"); code == 0 || stdout != "" || !strings.Contains(stderr, "are not those listed") {
		t.Errorf("--stdout of altered bytes: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for _, args := range [][]string{{filesExecID, "--stdout"}, {filesExecID, "a", "b", "--stdout"}, {filesExecID, "a", "--stdout", "--output-dir", t.TempDir()}} {
		if code, stdout, stderr := sandpit(t, srv.URL, append([]string{"exec", "files"}, args...)...); code != exitUsage || stdout != "" || !strings.Contains(stderr, "--stdout writes one file") {
			t.Errorf("exec files %v: exit %d, stdout %q, stderr %q; want a usage error", args, code, stdout, stderr)
		}
	}
}

// TestOutputDirExisting: a file already in DIR refuses the whole set (nothing is written)
// unless --force, which replaces it; bytes unlike the listed ones are not kept.
func TestOutputDirExisting(t *testing.T) {
	d := &filesDaemon{files: []outFile{{name: "new.txt", mediaType: "text/plain", content: []byte("new")},
		{name: "old.txt", mediaType: "text/plain", content: []byte("fresh")}}}
	srv := httptest.NewServer(d)
	defer srv.Close()
	out := t.TempDir()
	writeFile(t, filepath.Join(out, "old.txt"), []byte("mine"))
	code, _, stderr := sandpit(t, srv.URL, "run", "-c", "1", "--output-dir", out)
	if code != 64 || !strings.Contains(stderr, `already holds "old.txt"`) || !strings.Contains(stderr, "--force") ||
		!strings.Contains(stderr, "sandpit exec files "+filesExecID) {
		t.Errorf("exit %d, stderr %q; want the refusal, --force and how to fetch the kept files later", code, stderr)
	}
	if got := tree(t, out); !mapsEqual(got, map[string]string{"old.txt": "mine"}) {
		t.Errorf("after a refusal DIR holds %q", got)
	}
	code, _, stderr = sandpit(t, srv.URL, "run", "-c", "1", "--output-dir", out, "--force")
	if got := tree(t, out); code != 0 || !mapsEqual(got, map[string]string{"old.txt": "fresh", "new.txt": "new"}) {
		t.Errorf("exit %d (%s), DIR holds %q", code, stderr, got)
	}

	// --force replaces a symbolic link of DIR that has a file's name: it never writes through it.
	outside := filepath.Join(t.TempDir(), "precious.txt")
	writeFile(t, outside, []byte("keep me"))
	linked := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(linked, "old.txt")); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = sandpit(t, srv.URL, "run", "-c", "1", "--output-dir", linked, "--force")
	if b, _ := os.ReadFile(outside); code != 0 || string(b) != "keep me" {
		t.Errorf("exit %d (%s); the file the link pointed to holds %q", code, stderr, b)
	}
	if fi, err := os.Lstat(filepath.Join(linked, "old.txt")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("old.txt in DIR: %v, %v; want the output file in place of the link", fi, err)
	}

	liar := &filesDaemon{files: []outFile{{name: "x.txt", mediaType: "text/plain", content: []byte("listed"), served: []byte("served")}}}
	srv2 := httptest.NewServer(liar)
	defer srv2.Close()
	out2 := t.TempDir()
	code, _, stderr = sandpit(t, srv2.URL, "run", "-c", "1", "--output-dir", out2)
	if got := tree(t, out2); code == 0 || len(got) != 0 || !strings.Contains(stderr, `"x.txt"`) {
		t.Errorf("bytes unlike the listed ones: exit %d, stderr %q, DIR holds %q", code, stderr, got)
	}
}

func TestFileFlagErrors(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.txt")
	writeFile(t, a, []byte("a"))
	writeFile(t, filepath.Join(dir, "b", "a.txt"), []byte("b"))
	cases := []struct {
		args []string
		says string
	}{
		{[]string{"--file", filepath.Join(dir, "missing.csv")}, "--file " + filepath.Join(dir, "missing.csv") + ": open"},
		{[]string{"--file", a + "=../up.txt"}, `--file ` + a + `=../up.txt: file name "../up.txt" has a ".." part`},
		{[]string{"--file", a + "=/etc/x"}, "is absolute"},
		{[]string{"--file", a + "="}, "the NAME after \"=\" is empty"},
		{[]string{"--file", a, "--file", filepath.Join(dir, "b", "a.txt")}, `is also named "a.txt"`},
		{[]string{"--file", dir}, "is a directory"},
	}
	for _, c := range cases {
		var stderr bytes.Buffer
		args := append([]string{"run", "-c", "1", "--url", "http://127.0.0.1:1"}, c.args...)
		code := Main(context.Background(), args, Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr,
			Lookup: func(string) (string, bool) { return "", false }})
		if code != 64 || !strings.Contains(stderr.String(), c.says) {
			t.Errorf("%v: exit %d, stderr %q, want it to say %q", c.args, code, stderr.String(), c.says)
		}
	}
	// A PATH that holds "=" itself is taken whole when nothing is at the part before it.
	eq := filepath.Join(dir, "x=1.csv")
	writeFile(t, eq, []byte("eq"))
	files, err := readInputFiles([]string{eq, a + "=in/renamed.txt"})
	if err != nil || len(files) != 2 || files[0].Name != "x=1.csv" || files[0].Content != "eq" || files[1].Name != "in/renamed.txt" {
		t.Errorf("readInputFiles = %+v, %v", files, err)
	}
}

// TestExecFiles lists an execution's files, and writes them (or those named) into a directory.
func TestExecFiles(t *testing.T) {
	d := &filesDaemon{files: []outFile{{name: "figure-1.png", mediaType: "image/png", content: []byte("\x89PNG")},
		{name: "data/out.csv", mediaType: "text/csv", content: []byte("a\n")}}}
	srv := httptest.NewServer(d)
	defer srv.Close()
	code, stdout, stderr := sandpit(t, srv.URL, "exec", "files", filesExecID)
	lines := strings.Split(stdout, "\n")
	if code != 0 || len(lines) < 3 || strings.Join(strings.Fields(lines[1]), " ") != "figure-1.png 4 bytes image/png" ||
		strings.Join(strings.Fields(lines[2]), " ") != "data/out.csv 2 bytes text/csv" || !strings.Contains(stderr, `"link" skipped`) {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	out := t.TempDir()
	code, stdout, stderr = sandpit(t, srv.URL, "exec", "files", filesExecID, "data/out.csv", "--output-dir", out)
	if got := tree(t, out); code != 0 || !mapsEqual(got, map[string]string{filepath.Join("data", "out.csv"): "a\n"}) ||
		!strings.Contains(stdout, "saved "+filepath.Join(out, "data", "out.csv")) {
		t.Errorf("exit %d (%s), stdout %q, DIR holds %q", code, stderr, stdout, got)
	}
	code, _, stderr = sandpit(t, srv.URL, "exec", "files", filesExecID, "nope.txt", "--output-dir", out)
	if code != 64 || !strings.Contains(stderr, `no output file "nope.txt"; it has: figure-1.png, data/out.csv`) {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = sandpit(t, srv.URL, "exec", "files", filesExecID, "figure-1.png")
	if code != 64 || !strings.Contains(stderr, "add --output-dir") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// TestCodeRunAndJobCreateSendFiles: the saved-code run and a job's creation send --file too.
func TestCodeRunAndJobCreateSendFiles(t *testing.T) {
	d := &filesDaemon{files: []outFile{{name: "r.txt", mediaType: "text/plain", content: []byte("r"), inline: true}}}
	srv := httptest.NewServer(d)
	defer srv.Close()
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	writeFile(t, in, []byte("hello"))
	out := filepath.Join(dir, "out")
	code, _, stderr := sandpit(t, srv.URL, "code", "run", "tool", "--file", in, "--no-charts", "--output-dir", out)
	if got := tree(t, out); code != 0 || got["r.txt"] != "r" {
		t.Errorf("code run: exit %d (%s), DIR %q", code, stderr, got)
	}
	sandpit(t, srv.URL, "job", "create", "tool", "--schedule", "@daily", "--file", in+"=data/in.txt")
	if len(d.runs) != 2 {
		t.Fatalf("runs %v", d.runs)
	}
	for i, body := range d.runs {
		files, _ := json.Marshal(body["files"])
		name := map[int]string{0: "in.txt", 1: "data/in.txt"}[i]
		if string(files) != `[{"content":"hello","encoding":"utf-8","name":"`+name+`"}]` {
			t.Errorf("request %d sent files %s", i, files)
		}
	}
	if d.runs[0]["charts"] != false || d.runs[1]["schedule"] != "@daily" || d.runs[1]["charts"] != nil {
		t.Errorf("requests %v", d.runs)
	}
	// job update replaces the files given, and turns charts off or on.
	sandpit(t, srv.URL, "job", "update", "job_x", "--file", in, "--no-charts")
	sandpit(t, srv.URL, "job", "update", "job_x", "--no-charts=false")
	if len(d.runs) != 4 {
		t.Fatalf("requests %v", d.runs)
	}
	if files, _ := json.Marshal(d.runs[2]["files"]); string(files) != `[{"content":"hello","encoding":"utf-8","name":"in.txt"}]` ||
		d.runs[2]["charts"] != false || d.runs[3]["charts"] != true || d.runs[3]["files"] != nil {
		t.Errorf("updates sent %v and %v", d.runs[2], d.runs[3])
	}
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 bytes", 1023: "1023 bytes", 1024: "1.0 KiB", 18740: "18.3 KiB", 5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := humanSize(n); got != want {
			t.Errorf("humanSize(%d) = %q, want %q", n, got, want)
		}
	}
}

// Output files are named by the run's code: one named .git/config, written into a repository
// by --output-dir --force, ran a command at the next git status (a trial attack); .hg/hgrc
// (hooks at the next hg command), .envrc (direnv) and .vscode/tasks.json were written too
// (H40), and so were build.gradle, Gemfile, compose.yaml, Dockerfile, tasks.py and
// CMakeLists.txt past a list of such names. Only data files are written unless named, and no
// hidden part, however they are spelled, each other skipped with a line; a name with a
// right-to-left override is shown escaped.
func TestOutputDirSkipsToolPaths(t *testing.T) {
	hostile := []string{".git/config", ".GIT/hooks/pre-commit", "sub/.git/config", ".git./config", ".g\u200cit/config", "GIT~1/config",
		".hg/hgrc", ".HG./hgrc", ".envrc", "sub/.envrc", ".vscode/tasks.json", ".idea/workspace.xml", ".npmrc", ".yarnrc.yml", "mise.toml",
		// H66: a trial wrote these through the list above; every hidden part is skipped now, and
		// the files tools run from a directory.
		".bashrc", ".ssh/authorized_keys", ".config/git/config", ".github/workflows/x.yml", ".gitignore", ".netrc",
		"conftest.py", "sub/conftest.py", "Makefile", "pyproject.toml", "setup.py", "package.json",
		// Past any list: what build tools, task runners, CI, shells and editors pick up, without
		// an extension, with a code's or a configuration's, or a manifest's with a data one.
		"build.gradle", "Gemfile", "compose.yaml", "Dockerfile", "tasks.py", "CMakeLists.txt", "sub/CMakeLists.txt", "Jenkinsfile",
		"Vagrantfile", "justfile", "settings.gradle.kts", "flake.nix", "pom.xml", "Taskfile.yml", "run.sh", "x.ps1", "a.code-workspace",
		"app.desktop", "json.py", "__pycache__/x.cpython-311.pyc", "composer.json", "requirements.txt", "_darcs/prefs/defaults",
		"VSCODE~1/tasks.json", "report.csv.sh", "tasks.py. ", "invoice\u202efdp.exe"}
	bidi := "report\u202evsc.png"
	files := []outFile{{name: "chart.png", mediaType: "image/png", content: []byte("png")}, {name: bidi, mediaType: "text/plain", content: []byte("x")}}
	for _, n := range hostile {
		files = append(files, outFile{name: n, mediaType: "text/plain", content: []byte("[core] fsmonitor = touch pwned")})
	}
	srv := httptest.NewServer(&filesDaemon{files: files})
	defer srv.Close()
	out := t.TempDir()
	writeFile(t, filepath.Join(out, ".git", "config"), []byte("mine"))
	code, stdout, stderr := sandpit(t, srv.URL, "run", "-c", "1", "--output-dir", out, "--force")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if got := tree(t, out); !mapsEqual(got, map[string]string{"chart.png": "png", bidi: "x", filepath.Join(".git", "config"): "mine"}) {
		t.Errorf("DIR holds %q", got)
	}
	for _, n := range hostile {
		if !strings.Contains(stdout+stderr, "skipped "+strconv.Quote(n)) {
			t.Errorf("no line says %q was skipped: %q", n, stdout+stderr)
		}
	}
	if strings.ContainsRune(stdout+stderr, '\u202e') || !strings.Contains(stdout+stderr, `invoice\u202efdp.exe`) {
		t.Errorf("the right-to-left override reached the terminal unescaped: %q", stdout+stderr)
	}
	// Named, a skipped file is written: the person chose it.
	named := t.TempDir()
	if code, _, stderr := sandpit(t, srv.URL, "exec", "files", filesExecID, "conftest.py", "--output-dir", named); code != 0 {
		t.Fatalf("exec files conftest.py: exit %d, stderr %q", code, stderr)
	}
	if got := tree(t, named); len(got) != 1 || got["conftest.py"] == "" {
		t.Errorf("exec files conftest.py --output-dir wrote %q, want conftest.py", got)
	}
	for _, n := range []string{"git/a.png", "a.git/b.json", "vscode/tasks.json", "data.hg/x.csv", "conftest.py.txt", "sub/makefile.csv", "report.csv",
		"a.b/c.parquet", "Figure 1.PNG", "out/page.html", "notes.md", "archive.tar.gz", "package.json.txt"} {
		if runnablePath(n) {
			t.Errorf("runnablePath(%q) = true", n)
		}
	}
}

// TestExecFilesEvicted: a file whose bytes the daemon no longer keeps (410) is said as the
// daemon says it, without a field prefix, and exits 66 (EX_NOINPUT), not 64 (a usage error).
func TestExecFilesEvicted(t *testing.T) {
	d := &filesDaemon{files: []outFile{{name: "old.csv", mediaType: "text/csv", content: []byte("a\n"), gone: true}}}
	srv := httptest.NewServer(d)
	defer srv.Close()
	code, _, stderr := sandpit(t, srv.URL, "exec", "files", filesExecID, "old.csv", "--output-dir", t.TempDir())
	if code != 66 || !strings.Contains(stderr, `output file "old.csv" of execution `+filesExecID+` is no longer kept`) ||
		strings.Contains(stderr, "name:") || !strings.Contains(stderr, "HTTP 410") {
		t.Errorf("exit %d, stderr %q; want 66 and the daemon's message", code, stderr)
	}
}

// TestOutputDirUnusable: an --output-dir that cannot be made (a file has its name) is refused
// before the run, so nothing runs whose files could not be written.
func TestOutputDirUnusable(t *testing.T) {
	d := &filesDaemon{files: []outFile{{name: "a.txt", mediaType: "text/plain", content: []byte("a")}}}
	srv := httptest.NewServer(d)
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "taken")
	writeFile(t, file, []byte("x"))
	code, _, stderr := sandpit(t, srv.URL, "run", "-c", "1", "--output-dir", file)
	d.mu.Lock()
	runs := len(d.runs)
	d.mu.Unlock()
	if code != 64 || !strings.Contains(stderr, "--output-dir") || !strings.Contains(stderr, "nothing was run") || runs != 0 {
		t.Errorf("exit %d, %d run(s) sent, stderr %q; want exit 64 before any run", code, runs, stderr)
	}
}

// TestNetworkAllowFlag: --network-allow, repeated, is the request's network_allow.
func TestNetworkAllowFlag(t *testing.T) {
	d := &filesDaemon{}
	srv := httptest.NewServer(d)
	defer srv.Close()
	code, _, stderr := sandpit(t, srv.URL, "run", "-c", "1", "--network-allow", "api.example.com:443", "--network-allow", "10.1.0.0/16")
	d.mu.Lock()
	defer d.mu.Unlock()
	if code != 0 || len(d.runs) != 1 || fmt.Sprint(d.runs[0]["network_allow"]) != "[api.example.com:443 10.1.0.0/16]" {
		t.Errorf("exit %d (%s), runs %v", code, stderr, d.runs)
	}
}

// TestSettingsComparedWithDaemon: network_allow and index_url set for the CLI but unlike the
// daemon's are warned about (they were silently ignored, and a refusal then named the very
// entry the user had set); the same ones are not.
func TestSettingsComparedWithDaemon(t *testing.T) {
	d := &filesDaemon{limits: `{"network": "allowlist", "network_allow": ["a.example.com"], "package_index": {"index_url": "https://10.0.0.1/simple/"}}`}
	srv := httptest.NewServer(d)
	defer srv.Close()
	run := func(env map[string]string) string {
		var stdout, stderr bytes.Buffer
		env["SANDPIT_DATA_DIR"] = t.TempDir()
		Main(context.Background(), []string{"run", "-c", "1", "--url", srv.URL}, Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
			Lookup: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
		return stderr.String()
	}
	stderr := run(map[string]string{"SANDPIT_NETWORK_ALLOW": "172.17.0.1/32", "SANDPIT_INDEX_URL": "https://10.0.0.2/simple/"})
	if !strings.Contains(stderr, "warning") || !strings.Contains(stderr, `network_allow ["172.17.0.1/32"]`) ||
		!strings.Contains(stderr, `index_url "https://10.0.0.2/simple/"`) || !strings.Contains(stderr, "restart `sandpit serve`") {
		t.Errorf("different settings: stderr %q, want a warning naming network_allow and index_url", stderr)
	}
	if stderr := run(map[string]string{"SANDPIT_NETWORK_ALLOW": "A.example.com", "SANDPIT_INDEX_URL": "https://10.0.0.1/simple/"}); strings.Contains(stderr, "warning") {
		t.Errorf("the daemon's own settings: stderr %q, want no warning", stderr)
	}
}

// resultDaemon is a daemon whose every run ends with res, and whose ledger holds it as a
// finished execution.
func resultDaemon(res apitype.Result) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/healthz":
			_, _ = io.WriteString(w, `{"status": "ok"}`)
		case r.URL.Path == "/v1/limits":
			_, _ = io.WriteString(w, `{}`)
		case r.Method == "GET":
			_ = json.NewEncoder(w).Encode(apitype.Execution{Result: res, Status: apitype.StatusFinished})
		default:
			_ = json.NewEncoder(w).Encode(res)
		}
	}))
}

// TestRefusedRunSaysWhy: an error outcome with no exit status (sandpit ended the run before
// the program could, e.g. a session refusing an input file) prints its reason; a program's
// own error does not repeat its traceback.
func TestRefusedRunSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		exit int
		want bool
	}{{-1, true}, {1, false}} {
		srv := resultDaemon(apitype.Result{ID: filesExecID, Outcome: apitype.OutcomeError, ExitCode: tc.exit,
			Reason: "writing input file \"a.csv\": file exists", Output: json.RawMessage("null")})
		code, _, stderr := sandpit(t, srv.URL, "run", "-c", "1")
		srv.Close()
		if got := strings.Contains(stderr, "sandpit: error: writing input file"); got != tc.want || code != 1 {
			t.Errorf("exit_code %d: exit %d, stderr %q; want the reason printed: %v", tc.exit, code, stderr, tc.want)
		}
	}
}

// TestOutputDirBlockedPath: a name whose path goes through a symbolic link leading out of
// DIR (or through a file) refuses the whole set, with or without --force: nothing is written,
// inside DIR or out (the first try exited 70 with a raw error after writing nothing of the
// rest).
func TestOutputDirBlockedPath(t *testing.T) {
	d := &filesDaemon{files: []outFile{{name: "link/x.txt", mediaType: "text/plain", content: []byte("x")},
		{name: "ok.txt", mediaType: "text/plain", content: []byte("ok")}}}
	srv := httptest.NewServer(d)
	defer srv.Close()
	outside := t.TempDir()
	for _, force := range []bool{false, true} {
		out := t.TempDir()
		if err := os.Symlink(outside, filepath.Join(out, "link")); err != nil {
			t.Fatal(err)
		}
		args := []string{"run", "-c", "1", "--output-dir", out}
		if force {
			args = append(args, "--force")
		}
		code, _, stderr := sandpit(t, srv.URL, args...)
		if code != 64 || !strings.Contains(stderr, `cannot hold "link/x.txt"`) || !strings.Contains(stderr, "nothing was written") {
			t.Errorf("force %v: exit %d, stderr %q", force, code, stderr)
		}
		if got := tree(t, out); len(got) != 1 {
			t.Errorf("force %v: DIR holds %q after a refusal, want only the link", force, got)
		}
	}
	if got := tree(t, outside); len(got) != 0 {
		t.Errorf("the link's target holds %q", got)
	}
}

// TestCodeSaveKeepsFields: saving a new version of existing code keeps the current version's
// schemas, dependencies and description unless their flags are given (a new version saved
// with the script alone dropped them all), an empty schema flag clears one, and the save
// expects the version those fields came from.
func TestCodeSaveKeepsFields(t *testing.T) {
	var mu sync.Mutex
	var put map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/healthz":
			_, _ = io.WriteString(w, `{"status": "ok"}`)
		case r.Method == http.MethodPost:
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"error": {"code": "conflict", "message": "code tool exists"}}`)
		case r.Method == http.MethodGet:
			_, _ = io.WriteString(w, `{"agent": "default", "name": "tool", "version": 3, "code": "old", "dependencies": ["tinypkg==1.0"],
				"input_schema": {"type": "object"}, "output_schema": {"type": "integer"}, "description": "sums"}`)
		case r.Method == http.MethodPut:
			mu.Lock()
			_ = json.NewDecoder(r.Body).Decode(&put)
			mu.Unlock()
			_, _ = io.WriteString(w, `{"agent": "default", "name": "tool", "version": 4}`)
		}
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "tool.py")
	writeFile(t, file, []byte("new"))
	code, stdout, stderr := sandpit(t, srv.URL, "code", "save", "tool", file, "--output-schema", "")
	mu.Lock()
	defer mu.Unlock()
	if code != 0 || !strings.Contains(stdout, "version 4") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if put["code"] != "new" || fmt.Sprint(put["dependencies"]) != "[tinypkg==1.0]" || put["description"] != "sums" ||
		fmt.Sprint(put["input_schema"]) != "map[type:object]" || put["output_schema"] != nil || put["expected_version"] != 3.0 {
		t.Errorf("the new version sent: %v", put)
	}
}

// A depth below 1 is a usage error naming --depth (a trial's --depth -3 listed one level).
func TestSessionListRefusesBadDepth(t *testing.T) {
	var stderr bytes.Buffer
	code := Main(context.Background(), []string{"session", "ls", "se_aaaaaaaaaaaaaaaaaaaaaaaaaa", "--depth", "-3", "--url", "http://127.0.0.1:1"},
		Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr, Lookup: func(string) (string, bool) { return "", false }})
	if code != 64 || !strings.Contains(stderr.String(), "--depth is -3") {
		t.Fatalf("exit %d, stderr %q, want a usage error naming --depth", code, stderr.String())
	}
}

// A session ID that is not one is a usage error before any request: a trial's empty ID was
// sent to another route ("method POST is not allowed on /v1/agents/default/sessions/commands"),
// and foo/../bar changed the route; with -- and no ID, the program was taken for the ID.
func TestSessionCommandsRefuseWhatIsNoSessionID(t *testing.T) {
	daemon := &requestLog{}
	srv := httptest.NewServer(daemon)
	defer srv.Close()
	for _, args := range [][]string{
		{"session", "exec", "", "--", "ls"},
		{"session", "exec", "--", "ls"},
		{"session", "show", "foo/../bar"},
		{"session", "run", "se_../x", "-c", "1"},
		{"session", "ls", "/etc"},
		{"session", "commands", "se_a"},
		{"session", "pause", "SE_AAAAAAAAAAAAAAAAAAAAAAAAAA"},
	} {
		var stderr bytes.Buffer
		code := Main(context.Background(), append(args, "--url", srv.URL),
			Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr, Lookup: func(string) (string, bool) { return "", false }})
		if code != 64 || !strings.Contains(stderr.String(), "is not a session ID: give the se_... ID") {
			t.Errorf("%q: exit %d, stderr %q; want 64 saying it is not a session ID", args, code, stderr.String())
		}
		if reqs := daemon.take(); len(reqs) > 0 {
			t.Errorf("%q sent %s", args, reqs)
		}
	}
}

// TestReasonKeepsItsLines: a reason of several lines (a dependency_error quoting pip) is
// printed a line per line, by run and by exec show, its other control characters still
// escaped (a trial's `sandpit run --dep tabulate` printed pip's lines joined by a literal \n).
func TestReasonKeepsItsLines(t *testing.T) {
	const reason = "installing tabulate failed; check the network and index_url:\nERROR: No matching distribution found for tabulate\n\x1b[2Jthe sandbox's egress proxy refused"
	srv := resultDaemon(apitype.Result{ID: filesExecID, Outcome: apitype.OutcomeDependencyError, ExitCode: -1, Reason: reason, Output: json.RawMessage("null")})
	defer srv.Close()
	code, _, stderr := sandpit(t, srv.URL, "run", "-c", "import tabulate")
	want := "sandpit: dependency_error: installing tabulate failed; check the network and index_url:\nERROR: No matching distribution found for tabulate\n\\x1b[2Jthe sandbox's egress proxy refused\n"
	if code != 66 || !strings.Contains(stderr, want) {
		t.Errorf("run: exit %d, stderr %q; want it to hold %q", code, stderr, want)
	}
	code, stdout, _ := sandpit(t, srv.URL, "exec", "show", filesExecID)
	want = "reason:     installing tabulate failed; check the network and index_url:\n            ERROR: No matching distribution found for tabulate\n            \\x1b[2Jthe sandbox's egress proxy refused\n"
	if code != 0 || !strings.Contains(stdout, want) || strings.ContainsRune(stdout, '\x1b') {
		t.Errorf("exec show: exit %d, stdout %q; want it to hold %q", code, stdout, want)
	}
}

// TestSessionExecOfAQuotedShellLine: one quoted word that reads as a shell line, given
// without -c, is refused by the daemon as a program it cannot find; the CLI says to give it
// with -c (a trial's `sandpit session exec S 'echo hi; ls'` was told only "command not found").
// A program's name without a shell character gets the daemon's words alone.
func TestSessionExecOfAQuotedShellLine(t *testing.T) {
	const s = "se_aaaaaaaaaaaaaaaaaaaaaaaaaa"
	srv := cannedDaemon(map[string]string{
		"POST /v1/agents/default/sessions/" + s + "/commands": `{"error": {"code": "invalid_request", "message": "echo hi; ls: command not found (PATH is /usr/bin)"}}`,
	}, func(*http.Request) int { return 400 })
	defer srv.Close()
	code, _, stderr := sandpit(t, srv.URL, "session", "exec", s, "echo hi; ls")
	if want := "to run a shell line, give it with -c: sandpit session exec " + s + ` -c 'echo hi; ls'`; code == 0 || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, stderr %q; want it to hold %q", code, stderr, want)
	}
	// (No "--" here: the helper gives --url last, which "--" would make the program's.)
	if code, _, stderr := sandpit(t, srv.URL, "session", "exec", s, "nosuchprogram"); code == 0 || !strings.Contains(stderr, "command not found") || strings.Contains(stderr, "give it with -c") {
		t.Errorf("a program's name: exit %d, stderr %q; want the daemon's words alone", code, stderr)
	}
	// A word with a slash is a path the daemon does not look up: the program cannot start and
	// the command exits 127 (a red team's `session exec S 'ls /tmp && echo'` was told only "no
	// such file or directory"); a program that exits 127 itself is a different word.
	srv127 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"status": "ok"}`)
			return
		}
		w.Header().Set("Content-Type", apitype.NDJSONContentType)
		_, _ = io.WriteString(w, `{"type": "stderr", "data": "ls /tmp && echo: no such file or directory\n"}`+"\n"+
			`{"type": "end", "process": {"id": "pr_aaaaaaaaaaaaaaaaaaaaaaaaaa", "end": {"exit_code": 127, "outcome": "error"}}}`+"\n")
	}))
	defer srv127.Close()
	code, _, stderr = sandpit(t, srv127.URL, "session", "exec", s, "ls /tmp && echo")
	if want := "give it with -c: sandpit session exec " + s + ` -c 'ls /tmp && echo'`; code != 127 || !strings.Contains(stderr, want) {
		t.Errorf("a path that reads as a shell line: exit %d, stderr %q; want 127 and %q", code, stderr, want)
	}
	if code, _, stderr := sandpit(t, srv127.URL, "session", "exec", s, "./run.sh"); code != 127 || strings.Contains(stderr, "give it with -c") {
		t.Errorf("a program that exits 127: exit %d, stderr %q; want 127 without the hint", code, stderr)
	}
}
