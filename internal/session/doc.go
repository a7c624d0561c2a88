// Package session keeps stateful sessions: an interpreter that keeps its globals from call to
// call, in a sandbox of its own, which is also a workspace (commands and files by path) and
// can be paused, hibernated to disk, resumed and forked.
//
// A Registry holds the daemon's sessions: it creates them (within the caps per agent and in
// all), finds them for an agent, ends them at their idle timeout, lifetime or deadline, keeps
// the ledger of their states, recovers hibernated ones at start and ends the rest when the
// daemon stops. A *Session is one session's handle, valid in every state: each verb is a
// method, in a file of its own (call.go, commands.go, files.go, pause.go, hibernate.go,
// fork.go, close.go), and a session's properties (its limits, network narrowing, environment,
// deadline, lifecycle options) are its own, so that every door (REST, MCP, the CLI, the E2B
// API, the console) sees and enforces the same ones.
//
// Calls run as executions of package engine (validated, recorded and bounded as one-shot runs
// are) in the session's box (sandbox.SessionBox, opened by the runtime's
// sandbox.SessionOpener). Locks: Registry.mu guards which sessions exist and their counts;
// Session.mu guards one session's state. Registry.mu may be taken before a Session.mu, never
// after; no lock is held across a call to the box.
package session
