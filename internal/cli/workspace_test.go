package cli

import (
	"context"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSessionCpIntoDirectory: as cp does, a file copied to a session's directory lands in it
// under its own name: ID: and ID:. (the home), ID:dir/, and ID:dir when the session has a
// directory there (all were refused: "is a directory", or for ID: "is missing" with an empty
// name). Standard input has no name to give, which is said before anything is written.
func TestSessionCpIntoDirectory(t *testing.T) {
	s := "se_" + strings.Repeat("a", 26)
	files := "/v1/agents/default/sessions/" + s + "/files"
	var (
		mu      sync.Mutex
		written []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		p := r.URL.Query().Get("path")
		switch {
		case r.URL.Path == "/healthz":
			_, _ = io.WriteString(w, `{"status": "ok"}`)
		case r.Method == "GET" && r.URL.Path == files+"/stat" && (p == "data" || p == "/home/user/data"):
			_, _ = io.WriteString(w, `{"path": "/home/user/data", "name": "data", "type": "dir", "size_bytes": 0, "mode": "drwxr-xr-x", "modified_at": "2026-12-02T10:00:00Z"}`)
		case r.Method == "GET" && r.URL.Path == files+"/stat" && p == "out.txt":
			_, _ = io.WriteString(w, `{"path": "/home/user/out.txt", "name": "out.txt", "type": "file", "size_bytes": 3, "mode": "-rw-r--r--", "modified_at": "2026-12-02T10:00:00Z"}`)
		case r.Method == "GET" && r.URL.Path == files+"/list" && p == "out.txt":
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"error": {"code": "conflict", "message": "/home/user/out.txt is not a directory; list a directory (stat describes one file)"}}`)
		case r.Method == "GET" && r.URL.Path == files+"/stat" && p == "link":
			_, _ = io.WriteString(w, `{"path": "/home/user/link", "name": "link", "type": "symlink", "target": "out.txt", "size_bytes": 7, "mode": "0777", "modified_at": "2026-12-02T10:00:00Z"}`)
		case r.Method == "GET" && r.URL.Path == files+"/list" && p == "link":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error": {"code": "invalid_request", "message": "/home/user/link is a symbolic link; sandpit does not follow links"}}`)
		case r.Method == "GET" && r.URL.Path == files+"/list" && p == "../x":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error": {"code": "invalid_request", "message": "path ../x leaves the home"}}`)
		case r.Method == "GET" && r.URL.Path == files && p == "/home/user/out.txt":
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = io.WriteString(w, "xyz")
		case r.Method == "PUT" && r.URL.Path == files:
			mu.Lock()
			written = append(written, p)
			mu.Unlock()
			_, _ = io.WriteString(w, `{"path": "/home/user/`+p+`", "name": "x", "type": "file", "size_bytes": 3, "mode": "-rw-r--r--", "modified_at": "2026-12-02T10:00:00Z"}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error": {"code": "not_found", "message": "no such file"}}`)
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	local := filepath.Join(dir, "report.csv")
	if err := os.WriteFile(local, []byte("a,b"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string) {
		var stderr strings.Builder
		code := Main(context.Background(), append(args, "--url", srv.URL), Env{Stdin: strings.NewReader("abc"), Stdout: io.Discard, Stderr: &stderr,
			Lookup: func(k string) (string, bool) { return dir, k == "SANDPIT_DATA_DIR" }})
		return code, stderr.String()
	}
	for dst, want := range map[string]string{
		":":                 "report.csv",
		":.":                "report.csv",
		":in/":              "in/report.csv",
		":data":             "data/report.csv",
		":/home/user/data/": "/home/user/data/report.csv",
		":new.csv":          "new.csv",
		":data/new.csv":     "data/new.csv",
	} {
		code, errOut := run("session", "cp", local, s+dst)
		mu.Lock()
		got := written
		written = nil
		mu.Unlock()
		if code != 0 || len(got) != 1 || got[0] != want {
			t.Errorf("session cp FILE ID%s: exit %d, stderr %q, wrote %q; want %q", dst, code, errOut, got, want)
		}
	}
	code, errOut := run("session", "cp", "-", s+":data")
	if code != exitUsage || !strings.Contains(errOut, "standard input has no name") || len(written) > 0 {
		t.Errorf("session cp - ID:data: exit %d, stderr %q, wrote %q; want a usage error before any write", code, errOut, written)
	}
	if code, errOut := run("session", "cp", "-", s+":data/in.txt"); code != 0 || len(written) != 1 || written[0] != "data/in.txt" {
		t.Errorf("session cp - ID:data/in.txt: exit %d, stderr %q, wrote %q", code, errOut, written)
	}
	// A copy out says what it wrote, as a copy in does.
	if code, errOut := run("session", "cp", s+":out.txt", dir); code != 0 || !strings.Contains(errOut, "copied 3 bytes to "+filepath.Join(dir, "out.txt")) {
		t.Errorf("session cp ID:out.txt DIR: exit %d, stderr %q; want it to say what it wrote", code, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "out.txt")); err != nil || string(b) != "xyz" {
		t.Errorf("the copied file holds %q (%v)", b, err)
	}
	// Its mode is cp's, 0666 less the umask (it was the temporary file's 0600), and a
	// directory that does not exist is named as such (not the temporary file's name).
	umask := unix.Umask(0)
	unix.Umask(umask)
	if fi, err := os.Stat(filepath.Join(dir, "out.txt")); err != nil || fi.Mode().Perm() != 0o666&^fs.FileMode(umask) {
		t.Errorf("the copied file's mode: %v (%v), want %v", fi.Mode(), err, 0o666&^fs.FileMode(umask))
	}
	missing := filepath.Join(dir, "nodir")
	if code, errOut := run("session", "cp", s+":out.txt", filepath.Join(missing, "y.csv")); code != exitUsage ||
		!strings.Contains(errOut, "the directory "+missing+" does not exist") || strings.Contains(errOut, ".sandpit-cp-") {
		t.Errorf("session cp ID:out.txt MISSING/y.csv: exit %d, stderr %q", code, errOut)
	}
	// `session ls ID FILE` lists the file's own line, as ls does (the daemon's answer pointed
	// to a stat the CLI does not have: a new user, 7 December 2026).
	var stdout, stderr strings.Builder
	code = Main(context.Background(), []string{"session", "ls", s, "out.txt", "--url", srv.URL}, Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
		Lookup: func(k string) (string, bool) { return dir, k == "SANDPIT_DATA_DIR" }})
	if code != 0 || !regexp.MustCompile(`(?m)^f -rw-r--r-- +3 +.* /home/user/out.txt$`).MatchString(stdout.String()) {
		t.Errorf("session ls ID FILE: exit %d, stdout %q, stderr %q; want the file's line", code, stdout.String(), stderr.String())
	}
	// A symbolic link too, as ls -l lists it (it was refused while its directory's listing
	// showed it: a red team, 7 December 2026); a path stat refuses too keeps the list's error.
	stdout.Reset()
	stderr.Reset()
	code = Main(context.Background(), []string{"session", "ls", s, "link", "--url", srv.URL}, Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
		Lookup: func(k string) (string, bool) { return dir, k == "SANDPIT_DATA_DIR" }})
	if code != 0 || !regexp.MustCompile(`(?m)^s 0777 +7 +.* /home/user/link -> out.txt$`).MatchString(stdout.String()) {
		t.Errorf("session ls ID LINK: exit %d, stdout %q, stderr %q; want the link's line", code, stdout.String(), stderr.String())
	}
	if code, errOut := run("session", "ls", s, "../x"); code != exitUsage || !strings.Contains(errOut, "path ../x leaves the home") {
		t.Errorf("session ls ID ../x: exit %d, stderr %q; want the listing's own error", code, errOut)
	}
	written = nil
	if code, errOut := run("session", "cp", dir, s+":data"); code != exitUsage || !strings.Contains(errOut, "is a directory") || len(written) > 0 {
		t.Errorf("session cp DIR ID:data: exit %d, stderr %q, wrote %q; want a usage error", code, errOut, written)
	}
}

// TestTerminalNeedsATerminal: `session exec -t` whose standard input is a pipe or a file is a
// usage error before any command starts (`-t -- bash </dev/null` waited for keys until the
// session idled out, then exited 130 without a word: a new user, 7 December 2026).
func TestTerminalNeedsATerminal(t *testing.T) {
	var (
		mu    sync.Mutex
		asked []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/healthz" {
			_, _ = io.WriteString(w, `{"status": "ok"}`)
			return
		}
		if r.Method != "GET" { // GET /v1/limits compares settings with the daemon's
			mu.Lock()
			asked = append(asked, r.Method+" "+r.URL.Path)
			mu.Unlock()
		}
		w.WriteHeader(http.StatusNotFound)
	}))
	defer srv.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	s := "se_" + strings.Repeat("a", 26)
	dir := t.TempDir()
	for _, in := range []io.Reader{null, strings.NewReader("ls\n")} {
		var stderr strings.Builder
		code := Main(context.Background(), []string{"session", "exec", "-t", s, "--url", srv.URL, "--", "bash"},
			Env{Stdin: in, Stdout: io.Discard, Stderr: &stderr, Lookup: func(k string) (string, bool) { return dir, k == "SANDPIT_DATA_DIR" }})
		if code != exitUsage || !strings.Contains(stderr.String(), "-t needs standard input to be a terminal") {
			t.Errorf("stdin %T: exit %d, stderr %q; want a usage error", in, code, stderr.String())
		}
	}
	if len(asked) > 0 {
		t.Errorf("the daemon was asked %q; want no command started", asked)
	}
}
