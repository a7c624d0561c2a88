package egress

import (
	"net/netip"
)

// special is a block of special-purpose addresses: the IANA IPv4 and IPv6 Special-Purpose
// Address Registries, multicast, and (IPv6) everything outside global unicast 2000::/3.
type special struct {
	prefix netip.Prefix
	name   string
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// specialBlocks are checked in order; the first that contains an address names it.
var specialBlocks = []special{
	// IPv4 (RFC 6890 and the registry's later entries).
	{mustPrefix("0.0.0.0/8"), `a "this network" address (0.0.0.0/8)`},
	{mustPrefix("10.0.0.0/8"), "a private address (10.0.0.0/8)"},
	{mustPrefix("100.64.0.0/10"), "a shared carrier-grade NAT address (100.64.0.0/10)"},
	{mustPrefix("127.0.0.0/8"), "a loopback address (127.0.0.0/8)"},
	{mustPrefix("169.254.169.254/32"), "the cloud metadata address (169.254.169.254)"},
	{mustPrefix("169.254.0.0/16"), "a link-local address (169.254.0.0/16)"},
	{mustPrefix("172.16.0.0/12"), "a private address (172.16.0.0/12)"},
	{mustPrefix("192.0.0.0/24"), "an IETF protocol assignment (192.0.0.0/24)"},
	{mustPrefix("192.0.2.0/24"), "a documentation address (192.0.2.0/24)"},
	{mustPrefix("192.31.196.0/24"), "an AS112 address (192.31.196.0/24)"},
	{mustPrefix("192.52.193.0/24"), "an AMT address (192.52.193.0/24)"},
	{mustPrefix("192.88.99.0/24"), "a 6to4 relay anycast address (192.88.99.0/24)"},
	{mustPrefix("192.168.0.0/16"), "a private address (192.168.0.0/16)"},
	{mustPrefix("192.175.48.0/24"), "an AS112 address (192.175.48.0/24)"},
	{mustPrefix("198.18.0.0/15"), "a benchmarking address (198.18.0.0/15)"},
	{mustPrefix("198.51.100.0/24"), "a documentation address (198.51.100.0/24)"},
	{mustPrefix("203.0.113.0/24"), "a documentation address (203.0.113.0/24)"},
	{mustPrefix("224.0.0.0/4"), "a multicast address (224.0.0.0/4)"},
	{mustPrefix("255.255.255.255/32"), "the broadcast address (255.255.255.255)"},
	{mustPrefix("240.0.0.0/4"), "a reserved address (240.0.0.0/4)"},
	// IPv6. IPv4-mapped addresses (::ffff:0:0/96) are unmapped before they are checked, and the
	// NAT64 well-known prefix is checked by the IPv4 address it embeds (see classify).
	{mustPrefix("::/128"), "the unspecified address (::)"},
	{mustPrefix("::1/128"), "the loopback address (::1)"},
	{mustPrefix("::/96"), "an IPv4-compatible address (::/96, deprecated)"},
	{mustPrefix("64:ff9b:1::/48"), "a local-use NAT64 address (64:ff9b:1::/48)"},
	{mustPrefix("100::/64"), "a discard-only address (100::/64)"},
	{mustPrefix("2001:db8::/32"), "a documentation address (2001:db8::/32)"},
	{mustPrefix("2001::/23"), "an IETF protocol assignment (2001::/23, Teredo among them)"},
	{mustPrefix("2002::/16"), "a 6to4 address (2002::/16)"},
	{mustPrefix("3fff::/20"), "a documentation address (3fff::/20)"},
	{mustPrefix("5f00::/16"), "a segment routing address (5f00::/16)"},
	{mustPrefix("fc00::/7"), "a unique local (private) address (fc00::/7)"},
	{mustPrefix("fe80::/10"), "a link-local address (fe80::/10)"},
	{mustPrefix("fec0::/10"), "a site-local address (fec0::/10, deprecated)"},
	{mustPrefix("ff00::/8"), "a multicast address (ff00::/8)"},
}

// nat64 is the NAT64 well-known prefix (RFC 6052): 64:ff9b::a.b.c.d reaches a.b.c.d through a
// translator, so it is as special as a.b.c.d.
var nat64 = mustPrefix("64:ff9b::/96")

// globalUnicast is the only IPv6 block with public addresses; outside it (and the NAT64 prefix)
// every address is special (unassigned or one of the blocks above).
var globalUnicast = mustPrefix("2000::/3")

// classify returns, for a special-purpose address, the block that makes it special and a
// phrase naming it ("a loopback address (127.0.0.0/8)"); ok is false for a public address.
// addr must be unmapped (IPv4-mapped IPv6 addresses are their IPv4 address) and without zone.
func classify(addr netip.Addr) (block netip.Prefix, name string, ok bool) {
	if addr.Is6() && nat64.Contains(addr) {
		b := addr.As16()
		v4 := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		if inner, innerName, special := classify(v4); special {
			// The NAT64 form of the inner block: 64:ff9b::/96 plus the inner block's bits.
			p, _ := addr.Prefix(96 + inner.Bits())
			return p, "the NAT64 form (64:ff9b::/96) of " + innerName, true
		}
		return netip.Prefix{}, "", false
	}
	for _, s := range specialBlocks {
		if s.prefix.Contains(addr) {
			return s.prefix, s.name, true
		}
	}
	if addr.Is6() && !globalUnicast.Contains(addr) {
		// Its /3 of the address space: a CIDR inside it names the address; ::/0 does not.
		p, _ := addr.Prefix(3)
		return p, "an IPv6 address outside global unicast (2000::/3)", true
	}
	return netip.Prefix{}, "", false
}
