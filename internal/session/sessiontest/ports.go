package sessiontest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
)

// TestPorts: servers a session starts (python3 -m http.server, on 127.0.0.1 and on 0.0.0.0)
// are listed with their addresses, and not another session's; an HTTP exchange over DialPort
// reaches each; a port nothing listens on, or another session's, is a *sandbox.PortError at
// once; paused, the session closes its open port connections and refuses new ones with a
// *sandbox.SessionPausedError; resumed, its servers answer again.
func (s *Suite) TestPorts(t *testing.T) {
	ctx := context.Background()
	sess := s.create(t, "porter", nil)
	other := s.create(t, "porter2", nil)
	sh(t, sess, "mkdir -p site && printf 'served from the box' > site/hello.txt")
	for _, cmd := range []string{"cd site && exec python3 -m http.server 8101 --bind 127.0.0.1", "cd site && exec python3 -m http.server 8102 --bind 0.0.0.0"} {
		run(t, sess, session.CommandRequest{Background: true, Cmd: cmd})
	}
	run(t, other, session.CommandRequest{Background: true, Cmd: "exec python3 -m http.server 8103 --bind 127.0.0.1"})
	waitListening(t, other, 8103)
	got := waitListening(t, sess, 8101, 8102)
	want := map[int]string{8101: "127.0.0.1", 8102: "0.0.0.0"}
	for _, p := range got {
		if p.Port == 8103 {
			t.Fatalf("the session lists another session's port 8103: %+v", got)
		}
		if a, ok := want[p.Port]; ok && p.Address != a {
			t.Errorf("port %d listed at %q, want %q", p.Port, p.Address, a)
		}
	}
	for _, port := range []int{8101, 8102} {
		if status, body := portGet(t, sess, port, "/hello.txt"); status != 200 || body != "served from the box" {
			t.Fatalf("GET /hello.txt on port %d: %d %q", port, status, body)
		}
	}
	if status, _ := portGet(t, other, 8103, "/"); status != 200 {
		t.Fatalf("the other session's own server: %d", status)
	}

	// Nothing listens: refused at once, saying so. The other session's port is not this one's.
	for _, port := range []int{8109, 8103} {
		began := time.Now()
		c, err := dialPort(sess, port)
		if pe, ok := errors.AsType[*sandbox.PortError](err); !ok || pe.Port != port || !strings.Contains(pe.Why, "nothing listens") {
			if c != nil {
				c.Close()
			}
			t.Fatalf("a dial of port %d where nothing listens: %v (%T), want a *sandbox.PortError saying nothing listens", port, err, err)
		}
		if d := time.Since(began); d > 3*time.Second {
			t.Fatalf("the refusal of port %d took %s", port, d)
		}
	}

	if s.Frozen == nil {
		return // the runtime cannot pause (TestPauseAndResume proves its refusal)
	}
	open, err := dialPort(sess, 8101)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if _, err := sess.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	// The open connection ends at once: its client sees the end, not a frozen server.
	_ = open.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := open.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		t.Fatalf("a port connection open across the pause: read %d, %v; want it closed", n, err)
	}
	if c, err := dialPort(sess, 8101); !isPaused(err) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("a dial of the paused session: %v, want a *sandbox.SessionPausedError", err)
	}
	if _, err := sess.ListeningPorts(ctx); !isPaused(err) {
		t.Fatalf("the paused session's ports: %v, want a *sandbox.SessionPausedError", err)
	}
	if _, err := sess.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if status, body := portGet(t, sess, 8102, "/hello.txt"); status != 200 || body != "served from the box" {
		t.Fatalf("GET /hello.txt after the resume: %d %q", status, body)
	}
}

func isPaused(err error) bool { _, ok := errors.AsType[*sandbox.SessionPausedError](err); return ok }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func dialPort(sess *session.Session, port int) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return sess.DialPort(ctx, port)
}

// waitListening waits up to 30 s until sess lists every one of ports, and returns its list.
func waitListening(t *testing.T, sess *session.Session, ports ...int) []sandbox.ListeningPort {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := sess.ListeningPorts(context.Background())
		if err != nil {
			t.Fatalf("listing the ports: %v", err)
		}
		if !slices.ContainsFunc(ports, func(p int) bool {
			return !slices.ContainsFunc(got, func(l sandbox.ListeningPort) bool { return l.Port == p })
		}) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session lists %+v, want ports %v among them", got, ports)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// portGet sends GET path over a connection to sess's port and returns the status and body.
func portGet(t *testing.T, sess *session.Session, port int, path string) (int, string) {
	t.Helper()
	c, err := dialPort(sess, port)
	if err != nil {
		t.Fatalf("dialing port %d: %v", port, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: localhost:%d\r\nConnection: close\r\n\r\n", path, port); err != nil {
		t.Fatalf("writing to port %d: %v", port, err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading port %d's answer: %v", port, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading port %d's body: %v", port, err)
	}
	return res.StatusCode, string(body)
}
