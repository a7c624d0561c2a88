package app_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/e2b/e2bclient"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/internal/testenv/browser"
)

// portsApp is a stdlib-only server a test runs in a session (python3 app.py PORT): each path
// is a server's behaviour, friendly or hostile.
const portsApp = `import base64, hashlib, http.server, json, socketserver, struct, sys, threading, time

release = threading.Event()
hits = []

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def log_message(self, *a): pass
    def do_GET(self):
        p = self.path
        if p == "/headers":  # what reached the server, and an answer that reaches for the daemon's host
            body = json.dumps({"headers": [[k, v] for k, v in self.headers.items()], "path": self.path}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Set-Cookie", "sandpit_console=forged; Path=/")
            self.send_header("Set-Cookie", "app=1; Domain=localhost; Path=/")
            self.send_header("Strict-Transport-Security", "max-age=31536000")
            self.send_header("Clear-Site-Data", '"*"')
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif p == "/sse":  # an event, then nothing until /release
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b"data: first\n\n"); self.wfile.flush()
            ok = release.wait(60)
            self.wfile.write(b"data: last %s\n\n" % str(ok).encode())
        elif p == "/hit":  # counts requests that reached it (any method)
            hits.append(self.command)
            self.send_response(204); self.end_headers()
        elif p == "/hits":
            body = " ".join(hits).encode()
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
        elif p == "/release":
            release.set()
            self.send_response(204); self.end_headers()
        elif p == "/silent":
            time.sleep(600)
        elif p == "/bigheaders":
            self.send_response(200)
            for i in range(2000):
                self.send_header("X-Pad-%d" % i, "x" * 100)
            self.end_headers()
            self.wfile.write(b"too late")
        elif p == "/endless":
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            chunk = b"z" * 65536
            while True:
                self.wfile.write(chunk)
        elif p.startswith("/redirect?to="):
            self.send_response(302)
            self.send_header("Location", p[len("/redirect?to="):])
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif p in ("/ws", "/ws-flood"):
            key = self.headers["Sec-WebSocket-Key"]
            accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
            self.wfile.write(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                              "Sec-WebSocket-Accept: %s\r\n\r\n" % accept).encode())
            self.wfile.flush()
            self.close_connection = True
            if p == "/ws-flood":
                frame = frame_of(1, b"f" * 60000)
                while True:
                    self.wfile.write(frame)
            while True:
                op, data = read_frame(self.rfile)
                if op is None or op == 8:
                    self.wfile.write(frame_of(8, b"")); self.wfile.flush()
                    return
                self.wfile.write(frame_of(op, b"echo:" + data)); self.wfile.flush()
        else:
            self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers()
    do_POST = do_GET

def frame_of(op, data):
    n = len(data)
    if n < 126:
        head = struct.pack("!BB", 0x80 | op, n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | op, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | op, 127, n)
    return head + data

def read_frame(f):
    h = f.read(2)
    if len(h) < 2:
        return None, b""
    op, n = h[0] & 0x0F, h[1] & 0x7F
    if n == 126:
        n = struct.unpack("!H", f.read(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", f.read(8))[0]
    mask = f.read(4) if h[1] & 0x80 else b"\0\0\0\0"
    data = f.read(n)
    return op, bytes(b ^ mask[i % 4] for i, b in enumerate(data))

class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// portsEnv is a daemon a ports test talks to: its URL (http://127.0.0.1:port) and token.
type portsEnv struct {
	t     *testing.T
	cfg   config.Config
	url   string
	token string
}

// portsDaemon starts a daemon on a free loopback port of its own (the host form's default
// domain is localhost:<that port>) with mutate applied to its configuration.
func portsDaemon(t *testing.T, mutate func(*config.Config)) portsEnv {
	t.Helper()
	cfg := testConfig(t)
	cfg.Slots, cfg.ForkServer = 1, false
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen = ln.Addr().String()
	ln.Close()
	if mutate != nil {
		mutate(&cfg)
	}
	url, _ := startDaemon(t, cfg)
	return portsEnv{t: t, cfg: cfg, url: url, token: cfg.Token}
}

// noRedirects is a client that answers redirects as they are.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// req sends method url (body as JSON when not empty) with the daemon's token and header
// (name, value pairs; "Host" sets the Host) and returns the answer, its body read.
func (e portsEnv) req(method, url, body string, header ...string) (*http.Response, []byte) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r, err := http.NewRequest(method, url, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	if e.token != "" {
		r.Header.Set("Authorization", "Bearer "+e.token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			r.Host = header[i+1]
		} else {
			r.Header.Set(header[i], header[i+1])
		}
	}
	resp, err := noRedirects.Do(r)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// session creates a session of agent with body and returns its REST base URL and ID.
func (e portsEnv) session(agent, body string) (string, string) {
	e.t.Helper()
	resp, b := e.req("POST", e.url+"/v1/agents/"+agent+"/sessions", body)
	var s apitype.Session
	if resp.StatusCode != 201 || json.Unmarshal(b, &s) != nil {
		e.t.Fatalf("creating a session: %d %s", resp.StatusCode, b)
	}
	return e.url + "/v1/agents/" + agent + "/sessions/" + s.ID, s.ID
}

// command runs cmd in the session at base (in the background when bg), with stdin.
func (e portsEnv) command(base, cmd, stdin string, bg bool) {
	e.t.Helper()
	body, _ := json.Marshal(apitype.CommandRequest{Cmd: cmd, Stdin: stdin, Background: bg})
	resp, b := e.req("POST", base+"/commands", string(body))
	if resp.StatusCode != 200 && resp.StatusCode != 201 {
		e.t.Fatalf("command %q: %d %s", cmd, resp.StatusCode, b)
	}
}

// serve starts the test's servers in the session at base: http.server on 8000 (site/ with
// index.html and data.json) and portsApp on 8001, and waits until both listen.
func (e portsEnv) serve(base, index string) {
	e.t.Helper()
	e.command(base, "mkdir -p site && cat > site/index.html && echo '{\"from\": \"the box\"}' > site/data.json", index, false)
	e.command(base, "cat > app.py", portsApp, false)
	e.command(base, "cd site && exec python3 -m http.server 8000 --bind 127.0.0.1", "", true)
	e.command(base, "exec python3 app.py 8001", "", true)
	e.waitPorts(base, 8000, 8001)
}

// waitPorts waits up to 30 s until GET base/ports lists every one of want, and returns the list.
func (e portsEnv) waitPorts(base string, want ...int) []struct {
	Port    int    `json:"port"`
	Address string `json:"address"`
	Path    string `json:"path"`
} {
	e.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, b := e.req("GET", base+"/ports", "")
		var list struct {
			Ports []struct {
				Port    int    `json:"port"`
				Address string `json:"address"`
				Path    string `json:"path"`
			} `json:"ports"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(b, &list) != nil {
			e.t.Fatalf("listing the ports: %d %s", resp.StatusCode, b)
		}
		missing := 0
		for _, w := range want {
			found := false
			for _, p := range list.Ports {
				found = found || p.Port == w
			}
			if !found {
				missing++
			}
		}
		if missing == 0 {
			return list.Ports
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the session lists %s, want ports %v", b, want)
		}
	}
}

// wantError fails unless resp is status with an error body whose code is code and whose
// message holds says.
func wantError(t *testing.T, what string, resp *http.Response, body []byte, status int, code, says string) {
	t.Helper()
	var eb apitype.ErrorBody
	if resp.StatusCode != status || json.Unmarshal(body, &eb) != nil || eb.Error.Code != code || !strings.Contains(eb.Error.Message, says) {
		t.Fatalf("%s: %d %s, want %d %s saying %q", what, resp.StatusCode, body, status, code, says)
	}
}

// TestPortsREST reaches servers a session runs through the daemon's path form, as a client
// and as a hostile server would use it, on a daemon with a token and small port bounds.
func TestPortsREST(t *testing.T) {
	e := portsDaemon(t, func(c *config.Config) {
		c.Token = "ports-rest-token-0123456789abcdef"
		c.PortIdleTimeoutMS = 2000
		c.PortConnectionMaxBytes = 1 << 20
		c.PortConnectionsPerSession = 4
	})
	base, id := e.session("alice", "")
	e.serve(base, "<h1>hello from the box</h1>")
	host := strings.TrimPrefix(e.url, "http://")
	prefix := "/v1/agents/alice/sessions/" + id + "/ports/8001"

	t.Run("list", func(t *testing.T) {
		ports := e.waitPorts(base, 8000, 8001)
		if len(ports) != 2 || ports[0].Port != 8000 || ports[0].Address != "127.0.0.1" ||
			ports[0].Path != "/v1/agents/alice/sessions/"+id+"/ports/8000/" {
			t.Fatalf("ports: %+v", ports)
		}
	})
	t.Run("page", func(t *testing.T) {
		resp, body := e.req("GET", base+"/ports/8000/", "")
		if resp.StatusCode != 200 || string(body) != "<h1>hello from the box</h1>" ||
			!strings.HasPrefix(resp.Header.Get("Content-Security-Policy"), "sandbox allow-scripts") {
			t.Fatalf("GET the page: %d %v %q", resp.StatusCode, resp.Header, body)
		}
		resp, body = e.req("GET", base+"/ports/8000/data.json?x=1", "")
		if resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"the box"`)) {
			t.Fatalf("GET data.json: %d %q", resp.StatusCode, body)
		}
		if resp, _ = e.req("GET", base+"/ports/8000", ""); resp.StatusCode != 308 || resp.Header.Get("Location") != "/v1/agents/alice/sessions/"+id+"/ports/8000/" {
			t.Fatalf("GET without the slash: %d %q", resp.StatusCode, resp.Header.Get("Location"))
		}
		noToken := portsEnv{t: t, url: e.url}
		if resp, body = noToken.req("GET", base+"/ports/8000/", ""); resp.StatusCode != 401 {
			t.Fatalf("GET without the daemon's token: %d %s", resp.StatusCode, body)
		}
	})
	t.Run("credentials never reach the box", func(t *testing.T) {
		resp, body := e.req("GET", base+"/ports/8001/headers", "", "Cookie", "sandpit_console=secret; theme=dark; sandpit_share=s2", "X-Mine", "kept")
		var got struct {
			Headers [][2]string `json:"headers"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(body, &got) != nil {
			t.Fatalf("GET /headers: %d %s", resp.StatusCode, body)
		}
		seen := map[string]string{}
		for _, h := range got.Headers {
			seen[strings.ToLower(h[0])] += h[1]
		}
		if strings.Contains(string(body), e.token) || strings.Contains(string(body), "secret") || strings.Contains(string(body), "sandpit_") {
			t.Errorf("the daemon's token or cookies reached the box: %s", body)
		}
		if seen["cookie"] != "theme=dark" || seen["x-mine"] != "kept" || seen["host"] != "localhost:8001" ||
			seen["x-forwarded-prefix"] != prefix || seen["x-forwarded-host"] != host || seen["authorization"] != "" {
			t.Errorf("the box saw %v", seen)
		}
		if h := resp.Header; h.Get("Strict-Transport-Security") != "" || h.Get("Clear-Site-Data") != "" ||
			len(h.Values("Set-Cookie")) != 1 || h.Get("Set-Cookie") != "app=1; Path="+prefix+"/" {
			t.Errorf("the answer's headers: %v", h)
		}
	})
	t.Run("websocket", func(t *testing.T) {
		c, br := wsDial(t, e, host, prefix+"/ws")
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		big := bytes.Repeat([]byte("b"), 70000) // a 64-bit length each way
		for _, msg := range [][]byte{[]byte("hello"), big} {
			wsWrite(t, c, 2, msg)
			if op, got := wsRead(t, br); op != 2 || !bytes.Equal(got, append([]byte("echo:"), msg...)) {
				t.Fatalf("echo of %d bytes: op %d, %d bytes %.20q", len(msg), op, len(got), got)
			}
		}
		wsWrite(t, c, 8, nil)
		if op, _ := wsRead(t, br); op != 8 {
			t.Fatalf("the answer to a close: op %d", op)
		}
	})
	t.Run("server-sent events stream", func(t *testing.T) {
		r, _ := http.NewRequest("GET", base+"/ports/8001/sse", nil)
		r.Header.Set("Authorization", "Bearer "+e.token)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		first := make(chan string, 1)
		br := bufio.NewReader(resp.Body)
		go func() {
			l, _ := br.ReadString('\n')
			first <- l
		}()
		select {
		case l := <-first:
			if l != "data: first\n" {
				t.Fatalf("the first event: %q", l)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("the first event did not arrive while the server went on (the answer is buffered)")
		}
		if resp, body := e.req("GET", base+"/ports/8001/release", ""); resp.StatusCode != 204 {
			t.Fatalf("release: %d %s", resp.StatusCode, body)
		}
		rest, _ := io.ReadAll(br)
		if string(rest) != "\ndata: last True\n\n" {
			t.Fatalf("the rest of the stream: %q", rest)
		}
	})
	t.Run("a server that never answers", func(t *testing.T) {
		began := time.Now()
		resp, body := e.req("GET", base+"/ports/8001/silent", "")
		took := time.Since(began)
		wantError(t, "GET /silent", resp, body, 504, apitype.CodeGatewayTimeout, "port_idle_timeout_ms")
		if took < 1500*time.Millisecond || took > 15*time.Second {
			t.Fatalf("the 504 came after %s, want about port_idle_timeout_ms (2s)", took)
		}
	})
	t.Run("nothing listens", func(t *testing.T) {
		began := time.Now()
		resp, body := e.req("POST", base+"/ports/8009/api?q=1", `{"a": 1}`)
		wantError(t, "a port nothing listens on", resp, body, 502, apitype.CodeBadGateway, "nothing listens on port 8009")
		if took := time.Since(began); took > 3*time.Second {
			t.Fatalf("the 502 took %s", took)
		}
		resp, body = e.req("GET", base+"/ports/0/", "")
		wantError(t, "port 0", resp, body, 400, apitype.CodeInvalidRequest, "1 to 65535")
		resp, body = e.req("GET", base+"/ports/65536/", "")
		wantError(t, "port 65536", resp, body, 400, apitype.CodeInvalidRequest, "1 to 65535")
	})
	t.Run("huge response headers", func(t *testing.T) {
		resp, body := e.req("GET", base+"/ports/8001/bigheaders", "")
		wantError(t, "GET /bigheaders", resp, body, 502, apitype.CodeBadGateway, "port 8001")
	})
	t.Run("an endless body is cut", func(t *testing.T) {
		r, _ := http.NewRequest("GET", base+"/ports/8001/endless", nil)
		r.Header.Set("Authorization", "Bearer "+e.token)
		began := time.Now()
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		n, _ := io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 || n > 1<<20 || n < 512<<10 {
			t.Fatalf("the endless body: %d, %d bytes; want it cut under port_connection_max_bytes (1 MiB)", resp.StatusCode, n)
		}
		if took := time.Since(began); took > 20*time.Second {
			t.Fatalf("the cut came after %s", took)
		}
	})
	t.Run("redirects", func(t *testing.T) {
		daemonPort := strings.Split(host, ":")[1]
		for _, to := range []string{e.url + "/v1/limits", "http://localhost:" + daemonPort + "/ui/", "http://[::1]:" + daemonPort + "/v1/limits",
			"http://127.1:" + daemonPort + "/v1/limits", "http://localhost.:" + daemonPort + "/ui/", "http://x.localhost:" + daemonPort + "/ui/"} {
			resp, body := e.req("GET", base+"/ports/8001/redirect?to="+to, "")
			wantError(t, "a redirect to "+to, resp, body, 502, apitype.CodeBadGateway, "redirected to the daemon itself")
		}
		resp, body := e.req("GET", base+"/ports/8001/redirect?to=https://example.com/x?y=1", "")
		if resp.StatusCode != 302 || resp.Header.Get("Location") != "https://example.com/x?y=1" ||
			!strings.HasPrefix(resp.Header.Get("Content-Security-Policy"), "sandbox ") {
			t.Fatalf("a redirect elsewhere: %d %v %s", resp.StatusCode, resp.Header, body)
		}
		resp, _ = e.req("GET", base+"/ports/8001/redirect?to=/login", "")
		if resp.StatusCode != 302 || resp.Header.Get("Location") != prefix+"/login" {
			t.Fatalf("a redirect to the server's own path: %d %q", resp.StatusCode, resp.Header.Get("Location"))
		}
	})
	t.Run("a websocket flood is cut", func(t *testing.T) {
		c, br := wsDial(t, e, host, prefix+"/ws-flood")
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		began := time.Now()
		n, err := io.Copy(io.Discard, br)
		if n > 1<<20 || n < 512<<10 || isTimeout(err) {
			t.Fatalf("the flood: %d bytes, %v; want it cut under port_connection_max_bytes (1 MiB)", n, err)
		}
		if took := time.Since(began); took > 20*time.Second {
			t.Fatalf("the cut came after %s", took)
		}
	})
	t.Run("requests in flight are capped", func(t *testing.T) {
		var open []net.Conn
		for range 4 {
			c, _ := wsDial(t, e, host, prefix+"/ws")
			open = append(open, c)
		}
		resp, body := e.req("GET", base+"/ports/8000/", "")
		wantError(t, "a fifth request", resp, body, 429, apitype.CodeBusy, "port_connections_per_session")
		if resp.Header.Get("Retry-After") == "" {
			t.Errorf("a 429 without Retry-After")
		}
		for _, c := range open {
			c.Close()
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if resp, _ = e.req("GET", base+"/ports/8000/", ""); resp.StatusCode == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after the WebSockets closed: %d", resp.StatusCode)
			}
		}
	})
	t.Run("another agent's session", func(t *testing.T) {
		for _, u := range []string{"/ports", "/ports/8000/"} {
			resp, body := e.req("GET", e.url+"/v1/agents/mallory/sessions/"+id+u, "")
			wantError(t, "mallory's GET "+u, resp, body, 404, apitype.CodeNotFound, "mallory")
		}
	})
	t.Run("paused", func(t *testing.T) {
		if resp, body := e.req("POST", base+"/pause", ""); resp.StatusCode != 200 {
			t.Fatalf("pause: %d %s", resp.StatusCode, body)
		}
		resp, body := e.req("GET", base+"/ports/8000/", "")
		wantError(t, "the paused session's port", resp, body, 409, apitype.CodeConflict, "resume")
		resp, body = e.req("GET", base+"/ports", "")
		wantError(t, "the paused session's ports", resp, body, 409, apitype.CodeConflict, "resume")
		if resp, body = e.req("POST", base+"/resume", ""); resp.StatusCode != 200 {
			t.Fatalf("resume: %d %s", resp.StatusCode, body)
		}
		if resp, body = e.req("GET", base+"/ports/8000/", ""); resp.StatusCode != 200 {
			t.Fatalf("after the resume: %d %s", resp.StatusCode, body)
		}

		auto, _ := e.session("alice", `{"auto_resume": true}`)
		e.command(auto, "exec python3 -m http.server 8000 --bind 0.0.0.0", "", true)
		e.waitPorts(auto, 8000)
		if resp, body = e.req("POST", auto+"/pause", ""); resp.StatusCode != 200 {
			t.Fatalf("pause: %d %s", resp.StatusCode, body)
		}
		if resp, body = e.req("GET", auto+"/ports/8000/", ""); resp.StatusCode != 200 {
			t.Fatalf("a request to the paused auto_resume session's port: %d %s", resp.StatusCode, body)
		}
		var s apitype.Session
		if resp, body = e.req("GET", auto, ""); json.Unmarshal(body, &s) != nil || s.State != "active" {
			t.Fatalf("the session after the request: %d %s", resp.StatusCode, body)
		}
	})
	t.Run("ended", func(t *testing.T) {
		c, br := wsDial(t, e, host, prefix+"/ws")
		defer c.Close()
		if resp, body := e.req("DELETE", base, ""); resp.StatusCode != 200 {
			t.Fatalf("delete: %d %s", resp.StatusCode, body)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := io.Copy(io.Discard, br); isTimeout(err) {
			t.Fatalf("a WebSocket open across the session's end: %d bytes, %v; want it closed", n, err)
		}
		resp, body := e.req("GET", base+"/ports/8000/", "")
		wantError(t, "the ended session's port", resp, body, 410, apitype.CodeGone, "closed")
	})
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// wsDial upgrades a connection to the daemon at host to a WebSocket at path, with the
// daemon's token, checking the server's accept key; it returns the connection and its reader.
func wsDial(t *testing.T, e portsEnv, host, path string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", host, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	key := base64.StdEncoding.EncodeToString(raw[:])
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", path, host, e.token, key)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the upgrade of %s: %v", path, err)
	}
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if resp.StatusCode != 101 || resp.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("the upgrade of %s: %d %v %s", path, resp.StatusCode, resp.Header, b)
	}
	return c, br
}

// wsWrite sends one masked frame of op with data, as a client must.
func wsWrite(t *testing.T, c net.Conn, op byte, data []byte) {
	t.Helper()
	head := []byte{0x80 | op}
	switch n := len(data); {
	case n < 126:
		head = append(head, 0x80|byte(n))
	case n < 1<<16:
		head = append(head, 0x80|126)
		head = binary.BigEndian.AppendUint16(head, uint16(n))
	default:
		head = append(head, 0x80|127)
		head = binary.BigEndian.AppendUint64(head, uint64(n))
	}
	mask := [4]byte{1, 2, 3, 4}
	masked := make([]byte, len(data))
	for i, b := range data {
		masked[i] = b ^ mask[i%4]
	}
	if _, err := c.Write(append(append(head, mask[:]...), masked...)); err != nil {
		t.Fatalf("writing a frame: %v", err)
	}
}

// wsRead reads one unmasked frame: its opcode and data.
func wsRead(t *testing.T, br *bufio.Reader) (byte, []byte) {
	t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		t.Fatalf("reading a frame: %v", err)
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		_, _ = io.ReadFull(br, l[:])
		n = uint64(binary.BigEndian.Uint16(l[:]))
	case 127:
		var l [8]byte
		_, _ = io.ReadFull(br, l[:])
		n = binary.BigEndian.Uint64(l[:])
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(br, data); err != nil {
		t.Fatalf("reading a frame's %d bytes: %v", n, err)
	}
	return h[0] & 0x0f, data
}

// e2bSandbox is what a ports test reads of E2B's create answer.
type e2bSandbox struct {
	ID           string  `json:"sandboxID"`
	Domain       *string `json:"domain"`
	EnvdToken    string  `json:"envdAccessToken"`
	TrafficToken string  `json:"trafficAccessToken"`
}

// e2bPorts starts a daemon without a token on a port of its own and returns it, its port, an
// E2B client of agent eve (with an API key), and a function that creates an E2B sandbox with
// body's settings through it and starts the test's servers in it (see portsEnv.serve).
func e2bPorts(t *testing.T, index func(port string) string) (portsEnv, string, *e2bclient.Client, func(body map[string]any) e2bSandbox) {
	t.Helper()
	e := portsDaemon(t, nil)
	port := e.url[strings.LastIndexByte(e.url, ':')+1:]
	keys, err := app.OpenKeys(t.Context(), e.cfg, testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := keys.CreateAPIKey(t.Context(), "eve", "ports")
	keys.Close()
	if err != nil {
		t.Fatal(err)
	}
	c := &e2bclient.Client{APIURL: e.url + app.E2BPrefix, SandboxURL: e.url + app.E2BPrefix, APIKey: key}
	return e, port, c, func(body map[string]any) e2bSandbox {
		t.Helper()
		body["templateID"], body["timeout"] = "base", 300
		var sb e2bSandbox
		if _, err := c.Control(t.Context(), "POST", "/sandboxes", body, &sb); err != nil || sb.ID == "" {
			t.Fatalf("creating a sandbox: %+v, %v", sb, err)
		}
		t.Cleanup(func() { _ = c.Kill(context.Background(), sb.ID) })
		e.serve(e.url+"/v1/agents/eve/sessions/"+sb.ID, index(port))
		return sb
	}
}

// TestPortsE2B reaches a sandbox's port through E2B's header form and its own host name
// ({port}-{id}.localhost:{daemon port}, the create answer's domain): public by default, and
// with network.allowPublicTraffic false only with its traffic token; E2B's tokens never reach
// the box, and a request whose Origin is a port's host is refused by the daemon's API.
func TestPortsE2B(t *testing.T) {
	e, port, c, create := e2bPorts(t, func(string) string { return "<p>e2b page</p>" })
	pub := create(map[string]any{})
	priv := create(map[string]any{"network": map[string]any{"allowPublicTraffic": false}})
	if pub.Domain == nil || *pub.Domain != "localhost:"+port || pub.TrafficToken == "" {
		t.Fatalf("the create answer: %+v (domain %v), want the domain localhost:%s", pub, pub.Domain, port)
	}
	headerForm := func(sb e2bSandbox, p, path string, header ...string) (*http.Response, []byte) {
		t.Helper()
		return e.req("GET", e.url+app.E2BPrefix+path, "", append([]string{"E2b-Sandbox-Id", sb.ID, "E2b-Sandbox-Port", p}, header...)...)
	}
	hostForm := func(sb e2bSandbox, p, path string, header ...string) (*http.Response, []byte) {
		t.Helper()
		return e.req("GET", e.url+path, "", append([]string{"Host", p + "-" + sb.ID + ".localhost:" + port}, header...)...)
	}

	resp, body := headerForm(pub, "8000", "/")
	if resp.StatusCode != 200 || string(body) != "<p>e2b page</p>" || resp.Header.Get("Content-Security-Policy") != "" {
		t.Fatalf("the header form: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	resp, body = hostForm(pub, "8000", "/data.json")
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte("the box")) {
		t.Fatalf("the host form: %d %q", resp.StatusCode, body)
	}
	resp, body = hostForm(pub, "8001", "/headers", "X-Access-Token", pub.EnvdToken)
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte(`["Host", "8001-`+pub.ID+`.localhost:`+port+`"]`)) || bytes.Contains(body, []byte(pub.EnvdToken)) {
		t.Fatalf("what the box saw of the host form: %d %s", resp.StatusCode, body)
	}
	// A redirect to another of its ports' host names passes; to the daemon, by any name, not.
	other := "http://8000-" + pub.ID + ".localhost:" + port + "/"
	if resp, body = hostForm(pub, "8001", "/redirect?to="+other); resp.StatusCode != 302 || resp.Header.Get("Location") != other {
		t.Fatalf("a redirect to another port's host name: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	resp, body = hostForm(pub, "8001", "/redirect?to=http://0x7f.1:"+port+"/ui/")
	if resp.StatusCode != 502 || !bytes.Contains(body, []byte("redirected to the daemon itself")) {
		t.Fatalf("a redirect to the daemon's console: %d %s", resp.StatusCode, body)
	}
	resp, body = hostForm(pub, "8009", "/")
	if resp.StatusCode != 502 || !bytes.Contains(body, []byte("nothing listens on port 8009")) {
		t.Fatalf("the host form of a port nothing listens on: %d %s", resp.StatusCode, body)
	}

	for name, form := range map[string]func(e2bSandbox, string, string, ...string) (*http.Response, []byte){"header": headerForm, "host": hostForm} {
		if resp, body = form(priv, "8000", "/"); resp.StatusCode != 403 || !bytes.Contains(body, []byte("E2b-Traffic-Access-Token")) {
			t.Errorf("the %s form of a private sandbox without its token: %d %s", name, resp.StatusCode, body)
		}
		if resp, body = form(priv, "8000", "/", "E2b-Traffic-Access-Token", pub.TrafficToken); resp.StatusCode != 401 {
			t.Errorf("the %s form of a private sandbox with another's token: %d %s", name, resp.StatusCode, body)
		}
		if resp, body = form(priv, "8000", "/", "E2b-Traffic-Access-Token", priv.TrafficToken); resp.StatusCode != 200 || string(body) != "<p>e2b page</p>" {
			t.Errorf("the %s form of a private sandbox with its token: %d %s", name, resp.StatusCode, body)
		}
		resp, body = form(priv, "8001", "/headers", "E2b-Traffic-Access-Token", priv.TrafficToken, "X-Access-Token", priv.EnvdToken, "X-API-Key", "e2b_key")
		if resp.StatusCode != 200 || bytes.Contains(body, []byte(priv.TrafficToken)) || bytes.Contains(body, []byte("e2b_key")) ||
			bytes.Contains(bytes.ToLower(body), []byte("e2b-sandbox")) {
			t.Errorf("the %s form: E2B's headers reached the box: %d %s", name, resp.StatusCode, body)
		}
	}

	// The daemon's API refuses a request from a port's page, on every name of the daemon.
	for _, api := range []string{e.url + "/v1/limits", "http://localhost:" + port + "/v1/limits"} {
		resp, body = e.req("GET", api, "", "Origin", "http://8000-"+pub.ID+".localhost:"+port)
		wantError(t, "the API from a port's origin", resp, body, 403, apitype.CodeForbidden, "a session serves")
	}
	if resp, body = e.req("GET", e.url+"/v1/limits", "", "Origin", "http://localhost:"+port); resp.StatusCode != 200 {
		t.Fatalf("the API from the daemon's own origin: %d %s", resp.StatusCode, body)
	}
	// A plain session's host name reaches its port on a daemon without a token (with one, a
	// share or the token: TestPortHostShares); a killed sandbox's is not served.
	_, plain := e.session("eve", "")
	resp, body = e.req("GET", e.url+"/", "", "Host", "8000-"+plain+".localhost:"+port)
	wantError(t, "a plain session's host name", resp, body, 502, apitype.CodeBadGateway, "nothing listens on port 8000")
	if err := c.Kill(t.Context(), pub.ID); err != nil {
		t.Fatal(err)
	}
	if resp, body = hostForm(pub, "8000", "/"); resp.StatusCode != 404 {
		t.Fatalf("a killed sandbox's host name: %d %s", resp.StatusCode, body)
	}
}

// TestPortsInBrowser opens a page a sandbox serves at its own host name in Chromium: it
// loads, its script runs and fetches its own origin, and its requests to the daemon's API
// (localhost and 127.0.0.1) are refused: a session-creating POST the same browser makes from
// the daemon's own origin succeeds, from the port's page it creates nothing, while the same
// page's POST to another port's host name on the daemon's listener arrives (the browser sent
// them; the daemon refused).
func TestPortsInBrowser(t *testing.T) {
	ctx := browser.New(t)
	e, port, _, create := e2bPorts(t, func(port string) string {
		return `<!doctype html><title>box page</title><script>
window.result = (async () => {
  const out = {origin: location.origin, own: await (await fetch("/data.json")).text()};
  await fetch("http://8001-" + location.hostname.split(".")[0].split("-")[1] + ".localhost:` + port + `/hit", {method: "POST", mode: "no-cors"});
  for (const [name, u] of [["localhost", "http://localhost:` + port + `"], ["loopback", "http://127.0.0.1:` + port + `"]]) {
    try { await fetch(u + "/v1/agents/csrf-" + name + "/sessions", {method: "POST", mode: "no-cors"}); out[name] = "sent" } catch (e) { out[name] = "error: " + e }
    try { const r = await fetch(u + "/v1/limits"); out[name + "-read"] = "read " + r.status } catch (e) { out[name + "-read"] = "refused" }
  }
  return JSON.stringify(out);
})();
</script>`
	})
	sb := create(map[string]any{})
	page := "http://8000-" + sb.ID + ".localhost:" + port + "/"
	browser.Within(t, ctx, 2*time.Minute, "opening the sandbox's page", chromedp.Navigate(page), browser.Await("window.result"))
	sub, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	got, err := chromedp.Run(sub, chromedp.Evaluate[string]("window.result", chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("the page's result: %v", err)
	}
	var out map[string]string
	if err := json.Unmarshal([]byte(got), &out); err != nil {
		t.Fatalf("the page's result %q: %v", got, err)
	}
	if out["origin"] != strings.TrimSuffix(page, "/") || !strings.Contains(out["own"], "the box") ||
		out["localhost"] != "sent" || out["loopback"] != "sent" || out["localhost-read"] != "refused" || out["loopback-read"] != "refused" {
		t.Fatalf("the page's result: %v", out)
	}
	// The same request from the daemon's own page creates a session: the refusal above is
	// the daemon's, not the browser's.
	browser.Within(t, ctx, time.Minute, "the daemon's own page", chromedp.Navigate(e.url+"/healthz"))
	control, err := chromedp.Run(sub, chromedp.Evaluate[float64](`fetch("/v1/agents/csrf-control/sessions", {method: "POST"}).then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || control != 201 {
		t.Fatalf("the control request from the daemon's origin: %v, %v", control, err)
	}
	if resp, body := e.req("GET", e.url+"/hits", "", "Host", "8001-"+sb.ID+".localhost:"+port); resp.StatusCode != 200 || string(body) != "POST" {
		t.Fatalf("the page's POST to port 8001's host name: %d %q, want it arrived", resp.StatusCode, body)
	}
	for agent, want := range map[string]int{"csrf-localhost": 0, "csrf-loopback": 0, "csrf-control": 1} {
		resp, body := e.req("GET", e.url+"/v1/agents/"+agent+"/sessions", "")
		var list apitype.SessionList
		if resp.StatusCode != 200 || json.Unmarshal(body, &list) != nil || len(list.Sessions) != want {
			t.Errorf("agent %s's sessions: %d %s, want %d", agent, resp.StatusCode, body, want)
		}
	}
}
