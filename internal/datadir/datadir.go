// Package datadir guards a sandpit data directory: one sandpit process (a daemon, or a command
// that runs the sandbox in its own process) owns a data directory and its warm containers at a
// time, enforced with an advisory lock (flock) on DIR/lock that the kernel releases when the
// owner dies.
package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandpit-dev/sandpit/internal/errclass"
)

// LockedError means another live process owns the data directory.
type LockedError struct {
	Dir string
	// PID is the owner's process ID as it recorded it (0 when unknown).
	PID int
}

// Is makes a LockedError of class errclass.Busy: try again once the other process is done.
func (e *LockedError) Is(target error) bool { return target == errclass.Busy }

func (e *LockedError) Error() string {
	owner := "another sandpit process"
	if e.PID > 0 {
		owner = fmt.Sprintf("sandpit process %d", e.PID)
	}
	return fmt.Sprintf("data directory %s is in use by %s; one data directory's sandbox is driven by one engine at a time", e.Dir, owner)
}

// Exposed returns why dir is open to other users of the machine ("" when it is not): any
// permission for its group or for others, where they can reach it (every directory above it
// lets them search it). A data directory holds every run's code, input, output and files:
// sandpit creates it 0700 and its files 0600, but a directory made beforehand (a packaged
// /var/lib/sandpit is often 0755) keeps its mode.
func Exposed(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("reading the data directory's permissions: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("reading the data directory's permissions: %w", err)
	}
	mode := fi.Mode().Perm()
	others, group := mode&0o007 != 0, mode&0o070 != 0
	for up := filepath.Dir(abs); (others || group) && up != abs; abs, up = up, filepath.Dir(up) {
		ui, err := os.Stat(up)
		if err != nil {
			break // cannot tell: count it as reachable
		}
		if ui.Mode().Perm()&0o001 == 0 {
			others = false
		}
		if ui.Mode().Perm()&0o011 == 0 {
			group = false
		}
	}
	switch {
	case others:
		return fmt.Sprintf("data directory %s has mode %04o: every user of the machine can read the database and the runs' files in it (fix: chmod 700 %s)",
			dir, mode, dir), nil
	case group:
		return fmt.Sprintf("data directory %s has mode %04o: its group can read the database and the runs' files in it (fix: chmod 700 %s)",
			dir, mode, dir), nil
	}
	return "", nil
}

// Lock is a held data directory.
type Lock struct {
	f   *os.File
	dir string
}

// Dir is the data directory's canonical path (absolute, clean, symbolic links resolved): the
// one name under which its container is labelled, however the directory was spelt.
func (l *Lock) Dir() string { return l.dir }

// Canonical creates dir (mode 0700) if needed and returns its canonical path.
func Canonical(dir string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("data directory %q must be an absolute path", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating data directory: %w", err)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("resolving data directory: %w", err)
	}
	return filepath.Clean(real), nil
}

// Acquire creates dir (mode 0700) if needed and takes its lock without waiting.
// It returns a *LockedError when another process holds it.
func Acquire(dir string) (*Lock, error) {
	dir, err := Canonical(dir)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the data directory's lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		data, _ := os.ReadFile(f.Name())
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
			return nil, &LockedError{Dir: dir, PID: pid}
		}
		return nil, fmt.Errorf("locking the data directory: %w", err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f, dir: dir}, nil
}

// Release gives the lock up. It is idempotent.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.f.Truncate(0)
	err := l.f.Close() // closing the descriptor releases the flock
	l.f = nil
	return err
}
