package egress

import (
	"bufio"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Forward is an HTTP forward proxy (RFC 9110 §9.3.6 and §7.1) whose every connection goes
// through one dialer, a template build's Gate: CONNECT host:port for HTTPS and anything
// tunnelled, and absolute-form requests ("GET http://host/path") for plain HTTP, as apt and
// pip send them when http_proxy and https_proxy name the proxy. It decides nothing itself: a
// destination the dialer refuses answers 403 with the refusal's reason, one it cannot reach
// 502. A client must give the proxy's password (Proxy-Authorization, any user name: the
// password in the proxy URL a build is given), else 407: the proxy listens where other
// containers may reach it. Create it with NewForward; Close refuses new requests and waits
// for those under way (close the Gate first: it ends their connections).
type Forward struct {
	dial     sandbox.EgressDialer
	password string
	http     *http.Transport
	proxy    *httputil.ReverseProxy

	mu      sync.Mutex
	closed  bool
	tunnels map[net.Conn]struct{} // the clients' side of the tunnels under way
	wg      sync.WaitGroup        // requests and tunnels under way
}

// NewForward returns a Forward dialing through d for clients that give password.
func NewForward(d sandbox.EgressDialer, password string) *Forward {
	f := &Forward{dial: d, password: password, tunnels: map[net.Conn]struct{}{}}
	f.http = &http.Transport{
		Proxy: nil, // never the daemon's own proxy settings: d is the only way out
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, port, err := splitHostPort(addr)
			if err != nil {
				return nil, err
			}
			return d.DialEgress(ctx, host, port)
		},
	}
	f.proxy = &httputil.ReverseProxy{
		// The request is already absolute: it goes where it names, as it is, but for its
		// hop-by-hop headers (Proxy-Authorization and Proxy-Connection among them), which
		// ReverseProxy drops.
		Rewrite:   func(*httputil.ProxyRequest) {},
		Transport: f.http,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			refuse(w, err)
		},
	}
	return f
}

// ServeHTTP serves one request of a client that names this proxy.
func (f *Forward) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !f.enter() {
		http.Error(w, "the build this proxy served has ended", http.StatusServiceUnavailable)
		return
	}
	defer f.wg.Done()
	if !f.authorized(r) {
		w.Header().Set("Proxy-Authenticate", `Basic realm="sandpit build"`)
		http.Error(w, "this proxy serves one template build: give the password of the proxy URL in http_proxy", http.StatusProxyAuthRequired)
		return
	}
	if r.Method == http.MethodConnect {
		f.tunnel(w, r)
		return
	}
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		http.Error(w, fmt.Sprintf("%s %s is not a proxy request: this is the build's HTTP proxy; send CONNECT host:port, or an absolute http:// URL", r.Method, r.RequestURI),
			http.StatusBadRequest)
		return
	}
	f.proxy.ServeHTTP(w, r)
}

// tunnel answers CONNECT: the destination dialed through the dialer, then bytes both ways
// until both sides have stopped sending, or Close.
func (f *Forward) tunnel(w http.ResponseWriter, r *http.Request) {
	host, port, err := splitHostPort(r.Host)
	if err != nil {
		http.Error(w, fmt.Sprintf("CONNECT %s: %v", r.Host, err), http.StatusBadRequest)
		return
	}
	up, err := f.dial.DialEgress(r.Context(), host, port)
	if err != nil {
		refuse(w, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "this connection cannot be tunnelled (HTTP/1.1 only)", http.StatusHTTPVersionNotSupported)
		return
	}
	down, buf, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	if _, err := io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		up.Close()
		down.Close()
		return
	}
	f.mu.Lock()
	if f.closed { // Close ran since this request came in
		f.mu.Unlock()
		up.Close()
		down.Close()
		return
	}
	f.tunnels[down] = struct{}{}
	f.mu.Unlock()
	splice(down, buf.Reader, up) // within the request's count: Close waits for it
	f.mu.Lock()
	delete(f.tunnels, down)
	f.mu.Unlock()
}

// enter counts a request under way, unless the proxy is closed.
func (f *Forward) enter() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.wg.Add(1)
	return true
}

// authorized reports whether r gives the proxy's password.
func (f *Forward) authorized(r *http.Request) bool {
	_, pass, ok := (&http.Request{Header: http.Header{"Authorization": r.Header.Values("Proxy-Authorization")}}).BasicAuth()
	return ok && subtle.ConstantTimeCompare([]byte(pass), []byte(f.password)) == 1
}

// splice copies client (its bytes read ahead in br first) to up and up to client until
// both directions end (a side that stops sending half-closes the other's), then closes both.
func splice(client net.Conn, br *bufio.Reader, up net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(client, up)
		closeWrite(client)
	}()
	io.Copy(up, io.MultiReader(io.LimitReader(br, int64(br.Buffered())), client))
	closeWrite(up)
	<-done
	up.Close()
	client.Close()
}

// closeWrite half-closes c when it can, else closes it.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// Close refuses new requests, ends the idle upstream connections and waits for the requests
// and tunnels under way, which end when their Gate is closed.
func (f *Forward) Close() {
	f.mu.Lock()
	f.closed = true
	for c := range f.tunnels {
		c.Close() // a client that never stops sending ends its tunnel too
	}
	f.mu.Unlock()
	f.http.CloseIdleConnections()
	f.wg.Wait()
	f.http.CloseIdleConnections() // those a request put back meanwhile
}

// refuse answers a dial's failure: 403 naming why a refused destination was refused, else
// 502.
func refuse(w http.ResponseWriter, err error) {
	if r, ok := errors.AsType[*Refusal](err); ok {
		http.Error(w, r.Error(), http.StatusForbidden)
		return
	}
	http.Error(w, err.Error(), http.StatusBadGateway)
}

// splitHostPort splits "host:port" (a port required, 1 to 65535).
func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("the address %q is not host:port", addr)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("the port of %q is not from 1 to 65535", addr)
	}
	return host, port, nil
}
