package app

import (
	"os"
	"path/filepath"
	"testing"
)

// TestExecutorFile: doctor's executor check looks at the file, not only its path (a trial's
// executor_path named a missing file and doctor said ok, then failed the image on it).
func TestExecutorFile(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "sandpit-executor")
	plain := filepath.Join(dir, "plain")
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{exe, 0o755}, {plain, 0o644}} {
		if err := os.WriteFile(f.path, []byte("x"), f.mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		path string
		ok   bool
	}{{exe, true}, {plain, false}, {dir, false}, {filepath.Join(dir, "nope", "sandpit-executor"), false}} {
		if err := executorFile(c.path); (err == nil) != c.ok {
			t.Errorf("executorFile(%s) = %v, want ok %v", c.path, err, c.ok)
		}
	}
}
