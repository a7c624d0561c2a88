package session

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// writeBox is a session box whose files are a map, and which records each file operation.
type writeBox struct {
	*fakeBox
	mu    sync.Mutex
	files map[string][]byte
	ops   []string
}

func (b *writeBox) WriteFile(_ context.Context, op sandbox.FileWrite) (sandbox.FileEntry, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if op.Append {
		b.ops = append(b.ops, "append")
		b.files[op.Path] = append(b.files[op.Path], op.Content...)
	} else {
		b.ops = append(b.ops, "write")
		b.files[op.Path] = bytes.Clone(op.Content)
	}
	return sandbox.FileEntry{Path: op.Path, SizeBytes: int64(len(b.files[op.Path]))}, nil
}

func (b *writeBox) RenameFile(_ context.Context, op sandbox.FileRename) (sandbox.FileEntry, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ops = append(b.ops, "rename")
	b.files[op.To] = b.files[op.From]
	delete(b.files, op.From)
	return sandbox.FileEntry{Path: op.To, SizeBytes: int64(len(b.files[op.To]))}, nil
}

type oneBoxOpener struct{ box *writeBox }

func (o *oneBoxOpener) OpenSession(context.Context, string) (sandbox.SessionBox, error) {
	return o.box, nil
}

// TestWriteFileInParts: a file up to one message's worth goes to the box in one write; a
// larger one in parts to a temporary name, then renamed into place; the bytes arrive whole
// either way, at the sizes around the part's. The first part is read into a buffer that
// grows with the file, not one of the part's size.
func TestWriteFileInParts(t *testing.T) {
	for _, tc := range []struct {
		size int
		ops  string
	}{
		{0, "write"},
		{11, "write"},
		{writeChunk - 1, "write"},
		{writeChunk, "write rename"},
		{writeChunk + 5, "write append rename"},
		{2*writeChunk + 1, "write append append rename"},
	} {
		box := &writeBox{fakeBox: newFakeBox(), files: map[string][]byte{}}
		m := newKeeper(newService(engine.Hooks{}), &oneBoxOpener{box}, nil, DefaultConfig())
		s, err := m.Create(t.Context(), sandbox.SessionRequest{Agent: "a"})
		if err != nil {
			t.Fatal(err)
		}
		content := bytes.Repeat([]byte("0123456789abcdef"), tc.size/16+1)[:tc.size]
		ent, err := m.WriteFile(t.Context(), "a", s.ID, "d/f.bin", bytes.NewReader(content), true)
		if err != nil || ent.SizeBytes != int64(tc.size) {
			t.Fatalf("%d bytes: %+v, %v", tc.size, ent, err)
		}
		box.mu.Lock()
		if got := strings.Join(box.ops, " "); got != tc.ops {
			t.Errorf("%d bytes went to the box as %q, want %q", tc.size, got, tc.ops)
		}
		if len(box.files) != 1 || !bytes.Equal(box.files["d/f.bin"], content) {
			t.Errorf("%d bytes: the box holds %d files, d/f.bin of %d bytes; want it alone, as written", tc.size, len(box.files), len(box.files["d/f.bin"]))
		}
		box.mu.Unlock()
		if tc.size == 11 {
			// A small file takes no part's worth of memory (it took writeChunk, 8 MiB).
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			if _, err := m.WriteFile(t.Context(), "a", s.ID, "small", bytes.NewReader(content), false); err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&after)
			if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
				t.Errorf("writing 11 bytes allocated %d bytes", n)
			}
		}
		m.Shutdown(context.Background())
	}
}
