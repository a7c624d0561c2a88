package errclass

import (
	"testing"

	"github.com/sandpit-dev/sandpit/internal/deptest"
)

// TestDependencies: the error classes import only the standard library.
func TestDependencies(t *testing.T) {
	deptest.Check(t, ".", deptest.Module+"/internal/errclass")
}
