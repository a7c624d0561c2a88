package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/spf13/cobra"
)

// requestLog is a fake daemon: it answers /healthz, and records every other request (method,
// path, query and body) with a 404, which is all a command needs to have sent its agent.
type requestLog struct {
	mu   sync.Mutex
	reqs []string
}

func (l *requestLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status": "ok"}`)
		return
	case "/v1/limits": // sandpit mcp reads them first, for its tools' descriptions
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{}`)
		return
	}
	body, _ := io.ReadAll(r.Body)
	l.mu.Lock()
	l.reqs = append(l.reqs, r.Method+" "+r.URL.RequestURI()+" "+string(body))
	l.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	_, _ = io.WriteString(w, `{"error": {"code": "not_found", "message": "not found"}}`)
}

func (l *requestLog) seen() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.reqs, func(r string) bool { return !strings.Contains(r, "/v1/limits") })
}

func (l *requestLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.reqs
	l.reqs = nil
	return r
}

// carriesAgent reports whether a recorded request names agent in its path, query or body.
func carriesAgent(req, agent string) bool {
	return strings.Contains(req, "/v1/agents/"+agent+"/") || strings.Contains(req, "agent="+agent) ||
		strings.Contains(req, `"agent":"`+agent+`"`)
}

// commandsWithFlag lists the command paths (without "sandpit") that have the flag name.
func commandsWithFlag(root *cobra.Command, name string) []string {
	var out []string
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && c.Flags().Lookup(name) != nil {
			out = append(out, strings.TrimPrefix(c.CommandPath(), "sandpit "))
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	slices.Sort(out)
	return out
}

// TestEveryAgentFlagIsSent runs every command that has --agent with --agent bob against a fake
// daemon, and checks that a request it sent names bob: a flag accepted and then dropped shows
// another agent's data (`exec show ID --agent bob` printed any agent's record). Commands
// whose data belongs to no agent (packages, setup) have no --agent.
func TestEveryAgentFlagIsSent(t *testing.T) {
	daemon := &requestLog{}
	srv := httptest.NewServer(daemon)
	defer srv.Close()
	dir := t.TempDir()
	codeFile := filepath.Join(dir, "main.py")
	ndjson := filepath.Join(dir, "notes.ndjson")
	for name, text := range map[string]string{codeFile: "print(1)\n", ndjson: `{"text": "a note"}` + "\n"} {
		if err := os.WriteFile(name, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mcpSession := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_code","arguments":{}}}
`
	cases := map[string]struct {
		args  []string
		stdin string
	}{
		"run":               {args: []string{"-c", "print(1)"}},
		"mcp":               {stdin: mcpSession},
		"code save":         {args: []string{"tool", codeFile}},
		"code list":         {},
		"code show":         {args: []string{"tool"}},
		"code run":          {args: []string{"tool"}},
		"code rm":           {args: []string{"tool"}},
		"code versions":     {args: []string{"tool"}},
		"job create":        {args: []string{"tool", "--schedule", "@daily"}},
		"job list":          {},
		"job show":          {args: []string{"job_x"}},
		"job update":        {args: []string{"job_x", "--schedule", "@daily"}},
		"job pause":         {args: []string{"job_x"}},
		"job resume":        {args: []string{"job_x"}},
		"job run":           {args: []string{"job_x"}},
		"job rm":            {args: []string{"job_x"}},
		"job history":       {args: []string{"job_x"}},
		"session new":       {},
		"session ls":        {},
		"session show":      {args: []string{"se_aaaaaaaaaaaaaaaaaaaaaaaaaa"}},
		"session rm":        {args: []string{"se_aaaaaaaaaaaaaaaaaaaaaaaaaa"}},
		"session pause":     {args: []string{"se_aaaaaaaaaaaaaaaaaaaaaaaaaa"}},
		"session resume":    {args: []string{"se_aaaaaaaaaaaaaaaaaaaaaaaaaa"}},
		"session hibernate": {args: []string{"se_aaaaaaaaaaaaaaaaaaaaaaaaaa"}},
		"session fork":      {args: []string{"se_aaaaaaaaaaaaaaaaaaaaaaaaaa"}},
		"session run":       {args: []string{"se_aaaaaaaaaaaaaaaaaaaaaaaaaa", "-c", "print(1)"}},
		"session exec":      {args: []string{"se_aaaaaaaaaaaaaaaaaaaaaaaaaa", "-c", "true"}},
		"session cp":        {args: []string{codeFile, "se_aaaaaaaaaaaaaaaaaaaaaaaaaa:a.py"}},
		"session commands":  {args: []string{"se_aaaaaaaaaaaaaaaaaaaaaaaaaa"}},
		"session ps":        {args: []string{"se_aaaaaaaaaaaaaaaaaaaaaaaaaa"}},
		"session kill":      {args: []string{"se_aaaaaaaaaaaaaaaaaaaaaaaaaa", "pr_bbbbbbbbbbbbbbbbbbbbbbbbbb"}},
		"session wait":      {args: []string{"se_aaaaaaaaaaaaaaaaaaaaaaaaaa", "pr_bbbbbbbbbbbbbbbbbbbbbbbbbb"}},
		"session logs":      {args: []string{"se_aaaaaaaaaaaaaaaaaaaaaaaaaa", "pr_bbbbbbbbbbbbbbbbbbbbbbbbbb"}},
		"session ports":     {args: []string{"se_aaaaaaaaaaaaaaaaaaaaaaaaaa"}},
		"session share":     {args: []string{"se_aaaaaaaaaaaaaaaaaaaaaaaaaa", "8000"}},
		"session shares":    {args: []string{"se_aaaaaaaaaaaaaaaaaaaaaaaaaa"}},
		"session unshare":   {args: []string{"se_aaaaaaaaaaaaaaaaaaaaaaaaaa", "sh_bbbbbbbbbbbbbbbbbbbbbbbbbb"}},
		"session egress":    {args: []string{"se_aaaaaaaaaaaaaaaaaaaaaaaaaa"}},
		"exec list":         {},
		"exec show":         {args: []string{"ex_x"}},
		"exec files":        {args: []string{"ex_x"}},
		"kb import":         {args: []string{ndjson, "--kind", "memories"}},
		"kb list":           {args: []string{"--kind", "memories"}},
		"kb rm":             {args: []string{"note", "--kind", "memories"}},
		"keys create":       {},
		"keys list":         {},
		"secrets set":       {args: []string{"TOKEN", "--host", "api.example.com", "--from-file", codeFile}},
		"secrets list":      {},
		"secrets rm":        {args: []string{"TOKEN"}},
	}
	root := &cobra.Command{Use: "sandpit"}
	o := &options{}
	root.AddCommand(o.serveCommand(), o.runCommand(), o.codeCommand(), o.jobCommand(), o.sessionCommand(), o.execCommand(), o.packagesCommand(), o.kbCommand(),
		o.mcpCommand(), o.setupCommand(), o.doctorCommand(), o.imageCommand(), o.sandboxCommand(), o.keysCommand(), o.secretsCommand(), o.versionCommand(), o.benchCommand())
	withAgent := commandsWithFlag(root, "agent")
	for _, name := range withAgent {
		if _, ok := cases[name]; !ok {
			t.Errorf("sandpit %s has --agent but no case here: add one that shows the agent reaches the daemon", name)
		}
	}
	for name := range cases {
		if !slices.Contains(withAgent, name) {
			t.Errorf("sandpit %s has no --agent", name)
		}
	}
	// The agent given as --agent, and as SANDPIT_AGENT (a trial gave --agent to every session
	// command of one session), which --agent overrides.
	for _, via := range []struct{ name, flag, env string }{{"--agent bob", "bob", ""}, {"SANDPIT_AGENT=bob", "", "bob"}, {"SANDPIT_AGENT=carl --agent bob", "bob", "carl"}} {
		for _, name := range withAgent {
			c, ok := cases[name]
			if !ok {
				continue
			}
			args := append(strings.Fields(name), c.args...)
			if via.flag != "" {
				args = append(args, "--agent", via.flag)
			}
			args = append(args, "--url", srv.URL)
			var stderr strings.Builder
			// Standard input stays open until the daemon has seen a request (an MCP session ends
			// at its end of input).
			stdin, feed := io.Pipe()
			go func() {
				_, _ = io.WriteString(feed, c.stdin)
				for deadline := time.Now().Add(10 * time.Second); c.stdin != "" && !daemon.seen() && time.Now().Before(deadline); {
					time.Sleep(10 * time.Millisecond)
				}
				feed.Close()
			}()
			Main(context.Background(), args, Env{Stdin: stdin, Stdout: io.Discard, Stderr: &stderr,
				Lookup: func(k string) (string, bool) {
					switch {
					case k == "SANDPIT_DATA_DIR":
						return dir, true
					case k == "SANDPIT_AGENT" && via.env != "":
						return via.env, true
					}
					return "", false
				}})
			reqs := daemon.take()
			sent := false
			for _, r := range reqs {
				if strings.Contains(r, "/v1/limits") {
					continue
				}
				if !carriesAgent(r, "bob") {
					t.Errorf("sandpit %s with %s sent a request without the agent bob: %s", name, via.name, r)
				}
				sent = true
			}
			if !sent {
				t.Errorf("sandpit %s with %s sent no request to the daemon; stderr: %s", name, via.name, stderr.String())
			}
		}
	}
	// A name that is not one is a usage error naming --agent, before any request: ".." sent
	// in a route's path changed the route ("no endpoint GET /v1/sessions"), "" dropped a
	// segment of it.
	for _, name := range withAgent {
		c, ok := cases[name]
		if !ok {
			continue
		}
		for _, bad := range []string{"..", "", "Bob", "env:..", "env:Bob"} {
			args := append(strings.Fields(name), c.args...)
			from, env := "--agent", ""
			if v, ok := strings.CutPrefix(bad, "env:"); ok {
				bad, from, env = v, "SANDPIT_AGENT", v
			} else {
				args = append(args, "--agent", bad)
			}
			args = append(args, "--url", srv.URL)
			var stderr strings.Builder
			code := Main(context.Background(), args, Env{Stdin: strings.NewReader(c.stdin), Stdout: io.Discard, Stderr: &stderr,
				Lookup: func(k string) (string, bool) {
					switch {
					case k == "SANDPIT_DATA_DIR":
						return dir, true
					case k == "SANDPIT_AGENT" && env != "":
						return env, true
					}
					return "", false
				}})
			want := fmt.Sprintf("%s: %q is not a valid agent name: use 1 to 64", from, bad)
			if code != 64 || !strings.Contains(stderr.String(), want) {
				t.Errorf("sandpit %s with %s %q: exit %d, stderr %q; want 64 and %q", name, from, bad, code, stderr.String(), want)
			}
			if reqs := daemon.take(); len(reqs) > 0 {
				t.Errorf("sandpit %s with %s %q sent %s", name, from, bad, reqs)
			}
		}
	}
}

// TestErrorsSpeakCLI: a refusal naming a request field is said with the command's flag:
// `code rm` refused for jobs says --force (it said force=true), a bad dependency says --dep, a
// bad schedule --schedule once (it said "schedule: schedule ...").
func TestErrorsSpeakCLI(t *testing.T) {
	answers := map[string]string{
		"DELETE /v1/agents/default/code/tool":   `{"error": {"code": "conflict", "field": "force", "message": "the code is used by 1 job(s) [job_x]; delete or change them first, or delete with force=true, which also disables them"}}`,
		"POST /v1/executions":                   `{"error": {"code": "invalid_request", "field": "dependencies", "message": "dependencies[0] \"--index-url=x\" is not a requirement"}}`,
		"POST /v1/agents/default/jobs":          `{"error": {"code": "invalid_request", "field": "schedule", "message": "schedule \"x\": expected 5 fields"}}`,
		"POST /v1/agents/default/code/tool/run": `{"error": {"code": "invalid_request", "field": "timeout_ms", "message": "is 900000; allowed range is 1 to 600000 milliseconds"}}`,
		"POST /v1/agents/default/sessions":      `{"error": {"code": "invalid_request", "field": "max_lifetime_ms", "message": "is 18000000; allowed range is 1000 to 3600000 milliseconds (omit it for the default of 3600000)"}}`,
		"POST /v1/agents/default/code/big/run":  `{"error": {"code": "too_large", "field": "files[0].content", "message": "file \"big.bin\" is 9000000 bytes; the limit is 8388608 bytes per file (max_input_file_bytes)"}}`,
	}
	srv := cannedDaemon(answers, func(r *http.Request) int { return map[bool]int{true: 409, false: 400}[r.Method == "DELETE"] })
	defer srv.Close()
	dir := t.TempDir()
	codeFile := filepath.Join(dir, "main.py")
	if err := os.WriteFile(codeFile, []byte("print(1)\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args      []string
		want, not string
	}{
		{[]string{"code", "rm", "tool"}, "or delete with --force, which also disables them", "force=true"},
		{[]string{"run", "-c", "1", "--dep", "--index-url=x"}, `--dep "--index-url=x" is not a requirement`, "dependencies"},
		{[]string{"job", "create", "tool", "--schedule", "x"}, `sandpit: --schedule "x": expected 5 fields`, "schedule: schedule"},
		{[]string{"code", "run", "tool", "--timeout", "15m"}, "sandpit: --timeout: is 15m0s; allowed range is 1ms to 10m0s", "timeout_ms"},
		{[]string{"session", "new", "--lifetime", "5h"}, "sandpit: --lifetime: is 5h0m0s; allowed range is 1s to 1h0m0s (omit it for the default of 1h0m0s)", "max_lifetime_ms"},
		{[]string{"code", "run", "big", "--file", codeFile + "=big.bin"}, `sandpit: --file: file "big.bin" is 9000000 bytes`, "files[0]"},
	}
	for _, c := range cases {
		var stderr strings.Builder
		code := Main(context.Background(), append(c.args, "--url", srv.URL), Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr,
			Lookup: func(k string) (string, bool) { return dir, k == "SANDPIT_DATA_DIR" }})
		if code == 0 || !strings.Contains(stderr.String(), c.want) || strings.Contains(stderr.String(), c.not) {
			t.Errorf("%v: exit %d, stderr %q; want it to say %q and not %q", c.args, code, stderr.String(), c.want, c.not)
		}
	}
}

// TestOutputIsPrintedWhenNothingElseIs: `code run` (and `run`) of code that only sets OUTPUT
// printed nothing; OUTPUT is printed as JSON when the program printed nothing on stdout.
func TestOutputIsPrintedWhenNothingElseIs(t *testing.T) {
	var result string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			_, _ = io.WriteString(w, `{"status": "ok"}`)
			return
		}
		if r.Method != "POST" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, result)
	}))
	defer srv.Close()
	dir := t.TempDir()
	cases := []struct {
		result, want string
	}{
		{`{"outcome": "ok", "exit_code": 0, "stdout": "", "output": {"n": 3}}`, "{\"n\": 3}\n"},
		{`{"outcome": "ok", "exit_code": 0, "stdout": "", "output": null}`, ""},
		{`{"outcome": "ok", "exit_code": 0, "stdout": "hi\n", "output": {"n": 3}}`, ""}, // stdout is no terminal here; the program's own print came as it ran
	}
	for _, args := range [][]string{{"code", "run", "tool"}, {"run", "-c", "OUTPUT = 1"}} {
		for _, c := range cases {
			result = c.result
			var stdout, stderr strings.Builder
			code := Main(context.Background(), append(args, "--url", srv.URL), Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
				Lookup: func(k string) (string, bool) { return dir, k == "SANDPIT_DATA_DIR" }})
			if code != 0 || stdout.String() != c.want {
				t.Errorf("%v, result %s: exit %d, stdout %q, want %q (stderr %q)", args, c.result, code, stdout.String(), c.want, stderr.String())
			}
		}
	}
}

// TestJobAndCodeViews: job show prints the input, the timeout and "the latest version" (not
// version 0); empty lists say so instead of printing a header alone; code versions lists
// every version.
func TestJobAndCodeViews(t *testing.T) {
	answers := map[string]string{
		"GET /v1/agents/default/jobs/job_x": `{"id": "job_x", "agent": "default", "code_name": "tool", "code_version": null, "schedule": "@daily",
			"timezone": "UTC", "input": {"days": 7}, "timeout_ms": null, "enabled": true, "overlap": "skip", "catch_up": "skip", "next_fires": []}`,
		"GET /v1/agents/default/jobs":               `{"jobs": [], "next_cursor": ""}`,
		"GET /v1/agents/default/code":               `{"code": [], "next_cursor": ""}`,
		"GET /v1/agents/default/jobs/job_x/history": `{"fires": [], "next_cursor": ""}`,
		"GET /v1/executions":                        `{"executions": [], "next_cursor": ""}`,
		"GET /v1/agents/default/code/tool/versions": `{"versions": [{"version": 2, "description": "faster", "code_sha256": "0123456789abcdef", "created_at": "2026-11-30T10:00:00Z"},
			{"version": 1, "description": "first", "code_sha256": "fedcba9876543210", "created_at": "2026-11-29T10:00:00Z"}]}`,
	}
	srv := cannedDaemon(answers, func(*http.Request) int { return http.StatusOK })
	defer srv.Close()
	dir := t.TempDir()
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"job", "show", "job_x"}, []string{"code:      tool (the latest version)", `input:     {"days": 7}`, "timeout:   the daemon's default"}},
		{[]string{"job", "list"}, []string{"agent default has no jobs"}},
		{[]string{"code", "list"}, []string{"agent default has no saved code"}},
		{[]string{"job", "history", "job_x"}, []string{"job job_x has not fired yet"}},
		{[]string{"exec", "list"}, []string{"no executions match"}},
		{[]string{"code", "versions", "tool"}, []string{"VERSION", "2        2026-11-30T10:00:00Z  0123456789ab  faster", "1        2026-11-29T10:00:00Z  fedcba987654  first"}},
	}
	for _, c := range cases {
		var stdout, stderr strings.Builder
		code := Main(context.Background(), append(c.args, "--url", srv.URL), Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
			Lookup: func(k string) (string, bool) { return dir, k == "SANDPIT_DATA_DIR" }})
		for _, w := range c.want {
			if code != 0 || !strings.Contains(stdout.String(), w) {
				t.Errorf("%v: exit %d, stdout %q, want it to contain %q (stderr %q)", c.args, code, stdout.String(), w, stderr.String())
			}
		}
	}
}

// TestExecListShowsExitAndOutput: exec list shows each execution's exit code and a line of
// its output (the end of stderr for a failure), so reading a job's runs takes one call.
func TestExecListShowsExitAndOutput(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			_, _ = io.WriteString(w, `{"status": "ok"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"executions": [
			{"id": "ex_b", "agent": "a", "status": "finished", "outcome": "error", "exit_code": 1, "started_at": "2026-11-30T10:00:01Z", "source": "job",
			 "stdout_preview": "starting\n", "stderr_preview": "Traceback (most recent call last):\n  File \"main.py\", line 1\nValueError: bad row\n"},
			{"id": "ex_a", "agent": "a", "status": "finished", "outcome": "ok", "exit_code": 0, "started_at": "2026-11-30T10:00:00Z", "source": "job",
			 "stdout_preview": "total 42\n", "stderr_preview": ""}], "next_cursor": ""}`)
	}))
	defer srv.Close()
	dir := t.TempDir()
	var stdout, stderr strings.Builder
	code := Main(context.Background(), []string{"exec", "list", "--url", srv.URL}, Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
		Lookup: func(k string) (string, bool) { return dir, k == "SANDPIT_DATA_DIR" }})
	lines := strings.Split(stdout.String(), "\n")
	if code != 0 || len(lines) < 3 || !strings.Contains(lines[0], "EXIT") || !strings.Contains(lines[0], "PRINTED") ||
		!strings.Contains(lines[1], " 1 ") || !strings.HasSuffix(strings.TrimSpace(lines[1]), "ValueError: bad row") ||
		!strings.Contains(lines[2], " 0 ") || !strings.HasSuffix(strings.TrimSpace(lines[2]), "total 42") {
		t.Fatalf("exit %d, stdout:\n%s\nstderr: %s", code, stdout.String(), stderr.String())
	}
}

// cannedDaemon answers /healthz, and each "METHOD /path" of answers with its JSON body and the
// status status gives for the request; anything else is a 404.
func cannedDaemon(answers map[string]string, status func(*http.Request) int) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			_, _ = io.WriteString(w, `{"status": "ok"}`)
			return
		}
		body, ok := answers[r.Method+" "+r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status(r))
		_, _ = io.WriteString(w, body)
	}))
}

// TestDaemonURLFollowsListen: with SANDPIT_URL unset, the CLI looks where SANDPIT_LISTEN puts
// the daemon (a trial started `sandpit serve` with SANDPIT_LISTEN and `sandpit run` looked at
// the default port).
func TestDaemonURLFollowsListen(t *testing.T) {
	for _, tc := range []struct{ url, listen, want string }{
		{"", "", DefaultURL},
		{"", "127.0.0.1:18710", "http://127.0.0.1:18710"},
		{"", "0.0.0.0:9000", "http://127.0.0.1:9000"},
		{"", "[::]:9000", "http://127.0.0.1:9000"},
		{"", ":9000", "http://127.0.0.1:9000"},
		{"", "nonsense", DefaultURL},
		{"http://d:1", "127.0.0.1:18710", "http://d:1"},
	} {
		env := map[string]string{"SANDPIT_URL": tc.url, "SANDPIT_LISTEN": tc.listen}
		o := &options{env: Env{Lookup: func(k string) (string, bool) { v := env[k]; return v, v != "" }}}
		if got := o.daemonURL(""); got != tc.want {
			t.Errorf("SANDPIT_URL %q, SANDPIT_LISTEN %q: %s, want %s", tc.url, tc.listen, got, tc.want)
		}
	}
}

// TestDaemonURLFollowsTheConfigFile: a daemon started with a config file's listen is found by
// the client commands given the same file (a trial's `sandpit run` with SANDPIT_CONFIG looked at
// the default port, then found the data directory locked by that very daemon).
func TestDaemonURLFollowsTheConfigFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(file, []byte(`{"listen": "127.0.0.1:19401"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ listen, want string }{
		{"", "http://127.0.0.1:19401"},
		{"127.0.0.1:18710", "http://127.0.0.1:18710"}, // the environment over the file, as serve reads them
	} {
		env := map[string]string{"SANDPIT_LISTEN": tc.listen}
		o := &options{configFile: file, env: Env{Lookup: func(k string) (string, bool) { v := env[k]; return v, v != "" }}}
		if got := o.daemonURL(""); got != tc.want {
			t.Errorf("config listen 127.0.0.1:19401, SANDPIT_LISTEN %q: %s, want %s", tc.listen, got, tc.want)
		}
	}
}

// TestRunTextCannotDriveTheTerminal: H65 a run's own text in the CLI's lines (a preview in exec
// list, an agent.log line) is escaped: a trial's run printed "\x1b[1A\x1b[2K" to erase the row
// above and forge one, and logged OSC 52 to write the operator's clipboard.
func TestRunTextCannotDriveTheTerminal(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			_, _ = io.WriteString(w, `{"status": "ok"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"executions": [
			{"id": "ex_a", "agent": "a", "status": "finished", "outcome": "ok", "exit_code": 0, "started_at": "2026-11-30T10:00:00Z", "source": "api",
			 "stdout_preview": "\u001b[1A\u001b[2K\rex_forged alice ok \u202eevil\n", "stderr_preview": ""}], "next_cursor": ""}`)
	}))
	defer srv.Close()
	dir := t.TempDir()
	var stdout, stderr strings.Builder
	code := Main(context.Background(), []string{"exec", "list", "--url", srv.URL}, Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
		Lookup: func(k string) (string, bool) { return dir, k == "SANDPIT_DATA_DIR" }})
	if out := stdout.String(); code != 0 || strings.ContainsAny(out, "\x1b\r\u202e") || !strings.Contains(out, `\x1b[1A`) || !strings.Contains(out, `\u202eevil`) {
		t.Errorf("exec list: exit %d, stdout %q: want the run's escapes written as text", code, out)
	}

	o := &options{env: Env{Stdout: &stdout, Stderr: &stderr}}
	stderr.Reset()
	o.emitter(false, false)(apitype.Event{Stream: apitype.StreamLog, Level: "info", Data: "\x1b]52;c;ZWNobyBwd25lZA==\x07 \x1b[2J"})
	if got := stderr.String(); strings.ContainsAny(got, "\x1b\x07") || !strings.Contains(got, `\x1b]52;c;`) {
		t.Errorf("agent.log line %q: want its escapes written as text", got)
	}
}
