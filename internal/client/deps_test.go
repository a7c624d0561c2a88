package client

import (
	"testing"

	"github.com/sandpit-dev/sandpit/internal/deptest"
)

// TestDependencies: the REST client links the standard library and the wire types, nothing
// of the daemon (no store, SQLite, goose, JSON Schema, cron, Docker), so a program that only
// talks to a daemon stays small.
func TestDependencies(t *testing.T) {
	deptest.Check(t, ".",
		deptest.Module+"/internal/client",
		deptest.Module+"/internal/apitype",
		deptest.Module+"/internal/errclass")
}
