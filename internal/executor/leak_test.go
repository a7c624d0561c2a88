package executor

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them.
// As the executor's binary, the test binary is also the kill helper (see killUID).
func TestMain(m *testing.M) {
	if len(os.Args) == 2 && os.Args[1] == KillUIDCommand {
		os.Exit(KillUIDMain())
	}
	goleak.VerifyTestMain(m)
}
