// Package apitype holds the JSON shapes of sandpit's REST API: the bodies that requests send,
// the answers they get, the error body, the lines of an NDJSON stream, and the headers and
// media types they use. The JSON field names are the public API (docs/api.md, and the OpenAPI
// document served at GET /openapi.json).
//
// It imports only the standard library, so that the typed client (package client) and any
// other program that talks to a daemon link none of the daemon's storage, scheduling or schema
// code. The CLI reads answers through these types too; it links the engine (and so the store)
// only for the commands that run one in its own process (`sandpit run --local`, `serve`). The daemon's handlers (package httpapi) map the domain's types (sandbox,
// store, jobs, library) into these; nothing here knows how a run happens.
package apitype

// NDJSONContentType is the media type of a streamed answer: one JSON object per line
// (StreamLine for a run, the install of packages, and setup).
const NDJSONContentType = "application/x-ndjson"

// SourceHeader names the client kind of a request ("cli" or "mcp"; anything else, or none,
// records the execution's source as "api").
const SourceHeader = "X-Sandpit-Source"

// Source names where an execution came from (Origin.Source).
type Source string

// The sources of an execution.
const (
	SourceAPI Source = "api" // the REST API
	SourceCLI Source = "cli" // the sandpit command line
	SourceMCP Source = "mcp" // a Model Context Protocol client
	SourceJob Source = "job" // a scheduled job's fire
)

// Page asks for one page of a listing: at most Limit items (0: DefaultLimit; 1 to MaxLimit),
// after Cursor (a listing's NextCursor; "" for the first page). They are the query parameters
// limit and cursor.
type Page struct {
	Limit  int
	Cursor string
}

// The bounds of a listing's limit (items per page).
const (
	DefaultLimit = 50
	MaxLimit     = 500
)
