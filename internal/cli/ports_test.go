package cli

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestSessionPortCommands: a session's ports, their requests and share links can be listed,
// made and revoked from the command line (a trial found only REST could), and a port or share
// ID that is none is refused before any request.
func TestSessionPortCommands(t *testing.T) {
	s, sh := "se_"+strings.Repeat("a", 26), "sh_"+strings.Repeat("b", 26)
	base := "/v1/agents/default/sessions/" + s
	var shared, revoked string
	answers := map[string]string{
		"GET " + base + "/ports": `{"ports": [{"port": 8000, "address": "0.0.0.0", "path": "` + base + `/ports/8000/"}]}`,
		"GET " + base + "/ports/requests": `{"requests": [{"id": "rq_x", "session_id": "` + s + `", "port": 8000, "method": "GET", "path": "/index.html",
			"status": 502, "client": "127.0.0.1:5000", "bytes_in": 0, "bytes_out": 90, "started_at": "2026-12-02T10:00:00Z", "duration_ms": 3,
			"error": "nothing listens"}], "next_cursor": ""}`,
		"POST " + base + "/shares": `{"id": "` + sh + `", "session_id": "` + s + `", "port": 8000, "created_at": "2026-12-02T10:00:00Z",
			"expires_at": "2026-12-02T10:30:00Z", "url": "http://8000-` + s + `.localhost:8765/?sandpit_share=secret"}`,
		"GET " + base + "/shares": `{"shares": [{"id": "` + sh + `", "session_id": "` + s + `", "port": 8000, "created_at": "2026-12-02T10:00:00Z",
			"expires_at": "2026-12-02T10:30:00Z"}]}`,
		"DELETE " + base + "/shares/" + sh: ``,
		"GET " + base + "/egress": `{"connections": [{"host": "pypi.org", "port": 443, "address": "151.101.0.223", "allowed": true,
			"rule": "pypi.org", "bytes_sent": 10, "bytes_received": 20, "started_at": "2026-12-02T10:00:00Z", "duration_ms": 5}], "next_cursor": ""}`,
	}
	srv := cannedDaemon(answers, func(r *http.Request) int {
		switch r.Method {
		case http.MethodPost:
			body, _ := io.ReadAll(r.Body)
			shared = string(body)
		case http.MethodDelete:
			revoked = r.URL.Path
			return http.StatusNoContent
		}
		return 200
	})
	defer srv.Close()
	dir := t.TempDir()
	run := func(args ...string) (int, string, string) {
		var stdout, stderr strings.Builder
		code := Main(context.Background(), append(args, "--url", srv.URL), Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
			Lookup: func(k string) (string, bool) { return dir, k == "SANDPIT_DATA_DIR" }})
		return code, stdout.String(), stderr.String()
	}
	if code, out, errOut := run("session", "ports", s); code != 0 || !strings.Contains(out, srv.URL+base+"/ports/8000/") || !strings.Contains(out, "0.0.0.0") {
		t.Fatalf("session ports: %d %q %q; want port 8000's URL", code, out, errOut)
	}
	if code, out, errOut := run("session", "ports", s, "--requests"); code != 0 || !strings.Contains(out, "/index.html") || !strings.Contains(out, "502 (nothing listens)") {
		t.Fatalf("session ports --requests: %d %q %q", code, out, errOut)
	}
	code, out, errOut := run("session", "share", s, "8000", "--ttl", "30m")
	if code != 0 || strings.TrimSpace(out) != "http://8000-"+s+".localhost:8765/?sandpit_share=secret" || !strings.Contains(errOut, sh) {
		t.Fatalf("session share: %d %q %q; want the link alone on stdout", code, out, errOut)
	}
	if !strings.Contains(shared, `"port":8000`) || !strings.Contains(shared, `"ttl_ms":1800000`) {
		t.Fatalf("session share sent %s; want port 8000 and ttl_ms 1800000", shared)
	}
	if code, out, errOut := run("session", "shares", s); code != 0 || !strings.Contains(out, sh) || strings.Contains(out, "secret") {
		t.Fatalf("session shares: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := run("session", "unshare", s, sh); code != 0 || revoked != base+"/shares/"+sh {
		t.Fatalf("session unshare: %d %q, revoked %q", code, errOut, revoked)
	}
	if code, out, errOut := run("session", "egress", s); code != 0 || !strings.Contains(out, "pypi.org:443") || !strings.Contains(out, "true") {
		t.Fatalf("session egress: %d %q %q", code, out, errOut)
	}
	for _, bad := range [][]string{
		{"session", "share", s, "80000"},
		{"session", "share", s, "http"},
		{"session", "share", s, "8000", "--ttl", "5ms"},
		{"session", "unshare", s, "../x"},
		{"session", "ports", s, "--limit", "5"},
	} {
		if code, _, errOut := run(bad...); code != exitUsage || !strings.Contains(errOut, "give") {
			t.Errorf("%v: exit %d, stderr %q; want a usage error saying what to give", bad, code, errOut)
		}
	}
}

// TestServeDryRun: serve --dry-run prints the address and base image of the settings in
// effect (the quickstart's closing line printed the defaults whatever was set), and the
// quickstart takes its line from it rather than naming an address or image of its own.
func TestServeDryRun(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"SANDPIT_DATA_DIR": dir, "SANDPIT_LISTEN": "127.0.0.1:18451", "SANDPIT_BASE_IMAGE": "example.test/py:3.12"}
	var stdout, stderr strings.Builder
	code := Main(context.Background(), []string{"serve", "--dry-run"}, Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
		Lookup: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	out := stdout.String()
	for _, want := range []string{"listen: 127.0.0.1:18451\n", "url: http://127.0.0.1:18451\n", "base_image: example.test/py:3.12 (set)\n", "data_dir: " + dir + "\n"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("serve --dry-run: exit %d, %q (stderr %q); want %q", code, out, stderr.String(), want)
		}
	}
	script, err := os.ReadFile("../../scripts/quickstart.sh")
	if err != nil {
		t.Fatal(err)
	}
	closing := string(script[strings.Index(string(script), "sandpit works"):])
	for _, own := range []string{"8765", "$base", "python:3.11-slim", "bookworm"} {
		if strings.Contains(closing, own) {
			t.Errorf("the quickstart's closing lines name %q of their own: %s", own, closing)
		}
	}
}
