package executor

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// The egress proxy (network "allowlist"): the box has no network interface but loopback, and
// the executor serves an HTTP proxy there (Config.Proxy). Each request it accepts (CONNECT
// host:port for HTTPS and anything tunnelled; an absolute-form request such as
// "GET http://host/path" for plain HTTP) becomes a stream over the control line: the
// daemon decides whether the destination is allowed, dials it and carries its bytes. The
// proxy only parses requests and attributes each connection to the run (or install) whose uid
// opened it; it decides nothing.

// proxyHeadTimeout bounds how long a client may take to send its request's head;
// proxyHeadBytes caps the head.
const (
	proxyHeadTimeout = 30 * time.Second
	proxyHeadBytes   = 32 << 10
	proxyOpenTimeout = 60 * time.Second
	// proxyMaxConns caps the proxy's connections being read and opened at once (each holds a
	// goroutine and buffers in the executor, whose memory is the box's): more are answered 503
	// and closed. Open streams are capped by the daemon (egress_max_connections per run).
	proxyMaxConns = 512
)

// proxy serves the egress proxy and holds its streams.
type proxy struct {
	e  *Executor
	ln net.Listener

	next    atomic.Uint64
	conns   atomic.Int64
	mu      sync.Mutex
	streams map[uint64]*protocol.Stream
	opening map[uint64]chan *protocol.Message // streams waiting for the daemon's answer
	wg      sync.WaitGroup
}

// startProxy listens on addr and serves until close.
func startProxy(e *Executor, addr string) (*proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("executor: listening for the egress proxy on %s: %w", addr, err)
	}
	p := &proxy{e: e, ln: ln, streams: map[uint64]*protocol.Stream{}, opening: map[uint64]chan *protocol.Message{}}
	p.wg.Go(p.serve)
	return p, nil
}

// close stops accepting and ends every stream.
func (p *proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	streams := make([]*protocol.Stream, 0, len(p.streams))
	for _, s := range p.streams {
		streams = append(streams, s)
	}
	for id, ch := range p.opening {
		close(ch)
		delete(p.opening, id)
	}
	p.mu.Unlock()
	for _, s := range streams {
		s.Abort(errors.New("the executor is stopping"))
	}
	p.wg.Wait()
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			p.e.log.Warn("egress proxy: accepting", "error", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if p.conns.Add(1) > proxyMaxConns {
			p.conns.Add(-1)
			proxyAnswer(c, http.StatusServiceUnavailable, fmt.Sprintf("sandpit egress: the proxy has %d connections open, its most", proxyMaxConns))
			c.Close()
			continue
		}
		p.wg.Go(func() {
			defer p.conns.Add(-1)
			p.handle(c)
		})
	}
}

// handleMessage passes the daemon's egress message to its stream (never blocking).
func (p *proxy) handleMessage(m *protocol.Message) {
	if m.Egress == nil {
		return
	}
	p.mu.Lock()
	if m.Kind == protocol.KindEgressOpened {
		ch := p.opening[m.Egress.Stream]
		delete(p.opening, m.Egress.Stream)
		p.mu.Unlock()
		if ch != nil {
			ch <- m // capacity 1
		}
		return
	}
	s := p.streams[m.Egress.Stream]
	p.mu.Unlock()
	if s != nil {
		s.Handle(m)
	}
}

// target is a parsed proxy request.
type target struct {
	host string
	port int
	// req is an absolute-form request to forward (nil for CONNECT).
	req *http.Request
}

// readTarget reads one proxy request's head from br.
func readTarget(br *bufio.Reader) (target, error) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return target{}, fmt.Errorf("not an HTTP proxy request: %w", err)
	}
	if req.Method == http.MethodConnect {
		host, port, err := splitHostPort(req.RequestURI, 0)
		if err != nil {
			return target{}, fmt.Errorf("CONNECT needs host:port: %w", err)
		}
		return target{host: host, port: port}, nil
	}
	if req.URL == nil || !req.URL.IsAbs() {
		return target{}, errors.New("this is a proxy: send requests in absolute form (GET http://host/path) or CONNECT host:port; " +
			"set HTTP_PROXY and HTTPS_PROXY to its address")
	}
	if req.URL.Scheme != "http" {
		return target{}, fmt.Errorf("the proxy forwards plain http:// requests; for %s:// use CONNECT (HTTPS_PROXY)", req.URL.Scheme)
	}
	host, port, err := splitHostPort(req.URL.Host, 80)
	if err != nil {
		return target{}, err
	}
	return target{host: host, port: port, req: req}, nil
}

// splitHostPort splits "host:port", "[v6]:port", or (with a default port) a bare host.
func splitHostPort(hp string, defaultPort int) (string, int, error) {
	host, portText, err := net.SplitHostPort(hp)
	if err != nil {
		if defaultPort == 0 {
			return "", 0, err
		}
		host, portText = strings.TrimSuffix(strings.TrimPrefix(hp, "["), "]"), strconv.Itoa(defaultPort)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not a number from 1 to 65535", portText)
	}
	if host == "" {
		return "", 0, errors.New("no host")
	}
	return host, port, nil
}

// proxyAnswer writes a short proxy answer with text as both the reason phrase and the body, so
// that clients that show only the status line (requests' ProxyError for a refused CONNECT)
// show it too.
func proxyAnswer(c net.Conn, code int, text string) {
	phrase := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r > 0x7e {
			return '?'
		}
		return r
	}, text)
	if len(phrase) > 1024 {
		phrase = phrase[:1024]
	}
	body := text + "\n"
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, phrase, len(body), body)
}

// handle serves one client connection: one request, one stream.
func (p *proxy) handle(c net.Conn) {
	owner, err := p.e.owner(c)
	if err != nil {
		proxyAnswer(c, http.StatusForbidden, "sandpit egress: "+err.Error())
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(proxyHeadTimeout))
	head := &headLimit{r: c, n: proxyHeadBytes}
	br := bufio.NewReaderSize(head, 4096)
	t, err := readTarget(br)
	if err != nil {
		proxyAnswer(c, http.StatusBadRequest, "sandpit egress: "+err.Error())
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	// Past the head the client's bytes are the stream's: no cap on them here (the daemon's).
	head.lift()
	rest := io.MultiReader(bytes.NewReader(buffered(br)), c)

	local := localEnd(c, t, rest)
	// The stream is known before the daemon is asked, so that none of the destination's
	// bytes that follow the answer is dropped; it starts once the client has its answer.
	id := p.next.Add(1)
	s := protocol.NewStream(p.e.conn, owner, id, local, func(error) { p.forget(id) })
	ch := make(chan *protocol.Message, 1)
	p.mu.Lock()
	p.opening[id] = ch
	p.streams[id] = s
	p.mu.Unlock()
	fail := func(code int, text string) {
		p.forget(id)
		proxyAnswer(c, code, text)
		local.Close()
	}
	if err := p.e.conn.Send(&protocol.Message{Kind: protocol.KindEgressOpen, ID: owner,
		Egress: &protocol.Egress{Stream: id, Host: t.host, Port: t.port}}); err != nil {
		fail(http.StatusBadGateway, "sandpit egress: the daemon could not be asked: "+err.Error())
		return
	}
	var m *protocol.Message
	select {
	case m = <-ch:
	case <-time.After(proxyOpenTimeout):
	}
	switch {
	case m == nil:
		fail(http.StatusGatewayTimeout, "sandpit egress: the daemon did not answer")
		_ = p.e.conn.Send(&protocol.Message{Kind: protocol.KindEgressClose, ID: owner, Egress: &protocol.Egress{Stream: id, Abort: true}})
		return
	case m.Egress.Refused:
		code := http.StatusForbidden
		if !strings.Contains(m.Error, "is refused") {
			code = http.StatusBadGateway // allowed, but the connection failed
		}
		fail(code, m.Error)
		return
	}
	if t.req == nil {
		_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		_, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
		_ = c.SetWriteDeadline(time.Time{})
		if err != nil {
			s.Abort(err)
		}
	}
	s.Start()
}

// localEnd is the client's end of the stream: after CONNECT, the connection itself (rest is
// what the client sends); for a plain request, the request forwarded in origin form, once.
// Connection: close ends the exchange with the origin's answer, so a client cannot send a
// second request (to another host) down this connection.
func localEnd(c net.Conn, t target, rest io.Reader) io.ReadWriteCloser {
	if t.req == nil {
		return &clientConn{Conn: c, r: rest}
	}
	req := t.req // its Body reads the rest of the request from the connection's reader
	req.Header.Del("Proxy-Connection")
	req.Header.Del("Proxy-Authorization")
	req.Close = true
	req.RequestURI = ""
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(req.Write(pw)) }()
	return newForwardConn(c, pr)
}

func (p *proxy) forget(id uint64) {
	p.mu.Lock()
	delete(p.streams, id)
	delete(p.opening, id)
	p.mu.Unlock()
}

// buffered returns the bytes br has read past the request's head.
func buffered(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return b
}

// headLimit caps the bytes read through it until lift.
type headLimit struct {
	r      io.Reader
	mu     sync.Mutex
	n      int
	lifted bool
}

func (h *headLimit) Read(b []byte) (int, error) {
	h.mu.Lock()
	lifted, n := h.lifted, h.n
	h.mu.Unlock()
	if !lifted {
		if n <= 0 {
			return 0, fmt.Errorf("the request's head is over %d bytes", proxyHeadBytes)
		}
		b = b[:min(len(b), n)]
	}
	k, err := h.r.Read(b)
	h.mu.Lock()
	h.n -= k
	h.mu.Unlock()
	return k, err
}

func (h *headLimit) lift() {
	h.mu.Lock()
	h.lifted = true
	h.mu.Unlock()
}

// clientConn is a CONNECT client: its bytes past the request head, its writes straight.
type clientConn struct {
	net.Conn
	r io.Reader
}

func (c *clientConn) Read(b []byte) (int, error) { return c.r.Read(b) }

func (c *clientConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// forwardConn is an absolute-form client: the stream reads the rewritten request from r and
// writes the origin's answer to the client. The end of the request is not passed on: an
// origin may take the client's half-close for its going away (Go's servers cancel the
// request), so reading blocks past the request until the answer has been delivered
// (CloseWrite) or the stream is closed.
type forwardConn struct {
	net.Conn
	r    *io.PipeReader
	once sync.Once
	done chan struct{}
}

func newForwardConn(c net.Conn, r *io.PipeReader) *forwardConn {
	return &forwardConn{Conn: c, r: r, done: make(chan struct{})}
}

func (c *forwardConn) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	if errors.Is(err, io.EOF) {
		<-c.done
	}
	return n, err
}

func (c *forwardConn) finish() {
	c.once.Do(func() {
		close(c.done)
		_ = c.r.Close()
	})
}

func (c *forwardConn) Close() error {
	c.finish()
	return c.Conn.Close()
}

// CloseWrite ends the exchange: the origin's answer has been delivered, and the client gets
// no more (Connection: close).
func (c *forwardConn) CloseWrite() error { return c.Close() }

// owner returns the ID of the run or install whose uid opened c: the slot's uid's current
// run, or the installer's current install. Where the socket's owner cannot be read from
// /proc/net, a box with exactly one run or install going gives it that one.
func (e *Executor) owner(c net.Conn) (string, error) {
	uid, uidErr := peerUID(c)
	e.mu.Lock()
	defer e.mu.Unlock()
	if uidErr == nil {
		if uid == e.cfg.InstallerUID {
			for id := range e.installs {
				return id, nil
			}
			return "", errors.New("no install is going on for the installer's connection")
		}
		for id, r := range e.runs {
			if r.uid == uid {
				return id, nil
			}
		}
		if e.cfg.SessionHome != "" && uid == e.cfg.UIDBase {
			// A session's command (or what a call left running): the session's workspace.
			return sandbox.WorkspaceEgressOwner, nil
		}
		return "", fmt.Errorf("no run is going on for uid %d's connection", uid)
	}
	var ids []string
	for id := range e.runs {
		ids = append(ids, id)
	}
	for id := range e.installs {
		ids = append(ids, id)
	}
	if len(ids) == 1 {
		return ids[0], nil
	}
	return "", fmt.Errorf("the connection's owner is unknown (%v)", uidErr)
}

// peerUID returns the uid owning c's remote end (a socket in the box): the socket whose
// local address is c's remote address and remote address c's local one, looked up with
// sock_diag, else read from /proc/net/tcp or tcp6.
func peerUID(c net.Conn) (int, error) {
	remote, ok1 := c.RemoteAddr().(*net.TCPAddr)
	local, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, errors.New("not a TCP connection")
	}
	r, l := remote.AddrPort(), local.AddrPort()
	if r.Addr().Unmap().Is4() && l.Addr().Unmap().Is4() {
		v4 := func(a netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) }
		if uid, err := sockDiagUID(v4(r), v4(l), syscall.AF_INET); err == nil {
			return uid, nil
		}
	}
	if uid, err := sockDiagUID(r, l, syscall.AF_INET6); err == nil {
		return uid, nil
	}
	return procUID(r, l)
}

// procUID reads from /proc/net/tcp or tcp6 the uid owning the socket whose local end is r
// and remote end l.
func procUID(r, l netip.AddrPort) (int, error) {
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) < 8 || f[0] == "sl" {
				continue
			}
			la, err1 := procAddr(f[1])
			ra, err2 := procAddr(f[2])
			if err1 != nil || err2 != nil {
				continue
			}
			if sameAddrPort(la, r) && sameAddrPort(ra, l) {
				return strconv.Atoi(f[7])
			}
		}
	}
	return 0, fmt.Errorf("no socket %s → %s in /proc/net/tcp", r, l)
}

func sameAddrPort(a, b netip.AddrPort) bool {
	return a.Port() == b.Port() && a.Addr().Unmap() == b.Addr().Unmap()
}

// procAddr parses /proc/net/tcp's "0100007F:1F90" (the address in host byte order, 32-bit
// words) or tcp6's 32-hex-digit form.
func procAddr(s string) (netip.AddrPort, error) {
	hexAddr, hexPort, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, errors.New("no port")
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return netip.AddrPort{}, err
	}
	raw, err := hex.DecodeString(hexAddr)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, errors.New("bad address")
	}
	// Each 32-bit word is little-endian on the machines sandpit runs on (amd64, arm64).
	for i := 0; i+4 <= len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	a, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(a, uint16(port)), nil
}
