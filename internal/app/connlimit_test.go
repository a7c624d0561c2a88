package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/e2b/e2bclient"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// TestOneSandboxsStreamsLeaveTheDaemonToOthers: one sandbox opening as many WatchDir streams
// as max_connections took every connection, and the daemon answered no one (issue 51, 1).
// Its streams are capped now (here one per sandbox, at max_connections 16), and the rest are
// refused resource_exhausted while another agent and the health check are answered; once the
// connections are full, a few more are kept for GET /healthz alone.
func TestOneSandboxsStreamsLeaveTheDaemonToOthers(t *testing.T) {
	dcfg := testConfig(t)
	dcfg.Slots, dcfg.ForkServer, dcfg.MaxConnections = 1, false, 16
	base, _ := startDaemon(t, dcfg)
	st, err := app.OpenKeys(t.Context(), dcfg, testenv.Logger())
	if err != nil {
		t.Fatal(err)
	}
	clients := map[string]*e2bclient.Client{}
	for _, a := range []string{"alice", "bob"} {
		key, _, err := st.CreateAPIKey(t.Context(), a, "test")
		if err != nil {
			t.Fatal(err)
		}
		clients[a] = &e2bclient.Client{APIURL: base + app.E2BPrefix, SandboxURL: base + app.E2BPrefix, APIKey: key}
	}
	st.Close()
	ctx := t.Context()
	sb, err := clients["alice"].Create(ctx, map[string]any{"templateID": "base"})
	if err != nil {
		t.Fatal(err)
	}
	conn := clients["alice"].Conn(sb.SandboxID, sb.EnvdAccessToken)

	const attempts = 16
	sctx, stopStreams := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopStreams(); wg.Wait() }()
	opened, refused := make(chan struct{}, attempts), make(chan error, attempts)
	for range attempts {
		wg.Go(func() {
			first := true
			err := conn.Stream(sctx, "/filesystem.Filesystem/WatchDir", map[string]any{"path": "/home/user"}, func(json.RawMessage) error {
				if first {
					first = false
					opened <- struct{}{}
				}
				return nil
			})
			if sctx.Err() == nil {
				refused <- err
			}
		})
	}
	nOpened, deadline := 0, time.After(30*time.Second)
	for n := 0; n < attempts; n++ {
		select {
		case <-opened:
			nOpened++
		case err := <-refused:
			if e2bclient.StatusOf(err) != http.StatusOK || !strings.Contains(err.Error(), "resource_exhausted") ||
				!strings.Contains(err.Error(), "long-lived streams") {
				t.Errorf("a stream over the sandbox's cap: %v; want resource_exhausted naming the cap", err)
			}
		case <-deadline:
			t.Fatalf("only %d of %d streams were opened or refused in 30 s: the daemon stopped answering", n, attempts)
		}
	}
	if nOpened != 1 {
		t.Errorf("%d streams opened on one sandbox; want 1 (max_connections 16: a sixteenth per sandbox)", nOpened)
	}

	// With alice's stream open, bob and the health check are answered.
	answered := func(what string, call func(context.Context) error) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := call(cctx); err != nil {
			t.Errorf("%s with alice's streams open: %v", what, err)
		}
	}
	answered("bob's list of sandboxes", func(ctx context.Context) error {
		_, err := clients["bob"].Control(ctx, http.MethodGet, "/sandboxes", nil, nil)
		return err
	})
	answered("GET /healthz", func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	})

	// Connections, each held open after its answer, until the daemon has no place but the
	// health checks' left: there, other requests are refused 503 and GET /healthz answered.
	addr := strings.TrimPrefix(base, "http://")
	get := func(path string) (*http.Response, net.Conn, error) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return nil, nil, err
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\n\r\n")); err != nil {
			c.Close()
			return nil, nil, err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		resp.Body.Close()
		return resp, c, nil
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	full := false
	for range 2 * dcfg.MaxConnections {
		resp, c, err := get("/v1/limits")
		if err != nil {
			t.Fatalf("GET /v1/limits on connection %d: %v (the daemon stopped answering)", len(held)+1, err)
		}
		held = append(held, c)
		if resp.StatusCode == http.StatusServiceUnavailable {
			full = true
			break
		}
	}
	if !full {
		t.Fatalf("%d connections held and none refused: max_connections is %d", len(held), dcfg.MaxConnections)
	}
	resp, c, err := get("/healthz")
	if err != nil {
		t.Fatalf("GET /healthz with every connection but the reserve taken: %v", err)
	}
	c.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz with every connection but the reserve taken: %s", resp.Status)
	}
}
