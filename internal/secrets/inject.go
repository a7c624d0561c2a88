package secrets

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Bound is a secret a run named, with its value: what the egress proxy may add.
type Bound struct {
	Secret
	Value []byte
}

// Use is one request that carried a secret's placeholder: Added says the proxy put the value
// in its place (a request to a bound host, in the bound place); otherwise Why says why the
// placeholder went as is. Status is the host's answer (0: none). The run's record keeps it.
type Use = sandbox.SecretUse

// Injector adds a run's bound secrets to its requests on the daemon's side of the egress
// proxy. For a host that a secret binds, it terminates the sandbox's TLS with a certificate of
// its CA, reads each request (HTTP/1.1 or HTTP/2, as the program offers), puts the value in the place of the placeholder where the
// binding allows it, and sends the request over its own TLS connection to the host, verified
// against Roots; the answer comes back with every occurrence of a value replaced by its
// placeholder. Other hosts are not touched.
type Injector struct {
	ca *CA
	// Roots verify the hosts' certificates (nil: the system's).
	roots *x509.CertPool
	log   *slog.Logger
}

// NewInjector returns an Injector presenting certificates of ca and verifying hosts against
// roots (nil: the system's trust store).
func NewInjector(ca *CA, roots *x509.CertPool, log *slog.Logger) *Injector {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Injector{ca: ca, roots: roots, log: log}
}

// Binds says whether a secret of bound is bound to host.
func Binds(bound []Bound, host string) bool {
	for _, b := range bound {
		if b.MatchHost(host) {
			return true
		}
	}
	return false
}

// Wrap returns the connection the program's bytes for host go through: upstream itself when
// no secret of bound is bound to host, else one end of a pipe whose other end the Injector
// serves until ctx ends or either side closes. record receives each request that carried a
// placeholder (it may be called from another goroutine).
func (in *Injector) Wrap(ctx context.Context, upstream net.Conn, host string, bound []Bound, record func(Use)) net.Conn {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if !Binds(bound, host) {
		return upstream
	}
	prog, ours := newPipe(upstream)
	go in.serve(ctx, ours, upstream, host, bound, record)
	return prog
}

// serve handles one connection: TLS when its first byte starts a handshake, else plain HTTP,
// which is carried as it is (the value is never added in clear text).
func (in *Injector) serve(ctx context.Context, ours *pipeConn, upstream net.Conn, host string, bound []Bound, record func(Use)) {
	defer upstream.Close()
	defer linger(ctx, ours)
	stop := context.AfterFunc(ctx, func() { ours.Close(); upstream.Close() })
	defer stop()
	br := bufio.NewReader(ours)
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	if first[0] != 0x16 {
		in.plain(ours, br, upstream, host, bound, record)
		return
	}
	leaf, err := in.ca.Leaf(host)
	if err != nil {
		in.log.Error("making a certificate for a bound host failed", "host", host, "error", err)
		return
	}
	srv := tls.Server(&readerConn{Conn: ours, r: br}, &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12})
	if err := srv.HandshakeContext(ctx); err != nil {
		return
	}
	if srv.ConnectionState().NegotiatedProtocol == "h2" {
		in.serveH2(ctx, srv, upstream, host, bound, record)
		return
	}
	up := tls.Client(upstream, &tls.Config{ServerName: host, RootCAs: in.roots, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = up.HandshakeContext(hctx)
	cancel()
	if err != nil {
		// The answer follows the program's request (read, never sent): a program still
		// writing it would otherwise see its write fail, not the answer.
		if req, rerr := http.ReadRequest(bufio.NewReader(&headLimit{r: srv, n: maxHead})); rerr == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(req.Body, 1<<20))
			writeProxyError(srv, http.StatusBadGateway, fmt.Sprintf("sandpit egress: %s: its certificate did not verify against the daemon's trust store: %v", host, err))
		}
		return
	}
	in.exchange(srv, up, host, bound, record)
}

// maxHead bounds a request's or an answer's head (its start line and header fields) in
// exchange, as net/http's server bounds a request's (http.DefaultMaxHeaderBytes, 1 MiB).
// http.ReadRequest has no bound of its own: a head that never ended was held whole in the
// daemon's memory, uncounted by the run's egress caps (red team, 5 December: 300 MiB of one
// header line took the daemon to 1.27 GB and both slots' executors past their heartbeats).
const maxHead = http.DefaultMaxHeaderBytes

// headLimit is the reader under exchange's bufio.Readers: while n is not negative, at most n
// more bytes are read (a head); body lifts the bound for what follows it.
type headLimit struct {
	r io.Reader
	n int64
}

func (l *headLimit) head() { l.n = maxHead }
func (l *headLimit) body() { l.n = -1 }

// over reports whether the head in progress reached maxHead.
func (l *headLimit) over() bool { return l.n == 0 }

func (l *headLimit) Read(p []byte) (int, error) {
	if l.n == 0 {
		return 0, errHeadTooLarge
	}
	if l.n > 0 && int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	if l.n > 0 {
		l.n -= int64(n)
	}
	return n, err
}

var errHeadTooLarge = fmt.Errorf("an HTTP head longer than %d bytes", maxHead)

// exchange relays HTTP/1.1 requests from the program (prog) to the host (up), one at a time.
func (in *Injector) exchange(prog, up net.Conn, host string, bound []Bound, record func(Use)) {
	pl, ul := &headLimit{r: prog, n: -1}, &headLimit{r: up, n: -1}
	pr, ur := bufio.NewReader(pl), bufio.NewReader(ul)
	roundTrip := func(req *http.Request) (*http.Response, error) {
		if err := req.Write(up); err != nil {
			return nil, err
		}
		return readAnswer(ul, ur, req)
	}
	for {
		pl.head()
		req, err := http.ReadRequest(pr)
		over := pl.over()
		pl.body()
		if err != nil {
			if over {
				writeProxyError(prog, http.StatusRequestHeaderFieldsTooLarge,
					fmt.Sprintf("sandpit: the request's head (its line and header fields) is longer than %d bytes\n", maxHead))
			}
			return
		}
		req.Header.Del("Upgrade") // no protocol switch: what follows could not be scrubbed
		if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
			// Answered here, so that the host sends no interim answer (see readFinal).
			req.Header.Del("Expect")
			if _, err := io.WriteString(prog, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
				return
			}
		}
		resp, status, text := forward(req, host, bound, record, roundTrip)
		if resp == nil {
			writeProxyError(prog, status, text)
			return
		}
		err = resp.Write(prog)
		resp.Body.Close()
		if err != nil || resp.Close || req.Close || resp.StatusCode == http.StatusSwitchingProtocols {
			return
		}
	}
}

// readAnswer is readFinal from r, a bufio.Reader over l, with the answer's head bounded at
// maxHead: a bound host is the operator's choice, not the daemon's to trust with its memory.
func readAnswer(l *headLimit, r *bufio.Reader, req *http.Request) (*http.Response, error) {
	l.head()
	resp, err := readFinal(r, req)
	over := l.over()
	l.body()
	if err != nil && over {
		return nil, fmt.Errorf("the host's answer: %w", errHeadTooLarge)
	}
	return resp, err
}

// readFinal reads the host's final answer to req from r, dropping interim (1xx) ones: taken
// for the answer, a 100 Continue or a 103 Early Hints shifted every later answer of the
// connection onto the next request, and the answer to a request carrying a value went back,
// unchecked, as the answer to one without (red team, 5 December: a compressed echo past the
// identity check). 101 is final (an upgrade, which exchange never asks for).
func readFinal(r *bufio.Reader, req *http.Request) (*http.Response, error) {
	for {
		resp, err := http.ReadResponse(r, req)
		if err != nil || resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, err
		}
		resp.Body.Close()
	}
}

// forward adds the bound secrets to req where their bindings allow (see rewrite), sends it
// with roundTrip, records each use of a placeholder with the host's status, and returns the
// answer scrubbed of every value; or, when there is no answer to pass on, nil with a status
// and a text for the program (which never hold a value).
func forward(req *http.Request, host string, bound []Bound, record func(Use), roundTrip func(*http.Request) (*http.Response, error)) (*http.Response, int, string) {
	var uses []Use
	rewrite(req, host, bound, func(u Use) { uses = append(uses, u) })
	// Every answer of a bound host is scrubbed of the values, also of requests carrying none
	// (a host may keep a value and serve it later): each must come whole and uncompressed. A
	// range (bytes=0-14, then bytes=15-) would return a value in pieces the scrubber cannot
	// match.
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Del("Range")
	req.Header.Del("If-Range")
	resp, err := roundTrip(req)
	if err != nil {
		report(record, uses, 0)
		return nil, http.StatusBadGateway, fmt.Sprintf("sandpit egress: the exchange with %s failed", host)
	}
	report(record, uses, resp.StatusCode)
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		// Asked for identity, the host compressed anyway: a value inside could not be
		// scrubbed.
		resp.Body.Close()
		return nil, http.StatusBadGateway, fmt.Sprintf("sandpit egress: %s answered with Content-Encoding %s though asked for none; "+
			"an answer from a host a secret is bound to must come uncompressed, so that the secret can be kept out of it", host, clip(enc, 32))
	}
	scrubResponse(resp, bound)
	return resp, 0, ""
}

func report(record func(Use), uses []Use, status int) {
	if record == nil {
		return
	}
	for _, u := range uses {
		u.Status = status
		record(u)
	}
}

// rewrite puts each bound secret's value in req where its binding allows (a request whose
// Host is host, in the bound header, the header's whole value the binding's format around the
// placeholder) and passes every use of a placeholder, added or not, to use (those in the body
// as the body is read). Placeholders anywhere else (the URL, another header, the body, a Host
// that is another name) stay as they are.
func rewrite(req *http.Request, host string, bound []Bound, use func(Use)) {
	reqHost := strings.TrimSuffix(strings.ToLower(req.Host), ".")
	if h, _, err := net.SplitHostPort(reqHost); err == nil {
		reqHost = h
	}
	for _, b := range bound {
		ph := Placeholder(b.Name)
		seen := func(why string) { use(Use{Secret: b.Name, Host: host, Why: why}) }
		if strings.Contains(req.URL.String(), ph) || strings.Contains(req.RequestURI, ph) {
			seen("the placeholder was in the URL, where the value never goes")
		}
		added := false
		for name, vals := range req.Header {
			for i, v := range vals {
				if !carries(v, ph) {
					continue
				}
				switch {
				case !b.MatchHost(host):
					seen("the secret is not bound to this host")
				case reqHost != host:
					seen(fmt.Sprintf("the request's Host (%s) is not the host connected to", clip(reqHost, 64)))
				case name != b.Header:
					seen(fmt.Sprintf("the placeholder was in the header %s; the secret is bound to %s", clip(name, 64), b.Header))
				case added:
					seen("the placeholder was sent twice in the bound header")
				default:
					if nv, ok := fill(v, b); ok {
						vals[i] = nv
						added = true
						use(Use{Secret: b.Name, Host: host, Added: true})
					} else {
						seen("the header's value is not the binding's format around the placeholder")
					}
				}
			}
		}
		if req.Body != nil && req.Body != http.NoBody {
			req.Body = &watchBody{ReadCloser: req.Body, ph: []byte(ph), found: func() { seen("the placeholder was in the body, where the value never goes") }}
		}
	}
}

// carries says whether a header's value v holds the placeholder ph, also inside basic
// authentication's base64.
func carries(v, ph string) bool {
	if strings.Contains(v, ph) {
		return true
	}
	if enc, ok := strings.CutPrefix(v, "Basic "); ok {
		dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
		return err == nil && strings.Contains(string(dec), ph)
	}
	return false
}

// fill returns the bound header's value v with the secret's value in place of its
// placeholder, when v is exactly the binding's format (or basic authentication of its user)
// around the placeholder.
func fill(v string, b Bound) (string, bool) {
	ph := Placeholder(b.Name)
	if b.BasicUser != "" {
		enc, ok := strings.CutPrefix(v, "Basic ")
		if !ok {
			return "", false
		}
		dec, err := base64.StdEncoding.DecodeString(enc)
		if err != nil || string(dec) != b.BasicUser+":"+ph {
			return "", false
		}
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(b.BasicUser+":"+string(b.Value))), true
	}
	if v != strings.Replace(b.Format, SecretToken, ph, 1) {
		return "", false
	}
	return strings.Replace(b.Format, SecretToken, string(b.Value), 1), true
}

// watchBody calls found (once) when the body carries ph, even split across reads.
type watchBody struct {
	io.ReadCloser
	ph    []byte
	tail  []byte
	done  bool
	found func()
}

func (w *watchBody) Read(p []byte) (int, error) {
	n, err := w.ReadCloser.Read(p)
	if !w.done && n > 0 {
		buf := append(w.tail, p[:n]...)
		if bytes.Contains(buf, w.ph) {
			w.done = true
			w.found()
		}
		keep := min(len(buf), len(w.ph)-1)
		w.tail = append([]byte(nil), buf[len(buf)-keep:]...)
	}
	return n, err
}

// scrubResponse replaces every value of bound in resp's headers and body by its placeholder.
// The body's length may change, so it goes chunked.
func scrubResponse(resp *http.Response, bound []Bound) {
	var pairs []string
	for _, b := range bound {
		pairs = append(pairs, string(b.Value), Placeholder(b.Name))
		if b.BasicUser != "" {
			enc := base64.StdEncoding.EncodeToString([]byte(b.BasicUser + ":" + string(b.Value)))
			pairs = append(pairs, enc, base64.StdEncoding.EncodeToString([]byte(b.BasicUser+":"+Placeholder(b.Name))))
		}
	}
	pairs = longestFirst(pairs)
	r := strings.NewReplacer(pairs...)
	// The reason phrase is the host's own text: the standard one replaces it.
	resp.Status = fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	scrubHeader(resp.Header, r, pairs)
	scrubHeader(resp.Trailer, r, pairs)
	if resp.Body == nil || resp.Body == http.NoBody || resp.ContentLength == 0 {
		return
	}
	s := newScrubber(resp.Body, pairs)
	// A trailer's values arrive with the end of the body, after this: scrubbed then.
	s.atEOF = func() { scrubHeader(resp.Trailer, r, pairs) }
	resp.Body = s
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
	resp.TransferEncoding = []string{"chunked"}
}

// longestFirst returns pairs (old, new, old, new…) ordered by the old strings' length, longest
// first: where one value starts another, the longer is replaced whole (strings.Replacer and
// the scrubber take the first old string that matches at a place), never its start alone
// with its tail left readable.
func longestFirst(pairs []string) []string {
	type pair struct{ old, new string }
	ps := make([]pair, 0, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		ps = append(ps, pair{pairs[i], pairs[i+1]})
	}
	slices.SortStableFunc(ps, func(a, b pair) int { return len(b.old) - len(a.old) })
	out := make([]string, 0, len(pairs))
	for _, p := range ps {
		out = append(out, p.old, p.new)
	}
	return out
}

// scrubHeader replaces every value of pairs (value, placeholder, …) in h's values by its
// placeholder, and drops a field whose name holds a value in any case (names are
// canonicalized, X-Value-Xyz for value-xyz).
func scrubHeader(h http.Header, r *strings.Replacer, pairs []string) {
	for name, vals := range h {
		for i := 0; i+1 < len(pairs); i += 2 {
			if strings.Contains(strings.ToLower(name), strings.ToLower(pairs[i])) {
				delete(h, name)
			}
		}
		for i, v := range vals {
			vals[i] = r.Replace(v)
		}
	}
}

// scrubber replaces each old string of pairs (old, new, old, new…) by its new one in a stream,
// holding back the last bytes of each read that could start an old one.
type scrubber struct {
	src   io.ReadCloser
	olds  [][]byte
	news  [][]byte
	hold  int
	buf   []byte // read, not yet scrubbed
	out   []byte // scrubbed, not yet returned
	eof   bool
	chunk []byte
	atEOF func() // called once the source has ended (nil: nothing)
}

func newScrubber(src io.ReadCloser, pairs []string) *scrubber {
	s := &scrubber{src: src, chunk: make([]byte, 32<<10)}
	for i := 0; i+1 < len(pairs); i += 2 {
		s.olds = append(s.olds, []byte(pairs[i]))
		s.news = append(s.news, []byte(pairs[i+1]))
		s.hold = max(s.hold, len(pairs[i])-1)
	}
	return s
}

func (s *scrubber) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.eof && len(s.buf) == 0 {
			return 0, io.EOF
		}
		if !s.eof {
			n, err := s.src.Read(s.chunk)
			s.buf = append(s.buf, s.chunk[:n]...)
			if err == io.EOF {
				s.eof = true
				if s.atEOF != nil {
					s.atEOF()
				}
			} else if err != nil {
				return 0, err
			}
		}
		s.scrub()
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

// scrub moves what of buf is settled to out, replaced: everything up to its last whole old
// string, and then all but the last hold bytes (which may start an old string the next read
// completes), or all at the end of the stream.
func (s *scrubber) scrub() {
	for {
		at, which := -1, 0
		for i, o := range s.olds {
			if k := bytes.Index(s.buf, o); k >= 0 && (at < 0 || k < at) {
				at, which = k, i
			}
		}
		if at < 0 {
			break
		}
		if !s.eof && s.mayGrow(at, which) {
			// A longer old string may start here, its end not read yet: wait for it.
			s.out = append(s.out, s.buf[:at]...)
			s.buf = append([]byte(nil), s.buf[at:]...)
			return
		}
		s.out = append(append(s.out, s.buf[:at]...), s.news[which]...)
		s.buf = s.buf[at+len(s.olds[which]):]
	}
	keep := min(s.hold, len(s.buf))
	if s.eof {
		keep = 0
	}
	s.out = append(s.out, s.buf[:len(s.buf)-keep]...)
	s.buf = append([]byte(nil), s.buf[len(s.buf)-keep:]...)
}

// mayGrow says whether an old string longer than olds[which] could match at buf[at:] once
// more is read (what is read of it so far is its start).
func (s *scrubber) mayGrow(at, which int) bool {
	rest := s.buf[at:]
	for _, o := range s.olds {
		if len(o) > len(s.olds[which]) && len(rest) < len(o) && bytes.HasPrefix(o, rest) {
			return true
		}
	}
	return false
}

func (s *scrubber) Close() error { return s.src.Close() }

// plain carries a clear-text connection as it is, recording each placeholder the program
// sends: the value is never added outside TLS (a plain-HTTP request to a bound name could be
// read on any network between).
func (in *Injector) plain(ours net.Conn, br *bufio.Reader, upstream net.Conn, host string, bound []Bound, record func(Use)) {
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(ours, upstream)
		ours.Close()
	})
	var src io.Reader = br
	for _, b := range bound {
		name := b.Name
		src = &watchBody{ReadCloser: io.NopCloser(src), ph: []byte(Placeholder(name)), found: func() {
			if record != nil {
				record(Use{Secret: name, Host: host, Why: "the placeholder was sent over plain HTTP, where the value never goes"})
			}
		}}
	}
	_, _ = io.Copy(upstream, src)
	if cw, ok := upstream.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	wg.Wait()
}

// writeProxyError answers the program with status and text (which never holds a value).
func writeProxyError(w io.Writer, status int, text string) {
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(text), text)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// lingerTime bounds how long linger drops what the program still sends.
const lingerTime = 5 * time.Second

// linger ends the Injector's side of the pipe as a server closes a connection (Go's own does
// the same): the program reads the end of what was written, while what it still sends is read
// and dropped, until it closes its side, ctx ends or lingerTime passes. Closed at once, a
// write of the program's still under way failed, the egress stream aborted on it, and the
// abort dropped the answer not yet delivered to the box: a urllib GET (Connection: close)
// of a bound host got its headers and no body (bench, 5 December).
func linger(ctx context.Context, ours *pipeConn) {
	_ = ours.CloseWrite()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_, _ = io.Copy(io.Discard, ours)
	}()
	t := time.NewTimer(lingerTime)
	defer t.Stop()
	select {
	case <-drained:
	case <-ctx.Done():
	case <-t.C:
	}
	ours.Close()
}

// readerConn is a net.Conn whose reads come from r (a bufio.Reader over it that has peeked).
type readerConn struct {
	net.Conn
	r io.Reader
}

func (c *readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// pipeConn is one end of an in-memory connection with half-close: CloseWrite ends what the
// other end reads. Deadlines are not kept (the egress stream and the Injector's context bound
// its life).
type pipeConn struct {
	r    *io.PipeReader
	w    *io.PipeWriter
	addr net.Conn // for the addresses
	once sync.Once
}

func newPipe(upstream net.Conn) (*pipeConn, *pipeConn) {
	ar, bw := io.Pipe()
	br, aw := io.Pipe()
	return &pipeConn{r: ar, w: aw, addr: upstream}, &pipeConn{r: br, w: bw, addr: upstream}
}

func (c *pipeConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *pipeConn) Write(p []byte) (int, error) { return c.w.Write(p) }

// CloseWrite ends what the other end reads.
func (c *pipeConn) CloseWrite() error { return c.w.Close() }

func (c *pipeConn) Close() error {
	c.once.Do(func() {
		c.w.Close()
		c.r.CloseWithError(net.ErrClosed)
	})
	return nil
}

func (c *pipeConn) LocalAddr() net.Addr              { return c.addr.LocalAddr() }
func (c *pipeConn) RemoteAddr() net.Addr             { return c.addr.RemoteAddr() }
func (c *pipeConn) SetDeadline(time.Time) error      { return nil }
func (c *pipeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *pipeConn) SetWriteDeadline(time.Time) error { return nil }
