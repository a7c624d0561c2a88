package executor

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("writing files for another uid needs root; run the tests as root")
	}
}

const testUID = 61999

func TestWriteInputFiles(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	blob := make([]byte, 256)
	for i := range blob {
		blob[i] = byte(i)
	}
	files := []sandbox.InputFile{
		{Name: "data.csv", Content: []byte("a,b\n1,2\n")},
		{Name: "in/deep/blob.bin", Content: blob},
		{Name: "in/ü 😀.txt", Content: []byte("héllo")},
		{Name: "empty", Content: nil},
	}
	if err := writeInputFiles(dir, testUID, files); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(dir, f.Name))
		if err != nil || !bytes.Equal(got, f.Content) {
			t.Fatalf("%s: %q %v, want %q", f.Name, got, err, f.Content)
		}
		st := lstat(t, filepath.Join(dir, f.Name))
		if st.Uid != testUID || st.Gid != testUID || st.Mode&0o7777 != 0o644 || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
			t.Fatalf("%s: uid %d gid %d mode %o", f.Name, st.Uid, st.Gid, st.Mode)
		}
	}
	for _, d := range []string{"in", "in/deep"} {
		st := lstat(t, filepath.Join(dir, d))
		if st.Uid != testUID || st.Mode&0o7777 != 0o755 {
			t.Fatalf("directory %s: uid %d mode %o", d, st.Uid, st.Mode)
		}
	}

	t.Run("a name taken fails naming the file", func(t *testing.T) {
		err := writeInputFiles(dir, testUID, []sandbox.InputFile{{Name: "data.csv", Content: []byte("x")}})
		if err == nil || !strings.Contains(err.Error(), `"data.csv"`) {
			t.Fatalf("err = %v", err)
		}
		if got, _ := os.ReadFile(filepath.Join(dir, "data.csv")); string(got) != "a,b\n1,2\n" {
			t.Fatalf("the file was overwritten: %q", got)
		}
	})
	t.Run("links in the way are not followed", func(t *testing.T) {
		outside := t.TempDir()
		dir := t.TempDir()
		if err := os.Symlink(outside, filepath.Join(dir, "sub")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(outside, "target"), filepath.Join(dir, "f")); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"sub/x", "f"} {
			err := writeInputFiles(dir, testUID, []sandbox.InputFile{{Name: name, Content: []byte("x")}})
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", name)) {
				t.Fatalf("%s: err = %v", name, err)
			}
		}
		if entries, _ := os.ReadDir(outside); len(entries) != 0 {
			t.Fatalf("something was written outside: %v", entries)
		}
	})
}

func lstat(t *testing.T, path string) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// collect runs the collector on dir and returns what it found, with the bytes it sent by name
// (checked against each file's size and SHA-256).
func collect(t *testing.T, dir string, inputs []sandbox.InputFile, lim sandbox.Limits) (collection, map[string][]byte) {
	t.Helper()
	sent := map[string][]byte{}
	var order []string
	got, err := collectOutputFiles(dir, inputs, lim, func(f sandbox.File, content []byte) {
		sum := sha256.Sum256(content)
		if int64(len(content)) != f.SizeBytes || hex.EncodeToString(sum[:]) != f.SHA256 {
			t.Errorf("%s: %d bytes sent with size %d and sha256 %s", f.Name, len(content), f.SizeBytes, f.SHA256)
		}
		sent[f.Name] = content
		order = append(order, f.Name)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(order) != len(got.files) {
		t.Fatalf("%d files sent, %d listed", len(order), len(got.files))
	}
	for i, f := range got.files {
		if order[i] != f.Name || (i > 0 && got.files[i-1].Name >= f.Name) {
			t.Fatalf("files not sent in name order: %v", order)
		}
	}
	return got, sent
}

func reasons(c collection) map[string]string {
	m := map[string]string{}
	for _, s := range c.skipped {
		m[s.Name] = s.Reason
	}
	return m
}

func write(t *testing.T, path string, content []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCollectOutputFiles(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	write(t, outside, []byte("SECRET"))
	inputs := []sandbox.InputFile{{Name: "in/same.csv", Content: []byte("a\n")}, {Name: "in/changed.csv", Content: []byte("a\n")}}
	write(t, filepath.Join(dir, "main.py"), []byte("print(1)"))
	write(t, filepath.Join(dir, "in/same.csv"), []byte("a\n"))
	write(t, filepath.Join(dir, "in/changed.csv"), []byte("b\n"))
	write(t, filepath.Join(dir, "out/chart.png"), []byte("\x89PNG\r\n\x1a\nrest"))
	write(t, filepath.Join(dir, "report.txt"), []byte("héllo\n"))
	write(t, filepath.Join(dir, "noext"), []byte{0, 1, 2})
	write(t, filepath.Join(dir, "big.bin"), bytes.Repeat([]byte("x"), 2000))
	write(t, filepath.Join(dir, "hard"), []byte("two names"))
	if err := os.Link(filepath.Join(dir, "hard"), filepath.Join(dir, "hard2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(outside, filepath.Join(dir, "linked-outside")); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"passwd": "/etc/passwd", "environ": fmt.Sprintf("/proc/%d/environ", os.Getpid()),
		"elsewhere": filepath.Dir(outside), "up": ".."} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(filepath.Join(dir, "null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sparse, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sparse.Truncate(10 << 30); err != nil {
		t.Fatal(err)
	}
	sparse.Close()
	write(t, filepath.Join(dir, "bad\nname"), []byte("x"))
	write(t, filepath.Join(dir, "bad\xffutf8"), []byte("x"))
	deep := dir
	for range maxScanDepth + 2 {
		deep = filepath.Join(deep, "d")
	}
	write(t, filepath.Join(deep, "deep.txt"), []byte("deep"))

	lim := sandbox.Limits{OutputFiles: 10, OutputFileBytes: 1000, OutputFilesBytes: 10000}
	got, sent := collect(t, dir, inputs, lim)
	var names []string
	for _, f := range got.files {
		names = append(names, f.Name)
	}
	if want := "in/changed.csv noext out/chart.png report.txt"; strings.Join(names, " ") != want {
		t.Fatalf("files %q, want %q", names, want)
	}
	want := map[string]string{
		"in/changed.csv": "text/csv; charset=utf-8", "noext": "application/octet-stream",
		"out/chart.png": "image/png", "report.txt": "text/plain; charset=utf-8",
	}
	for _, f := range got.files {
		if f.MediaType != want[f.Name] {
			t.Errorf("%s: media type %q, want %q", f.Name, f.MediaType, want[f.Name])
		}
	}
	if string(sent["in/changed.csv"]) != "b\n" || string(sent["report.txt"]) != "héllo\n" {
		t.Fatalf("sent %q", sent)
	}
	skipped := reasons(got)
	for name, says := range map[string]string{
		"passwd": "symbolic link", "environ": "symbolic link", "elsewhere": "symbolic link", "up": "symbolic link",
		"hard": "hard link", "hard2": "hard link", "linked-outside": "hard link",
		"fifo": "FIFO", "null": "device", "sock": "socket",
		"sparse":        "larger than the 1000-byte cap on one output file (10737418240 bytes)",
		"big.bin":       "larger than the 1000-byte cap",
		"bad\uFFFDname": "its name cannot name an output file", "bad\uFFFDutf8": "its name cannot name an output file",
		strings.Repeat("d/", maxScanDepth-1) + "d": "nested more than 32 levels deep",
	} {
		if !strings.Contains(skipped[name], says) {
			t.Errorf("%q: skipped as %q, want a reason with %q (all: %q)", name, skipped[name], says, skipped)
		}
	}
	if len(got.skipped) != 15 || got.truncated {
		t.Errorf("%d skipped (truncated %v): %q", len(got.skipped), got.truncated, skipped)
	}
	for name, content := range sent {
		if bytes.Contains(content, []byte("SECRET")) || bytes.Contains(content, []byte("root:")) {
			t.Fatalf("%s brought back something from outside: %q", name, content)
		}
	}

	t.Run("caps on count and total", func(t *testing.T) {
		dir := t.TempDir()
		for i := range 6 {
			write(t, filepath.Join(dir, fmt.Sprintf("f%d", i)), bytes.Repeat([]byte("x"), 100))
		}
		got, _ := collect(t, dir, nil, sandbox.Limits{OutputFiles: 4, OutputFileBytes: 100, OutputFilesBytes: 250})
		skipped := reasons(got)
		if len(got.files) != 2 || got.files[0].Name != "f0" || got.files[1].Name != "f1" ||
			!strings.Contains(skipped["f2"], "would pass the 250-byte cap on all output files") ||
			!strings.Contains(skipped["f5"], "would pass the 250-byte cap") {
			t.Fatalf("files %v skipped %q", got.files, skipped)
		}
		got, _ = collect(t, dir, nil, sandbox.Limits{OutputFiles: 4, OutputFileBytes: 100})
		skipped = reasons(got)
		if len(got.files) != 4 || skipped["f4"] != "past the cap of 4 output files" || skipped["f5"] == "" {
			t.Fatalf("files %v skipped %q", got.files, skipped)
		}
		if got, _ := collect(t, dir, nil, sandbox.Limits{}); len(got.files)+len(got.skipped) != 0 {
			t.Fatalf("with output_files 0: %+v", got)
		}
	})

	t.Run("the scan stops at its cap", func(t *testing.T) {
		dir := t.TempDir()
		for i := range maxScanEntries + 50 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, _ := collect(t, dir, nil, sandbox.Limits{OutputFiles: 64, OutputFileBytes: 100})
		if len(got.files) != 64 || !got.truncated || len(got.skipped) != sandbox.MaxSkippedFiles {
			t.Fatalf("%d files, %d skipped, truncated %v", len(got.files), len(got.skipped), got.truncated)
		}
	})

	t.Run("a file swapped for a link after the listing is not followed", func(t *testing.T) {
		dir := t.TempDir()
		write(t, filepath.Join(dir, "sub/f"), []byte("mine"))
		root, err := openRetry(dir, dirFlags, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(root)
		c := &collector{root: root, maxFiles: 10, maxFileBytes: 100}
		if err := c.scan(root, "", 0); err != nil || len(c.candidates) != 1 {
			t.Fatalf("scan: %v %v", err, c.candidates)
		}
		for _, swap := range []func(){
			func() { os.Remove(filepath.Join(dir, "sub/f")); os.Symlink("/etc/passwd", filepath.Join(dir, "sub/f")) },
			func() { os.RemoveAll(filepath.Join(dir, "sub")); os.Symlink("/etc", filepath.Join(dir, "sub")) },
		} {
			swap()
			c.skipped = nil
			if _, content, ok := c.read("sub/f", 0); ok || len(c.skipped) != 1 || !strings.Contains(c.skipped[0].Reason, "symbolic link") {
				t.Fatalf("read %q ok %v, skipped %v", content, ok, c.skipped)
			}
		}
	})
}

func TestMediaType(t *testing.T) {
	for _, c := range []struct{ name, content, want string }{
		{"a.CSV", "a,b\n", "text/csv; charset=utf-8"},
		{"a.csv", "\xff\xfe", "text/csv"},
		{"a.json", "{}", "application/json"},
		{"figure-1.png", "\x89PNG\r\n\x1a\n", "image/png"},
		{"x", "\x89PNG\r\n\x1a\n", "image/png"},
		{"x", "%PDF-1.7", "application/pdf"},
		{"x", "RIFF1234WEBPVP8", "image/webp"},
		{"x", "plain words", "text/plain; charset=utf-8"},
		{"x", "\x00\x01", "application/octet-stream"},
		{"page.html", "<script>", "text/html; charset=utf-8"},
		{"a.svg", "<svg/>", "image/svg+xml"},
	} {
		if got := mediaType(c.name, []byte(c.content)); got != c.want {
			t.Errorf("mediaType(%q, %q) = %q, want %q", c.name, c.content, got, c.want)
		}
	}
}

// The collector's cost on a run that left nothing (main.py alone), and on one that left 64
// files of 100 KiB.
func BenchmarkCollectOutputFiles(b *testing.B) {
	lim := sandbox.Limits{OutputFiles: 64, OutputFileBytes: 8 << 20, OutputFilesBytes: 16 << 20}
	for _, n := range []int{0, 64} {
		b.Run(fmt.Sprintf("%d files", n), func(b *testing.B) {
			dir := b.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "main.py"), []byte("print(1)"), 0o644); err != nil {
				b.Fatal(err)
			}
			for i := range n {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d.bin", i)), bytes.Repeat([]byte{byte(i)}, 100<<10), 0o644); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				got, err := collectOutputFiles(dir, nil, lim, func(sandbox.File, []byte) {})
				if err != nil || len(got.files) != n {
					b.Fatal(err, len(got.files))
				}
			}
		})
	}
}

// A session's call names as skipped only the links and special files it made or changed, not
// those an earlier command left (a trial saw a FIFO and a link named by every later call);
// a file it did not change is left out too.
func TestCollectFilesLeavesOutWhatWasThereBefore(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(dir, "old-link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "old-fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kept.txt"), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := stampFiles(dir)
	if err := os.Symlink("/etc", filepath.Join(dir, "new-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "new.txt"), []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := collectFiles(dir, nil, sandbox.Limits{OutputFiles: 10, OutputFileBytes: 1 << 20, OutputFilesBytes: 1 << 20}, before,
		func(sandbox.File, []byte) {})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.files) != 1 || got.files[0].Name != "new.txt" || len(got.skipped) != 1 || got.skipped[0].Name != "new-link" {
		t.Fatalf("files %+v, skipped %+v: want new.txt, and new-link skipped", got.files, got.skipped)
	}
}
