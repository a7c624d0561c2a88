package ports

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strconv"
	"strings"
)

// What the proxy changes of a request and of its answer.

// cookiePrefix starts the names of the daemon's own cookies (the console's, a share's): never
// sent to a box, never set by one.
const cookiePrefix = "sandpit_"

// credentialHeaders carry E2B's routing and the daemon's credentials for sandboxes, whatever
// the form a request came by: they never reach a box.
var credentialHeaders = []string{"E2b-Sandbox-Id", "E2b-Sandbox-Port", "X-Access-Token", "E2b-Traffic-Access-Token", "X-Api-Key"}

// ShareParam is the query parameter of a share link that carries its secret: it never
// reaches a box.
const ShareParam = "sandpit_share"

// sandboxPolicy is the Content-Security-Policy of an answer served under the daemon's own
// origin (the path form): its documents get an origin of their own (no allow-same-origin),
// so their scripts cannot use the console's cookies or call the daemon's API as it.
const sandboxPolicy = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// unsafeResponseHeaders would let a box's server change how browsers treat the daemon's own
// host (HSTS pins it to HTTPS; Clear-Site-Data wipes its cookies and storage; Alt-Svc moves
// it; Service-Worker-Allowed widens a worker's scope).
var unsafeResponseHeaders = []string{"Strict-Transport-Security", "Clear-Site-Data", "Alt-Svc", "Service-Worker-Allowed"}

// rewrite makes the request to the box: to the target's port and path, with the client's
// query, without the daemon's credentials.
func rewrite(pr *httputil.ProxyRequest) {
	x := exchangeOf(pr.In.Context())
	t := x.t
	pr.Out.URL.Scheme, pr.Out.URL.Host = "http", upstream(t.SessionID, t.Port)
	if u, err := url.Parse(t.Path); err == nil && strings.HasPrefix(t.Path, "/") {
		pr.Out.URL.Path, pr.Out.URL.RawPath = u.Path, u.RawPath
	} else {
		pr.Out.URL.Path, pr.Out.URL.RawPath = "/", ""
	}
	pr.Out.Host = t.Host
	if pr.Out.Host == "" {
		pr.Out.Host = "localhost:" + strconv.Itoa(t.Port)
	}
	pr.SetXForwarded()
	if t.Prefix != "" {
		pr.Out.Header.Set("X-Forwarded-Prefix", t.Prefix)
	}
	for _, h := range append(credentialHeaders, t.Strip...) {
		pr.Out.Header.Del(h)
	}
	if q := pr.Out.URL.Query(); q.Has(ShareParam) {
		q.Del(ShareParam)
		pr.Out.URL.RawQuery = q.Encode()
	}
	if cookies := pr.Out.Cookies(); len(cookies) > 0 {
		pr.Out.Header.Del("Cookie")
		var kept []string
		for _, c := range cookies {
			if !strings.HasPrefix(c.Name, cookiePrefix) {
				kept = append(kept, c.Name+"="+c.Value)
			}
		}
		if len(kept) > 0 {
			pr.Out.Header.Set("Cookie", strings.Join(kept, "; "))
		}
	}
}

// modifyResponse keeps the box's answer from reaching beyond its port: no header that changes
// the daemon's host, cookies only for the port's own scope, and under the path form redirects
// kept under its prefix and documents sandboxed.
func modifyResponse(res *http.Response) error {
	x := exchangeOf(res.Request.Context())
	for _, h := range unsafeResponseHeaders {
		res.Header.Del(h)
	}
	if loc := res.Header.Get("Location"); loc != "" {
		// Judged as a browser reads it; one that does not parse is dropped.
		loc = browserLocation(loc)
		u, err := url.Parse(loc)
		switch {
		case err != nil:
			res.Header.Del("Location")
		case u.Host != "" && isDaemonHost(u, x.t.DaemonHosts):
			return &Error{Status: http.StatusBadGateway, Msg: fmt.Sprintf(
				"the server on port %d redirected to the daemon itself (%s): a session's server may not send clients to the daemon's API or console", x.t.Port, loc)}
		default:
			res.Header.Set("Location", loc)
		}
	}
	prefix := x.t.Prefix
	if lines := res.Header.Values("Set-Cookie"); len(lines) > 0 {
		res.Header.Del("Set-Cookie")
		for _, line := range lines {
			if c := scopeCookie(line, prefix); c != "" {
				res.Header.Add("Set-Cookie", c)
			}
		}
	}
	x.status = res.StatusCode // the client gets it (a refusal above is the client's 502)
	if prefix == "" {
		return nil
	}
	if loc := res.Header.Get("Location"); loc != "" {
		res.Header.Set("Location", underPrefix(loc, prefix, x.t.Port, x.t.Path))
	}
	res.Header.Add("Content-Security-Policy", sandboxPolicy)
	return nil
}

// scopeCookie is the Set-Cookie line as the browser may take it: host-only (no Domain), and
// under the path form scoped under prefix; "" drops it (the daemon's own names, a line that
// is not a cookie, or one that claims a whole host: __Host-).
func scopeCookie(line, prefix string) string {
	c, err := http.ParseSetCookie(line)
	if err != nil || strings.HasPrefix(c.Name, cookiePrefix) {
		return ""
	}
	c.Domain = ""
	if prefix != "" {
		if strings.HasPrefix(c.Name, "__Host-") {
			return ""
		}
		p := c.Path
		if !strings.HasPrefix(p, "/") {
			p = "/"
		}
		c.Path = path.Join(prefix, p)
		if strings.HasSuffix(p, "/") && !strings.HasSuffix(c.Path, "/") {
			c.Path += "/"
		}
	}
	return c.String()
}

// browserLocation is loc as a browser reads a redirect's URL (the URL standard): without its
// leading and trailing spaces and controls, its tabs and newlines, and with a backslash before
// its query read as a slash (`/\127.0.0.1/` is "//127.0.0.1/", another host; `/..\..\ui`
// climbs as "/../../ui" does).
func browserLocation(loc string) string {
	loc = strings.TrimFunc(loc, func(r rune) bool { return r <= ' ' })
	loc = strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return -1
		}
		return r
	}, loc)
	if i := strings.IndexAny(loc, "?#"); i >= 0 {
		return strings.ReplaceAll(loc[:i], `\`, "/") + loc[i:]
	}
	return strings.ReplaceAll(loc, `\`, "/")
}

// underPrefix keeps a redirect of the path form under its prefix: a path on the server ("/x")
// and a URL of the server's own loopback name become the prefix's; any other URL is left (a
// redirect elsewhere leaves the port, as a link would).
func underPrefix(loc, prefix string, port int, from string) string {
	u, err := url.Parse(loc)
	if err != nil {
		return prefix + "/"
	}
	if (u.Scheme == "http" || u.Scheme == "https") && u.Host == "" {
		u.Scheme = "" // "http:/v1/…" is a path of the same host to a browser
		if u.Opaque != "" {
			u.Path, u.Opaque = u.Opaque, ""
		}
	}
	switch {
	case u.Scheme == "" && u.Host == "":
		// A path, absolute or relative to the request's: resolved on the server first, where
		// no ".." climbs above its root, and only then put under the prefix.
		base, err := url.Parse(from)
		if err != nil || !strings.HasPrefix(base.Path, "/") {
			base = &url.URL{Path: "/"}
		}
		u = base.ResolveReference(u)
	case (u.Scheme == "http" || u.Scheme == "https") && isLoopbackHost(u.Host, port):
		u.Scheme, u.Host = "", ""
		u = (&url.URL{Path: "/"}).ResolveReference(u)
	default:
		return loc
	}
	// Once more on the decoded path: browsers read "%2e%2e" as "..", url's resolution does not.
	clean := path.Clean("/" + u.Path)
	if strings.HasSuffix(u.Path, "/") && clean != "/" {
		clean += "/"
	}
	u.Scheme, u.Host, u.User = "", "", nil
	u.Path, u.RawPath = prefix+clean, ""
	return u.String()
}

// isDaemonHost says a browser would reach the daemon by u's host: one of the daemon's own
// (host[:port] each) or, on its port, any spelling of loopback (see browserHost; the loopback
// names are one host). A port's own host name under one of the daemon's names is not.
func isDaemonHost(u *url.URL, daemon []string) bool {
	for _, d := range daemon {
		if _, _, own := ParseHost(u.Host, d); own {
			return false
		}
	}
	host, port, _ := netSplit(strings.ToLower(u.Host))
	host = browserHost(host)
	if port == "" {
		port = map[string]string{"https": "443", "wss": "443"}[u.Scheme]
		if port == "" {
			port = "80"
		}
	}
	for _, d := range daemon {
		dh, dp, _ := netSplit(strings.ToLower(d))
		dh = browserHost(dh)
		if dp == "" {
			dp = "80"
		}
		if port == dp && (host == dh || (isLoopbackName(host) && isLoopbackName(dh))) {
			return true
		}
	}
	return false
}

// browserHost is a URL's host as browsers resolve it: without a final dot, and an IPv4
// address in any of the forms the URL standard takes (127.1, 2130706433, 0x7f.1, 0177.0.0.1)
// in its dotted form.
func browserHost(h string) string {
	h = strings.TrimSuffix(h, ".")
	parts := strings.Split(h, ".")
	if len(parts) > 4 {
		return h
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		base := 10
		switch {
		case strings.HasPrefix(p, "0x"):
			p, base = p[2:], 16
			if p == "" {
				p = "0"
			}
		case len(p) > 1 && p[0] == '0':
			p, base = p[1:], 8
		}
		n, err := strconv.ParseUint(p, base, 32)
		if err != nil || (i < len(parts)-1 && n > 255) {
			return h
		}
		nums[i] = n
	}
	last := len(nums) - 1
	if nums[last] >= 1<<(8*(4-last)) {
		return h
	}
	v := nums[last]
	for i, n := range nums[:last] {
		v |= n << (8 * (3 - i))
	}
	return net.IPv4(byte(v>>24), byte(v>>16), byte(v>>8), byte(v)).String()
}

func isLoopbackName(h string) bool {
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && (ip.IsLoopback() || ip.IsUnspecified())
}

func isLoopbackHost(hostport string, port int) bool {
	host, p, err := netSplit(hostport)
	if err != nil || (p != "" && p != strconv.Itoa(port)) {
		return false
	}
	return host == "localhost" || host == "127.0.0.1" || host == "::1" || host == "0.0.0.0"
}

// netSplit splits host[:port], the port "" when absent.
func netSplit(hostport string) (string, string, error) {
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 && !strings.HasSuffix(hostport, "]") {
		host := strings.Trim(hostport[:i], "[]")
		return host, hostport[i+1:], nil
	}
	return strings.Trim(hostport, "[]"), "", nil
}
