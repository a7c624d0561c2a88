// Package engine runs executions: the Service validates a request (Validate: the one check of
// every limit a request names), hands out the runtime's slots (pool.go: a bounded queue, fair
// between agents, with Hold for other work of the daemon's), records each run in the ledger
// before it starts and when it ends, installs dependencies (InstallWith), answers programs'
// agent.* calls (calls.go), keeps their output files (files.go), gives each run its egress
// dialer and layers the daemon's deadline over the runtime's. A session's call takes the same
// path from Prepare on (execution.go), in the session's own sandbox; package session orders
// the calls and keeps the sessions.
//
// It speaks the vocabulary of package sandbox and drives its ports; it knows nothing of
// sessions, HTTP, MCP, the CLI, Docker or storage. A failing program is a Result with an
// Outcome, never a Go error; a Go error means the request was refused or the system failed.
package engine
