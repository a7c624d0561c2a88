package executor

import (
	"bufio"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
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

// TestPeerUID finds the owner of a loopback connection's far end with sock_diag, as
// /proc/net/tcp names it, over IPv4 and IPv6, and finds no socket for a closed port.
func TestPeerUID(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			addr := "127.0.0.1:0"
			if network == "tcp6" {
				addr = "[::1]:0"
			}
			ln, err := net.Listen(network, addr)
			if err != nil {
				t.Skipf("no %s loopback: %v", network, err)
			}
			defer ln.Close()
			client, err := net.Dial(network, ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			server, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer server.Close()
			r := server.RemoteAddr().(*net.TCPAddr).AddrPort()
			l := server.LocalAddr().(*net.TCPAddr).AddrPort()
			family := byte(syscall.AF_INET6)
			if network == "tcp4" {
				family = syscall.AF_INET
				r, l = netip.AddrPortFrom(r.Addr().Unmap(), r.Port()), netip.AddrPortFrom(l.Addr().Unmap(), l.Port())
			}
			uid, err := sockDiagUID(r, l, family)
			if err != nil {
				t.Skipf("no sock_diag here: %v", err)
			}
			fromProc, err := procUID(r, l)
			if err != nil {
				t.Fatal(err)
			}
			if uid != os.Getuid() || uid != fromProc {
				t.Errorf("sock_diag says uid %d, /proc/net says %d, this process is %d", uid, fromProc, os.Getuid())
			}
			if got, err := peerUID(server); err != nil || got != uid {
				t.Errorf("peerUID = %d, %v; want %d", got, err, uid)
			}
			closed := netip.AddrPortFrom(r.Addr(), r.Port()+1)
			if _, err := sockDiagUID(closed, l, family); !errors.Is(err, syscall.ENOENT) {
				t.Errorf("a socket that does not exist: %v, want ENOENT", err)
			}
		})
	}
}
