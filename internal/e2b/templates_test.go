package e2b

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/template"
)

// keysOf maps API keys to agents.
type keysOf map[string]string

func (k keysOf) APIKeyAgent(_ context.Context, key string) (string, error) {
	if a, ok := k[key]; ok {
		return a, nil
	}
	return "", errclass.New(errclass.Forbidden, "no such key")
}

// fakeTemplates records the specs it is asked to build and fails the build with fail, if set;
// each build of a name is a new version, every one kept, with tags.
type fakeTemplates struct {
	mu       sync.Mutex
	built    map[string]template.Spec // by agent/name
	noCache  map[string]bool          // the builds asked to reuse nothing, by agent/name
	fail     error
	versions map[string]int            // by agent/name: the current one
	tags     map[string]map[string]int // by agent/name
}

func (f *fakeTemplates) Versions(_ context.Context, agent, name string) ([]template.Version, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := agent + "/" + name
	if _, ok := f.built[key]; !ok {
		return nil, template.ErrNotFound
	}
	var out []template.Version
	for n := f.versions[key]; n >= 1; n-- {
		v := template.Version{Version: n, Hash: fmt.Sprintf("hash%d", n), Current: n == f.versions[key]}
		for tag, tv := range f.tags[key] {
			if tv == n {
				v.Tags = append(v.Tags, tag)
			}
		}
		out = append(out, v)
	}
	return out, nil
}

func (f *fakeTemplates) Tag(_ context.Context, agent, name, tag string, version int) error {
	if err := template.CheckTag("tag", tag); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key := agent + "/" + name
	if f.tags[key] == nil {
		f.tags[key] = map[string]int{}
	}
	f.tags[key][tag] = version
	return nil
}

func (f *fakeTemplates) Untag(_ context.Context, agent, name, tag string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := agent + "/" + name
	if _, ok := f.tags[key][tag]; !ok {
		return template.ErrNotFound
	}
	delete(f.tags[key], tag)
	return nil
}

func (f *fakeTemplates) Build(_ context.Context, req template.BuildRequest, emit func(template.Event)) (template.Template, error) {
	n := len(req.Spec.Steps) + 1
	for i := range req.Spec.Steps {
		emit(template.Event{Type: "step", Step: i + 1, Steps: n, Label: template.Label(req.Spec.Steps[i])})
		emit(template.Event{Type: "log", Step: i + 1, Line: fmt.Sprintf("output of step %d", i+1)})
	}
	if f.fail != nil {
		return template.Template{}, f.fail
	}
	f.mu.Lock()
	f.built[req.Agent+"/"+req.Name] = req.Spec
	if req.NoCache {
		if f.noCache == nil {
			f.noCache = map[string]bool{}
		}
		f.noCache[req.Agent+"/"+req.Name] = true
	}
	if f.versions == nil {
		f.versions, f.tags = map[string]int{}, map[string]map[string]int{}
	}
	f.versions[req.Agent+"/"+req.Name]++
	version := f.versions[req.Agent+"/"+req.Name]
	f.mu.Unlock()
	t := template.Template{Agent: req.Agent, Name: req.Name, Version: version, Spec: req.Spec, Status: template.StatusReady}
	emit(template.Event{Type: "done", Steps: n, Template: &t})
	return t, nil
}

func (f *fakeTemplates) Get(_ context.Context, agent, name string) (template.Template, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	spec, ok := f.built[agent+"/"+name]
	if !ok {
		return template.Template{}, template.ErrNotFound
	}
	return template.Template{Agent: agent, Name: name, Spec: spec, Status: template.StatusReady}, nil
}

func (f *fakeTemplates) List(ctx context.Context, agent string) ([]template.Template, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []template.Template
	for k := range f.built {
		if a, n, _ := strings.Cut(k, "/"); a == agent {
			out = append(out, template.Template{Agent: a, Name: n, Status: template.StatusReady})
		}
	}
	return out, nil
}

func (f *fakeTemplates) Delete(_ context.Context, agent, name string, _ bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.built[agent+"/"+name]; !ok {
		return template.ErrNotFound
	}
	delete(f.built, agent+"/"+name)
	return nil
}

// templateAPI is a server with templates, mounted under /e2b as the daemon mounts it.
func templateAPI(t *testing.T, f *fakeTemplates) (*httptest.Server, *Server) {
	t.Helper()
	s := New(Config{Templates: []string{"base", "code-interpreter-v1"}}, nil, keysOf{"k-alice": "alice", "k-bob": "bob"}, nil, nil)
	if f != nil {
		s.SetTemplates(f)
	}
	mux := http.NewServeMux()
	mux.Handle("/e2b/", http.StripPrefix("/e2b", s))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { srv.Close(); s.Close() })
	return srv, s
}

// call sends a request as E2B's SDK does and decodes the answer into out (when not nil).
func call(t *testing.T, method, url, key string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, url, rd)
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, url, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode
}

// tarGz is an archive as the SDKs' tar_file_stream makes it (paths relative to the context).
func tarGz(t *testing.T, files map[string]string) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o640, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(content))
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

type statusAnswer struct {
	Status     string          `json:"status"`
	LogEntries []buildLogEntry `json:"logEntries"`
	Logs       []string        `json:"logs"`
	Reason     *buildReason    `json:"reason"`
}

// waitBuild polls the build's status as wait_for_build_finish does, collecting the entries.
func waitBuild(t *testing.T, base, key, id, build string) (statusAnswer, []buildLogEntry) {
	t.Helper()
	var all []buildLogEntry
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var st statusAnswer
		if code := call(t, "GET", fmt.Sprintf("%s/templates/%s/builds/%s/status?logsOffset=%d", base, id, build, len(all)), key, nil, &st); code != 200 {
			t.Fatalf("status: %d", code)
		}
		all = append(all, st.LogEntries...)
		if st.Status == "ready" || st.Status == "error" {
			return st, all
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the build did not end")
	return statusAnswer{}, nil
}

// TestTemplateBuilderFlow: E2B's builder flow (request, file links and uploads, start, status)
// becomes one sandpit template spec: RUN steps, COPY's uploaded files at their paths with
// their modes, ENV, WORKDIR, the start and ready commands; USER is noted, not lost silently;
// force (skip_cache) builds every step again; and the template is then listed, found by alias
// and deleted.
func TestTemplateBuilderFlow(t *testing.T) {
	f := &fakeTemplates{built: map[string]template.Spec{}}
	srv, _ := templateAPI(t, f)
	base := srv.URL + "/e2b"

	var created struct {
		TemplateID string   `json:"templateID"`
		BuildID    string   `json:"buildID"`
		Names      []string `json:"names"`
		Tags       []string `json:"tags"`
	}
	if code := call(t, "POST", base+"/v3/templates", "k-alice", map[string]any{"name": "my-env:v1", "cpuCount": 2, "memoryMB": 1024}, &created); code != 202 {
		t.Fatalf("POST /v3/templates: %d", code)
	}
	if created.TemplateID != "my-env" || created.BuildID == "" || created.Names[0] != "my-env" || created.Tags[0] != "v1" {
		t.Fatalf("created = %+v", created)
	}

	// Two COPY steps: one file to a directory, a directory's files below another.
	uploads := map[string][]byte{
		"h1": tarGz(t, map[string]string{"requirements.txt": "pandas\n"}),
		"h2": tarGz(t, map[string]string{"app/main.py": "print(1)\n", "app/lib/util.py": "X = 1\n"}),
	}
	for hash, data := range uploads {
		var link struct {
			Present bool   `json:"present"`
			URL     string `json:"url"`
		}
		if code := call(t, "GET", base+"/templates/my-env/files/"+hash, "k-alice", nil, &link); code != 201 || link.Present || !strings.HasPrefix(link.URL, base+"/templates/my-env/files/"+hash+"?") {
			t.Fatalf("file link: %d %+v", code, link)
		}
		// The SDK's upload carries no API key: the link is the key, once.
		if code := call(t, "PUT", link.URL, "", data, nil); code != 200 {
			t.Fatalf("upload: %d", code)
		}
		if code := call(t, "PUT", link.URL, "", data, nil); code != 403 {
			t.Errorf("a second upload through one link: %d, want 403", code)
		}
		if code := call(t, "GET", base+"/templates/my-env/files/"+hash, "k-alice", nil, &link); code != 201 || !link.Present {
			t.Errorf("the uploaded archive is not present: %d %+v", code, link)
		}
		// Another agent's link for the same hash finds nothing of alice's.
		if call(t, "GET", base+"/templates/my-env/files/"+hash, "k-bob", nil, &link); link.Present {
			t.Errorf("bob sees alice's archive %s", hash)
		}
	}

	start := map[string]any{
		"fromImage": "e2bdev/base",
		"force":     true,
		"steps": []map[string]any{
			{"type": "USER", "args": []string{"root"}},
			{"type": "RUN", "args": []string{"apt-get update && apt-get install -y jq", "root"}},
			{"type": "WORKDIR", "args": []string{"/home/user"}},
			{"type": "COPY", "args": []string{"requirements.txt", "/home/user/", "", ""}, "filesHash": "h1"},
			{"type": "ENV", "args": []string{"MODE", "fast", "LEVEL", "2"}},
			{"type": "COPY", "args": []string{"app", "srv", "", "0755"}, "filesHash": "h2"},
		},
		"startCmd": "python3 -m http.server 8000",
		"readyCmd": "curl -s localhost:8000",
	}
	if code := call(t, "POST", base+"/v2/templates/my-env/builds/"+created.BuildID, "k-alice", start, nil); code != 202 {
		t.Fatalf("start: %d", code)
	}
	st, entries := waitBuild(t, base, "k-alice", "my-env", created.BuildID)
	if st.Status != "ready" {
		t.Fatalf("status %+v", st)
	}
	spec := f.built["alice/my-env"]
	want := template.Spec{
		Steps: []template.Step{
			{Run: "apt-get update && apt-get install -y jq"},
			{File: &template.File{Path: "/home/user/requirements.txt", Content: "pandas\n", Mode: "0640"}},
		},
		Env:     map[string]string{"MODE": "fast", "LEVEL": "2"},
		Workdir: "/home/user",
		Start:   &template.Start{Cmd: "python3 -m http.server 8000", Ready: "curl -s localhost:8000"},
	}
	if spec.Base != "" || spec.Workdir != want.Workdir || !maps.Equal(spec.Env, want.Env) || *spec.Start != *want.Start || len(spec.Steps) != 4 ||
		spec.Steps[0].Run != want.Steps[0].Run || *spec.Steps[1].File != *want.Steps[1].File {
		t.Fatalf("spec = %+v", spec)
	}
	if !f.noCache["alice/my-env"] {
		t.Errorf("force (skip_cache) did not ask for a build that reuses nothing")
	}
	files := map[string]template.File{}
	for _, s := range spec.Steps[2:] {
		files[s.File.Path] = *s.File
	}
	if files["/home/user/srv/main.py"] != (template.File{Path: "/home/user/srv/main.py", Content: "print(1)\n", Mode: "0755"}) ||
		files["/home/user/srv/lib/util.py"].Content != "X = 1\n" {
		t.Errorf("the directory's files: %+v", files)
	}
	var text []string
	for _, e := range entries {
		text = append(text, e.Step+": "+e.Message)
	}
	log := strings.Join(text, "\n")
	for _, w := range []string{"USER root): build steps run as root", "2: [1/5] run apt-get update", "4: output of step 2", "6: [4/5] file /home/user/srv/", "finalize: Template built"} {
		if !strings.Contains(log, w) {
			t.Errorf("the build's log lacks %q:\n%s", w, log)
		}
	}

	// The build's tag names its version, beside E2B's "default" (the current one); tags are
	// assigned to a version by target and removed, in E2B's shapes.
	type tagJSON struct {
		Tag     string `json:"tag"`
		BuildID string `json:"buildID"`
	}
	var tags []tagJSON
	if code := call(t, "GET", base+"/templates/my-env/tags", "k-alice", nil, &tags); code != 200 || len(tags) != 2 || tags[0].Tag != "default" || tags[1].Tag != "v1" || tags[0].BuildID != tags[1].BuildID {
		t.Errorf("GET /templates/my-env/tags: %d %+v, want default and v1 on one build", code, tags)
	}
	var assigned struct {
		Tags    []string `json:"tags"`
		BuildID string   `json:"buildID"`
	}
	if code := call(t, "POST", base+"/templates/tags", "k-alice", map[string]any{"target": "my-env:v1", "tags": []string{"prod"}}, &assigned); code != 201 || assigned.BuildID != tags[0].BuildID || assigned.Tags[0] != "prod" {
		t.Errorf("POST /templates/tags: %d %+v", code, assigned)
	}
	if f.tags["alice/my-env"]["prod"] != 1 {
		t.Errorf("tags after the assignment: %v", f.tags["alice/my-env"])
	}
	var e apiError
	for _, c := range []struct {
		body map[string]any
		want int
	}{
		{map[string]any{"target": "my-env:nope", "tags": []string{"x"}}, 404},
		{map[string]any{"target": "my-env", "tags": []string{"default"}}, 400},
		{map[string]any{"target": "my-env", "tags": []string{}}, 400},
		{map[string]any{"target": "my-env", "tags": []string{"7"}}, 400},
	} {
		if code := call(t, "POST", base+"/templates/tags", "k-alice", c.body, &e); code != c.want || e.Code != c.want {
			t.Errorf("POST /templates/tags %v: %d %+v, want %d", c.body, code, e, c.want)
		}
	}
	// A request's tags are checked whole before any is given, and repeats count once.
	if code := call(t, "POST", base+"/templates/tags", "k-alice", map[string]any{"target": "my-env", "tags": []string{"good", "Bad Tag"}}, &e); code != 400 || f.tags["alice/my-env"]["good"] != 0 {
		t.Errorf("a bad tag after a good one: %d %+v, tags %v; want 400 and neither given", code, e, f.tags["alice/my-env"])
	}
	many := make([]string, 100_000)
	for i := range many {
		many[i] = "dup"
	}
	if code := call(t, "POST", base+"/templates/tags", "k-alice", map[string]any{"target": "my-env", "tags": many}, &assigned); code != 201 || f.tags["alice/my-env"]["dup"] != 1 {
		t.Errorf("one tag 100 000 times: %d %+v", code, assigned)
	}
	if code := call(t, "POST", base+"/templates/tags", "k-bob", map[string]any{"target": "my-env", "tags": []string{"mine"}}, nil); code != 404 {
		t.Errorf("bob tags alice's template: %d, want 404", code)
	}
	if code := call(t, "DELETE", base+"/templates/tags", "k-alice", map[string]any{"name": "my-env", "tags": []string{"prod"}}, nil); code != 204 {
		t.Errorf("DELETE /templates/tags: %d", code)
	}
	if code := call(t, "DELETE", base+"/templates/tags", "k-alice", map[string]any{"name": "my-env", "tags": []string{"prod"}}, nil); code != 404 {
		t.Errorf("DELETE of a tag already gone: %d, want 404", code)
	}

	// The template is alice's: listed, found by alias, not bob's, and deleted.
	var list []map[string]any
	if call(t, "GET", base+"/templates", "k-alice", nil, &list); len(list) != 1 || list[0]["templateID"] != "my-env" || list[0]["buildStatus"] != "ready" {
		t.Errorf("GET /templates = %v", list)
	}
	var one struct {
		Builds []struct {
			BuildID string `json:"buildID"`
		} `json:"builds"`
	}
	if call(t, "GET", base+"/templates/my-env", "k-alice", nil, &one); len(one.Builds) != 1 || uuid.Validate(one.Builds[0].BuildID) != nil {
		t.Errorf("GET /templates/my-env: %+v, want one build whose buildID is a UUID (E2B's format)", one)
	}
	if code := call(t, "GET", base+"/templates/aliases/my-env", "k-alice", nil, nil); code != 200 {
		t.Errorf("alias of alice's template: %d", code)
	}
	if code := call(t, "GET", base+"/templates/aliases/my-env", "k-bob", nil, nil); code != 404 {
		t.Errorf("alias seen by bob: %d, want 404", code)
	}
	if code := call(t, "GET", base+"/templates/my-env/builds/"+created.BuildID+"/status", "k-bob", nil, nil); code != 404 {
		t.Errorf("bob reads alice's build: %d, want 404", code)
	}
	if code := call(t, "DELETE", base+"/templates/my-env", "k-alice", nil, nil); code != 204 {
		t.Errorf("delete: %d", code)
	}
	if code := call(t, "GET", base+"/templates/aliases/my-env", "k-alice", nil, nil); code != 404 {
		t.Errorf("alias after delete: %d, want 404", code)
	}
}

// TestTemplateBuilderErrors: a failed step is reported on the E2B step it came from (the SDKs
// pick that step's stack trace), a step sandpit does not run and a missing upload are 400s
// naming the step, a started build cannot start again, and a daemon without templates says
// why in E2B's error shape.
func TestTemplateBuilderErrors(t *testing.T) {
	f := &fakeTemplates{built: map[string]template.Spec{}, fail: &template.BuildError{Step: 2, Label: "run false", Err: errors.New("exit status 1")}}
	srv, _ := templateAPI(t, f)
	base := srv.URL + "/e2b"
	request := func() string {
		var c struct {
			BuildID string `json:"buildID"`
		}
		if code := call(t, "POST", base+"/v3/templates", "k-alice", map[string]any{"name": "broken"}, &c); code != 202 {
			t.Fatalf("request: %d", code)
		}
		return c.BuildID
	}
	id := request()
	body := map[string]any{"steps": []map[string]any{
		{"type": "RUN", "args": []string{"true"}},
		{"type": "ENV", "args": []string{"A", "1"}},
		{"type": "RUN", "args": []string{"false"}},
	}}
	if code := call(t, "POST", base+"/v2/templates/broken/builds/"+id, "k-alice", body, nil); code != 202 {
		t.Fatalf("start: %d", code)
	}
	st, _ := waitBuild(t, base, "k-alice", "broken", id)
	if st.Status != "error" || st.Reason == nil || st.Reason.Step != "3" || !strings.Contains(st.Reason.Message, "exit status 1") {
		t.Errorf("failed build: %+v %+v", st, st.Reason)
	}
	var e apiError
	if code := call(t, "POST", base+"/v2/templates/broken/builds/"+id, "k-alice", body, &e); code != 409 || !strings.Contains(e.Message, "started already") {
		t.Errorf("a second start: %d %+v", code, e)
	}

	for _, c := range []struct {
		step map[string]any
		want string
	}{
		{map[string]any{"type": "ARG", "args": []string{"X"}}, `step 1 (ARG X): "ARG" is not a builder step sandpit runs`},
		{map[string]any{"type": "COPY", "args": []string{"a.txt", "/a.txt"}, "filesHash": "nope"}, `step 1 (COPY a.txt /a.txt): its files (hash "nope") were not uploaded`},
		{map[string]any{"type": "ENV", "args": []string{"A"}}, "odd number of arguments"},
	} {
		id := request()
		var e apiError
		code := call(t, "POST", base+"/v2/templates/broken/builds/"+id, "k-alice", map[string]any{"steps": []any{c.step}}, &e)
		if code != 400 || e.Code != 400 || !strings.Contains(e.Message, c.want) {
			t.Errorf("%v: %d %+v, want 400 with %q", c.step, code, e, c.want)
		}
	}
	if code := call(t, "POST", base+"/v3/templates", "k-alice", map[string]any{"name": "base"}, &e); code != 400 || !strings.Contains(e.Message, "e2b_templates") {
		t.Errorf("a build named as the daemon's own template: %d %+v", code, e)
	}
	if code := call(t, "POST", base+"/v3/templates", "k-alice", map[string]any{"name": "My Env"}, &e); code != 400 || !strings.Contains(e.Message, "not a sandpit template name") {
		t.Errorf("a bad name: %d %+v", code, e)
	}
	if code := call(t, "PATCH", base+"/templates/broken", "k-alice", map[string]any{"public": true}, &e); code != 501 || !strings.Contains(e.Message, "updates") {
		t.Errorf("an update: %d %+v", code, e)
	}

	// An archive of more files than a template has steps is refused as it is uploaded.
	many := map[string]string{}
	for i := range template.MaxSteps + 1 {
		many[fmt.Sprintf("f%d", i)] = "x"
	}
	var link struct{ URL string }
	call(t, "GET", base+"/templates/broken/files/many", "k-alice", nil, &link)
	if code := call(t, "PUT", link.URL, "", tarGz(t, many), &e); code != 400 || !strings.Contains(e.Message, "more than 64 files") {
		t.Errorf("an archive of %d files: %d %+v", len(many), code, e)
	}

	// Upload links not used are bounded per agent.
	for i := range maxUploadLinks {
		if code := call(t, "GET", base+"/templates/broken/files/h", "k-alice", nil, nil); code != 201 {
			t.Fatalf("link %d: %d", i, code)
		}
	}
	if code := call(t, "GET", base+"/templates/broken/files/h", "k-alice", nil, &e); code != 429 || !strings.Contains(e.Message, "upload links") {
		t.Errorf("a link past the cap: %d %+v", code, e)
	}
	if code := call(t, "GET", base+"/templates/broken/files/h", "k-bob", nil, nil); code != 201 {
		t.Errorf("another agent's link: %d", code)
	}

	none, _ := templateAPI(t, nil)
	if code := call(t, "POST", none.URL+"/e2b/v3/templates", "k-alice", map[string]any{"name": "x"}, &e); code != 501 || !strings.Contains(e.Message, "kubernetes.template_import_command") {
		t.Errorf("no templates: %d %+v", code, e)
	}
}

// TestPoolsAreEachAgentsOwn: one agent's build requests and uploads never drop another agent's
// build record or archive (red team: the pools were shared, so mallory's 256 requests or 64 MiB
// of uploads made bob's build start answer 404 and his files "not uploaded"); an agent past its
// share loses its own oldest, and a full daemon refuses with 429 rather than evicting.
func TestPoolsAreEachAgentsOwn(t *testing.T) {
	srv, s := templateAPI(t, &fakeTemplates{built: map[string]template.Spec{}})
	base := srv.URL + "/e2b"
	request := func(key string) (string, int) {
		var c struct {
			BuildID string `json:"buildID"`
		}
		code := call(t, "POST", base+"/v3/templates", key, map[string]any{"name": "env"}, &c)
		return c.BuildID, code
	}
	present := func(key, hash string) (bool, string) {
		var link struct {
			Present bool   `json:"present"`
			URL     string `json:"url"`
		}
		if code := call(t, "GET", base+"/templates/env/files/"+hash, key, nil, &link); code != 201 {
			t.Fatalf("upload link: %d", code)
		}
		return link.Present, link.URL
	}
	upload := func(key, hash string, size int) int {
		_, url := present(key, hash)
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tw.WriteHeader(&tar.Header{Name: "f", Mode: 0o644, Size: int64(size), Typeflag: tar.TypeReg})
		tw.Write(bytes.Repeat([]byte{'x'}, size))
		tw.Close()
		return call(t, "PUT", url, "", buf.Bytes(), nil)
	}

	bobs, _ := request("k-bob")
	if code := upload("k-bob", "bobs", 1<<20); code != 200 {
		t.Fatalf("bob's upload: %d", code)
	}
	for i := range maxBuildRecords + 10 {
		if _, code := request("k-alice"); code != 202 {
			t.Fatalf("alice's request %d: %d", i, code)
		}
	}
	for i := range 10 {
		if code := upload("k-alice", fmt.Sprint("a", i), 7<<20); code != 200 {
			t.Fatalf("alice's upload %d: %d", i, code)
		}
	}
	if ok, _ := present("k-bob", "bobs"); !ok {
		t.Error("alice's uploads dropped bob's archive")
	}
	if ok, _ := present("k-alice", "a0"); ok {
		t.Error("alice holds more than her share of the archives' bytes")
	}
	if ok, _ := present("k-alice", "a9"); !ok {
		t.Error("alice's latest archive is not kept")
	}
	body := map[string]any{"steps": []map[string]any{{"type": "COPY", "args": []string{"f", "/f"}, "filesHash": "bobs"}}}
	if code := call(t, "POST", base+"/v2/templates/env/builds/"+bobs, "k-bob", body, nil); code != 202 {
		t.Fatalf("bob's build start after alice's requests: %d", code)
	}
	if st, _ := waitBuild(t, base, "k-bob", "env", bobs); st.Status != "ready" {
		t.Errorf("bob's build: %+v", st)
	}
	s.tmpl.mu.Lock()
	alices := 0
	for _, b := range s.tmpl.builds {
		if b.agent == "alice" {
			alices++
		}
	}
	s.tmpl.mu.Unlock()
	if alices != agentBuildRecords {
		t.Errorf("alice holds %d build records, want her share %d", alices, agentBuildRecords)
	}

	// A full daemon: four agents' shares. A fifth agent is refused; an hour after they ended,
	// the records make room.
	ts := newTemplateState()
	now := time.Now()
	for a := range 4 {
		for i := range agentBuildRecords {
			id := fmt.Sprint(a, "-", i)
			ts.builds[id] = &templateBuild{id: id, agent: fmt.Sprint("agent", a), created: now, finished: now, status: "ready"}
		}
	}
	if err := ts.roomForBuildLocked("agent4", now); err == nil || !strings.Contains(err.Error(), "try again later") {
		t.Errorf("a full daemon: %v", err)
	}
	if err := ts.roomForBuildLocked("agent4", now.Add(keepIdle)); err != nil || len(ts.builds) != 0 {
		t.Errorf("an hour after the builds ended: %v, %d records", err, len(ts.builds))
	}
	for i := range agentBuildRecords {
		id := fmt.Sprint(i)
		ts.builds[id] = &templateBuild{id: id, agent: "agent0", created: now, status: "building"}
	}
	if err := ts.roomForBuildLocked("agent0", now); err == nil || !strings.Contains(err.Error(), "under way") {
		t.Errorf("an agent's share building: %v", err)
	}
}

// TestBuilderBoundsWhatItUnpacks: the red team's memory attacks on the builder routes, each
// refused before the memory is taken. A build of many COPY steps naming one 8 MiB archive
// (each unpacks it again: 300 took the daemon to 3.5 GiB before its step count was checked);
// a gzipped archive of PAX headers (500 MB unpacked from 520 KB, counted as no entry); a
// build request of 200,000 tags (kept and echoed whole; 60,000 here). Also: a waiting build's logEntries
// are [] (E2B's schema), and the upload link escapes the template ID it names.
func TestBuilderBoundsWhatItUnpacks(t *testing.T) {
	srv, _ := templateAPI(t, &fakeTemplates{built: map[string]template.Spec{}})
	base := srv.URL + "/e2b"
	var e apiError
	var link struct{ URL string }
	call(t, "GET", base+"/templates/env/files/big", "k-alice", nil, &link)
	big := tarGz(t, map[string]string{"big.bin": strings.Repeat("x", 7<<20)})
	if code := call(t, "PUT", link.URL, "", big, nil); code != 200 {
		t.Fatalf("upload: %d", code)
	}
	var c struct {
		BuildID string   `json:"buildID"`
		Tags    []string `json:"tags"`
	}
	if code := call(t, "POST", base+"/v3/templates", "k-alice", map[string]any{"name": "env"}, &c); code != 202 {
		t.Fatalf("request: %d", code)
	}
	var st statusAnswer
	if code := call(t, "GET", base+"/templates/env/builds/"+c.BuildID+"/status", "k-alice", nil, &st); code != 200 || st.LogEntries == nil {
		t.Errorf("a waiting build's status: %d, logEntries %v; want []", code, st.LogEntries)
	}
	steps := make([]map[string]any, 300)
	for i := range steps {
		steps[i] = map[string]any{"type": "COPY", "args": []string{"big.bin", fmt.Sprintf("/x%d/", i)}, "filesHash": "big"}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	code := call(t, "POST", base+"/v2/templates/env/builds/"+c.BuildID, "k-alice", map[string]any{"steps": steps}, &e)
	runtime.ReadMemStats(&after)
	if code != 400 || !strings.Contains(e.Message, "step 2 (COPY big.bin /x1/): the COPY steps' files hold more than 8388608 bytes together") {
		t.Errorf("300 COPY steps of a 7 MiB archive: %d %+v", code, e)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 200<<20 {
		t.Errorf("refusing them allocated %d MiB", got>>20)
	}

	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	tw := tar.NewWriter(zw)
	for i := range 40 {
		tw.WriteHeader(&tar.Header{Name: fmt.Sprint("f", i), Typeflag: tar.TypeReg, Size: 1, Mode: 0o644,
			PAXRecords: map[string]string{"comment": strings.Repeat("p", 900<<10)}, Format: tar.FormatPAX})
		tw.Write([]byte("x"))
	}
	tw.Close()
	zw.Close()
	call(t, "GET", base+"/templates/env/files/bomb", "k-alice", nil, &link)
	if code := call(t, "PUT", link.URL, "", bomb.Bytes(), &e); code != 400 || !strings.Contains(e.Message, "unpacks to more than") {
		t.Errorf("an archive of %d bytes unpacking to 36 MB of PAX headers: %d %+v", bomb.Len(), code, e)
	}

	tags := make([]string, 60_000)
	for i := range tags {
		tags[i] = fmt.Sprint("t", i%40)
	}
	if code := call(t, "POST", base+"/v3/templates", "k-alice", map[string]any{"name": "env", "tags": tags}, &e); code != 400 || !strings.Contains(e.Message, "more than 32 tags") {
		t.Errorf("a request of 60000 tags: %d %+v", code, e)
	}
	if code := call(t, "POST", base+"/v3/templates", "k-alice", map[string]any{"name": "env:v1", "tags": []string{"v1", "v1", "v2"}}, &c); code != 202 || fmt.Sprint(c.Tags) != "[v1 v2]" {
		t.Errorf("repeated tags: %d %v, want [v1 v2]", code, c.Tags)
	}
	call(t, "GET", base+"/templates/a%3Fb%23c/files/h1", "k-alice", nil, &link)
	if !strings.HasPrefix(link.URL, base+"/templates/a%3Fb%23c/files/h1?upload_token=") {
		t.Errorf("the upload link of template ID %q: %s", "a?b#c", link.URL)
	}
}
