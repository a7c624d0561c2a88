package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/errclass"
)

// Exit codes for failures that are not the program's own (sysexits.h where one fits).
const (
	exitUsage       = 64  // EX_USAGE: the request was invalid
	exitDataErr     = 65  // EX_DATAERR: the program's OUTPUT broke its output schema
	exitNoInput     = 66  // EX_NOINPUT: a dependency could not be installed (the code did not run), or an output file is no longer kept
	exitUnavailable = 69  // EX_UNAVAILABLE: the sandbox, the daemon or a setup step is not available
	exitSoftware    = 70  // EX_SOFTWARE: sandpit itself failed
	exitTempFail    = 75  // EX_TEMPFAIL: busy, or the data directory is in use; try again
	exitNoPerm      = 77  // EX_NOPERM: the daemon refused the token (or its absence)
	exitConflict    = 79  // (past sysexits.h) the resource's state refuses it now: paused, busy with a call, exists, ended
	exitOutputLimit = 125 // the run passed an output cap
	exitTimeout     = 124 // the run passed its timeout (as timeout(1))
	exitMemoryLimit = 137 // the run passed its memory limit (128+SIGKILL, as an OOM kill)
	exitInterrupted = 130 // interrupted (128+SIGINT)
)

// ExitCode is the one mapping from a run's result or an error to sandpit's exit status: an
// error by its class (package errclass; the client gives an API error the class of its code),
// a result by its outcome. res is used only when err is nil.
func ExitCode(res *apitype.Result, err error) int {
	if err != nil {
		var done *reportedError
		switch {
		case errors.As(err, &done):
			return ExitCode(done.res, done.cause)
		case errors.Is(err, context.Canceled):
			return exitInterrupted
		}
		switch errclass.Of(err) {
		case errclass.Invalid, errclass.NotFound, errclass.TooLarge:
			return exitUsage
		case errclass.Conflict:
			return exitConflict
		case errclass.Gone:
			return exitNoInput
		case errclass.Forbidden:
			return exitNoPerm
		case errclass.Busy:
			return exitTempFail
		case errclass.Unavailable:
			return exitUnavailable
		}
		return exitSoftware
	}
	switch res.Outcome {
	case apitype.OutcomeOK:
		return 0
	case apitype.OutcomeError:
		if res.ExitCode > 0 && res.ExitCode < 256 {
			return res.ExitCode
		}
		return 1
	case apitype.OutcomeTimeout:
		return exitTimeout
	case apitype.OutcomeMemoryLimit:
		return exitMemoryLimit
	case apitype.OutcomeOutputLimit:
		return exitOutputLimit
	case apitype.OutcomeOutputInvalid:
		return exitDataErr
	case apitype.OutcomeDependencyError:
		return exitNoInput
	case apitype.OutcomeKilled:
		if res.Signal > 0 {
			return 128 + res.Signal
		}
		return exitInterrupted
	case apitype.OutcomeRejected:
		return exitUsage
	}
	return exitSoftware
}

// reportedError ends a command whose failure it has already reported (on stderr, or as the
// run's own output): Main prints nothing more and exits with ExitCode(res, cause).
type reportedError struct {
	res   *apitype.Result
	cause error
}

func (e *reportedError) Error() string {
	if e.cause != nil {
		return e.cause.Error()
	}
	return fmt.Sprintf("the run ended with outcome %s", e.res.Outcome)
}

func (e *reportedError) Unwrap() error { return e.cause }

// reported returns the end of a command that has reported why it failed, with the exit status
// of cause's class.
func reported(cause error) error { return &reportedError{cause: cause} }

// reportedRun returns the end of a run whose result was shown, with the exit status of its
// outcome; nil for ok.
func reportedRun(res apitype.Result) error {
	if ExitCode(&res, nil) == 0 {
		return nil
	}
	return &reportedError{res: &res}
}
