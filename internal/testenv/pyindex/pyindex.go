// Package pyindex serves a PEP 503 "simple" Python package index from the test process, with
// pure-Python wheels built in Go, so that pip inside a container on Docker's default bridge
// network can install packages without the internet. Only tests import it.
//
//	x := pyindex.New(t)
//	x.AddWheel("tinypkg", "1.0", `VALUE = "1.0"`)
//	x.AddWheel("pkg-b", "1.0", `VALUE = "b"`, "tinypkg>=1")
//	// in the container, on the default bridge network:
//	//   python3 -m pip install --target /tmp/t --index-url <x.URL()> --trusted-host <x.Host()> pkg-b
//	if x.Requests("pkg-b") == 0 { t.Error("pip never asked the index") }
//
// The index listens on all interfaces, on a free port. Projects are served at
// /simple/<normalised-name>/ and their files at /files/<file>; a project page links each file
// as ../../files/<file>#sha256=<hex>, so pip checks what it downloads.
package pyindex

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// Index is a running package index. Its methods are safe to call while it serves.
type Index struct {
	gateway netip.Addr
	port    int
	srv     *http.Server
	stop    chan struct{} // closed when the index stops: releases stalled requests
	served  chan struct{} // closed when Serve has returned

	mu       sync.Mutex
	projects map[string]*project  // by normalised name
	files    map[string]*file     // by file name
	stalled  map[string]stallMode // normalised names
	requests map[string]int       // normalised names
}

type project struct {
	name  string   // as first given to AddWheel, the text of its link on /simple/
	files []string // sorted
}

type file struct {
	project string // normalised name
	data    []byte
	sha256  string // hex
}

// New starts an index on 0.0.0.0 and a free port, and stops it when the test ends (t.Cleanup).
// It asks the Docker engine for the default bridge's gateway, which is how containers reach
// the test process; without an engine it skips the test, or fails it when
// SANDPIT_REQUIRE_DOCKER=1 (the testenv convention).
func New(t testing.TB) *Index {
	t.Helper()
	gw, err := bridgeGateway()
	if err != nil {
		if os.Getenv("SANDPIT_REQUIRE_DOCKER") == "1" {
			t.Fatalf("SANDPIT_REQUIRE_DOCKER=1 but: %v", err)
		}
		t.Skipf("skipping a test that needs a package index for containers: %v (set SANDPIT_REQUIRE_DOCKER=1 to make this a failure)", err)
	}
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatalf("pyindex: listening: %v", err)
	}
	x := &Index{
		gateway:  gw,
		port:     ln.Addr().(*net.TCPAddr).Port,
		stop:     make(chan struct{}),
		served:   make(chan struct{}),
		projects: map[string]*project{},
		files:    map[string]*file{},
		stalled:  map[string]stallMode{},
		requests: map[string]int{},
	}
	x.srv = &http.Server{Handler: x, ReadHeaderTimeout: 30 * time.Second}
	go func() {
		defer close(x.served)
		_ = x.srv.Serve(ln)
	}()
	t.Cleanup(x.close)
	return x
}

// close releases stalled requests, then stops the server and waits for every handler.
func (x *Index) close() {
	close(x.stop)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := x.srv.Shutdown(ctx); err != nil {
		_ = x.srv.Close()
	}
	<-x.served
}

// URL is the index URL as seen from a container on the default bridge network:
// "http://<bridge gateway>:<port>/simple/", for pip's --index-url.
func (x *Index) URL() string {
	return "http://" + net.JoinHostPort(x.gateway.String(), strconv.Itoa(x.port)) + "/simple/"
}

// Host is the bridge gateway's address, the host part of URL, for pip's --trusted-host (or
// PIP_TRUSTED_HOST): pip ignores a plain-HTTP index elsewhere than on localhost without it.
func (x *Index) Host() string {
	return x.gateway.String()
}

// HostURL is the index URL via 127.0.0.1, for the test process and pip on the host.
func (x *Index) HostURL() string {
	return "http://127.0.0.1:" + strconv.Itoa(x.port) + "/simple/"
}

// AddWheel builds a pure-Python wheel (py3-none-any) of name==version and serves it. The wheel
// holds one top-level package, named like the wheel's distribution (name lowercased, runs of
// "-", "_" and "." made one "_": "Pkg-B" gives pkg_b), whose __init__.py is source, e.g.
// `VALUE = "1.0"`; requires become its Requires-Dist lines (PEP 508, e.g. "tinypkg>=1").
// Adding the same name and version again replaces the wheel.
func (x *Index) AddWheel(name, version, source string, requires ...string) {
	fname, data := buildWheel(name, version, source, requires)
	sum := sha256.Sum256(data)
	norm := normalize(name)
	x.mu.Lock()
	defer x.mu.Unlock()
	p := x.projects[norm]
	if p == nil {
		p = &project{name: name}
		x.projects[norm] = p
	}
	if !slices.Contains(p.files, fname) {
		p.files = append(p.files, fname)
		slices.Sort(p.files)
	}
	x.files[fname] = &file{project: norm, data: data, sha256: hex.EncodeToString(sum[:])}
}

// Stall makes every request for the project (its page, under any spelling, and its files)
// hang: the connection stays open and no answer comes until the client gives up or the index
// stops. The project need not have wheels.
func (x *Index) Stall(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.stalled[normalize(name)] = silent
}

// Trickle makes every request for the project answer 200 and then send one space a second,
// never ending, until the client gives up or the index stops: a client's read timeout (pip's
// --timeout) never fires, so only a deadline of the whole install stops it.
func (x *Index) Trickle(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.stalled[normalize(name)] = trickle
}

// stallMode is how a stalled project's requests hang.
type stallMode int

const (
	answered stallMode = iota // not stalled
	silent                    // no answer at all
	trickle                   // an answer that never ends
)

// Requests is how many requests for the project the index has received: its /simple/ page
// under any spelling (redirects included), its files, and stalled requests. Zero means pip
// never asked; exact counts follow pip's resolver, which may fetch several versions' files
// when it backtracks (pip 23 does for Requires-Dist "x>=1" and "x<2" on separate lines).
func (x *Index) Requests(name string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.requests[normalize(name)]
}

// ServeHTTP serves /simple/, /simple/<project>/ and /files/<file>.
func (x *Index) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	p := r.URL.Path
	switch {
	case p == "/simple":
		http.Redirect(w, r, "/simple/", http.StatusMovedPermanently)
	case p == "/simple/":
		x.serveRoot(w)
	case strings.HasPrefix(p, "/simple/"):
		name := strings.TrimSuffix(strings.TrimPrefix(p, "/simple/"), "/")
		if name == "" || strings.Contains(name, "/") {
			http.NotFound(w, r)
			return
		}
		norm := normalize(name)
		if mode := x.count(norm); mode != answered {
			x.stall(w, r, mode)
		}
		if name != norm || !strings.HasSuffix(p, "/") {
			http.Redirect(w, r, "/simple/"+norm+"/", http.StatusMovedPermanently)
			return
		}
		x.serveProject(w, r, norm)
	case strings.HasPrefix(p, "/files/"):
		x.mu.Lock()
		f := x.files[strings.TrimPrefix(p, "/files/")]
		x.mu.Unlock()
		if f == nil {
			http.NotFound(w, r)
			return
		}
		if mode := x.count(f.project); mode != answered {
			x.stall(w, r, mode)
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.data))
	default:
		http.NotFound(w, r)
	}
}

// count counts a request for the project and tells whether and how it is stalled.
func (x *Index) count(norm string) stallMode {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.requests[norm]++
	return x.stalled[norm]
}

// stall waits until the index stops or the client goes, then drops the connection; silent
// answers nothing before, trickle a 200 and a space a second.
func (x *Index) stall(w http.ResponseWriter, r *http.Request, mode stallMode) {
	var tick <-chan time.Time
	if mode == trickle {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusOK)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-x.stop:
			panic(http.ErrAbortHandler)
		case <-r.Context().Done():
			panic(http.ErrAbortHandler)
		case <-tick:
			_, _ = w.Write([]byte(" "))
			http.NewResponseController(w).Flush()
		}
	}
}

const pageHead = "<!DOCTYPE html>\n<html>\n  <head>\n    <meta name=\"pypi:repository-version\" content=\"1.0\">\n    <title>%s</title>\n  </head>\n  <body>\n    <h1>%[1]s</h1>\n"

func (x *Index) serveRoot(w http.ResponseWriter) {
	x.mu.Lock()
	names := make([]string, 0, len(x.projects))
	for norm := range x.projects {
		names = append(names, norm)
	}
	slices.Sort(names)
	var b strings.Builder
	fmt.Fprintf(&b, pageHead, "Simple index")
	for _, norm := range names {
		fmt.Fprintf(&b, "    <a href=\"%s/\">%s</a><br/>\n", url.PathEscape(norm), html.EscapeString(x.projects[norm].name))
	}
	x.mu.Unlock()
	b.WriteString("  </body>\n</html>\n")
	writeHTML(w, b.String())
}

func (x *Index) serveProject(w http.ResponseWriter, r *http.Request, norm string) {
	x.mu.Lock()
	p := x.projects[norm]
	if p == nil {
		x.mu.Unlock()
		http.NotFound(w, r)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, pageHead, "Links for "+html.EscapeString(p.name))
	for _, fname := range p.files {
		fmt.Fprintf(&b, "    <a href=\"../../files/%s#sha256=%s\">%s</a><br/>\n",
			url.PathEscape(fname), x.files[fname].sha256, html.EscapeString(fname))
	}
	x.mu.Unlock()
	b.WriteString("  </body>\n</html>\n")
	writeHTML(w, b.String())
}

func writeHTML(w http.ResponseWriter, page string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(page)))
	_, _ = w.Write([]byte(page))
}

var separators = regexp.MustCompile(`[-_.]+`)

// normalize is PEP 503's name normalisation: "Pkg_B" and "pkg.b" give "pkg-b".
func normalize(name string) string {
	return strings.ToLower(separators.ReplaceAllString(name, "-"))
}

// buildWheel makes the wheel AddWheel describes and returns its file name and contents.
func buildWheel(name, version, source string, requires []string) (string, []byte) {
	dist := strings.ToLower(separators.ReplaceAllString(name, "_"))
	ver := strings.ReplaceAll(version, "-", "_")
	info := dist + "-" + ver + ".dist-info/"

	var meta strings.Builder
	fmt.Fprintf(&meta, "Metadata-Version: 2.1\nName: %s\nVersion: %s\n", name, version)
	for _, req := range requires {
		fmt.Fprintf(&meta, "Requires-Dist: %s\n", req)
	}
	if !strings.HasSuffix(source, "\n") {
		source += "\n"
	}
	entries := []struct{ path, body string }{
		{dist + "/__init__.py", source},
		{info + "METADATA", meta.String()},
		{info + "WHEEL", "Wheel-Version: 1.0\nGenerator: sandpit-pyindex\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
		{info + "top_level.txt", dist + "\n"},
	}

	var record bytes.Buffer
	rw := csv.NewWriter(&record)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	mtime := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	add := func(path string, body []byte) {
		h := &zip.FileHeader{Name: path, Method: zip.Deflate, Modified: mtime}
		h.SetMode(0o644)
		w, err := zw.CreateHeader(h)
		if err == nil {
			_, err = w.Write(body)
		}
		if err != nil {
			panic(err) // writing to memory does not fail
		}
	}
	for _, e := range entries {
		sum := sha256.Sum256([]byte(e.body))
		_ = rw.Write([]string{e.path, "sha256=" + base64.RawURLEncoding.EncodeToString(sum[:]), strconv.Itoa(len(e.body))})
		add(e.path, []byte(e.body))
	}
	_ = rw.Write([]string{info + "RECORD", "", ""})
	rw.Flush()
	add(info+"RECORD", record.Bytes()) // last, as the wheel spec recommends
	if err := zw.Close(); err != nil {
		panic(err)
	}
	return dist + "-" + ver + "-py3-none-any.whl", buf.Bytes()
}

// bridgeGateway is the address of the default bridge's gateway: the host as containers on
// that network see it.
func bridgeGateway() (netip.Addr, error) {
	c, err := client.New(client.FromEnv)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no Docker client: %w", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx, client.PingOptions{}); err != nil {
		return netip.Addr{}, fmt.Errorf("no Docker engine answers: %w", err)
	}
	res, err := c.NetworkInspect(ctx, "bridge", client.NetworkInspectOptions{})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("inspecting the bridge network: %w", err)
	}
	nw := res.Network
	for _, cfg := range nw.IPAM.Config {
		if cfg.Gateway.Is4() {
			return cfg.Gateway, nil
		}
	}
	// Docker 20.10 leaves the default bridge's IPAM gateway empty. Then take the address of the
	// bridge's interface here, if the engine is local, else the subnet's first address, which
	// is where Docker puts the gateway unless told otherwise.
	for _, cfg := range nw.IPAM.Config {
		if !cfg.Subnet.Addr().Is4() {
			continue
		}
		if a, ok := interfaceAddr(nw.Options["com.docker.network.bridge.name"], cfg.Subnet); ok {
			return a, nil
		}
		return cfg.Subnet.Masked().Addr().Next(), nil
	}
	return netip.Addr{}, errors.New("the bridge network has no IPv4 subnet")
}

// interfaceAddr is the address of the named interface in subnet.
func interfaceAddr(ifname string, subnet netip.Prefix) (netip.Addr, bool) {
	if ifname == "" {
		return netip.Addr{}, false
	}
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return netip.Addr{}, false
	}
	addrs, err := iface.Addrs()
	if err != nil {
		return netip.Addr{}, false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP.To4()); ok && subnet.Contains(ip) {
				return ip, true
			}
		}
	}
	return netip.Addr{}, false
}
