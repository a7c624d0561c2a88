package docker

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The watch counts what the box holds on the host without the file cache the kernel can
// reclaim, gVisor's memory file (shared memory) included, and calls over once it reaches the
// limit.
func TestWatchMemoryCountsWhatTheBoxHolds(t *testing.T) {
	dir := t.TempDir()
	write := func(usage string) {
		if err := os.WriteFile(filepath.Join(dir, "memory.usage_in_bytes"), []byte(usage+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.stat"), []byte("cache 1\nrss 2\ntotal_cache 300\ntotal_rss 600\ntotal_shmem 100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	write("1000")
	if got, err := boxMemory(dir); err != nil || got != 800 {
		t.Fatalf("boxMemory = %d, %v; want 800 (1000 less 300 of cache of which 100 is shared memory)", got, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := make(chan int64, 1)
	go watchMemory(ctx, dir, 900, func(used int64) { got <- used })
	select {
	case used := <-got:
		t.Fatalf("over at %d, under the limit", used)
	case <-time.After(10 * memWatchInterval):
	}
	write("1200")
	if used := <-got; used != 1000 {
		t.Fatalf("over at %d, want 1000", used)
	}
}
