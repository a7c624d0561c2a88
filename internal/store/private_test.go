package store

import (
	"os"
	"path/filepath"
	"testing"
)

// H39: the database and its write-ahead log are private to the daemon's user, whether Open
// creates them or finds them made readable (SQLite's own mode was 0644).
func TestDatabaseFilesArePrivate(t *testing.T) {
	for _, existing := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), FileName)
		if existing {
			for _, p := range []string{path, path + "-wal"} {
				if err := os.WriteFile(p, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		s, err := Open(t.Context(), path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.w.ExecContext(t.Context(), "CREATE TABLE private_probe (x)"); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{path, path + "-wal", path + "-shm"} {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm()&0o077 != 0 {
				t.Errorf("existing %v: %s has mode %04o", existing, filepath.Base(p), fi.Mode().Perm())
			}
		}
		s.Close()
	}
}
