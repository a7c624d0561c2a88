package ports

import (
	"net/url"
	"testing"
)

// A redirect is the daemon's when a browser would reach the daemon by it: any spelling of a
// loopback address (127.1, 2130706433, 0x7f.1, 0), a final dot, any name under localhost; a
// port's own host name under one of the daemon's names is not (trial, 4 December 2026: all of
// these but the dotted address passed to the browser).
func TestIsDaemonHost(t *testing.T) {
	daemon := []string{"localhost:8765", "127.0.0.1:8765"}
	for loc, want := range map[string]bool{
		"http://127.0.0.1:8765/v1/limits":        true,
		"http://LOCALHOST:8765/ui/":              true,
		"http://127.1:8765/v1/limits":            true,
		"http://2130706433:8765/ui/":             true,
		"http://0x7f000001:8765/ui/":             true,
		"http://0x7f.1:8765/ui/":                 true,
		"http://0177.0.0.1:8765/ui/":             true,
		"http://0:8765/ui/":                      true,
		"http://localhost.:8765/ui/":             true,
		"http://foo.localhost:8765/ui/":          true,
		"http://[::ffff:127.0.0.1]:8765/ui/":     true,
		"http://[::1]:8765/ui/":                  true,
		"//localhost:8765/ui/":                   true,
		"http://8001-se_abc.localhost:8765/":     false, // another port's own host name
		"http://127.1:8000/":                     false, // another port
		"http://localhost/":                      false,
		"https://example.com/":                   false,
		"http://10.0.0.1:8765/":                  false,
		"http://256.0.0.1:8765/":                 false,
		"http://1.2.3.4.5:8765/":                 false,
		"http://example.localhost.evil.com:8765": false,
	} {
		u, err := url.Parse(loc)
		if err != nil {
			t.Fatal(err)
		}
		if got := isDaemonHost(u, daemon); got != want {
			t.Errorf("isDaemonHost(%s) = %v, want %v", loc, got, want)
		}
	}
}
