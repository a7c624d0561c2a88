package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

// Guard protects an API that has no authentication from web pages: it answers 403 to a
// request whose Host header names a host other than localhost, a loopback address or one of
// allowedHosts (a DNS-rebinding attack arrives with the attacker's name in Host), and to a
// request whose Origin header names such a host (a cross-site request from a page in the
// user's browser). allowedHosts holds host names without ports; "*" allows every host.
func Guard(next http.Handler, allowedHosts []string) http.Handler {
	if slices.Contains(allowedHosts, "*") {
		return next
	}
	allowed := func(host string) bool {
		host = strings.ToLower(strings.TrimSuffix(host, "."))
		if host == "localhost" || strings.HasSuffix(host, ".localhost") {
			return true
		}
		if ip := net.ParseIP(strings.Trim(host, "[]")); ip != nil && ip.IsLoopback() {
			return true
		}
		return slices.ContainsFunc(allowedHosts, func(h string) bool { return strings.EqualFold(h, host) })
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if host := hostOnly(r.Host); !allowed(host) {
			writeError(w, &requestError{status: http.StatusForbidden, code: apitype.CodeForbidden, msg: fmt.Sprintf(
				"requests addressed to host %q are refused: sandpit answers localhost and the names in allowed_hosts "+
					"(SANDPIT_ALLOWED_HOSTS), which protects it from DNS rebinding", host)})
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" {
			u, err := url.Parse(origin)
			if err != nil || u.Host == "" || !allowed(u.Hostname()) {
				writeError(w, &requestError{status: http.StatusForbidden, code: apitype.CodeForbidden, msg: fmt.Sprintf(
					"requests from web pages at origin %q are refused: a page must not run code through sandpit; "+
						"add its host to allowed_hosts (SANDPIT_ALLOWED_HOSTS) if it should", origin)})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// hostOnly strips the port from a Host header value.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

// RequireToken answers 401 to every request but GET /healthz that does not carry
// "Authorization: Bearer <token>" (RFC 6750). An empty token requires nothing.
func RequireToken(next http.Handler, token string) http.Handler {
	if token == "" {
		return next
	}
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		scheme, given, _ := strings.Cut(auth, " ")
		// Digests of equal length: the comparison's time says nothing of the token's length.
		got := sha256.Sum256([]byte(strings.TrimSpace(given)))
		if r.URL.Path == "/healthz" || (strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare(got[:], want[:]) == 1) {
			next.ServeHTTP(w, r)
			return
		}
		got2 := []byte(auth)
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandpit"`)
		msg := "this sandpit daemon requires a bearer token: send Authorization: Bearer <token> (the CLI reads SANDPIT_TOKEN)"
		if len(got2) > 0 {
			msg = "the bearer token is wrong: send the daemon's token (its token setting, SANDPIT_TOKEN)"
		}
		writeError(w, &requestError{status: http.StatusUnauthorized, code: apitype.CodeUnauthorized, msg: msg})
	})
}

// Unauthorized is an error answered 401 with msg (say what credentials to send).
func Unauthorized(msg string) error {
	return &requestError{status: http.StatusUnauthorized, code: apitype.CodeUnauthorized, msg: msg}
}
