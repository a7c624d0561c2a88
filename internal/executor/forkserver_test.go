package executor

import (
	"os"
	"path/filepath"
	"testing"
)

func TestShadows(t *testing.T) {
	s := &forkServer{modules: map[string]bool{"six": true, "numpy": true, "_cffi_backend": true}}
	dir := func(names ...string) string {
		d := t.TempDir()
		for _, n := range names {
			if filepath.Ext(n) == "" {
				if err := os.Mkdir(filepath.Join(d, n), 0o755); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := os.WriteFile(filepath.Join(d, n), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	for _, tc := range []struct {
		name  string
		paths []string
		want  bool
	}{
		{"no paths", nil, false},
		{"other packages", []string{dir("tinypkg", "tinypkg-1.0.dist-info", "solo.py")}, false},
		{"a module file", []string{dir("tinypkg"), dir("six.py", "six-99.0.dist-info")}, true},
		{"a package directory", []string{dir("numpy", "numpy-2.0.dist-info")}, true},
		{"an extension module", []string{dir("_cffi_backend.cpython-311-x86_64-linux-gnu.so")}, true},
		{"only metadata", []string{dir("six-99.0.dist-info")}, false},
		{"an unreadable path", []string{filepath.Join(t.TempDir(), "missing")}, true},
	} {
		if got := s.shadows(tc.paths); got != tc.want {
			t.Errorf("%s: shadows = %v, want %v", tc.name, got, tc.want)
		}
	}
}
