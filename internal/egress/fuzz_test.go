package egress

import (
	"context"
	"net/netip"
	"testing"
)

// FuzzParseRule: no entry panics the parser, and an accepted one is allowed by a policy made of
// itself (Covers), so a request that repeats the configuration's entry is a narrowing.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"example.com", "*.example.com:443", "10.0.0.0/8", "[2001:db8::1]:443", "::ffff:127.0.0.1",
		"EXAMPLE.com.", "xn--bcher-kva.de", "*.com", "a..b", "1.2.3.4:0", "fe80::1%eth0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			return
		}
		if !(Policy{Rules: []Rule{r}}).Covers(r) {
			t.Fatalf("%q (%+v) does not cover itself", s, r)
		}
	})
}

// FuzzCheckAddress: for any address literal, the IPv4-mapped form of an IPv4 address gets the
// same decision as the address itself, and no special-purpose address is allowed by a
// policy of public blocks only.
func FuzzCheckAddress(f *testing.F) {
	f.Add([]byte{127, 0, 0, 1}, uint16(80))
	f.Add([]byte{169, 254, 169, 254}, uint16(80))
	f.Add([]byte{0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1}, uint16(443))
	f.Fuzz(func(t *testing.T, raw []byte, port uint16) {
		a, ok := netip.AddrFromSlice(raw)
		if !ok || port == 0 {
			return
		}
		p, _ := ParsePolicy("network_allow in the configuration", []string{"0.0.0.0/0", "::/0"})
		g := NewGate([]Policy{p}, DefaultLimits(), nil, nil)
		_, err := g.Check(context.Background(), a.String(), int(port))
		if _, _, special := classify(a.Unmap()); special && err == nil {
			t.Fatalf("special-purpose %s allowed by 0.0.0.0/0 and ::/0", a)
		}
		if a.Is4() {
			_, err6 := g.Check(context.Background(), netip.AddrFrom16(a.As16()).String(), int(port))
			if (err == nil) != (err6 == nil) {
				t.Fatalf("%s: %v, its mapped form: %v", a, err, err6)
			}
		}
	})
}
