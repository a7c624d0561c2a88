package egress

import (
	"bufio"
	"context"
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
// 502. Create it with NewForward; Close ends its idle upstream connections (the Gate's Close
// ends the rest).
type Forward struct {
	dial  sandbox.EgressDialer
	http  *http.Transport
	proxy *httputil.ReverseProxy
	wg    sync.WaitGroup
}

// NewForward returns a Forward dialing through d.
func NewForward(d sandbox.EgressDialer) *Forward {
	f := &Forward{dial: d}
	f.http = &http.Transport{
		Proxy: nil, // never the daemon's own proxy settings: d is the only way out
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, port, err := splitHostPort(addr)
			if err != nil {
				return nil, err
			}
			return d.DialEgress(ctx, host, port)
		},
		ForceAttemptHTTP2: false,
	}
	f.proxy = &httputil.ReverseProxy{
		// The request is already absolute: it goes where it names, its hop-by-hop headers
		// (Proxy-Authorization and Proxy-Connection among them) dropped by ReverseProxy.
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.Out.URL, pr.Out.Host = pr.In.URL, pr.In.Host },
		Transport: f.http,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			refuse(w, err)
		},
	}
	return f
}

// ServeHTTP serves one request of a client that names this proxy.
func (f *Forward) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
// until either side ends.
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
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		splice(down, buf.Reader, up)
	}()
}

// splice copies client (its bytes read ahead in br first) to up and up to client until
// either ends, then closes both.
func splice(client net.Conn, br *bufio.Reader, up net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(client, up)
		client.Close()
	}()
	io.Copy(up, io.MultiReader(io.LimitReader(br, int64(br.Buffered())), client))
	up.Close()
	<-done
}

// Close ends the proxy's idle upstream connections and waits for its tunnels, which end
// when their Gate is closed.
func (f *Forward) Close() {
	f.http.CloseIdleConnections()
	f.wg.Wait()
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
