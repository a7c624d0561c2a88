// Package httpapi serves sandpit's REST API over HTTP. What it serves today:
//
//   - POST /v1/executions runs Python code, answering one JSON Result or, with
//     "Accept: application/x-ndjson", a stream of output events ending with the result.
//   - GET /v1/executions and GET /v1/executions/{id}: the ledger, with each run's output
//     files at GET /v1/executions/{id}/files/{name...}.
//   - /v1/agents/{agent}/code...: saved code, its versions, and POST .../run.
//   - /v1/agents/{agent}/jobs...: jobs, their pause, resume, run and history.
//   - /v1/agents/{agent}/memories, facts, documents, graph/nodes, graph/edges, results: the
//     knowledge store that agent.* calls read.
//   - GET, POST /v1/packages and DELETE /v1/packages/{name}: installed dependencies.
//   - POST /v1/setup: the steps of `sandpit setup`, as an NDJSON stream.
//   - POST, GET /v1/keys and POST /v1/keys/revoke: the E2B-compatible API's keys.
//   - GET /v1/limits, GET /healthz, GET /readyz and GET /openapi.json (the OpenAPI 3.1
//     document of all of it).
//
// Groups whose backend is nil (Backend's fields) are not served. Guard (Host and Origin
// checks) and RequireToken (the bearer token) wrap the handler; /mcp and /metrics are served
// beside it by internal/app.
//
// The shapes it writes are the wire types of package apitype, into which wire.go maps the
// domain's types (sandbox results, store rows, jobs): no store or domain struct is written as
// it is. An error's status comes from its class (package errclass) in classify, the one place
// that maps errors to HTTP.
//
// Every answer is JSON (or NDJSON for a stream); every error has the body
//
//	{"error": {"code": "...", "message": "...", "field": "...", "violations": [...]}}
//
// where code is one of invalid_request, invalid_input, too_large, busy, not_ready, internal,
// not_found, gone, conflict, forbidden, unauthorized, unsupported_media_type or method_not_allowed; field (omitted
// when empty) names the request field at fault, and violations (for invalid_input) lists the
// JSON pointer and message of each way an input breaks saved code's input schema. A program
// that fails is not an error: its Result, with its outcome, comes back with 200.
//
// A client asks for a stream with "Accept: application/x-ndjson". The stream's lines are
// {"type":"dependency","dependency":{...}} for each requirement before the run,
// {"type":"stdout","data":"..."} and {"type":"stderr","data":"..."} as the program writes,
// {"type":"log","data":"...","level":"..."} for its agent.log lines,
// {"type":"file","file":{...}} for each output file once the program has ended, then
// one {"type":"result","result":{...}}, or {"type":"error","error":{...}} if the run failed in
// the system after output had been sent. A request refused before any output (invalid, busy,
// not ready) gets the ordinary error status and body instead of a stream.
//
// Memory is bounded before bodies are read: a request that starts a run takes its place (slot
// or queue) first, and every request with a body is admitted by its Content-Length against
// bodies_max_bytes (budget.go); a refused body is read into nothing, never held. Run bodies are
// read once and decoded without a second copy (readRunBody).
//
// The package never logs code, inputs or outputs.
package httpapi
