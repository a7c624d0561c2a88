package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretsLocal: without a daemon, `secrets set` reads the value from standard input or
// --from-file (never a flag), seals it in the data directory's database with the key it makes
// there (0600), and no listing or message shows the value.
func TestSecretsLocal(t *testing.T) {
	dir := t.TempDir()
	run := func(stdin string, args ...string) (int, string, string) {
		env := map[string]string{"SANDPIT_DATA_DIR": dir, "SANDPIT_URL": "http://127.0.0.1:1"}
		var stdout, stderr strings.Builder
		code := Main(context.Background(), args, Env{Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: &stderr,
			Lookup: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
		return code, stdout.String(), stderr.String()
	}
	var seen strings.Builder
	code, out, errOut := run("sk-cli-value-1\n", "secrets", "set", "OPENAI_API_KEY", "--host", "api.openai.com")
	seen.WriteString(out + errOut)
	if code != 0 || !strings.Contains(out, "set OPENAI_API_KEY (shared) for api.openai.com in Authorization: Bearer {{secret}}") {
		t.Fatalf("set: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if fi, err := os.Stat(filepath.Join(dir, "secrets.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key file: %v, %v", fi, err)
	}
	file := filepath.Join(t.TempDir(), "v")
	if err := os.WriteFile(file, []byte("pw-cli-value-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run("", "secrets", "set", "SVC", "--agent", "alice", "--host", "*.corp.example", "--basic-user", "bot", "--from-file", file)
	seen.WriteString(out + errOut)
	if code != 0 || !strings.Contains(out, "(agent alice)") || !strings.Contains(out, "basic authentication as bot") {
		t.Fatalf("set --from-file: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, bad := range [][]string{
		{"secrets", "set", "K"},
		{"secrets", "set", "K", "--host", "a.example", "--header", "no-colon"},
		{"secrets", "set", "K", "--host", "a.example", "--value", "x"},
	} {
		if code, _, errOut := run("v", bad...); code != 64 || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want a usage error", bad, code, errOut)
		}
	}
	if code, _, errOut := run("", "secrets", "set", "K", "--host", "a.example"); code != 64 || !strings.Contains(errOut, "standard input") {
		t.Errorf("an empty value: exit %d, stderr %q", code, errOut)
	}
	code, out, errOut = run("", "secrets", "list", "--agent", "alice")
	seen.WriteString(out + errOut)
	if code != 0 || !strings.Contains(out, "OPENAI_API_KEY") || !strings.Contains(out, "SVC") || !strings.Contains(out, "(shared)") {
		t.Fatalf("list: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := run("", "secrets", "rm", "SVC"); code != 64 || !strings.Contains(errOut, `"SVC"`) {
		t.Errorf("rm of alice's as shared: exit %d, stderr %q", code, errOut)
	}
	if code, out, errOut := run("", "secrets", "rm", "SVC", "--agent", "alice"); code != 0 || out != "removed SVC (agent alice)\n" {
		t.Fatalf("rm: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	db, _ := os.ReadFile(filepath.Join(dir, "sandpit.db"))
	wal, _ := os.ReadFile(filepath.Join(dir, "sandpit.db-wal"))
	if strings.Contains(seen.String()+string(db)+string(wal), "cli-value") {
		t.Fatal("a value was shown or stored in clear")
	}
}
