package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAcquireIsExclusive(t *testing.T) {
	dir := t.TempDir()
	first, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(dir)
	var locked *LockedError
	if !errors.As(err, &locked) || locked.PID != os.Getpid() || locked.Dir != dir {
		t.Fatalf("second Acquire: %v, want a LockedError naming pid %d", err, os.Getpid())
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	again, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	again.Release()
	again.Release() // idempotent
}

func TestAcquireRejectsRelativePath(t *testing.T) {
	if _, err := Acquire("relative/dir"); err == nil {
		t.Fatal("relative data directory accepted")
	}
}

func TestAcquireCanonicalisesTheDirectory(t *testing.T) {
	dir := t.TempDir()
	link := dir + "-link"
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(link)
	l, err := Acquire(link + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if l.Dir() != dir {
		t.Fatalf("Dir() = %q, want %q", l.Dir(), dir)
	}
	var locked *LockedError
	if _, err := Acquire(dir); !errors.As(err, &locked) {
		t.Fatalf("the same directory by another name was not locked: %v", err)
	}
}

// H39: a data directory made beforehand with a readable mode is named as exposed, with the
// fix; one sandpit made is private.
func TestExposed(t *testing.T) {
	for _, c := range []struct {
		mode os.FileMode
		want string
	}{
		{0o700, ""},
		{0o750, "its group can read"},
		{0o755, "every user of the machine can read"},
		{0o701, "every user of the machine"},
	} {
		dir := t.TempDir()
		if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil { // t.TempDir's own is private
			t.Fatal(err)
		}
		if err := os.Chmod(dir, c.mode); err != nil {
			t.Fatal(err)
		}
		why, err := Exposed(dir)
		if err != nil || (c.want == "") != (why == "") || !strings.Contains(why, c.want) || (why != "" && !strings.Contains(why, "chmod 700 "+dir)) {
			t.Errorf("mode %04o: %q, %v; want %q", c.mode, why, err, c.want)
		}
	}
	dir := filepath.Join(t.TempDir(), "new")
	if _, err := Canonical(dir); err != nil {
		t.Fatal(err)
	}
	if why, _ := Exposed(dir); why != "" {
		t.Errorf("a data directory sandpit created: %s", why)
	}
	// A readable directory inside a private one is out of others' reach.
	inner := filepath.Join(dir, "inner")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if why, _ := Exposed(inner); why != "" {
		t.Errorf("a 0755 directory inside a 0700 one: %s", why)
	}
}
