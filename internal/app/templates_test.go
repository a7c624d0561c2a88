package app_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/e2b/e2bclient"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/internal/testenv/pyindex"
)

// buildTemplate posts a template build to url (…/templates) asking for NDJSON and returns
// its events.
func buildTemplate(t *testing.T, url, body string) []apitype.TemplateEvent {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		t.Fatalf("build: %d %s", resp.StatusCode, b.String())
	}
	var events []apitype.TemplateEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e apitype.TemplateEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("event %q: %v", sc.Text(), err)
		}
		if e.Type == "step" {
			t.Logf("%s step %d/%d: %s", time.Now().Format("15:04:05.000"), e.Step, e.Steps, e.Label)
		}
		events = append(events, e)
	}
	if len(events) == 0 {
		t.Fatal("the build streamed no events")
	}
	return events
}

// egressCheck is a build step's program: it connects to the address in its argument on
// its own, then fetches a URL of no package source through the build's proxy, and says how
// each went.
const egressCheck = `import socket, sys, urllib.request
try:
    socket.create_connection((sys.argv[1], 80), timeout=5)
    print("egress-check direct: connected")
except OSError:
    print("egress-check direct: failed")
try:
    urllib.request.urlopen("http://not-a-source.example/", timeout=20)
    print("egress-check proxied: fetched")
except Exception as e:
    print("egress-check proxied:", e)
`

// TestTemplates builds one template for real (an apt step installing jq, a pip step from a
// local index, a file, shell steps, env, a preload and a start command with a ready check),
// its build's network held to the package sources, then
// starts sessions of it through REST and the CLI, rebuilds it from the cache, refuses it to
// another agent, names a failing build's step, and reports an image removed by hand.
func TestTemplates(t *testing.T) {
	t.Parallel() // its build waits on apt, pip and the engine: beside the other long ones (docs/testing.md)
	idx := pyindex.New(t)
	idx.AddWheel("tinypkg", "1.0", `VALUE = "tiny 1.0"`)
	cfg := testConfig(t)
	cfg.Slots, cfg.ForkServer = 1, false
	cfg.IndexURL, cfg.TrustedHosts = idx.URL(), []string{idx.Host()}
	cfg.TemplatePools = map[string]int{"alice/tools": 1} // waits for the build below
	url, _ := startDaemon(t, cfg)
	base := url + "/v1/agents/alice/templates"
	// The Debian mirror's address as the host resolves it: apt reaches it through the proxy.
	mirror := "192.0.2.1"
	if addrs, err := net.LookupHost("deb.debian.org"); err == nil {
		mirror = addrs[0]
	}

	spec := `{"name": "tools", "spec": {
		"steps": [
			{"apt": ["jq"]},
			{"pip": ["tinypkg==1.0"]},
			{"file": {"path": "/opt/tools/hello.txt", "content": "hello from the template\n"}},
			{"run": "jq --version > /opt/tools/jq-version && chmod 0644 /opt/tools/jq-version"},
			{"file": {"path": "/opt/tools/egress.py", "content": ` + strconv.Quote(egressCheck) + `}},
			{"run": "python3 /opt/tools/egress.py ` + mirror + `"}
		],
		"env": {"GREETING": "hi there"},
		"preload": ["tinypkg"],
		"start": {"cmd": "echo \"started ${TOKEN-} ${SSL_CERT_FILE-}\" > /tmp/started; exec sleep 100000", "ready": "test -f /tmp/started"}}}`
	events := buildTemplate(t, base, spec)
	var steps []string
	for _, e := range events {
		if e.Type == "step" {
			steps = append(steps, e.Label)
		}
	}
	last := events[len(events)-1]
	if last.Type != "done" || last.Template == nil || last.Template.Status != "ready" || last.Cached {
		t.Fatalf("last event %+v, want a fresh build done and ready (steps %q)", last, steps)
	}
	want := []string{"apt jq", "pip tinypkg==1.0", "file /opt/tools/hello.txt", "run jq --version > /opt/tools/jq-version && chmod 0644 /opt/tools/jq-version",
		"file /opt/tools/egress.py", "run python3 /opt/tools/egress.py " + mirror, "sandpit layer"}
	if strings.Join(steps, "|") != strings.Join(want, "|") {
		t.Errorf("steps %q, want %q", steps, want)
	}
	// The build egress policy: apt and pip reached their sources through the daemon's
	// proxy, but a step's own connection to the mirror's address went nowhere (the build's
	// network is internal), and a proxied request elsewhere was refused and said so.
	var log strings.Builder
	for _, e := range events {
		if e.Type == "log" {
			log.WriteString(e.Line + "\n")
		}
	}
	for _, line := range []string{"egress-check direct: failed", "egress-check proxied: HTTP Error 403",
		"sandpit: the build's connection to not-a-source.example:80: no entry of template_build_allow in the configuration"} {
		if !strings.Contains(log.String(), line) {
			t.Errorf("the build's log has no %q:\n%s", line, log.String())
		}
	}
	built := *last.Template
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", built.Image, built.LayerImage).Run() })

	t.Run("cached", func(t *testing.T) {
		events := buildTemplate(t, base, spec)
		last := events[len(events)-1]
		if last.Type != "done" || !last.Cached || last.Template.Image != built.Image || last.Template.Version != built.Version {
			t.Fatalf("rebuild: %+v, want done, cached, image %s, version %d", last, built.Image, built.Version)
		}
	})

	t.Run("warm pool", func(t *testing.T) {
		// Once built, the template's pool holds a warm session of it, its start command run:
		// a creation without env or secrets claims it, one with secrets starts cold.
		adopted := func(s apitype.Session) bool {
			for _, e := range s.History {
				if e.Event == "adopted" {
					return true
				}
			}
			return false
		}
		create := func(body string) apitype.Session {
			t.Helper()
			status, raw := httpCall(t, "POST", url+"/v1/agents/alice/sessions", body)
			var s apitype.Session
			if err := json.Unmarshal(raw, &s); err != nil || status != 201 {
				t.Fatalf("create %s: %d %s (%v)", body, status, raw, err)
			}
			t.Cleanup(func() { httpCall(t, "DELETE", url+"/v1/agents/alice/sessions/"+s.ID, "") })
			return s
		}
		var s apitype.Session
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
			s = create(`{"template": "tools"}`)
			if adopted(s) {
				break
			}
			httpCall(t, "DELETE", url+"/v1/agents/alice/sessions/"+s.ID, "")
			if time.Now().After(deadline) {
				t.Fatalf("no session of template tools came from its warm pool in 3 minutes (last: %+v)", s)
			}
		}
		if s.Template != "tools" {
			t.Errorf("the claimed session's template is %q, want tools", s.Template)
		}
		if status, body := httpCall(t, "GET", url+"/metrics", ""); status != 200 || !strings.Contains(string(body), `sandpit_template_pool_claims_total{template="alice/tools"} `) {
			t.Errorf("/metrics: %d, want the template pool's claims of alice/tools", status)
		}
		// The spec's preload was imported before the claim.
		raw, _ := json.Marshal(map[string]string{"code": "import os, subprocess, sys; print(subprocess.run(['jq', '-n', '1+2'], capture_output=True, text=True).stdout.strip(), os.environ['GREETING'], os.path.exists('/tmp/started'), 'tinypkg' in sys.modules)"})
		status, body := httpCall(t, "POST", url+"/v1/agents/alice/sessions/"+s.ID+"/executions", string(raw))
		var res apitype.Result
		if err := json.Unmarshal(body, &res); err != nil || status != 200 || res.Stdout != "3 hi there True True\n" {
			t.Fatalf("a call in the claimed session: %d %s (%v), want jq, the template's env, its start command's mark and its preload", status, body, err)
		}
		if res.Template != "tools" || res.TemplateVersion != built.Version {
			t.Errorf("the claimed session's call recorded template %q v%d, want tools v%d", res.Template, res.TemplateVersion, built.Version)
		}
		// Its start command ran as its own user, not root.
		status, body = httpCall(t, "POST", url+"/v1/agents/alice/sessions/"+s.ID+"/commands", `{"cmd": "stat -c %u /tmp/started; id -u"}`)
		var out struct{ Stdout string }
		_ = json.Unmarshal(body, &out)
		if f := strings.Fields(out.Stdout); status != 200 || len(f) != 2 || f[0] != f[1] || f[0] == "0" {
			t.Errorf("the warm start command's file and the session's user: %d %s, want one uid, not root", status, body)
		}
		if cold := create(`{"template": "tools", "env": {"MODE": "cold"}}`); adopted(cold) {
			t.Errorf("a creation with env claimed a warm session whose start command never saw it: %+v", cold.History)
		}
	})

	t.Run("session", func(t *testing.T) {
		// The start command has the session's secrets as its commands have them: the
		// placeholder and the trust bundle, never the value.
		if status, body := httpCall(t, "PUT", url+"/v1/secrets/TOKEN", `{"value": "tok-VALUE-2718", "hosts": ["api.example.com"]}`); status != 200 {
			t.Fatalf("setting a secret: %d %s", status, body)
		}
		status, body := httpCall(t, "POST", url+"/v1/agents/alice/sessions", `{"template": "tools", "secrets": ["TOKEN"], "env": {"MODE": "rest"}}`)
		if status != 201 {
			t.Fatalf("create: %d %s", status, body)
		}
		var s apitype.Session
		if err := json.Unmarshal(body, &s); err != nil || s.Template != "tools" {
			t.Fatalf("session %s (%v), want template tools", body, err)
		}
		defer httpCall(t, "DELETE", url+"/v1/agents/alice/sessions/"+s.ID, "")
		code := `import os, subprocess, tinypkg
try:
    open("/usr/local/owned", "w")
    root_writable = True
except OSError:
    root_writable = False
OUTPUT = {"jq": subprocess.run(["jq", "-n", "1+1"], capture_output=True, text=True).stdout.strip(),
          "tiny": tinypkg.VALUE, "file": open("/opt/tools/hello.txt").read(),
          "jq_version": open("/opt/tools/jq-version").read().strip(),
          "started": os.path.exists("/tmp/started"), "uid": os.getuid(), "root_writable": root_writable,
          "greeting": os.environ.get("GREETING"), "mode": os.environ.get("MODE")}`
		raw, _ := json.Marshal(map[string]string{"code": code})
		status, body = httpCall(t, "POST", url+"/v1/agents/alice/sessions/"+s.ID+"/executions", string(raw))
		var res struct {
			Outcome string `json:"outcome"`
			Stderr  string `json:"stderr"`
			Output  struct {
				JQ           string `json:"jq"`
				Tiny         string `json:"tiny"`
				File         string `json:"file"`
				JQVersion    string `json:"jq_version"`
				Started      bool   `json:"started"`
				RootWritable bool   `json:"root_writable"`
				UID          int    `json:"uid"`
				Greeting     string `json:"greeting"`
				Mode         string `json:"mode"`
			} `json:"output"`
		}
		if err := json.Unmarshal(body, &res); err != nil || status != 200 || res.Outcome != "ok" {
			t.Fatalf("call: %d %s (%v)", status, body, err)
		}
		o := res.Output
		if o.JQ != "2" || o.Tiny != "tiny 1.0" || o.File != "hello from the template\n" || !strings.HasPrefix(o.JQVersion, "jq-") || !o.Started {
			t.Errorf("in the session: %s", body)
		}
		if o.Greeting != "hi there" || o.Mode != "rest" {
			t.Errorf("the session's code sees GREETING %q and MODE %q, want the template's env and the request's", o.Greeting, o.Mode)
		}
		// A call's own change to a variable of the env persists, as its globals do.
		raw, _ = json.Marshal(map[string]string{"code": "import os; os.environ['GREETING'] = 'changed'"})
		if status, body := httpCall(t, "POST", url+"/v1/agents/alice/sessions/"+s.ID+"/executions", string(raw)); status != 200 || !strings.Contains(string(body), `"outcome":"ok"`) {
			t.Fatalf("changing GREETING: %d %s", status, body)
		}
		raw, _ = json.Marshal(map[string]string{"code": "import os; print(os.environ['GREETING'])"})
		if status, body := httpCall(t, "POST", url+"/v1/agents/alice/sessions/"+s.ID+"/executions", string(raw)); status != 200 || !strings.Contains(string(body), `"stdout":"changed\n"`) {
			t.Errorf("GREETING after the call that changed it: %d %s, want changed", status, body)
		}
		if o.UID == 0 || o.RootWritable {
			t.Errorf("the session's code runs as uid %d, root writable %v: the runtime's rules must hold in a template", o.UID, o.RootWritable)
		}
		status, body = httpCall(t, "POST", url+"/v1/agents/alice/sessions/"+s.ID+"/commands", `{"cmd": "echo \"$GREETING\""}`)
		if status != 200 || !strings.Contains(string(body), `"stdout":"hi there\n"`) {
			t.Errorf("a command's env: %d %s, want GREETING from the template", status, body)
		}
		status, body = httpCall(t, "POST", url+"/v1/agents/alice/sessions/"+s.ID+"/commands", `{"cmd": "cat /tmp/started; grep -c 'BEGIN CERTIFICATE' \"$(cut -d' ' -f3 /tmp/started)\""}`)
		var out struct{ Stdout string }
		_ = json.Unmarshal(body, &out)
		if f := strings.Fields(out.Stdout); status != 200 || len(f) != 4 || f[1] != "sandpit-secret:TOKEN" || !strings.HasPrefix(f[2], "/sandbox/secrets-ca-") || f[3] == "0" || f[3] == "1" {
			t.Errorf("the start command's secrets: %d %s, want the placeholder and a bundle of the box's roots and the daemon's CA", status, body)
		}
	})

	t.Run("fork and resume", func(t *testing.T) {
		// A fork and a resumed hibernation are new sandboxes of the template: its start command
		// runs in each again (its process is not copied), and each keeps the template.
		status, body := httpCall(t, "POST", url+"/v1/agents/alice/sessions", `{"template": "tools"}`)
		var s apitype.Session
		if err := json.Unmarshal(body, &s); err != nil || status != 201 {
			t.Fatalf("create: %d %s (%v)", status, body, err)
		}
		defer httpCall(t, "DELETE", url+"/v1/agents/alice/sessions/"+s.ID, "")
		running := func(id string) string {
			t.Helper()
			status, body := httpCall(t, "POST", url+"/v1/agents/alice/sessions/"+id+"/commands",
				`{"cmd": "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done | grep -c '^sleep 100000'"}`)
			var out struct{ Stdout string }
			if err := json.Unmarshal(body, &out); err != nil || status != 200 {
				t.Fatalf("listing session %s's processes: %d %s (%v)", id, status, body, err)
			}
			return strings.TrimSpace(out.Stdout)
		}
		if n := running(s.ID); n != "1" {
			t.Fatalf("the template's start command runs %s times in a new session, want 1", n)
		}
		if status, body := httpCall(t, "POST", url+"/v1/agents/alice/sessions/"+s.ID+"/pause", ""); status != 200 {
			t.Fatalf("pause: %d %s", status, body)
		}
		status, body = httpCall(t, "POST", url+"/v1/agents/alice/sessions/"+s.ID+"/fork", "")
		var fork apitype.Session
		if err := json.Unmarshal(body, &fork); err != nil || status != 201 {
			t.Fatalf("fork: %d %s (%v)", status, body, err)
		}
		defer httpCall(t, "DELETE", url+"/v1/agents/alice/sessions/"+fork.ID, "")
		if fork.Template != "tools" {
			t.Errorf("the fork of a session of template tools has template %q", fork.Template)
		}
		if n := running(fork.ID); n != "1" {
			t.Errorf("the template's start command runs %s times in the fork, want 1", n)
		}
		if status, body := httpCall(t, "POST", url+"/v1/agents/alice/sessions/"+fork.ID+"/hibernate", ""); status != 200 {
			t.Fatalf("hibernate the fork: %d %s", status, body)
		}
		if status, body := httpCall(t, "POST", url+"/v1/agents/alice/sessions/"+fork.ID+"/resume", ""); status != 200 {
			t.Fatalf("resume the fork: %d %s", status, body)
		}
		raw, _ := json.Marshal(map[string]string{"code": "import subprocess; print(subprocess.run(['jq', '-n', '2*3'], capture_output=True, text=True).stdout)"})
		status, body = httpCall(t, "POST", url+"/v1/agents/alice/sessions/"+fork.ID+"/executions", string(raw))
		var res apitype.Result
		if err := json.Unmarshal(body, &res); err != nil || status != 200 || res.Stdout != "6\n\n" {
			t.Fatalf("a call of the fork resumed from hibernation: %d %s (%v), want jq's 6 from the template", status, body, err)
		}
		if res.Template != "tools" || res.TemplateVersion != built.Version {
			t.Errorf("the resumed fork's call says template %q v%d, want tools v%d", res.Template, res.TemplateVersion, built.Version)
		}
		if n := running(fork.ID); n != "1" {
			t.Errorf("the template's start command runs %s times in the resumed fork, want 1", n)
		}
	})

	t.Run("one-shot", func(t *testing.T) {
		status, body := httpCall(t, "POST", url+"/v1/executions", `{"agent": "alice", "template": "tools", "code": "import os, subprocess; print(subprocess.run(['jq', '-n', '6*7'], capture_output=True, text=True).stdout, os.environ['GREETING'])"}`)
		if status != 200 || !strings.Contains(string(body), `"stdout":"42\n hi there\n"`) {
			t.Errorf("a one-shot run of the template: %d %s", status, body)
		}
		// The ledger says which template (and version) ran it, and selects by it.
		var res apitype.Result
		if err := json.Unmarshal(body, &res); err != nil {
			t.Fatal(err)
		}
		status, body = httpCall(t, "GET", url+"/v1/executions/"+res.ID, "")
		var rec apitype.Execution
		if err := json.Unmarshal(body, &rec); err != nil || status != 200 || rec.Template != "tools" || rec.TemplateVersion != built.Version {
			t.Errorf("the one-shot run's record: %d %s (%v), want template tools v%d", status, body, err, built.Version)
		}
		status, body = httpCall(t, "GET", url+"/v1/executions?agent=alice&template=tools&limit=100", "")
		var list apitype.ExecutionList
		if err := json.Unmarshal(body, &list); err != nil || status != 200 || len(list.Executions) == 0 || list.Executions[0].ID != res.ID {
			t.Errorf("GET /v1/executions?template=tools: %d %s (%v), want the one-shot run first", status, body, err)
		}
		for _, e := range list.Executions {
			if e.Template != "tools" {
				t.Errorf("template=tools lists %s of template %q", e.ID, e.Template)
			}
		}
		code, stdout, stderr := cliAt(url)("run", "--agent", "alice", "--template", "tools", "-c", "import tinypkg; print(tinypkg.VALUE)")
		if code != 0 || stdout != "tiny 1.0\n" {
			t.Errorf("sandpit run --template: %d %q %q", code, stdout, stderr)
		}
		code, stdout, stderr = cliAt(url)("template", "ls", "--agent", "alice")
		if code != 0 || !strings.Contains(stdout, "tools") || !strings.Contains(stdout, "ready") {
			t.Errorf("sandpit template ls: %d %q %q", code, stdout, stderr)
		}
	})

	t.Run("versions and tags", func(t *testing.T) {
		// Two versions of one template side by side: each starts as NAME:VERSION, a tag
		// names one (CLI and REST), and NAME alone is the current one.
		layered := func(content string) apitype.Template {
			t.Helper()
			events := buildTemplate(t, base, `{"name": "layered", "spec": {"base": "template:tools", "steps": [{"file": {"path": "/opt/which", "content": "`+content+`"}}]}}`)
			last := events[len(events)-1]
			if last.Type != "done" {
				t.Fatalf("building layered %s: %+v", content, last)
			}
			return *last.Template
		}
		v1, v2 := layered("one"), layered("two")
		t.Cleanup(func() { httpCall(t, "DELETE", base+"/layered", "") })
		if v2.Version != v1.Version+1 || v2.Image == v1.Image {
			t.Fatalf("versions %d (%s) and %d (%s): want two images", v1.Version, v1.Image, v2.Version, v2.Image)
		}
		which := func(ref string) string {
			t.Helper()
			code, stdout, stderr := cliAt(url)("run", "--agent", "alice", "--template", ref, "-c", "print(open('/opt/which').read())")
			if code != 0 {
				t.Fatalf("sandpit run --template %s: %d %q %q", ref, code, stdout, stderr)
			}
			return strings.TrimSpace(stdout)
		}
		if got := which(fmt.Sprintf("layered:%d", v1.Version)); got != "one" {
			t.Errorf("layered:%d read %q, want one", v1.Version, got)
		}
		if got := which("layered"); got != "two" {
			t.Errorf("layered read %q, want two (the current version)", got)
		}
		code, stdout, stderr := cliAt(url)("template", "tag", "layered", "stable", "--agent", "alice", "--version", strconv.Itoa(v1.Version))
		if code != 0 || !strings.Contains(stdout, "layered:stable is version 1") {
			t.Fatalf("sandpit template tag: %d %q %q", code, stdout, stderr)
		}
		status, body := httpCall(t, "POST", url+"/v1/agents/alice/sessions", `{"template": "layered:stable"}`)
		var sess apitype.Session
		if err := json.Unmarshal(body, &sess); err != nil || status != 201 {
			t.Fatalf("a session of layered:stable: %d %s", status, body)
		}
		t.Cleanup(func() { httpCall(t, "DELETE", url+"/v1/agents/alice/sessions/"+sess.ID, "") })
		status, body = httpCall(t, "POST", url+"/v1/agents/alice/sessions/"+sess.ID+"/executions", `{"code": "print(open('/opt/which').read())"}`)
		var res apitype.Result
		if err := json.Unmarshal(body, &res); err != nil || status != 200 || res.Stdout != "one\n" || res.TemplateVersion != v1.Version {
			t.Errorf("a call in a session of layered:stable: %d %s, want version 1's file", status, body)
		}
		code, stdout, stderr = cliAt(url)("template", "versions", "layered", "--agent", "alice")
		if code != 0 || !strings.Contains(stdout, "2 *") || !strings.Contains(stdout, "stable") {
			t.Errorf("sandpit template versions: %d %q %q", code, stdout, stderr)
		}
		// A version not kept is refused with what is kept, in the CLI's words.
		code, _, stderr = cliAt(url)("run", "--agent", "alice", "--template", "layered:9", "-c", "1")
		if code == 0 || !strings.Contains(stderr, "versions 2 and 1") || !strings.Contains(stderr, "sandpit template versions layered") {
			t.Errorf("a version not kept: %d %q", code, stderr)
		}
		// Removing version 1 takes its image and its tag; the current one is not removed alone.
		if status, body := httpCall(t, "DELETE", base+"/layered/versions/2", ""); status != 409 {
			t.Errorf("DELETE the current version: %d %s, want 409", status, body)
		}
		// Once no container runs on it (the session's is removed after its DELETE answers; an
		// image in use waits, as TestImageInUseIsRemovedLater shows).
		httpCall(t, "DELETE", url+"/v1/agents/alice/sessions/"+sess.ID, "")
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			out, _ := exec.Command("docker", "ps", "-aq", "--filter", "ancestor="+v1.Image).Output()
			if len(strings.TrimSpace(string(out))) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("containers of version 1's image are left a minute after its session's removal: %s", out)
			}
		}
		if status, body := httpCall(t, "DELETE", base+"/layered/versions/1", ""); status != 204 {
			t.Fatalf("DELETE version 1: %d %s", status, body)
		}
		if err := exec.Command("docker", "image", "inspect", v1.Image).Run(); err == nil {
			t.Errorf("version 1's image %s is still in the engine", v1.Image)
		}
		if status, body := httpCall(t, "GET", base+"/layered", ""); status != 200 || strings.Contains(string(body), "stable") {
			t.Errorf("the template after its tagged version went: %d %s, want no tag", status, body)
		}
	})

	t.Run("saved code and jobs", func(t *testing.T) {
		// Saved code naming the template runs in a sandbox of it, by REST, the CLI and a
		// job's fire, and the ledger says so.
		save := `{"name": "double", "template": "tools", "code": "import os, subprocess\nOUTPUT = {'jq': subprocess.run(['jq', '-n', str(INPUT['n']) + '*2'], capture_output=True, text=True).stdout.strip(), 'greeting': os.environ['GREETING']}",
			"input_schema": {"type": "object", "required": ["n"]}}`
		if status, body := httpCall(t, "POST", url+"/v1/agents/alice/code", save); status != 201 || !strings.Contains(string(body), `"template":"tools"`) {
			t.Fatalf("saving code naming the template: %d %s", status, body)
		}
		status, body := httpCall(t, "POST", url+"/v1/agents/alice/code/double/run", `{"input": {"n": 21}}`)
		var res apitype.Result
		var out struct{ JQ, Greeting string }
		if err := json.Unmarshal(body, &res); err != nil || status != 200 || json.Unmarshal(res.Output, &out) != nil || out.JQ != "42" || out.Greeting != "hi there" {
			t.Fatalf("running it: %d %s (%v)", status, body, err)
		}
		record := func(id string) apitype.Execution {
			t.Helper()
			status, body := httpCall(t, "GET", url+"/v1/executions/"+id, "")
			var rec apitype.Execution
			if err := json.Unmarshal(body, &rec); err != nil || status != 200 {
				t.Fatalf("record %s: %d %s (%v)", id, status, body, err)
			}
			return rec
		}
		if rec := record(res.ID); rec.Template != "tools" || rec.TemplateVersion != built.Version || rec.CodeName != "double" {
			t.Errorf("the saved code's run recorded %+v, want template tools v%d and code double", rec, built.Version)
		}
		code, stdout, stderr := cliAt(url)("code", "run", "double", "--agent", "alice", "--input", `{"n": 4}`)
		if code != 0 || !strings.Contains(strings.ReplaceAll(stdout, " ", ""), `"jq":"8"`) {
			t.Errorf("sandpit code run: %d %q %q", code, stdout, stderr)
		}
		code, stdout, stderr = cliAt(url)("code", "list", "--agent", "alice")
		if code != 0 || !strings.Contains(stdout, "TEMPLATE") || !strings.Contains(stdout, "tools") {
			t.Errorf("sandpit code list: %d %q %q, want the template column", code, stdout, stderr)
		}

		var job apitype.Job
		if st := call(t, "POST", url+"/v1/agents/alice/jobs", `{"code_name": "double", "schedule": "0 6 * * *", "input": {"n": 5}}`, &job); st != 201 {
			t.Fatalf("a job of the code: %d", st)
		}
		var fire apitype.Fire
		if st := call(t, "POST", url+"/v1/agents/alice/jobs/"+job.ID+"/run", "", &fire); st != 200 || fire.ExecutionID == "" {
			t.Fatalf("firing it: %d %+v", st, fire)
		}
		// Its record begins once the template's session is there to run it.
		var rec apitype.Execution
		for deadline := time.Now().Add(2 * time.Minute); rec.Status != apitype.StatusFinished && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			rec = apitype.Execution{}
			if status, body := httpCall(t, "GET", url+"/v1/executions/"+fire.ExecutionID, ""); status == 200 {
				_ = json.Unmarshal(body, &rec)
			}
		}
		if rec.Outcome != "ok" || rec.Template != "tools" || rec.JobID != job.ID || !strings.Contains(strings.ReplaceAll(string(rec.Output), " ", ""), `"jq":"10"`) {
			t.Errorf("the job's run: %+v, want ok in template tools with jq 10", rec)
		}

		// The template is kept while the code names it.
		if status, body := httpCall(t, "DELETE", url+"/v1/agents/alice/templates/tools", ""); status != 409 || !strings.Contains(string(body), "saved code double") {
			t.Errorf("deleting the template the code names: %d %s, want 409 naming double", status, body)
		}
		// A template that cannot start is refused when the code is saved, naming it.
		status, body = httpCall(t, "POST", url+"/v1/agents/bob/code", `{"name": "x", "code": "print(1)", "template": "tools"}`)
		if status != 400 || !strings.Contains(string(body), "tools") {
			t.Errorf("another agent's code naming alice's template: %d %s, want 400 naming it", status, body)
		}
	})

	t.Run("e2b", func(t *testing.T) {
		st, err := app.OpenKeys(t.Context(), cfg, testenv.Logger())
		if err != nil {
			t.Fatal(err)
		}
		key, _, err := st.CreateAPIKey(t.Context(), "alice", "test")
		st.Close()
		if err != nil {
			t.Fatal(err)
		}
		c := &e2bclient.Client{APIURL: url + app.E2BPrefix, SandboxURL: url + app.E2BPrefix, APIKey: key}
		sb, err := c.Create(t.Context(), map[string]any{"templateID": "tools"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Kill(context.WithoutCancel(t.Context()), sb.SandboxID)
		res, err := c.Conn(sb.SandboxID, sb.EnvdAccessToken).Run(t.Context(), "jq -n '2+3' && cat /opt/tools/hello.txt", nil, nil)
		if err != nil || res.ExitCode != 0 || res.Stdout != "5\nhello from the template\n" {
			t.Errorf("Sandbox.create(template=tools) then a command: %+v %v", res, err)
		}
		if ex, err := c.Conn(sb.SandboxID, sb.EnvdAccessToken).RunCode(t.Context(), "import os\nprint(os.environ['GREETING'])", "", nil); err != nil || strings.Join(ex.Stdout, "") != "hi there\n" {
			t.Errorf("Sandbox.create(template=tools) then run_code: %+v %v, want the template's env", ex, err)
		}
	})

	t.Run("e2b builder", func(t *testing.T) {
		// E2B's template builder, as the SDK's Template.build speaks it: request a build,
		// upload a COPY step's files to the link it is given, start the steps, follow the
		// status; then Sandbox.create of the new template. It starts from template "tools",
		// whose layer is built already.
		st, err := app.OpenKeys(t.Context(), cfg, testenv.Logger())
		if err != nil {
			t.Fatal(err)
		}
		key, _, err := st.CreateAPIKey(t.Context(), "alice", "builder")
		st.Close()
		if err != nil {
			t.Fatal(err)
		}
		c := &e2bclient.Client{APIURL: url + app.E2BPrefix, SandboxURL: url + app.E2BPrefix, APIKey: key}
		var req struct{ TemplateID, BuildID string }
		if _, err := c.Control(t.Context(), "POST", "/v3/templates", map[string]any{"name": "e2b-built:v1", "cpuCount": 1, "memoryMB": 512}, &req); err != nil {
			t.Fatal(err)
		}
		defer c.Control(context.WithoutCancel(t.Context()), "DELETE", "/templates/e2b-built", nil, nil)
		var archive bytes.Buffer
		tw := tar.NewWriter(&archive)
		_ = tw.WriteHeader(&tar.Header{Name: "conf/app.toml", Mode: 0o644, Size: 9, Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte("mode = 1\n"))
		_ = tw.Close()
		var link struct {
			Present bool
			URL     string
		}
		if _, err := c.Control(t.Context(), "GET", "/templates/e2b-built/files/conf-hash", nil, &link); err != nil || link.Present {
			t.Fatalf("file link: %+v %v", link, err)
		}
		// The SDK PUTs the archive to the link as it is, with no API key.
		put, _ := http.NewRequestWithContext(t.Context(), "PUT", link.URL, bytes.NewReader(archive.Bytes()))
		if resp, err := http.DefaultClient.Do(put); err != nil || resp.StatusCode != 200 {
			t.Fatalf("upload: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
		steps := map[string]any{"fromTemplate": "tools", "steps": []map[string]any{
			{"type": "COPY", "args": []string{"conf", "/etc/e2b-app/", "", ""}, "filesHash": "conf-hash"},
			{"type": "ENV", "args": []string{"APP_MODE", "built"}},
			{"type": "RUN", "args": []string{"cat /opt/tools/hello.txt /etc/e2b-app/app.toml > /opt/e2b-built", "root"}},
		}}
		if _, err := c.Control(t.Context(), "POST", "/v2/templates/e2b-built/builds/"+req.BuildID, steps, nil); err != nil {
			t.Fatal(err)
		}
		var status struct {
			Status     string
			LogEntries []struct{ Message, Step string }
			Reason     *struct{ Message, Step string }
		}
		deadline := time.Now().Add(10 * time.Minute)
		for offset := 0; time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if _, err := c.Control(t.Context(), "GET", fmt.Sprintf("/templates/e2b-built/builds/%s/status?logsOffset=%d", req.BuildID, offset), nil, &status); err != nil {
				t.Fatal(err)
			}
			offset += len(status.LogEntries)
			if status.Status != "building" {
				break
			}
		}
		if status.Status != "ready" {
			t.Fatalf("the build ended %q: %+v", status.Status, status.Reason)
		}
		// The build's tag (alias "e2b-built:v1") names the version built.
		sb, err := c.Create(t.Context(), map[string]any{"templateID": "e2b-built:v1"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Kill(context.WithoutCancel(t.Context()), sb.SandboxID)
		res, err := c.Conn(sb.SandboxID, sb.EnvdAccessToken).Run(t.Context(), "cat /opt/e2b-built; echo $APP_MODE; jq -n 1+1", nil, nil)
		if err != nil || res.ExitCode != 0 || res.Stdout != "hello from the template\nmode = 1\nbuilt\n2\n" {
			t.Errorf("a sandbox of the E2B-built template: %+v %v", res, err)
		}
	})

	t.Run("other agent", func(t *testing.T) {
		status, body := httpCall(t, "POST", url+"/v1/agents/bob/sessions", `{"template": "tools"}`)
		if status != 400 || !strings.Contains(string(body), `no template \"tools\"`) {
			t.Errorf("bob's session of alice's template: %d %s, want 400", status, body)
		}
		status, body = httpCall(t, "GET", url+"/v1/agents/bob/templates", "")
		if status != 200 || strings.Contains(string(body), "tools") {
			t.Errorf("bob's templates: %d %s, want none", status, body)
		}
		status, body = httpCall(t, "GET", base, "")
		if status != 200 || !strings.Contains(string(body), `"name":"tools"`) || strings.Contains(string(body), `"log"`) {
			t.Errorf("alice's templates: %d %s, want tools without its log", status, body)
		}
	})

	t.Run("failing step", func(t *testing.T) {
		events := buildTemplate(t, base, `{"name": "broken", "spec": {"steps": [{"file": {"path": "/opt/x", "content": "x"}}, {"run": "echo boom; exit 3"}]}}`)
		last := events[len(events)-1]
		if last.Type != "error" || last.Step != 2 || !strings.Contains(last.Error, "step 2 (run echo boom; exit 3) failed") || !strings.Contains(last.Error, "boom") {
			t.Fatalf("last event %+v, want an error naming step 2 and its output", last)
		}
		status, body := httpCall(t, "GET", base+"/broken", "")
		if status != 200 || !strings.Contains(string(body), `"status":"failed"`) {
			t.Errorf("the failed template: %d %s", status, body)
		}
		if status, body := httpCall(t, "DELETE", base+"/broken", ""); status != 204 {
			t.Errorf("delete: %d %s", status, body)
		}
	})

	t.Run("image removed", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "docker", "rmi", "-f", built.Image).CombinedOutput(); err != nil {
			t.Fatalf("docker rmi: %v %s", err, out)
		}
		status, body := httpCall(t, "POST", url+"/v1/agents/alice/sessions", `{"template": "tools"}`)
		if status != 503 || !strings.Contains(string(body), "no longer in the engine") {
			t.Errorf("a session of a template whose image was removed: %d %s, want 503 saying so", status, body)
		}
		// Saved code "double" names it: the delete is forced.
		if status, body := httpCall(t, "DELETE", base+"/tools?force=true", ""); status != 204 {
			t.Errorf("delete: %d %s", status, body)
		}
		if status, _ := httpCall(t, "GET", base+"/tools", ""); status != 404 {
			t.Errorf("after delete: %d, want 404", status)
		}
	})
}
