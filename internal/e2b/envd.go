package e2b

import "net/http"

// envdRoutes is envd (port 49983): /health, /files and the Connect services.
func (s *Server) envdRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	return mux
}

// writeConnectError answers a Connect call that never reached its service.
func writeConnectError(w http.ResponseWriter, status int, msg string) {
	code := "unknown"
	switch status {
	case http.StatusNotFound:
		code = "not_found"
	case http.StatusUnauthorized:
		code = "unauthenticated"
	case http.StatusBadGateway:
		code = "unavailable"
	}
	writeJSON(w, status, map[string]string{"code": code, "message": msg})
}
