package httpapi

import (
	"net/http"
	"slices"
)

// Routes returns the patterns ("METHOD /path/{param}") a handler from NewHandler serves, for
// the tests of package httpapi_test (the OpenAPI document must describe every one).
func Routes(h http.Handler) []string {
	if a, ok := h.(*api); ok {
		return slices.Clone(a.routes)
	}
	return nil
}
