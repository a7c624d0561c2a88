// Package egress is the daemon's side of the network allowlist (network "allowlist"): it
// decides which destinations a run's outbound connections may reach and dials them itself.
//
// Inside the sandbox, which has no network interface but loopback, the executor serves an HTTP
// proxy and carries each connection it accepts over the control line; the daemon asks a
// Gate, which checks the destination against the Policy (the configuration's network_allow,
// narrowed by the request's), resolves names itself, refuses special-purpose addresses that
// no CIDR of the list names explicitly, dials the very address it checked (a name is never
// resolved twice, so DNS rebinding cannot swap it), and bounds and records every connection.
//
// Rules (network_allow entries):
//
//	example.com          that host, any port
//	example.com:443      that host, port 443
//	*.example.com        any name under example.com (not example.com itself), any port
//	*.example.com:8443   the same, port 8443
//	203.0.113.7          that address (an IP literal is a one-address CIDR); [2001:db8::1]:443 with a port
//	10.0.0.0/8           every address in the block, including special-purpose ones it names
//
// Host names are compared in lower case without a trailing dot; names must be ASCII
// (internationalised names in their IDNA "xn--" form), as HTTP clients send them.
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Rule is one parsed network_allow entry.
type Rule struct {
	// Text is the entry as written.
	Text string
	// Host is the lower-case name without trailing dot for a name rule ("" for an address
	// rule); Wildcard says it was "*.Host": names under Host, not Host itself.
	Host     string
	Wildcard bool
	// Prefix is an address rule's block (IPv4-mapped blocks are stored as IPv4).
	Prefix netip.Prefix
	// Port is the only port the rule allows; 0 allows any.
	Port int
	// Trusted rules (the package index's hosts, from the configuration) may reach the
	// special-purpose addresses their names resolve to.
	Trusted bool
}

func (r Rule) isAddr() bool { return r.Prefix.IsValid() }

func (r Rule) portOK(port int) bool { return r.Port == 0 || r.Port == port }

// ParseRule parses one network_allow entry (see the package comment for the forms). Errors
// name the entry and what is wrong with it.
func ParseRule(s string) (Rule, error) {
	text := s
	s = strings.TrimSpace(s)
	bad := func(why string) (Rule, error) {
		return Rule{}, fmt.Errorf("network_allow entry %q %s", text, why)
	}
	if s == "" {
		return bad("is empty; write a host name (example.com, *.example.com, with :port if you like) or a CIDR (10.0.0.0/8)")
	}
	// A CIDR.
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return bad("is not a CIDR block (10.0.0.0/8, 2001:db8::/32): " + err.Error())
		}
		if p.Addr().Zone() != "" {
			return bad("has an IPv6 zone; leave it out")
		}
		return Rule{Text: text, Prefix: unmapPrefix(p.Masked())}, nil
	}
	// An IP literal, with or without port.
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return bad("has an IPv6 zone; leave it out")
		}
		a = a.Unmap()
		return Rule{Text: text, Prefix: netip.PrefixFrom(a, a.BitLen())}, nil
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if ap.Port() == 0 {
			return bad("has port 0; name a port from 1 to 65535, or none for every port")
		}
		a := ap.Addr().Unmap()
		if a.Zone() != "" {
			return bad("has an IPv6 zone; leave it out")
		}
		return Rule{Text: text, Prefix: netip.PrefixFrom(a, a.BitLen()), Port: int(ap.Port())}, nil
	}
	if strings.HasPrefix(s, "[") {
		return bad("is not an IPv6 address in brackets with a port ([2001:db8::1]:443)")
	}
	host, port := s, 0
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		p, err := strconv.Atoi(s[i+1:])
		if err != nil || p < 1 || p > 65535 {
			return bad("has a port that is not a number from 1 to 65535")
		}
		host, port = s[:i], p
	}
	r := Rule{Text: text, Port: port}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		r.Wildcard, host = true, rest
	}
	name, err := NormalizeHost(host)
	if err != nil {
		return bad(err.Error())
	}
	if _, err := netip.ParseAddr(name); err == nil && r.Wildcard {
		return bad("puts a wildcard before an address; write the address or a CIDR")
	}
	if r.Wildcard && !strings.Contains(name, ".") {
		return bad("would allow every name under a top-level domain; name a domain (*.example.com)")
	}
	r.Host = name
	return r, nil
}

// unmapPrefix returns an IPv4-mapped IPv6 block (::ffff:10.0.0.0/104) as its IPv4 block.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p
}

// NormalizeHost returns a host name in the form rules and requests are compared in: lower
// case, one trailing dot removed. It refuses names that are not ASCII (give the IDNA "xn--"
// form), empty labels, labels over 63 characters, names over 253, and characters other than
// letters, digits, '-' and '_'.
func NormalizeHost(h string) (string, error) {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if h == "" {
		return "", errors.New("has no host name")
	}
	if len(h) > 253 {
		return "", errors.New("is a host name over 253 characters")
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" {
			return "", errors.New("has an empty label in its host name")
		}
		if len(label) > 63 {
			return "", errors.New("has a host name label over 63 characters")
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if c >= 0x80 {
				return "", errors.New("is not ASCII; write an internationalised name in its IDNA form (xn--...)")
			}
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("has %q in its host name; only letters, digits, '-', '_' and '.' are allowed", c)
			}
		}
	}
	return h, nil
}

// Policy is a list of rules: a destination is allowed when a rule names it.
type Policy struct {
	// Setting names where the rules come from, for refusals ("network_allow in the
	// configuration", "network_allow in the request").
	Setting string
	Rules   []Rule
}

// ParsePolicy parses entries as setting's rules.
func ParsePolicy(setting string, entries []string) (Policy, error) {
	p := Policy{Setting: setting}
	var errs []error
	for _, e := range entries {
		r, err := ParseRule(e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p.Rules = append(p.Rules, r)
	}
	return p, errors.Join(errs...)
}

// hostRule returns the first name rule that matches host (normalised) and port.
func (p Policy) hostRule(host string, port int) (Rule, bool) {
	for _, r := range p.Rules {
		if r.isAddr() || !r.portOK(port) {
			continue
		}
		if r.Wildcard {
			if strings.HasSuffix(host, "."+r.Host) {
				return r, true
			}
		} else if host == r.Host {
			return r, true
		}
	}
	return Rule{}, false
}

// addrRule returns the first address rule that allows addr (unmapped) at port. A
// special-purpose address is allowed only by a rule whose whole block lies inside the
// special-purpose block (10.1.2.0/24 names private addresses; 0.0.0.0/0 does not), or by a
// trusted name rule (via).
func (p Policy) addrRule(addr netip.Addr, port int) (Rule, bool) {
	block, _, special := classify(addr)
	for _, r := range p.Rules {
		if !r.isAddr() || !r.portOK(port) || !r.Prefix.Contains(addr) {
			continue
		}
		if special && !(r.Prefix.Bits() >= block.Bits() && block.Contains(r.Prefix.Addr())) {
			continue
		}
		return r, true
	}
	return Rule{}, false
}

// Covers reports whether every destination r allows is also allowed by p, so that a request's
// rule narrows the configuration's (a name rule under a wildcard or equal name rule with a
// compatible port, an address block inside one of p's blocks).
func (p Policy) Covers(r Rule) bool {
	for _, c := range p.Rules {
		if c.Port != 0 && c.Port != r.Port {
			continue
		}
		switch {
		case r.isAddr() && c.isAddr():
			if c.Prefix.Addr().Is4() == r.Prefix.Addr().Is4() && c.Prefix.Bits() <= r.Prefix.Bits() && c.Prefix.Contains(r.Prefix.Addr()) {
				return true
			}
		case !r.isAddr() && !c.isAddr():
			switch {
			case c.Wildcard && strings.HasSuffix(r.Host, "."+c.Host):
				return true
			case c.Wildcard && r.Wildcard && r.Host == c.Host:
				return true
			case !c.Wildcard && !r.Wildcard && c.Host == r.Host:
				return true
			}
		}
	}
	return false
}

// MayReach reports whether some connection to host (a name, or "*.name" for the names under
// it) may be allowed: a name rule matches it or one of its names, or p has an address rule
// (which a name may resolve into). False means no connection to it ever is.
func (p Policy) MayReach(host string) bool {
	h, err := ParseRule(host)
	if err != nil || h.isAddr() {
		return false
	}
	under := func(name, parent string) bool { return strings.HasSuffix(name, "."+parent) }
	for _, c := range p.Rules {
		if c.isAddr() {
			return true
		}
		switch {
		case !h.Wildcard && c.Wildcard && under(h.Host, c.Host), !h.Wildcard && !c.Wildcard && h.Host == c.Host:
			return true
		case h.Wildcard && c.Wildcard && (h.Host == c.Host || under(h.Host, c.Host) || under(c.Host, h.Host)):
			return true
		case h.Wildcard && !c.Wildcard && under(c.Host, h.Host):
			return true
		}
	}
	return false
}

// Narrow returns the request's rules as a Policy, checking that the configuration (p) covers
// each; an error names every entry that would widen it.
func (p Policy) Narrow(entries []string) (Policy, error) {
	n, err := ParsePolicy("network_allow in the request", entries)
	if err != nil {
		return Policy{}, err
	}
	var errs []error
	for _, r := range n.Rules {
		if !p.Covers(r) {
			errs = append(errs, fmt.Errorf("network_allow entry %q is not within the configuration's network_allow (%s): "+
				"a request may only narrow the list; ask the operator to add it to the configuration", r.Text, p.list()))
		}
	}
	return n, errors.Join(errs...)
}

func (p Policy) list() string {
	if len(p.Rules) == 0 {
		return "empty"
	}
	texts := make([]string, len(p.Rules))
	for i, r := range p.Rules {
		texts[i] = r.Text
	}
	return strings.Join(texts, ", ")
}
