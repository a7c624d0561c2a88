package cli

import (
	"context"
	"errors"
	"net/http"

	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/datadir"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Exit codes for failures that are not the program's own (sysexits.h where one fits).
const (
	exitUsage       = 64  // EX_USAGE: the request was invalid
	exitDataErr     = 65  // EX_DATAERR: the program's OUTPUT broke its output schema
	exitNoInput     = 66  // EX_NOINPUT: a dependency could not be installed; the code did not run
	exitUnavailable = 69  // EX_UNAVAILABLE: the sandbox is not ready
	exitSoftware    = 70  // EX_SOFTWARE: sandpit itself failed
	exitTempFail    = 75  // EX_TEMPFAIL: busy, or the data directory is in use; try again
	exitOutputLimit = 125 // the run passed an output cap
	exitTimeout     = 124 // the run passed its timeout (as timeout(1))
	exitMemoryLimit = 137 // the run passed its memory limit (128+SIGKILL, as an OOM kill)
	exitInterrupted = 130 // interrupted (128+SIGINT)
)

// ExitCode is the one mapping from a result or an error to `sandpit run`'s exit status.
func ExitCode(res *sandbox.Result, err error) int {
	if err != nil {
		var api *client.APIError
		var field *sandbox.FieldError
		var busy *sandbox.BusyError
		var locked *datadir.LockedError
		var usage *UsageError
		var noDaemon *NoDaemonError
		switch {
		case errors.As(err, &usage):
			return exitUsage
		case errors.As(err, &noDaemon):
			return exitUnavailable
		case errors.Is(err, context.Canceled):
			return exitInterrupted
		case errors.As(err, &api):
			switch {
			case api.Status == http.StatusTooManyRequests:
				return exitTempFail
			case api.Status == http.StatusServiceUnavailable:
				return exitUnavailable
			case api.Status >= 400 && api.Status < 500:
				return exitUsage
			}
			return exitSoftware
		case errors.As(err, &field):
			return exitUsage
		case errors.As(err, &busy), errors.As(err, &locked):
			return exitTempFail
		case errors.Is(err, sandbox.ErrNotReady):
			return exitUnavailable
		}
		return exitSoftware
	}
	switch res.Outcome {
	case sandbox.OutcomeOK:
		return 0
	case sandbox.OutcomeError:
		if res.ExitCode > 0 && res.ExitCode < 256 {
			return res.ExitCode
		}
		return 1
	case sandbox.OutcomeTimeout:
		return exitTimeout
	case sandbox.OutcomeMemoryLimit:
		return exitMemoryLimit
	case sandbox.OutcomeOutputLimit:
		return exitOutputLimit
	case sandbox.OutcomeOutputInvalid:
		return exitDataErr
	case sandbox.OutcomeDependencyError:
		return exitNoInput
	case sandbox.OutcomeKilled:
		if res.Signal > 0 {
			return 128 + res.Signal
		}
		return exitInterrupted
	case sandbox.OutcomeRejected:
		return exitUsage
	}
	return exitSoftware
}
