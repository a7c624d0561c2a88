// Package e2b serves the API of E2B (https://e2b.dev) over sandpit's sessions, so that the E2B
// SDKs (e2b and e2b-code-interpreter, Python and JavaScript) work against a sandpit daemon
// with three environment variables and no code change:
//
//	E2B_API_URL=http://127.0.0.1:8765/e2b  E2B_SANDBOX_URL=http://127.0.0.1:8765/e2b  E2B_API_KEY=e2b_…
//
// The daemon mounts Server under the path prefix /e2b of its one listener. A request that
// carries the E2b-Sandbox-Id header is sandbox traffic and goes by E2b-Sandbox-Port: 49983 to
// envd (GET /health, GET and POST /files, the Connect services filesystem.Filesystem and
// process.Process) and 49999 to the code interpreter (POST /execute, /contexts). Any other
// request is the control plane of E2B's spec/openapi.yml (POST /sandboxes, GET /v2/sandboxes …),
// authenticated by X-API-Key, but for GET and POST /files with a signature: the SDKs' signed
// file URLs, which name no sandbox, go to the sandbox whose token signed them (files.go). The
// daemon mounts Server at /files of its root too, where the SDKs compose those URLs. The
// template builder's routes (POST /v3/templates and after, templates.go) build sandpit
// templates of the key's agent through Templates.
//
// A sandbox is a session of the engine (its own container, interpreter and workspace); its ID
// is the session's. Keys belong to agents (store.CreateAPIKey): a key sees only its agent's
// sandboxes, and any other sandbox answers 404 as if it did not exist. Each sandbox has its own
// access token, returned at creation as envdAccessToken and trafficAccessToken; every envd and
// code-interpreter request must carry it as X-Access-Token or E2B-Traffic-Access-Token (the
// SDKs send the second on /contexts), or on /files a signature made with it, else 401.
//
// Errors of the control plane and the code interpreter are E2B's {code, message} with the
// HTTP status as code; envd's Connect calls answer Connect errors. What E2B offers and sandpit
// does not (template tags, volumes, snapshots, secrets, teams …) answers 501 naming the
// feature. The wire shapes come from E2B's published specs (spec/openapi.yml,
// spec/envd/envd.yaml and the protos in proto/) and the code interpreter's documented
// NDJSON stream; none of E2B's code is used.
package e2b
