package control_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/sandpit-dev/sandpit/internal/executor"
)

// TestMain fails the package's tests when a goroutine outlives them. Run as the executor's
// LimitedExec (a session's command starts so), it is that.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == executor.LimitedExec {
		os.Exit(executor.ExecLimited(os.Args[2:]))
	}
	goleak.VerifyTestMain(m)
}
