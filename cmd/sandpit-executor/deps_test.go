package main

import (
	"testing"

	"github.com/sandpit-dev/sandpit/internal/deptest"
)

// TestDependencies: the executor runs inside every sandbox, next to untrusted code, so it
// links the standard library and sandpit's protocol with the domain types it carries, and
// nothing else of the daemon. Its third-party modules are github.com/creack/pty (pure Go,
// the standard library only): the terminal of a session's PTY commands, whose opening and
// sizing are ioctls best left to a well-kept library; and golang.org/x/sys/unix, for the
// inotify and openat calls of its directory watchers.
func TestDependencies(t *testing.T) {
	m := deptest.Module + "/"
	deptest.Check(t, ".",
		m+"cmd/sandpit-executor",
		m+"internal/executor",
		m+"internal/protocol",
		m+"internal/sandbox",
		m+"internal/requirement",
		m+"internal/suggest",
		m+"internal/errclass",
		"github.com/creack/pty", "golang.org/x/sys/unix")
}
