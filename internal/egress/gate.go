package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Limits bound one run's (or one install's) outbound connections.
type Limits struct {
	// MaxConnections caps the connections a run may ask for, allowed or refused; more are
	// refused.
	MaxConnections int
	// MaxBytesSent and MaxBytesReceived cap the bytes a run's connections send and receive,
	// together; a connection that passes a cap is ended.
	MaxBytesSent, MaxBytesReceived int64
	// ConnectionTimeout caps each connection's lifetime; DialTimeout its name resolution and
	// connection set-up.
	ConnectionTimeout, DialTimeout time.Duration
}

// DefaultLimits: 256 connections, 256 MiB each way, 5 minutes a connection, 10 s to connect.
func DefaultLimits() Limits {
	return Limits{MaxConnections: 256, MaxBytesSent: 256 << 20, MaxBytesReceived: 256 << 20,
		ConnectionTimeout: 5 * time.Minute, DialTimeout: 10 * time.Second}
}

// MaxRecords caps the connections a Gate records; later ones are counted in Dropped.
const MaxRecords = 256

// Caps on a record's texts, in bytes: the host a program asked for is its own choice (a
// CONNECT line of any length), and a refusal's reason quotes it. A host name has at most 253
// bytes, an address 45; a longer text is cut at a character boundary and ends in "…", and the
// host keeps no character JSON escapes (askedHost). With them a record's JSON is at most
// about 2 KiB, so a run's egress list (its install's and its program's, MaxRecords each) at
// most about 1 MiB.
const (
	MaxRecordHostBytes   = 256
	MaxRecordReasonBytes = 1024
)

// askedHost is the host a program asked for as Dial checks and records it: every character
// JSON would escape (controls, quotes, backslashes, <, >, &, U+2028, U+2029, invalid UTF-8),
// none of which a host name or address holds, made "?", and cut to MaxRecordHostBytes; what
// was no host stays none.
func askedHost(host string) string {
	host = strings.Map(func(r rune) rune {
		switch {
		case r < 0x20 || r == 0x7f || r == utf8.RuneError || r == 0x2028 || r == 0x2029 || strings.ContainsRune(`"\<>&`, r):
			return '?'
		}
		return r
	}, host)
	return clip(host, MaxRecordHostBytes)
}

// clipRecord cuts rec's host, rule, address and reason to their caps.
func clipRecord(rec sandbox.EgressConnection) sandbox.EgressConnection {
	rec.Host = clip(rec.Host, MaxRecordHostBytes)
	rec.Rule = clip(rec.Rule, MaxRecordHostBytes)
	rec.Address = clip(rec.Address, MaxRecordHostBytes)
	rec.Reason = clip(rec.Reason, MaxRecordReasonBytes)
	return rec
}

// clip returns s when it has at most n bytes, else its first bytes up to a character boundary
// and "…", n bytes at most in all.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Resolver resolves host names (*net.Resolver).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer opens TCP connections (*net.Dialer).
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Refusal is a refused destination. Its Error text is the body of the proxy's 403 answer: it
// names the host, the rule or check that refused it and the setting that would allow it.
type Refusal struct {
	Host string
	Port int
	// Why is the sentence after "host:port is refused: ".
	Why string
}

func (r *Refusal) Error() string {
	return "sandpit egress: " + net.JoinHostPort(r.Host, strconv.Itoa(r.Port)) + " is refused: " + r.Why
}

// ErrByteCap and ErrTimeCap end a connection that passed its run's caps. They end its stream
// cleanly (protocol.Stream delivers what was carried, then the end).
var (
	ErrByteCap error = capError("the run's egress byte cap was reached")
	ErrTimeCap error = capError("the connection reached its time cap")
)

type capError string

func (e capError) Error() string { return string(e) }

// EndsStream marks the error as a clean end of the stream (see protocol.Stream).
func (capError) EndsStream() bool { return true }

// Gate decides, dials and records one run's outbound connections. It is safe for concurrent
// use. Create it with NewGate; Close ends every connection still open.
type Gate struct {
	policies []Policy // a destination must be allowed by each
	limits   Limits
	resolver Resolver
	dialer   Dialer
	reserved *Reserved // never allowed, whatever the policies say
	now      func() time.Time
	// onRecord, when set, is given each record as it is made (past MaxRecords too).
	onRecord func(sandbox.EgressConnection)

	wrapper Wrapper // nil: connections go to the program as they are

	mu       sync.Mutex
	attempts int
	sent     int64
	received int64
	records  []sandbox.EgressConnection
	dropped  int
	open     map[*Conn]struct{}
	closed   bool
}

// NewGate returns a Gate allowing what every one of policies allows (the configuration's, and
// a request's narrower list), bounded by limits, resolving with resolver and dialing with
// dialer (nil: the system's).
func NewGate(policies []Policy, limits Limits, resolver Resolver, dialer Dialer) *Gate {
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	if dialer == nil {
		dialer = &net.Dialer{}
	}
	return &Gate{policies: policies, limits: limits, resolver: resolver, dialer: dialer, now: time.Now, open: map[*Conn]struct{}{}}
}

// Decision is the outcome of checking a destination.
type Decision struct {
	// Addrs are the addresses that may be dialed, in the resolver's order.
	Addrs []netip.Addr
	// Rule is the rule of the first policy that allowed it (for the record).
	Rule string
}

// Check decides host:port without dialing: host is a name or an IP literal (IPv6 with or
// without brackets). Names are resolved with the Gate's resolver. It returns a *Refusal when
// the destination is refused.
func (g *Gate) Check(ctx context.Context, host string, port int) (Decision, error) {
	if port < 1 || port > 65535 {
		return Decision{}, refusal(host, port, "the port is not from 1 to 65535")
	}
	if len(host) > 2 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	if len(g.policies) == 0 {
		return Decision{}, refusal(host, port, "network_allow is empty; add the host to network_allow in the configuration")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return g.checkAddr(ctx, host, a, port)
	}
	return g.checkName(ctx, host, port)
}

// refusal is the *Refusal of host:port, saying why.
func refusal(host string, port int, format string, args ...any) *Refusal {
	return &Refusal{Host: host, Port: port, Why: fmt.Sprintf(format, args...)}
}

// checkAddr decides the IP literal a (written host): every policy must open it at port by an
// address rule, and a reserved address only an entry naming it.
func (g *Gate) checkAddr(ctx context.Context, host string, a netip.Addr, port int) (Decision, error) {
	if a.Zone() != "" {
		return Decision{}, refusal(host, port, "an IPv6 zone is not allowed")
	}
	a = a.Unmap()
	if what, ok := g.reserved.match(ctx, a, port); ok {
		return Decision{}, refusal(host, port, "%s:%d is %s, which no entry of network_allow or template_build_allow opens", a, port, what)
	}
	var rule string
	for _, p := range g.policies {
		r, ok := p.addrRule(a, port)
		if !ok {
			if _, name, special := classify(a); special {
				return Decision{}, refusal(host, port, "%s is %s, which only an entry of %s naming it allows: add %q (this port only)", a, name, p.Setting, netip.AddrPortFrom(a, uint16(port)).String())
			}
			return Decision{}, refusal(host, port, "no entry of %s names %s at port %d; add %q to it (or %q for every port)", p.Setting, a, port, netip.AddrPortFrom(a, uint16(port)).String(), a.String())
		}
		if rule == "" {
			rule = r.Text
		}
	}
	return Decision{Addrs: []netip.Addr{a}, Rule: rule}, nil
}

// checkName decides the host name host: every policy must name it at port, and then the
// addresses it resolves to that every policy allows (see allowResolved) may be dialed.
func (g *Gate) checkName(ctx context.Context, host string, port int) (Decision, error) {
	name, err := NormalizeHost(host)
	if err != nil {
		return Decision{}, refusal(host, port, "the host name %s", err)
	}
	// Every policy must name the host: a name no rule names is not even resolved (the
	// daemon's DNS queries must not carry what a program chooses to put in a name).
	byName := make([]Rule, len(g.policies))
	for i, p := range g.policies {
		r, ok := p.hostRule(name, port)
		if !ok && (name == "localhost" || strings.HasSuffix(name, ".localhost")) {
			// Adding it would not help: it resolves to loopback, which no name opens (a trial
			// was advised to add it).
			return Decision{}, refusal(host, port, "%s through the egress proxy is the daemon's host, not the sandbox, and no entry of %s opens its loopback; "+
				"the sandbox's own loopback is reached directly, without the proxy (NO_PROXY names localhost)", name, p.Setting)
		}
		if !ok {
			return Decision{}, refusal(host, port, "no entry of %s names %s at port %d; add %q (or %q) to it", p.Setting, name, port, name, name+":"+strconv.Itoa(port))
		}
		byName[i] = r
	}
	ctx, cancel := context.WithTimeout(ctx, g.dialTimeout())
	defer cancel()
	addrs, err := g.resolver.LookupNetIP(ctx, "ip", name)
	if err != nil {
		return Decision{}, refusal(host, port, "its name did not resolve: %v", err)
	}
	var ok []netip.Addr
	var why string
	for _, a := range addrs {
		a = a.Unmap()
		if a.Zone() != "" {
			continue
		}
		if w := g.allowResolved(ctx, name, a, port, byName); w != "" {
			why = w
			continue
		}
		ok = append(ok, a)
	}
	if len(ok) == 0 {
		if why == "" {
			why = "its name resolved to no address"
		}
		return Decision{}, refusal(host, port, "%s", why)
	}
	return Decision{Addrs: ok, Rule: byName[0].Text}, nil
}

// allowResolved says why a, an address name resolved to, may not be dialed at port, or "" when
// it may: a reserved address never; a special one only when each policy names it by a CIDR,
// unless that policy's rule for the name (byName) is trusted (the package index the operator
// configured).
func (g *Gate) allowResolved(ctx context.Context, name string, a netip.Addr, port int, byName []Rule) string {
	if what, reserved := g.reserved.match(ctx, a, port); reserved {
		return fmt.Sprintf("%s resolves to %s, and %s:%d is %s, which no entry of network_allow or template_build_allow opens", name, a, a, port, what)
	}
	_, what, special := classify(a)
	if !special {
		return ""
	}
	for i, p := range g.policies {
		if byName[i].Trusted {
			continue
		}
		if _, byCIDR := p.addrRule(a, port); !byCIDR {
			return fmt.Sprintf("%s resolves to %s, %s, which only an entry of %s naming that address allows: add %q (this port only)",
				name, a, what, p.Setting, netip.AddrPortFrom(a, uint16(port)).String())
		}
	}
	return ""
}

func (g *Gate) dialTimeout() time.Duration {
	if g.limits.DialTimeout > 0 {
		return g.limits.DialTimeout
	}
	return 10 * time.Second
}

// Dial checks host:port and connects to the first of its allowed addresses that answers. It
// returns a *Refusal for a refused destination (and for one past the run's connection cap),
// and records every attempt.
func (g *Gate) Dial(ctx context.Context, host string, port int) (*Conn, error) {
	host = askedHost(host)
	started := g.now()
	rec := sandbox.EgressConnection{Host: host, Port: port, StartedAt: started.UTC()}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, &Refusal{Host: host, Port: port, Why: "the run has ended"}
	}
	g.attempts++
	var capWhy string
	switch {
	case g.limits.MaxConnections > 0 && g.attempts > g.limits.MaxConnections:
		capWhy = fmt.Sprintf("the run has asked for %d connections, its cap (egress_max_connections in the configuration)", g.limits.MaxConnections)
	case g.limits.MaxBytesReceived > 0 && g.received >= g.limits.MaxBytesReceived:
		capWhy = fmt.Sprintf("the run has received %d bytes, its cap (egress_max_bytes_received in the configuration)", g.limits.MaxBytesReceived)
	case g.limits.MaxBytesSent > 0 && g.sent >= g.limits.MaxBytesSent:
		capWhy = fmt.Sprintf("the run has sent %d bytes, its cap (egress_max_bytes_sent in the configuration)", g.limits.MaxBytesSent)
	}
	g.mu.Unlock()
	if capWhy != "" {
		err := &Refusal{Host: host, Port: port, Why: capWhy}
		rec.Reason = err.Why
		g.record(rec)
		return nil, err
	}
	d, err := g.Check(ctx, host, port)
	if err != nil {
		var r *Refusal
		if errors.As(err, &r) {
			rec.Reason = r.Why
		} else {
			rec.Reason = err.Error()
		}
		g.record(rec)
		return nil, err
	}
	rec.Rule = d.Rule
	dctx, cancel := context.WithTimeout(ctx, g.dialTimeout())
	defer cancel()
	var errs []error
	for _, a := range d.Addrs {
		// The address checked is the address dialed: never the name again.
		c, err := g.dialer.DialContext(dctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rec.Address, rec.Allowed = a.String(), true
		conn := &Conn{Conn: c, gate: g, rec: rec, started: started, ended: make(chan struct{})}
		if g.limits.ConnectionTimeout > 0 {
			conn.deadline = started.Add(g.limits.ConnectionTimeout)
			_ = c.SetDeadline(conn.deadline)
		}
		g.mu.Lock()
		if g.closed {
			g.mu.Unlock()
			c.Close()
			return nil, &Refusal{Host: host, Port: port, Why: "the run has ended"}
		}
		g.open[conn] = struct{}{}
		g.mu.Unlock()
		if g.limits.ConnectionTimeout > 0 {
			// The deadline ends a connection only when someone reads or writes it; one the
			// program keeps quiet (a bound host's, whose injector reads the host only to
			// answer a request) is ended by the clock.
			conn.mu.Lock()
			conn.timer = time.AfterFunc(g.limits.ConnectionTimeout, conn.timeUp)
			conn.mu.Unlock()
		}
		return conn, nil
	}
	rec.Allowed = true
	rec.Address = d.Addrs[0].String()
	rec.Reason = "allowed, but the connection failed: " + errors.Join(errs...).Error()
	g.record(rec)
	return nil, fmt.Errorf("connecting to %s: %w", net.JoinHostPort(host, strconv.Itoa(port)), errors.Join(errs...))
}

// Wrapper stands between an allowed connection and the program: the run's secrets' injector
// (package secrets), which adds a bound secret's value on the daemon's side of the proxy.
type Wrapper interface {
	// Wrap returns the connection the program's bytes for host go through: c itself, or one
	// that serves c until either side closes (ctx carries values only: it is never canceled).
	Wrap(ctx context.Context, c net.Conn, host string) net.Conn
}

// SetWrapper makes DialEgress hand each allowed connection to w; call it before the first
// dial.
func (g *Gate) SetWrapper(w Wrapper) { g.wrapper = w }

// DialEgress is Dial as a sandbox.EgressDialer, through the Gate's Wrapper when it has one.
// The connection it wraps is closed with the one it returns, and when the run ends.
func (g *Gate) DialEgress(ctx context.Context, host string, port int) (net.Conn, error) {
	c, err := g.Dial(ctx, host, port)
	if err != nil {
		return nil, err
	}
	if g.wrapper == nil {
		return c, nil
	}
	w := g.wrapper.Wrap(context.WithoutCancel(ctx), c, askedHost(host))
	if w != net.Conn(c) {
		c.mu.Lock()
		c.wrapped = w
		done := c.done
		c.mu.Unlock()
		if done { // the run ended meanwhile
			w.Close()
		}
	}
	return w, nil
}

// record keeps rec, its texts clipped (see clipRecord), unless MaxRecords are kept already.
func (g *Gate) record(rec sandbox.EgressConnection) {
	rec = clipRecord(rec)
	if g.onRecord != nil {
		g.onRecord(rec)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.records) >= MaxRecords {
		g.dropped++
		return
	}
	g.records = append(g.records, rec)
}

// Close ends every connection still open (the run has ended) and refuses new ones.
func (g *Gate) Close() {
	g.mu.Lock()
	g.closed = true
	open := make([]*Conn, 0, len(g.open))
	for c := range g.open {
		open = append(open, c)
	}
	g.mu.Unlock()
	for _, c := range open {
		c.end("the run ended")
	}
}

// Connections returns the record of every connection asked for so far, in the order they
// ended (refused ones at once), and how many were left out past MaxRecords.
func (g *Gate) Connections() ([]sandbox.EgressConnection, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]sandbox.EgressConnection(nil), g.records...), g.dropped
}

// take reserves up to n bytes of the run's cap in one direction and returns how many.
func (g *Gate) take(n int, sent bool) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	used, limit := &g.received, g.limits.MaxBytesReceived
	if sent {
		used, limit = &g.sent, g.limits.MaxBytesSent
	}
	if limit > 0 && *used+int64(n) > limit {
		n = int(max(limit-*used, 0))
	}
	*used += int64(n)
	return n
}

// Conn is an allowed connection: it counts its bytes against the run's caps and records
// itself when closed.
type Conn struct {
	net.Conn
	gate     *Gate
	rec      sandbox.EgressConnection
	started  time.Time
	deadline time.Time

	mu       sync.Mutex
	sent     int64
	received int64
	why      string // why it ended early
	done     bool
	// hello holds the first bytes until a TLS ClientHello is whole (writeHello); helloDone
	// says they have been dealt with.
	hello     []byte
	helloDone bool
	// wrapped is what the Gate's Wrapper returned for it, closed with it.
	wrapped net.Conn
	// timer ends it at its deadline (timeUp), read or not.
	timer *time.Timer
	// ended is closed once end has recorded it.
	ended chan struct{}
}

// Address is the address dialed.
func (c *Conn) Address() string { return c.rec.Address }

// Read reads from the destination; past the run's received-bytes cap it ends the
// connection with ErrByteCap.
func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		allowed := c.gate.take(n, false)
		c.mu.Lock()
		c.received += int64(allowed)
		c.mu.Unlock()
		if allowed < n {
			c.end(fmt.Sprintf("it passed the run's cap of %d bytes received (egress_max_bytes_received)", c.gate.limits.MaxBytesReceived))
			return allowed, ErrByteCap
		}
	}
	return n, c.timeCap(err)
}

// Write writes to the destination; past the run's sent-bytes cap it ends the connection with
// ErrByteCap.
// Write sends p, within the run's byte cap, once the connection's first bytes have passed
// writeHello.
func (c *Conn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if done, n, err := c.writeHello(p); done {
		return n, err
	}
	return c.send(p)
}

// send writes p within the run's cap of bytes sent, and ends the connection past it.
func (c *Conn) send(p []byte) (int, error) {
	allowed := c.gate.take(len(p), true)
	n, err := c.Conn.Write(p[:allowed])
	c.mu.Lock()
	c.sent += int64(n)
	c.mu.Unlock()
	if err == nil && allowed < len(p) {
		c.end(fmt.Sprintf("it passed the run's cap of %d bytes sent (egress_max_bytes_sent)", c.gate.limits.MaxBytesSent))
		return n, ErrByteCap
	}
	return n, c.timeCap(err)
}

// timeCap returns ErrTimeCap for err when the connection reached its time cap (its deadline
// passed, or its timer ended it first), else err.
func (c *Conn) timeCap(err error) error {
	if err == nil || c.deadline.IsZero() {
		return err
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() && !c.gate.now().Before(c.deadline) {
		c.timeUp()
	}
	c.mu.Lock()
	capped := c.why == timeCapWhy(c.gate.limits)
	c.mu.Unlock()
	if capped {
		<-c.ended // the timer's end may still be recording it
		return ErrTimeCap
	}
	return err
}

// timeUp ends the connection at its time cap.
func (c *Conn) timeUp() { c.end(timeCapWhy(c.gate.limits)) }

func timeCapWhy(l Limits) string {
	return fmt.Sprintf("it reached its time cap of %s (egress_connection_timeout_ms)", l.ConnectionTimeout)
}

// CloseWrite closes the writing side (the program has sent its last byte).
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close closes the connection and records it.
func (c *Conn) Close() error {
	c.end("")
	return nil
}

// end closes the connection once, recording why it ended early ("" for a normal close).
func (c *Conn) end(why string) {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return
	}
	c.done = true
	c.why = why
	if c.timer != nil {
		c.timer.Stop()
	}
	rec := c.rec
	rec.BytesSent, rec.BytesReceived = c.sent, c.received
	wrapped := c.wrapped
	c.mu.Unlock()
	_ = c.Conn.Close()
	if wrapped != nil {
		_ = wrapped.Close()
	}
	rec.DurationMS = c.gate.now().Sub(c.started).Milliseconds()
	rec.Ended = why
	c.gate.mu.Lock()
	delete(c.gate.open, c)
	c.gate.mu.Unlock()
	c.gate.record(rec)
	close(c.ended)
}
