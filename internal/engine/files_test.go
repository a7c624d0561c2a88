package engine

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

func TestValidateFiles(t *testing.T) {
	cfg := testConfig()
	cfg.MaxInputFiles, cfg.MaxInputFileBytes, cfg.MaxInputFilesBytes = 3, 10, 15
	s := NewService(&fakeRuntime{}, Hooks{}, cfg, nil)
	file := func(name string, n int) sandbox.InputFile {
		return sandbox.InputFile{Name: name, Content: bytes.Repeat([]byte("x"), n)}
	}
	cases := []struct {
		name     string
		files    []sandbox.InputFile
		field    string
		tooLarge bool
		says     []string // the message names these
	}{
		{"ok", []sandbox.InputFile{file("a.csv", 10), file("in/b.bin", 5)}, "", false, nil},
		{"empty file", []sandbox.InputFile{file("a", 0)}, "", false, nil},
		{"parent", []sandbox.InputFile{file("ok", 1), file("../x", 1)}, "files[1].name", false, []string{`"../x"`}},
		{"absolute", []sandbox.InputFile{file("/etc/passwd", 1)}, "files[0].name", false, []string{`"/etc/passwd"`, "absolute"}},
		{"NUL", []sandbox.InputFile{file("a\x00b", 1)}, "files[0].name", false, []string{"U+0000"}},
		{"empty name", []sandbox.InputFile{file("", 1)}, "files[0].name", false, []string{"empty"}},
		{"twice", []sandbox.InputFile{file("a", 1), file("b", 1), file("a", 1)}, "files[2].name", false, []string{`"a"`, "files[0]", "twice"}},
		{"the code's file", []sandbox.InputFile{file("main.py", 1)}, "files[0].name", false, []string{`"main.py"`, "another name"}},
		{"a file and its directory", []sandbox.InputFile{file("a", 1), file("a/b", 1)}, "files[1].name", false, []string{`"a/b"`, "files[0]", "another path"}},
		{"inside the code's file", []sandbox.InputFile{file("main.py/x", 1)}, "files[0].name", false, []string{`"main.py/x"`, "code file"}},
		{"too many", []sandbox.InputFile{file("a", 1), file("b", 1), file("c", 1), file("d", 1)}, "files", true, []string{"4 files", "limit is 3", "max_input_files"}},
		{"one too large", []sandbox.InputFile{file("a", 1), file("big.bin", 11)}, "files[1].content", true, []string{`"big.bin"`, "11 bytes", "limit is 10", "max_input_file_bytes"}},
		{"together too large", []sandbox.InputFile{file("a", 8), file("b", 8)}, "files", true, []string{"16 bytes", "15 bytes", `"b"`, "max_input_files_bytes"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := s.Validate(sandbox.Request{Code: "1", Files: c.files})
			if c.field == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			var fe *sandbox.FieldError
			if !errors.As(err, &fe) || fe.Field != c.field || fe.TooLarge != c.tooLarge {
				t.Fatalf("got %#v, want a FieldError on %s (too large %v)", err, c.field, c.tooLarge)
			}
			for _, w := range c.says {
				if !strings.Contains(fe.Error(), w) {
					t.Errorf("error %q does not say %q", fe.Error(), w)
				}
			}
		})
	}
}

// memFiles is a FileStore in memory that refuses the names in refuse.
type memFiles struct {
	mu     sync.Mutex
	refuse map[string]bool
	got    map[string][]byte // id/name → content
}

func (m *memFiles) Put(ctx context.Context, id string, f sandbox.File, content []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refuse[f.Name] {
		return errors.New("the disk is full")
	}
	if m.got == nil {
		m.got = map[string][]byte{}
	}
	m.got[id+"/"+f.Name] = bytes.Clone(content)
	return nil
}

// fileRuntime emits an event per output file, with its content, and lists them in its result.
func fileRuntime(files map[string][]byte, order ...string) *fakeRuntime {
	return &fakeRuntime{run: func(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
		res := sandbox.Result{Outcome: sandbox.OutcomeOK}
		for _, n := range order {
			res.Files = append(res.Files, sandbox.File{Name: n, SizeBytes: int64(len(files[n])), MediaType: "application/octet-stream"})
		}
		return res, nil
	}, emitFiles: files, emitOrder: order}
}

func TestExecutePassesFilesAndCharts(t *testing.T) {
	rt := &fakeRuntime{}
	cfg := testConfig()
	cfg.Charts = true
	s := NewService(rt, Hooks{}, cfg, nil)
	in := []sandbox.InputFile{{Name: "data.csv", Content: []byte("a,b\n1,2\n")}, {Name: "img.bin", Content: []byte{0, 0xff, 1}}}
	off := false
	if _, err := s.Execute(t.Context(), sandbox.Request{Code: "1", Files: in}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Execute(t.Context(), sandbox.Request{Code: "1", Charts: &off}, nil); err != nil {
		t.Fatal(err)
	}
	first, second := rt.calls[0], rt.calls[1]
	if len(first.Files) != 2 || first.Files[0].Name != "data.csv" || !bytes.Equal(first.Files[1].Content, []byte{0, 0xff, 1}) || !first.Charts {
		t.Errorf("spec files %+v charts %v, want the request's files and charts on", first.Files, first.Charts)
	}
	if second.Charts || second.Files != nil {
		t.Errorf("spec charts %v files %v, want charts off as asked and no files", second.Charts, second.Files)
	}
}

func TestExecuteStoresOutputFiles(t *testing.T) {
	files := map[string][]byte{"a.png": {0x89, 'P', 'N', 'G'}, "b.csv": []byte("x\n"), "c.txt": []byte("hi")}
	store := &memFiles{refuse: map[string]bool{"b.csv": true}}
	s := NewService(fileRuntime(files, "a.png", "b.csv", "c.txt"), Hooks{Files: store}, testConfig(), nil)
	var events []sandbox.Event
	res, err := s.Execute(t.Context(), sandbox.Request{Code: "1"}, func(e sandbox.Event) { events = append(events, e) })
	if err != nil {
		t.Fatal(err)
	}
	if got := store.got[res.ID+"/a.png"]; !bytes.Equal(got, files["a.png"]) {
		t.Errorf("stored a.png = %q, want %q", got, files["a.png"])
	}
	if len(res.Files) != 2 || res.Files[0].Name != "a.png" || res.Files[1].Name != "c.txt" {
		t.Errorf("result files %+v, want a.png and c.txt (b.csv could not be stored)", res.Files)
	}
	if len(res.FilesSkipped) != 1 || res.FilesSkipped[0].Name != "b.csv" || !strings.Contains(res.FilesSkipped[0].Reason, "the disk is full") {
		t.Errorf("files skipped %+v, want b.csv with the store's error", res.FilesSkipped)
	}
	var names []string
	for _, e := range events {
		if e.Stream == sandbox.StreamFile {
			if e.Content != nil {
				t.Errorf("event of %s carries its content to the caller", e.File.Name)
			}
			names = append(names, e.File.Name)
		}
	}
	if strings.Join(names, ",") != "a.png,c.txt" {
		t.Errorf("file events %v, want a.png and c.txt", names)
	}
}

func TestExecuteWithoutAFileStoreListsTheFiles(t *testing.T) {
	files := map[string][]byte{"a.png": {1}}
	s := NewService(fileRuntime(files, "a.png"), Hooks{}, testConfig(), nil)
	var n int
	res, err := s.Execute(t.Context(), sandbox.Request{Code: "1"}, func(e sandbox.Event) {
		if e.Stream == sandbox.StreamFile {
			n++
		}
	})
	if err != nil || len(res.Files) != 1 || n != 1 {
		t.Fatalf("result %+v, %d file events, error %v: want the file listed and its event passed", res, n, err)
	}
}

func TestFailedFilesBeyondTheSkippedCapTruncate(t *testing.T) {
	files := map[string][]byte{}
	var order []string
	refuse := map[string]bool{}
	for i := range sandbox.MaxSkippedFiles + 5 {
		n := strings.Repeat("f", 1+i/26) + string(rune('a'+i%26))
		files[n], refuse[n] = []byte("x"), true
		order = append(order, n)
	}
	s := NewService(fileRuntime(files, order...), Hooks{Files: &memFiles{refuse: refuse}}, testConfig(), nil)
	res, err := s.Execute(t.Context(), sandbox.Request{Code: "1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 0 || len(res.FilesSkipped) != sandbox.MaxSkippedFiles || !res.FilesTruncated {
		t.Fatalf("%d files, %d skipped, truncated %v; want 0, %d, true", len(res.Files), len(res.FilesSkipped), res.FilesTruncated, sandbox.MaxSkippedFiles)
	}
}
