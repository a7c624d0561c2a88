package egress

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Reserved are destinations no rule opens: the endpoints the daemon itself uses, which
// sandboxed code must never reach, whatever network_allow says: its own listening address (its
// REST API, MCP endpoint and console; an entry such as 127.0.0.1/32 would otherwise hand the
// program the daemon's API, and through it every agent's records and runs), its Docker
// engine (docker_host: whoever reaches it owns the host) and its PostgreSQL server
// (database_url).
type Reserved struct {
	// Addrs are exact addresses with their port (the daemon's listen address).
	Addrs []netip.AddrPort
	// Ports are reserved on every address of this host (the daemon listens on a wildcard
	// address or a name): loopback, and each interface's address.
	Ports []int
	// Others are the other endpoints the daemon uses (see ReserveDaemon).
	Others []Endpoint
	// localAddrs lists this host's addresses (nil: net.InterfaceAddrs); lookup resolves an
	// endpoint's name (nil: the system's resolver); for tests.
	localAddrs func() ([]net.Addr, error)
	lookup     func(ctx context.Context, host string) ([]netip.Addr, error)
}

// Endpoint is a destination the daemon uses besides its own listen address.
type Endpoint struct {
	// What names it in a refusal: "sandpit's Docker engine (docker_host tcp://…)".
	What string
	// Host is an address or a name; Port its TCP port.
	Host string
	Port int
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

// ReserveDaemon returns the Reserved of a daemon listening on listen (see ReserveListen) that
// drives the Docker engine at dockerHost (a URL: tcp://, http://, https:// or ssh://; unix
// sockets and the like are out of a TCP connection's reach) and keeps its records at
// databaseURL (postgres://, each host of a comma-separated list; "" for none).
func ReserveDaemon(listen, dockerHost, databaseURL string) *Reserved {
	r := ReserveListen(listen)
	if r == nil {
		r = &Reserved{}
	}
	if u, err := url.Parse(dockerHost); err == nil && u.Host != "" {
		defaults := map[string]string{"tcp": "2375", "http": "2375", "https": "2376", "ssh": "22"}
		if def, ok := defaults[u.Scheme]; ok {
			r.add("sandpit's Docker engine (docker_host "+u.Scheme+"://"+u.Host+")", u.Host, def)
		}
	}
	for _, hp := range postgresHosts(databaseURL) {
		r.add("sandpit's database (database_url host "+hp+")", hp, "5432")
	}
	return r
}

// postgresHosts returns the host[:port] entries of a postgres:// or postgresql:// URL (libpq
// takes a comma-separated list of them, which net/url refuses as a bad port).
func postgresHosts(databaseURL string) []string {
	rest, ok := strings.CutPrefix(databaseURL, "postgres://")
	if !ok {
		if rest, ok = strings.CutPrefix(databaseURL, "postgresql://"); !ok {
			return nil
		}
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	var hosts []string
	for hp := range strings.SplitSeq(rest, ",") {
		if hp != "" {
			hosts = append(hosts, hp)
		}
	}
	return hosts
}

// add reserves hostport (host[:port], port defaulting to def).
func (r *Reserved) add(what, hostport, def string) {
	host, portText, err := net.SplitHostPort(hostport)
	if err != nil {
		host, portText = strings.Trim(hostport, "[]"), def
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 || host == "" {
		return
	}
	r.Others = append(r.Others, Endpoint{What: what, Host: host, Port: port})
}

// match reports whether a:port is reserved, and says what it is.
func (r *Reserved) match(ctx context.Context, a netip.Addr, port int) (string, bool) {
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
	for _, e := range r.Others {
		if e.Port != port {
			continue
		}
		addrs, err := r.resolve(ctx, e.Host)
		if err != nil {
			return e.What + ", whose name did not resolve (refused to be safe)", true
		}
		for _, x := range addrs {
			// A server on this host may listen on every address of it, whichever one the
			// daemon names: its port is reserved on all of them.
			if x == a || a.IsUnspecified() || (r.isLocal(x) && r.isLocal(a)) {
				return e.What, true
			}
		}
	}
	return "", false
}

// resolve returns host's addresses: host itself when it is one.
func (r *Reserved) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	lookup := r.lookup
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := lookup(ctx, host)
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	return addrs, err
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
