package sandboxtest

// The cases of input and output files (issue 16) and of H34: links, hard links,
// FIFOs, sockets, devices, a swap, a huge sparse file and a flood of files left in the run's
// directory are each skipped by name or cut, nothing from outside comes back, and the
// outcome stays the program's.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// ExecFiles is Exec that also returns the output files' bytes, from the run's file events, by
// name. It fails the test when an event's file is not in the result, or in another order, or
// when its bytes do not match its size and SHA-256.
func ExecFiles(t *testing.T, rt sandbox.Runtime, slot int, spec sandbox.Spec) (sandbox.Result, map[string][]byte) {
	t.Helper()
	contents := map[string][]byte{}
	var order []string
	res := Exec(t, rt, slot, spec, func(e sandbox.Event) {
		if e.Stream != sandbox.StreamFile {
			return
		}
		if e.File == nil {
			t.Errorf("a file event without a file")
			return
		}
		sum := sha256.Sum256(e.Content)
		if int64(len(e.Content)) != e.File.SizeBytes || hex.EncodeToString(sum[:]) != e.File.SHA256 {
			t.Errorf("file %s: %d bytes arrived for size %d, sha256 %s", e.File.Name, len(e.Content), e.File.SizeBytes, e.File.SHA256)
		}
		contents[e.File.Name] = e.Content
		order = append(order, e.File.Name)
	})
	var listed []string
	for _, f := range res.Files {
		listed = append(listed, f.Name)
	}
	if !slices.Equal(order, listed) || !slices.IsSorted(listed) {
		t.Errorf("file events %q, result's files %q: want the same names, in name order", order, listed)
	}
	return res, contents
}

// skippedFor returns the reason res gives for skipping name, "" when it does not.
func skippedFor(res sandbox.Result, name string) string {
	for _, s := range res.FilesSkipped {
		if s.Name == name {
			return s.Reason
		}
	}
	return ""
}

// fileNames lists res's output files by name.
func fileNames(res sandbox.Result) []string {
	var names []string
	for _, f := range res.Files {
		names = append(names, f.Name)
	}
	return names
}

// noneFromOutside fails the test when an output file holds what only a file outside the run's
// directory holds (markers the case planted there, /etc/passwd's root line, the environment).
func noneFromOutside(t *testing.T, contents map[string][]byte, markers ...string) {
	t.Helper()
	for name, b := range contents {
		for _, m := range append(markers, "root:x:0:0", "PATH=") {
			if bytes.Contains(b, []byte(m)) {
				t.Fatalf("output file %s brought back %q from outside the run's directory", name, m)
			}
		}
	}
}

// parentsOf finds the executor's pid from inside a run: the first ancestor that is not a
// Python process (a fork's parent is the fork server).
const findExecutor = `import os
def _status(p, key):
    for line in open('/proc/%d/status' % p):
        if line.startswith(key + ':'):
            return line.split()[1]
executor = os.getppid()
try:
    while executor > 1 and _status(executor, 'Name').startswith('python'):
        executor = int(_status(executor, 'PPid'))
except OSError:
    pass
`

// TestInputFilesArriveAndOutputFilesComeBackByteExact: input files arrive byte-exact, output files come back byte-exact.
func (s *Suite) TestInputFilesArriveAndOutputFilesComeBackByteExact(t *testing.T) {
	blob := make([]byte, 256*4)
	for i := range blob {
		blob[i] = byte(i)
	}
	spec := Spec(`import hashlib, json, os
import helper  # an input module: importing it leaves no __pycache__ behind
assert helper.VALUE == 7
for name in ('data.csv', 'bin/blob.bin', 'deep/ü/😀 text.txt'):
    st = os.stat(name)
    print(name, hashlib.sha256(open(name, 'rb').read()).hexdigest(), st.st_uid == os.getuid(), oct(st.st_mode & 0o777))
with open('data.csv', 'a') as f:
    f.write('3,4\n')
os.makedirs('out/nested', exist_ok=True)
open('out/nested/copy.bin', 'wb').write(open('bin/blob.bin', 'rb').read())
open('out/résumé.txt', 'w', encoding='utf-8').write('héllo 😀\n')
json.dump({'n': 1}, open('out/result.json', 'w'))`, 20*time.Second)
	spec.Files = []sandbox.InputFile{
		{Name: "data.csv", Content: []byte("a,b\n1,2\n")},
		{Name: "bin/blob.bin", Content: blob},
		{Name: "deep/ü/😀 text.txt", Content: []byte("héllo\x00\r\n😀")},
		{Name: "helper.py", Content: []byte("VALUE = 7\n")},
	}
	spec.Charts = true // with nothing to show: no figure files, and imports work as before
	res, contents := ExecFiles(t, s.rt, 0, spec)
	expect(t, res, sandbox.OutcomeOK)
	var want strings.Builder
	for _, f := range spec.Files[:3] {
		sum := sha256.Sum256(f.Content)
		want.WriteString(f.Name + " " + hex.EncodeToString(sum[:]) + " True 0o644\n")
	}
	if res.Stdout != want.String() {
		t.Fatalf("the run saw its input files as\n%s\nwant\n%s", res.Stdout, want.String())
	}
	if names := fileNames(res); !slices.Equal(names, []string{"data.csv", "out/nested/copy.bin", "out/result.json", "out/résumé.txt"}) {
		t.Fatalf("output files %q (skipped %v): the unchanged inputs and main.py are not outputs, the changed one is", names, res.FilesSkipped)
	}
	if !bytes.Equal(contents["out/nested/copy.bin"], blob) || string(contents["data.csv"]) != "a,b\n1,2\n3,4\n" ||
		string(contents["out/résumé.txt"]) != "héllo 😀\n" {
		t.Fatalf("output files' bytes: %q", contents)
	}
	media := map[string]string{}
	for _, f := range res.Files {
		media[f.Name] = f.MediaType
	}
	if media["data.csv"] != "text/csv; charset=utf-8" || media["out/result.json"] != "application/json" ||
		media["out/nested/copy.bin"] != "application/octet-stream" {
		t.Fatalf("media types %v", media)
	}
	if len(res.FilesSkipped) != 0 || res.FilesTruncated {
		t.Fatalf("skipped %v, truncated %v", res.FilesSkipped, res.FilesTruncated)
	}
	// The next run in the slot starts in an empty directory.
	next := Exec(t, s.rt, 0, Spec("import os; print(sorted(os.listdir('.')))", 10*time.Second), nil)
	if next.Stdout != "['main.py']\n" || len(next.Files) != 0 {
		t.Fatalf("the next run's directory: %q, files %v", next.Stdout, next.Files)
	}
}

// TestH34LinksFIFOsSocketsAndDevicesAreSkippedNeverFollowed: H34 links, hard links, FIFOs, sockets and devices are skipped by name, never followed.
func (s *Suite) TestH34LinksFIFOsSocketsAndDevicesAreSkippedNeverFollowed(t *testing.T) {
	code := findExecutor + `import json, os, socket, stat
made = []
def attempt(name, fn):
    try:
        fn()
        made.append(name)
    except OSError as e:
        print(name, 'not made:', e)
here = os.getcwd()
runs = os.path.dirname(here)
other = os.path.join(runs, 'slot-1' if not here.endswith('slot-1') else 'slot-0')
home = os.path.expanduser('~')
open(os.path.join(home, 'secret'), 'w').write('SECRET-FROM-HOME')
attempt('to-passwd', lambda: os.symlink('/etc/passwd', 'to-passwd'))
attempt('to-environ', lambda: os.symlink('/proc/%d/environ' % executor, 'to-environ'))
attempt('to-other-slot', lambda: os.symlink(other, 'to-other-slot'))
attempt('to-root', lambda: os.symlink('/', 'to-root'))
attempt('up', lambda: os.symlink('..', 'up'))
attempt('hard-home', lambda: os.link(os.path.join(home, 'secret'), 'hard-home'))
attempt('hard-passwd', lambda: os.link('/etc/passwd', 'hard-passwd'))
attempt('hard-pidfile', lambda: os.link(os.path.join(runs, 'executor.pid'), 'hard-pidfile'))
attempt('hard-bootstrap', lambda: os.link(os.path.join(runs, 'bootstrap.pyc'), 'hard-bootstrap'))
attempt('fifo', lambda: os.mkfifo('fifo'))
attempt('sock', lambda: socket.socket(socket.AF_UNIX).bind('sock'))
attempt('dev', lambda: os.mknod('dev', stat.S_IFCHR | 0o666, os.makedev(1, 3)))
open('plain.txt', 'w').write('mine')
print(json.dumps(made))`
	res, contents := ExecFiles(t, s.rt, 0, Spec(code, 20*time.Second))
	expect(t, res, sandbox.OutcomeOK)
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	var made []string
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &made); err != nil {
		t.Fatalf("stdout %q: %v", res.Stdout, err)
	}
	t.Logf("made %v; %s", made, strings.Join(lines[:len(lines)-1], "; "))
	for _, must := range []string{"to-passwd", "to-environ", "to-other-slot", "to-root", "up", "hard-home", "fifo", "sock"} {
		if !slices.Contains(made, must) {
			t.Fatalf("the run could not make %s: %q", must, res.Stdout)
		}
	}
	for _, name := range made {
		want := map[string]string{"fifo": "FIFO", "sock": "socket", "dev": "device"}[name]
		switch {
		case strings.HasPrefix(name, "to-") || name == "up":
			want = "symbolic link, not followed"
		case strings.HasPrefix(name, "hard-"):
			want = "hard link"
		}
		if got := skippedFor(res, name); !strings.Contains(got, want) {
			t.Errorf("%s: skipped as %q, want a reason with %q (all: %v)", name, got, want, res.FilesSkipped)
		}
	}
	if names := fileNames(res); !slices.Equal(names, []string{"plain.txt"}) || string(contents["plain.txt"]) != "mine" {
		t.Fatalf("output files %q %q, want only plain.txt", names, contents)
	}
	noneFromOutside(t, contents, "SECRET-FROM-HOME")
}

// TestH34HugeSparseFileIsSkippedWithoutBeingRead: H34 a huge sparse file is skipped without being read.
func (s *Suite) TestH34HugeSparseFileIsSkippedWithoutBeingRead(t *testing.T) {
	spec := Spec(`import os
for size in (10 << 30, 1 << 30, 256 << 20, 64 << 20):
    try:
        with open('sparse', 'wb') as f:
            f.truncate(size)
        break
    except OSError as e:
        print('not', size, e)
print(os.path.getsize('sparse'))
open('small.txt', 'w').write('kept')`, 20*time.Second)
	spec.Limits.FileSizeBytes = 16 << 30
	start := time.Now()
	res, contents := ExecFiles(t, s.rt, 0, spec)
	took := time.Since(start)
	expect(t, res, sandbox.OutcomeOK)
	t.Logf("made a sparse file of %s bytes; the run took %s", strings.TrimSpace(res.Stdout), took)
	if reason := skippedFor(res, "sparse"); !strings.Contains(reason, "larger than the 8388608-byte cap on one output file") {
		t.Fatalf("sparse: skipped as %q (all: %v)", reason, res.FilesSkipped)
	}
	if names := fileNames(res); !slices.Equal(names, []string{"small.txt"}) || string(contents["small.txt"]) != "kept" {
		t.Fatalf("output files %q", names)
	}
	if took > 10*time.Second {
		t.Fatalf("the run took %s: was the sparse file read?", took)
	}
}

// TestH34FileSwappedForALinkIsReadOnlyAfterTheRunEnds: H34 a file swapped for a link is read only after the run's processes are dead.
func (s *Suite) TestH34FileSwappedForALinkIsReadOnlyAfterTheRunEnds(t *testing.T) {
	// A process the program leaves behind keeps swapping "swap" between a file and a link
	// to /etc/passwd; the collector reads once it is dead, and never through the link.
	code := `import os, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    n = 0
    while True:
        try:
            os.symlink('/etc/passwd', 'swap.tmp')
        except FileExistsError:
            pass
        os.replace('swap.tmp', 'swap')
        with open('swap.tmp', 'w') as f:
            f.write('planted')
        os.replace('swap.tmp', 'swap')
        n += 1
        with open('count', 'w') as f:
            f.write(str(n))
        if n == 1:
            os.write(w, b'x')
os.read(r, 1)  # the swapper is going
time.sleep(0.2)
print('leaving the swapper running')`
	res, contents := ExecFiles(t, s.rt, 0, Spec(code, 20*time.Second))
	expect(t, res, sandbox.OutcomeOK)
	if _, ran := contents["count"]; !ran { // (killed at any point: it may be empty)
		t.Fatalf("the swapper did not run (files %v, skipped %v)", fileNames(res), res.FilesSkipped)
	}
	// "swap" is always there (replaced atomically), a file with what was planted or a
	// link; "swap.tmp" may be missing, a link, or a file being written when it was killed.
	if b, got := contents["swap"]; got && string(b) != "planted" {
		t.Fatalf("swap came back as %q", b)
	} else if reason := skippedFor(res, "swap"); !got && reason != "symbolic link, not followed" {
		t.Fatalf("swap: neither collected nor skipped as a link: %q (files %v, skipped %v)", reason, fileNames(res), res.FilesSkipped)
	}
	if b, got := contents["swap.tmp"]; got && string(b) != "planted" && len(b) != 0 {
		t.Fatalf("swap.tmp came back as %q", b)
	}
	noneFromOutside(t, contents)
}

// TestH34FloodOfSmallFilesStopsTheScanAtItsCap: H34 a flood of small files stops the scan at its cap, flagged.
func (s *Suite) TestH34FloodOfSmallFilesStopsTheScanAtItsCap(t *testing.T) {
	n := 100_000
	if s.SlowWrites {
		n = 15_000 // a user-space kernel's file creation is slow; still past the scan's cap
	}
	spec := Spec(`import os
made = 0
try:
    for i in range(`+itoa(n)+`):
        os.close(os.open('f%06d' % i, os.O_CREAT | os.O_WRONLY, 0o644))
        made += 1
except OSError as e:
    print('stopped:', e)
print(made)`, 120*time.Second)
	start := time.Now()
	res, _ := ExecFiles(t, s.rt, 0, spec)
	expect(t, res, sandbox.OutcomeOK)
	t.Logf("%s files made; the run took %s (%d ms in the program)", strings.ReplaceAll(strings.TrimSpace(res.Stdout), "\n", " "), time.Since(start), res.DurationMS)
	if !res.FilesTruncated || len(res.Files) != sandbox.DefaultLimits().OutputFiles || len(res.FilesSkipped) != sandbox.MaxSkippedFiles {
		t.Fatalf("files %d, skipped %d, truncated %v", len(res.Files), len(res.FilesSkipped), res.FilesTruncated)
	}
	next := Exec(t, s.rt, 0, Spec("import os; print(sorted(os.listdir('.')))", 30*time.Second), nil)
	if next.Stdout != "['main.py']\n" {
		t.Fatalf("the next run's directory: %.200q", next.Stdout)
	}
}

// TestChartsPyplotFiguresComeBackAsPNGFiles: charts: plt.show() and figures left open come back as PNG files.
func (s *Suite) TestChartsPyplotFiguresComeBackAsPNGFiles(t *testing.T) {
	if s.HasModule == nil || !s.HasModule("matplotlib") {
		t.Skip("no matplotlib in the box")
	}
	spec := Spec(`import matplotlib.pyplot as plt
open('figure-1.png', 'w').write('mine')
plt.plot([1, 2])
plt.show()
plt.figure()
plt.bar([1, 2], [3, 4])`, HeavyImportTimeout)
	spec.Charts = true
	res, contents := ExecFiles(t, s.rt, 0, spec)
	expect(t, res, sandbox.OutcomeOK)
	if names := fileNames(res); !slices.Equal(names, []string{"figure-1.png", "figure-2.png", "figure-3.png"}) {
		t.Fatalf("output files %q (stderr %q)", names, res.Stderr)
	}
	if string(contents["figure-1.png"]) != "mine" {
		t.Fatalf("the program's own figure-1.png was replaced: %.20q", contents["figure-1.png"])
	}
	for _, name := range []string{"figure-2.png", "figure-3.png"} {
		if b := contents[name]; !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) <= 1024 {
			t.Fatalf("%s is not a chart: %d bytes %.16q", name, len(b), b)
		}
	}
	for _, f := range res.Files[1:] {
		if f.MediaType != "image/png" {
			t.Fatalf("%s: media type %q", f.Name, f.MediaType)
		}
	}

	spec.ID, spec.Charts = sandbox.NewID(), false
	res, _ = ExecFiles(t, s.rt, 0, spec)
	expect(t, res, sandbox.OutcomeOK)
	if names := fileNames(res); !slices.Equal(names, []string{"figure-1.png"}) {
		t.Fatalf("with charts off: output files %q", names)
	}
}

// TestChartsPILImageShowComesBackAsAPNGFile: charts: PIL's Image.show() comes back as a PNG file.
func (s *Suite) TestChartsPILImageShowComesBackAsAPNGFile(t *testing.T) {
	if s.HasModule == nil || !s.HasModule("PIL") {
		t.Skip("no PIL in the box")
	}
	spec := Spec(`from PIL import Image
Image.new('RGB', (64, 48), 'red').show()
Image.new('F', (8, 8)).show()`, 60*time.Second)
	spec.Charts = true
	res, contents := ExecFiles(t, s.rt, 0, spec)
	expect(t, res, sandbox.OutcomeOK)
	if names := fileNames(res); !slices.Equal(names, []string{"image-1.png", "image-2.png"}) {
		t.Fatalf("output files %q (stderr %q)", names, res.Stderr)
	}
	if b := contents["image-1.png"]; !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("image-1.png: %.16q", b)
	}
}

// TestInputFileThatCannotBeWrittenFailsTheRun: an input file that cannot be written fails the run, naming it.
func (s *Suite) TestInputFileThatCannotBeWrittenFailsTheRun(t *testing.T) {
	spec := Spec("print('ran')", 10*time.Second)
	spec.Files = []sandbox.InputFile{{Name: "a", Content: []byte("x")}, {Name: "a/b", Content: []byte("y")}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := s.rt.Run(ctx, 0, spec, nil)
	if err == nil && (res.Outcome != sandbox.OutcomeSandboxError || !strings.Contains(res.Reason, `"a/b"`) || res.Stdout != "") {
		t.Fatalf("outcome %q reason %q stdout %q", res.Outcome, res.Reason, res.Stdout)
	}
	next := Exec(t, s.rt, 0, Spec("import os; print(sorted(os.listdir('.')))", 10*time.Second), nil)
	if next.Stdout != "['main.py']\n" {
		t.Fatalf("the next run's directory: %q", next.Stdout)
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
