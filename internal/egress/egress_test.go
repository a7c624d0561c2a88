package egress

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// serveTCP listens on a loopback port until the test ends, serving each connection with
// handle (which need not close it).
func serveTCP(t *testing.T, handle func(net.Conn)) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln
}

// fakeResolver answers from a map; unknown names fail.
type fakeResolver map[string][]string

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	addrs, ok := f[host]
	if !ok {
		return nil, fmt.Errorf("no such host %s", host)
	}
	var out []netip.Addr
	for _, a := range addrs {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		special bool
		want    string
	}{
		{"8.8.8.8", false, ""},
		{"1.1.1.1", false, ""},
		{"0.0.0.0", true, "this network"},
		{"127.0.0.1", true, "loopback"},
		{"127.255.255.254", true, "loopback"},
		{"10.1.2.3", true, "private"},
		{"172.16.0.1", true, "private"},
		{"172.31.255.255", true, "private"},
		{"172.32.0.1", false, ""},
		{"192.168.1.1", true, "private"},
		{"100.64.0.1", true, "carrier-grade"},
		{"100.127.255.255", true, "carrier-grade"},
		{"100.128.0.1", false, ""},
		{"169.254.169.254", true, "metadata"},
		{"169.254.1.1", true, "link-local"},
		{"192.0.0.1", true, "IETF"},
		{"198.18.0.1", true, "benchmarking"},
		{"224.0.0.1", true, "multicast"},
		{"255.255.255.255", true, "broadcast"},
		{"240.0.0.1", true, "reserved"},
		{"::", true, "unspecified"},
		{"::1", true, "loopback"},
		{"::127.0.0.1", true, "IPv4-compatible"},
		{"fc00::1", true, "unique local"},
		{"fd12:3456::1", true, "unique local"},
		{"fe80::1", true, "link-local"},
		{"febf::1", true, "link-local"},
		{"ff02::1", true, "multicast"},
		{"2001:db8::1", true, "documentation"},
		{"2001::1", true, "IETF"},
		{"2002:a00:1::1", true, "6to4"},
		{"2606:4700:4700::1111", false, ""},
		{"64:ff9b::808:808", false, ""},                 // NAT64 of 8.8.8.8
		{"64:ff9b::a00:1", true, "NAT64"},               // NAT64 of 10.0.0.1
		{"64:ff9b::7f00:1", true, "loopback"},           // NAT64 of 127.0.0.1
		{"64:ff9b::a9fe:a9fe", true, "metadata"},        // NAT64 of 169.254.169.254
		{"64:ff9b:1::808:808", true, "local-use NAT64"}, // local-use prefix
		{"4000::1", true, "outside global unicast"},
	} {
		a := netip.MustParseAddr(tc.addr).Unmap()
		_, name, special := classify(a)
		if special != tc.special || !strings.Contains(name, tc.want) {
			t.Errorf("classify(%s) = %q, %v; want special %v naming %q", tc.addr, name, special, tc.special, tc.want)
		}
	}
}

func TestParseRule(t *testing.T) {
	for _, tc := range []struct {
		in      string
		host    string
		wild    bool
		prefix  string
		port    int
		wantErr string
	}{
		{in: "example.com", host: "example.com"},
		{in: "Example.COM.", host: "example.com"},
		{in: "example.com:443", host: "example.com", port: 443},
		{in: "*.example.com", host: "example.com", wild: true},
		{in: "*.example.com:8443", host: "example.com", wild: true, port: 8443},
		{in: "10.0.0.0/8", prefix: "10.0.0.0/8"},
		{in: "10.1.2.3/8", prefix: "10.0.0.0/8"},
		{in: "::ffff:10.0.0.0/104", prefix: "10.0.0.0/8"},
		{in: "203.0.113.7", prefix: "203.0.113.7/32"},
		{in: "203.0.113.7:80", prefix: "203.0.113.7/32", port: 80},
		{in: "[2001:db8::1]:443", prefix: "2001:db8::1/128", port: 443},
		{in: "2001:db8::/32", prefix: "2001:db8::/32"},
		{in: "::ffff:127.0.0.1", prefix: "127.0.0.1/32"},
		{in: "", wantErr: "is empty"},
		{in: "*.com", wantErr: "top-level"},
		{in: "*.10.0.0.1", wantErr: "wildcard before an address"},
		{in: "example.com:0", wantErr: "port"},
		{in: "example.com:99999", wantErr: "port"},
		{in: "example.com:http", wantErr: "port"},
		{in: "bücher.de", wantErr: "IDNA"},
		{in: "xn--bcher-kva.de", host: "xn--bcher-kva.de"},
		{in: "a..b", wantErr: "empty label"},
		{in: "ex ample.com", wantErr: "only letters"},
		{in: "10.0.0.0/33", wantErr: "CIDR"},
		{in: "fe80::1%eth0/64", wantErr: "CIDR"},
		{in: "[::1]", wantErr: "brackets"},
		{in: "*.*.example.com", wantErr: "only letters"},
		{in: strings.Repeat("a", 64) + ".com", wantErr: "63"},
	} {
		r, err := ParseRule(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseRule(%q) = %+v, %v; want an error with %q", tc.in, r, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseRule(%q): %v", tc.in, err)
			continue
		}
		prefix := ""
		if r.Prefix.IsValid() {
			prefix = r.Prefix.String()
		}
		if r.Host != tc.host || r.Wildcard != tc.wild || prefix != tc.prefix || r.Port != tc.port {
			t.Errorf("ParseRule(%q) = %+v; want host %q wildcard %v prefix %q port %d", tc.in, r, tc.host, tc.wild, tc.prefix, tc.port)
		}
	}
}

func mustPolicy(t *testing.T, setting string, entries ...string) Policy {
	t.Helper()
	p, err := ParsePolicy(setting, entries)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheck(t *testing.T) {
	res := fakeResolver{
		"example.com":           {"93.184.215.14"},
		"api.example.com":       {"93.184.215.15"},
		"deep.api.example.com":  {"93.184.215.16"},
		"evil-example.com":      {"6.6.6.6"},
		"rebind.example.com":    {"127.0.0.1"},
		"meta.example.com":      {"169.254.169.254"},
		"mixed.example.com":     {"10.0.0.5", "93.184.215.17"},
		"mapped.example.com":    {"::ffff:127.0.0.1"},
		"nat64.example.com":     {"64:ff9b::a00:1"},
		"v6.example.com":        {"2606:4700::1"},
		"ula.example.com":       {"fd00::1"},
		"internal.corp":         {"10.1.2.3"},
		"gw.test":               {"172.17.0.1"},
		"zero.example.com":      {"0.0.0.0"},
		"unspec6.example.com":   {"::"},
		"linklocal.example.com": {"fe80::1"},
		"cgn.example.com":       {"100.64.1.1"},
		"index.test":            {"172.17.0.1"},
	}
	conf := mustPolicy(t, "network_allow in the configuration",
		"example.com", "*.example.com", "ports.test:8443", "internal.corp", "gw.test", "10.1.2.0/24", "172.17.0.1:8080", "[2001:4860::8888]:443", "8.8.8.8",
		"0.0.0.0/0")
	for _, tc := range []struct {
		host    string
		port    int
		allow   bool
		addrs   string
		wantWhy string
	}{
		{"example.com", 443, true, "93.184.215.14", ""},
		{"EXAMPLE.com.", 443, true, "93.184.215.14", ""},
		{"api.example.com", 80, true, "93.184.215.15", ""},
		{"deep.api.example.com", 80, true, "93.184.215.16", ""},
		// evil-example.com is not under example.com, and a CIDR does not name a host: it is not
		// even resolved.
		{"evil-example.com", 80, false, "", "no entry"},
		{"rebind.example.com", 443, false, "", "loopback"},
		{"meta.example.com", 80, false, "", "metadata"},
		{"mixed.example.com", 80, true, "93.184.215.17", ""},
		{"mapped.example.com", 80, false, "", "loopback"},
		{"nat64.example.com", 80, false, "", "NAT64"},
		{"v6.example.com", 80, true, "2606:4700::1", ""},
		{"ula.example.com", 80, false, "", "unique local"},
		{"zero.example.com", 80, false, "", "this network"},
		{"unspec6.example.com", 80, false, "", "unspecified"},
		{"linklocal.example.com", 80, false, "", "link-local"},
		{"cgn.example.com", 80, false, "", "carrier-grade"},
		{"internal.corp", 80, true, "10.1.2.3", ""}, // private, named by 10.1.2.0/24
		{"gw.test", 8080, true, "172.17.0.1", ""},
		{"gw.test", 8081, false, "", "private"},
		{"127.0.0.1", 80, false, "", "loopback"},
		{"::ffff:127.0.0.1", 80, false, "", "loopback"},
		{"[::1]", 80, false, "", "loopback"},
		{"169.254.169.254", 80, false, "", "metadata"},
		{"10.1.2.99", 22, true, "10.1.2.99", ""},
		{"10.1.3.1", 22, false, "", "private"},
		{"[::ffff:10.1.2.7]", 22, true, "10.1.2.7", ""},
		{"172.17.0.1", 8080, true, "172.17.0.1", ""},
		{"2001:4860::8888", 443, true, "2001:4860::8888", ""},
		{"2001:4860::8888", 80, true, "2001:4860::8888", ""}, // not in 0.0.0.0/0... see below
		{"8.8.8.8", 53, true, "8.8.8.8", ""},
		{"nosuch.example.com", 80, false, "", "did not resolve"},
		{"example.com", 0, false, "", "port"},
		{"fe80::1%eth0", 80, false, "", "zone"},
		{"bad host", 80, false, "", "only letters"},
		// Not "add \"localhost\"": it would resolve to loopback, which no name opens.
		{"localhost", 18911, false, "", "the sandbox's own loopback is reached directly"},
		{"api.localhost", 80, false, "", "the sandbox's own loopback is reached directly"},
	} {
		if tc.host == "2001:4860::8888" && tc.port == 80 {
			tc.allow, tc.addrs, tc.wantWhy = false, "", "no entry"
		}
		g := NewGate([]Policy{conf}, DefaultLimits(), res, nil)
		d, err := g.Check(context.Background(), tc.host, tc.port)
		if !tc.allow {
			var r *Refusal
			if !errors.As(err, &r) || !strings.Contains(err.Error(), tc.wantWhy) {
				t.Errorf("Check(%s, %d) = %+v, %v; want a refusal naming %q", tc.host, tc.port, d, err, tc.wantWhy)
			}
			continue
		}
		if err != nil {
			t.Errorf("Check(%s, %d): %v", tc.host, tc.port, err)
			continue
		}
		var got []string
		for _, a := range d.Addrs {
			got = append(got, a.String())
		}
		if strings.Join(got, ",") != tc.addrs {
			t.Errorf("Check(%s, %d) dials %v; want %s", tc.host, tc.port, got, tc.addrs)
		}
	}
}

func TestWildcardDoesNotMatchApexOrLookalike(t *testing.T) {
	res := fakeResolver{"example.com": {"93.184.215.14"}, "evil-example.com": {"6.6.6.6"}, "a.example.com": {"93.184.215.15"},
		"example.com.evil.net": {"6.6.6.7"}}
	p := mustPolicy(t, "network_allow in the configuration", "*.example.com")
	g := NewGate([]Policy{p}, DefaultLimits(), res, nil)
	for host, allow := range map[string]bool{"example.com": false, "evil-example.com": false, "a.example.com": true,
		"A.Example.Com.": true, "example.com.evil.net": false} {
		_, err := g.Check(context.Background(), host, 443)
		if (err == nil) != allow {
			t.Errorf("*.example.com and %s: err %v, want allowed %v", host, err, allow)
		}
		if err != nil && !strings.Contains(err.Error(), "network_allow in the configuration") {
			t.Errorf("refusal %q does not name the setting", err)
		}
	}
}

func TestSpecialNeedsExplicitCIDR(t *testing.T) {
	res := fakeResolver{"local.test": {"127.0.0.1"}}
	for _, tc := range []struct {
		rules []string
		allow bool
	}{
		{[]string{"local.test"}, false},
		{[]string{"local.test", "0.0.0.0/0"}, false},
		{[]string{"local.test", "127.0.0.0/8"}, true},
		{[]string{"local.test", "127.0.0.1"}, true},
		{[]string{"local.test", "127.0.0.1:80"}, false}, // another port
		{[]string{"127.0.0.1/32"}, false},               // a CIDR does not name a host
	} {
		g := NewGate([]Policy{mustPolicy(t, "network_allow in the configuration", tc.rules...)}, DefaultLimits(), res, nil)
		_, err := g.Check(context.Background(), "local.test", 443)
		if (err == nil) != tc.allow {
			t.Errorf("rules %v: err %v, want allowed %v", tc.rules, err, tc.allow)
		}
	}
	// A trusted rule (the package index) reaches what its name resolves to.
	p := mustPolicy(t, "the package index (installs only)", "local.test:443")
	p.Rules[0].Trusted = true
	if _, err := NewGate([]Policy{p}, DefaultLimits(), res, nil).Check(context.Background(), "local.test", 443); err != nil {
		t.Errorf("a trusted rule: %v", err)
	}
}

func TestNarrow(t *testing.T) {
	conf := mustPolicy(t, "network_allow in the configuration", "*.example.com", "api.test:443", "10.0.0.0/8", "pypi.org")
	for _, tc := range []struct {
		entry string
		ok    bool
	}{
		{"a.example.com", true},
		{"*.a.example.com", true},
		{"a.example.com:443", true},
		{"example.com", false},
		{"*.example.com", true},
		{"api.test:443", true},
		{"api.test", false},
		{"api.test:80", false},
		{"10.1.0.0/16", true},
		{"10.0.0.0/8", true},
		{"0.0.0.0/0", false},
		{"11.0.0.1", false},
		{"pypi.org:443", true},
		{"files.pythonhosted.org", false},
	} {
		_, err := conf.Narrow([]string{tc.entry})
		if (err == nil) != tc.ok {
			t.Errorf("Narrow(%q): %v, want ok %v", tc.entry, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "network_allow") {
			t.Errorf("Narrow(%q): %v does not name network_allow", tc.entry, err)
		}
	}
	// Both policies apply: the request's narrows the configuration's.
	res := fakeResolver{"a.example.com": {"93.184.215.15"}, "b.example.com": {"93.184.215.16"}}
	req, err := conf.Narrow([]string{"a.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	g := NewGate([]Policy{conf, req}, DefaultLimits(), res, nil)
	if _, err := g.Check(context.Background(), "a.example.com", 443); err != nil {
		t.Errorf("a.example.com: %v", err)
	}
	if _, err := g.Check(context.Background(), "b.example.com", 443); err == nil || !strings.Contains(err.Error(), "in the request") {
		t.Errorf("b.example.com: %v, want a refusal naming the request's network_allow", err)
	}
}

// TestGateDialAndCaps dials a loopback listener (named by an explicit CIDR) and checks the
// records, the byte cap and the connection cap.
func TestGateDialAndCaps(t *testing.T) {
	ln := serveTCP(t, func(c net.Conn) {
		_, _ = c.Write([]byte(strings.Repeat("x", 1000)))
		_, _ = io.Copy(io.Discard, c)
	})
	port := ln.Addr().(*net.TCPAddr).Port
	lim := DefaultLimits()
	lim.MaxBytesReceived, lim.MaxConnections = 600, 2
	res := fakeResolver{"host.test": {"127.0.0.1"}, "rebind.test": {"127.0.0.1"}}
	p := mustPolicy(t, "network_allow in the configuration", "host.test", "127.0.0.1/32", "*.other.test")
	g := NewGate([]Policy{p}, lim, res, nil)
	c, err := g.Dial(context.Background(), "host.test", port)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if !errors.Is(err, ErrByteCap) || len(got) != 600 {
		t.Errorf("read %d bytes, %v; want 600 and ErrByteCap", len(got), err)
	}
	c.Close()
	if _, err := g.Dial(context.Background(), "x.nowhere.test", port); err == nil {
		t.Error("a refused host was dialed")
	}
	if _, err := g.Dial(context.Background(), "host.test", port); err == nil || !strings.Contains(err.Error(), "egress_max_connections") {
		t.Errorf("third connection: %v, want the connection cap", err)
	}
	recs, dropped := g.Connections()
	if len(recs) != 3 || dropped != 0 {
		t.Fatalf("records %+v, dropped %d", recs, dropped)
	}
	if r := recs[0]; !r.Allowed || r.Address != "127.0.0.1" || r.BytesReceived != 600 || !strings.Contains(r.Ended, "egress_max_bytes_received") || r.Rule != "host.test" {
		t.Errorf("first record %+v", r)
	}
	if r := recs[1]; r.Allowed || r.Reason == "" {
		t.Errorf("second record %+v", r)
	}
}

func TestGateCloseEndsConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	g := NewGate([]Policy{mustPolicy(t, "network_allow in the configuration", "127.0.0.1")}, DefaultLimits(), nil, nil)
	c, err := g.Dial(context.Background(), "127.0.0.1", ln.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := c.Read(make([]byte, 1)); done <- err }()
	g.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a read on a closed gate's connection succeeded")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not end the open connection")
	}
	recs, _ := g.Connections()
	if len(recs) != 1 || recs[0].Ended != "the run ended" {
		t.Errorf("records %+v", recs)
	}
	if _, err := g.Dial(context.Background(), "127.0.0.1", 1); err == nil || !strings.Contains(err.Error(), "ended") {
		t.Errorf("dial after Close: %v", err)
	}
}

// A connection that reaches its time cap ends with ErrTimeCap, and its record says so.
func TestGateTimeCap(t *testing.T) {
	port := silentServer(t)
	lim := DefaultLimits()
	lim.ConnectionTimeout = 200 * time.Millisecond
	g := NewGate([]Policy{mustPolicy(t, "network_allow in the configuration", "127.0.0.1")}, lim, nil, nil)
	c, err := g.Dial(context.Background(), "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 10)); !errors.Is(err, ErrTimeCap) {
		t.Fatalf("read past the time cap: %v, want ErrTimeCap", err)
	}
	recs, _ := g.Connections()
	if len(recs) != 1 || !strings.Contains(recs[0].Ended, "egress_connection_timeout") {
		t.Errorf("records %+v", recs)
	}
}

// A connection no one reads or writes ends at its time cap too, with what its Wrapper gave
// the program: a bound host's connection whose program kept quiet was held until the run
// ended (its injector reads the host only to answer a request, so the deadline never fired;
// red team, 5 December).
func TestGateTimeCapEndsAQuietConnection(t *testing.T) {
	port := silentServer(t)
	lim := DefaultLimits()
	lim.ConnectionTimeout = 200 * time.Millisecond
	g := NewGate([]Policy{mustPolicy(t, "network_allow in the configuration", "127.0.0.1")}, lim, nil, nil)
	g.SetWrapper(&pipeWrapper{})
	prog, err := g.DialEgress(context.Background(), "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs, _ := g.Connections()
		if len(recs) == 1 {
			if !strings.Contains(recs[0].Ended, "egress_connection_timeout_ms") {
				t.Errorf("record %+v, want it ended at its time cap", recs[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a quiet connection was still open 10 s past its 200 ms time cap")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := prog.Read(make([]byte, 1)); err == nil {
		t.Error("the program's side of the wrapped connection is still open")
	}
}

// silentServer returns the port of a loopback server that reads its one connection and never
// answers.
func silentServer(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			_, _ = io.Copy(io.Discard, c)
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// pipeWrapper gives the program one end of a pipe, as the secrets' injector does.
type pipeWrapper struct{}

func (*pipeWrapper) Wrap(_ context.Context, c net.Conn, _ string) net.Conn {
	prog, ours := net.Pipe()
	_ = ours // held open: nothing answers the program, as a quiet exchange
	return prog
}

// TestDaemonAPIIsNeverOpened: the daemon's own listen address is refused whatever
// network_allow says (a trial followed the refusal's hint, "127.0.0.1/32", and the program
// then read another agent's records through the daemon's API), by address and by a name
// resolving to it, and on every local address when the daemon listens on a wildcard.
func TestDaemonAPIIsNeverOpened(t *testing.T) {
	res := fakeResolver{"vm": {"127.0.0.1"}, "lan.test": {"192.0.2.7"}}
	open := []string{"127.0.0.0/8", "vm", "lan.test", "0.0.0.0/0", "0.0.0.0/8", "::/128", "192.0.2.0/24"}
	local := func() ([]net.Addr, error) {
		return []net.Addr{&net.IPNet{IP: net.ParseIP("192.0.2.7"), Mask: net.CIDRMask(24, 32)}}, nil
	}
	for _, tc := range []struct {
		listen string
		host   string
		port   int
		allow  bool
	}{
		{"127.0.0.1:8765", "127.0.0.1", 8765, false},
		{"127.0.0.1:8765", "127.0.0.2", 8765, false}, // loopback is loopback
		{"127.0.0.1:8765", "::ffff:127.0.0.1", 8765, false},
		{"127.0.0.1:8765", "vm", 8765, false},
		{"127.0.0.1:8765", "0.0.0.0", 8765, false}, // the unspecified address dials this host
		{"127.0.0.1:8765", "::", 8765, false},
		{"127.0.0.1:8765", "::ffff:0.0.0.0", 8765, false},
		{"192.0.2.7:8765", "0.0.0.0", 8765, false},
		{"127.0.0.1:8765", "127.0.0.1", 8766, true},
		{"127.0.0.1:8765", "192.0.2.7", 8765, true}, // not where it listens
		{"0.0.0.0:8765", "192.0.2.7", 8765, false},  // a local address
		{"0.0.0.0:8765", "lan.test", 8765, false},
		{"0.0.0.0:8765", "192.0.2.8", 8765, true}, // another host
		{"localhost:8765", "127.0.0.1", 8765, false},
	} {
		r := ReserveListen(tc.listen)
		r.localAddrs = local
		a, err := New(Config{Allow: open, Limits: DefaultLimits(), Resolver: res, Reserved: r})
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.ForRun(nil).(*Gate).Check(context.Background(), tc.host, tc.port)
		if (err == nil) != tc.allow {
			t.Errorf("listen %s, %s:%d: err %v, want allowed %v", tc.listen, tc.host, tc.port, err, tc.allow)
		}
		if err != nil && !strings.Contains(err.Error(), "sandpit's own API") {
			t.Errorf("listen %s, %s:%d: the refusal does not say why: %v", tc.listen, tc.host, tc.port, err)
		}
	}
}

// TestRefusalSuggestsTheNarrowestEntry: the hint names the address with its port, not a
// block that would open every port of it.
func TestRefusalSuggestsTheNarrowestEntry(t *testing.T) {
	res := fakeResolver{"vm": {"127.0.0.1"}}
	g := NewGate([]Policy{mustPolicy(t, "network_allow in the configuration", "vm", "203.0.113.9:80")}, DefaultLimits(), res, nil)
	for host, want := range map[string]string{"vm": `"127.0.0.1:18711"`, "127.0.0.1": `"127.0.0.1:18711"`, "203.0.113.9": `"203.0.113.9:18711"`} {
		_, err := g.Check(context.Background(), host, 18711)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "/32") {
			t.Errorf("%s: %v, want a hint of %s", host, err, want)
		}
		// The hint works.
		g2 := NewGate([]Policy{mustPolicy(t, "network_allow in the configuration", "vm", strings.Trim(want, `"`))}, DefaultLimits(), res, nil)
		if _, err := g2.Check(context.Background(), host, 18711); err != nil {
			t.Errorf("%s with the hint's entry: %v", host, err)
		}
	}
}

// TestDaemonEndpointsAreNeverOpened (H41): a broad allowed CIDR opened the daemon's Docker
// engine (docker_host) and its PostgreSQL server (database_url) to runs; now every endpoint
// the daemon uses is refused whatever network_allow says, by address, by a name resolving to
// it, on every local address when the endpoint is on this host, and at its port only.
func TestDaemonEndpointsAreNeverOpened(t *testing.T) {
	res := fakeResolver{"db.test": {"192.0.2.61"}, "lan.test": {"192.0.2.7"}}
	open := []string{"0.0.0.0/0", "::/0", "192.0.2.0/24", "db.test", "lan.test"}
	local := func() ([]net.Addr, error) {
		return []net.Addr{&net.IPNet{IP: net.ParseIP("192.0.2.7"), Mask: net.CIDRMask(24, 32)}}, nil
	}
	for _, tc := range []struct {
		docker, database string
		host             string
		port             int
		allow            bool
		what             string
	}{
		{"tcp://192.0.2.50:2375", "", "192.0.2.50", 2375, false, "Docker engine"},
		{"tcp://192.0.2.50:2375", "", "::ffff:192.0.2.50", 2375, false, "Docker engine"},
		{"tcp://192.0.2.50:2375", "", "192.0.2.50", 2376, true, ""},
		{"tcp://192.0.2.50", "", "192.0.2.50", 2375, false, "Docker engine"}, // the default port
		{"https://192.0.2.50", "", "192.0.2.50", 2376, false, "Docker engine"},
		{"ssh://me@192.0.2.50", "", "192.0.2.50", 22, false, "Docker engine"},
		{"unix:///var/run/docker.sock", "", "192.0.2.50", 2375, true, ""},
		{"tcp://127.0.0.1:2375", "", "lan.test", 2375, false, "Docker engine"}, // on this host: every local address
		{"tcp://127.0.0.1:2375", "", "0.0.0.0", 2375, false, "Docker engine"},
		{"tcp://127.0.0.1:2375", "", "192.0.2.8", 2375, true, ""},
		{"", "postgres://u:p@db.test:5433/x", "192.0.2.61", 5433, false, "database"},
		{"", "postgres://u:p@db.test:5433/x", "db.test", 5433, false, "database"},
		{"", "postgres://u:p@db.test:5433,192.0.2.62/x", "192.0.2.62", 5432, false, "database"},
		{"", "postgres://u:p@127.0.0.1:5432/x", "192.0.2.7", 5432, false, "database"},
		{"", "postgres://u:p@nowhere.test:5432/x", "192.0.2.99", 5432, false, "did not resolve"},
		{"", "postgres://u:p@nowhere.test:5432/x", "192.0.2.99", 5431, true, ""},
	} {
		r := ReserveDaemon("127.0.0.1:8765", tc.docker, tc.database)
		r.localAddrs = local
		r.lookup = func(_ context.Context, host string) ([]netip.Addr, error) {
			return res.LookupNetIP(context.Background(), "ip", host)
		}
		a, err := New(Config{Allow: open, Limits: DefaultLimits(), Resolver: res, Reserved: r})
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.ForRun(nil).(*Gate).Check(context.Background(), tc.host, tc.port)
		if (err == nil) != tc.allow || (err != nil && !strings.Contains(err.Error(), tc.what)) {
			t.Errorf("docker_host %q database_url %q, %s:%d: err %v, want allowed %v (%s)", tc.docker, tc.database, tc.host, tc.port, err, tc.allow, tc.what)
		}
	}
}

// TestRecordsAreClipped (H41): a program's CONNECT to a host of 1 MiB (of characters JSON escapes) was recorded whole, twice
// (the host and the refusal's reason quoting it), in every one of its 256 records; each text is
// now cut to its cap.
func TestRecordsAreClipped(t *testing.T) {
	g := NewGate([]Policy{mustPolicy(t, "network_allow in the configuration", "example.com")}, DefaultLimits(), fakeResolver{}, nil)
	host := strings.Repeat("é<\x00", 1<<18) + ".example.com"
	if _, err := g.Dial(context.Background(), host, 443); err == nil {
		t.Fatal("a 1 MiB host name was dialed")
	}
	recs, _ := g.Connections()
	if len(recs) != 1 {
		t.Fatalf("records %d", len(recs))
	}
	r := recs[0]
	if len(r.Host) > MaxRecordHostBytes || len(r.Reason) > MaxRecordReasonBytes || !utf8.ValidString(r.Host) || !utf8.ValidString(r.Reason) ||
		!strings.HasSuffix(r.Host, "…") || !strings.HasPrefix(r.Host, "é??é") {
		t.Errorf("record's host %d bytes, reason %d bytes: %.80q %.80q", len(r.Host), len(r.Reason), r.Host, r.Reason)
	}
	b, _ := json.Marshal(r)
	if len(b) > 2048 {
		t.Errorf("a record's JSON is %d bytes", len(b))
	}
}

// TestTunnelServerNameIsChecked (H43): after CONNECT to an allowed host:port the tunnel
// carried a TLS handshake naming another server (SNI), which a front end serving many sites
// answers for; the ClientHello's server name must now be the host asked for or one the
// allowlist names at that port, and a connection naming another is ended and recorded.
func TestTunnelServerNameIsChecked(t *testing.T) {
	got := make(chan []byte, 8)
	ln := serveTCP(t, func(c net.Conn) {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 1)
		if n, _ := io.ReadAtLeast(c, b, 1); n == 1 { // a refused tunnel closes with nothing
			got <- b
		}
	})
	port := ln.Addr().(*net.TCPAddr).Port
	res := fakeResolver{"front.test": {"127.0.0.1"}, "also.test": {"127.0.0.1"}}
	for _, tc := range []struct {
		asked, sni string
		allow      bool
	}{
		{"front.test", "front.test", true},
		{"front.test", "FRONT.test.", true},
		{"front.test", "also.test", true}, // named by the allowlist too
		{"front.test", "hidden.example", false},
		{"127.0.0.1", "hidden.example", false},
		{"127.0.0.1", "", true}, // no SNI: the address is what was asked for
	} {
		g := NewGate([]Policy{mustPolicy(t, "network_allow in the configuration", "127.0.0.1", "front.test", "also.test")}, DefaultLimits(), res, nil)
		c, err := g.Dial(context.Background(), tc.asked, port)
		if err != nil {
			t.Fatal(err)
		}
		cfg := &tls.Config{ServerName: tc.sni, InsecureSkipVerify: true}
		hello := make(chan error, 1)
		go func() { hello <- tls.Client(c, cfg).Handshake() }()
		var reached bool
		select {
		case b := <-got:
			reached = b[0] == 0x16
		case err := <-hello:
			// The server closes after one byte, so an allowed handshake may fail here before
			// the server's byte is counted: wait for it, or it would be the next case's.
			select {
			case b := <-got:
				reached = b[0] == 0x16
			case <-time.After(500 * time.Millisecond):
				t.Logf("%s / %q: handshake %v", tc.asked, tc.sni, err)
			}
		}
		c.Close()
		if reached != tc.allow {
			t.Errorf("CONNECT %s, SNI %q: the server got the handshake: %v, want %v", tc.asked, tc.sni, reached, tc.allow)
		}
		if !tc.allow {
			recs, _ := g.Connections()
			if len(recs) != 1 || !strings.Contains(recs[0].Ended, "hidden.example") {
				t.Errorf("CONNECT %s, SNI %q: records %+v", tc.asked, tc.sni, recs)
			}
		}
	}
}

// TestMayReach: a secret's host is reachable when a name rule matches it or one of the names
// under it, or when an address rule exists; a lookalike or a parent name is not.
func TestMayReach(t *testing.T) {
	names, err := ParsePolicy("network_allow", []string{"api.example.com", "*.github.com", "pypi.org:443"})
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"api.example.com":      true,
		"api.github.com":       true,
		"*.github.com":         true,
		"*.api.github.com":     true,
		"*.example.com":        true, // api.example.com is one of its names
		"pypi.org":             true,
		"example.com":          false,
		"github.com":           false, // *.github.com is the names under it, not itself
		"evil-api.example.com": false,
		"api.example.com.evil": false,
		"*.evil.com":           false,
		"10.0.0.1":             false,
	} {
		if got := names.MayReach(host); got != want {
			t.Errorf("MayReach(%q) = %v, want %v", host, got, want)
		}
	}
	addrs, err := ParsePolicy("network_allow", []string{"203.0.113.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	if !addrs.MayReach("api.example.com") {
		t.Error("with an address rule, a name (which may resolve into it) is reachable")
	}
}
