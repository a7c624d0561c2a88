package connlimit

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/errclass"
)

// TestStreamsCaps: streams are refused (busy, naming the cap) past a sandbox's, an agent's and
// the daemon's cap, each apart, and an ended stream frees its place.
func TestStreamsCaps(t *testing.T) {
	s := NewStreams(Caps{Total: 5, PerAgent: 3, PerSandbox: 2})
	open := func(agent, sandbox, want string) func() {
		t.Helper()
		done, err := s.Open(agent, sandbox)
		if want == "" {
			if err != nil {
				t.Fatalf("%s's stream on %s: %v", agent, sandbox, err)
			}
			return done
		}
		if errclass.Of(err) != errclass.Busy || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s's stream on %s: %v; want busy naming %q", agent, sandbox, err, want)
		}
		return nil
	}
	a1 := open("alice", "s1", "")
	open("alice", "s1", "")
	open("alice", "s1", "sandbox s1")
	open("alice", "s2", "")
	open("alice", "s3", `agent "alice"`)
	open("bob", "s4", "")
	open("carol", "", "")
	open("dave", "s5", "the daemon")
	a1()
	a1() // twice is once
	open("dave", "s5", "")
	open("erin", "s6", "the daemon")
	var nilStreams *Streams
	if done, err := nilStreams.Open("x", "y"); err != nil || done == nil {
		t.Errorf("a nil Streams: %v", err)
	}
}

// TestCapsForHoldBelowTheListener: the streams of all agents leave a quarter of
// max_connections to short requests, and one agent's an eighth of it.
func TestCapsForHoldBelowTheListener(t *testing.T) {
	for _, n := range []int{16, 512, 100_000} {
		c := CapsFor(n)
		if c.Total > n*3/4 || c.PerAgent > n/8 || c.PerSandbox > c.PerAgent || c.PerSandbox < 1 {
			t.Errorf("CapsFor(%d) = %+v", n, c)
		}
	}
}

// TestWriteEndsWhenTheClientStopsReading: an answer whose client never reads it held its
// connection and what it held (a file read's bytes in reads_max_bytes) for ever (issue 51, 2).
// Write ends it once no progress is made for the stall; a client that reads gets it all.
func TestWriteEndsWhenTheClientStopsReading(t *testing.T) {
	data := make([]byte, 32<<20)
	ended := make(chan error, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		ended <- write(w, data, 300*time.Millisecond)
	}))
	defer srv.Close()

	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	select { // never read
	case err := <-ended:
		if err == nil {
			t.Error("a write to a client that never reads: no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a write to a client that never reads still blocks after 10 s")
	}

	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != int64(len(data)) {
		t.Errorf("a client that reads got %d bytes, %v", n, err)
	}
	if err := <-ended; err != nil {
		t.Errorf("a write to a client that reads: %v", err)
	}
}
