// Package sandbox is the vocabulary of code execution that every floor of sandpit shares, the
// executor inside the box included: requests, results, events, limits, outcomes, execution and
// session IDs, the errors that refuse a request, and the ports the engine drives (Runtime and
// the session sandboxes it opens, Installer, Recorder, FileStore, Callbacks, EgressPolicy).
//
// It holds no orchestration (that is package engine) and knows nothing of HTTP, MCP, the CLI,
// Docker or storage; a test keeps it to the standard library and sandpit's small leaf
// packages. A failing program is a Result with an Outcome, never a Go error; a Go error means
// the request was refused (see the Err values and error types) or the system failed.
package sandbox
