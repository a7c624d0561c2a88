package sandbox_test

import (
	"testing"

	"github.com/sandpit-dev/sandpit/internal/deptest"
)

// TestDependencies: sandbox is the vocabulary every floor shares, the executor inside the box
// included, so it holds no orchestration and links nothing of the daemon (the engine, the
// stores, the transports) or any third-party module.
func TestDependencies(t *testing.T) {
	m := deptest.Module + "/"
	deptest.Check(t, ".",
		m+"internal/sandbox",
		m+"internal/requirement",
		m+"internal/suggest",
		m+"internal/errclass")
}
