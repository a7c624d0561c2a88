// Package engine runs executions: the Service validates requests, hands out the runtime's
// slots (pool.go: a bounded queue, fair between agents), records each run in the ledger,
// installs dependencies, answers programs' agent.* calls (calls.go), keeps their output files
// (files.go) and layers the daemon's deadline over the runtime's; Sessions keeps the
// stateful sessions, each in a sandbox of its own.
//
// It speaks the vocabulary of package sandbox and drives its ports; it knows nothing of HTTP,
// MCP, the CLI, Docker or storage. A failing program is a Result with an Outcome, never a Go
// error; a Go error means the request was refused or the system failed.
package engine
