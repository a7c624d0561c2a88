package datadir

import (
	"errors"
	"os"
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
