// Command sandpit is the sandpit daemon and command line (internal/cli): `sandpit serve` runs
// the daemon; `sandpit run` executes code through it (or, when none answers, through an engine
// started in the process); `code`, `job`, `exec`, `kb` and `packages` manage what the daemon
// keeps; `mcp` serves MCP over stdio; `setup`, `doctor`, `image`, `sandbox` and `bench` look
// after the machine. internal/app puts the daemon together.
//
// # The path of one execution
//
// A POST /v1/executions crosses, in order (each step's file, then the function to read):
//
//	internal/app/app.go                 Serve: the HTTP server, its Host/Origin guard and token
//	internal/httpapi/execute.go         api.execute: strict decoding (decode.go), then one JSON
//	                                    answer or an NDJSON stream of events
//	internal/engine/service.go          Service.Execute: validation, a slot (pool.go), the
//	                                    ledger, dependencies, the run's deadline, the outcome
//	internal/runtime/docker/runtime.go  Runtime.Run: the slot's container and its control line
//	internal/control/line.go            Line.Run: the run as frames (internal/protocol) over
//	                                    the docker exec's stdin and stdout, events as they come
//	internal/executor/executor.go       Executor.start, inside the box (cmd/sandpit-executor):
//	                                    the run's goroutine, the result, then the slot's cleanup
//	internal/executor/run.go            run.execute: the program (launch.go: a fork of the fork
//	                                    server, forkserver.go, or a cold python3), its streams
//	                                    (capture.go), its deadline, its outcome (run.classify)
//	internal/bootstrap/bootstrap.py     in the run's process: rlimits, INPUT, the code as
//	                                    __main__, OUTPUT and agent.* calls over descriptor 3
//
// The other ways in reach the same Service.Execute: MCP tools (internal/mcpserver), and
// `sandpit run` or `sandpit mcp` with no daemon, call the same REST handler in process
// (client.InProcess over app.Core.Handler); jobs (internal/jobs) and saved code
// (internal/library) call the Service. The answer's shapes are internal/apitype's; an error's
// HTTP status and the CLI's exit code both come from its class (internal/errclass).
// docs/how-it-works.md describes the design; docs/api.md the API.
package main
