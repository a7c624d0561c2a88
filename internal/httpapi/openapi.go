package httpapi

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the OpenAPI 3.1 document of the API, served at GET /openapi.json. A test checks
// that it documents every route the server registers, and nothing else.
//
//go:embed openapi.json
var OpenAPI []byte

func (a *api) openapi(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(OpenAPI)
}
