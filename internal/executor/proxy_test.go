package executor

import (
	"bufio"
	"net/netip"
	"strings"
	"testing"
)

func TestReadTarget(t *testing.T) {
	for _, tc := range []struct {
		head    string
		host    string
		port    int
		forward bool
		wantErr string
	}{
		{head: "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", host: "example.com", port: 443},
		{head: "CONNECT [2001:db8::1]:8443 HTTP/1.1\r\n\r\n", host: "2001:db8::1", port: 8443},
		{head: "CONNECT 10.0.0.1:22 HTTP/1.1\r\n\r\n", host: "10.0.0.1", port: 22},
		{head: "GET http://example.com/a?b=c HTTP/1.1\r\nHost: example.com\r\n\r\n", host: "example.com", port: 80, forward: true},
		{head: "POST http://example.com:8080/x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", host: "example.com", port: 8080, forward: true},
		{head: "GET http://[::1]/ HTTP/1.1\r\n\r\n", host: "::1", port: 80, forward: true},
		{head: "CONNECT example.com HTTP/1.1\r\n\r\n", wantErr: "host:port"},
		{head: "CONNECT example.com:0 HTTP/1.1\r\n\r\n", wantErr: "port"},
		{head: "CONNECT example.com:70000 HTTP/1.1\r\n\r\n", wantErr: "port"},
		{head: "GET /path HTTP/1.1\r\nHost: example.com\r\n\r\n", wantErr: "absolute form"},
		{head: "GET https://example.com/ HTTP/1.1\r\n\r\n", wantErr: "CONNECT"},
		{head: "GET ftp://example.com/ HTTP/1.1\r\n\r\n", wantErr: "CONNECT"},
		{head: "garbage\r\n\r\n", wantErr: "not an HTTP proxy request"},
	} {
		got, err := readTarget(bufio.NewReader(strings.NewReader(tc.head)))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: %+v, %v; want an error with %q", tc.head, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got.host != tc.host || got.port != tc.port || (got.req != nil) != tc.forward {
			t.Errorf("%q: %+v, %v; want %s %d forward %v", tc.head, got, err, tc.host, tc.port, tc.forward)
		}
	}
}

// FuzzReadTarget: no request head panics the parser, and an accepted one names a port in
// range and a host.
func FuzzReadTarget(f *testing.F) {
	for _, s := range []string{"CONNECT example.com:443 HTTP/1.1\r\n\r\n", "GET http://a/ HTTP/1.1\r\n\r\n",
		"CONNECT [::1]:1 HTTP/1.0\r\n\r\n", "GET http://a:99999/ HTTP/1.1\r\n\r\n", "CONNECT :80 HTTP/1.1\r\n\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, head string) {
		got, err := readTarget(bufio.NewReader(strings.NewReader(head)))
		if err != nil {
			return
		}
		if got.host == "" || got.port < 1 || got.port > 65535 {
			t.Fatalf("%q accepted as %+v", head, got)
		}
	})
}

func TestProcAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:1F90":                         "127.0.0.1:8080",
		"00000000000000000000000001000000:0050": "[::1]:80",
		"0000000000000000FFFF00000100007F:0C38": "[::ffff:127.0.0.1]:3128",
	} {
		got, err := procAddr(in)
		if err != nil || got != netip.MustParseAddrPort(want) {
			t.Errorf("procAddr(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
}
