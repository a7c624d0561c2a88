package sandbox

// Outcome is the single verdict of an execution.
type Outcome string

// The outcomes of an execution. Every execution ends with exactly one.
const (
	// OutcomeOK: the program exited with status 0 and OUTPUT (if set) was valid JSON.
	OutcomeOK Outcome = "ok"
	// OutcomeError: a non-zero exit status or an uncaught exception.
	OutcomeError Outcome = "error"
	// OutcomeTimeout: the wall-clock deadline (timeout_ms) or the CPU-time limit was reached
	// and every process of the run was killed.
	OutcomeTimeout Outcome = "timeout"
	// OutcomeMemoryLimit: the program failed with a MemoryError (its memory limit; it exited
	// with a non-zero status), or the box's out-of-memory killer killed the program, or any
	// process of the run in a box that serves one slot, even one the program survived
	// (Result.OOMKills counts them).
	OutcomeMemoryLimit Outcome = "memory_limit"
	// OutcomeOutputLimit: stdout or stderr passed its byte cap, or OUTPUT its size cap; the run
	// was stopped at that moment and the output up to the cap is kept.
	OutcomeOutputLimit Outcome = "output_limit"
	// OutcomeOutputInvalid: the program ended ok but its OUTPUT broke the saved code's output
	// schema; the reason lists the JSON pointers of the failing fields.
	OutcomeOutputInvalid Outcome = "output_invalid"
	// OutcomeDependencyError: a requested dependency could not be installed; the code never
	// ran. The reason names the package and pip's own reason; Result.Dependencies has each one.
	OutcomeDependencyError Outcome = "dependency_error"
	// OutcomeKilled: the program died from a signal that no sandpit limit sent (SIGSEGV, ...),
	// or its client cancelled the request and sandpit killed the run, or (under gVisor) the
	// run reached its process cap and sandpit stopped it.
	OutcomeKilled Outcome = "killed"
	// OutcomeRejected: the request was refused before running (invalid, or the queue was full).
	// Transports answer such requests with an error status instead of a Result; the outcome
	// names them where they are recorded.
	OutcomeRejected Outcome = "rejected"
	// OutcomeSandboxError: the system failed, not the program (the container or executor died,
	// the executor did not answer in time).
	OutcomeSandboxError Outcome = "sandbox_error"
)

// Outcomes lists every outcome, in documentation order.
var Outcomes = []Outcome{
	OutcomeOK, OutcomeError, OutcomeTimeout, OutcomeMemoryLimit, OutcomeOutputLimit, OutcomeOutputInvalid,
	OutcomeDependencyError, OutcomeKilled, OutcomeRejected, OutcomeSandboxError,
}
