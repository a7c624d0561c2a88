package egress

import (
	"net"
	"net/netip"
	"strconv"
)

// Reserved are destinations no rule opens: the daemon's own listening address (its REST API,
// MCP endpoint and console), which sandboxed code must never reach, whatever network_allow
// says (an entry such as 127.0.0.1/32 would otherwise hand the program the daemon's API, and
// through it every agent's records and runs).
type Reserved struct {
	// Addrs are exact addresses with their port.
	Addrs []netip.AddrPort
	// Ports are reserved on every address of this host (the daemon listens on a wildcard
	// address or a name): loopback, and each interface's address.
	Ports []int
	// localAddrs lists this host's addresses (nil: net.InterfaceAddrs); for tests.
	localAddrs func() ([]net.Addr, error)
}

// ReserveListen returns the Reserved of a daemon listening on listen (host:port, as the
// listen setting holds it): that address and port, or the port on every address of the host
// when the host part is a wildcard address or a name. Nil when listen has no port.
func ReserveListen(listen string) *Reserved {
	host, portText, err := net.SplitHostPort(listen)
	if err != nil {
		return nil
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		return nil
	}
	if a, err := netip.ParseAddr(host); err == nil && !a.IsUnspecified() {
		return &Reserved{Addrs: []netip.AddrPort{netip.AddrPortFrom(a.Unmap(), uint16(port))}}
	}
	return &Reserved{Ports: []int{port}}
}

// match reports whether a:port is reserved, and says what it is.
func (r *Reserved) match(a netip.Addr, port int) (string, bool) {
	if r == nil {
		return "", false
	}
	a = a.Unmap()
	for _, ap := range r.Addrs {
		// A dial to the unspecified address (0.0.0.0, ::) reaches this host, on whatever
		// address it listens (an attack read the API through "0.0.0.0:port").
		if ap.Port() == uint16(port) && (ap.Addr() == a || a.IsUnspecified() || ap.Addr().IsLoopback() && a.IsLoopback()) {
			return "sandpit's own API (listen " + ap.String() + ")", true
		}
	}
	for _, p := range r.Ports {
		if p == port && r.isLocal(a) {
			return "sandpit's own API (listening on port " + strconv.Itoa(p) + " of every address of this host)", true
		}
	}
	return "", false
}

// isLocal reports whether a is an address of this host. An address list that cannot be read
// counts every address as local: the reservation fails closed.
func (r *Reserved) isLocal(a netip.Addr) bool {
	if a.IsLoopback() || a.IsUnspecified() {
		return true
	}
	list := r.localAddrs
	if list == nil {
		list = net.InterfaceAddrs
	}
	addrs, err := list()
	if err != nil {
		return true
	}
	for _, x := range addrs {
		if p, err := netip.ParsePrefix(x.String()); err == nil && p.Addr().Unmap() == a {
			return true
		}
	}
	return false
}
