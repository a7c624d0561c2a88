package main

import (
	"testing"

	"github.com/sandpit-dev/sandpit/internal/deptest"
)

// TestDependencies: the executor runs inside every sandbox, next to untrusted code, so it
// links the standard library and sandpit's protocol with the domain types it carries, and
// nothing else: no third-party module, nothing of the daemon.
func TestDependencies(t *testing.T) {
	m := deptest.Module + "/"
	deptest.Check(t, ".",
		m+"cmd/sandpit-executor",
		m+"internal/executor",
		m+"internal/protocol",
		m+"internal/sandbox",
		m+"internal/requirement",
		m+"internal/suggest",
		m+"internal/errclass")
}
