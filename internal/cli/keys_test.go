package cli

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestKeysGoThroughTheDaemon: `keys create` with a daemon at SANDPIT_URL makes the key there
// (it opened the data directory's database, so a key made "for that daemon" could land in
// another's), and its token goes with it; only without a daemon does it use the data
// directory's database, and then says which. Engine flags with a daemon are refused.
func TestKeysGoThroughTheDaemon(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/healthz" {
			_, _ = io.WriteString(w, `{"status": "ok"}`)
			return
		}
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.RequestURI()+" "+string(body)+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		switch r.Method + " " + r.URL.Path {
		case "POST /v1/keys":
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"key": "e2b_fromthedaemon", "id": "key_a", "agent": "alice", "prefix": "e2b_fromthed", "created_at": "2026-12-02T10:00:00Z"}`)
		case "GET /v1/keys":
			_, _ = io.WriteString(w, `{"keys": [{"id": "key_a", "agent": "alice", "prefix": "e2b_fromthed", "created_at": "2026-12-02T10:00:00Z"}]}`)
		case "POST /v1/keys/revoke":
			_, _ = io.WriteString(w, `{"id": "key_a", "agent": "alice", "prefix": "e2b_fromthed", "created_at": "2026-12-02T10:00:00Z", "revoked_at": "2026-12-02T11:00:00Z"}`)
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	run := func(url string, args ...string) (int, string, string) {
		env := map[string]string{"SANDPIT_DATA_DIR": dir, "SANDPIT_URL": url, "SANDPIT_TOKEN": "s3cret"}
		var stdout, stderr strings.Builder
		code := Main(context.Background(), args, Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
			Lookup: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
		return code, stdout.String(), stderr.String()
	}
	db := filepath.Join(dir, "sandpit.db")
	if code, out, errOut := run(srv.URL, "keys", "create", "--agent", "alice"); code != 0 || out != "e2b_fromthedaemon\n" || errOut != "" {
		t.Fatalf("keys create with a daemon: exit %d, stdout %q, stderr %q; want the daemon's key", code, out, errOut)
	}
	if code, out, errOut := run(srv.URL, "keys", "list"); code != 0 || !strings.Contains(out, "key_a") {
		t.Fatalf("keys list with a daemon: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, errOut := run(srv.URL, "keys", "revoke", "e2b_fromthedaemon"); code != 0 || out != "revoked key_a (agent alice)\n" {
		t.Fatalf("keys revoke with a daemon: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	want := []string{`POST /v1/keys {"agent":"alice"}` + "\n Bearer s3cret", "GET /v1/keys  Bearer s3cret", `POST /v1/keys/revoke {"key":"e2b_fromthedaemon"}` + "\n Bearer s3cret"}
	if strings.Join(seen, "|") != strings.Join(want, "|") {
		t.Errorf("the daemon saw %q; want %q", seen, want)
	}
	if _, err := os.Stat(db); err == nil {
		t.Errorf("keys with a daemon wrote %s", db)
	}
	if code, _, errOut := run(srv.URL, "keys", "create", "--agent", "alice", "--data-dir", dir); code != 64 || !strings.Contains(errOut, "--local") {
		t.Errorf("keys create --data-dir with a daemon: exit %d, stderr %q; want 64 and --local", code, errOut)
	}

	// No daemon: the data directory's database, named.
	code, key, errOut := run("http://127.0.0.1:1", "keys", "create", "--agent", "bob", "--name", "ci")
	if code != 0 || !strings.HasPrefix(key, "e2b_") || !strings.Contains(errOut, "no daemon answers at http://127.0.0.1:1") ||
		!strings.Contains(errOut, "wrote the key into the database of data directory "+dir+" ("+db+")") {
		t.Fatalf("keys create without a daemon: exit %d, stdout %q, stderr %q", code, key, errOut)
	}
	if code, out, errOut := run("http://127.0.0.1:1", "keys", "list", "--local", "--agent", "bob"); code != 0 || !strings.Contains(out, "bob") ||
		!strings.Contains(out, key[:12]) || strings.Contains(out, strings.TrimSpace(key)) || strings.Contains(errOut, "no daemon") || !strings.Contains(errOut, db) {
		t.Fatalf("keys list --local: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, errOut := run("http://127.0.0.1:1", "keys", "revoke", strings.TrimSpace(key)); code != 0 || !strings.Contains(out, "(agent bob)") {
		t.Fatalf("keys revoke without a daemon: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := run("http://127.0.0.1:1", "keys", "revoke", "key_nosuch"); code != 64 || !strings.Contains(errOut, "key_nosuch") {
		t.Errorf("keys revoke of no key: exit %d, stderr %q", code, errOut)
	}
}
