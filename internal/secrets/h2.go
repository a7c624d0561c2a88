package secrets

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// serveH2 serves a program that chose HTTP/2 for host (prog, its TLS done): its streams are
// requests, each rewritten and scrubbed as an HTTP/1.1 one is (forward), sent over one TLS
// connection to the host, dialed at the first request: HTTP/2 when the host offers it (the
// streams go on at once), else HTTP/1.1, one request at a time. Trailers (gRPC's status) pass
// both ways, scrubbed too.
func (in *Injector) serveH2(ctx context.Context, prog *tls.Conn, upstream net.Conn, host string, bound []Bound, record func(Use)) {
	up := &h2Upstream{in: in, conn: upstream, host: host}
	defer up.close()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect { // a tunnel: what went through could not be scrubbed
			http.Error(w, "sandpit egress: CONNECT is not carried on a connection to a host a secret is bound to", http.StatusMethodNotAllowed)
			return
		}
		if err := up.dial(ctx); err != nil {
			http.Error(w, fmt.Sprintf("sandpit egress: %s: %v", host, err), http.StatusBadGateway)
			return
		}
		out := r.Clone(r.Context())
		out.RequestURI = ""
		out.URL.Scheme, out.URL.Host = "https", r.Host
		resp, status, text := forward(out, host, bound, record, func(req *http.Request) (*http.Response, error) {
			return up.roundTrip(ctx, req)
		})
		if resp == nil {
			http.Error(w, text, status)
			return
		}
		defer resp.Body.Close()
		for k, vs := range resp.Header {
			if hopHeader(k) {
				continue
			}
			w.Header()[k] = vs
		}
		for k := range resp.Trailer {
			w.Header().Add("Trailer", k)
		}
		w.WriteHeader(resp.StatusCode)
		copyFlushing(w, resp.Body)
		// The trailers' values are known once the body has ended; scrubbed as the headers are.
		scrubbed := &http.Response{Header: http.Header{}, Trailer: resp.Trailer}
		scrubResponse(scrubbed, bound)
		for k, vs := range scrubbed.Trailer {
			w.Header()[http.TrailerPrefix+k] = vs
		}
	})
	// A stream the host has not taken yet holds its decoded headers in the daemon's memory,
	// uncounted by the run's caps (none of it is sent): an HTTP/1.1 host takes one request at
	// a time, so the program may open one stream at a time to it, and each stream's head is
	// bounded (red team, 6 December: behind one slow answer of an HTTP/1.1 host, 240 waiting
	// streams of 1 MiB of headers on each of 4 connections took the daemon to 1.05 GB). The
	// host is dialed first, so that its protocol is known when the program's settings are sent.
	streams := uint32(maxH2Streams)
	if up.dial(ctx) == nil && up.h1 != nil {
		streams = 1
	}
	(&http2.Server{IdleTimeout: 5 * time.Minute, MaxConcurrentStreams: streams}).ServeConn(prog,
		&http2.ServeConnOpts{Context: ctx, Handler: handler, BaseConfig: &http.Server{MaxHeaderBytes: maxH2Head}})
}

// maxH2Streams and maxH2Head bound what an HTTP/2 program's connection to a bound HTTP/2 host
// holds at once: its open streams, and each one's head (decoded). With the run's 256
// connections, 16 streams of 64 KiB are at most 256 MiB, as 256 HTTP/1.1 heads of maxHead
// are.
const (
	maxH2Streams = 16
	maxH2Head    = 64 << 10
)

// h2Upstream is the one connection to the host behind a program's HTTP/2 connection.
type h2Upstream struct {
	in   *Injector
	conn net.Conn
	host string

	once   sync.Once
	err    error
	h2     *http2.ClientConn
	h1     *tls.Conn
	h1l    *headLimit // under h1r: each answer's head is bounded (see readAnswer)
	h1r    *bufio.Reader
	h1Busy sync.Mutex // HTTP/1.1: one request at a time, held until its answer's body ends
}

func (u *h2Upstream) dial(ctx context.Context) error {
	u.once.Do(func() {
		tc := tls.Client(u.conn, &tls.Config{ServerName: u.host, RootCAs: u.in.roots, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12})
		hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := tc.HandshakeContext(hctx); err != nil {
			u.err = fmt.Errorf("its certificate did not verify against the daemon's trust store: %w", err)
			return
		}
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			// The answers' heads are bounded as an HTTP/1.1 host's are (maxHead).
			u.h2, u.err = (&http2.Transport{MaxHeaderListSize: maxHead}).NewClientConn(tc)
			return
		}
		u.h1, u.h1l = tc, &headLimit{r: tc, n: -1}
		u.h1r = bufio.NewReader(u.h1l)
	})
	return u.err
}

func (u *h2Upstream) roundTrip(ctx context.Context, req *http.Request) (*http.Response, error) {
	if err := u.dial(ctx); err != nil {
		return nil, err
	}
	if u.h2 != nil {
		return u.h2.RoundTrip(req)
	}
	u.h1Busy.Lock()
	if err := req.Write(u.h1); err != nil {
		u.h1Busy.Unlock()
		return nil, err
	}
	resp, err := readAnswer(u.h1l, u.h1r, req)
	if err != nil {
		u.h1Busy.Unlock()
		return nil, err
	}
	resp.Body = &unlockOnClose{ReadCloser: resp.Body, unlock: u.h1Busy.Unlock}
	return resp, nil
}

func (u *h2Upstream) close() {
	if u.h2 != nil {
		_ = u.h2.Close()
	}
	_ = u.conn.Close()
}

// unlockOnClose calls unlock once, when the body is closed.
type unlockOnClose struct {
	io.ReadCloser
	once   sync.Once
	unlock func()
}

func (b *unlockOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.unlock)
	return err
}

// hopHeader says whether a header belongs to one connection (RFC 9110 section 7.6.1), not to
// be passed from an HTTP/1.1 answer into an HTTP/2 one.
func hopHeader(k string) bool {
	switch strings.ToLower(k) {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "trailer":
		return true
	}
	return false
}

// copyFlushing copies an answer's body to w, flushing each read, so that streamed answers
// (server-sent events, gRPC streams) arrive as they are sent.
func copyFlushing(w http.ResponseWriter, body io.Reader) {
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if err != nil {
			return
		}
	}
}
