package pyindex

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

var noRedirect = &http.Client{
	Timeout:       10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

func get(t *testing.T, u string) (*http.Response, string) {
	t.Helper()
	resp, err := noRedirect.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	return resp, string(body)
}

var anchor = regexp.MustCompile(`<a href="([^"]*)">([^<]*)</a>`)

func TestPages(t *testing.T) {
	t.Parallel()
	x := New(t)
	x.AddWheel("tinypkg", "1.0", `VALUE = "1.0"`)
	x.AddWheel("tinypkg", "2.0", `VALUE = "2.0"`)
	x.AddWheel("Pkg_B", "1.0", `VALUE = "b"`, "tinypkg>=1")
	t.Logf("URL %s, HostURL %s", x.URL(), x.HostURL())

	resp, body := get(t, x.HostURL())
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("/simple/: %s %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	got := anchor.FindAllStringSubmatch(body, -1)
	if len(got) != 2 || got[0][1] != "pkg-b/" || got[0][2] != "Pkg_B" || got[1][1] != "tinypkg/" || got[1][2] != "tinypkg" {
		t.Fatalf("/simple/ links %q in\n%s", got, body)
	}

	page := x.HostURL() + "tinypkg/"
	resp, body = get(t, page)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("%s: %s %q", page, resp.Status, resp.Header.Get("Content-Type"))
	}
	t.Logf("%s:\n%s", page, body)
	links := anchor.FindAllStringSubmatch(body, -1)
	if len(links) != 2 {
		t.Fatalf("want 2 links in\n%s", body)
	}
	base, _ := url.Parse(page)
	for i, want := range []string{"tinypkg-1.0-py3-none-any.whl", "tinypkg-2.0-py3-none-any.whl"} {
		href, text := links[i][1], links[i][2]
		ref, err := url.Parse(href)
		if err != nil {
			t.Fatal(err)
		}
		abs := base.ResolveReference(ref)
		if text != want || abs.Path != "/files/"+want || !strings.HasPrefix(ref.Fragment, "sha256=") {
			t.Errorf("link %q %q, want text %s at /files/ with a sha256 fragment", href, text, want)
		}
		resp, data := get(t, abs.String())
		sum := sha256.Sum256([]byte(data))
		if resp.StatusCode != 200 || "sha256="+hex.EncodeToString(sum[:]) != ref.Fragment {
			t.Errorf("%s: %s, sha256 %x, link says %s", abs, resp.Status, sum, ref.Fragment)
		}
		checkWheel(t, want, []byte(data))
	}

	for path, want := range map[string]string{
		"Pkg_B/": "/simple/pkg-b/", "pkg.b/": "/simple/pkg-b/", "PKG--b": "/simple/pkg-b/",
		"pkg-b": "/simple/pkg-b/", "TinyPkg/": "/simple/tinypkg/", "Nope_Pkg/": "/simple/nope-pkg/",
	} {
		resp, _ := get(t, x.HostURL()+path)
		if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != want {
			t.Errorf("/simple/%s: %s to %q, want 301 to %s", path, resp.Status, resp.Header.Get("Location"), want)
		}
	}
	for _, u := range []string{x.HostURL() + "nope-pkg/", strings.TrimSuffix(x.HostURL(), "simple/") + "files/nope.whl",
		strings.TrimSuffix(x.HostURL(), "simple/")} {
		if resp, _ := get(t, u); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %s, want 404", u, resp.Status)
		}
	}

	// tinypkg: its page and two files; pkg-b: four redirects; nope-pkg: a redirect and a 404.
	for name, want := range map[string]int{"tinypkg": 4, "TinyPkg": 4, "pkg-b": 4, "nope-pkg": 2, "other": 0} {
		if got := x.Requests(name); got != want {
			t.Errorf("Requests(%q) = %d, want %d", name, got, want)
		}
	}
}

// checkWheel checks the wheel against its RECORD and reads its metadata.
func checkWheel(t *testing.T, fname string, data []byte) {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("%s: %v", fname, err)
	}
	info := strings.TrimSuffix(fname, "-py3-none-any.whl") + ".dist-info/"
	contents := map[string]string{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		contents[f.Name] = string(b)
	}
	rows, err := csv.NewReader(strings.NewReader(contents[info+"RECORD"])).ReadAll()
	if err != nil {
		t.Fatalf("%s RECORD: %v", fname, err)
	}
	if len(rows) != len(contents) {
		t.Errorf("%s: RECORD has %d rows for %d files", fname, len(rows), len(contents))
	}
	for _, row := range rows {
		body, ok := contents[row[0]]
		switch {
		case !ok:
			t.Errorf("%s: RECORD lists %s, which is missing", fname, row[0])
		case row[0] == info+"RECORD":
			if row[1] != "" || row[2] != "" {
				t.Errorf("%s: RECORD's own row %q", fname, row)
			}
		default:
			sum := sha256.Sum256([]byte(body))
			if row[1] != "sha256="+base64.RawURLEncoding.EncodeToString(sum[:]) || row[2] != strconv.Itoa(len(body)) {
				t.Errorf("%s: RECORD row %q does not match the file", fname, row)
			}
		}
	}
	for _, want := range []string{"Metadata-Version: 2.1\n", "Name: tinypkg\n"} {
		if !strings.Contains(contents[info+"METADATA"], want) {
			t.Errorf("%s METADATA lacks %q:\n%s", fname, want, contents[info+"METADATA"])
		}
	}
	if w := contents[info+"WHEEL"]; !strings.Contains(w, "Root-Is-Purelib: true\n") || !strings.Contains(w, "Tag: py3-none-any\n") {
		t.Errorf("%s WHEEL:\n%s", fname, w)
	}
	if !strings.HasPrefix(contents["tinypkg/__init__.py"], "VALUE = ") {
		t.Errorf("%s: tinypkg/__init__.py is %q", fname, contents["tinypkg/__init__.py"])
	}
}

// TestHostPip installs from HostURL with the host's pip, and has Python check the wheel.
func TestHostPip(t *testing.T) {
	t.Parallel()
	const python = "/usr/bin/python3"
	if out, err := exec.Command(python, "-m", "pip", "--version").CombinedOutput(); err != nil {
		t.Skipf("no pip on the host: %v %s", err, out)
	}
	x := New(t)
	x.AddWheel("tinypkg", "1.0", `VALUE = "1.0"`)
	x.AddWheel("tinypkg", "2.0", `VALUE = "2.0"`)
	x.AddWheel("pkg-b", "1.0", `VALUE = "b"`, "tinypkg>=1,<2", "Pkg.C")
	x.AddWheel("pkg-c", "3", `VALUE = "c"`)

	if n := x.Requests("pkg-b") + x.Requests("tinypkg"); n != 0 {
		t.Fatalf("Requests before pip: %d", n)
	}
	// Python's own check of RECORD: every file hashed and sized, RECORD itself unhashed.
	whl := filepath.Join(t.TempDir(), "tinypkg-1.0-py3-none-any.whl")
	_, data := get(t, strings.TrimSuffix(x.HostURL(), "simple/")+"files/tinypkg-1.0-py3-none-any.whl")
	if err := os.WriteFile(whl, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	const verify = `
import base64, csv, hashlib, io, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
assert z.testzip() is None
rec = [n for n in z.namelist() if n.endswith(".dist-info/RECORD")]
assert len(rec) == 1, rec
rows = list(csv.reader(io.StringIO(z.read(rec[0]).decode())))
assert sorted(r[0] for r in rows) == sorted(z.namelist()), rows
for path, h, size in rows:
    if path == rec[0]:
        assert h == "" and size == "", (path, h, size)
        continue
    b = z.read(path)
    assert h == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode(), path
    assert int(size) == len(b), path
print("RECORD ok")
`
	if out, err := exec.Command(python, "-c", verify, whl).CombinedOutput(); err != nil {
		t.Fatalf("python's RECORD check: %v\n%s", err, out)
	}

	target := t.TempDir()
	start := time.Now()
	pip := exec.Command(python, "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check",
		"--target", target, "--index-url", x.HostURL(), "pkg-b==1.0")
	pip.Env = []string{"PIP_CONFIG_FILE=/dev/null"} // none of the host's PIP_* settings
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PIP_") {
			pip.Env = append(pip.Env, kv)
		}
	}
	out, err := pip.CombinedOutput()
	t.Logf("host pip install took %v:\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("pip install: %v", err)
	}
	check := exec.Command(python, "-c", `import importlib.metadata as m, pkg_b, pkg_c, tinypkg
print(pkg_b.VALUE, pkg_c.VALUE, tinypkg.VALUE, m.version("tinypkg"), m.requires("pkg-b"))`)
	check.Env = append(os.Environ(), "PYTHONPATH="+target)
	out, err = check.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "b c 1.0 1.0 ['tinypkg>=1,<2', 'Pkg.C']" {
		t.Fatalf("importing what pip installed: %v %s", err, out)
	}
	// pip read each project page once and downloaded one file of each; the test downloaded
	// tinypkg-1.0 itself too.
	if b, c, tp := x.Requests("pkg-b"), x.Requests("pkg-c"), x.Requests("tinypkg"); b != 2 || c != 2 || tp != 2+1 {
		t.Errorf("Requests: pkg-b %d, pkg-c %d, tinypkg %d; want 2, 2 and 3", b, c, tp)
	}
}

// run runs cmd in a container of the base image on the default bridge network and returns its
// exit code and output.
func run(t *testing.T, cmd string) (int, string) {
	t.Helper()
	c, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	image := os.Getenv("SANDPIT_TEST_BASE_IMAGE")
	if image == "" {
		image = "sandpit-base:bookworm-2"
	}
	if _, err := c.ImageInspect(ctx, image); err != nil {
		t.Skipf("no image %s: %v", image, err)
	}
	created, err := c.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{Image: image, Cmd: []string{"sh", "-c", cmd},
			Env: []string{"PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_CACHE_DIR=1"}},
		HostConfig: &container.HostConfig{},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.ContainerRemove(context.Background(), created.ID, client.ContainerRemoveOptions{Force: true})
	wait := c.ContainerWait(ctx, created.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	if _, err := c.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	var code int
	select {
	case res := <-wait.Result:
		code = int(res.StatusCode)
	case err := <-wait.Error:
		t.Fatal(err)
	}
	logs, err := c.ContainerLogs(ctx, created.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, logs); err != nil {
		t.Fatal(err)
	}
	return code, out.String()
}

// TestContainerPip installs a package and its dependency from URL with pip in a container.
func TestContainerPip(t *testing.T) {
	t.Parallel()
	x := New(t)
	x.AddWheel("tinypkg", "1.0", `VALUE = "1.0"`)
	x.AddWheel("tinypkg", "2.0", `VALUE = "2.0"`)
	x.AddWheel("pkg-b", "1.0", `VALUE = "b"`, "tinypkg>=1")
	start := time.Now()
	code, out := run(t, `python3 -m pip install --target /tmp/t --index-url `+x.URL()+` --trusted-host `+x.Host()+` pkg-b==1.0 &&
PYTHONPATH=/tmp/t python3 -c 'import pkg_b, tinypkg; print("values", pkg_b.VALUE, tinypkg.VALUE)'`)
	t.Logf("container pip install (%s) took %v, exit %d:\n%s", x.URL(), time.Since(start).Round(time.Millisecond), code, out)
	if code != 0 || !strings.Contains(out, "values b 2.0\n") {
		t.Fatalf("pip in a container failed")
	}
	if b, tp := x.Requests("pkg-b"), x.Requests("tinypkg"); b != 2 || tp != 2 {
		t.Errorf("Requests: pkg-b %d, tinypkg %d; want 2 and 2", b, tp)
	}
}

// TestStall has pip in a container time out on a stalled project.
func TestStall(t *testing.T) {
	t.Parallel()
	x := New(t)
	x.AddWheel("slowpkg", "1.0", `VALUE = 1`)
	x.Stall("SlowPkg")
	start := time.Now()
	code, out := run(t, `s=$(date +%s%N); python3 -m pip install -vv --timeout 2 --retries 0 --target /tmp/t --index-url `+x.URL()+` --trusted-host `+x.Host()+` slowpkg
rc=$?; echo "pip exit $rc after $(( ($(date +%s%N) - s) / 1000000 )) ms"; exit $rc`)
	elapsed := time.Since(start)
	t.Logf("container pip against a stalled project took %v, exit %d:\n%s", elapsed.Round(time.Millisecond), code, matching(out, "Looking in", "Could not fetch", "ERROR", "pip exit"))
	// pip takes a project page it cannot fetch for an empty one: only -vv shows the timeout.
	if code == 0 || !strings.Contains(out, "Read timed out") {
		t.Fatal("pip did not time out on the stalled project")
	}
	if n := x.Requests("slowpkg"); n < 1 {
		t.Errorf("Requests(slowpkg) = %d", n)
	}
}

// TestStallReleased checks that a stalled request gets no answer while the index runs, and
// that stopping the index releases it promptly.
func TestStallReleased(t *testing.T) {
	t.Parallel()
	done := make(chan error, 1)
	var x *Index
	t.Run("index", func(t *testing.T) {
		x = New(t)
		x.AddWheel("tinypkg", "1.0", `VALUE = "1.0"`)
		x.Stall("tinypkg")
		go func() {
			resp, err := http.Get(x.HostURL() + "tinypkg/") // no timeout
			if err == nil {
				resp.Body.Close()
				err = errors.New("answered: " + resp.Status)
			}
			done <- err
		}()
		short := &http.Client{Timeout: 300 * time.Millisecond}
		if resp, err := short.Get(x.HostURL() + "tinypkg/"); err == nil {
			resp.Body.Close()
			t.Fatalf("a stalled project answered %s", resp.Status)
		}
		if resp, err := short.Get(strings.TrimSuffix(x.HostURL(), "simple/") + "files/tinypkg-1.0-py3-none-any.whl"); err == nil {
			resp.Body.Close()
			t.Fatalf("a stalled project's file answered %s", resp.Status)
		}
		select {
		case err := <-done:
			t.Fatalf("the stalled request ended while the index ran: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	})
	if x == nil {
		t.Skip("no index")
	}
	start := time.Now() // the subtest's cleanup has stopped the index
	select {
	case err := <-done:
		t.Logf("stalled request released with %v, %v after the index stopped", err, time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("the stalled request was not released when the index stopped")
	}
	if n := x.Requests("tinypkg"); n != 3 {
		t.Errorf("Requests(tinypkg) = %d, want 3", n)
	}
}

// matching is the lines of s that contain one of subs.
func matching(s string, subs ...string) string {
	var keep []string
	for line := range strings.Lines(s) {
		for _, sub := range subs {
			if strings.Contains(line, sub) {
				keep = append(keep, line)
				break
			}
		}
	}
	return strings.Join(keep, "")
}
