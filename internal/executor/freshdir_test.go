package executor

import (
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// TestFreshDirWhileAWriterExits: a directory that a dying process of the last run still
// writes into is cleared all the same (ENOTEMPTY and EEXIST are tried again), and made again
// with mode 0700.
func TestFreshDirWhileAWriterExits(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state-0")
	sub := filepath.Join(dir, "matplotlib")
	if err := os.MkdirAll(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() { // the writer: files into the subdirectory for 300 ms, as fast as it can
		defer close(done)
		end := time.Now().Add(300 * time.Millisecond)
		for i := 0; time.Now().Before(end) && !stop.Load(); i++ {
			_ = os.MkdirAll(sub, 0o700)
			_ = os.WriteFile(filepath.Join(sub, "f"+strconv.Itoa(i)), nil, 0o600)
		}
	}()
	time.Sleep(20 * time.Millisecond)
	err := freshDir(dir, os.Getuid())
	stop.Store(true)
	<-done
	if err != nil {
		t.Fatalf("freshDir with a writer still at work: %v", err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the directory after: %v %v", fi, err)
	}
}
