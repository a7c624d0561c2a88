package app_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/cli"
)

// TestPortSharesREST drives a share link through a real daemon with a token: a session's
// server is shared over REST, its link opens the port's host name (303 to a cookie), the
// requests are in the ledger (GET …/ports/requests), and a revoked share's cookie is refused
// at once.
func TestPortSharesREST(t *testing.T) {
	cfg := testConfig(t)
	cfg.Slots, cfg.ForkServer = 1, false
	cfg.Token, cfg.PublicHost = "ports-token", "sandpit.test"
	daemon, _ := startDaemon(t, cfg)
	auth := []string{"Authorization", "Bearer " + cfg.Token}
	status, body := httpCall(t, "POST", daemon+"/v1/agents/walt/sessions", "", auth...)
	var s apitype.Session
	if status != 201 || json.Unmarshal(body, &s) != nil {
		t.Fatalf("create: %d %s", status, body)
	}
	base := daemon + "/v1/agents/walt/sessions/" + s.ID
	if status, body = httpCall(t, "POST", base+"/commands", `{"cmd": "python3 -m http.server 8000 --bind 127.0.0.1", "background": true}`, auth...); status != 201 {
		t.Fatalf("the server: %d %s", status, body)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(string(body), `"port":8000`); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("port 8000 is not listed: %s", body)
		}
		_, body = httpCall(t, "GET", base+"/ports", "", auth...)
	}

	for _, bad := range []string{`{"port": 0}`, `{"port": 8000, "ttl_ms": 500}`, `{"port": 8000, "ttl_ms": 99999999999}`, `{"port": 8000, "secret": "x"}`} {
		if status, body := httpCall(t, "POST", base+"/shares", bad, auth...); status != 400 {
			t.Errorf("%s: %d %s", bad, status, body)
		}
	}
	status, body = httpCall(t, "POST", base+"/shares", `{"port": 8000}`, auth...)
	var sh apitype.Share
	host := "8000-" + s.ID + ".sandpit.test"
	if status != 201 || json.Unmarshal(body, &sh) != nil || !strings.HasPrefix(sh.URL, "http://"+host+"/?sandpit_share=") ||
		!strings.HasPrefix(sh.ID, "sh_") || sh.ExpiresAt.Sub(time.Now()) < 59*time.Minute {
		t.Fatalf("share: %d %s", status, body)
	}
	link, _ := url.Parse(sh.URL)
	secret := link.Query().Get("sandpit_share")
	status, body = httpCall(t, "GET", base+"/shares", "", auth...)
	if status != 200 || !strings.Contains(string(body), sh.ID) || strings.Contains(string(body), secret) || strings.Contains(string(body), `"url"`) {
		t.Fatalf("list: %d %s", status, body)
	}

	// A browser opening the link, as the daemon is reached at its own address.
	open := func(target string, header ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", daemon+target, nil)
		req.Host = host
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := open(link.RequestURI())
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "sandpit_share_8000" {
			cookie = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" || cookie == nil || !cookie.HttpOnly || cookie.MaxAge < 3500 {
		t.Fatalf("the link: %d %q %v", resp.StatusCode, resp.Header.Get("Location"), resp.Cookies())
	}
	if resp := open("/", "Cookie", cookie.String()); resp.StatusCode != 200 {
		t.Fatalf("with the cookie: %d", resp.StatusCode)
	}
	if resp := open("/"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without: %d", resp.StatusCode)
	}
	// The proxy records an exchange once its answer has gone: the record may come a moment
	// after the client has read it.
	var reqs apitype.PortRequestList
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		reqs = apitype.PortRequestList{}
		status, body = httpCall(t, "GET", base+"/ports/requests?limit=1", "", auth...)
		if status != 200 || json.Unmarshal(body, &reqs) != nil || len(reqs.Requests) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if status != 200 || len(reqs.Requests) != 1 || reqs.Requests[0].Path != "/" ||
		reqs.Requests[0].Status != 200 || reqs.Requests[0].Port != 8000 || reqs.NextCursor != "" {
		t.Fatalf("the ledger: %d %s", status, body)
	}

	portVerbs(t, daemon, cfg.Token, s.ID)

	if status, body = httpCall(t, "DELETE", base+"/shares/"+sh.ID, "", auth...); status != 204 {
		t.Fatalf("revoke: %d %s", status, body)
	}
	if resp := open("/", "Cookie", cookie.String()); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a revoked share's cookie: %d", resp.StatusCode)
	}
	if status, _ = httpCall(t, "DELETE", base+"/shares/"+sh.ID, "", auth...); status != 404 {
		t.Fatalf("revoked twice: %d", status)
	}
}

// portVerbs drives a session's ports and shares (whose server listens on 8000) through the CLI
// and the MCP tools of the daemon at url, for agent walt: each lists, makes and revokes as REST
// does (a trial found only REST could).
func portVerbs(t *testing.T, url, token, id string) {
	t.Helper()
	sandpit := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := cli.Main(t.Context(), append(args, "--agent", "walt"), cli.Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
			Lookup: func(k string) (string, bool) {
				switch k {
				case "SANDPIT_URL":
					return url, true
				case "SANDPIT_TOKEN":
					return token, true
				}
				return os.LookupEnv(k)
			}})
		return code, stdout.String(), stderr.String()
	}
	if code, out, errOut := sandpit("session", "ports", id); code != 0 || !strings.Contains(out, url+"/v1/agents/walt/sessions/"+id+"/ports/8000/") {
		t.Fatalf("session ports: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := sandpit("session", "ports", id, "--requests"); code != 0 || !strings.Contains(out, "GET") || !strings.Contains(out, "200") {
		t.Fatalf("session ports --requests: %d %q %q", code, out, errOut)
	}
	code, out, errOut := sandpit("session", "share", id, "8000", "--ttl", "10m")
	shareID := strings.Fields(errOut + " x x")[1]
	if code != 0 || !strings.Contains(out, "?sandpit_share=") || !strings.HasPrefix(shareID, "sh_") {
		t.Fatalf("session share: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := sandpit("session", "shares", id); code != 0 || !strings.Contains(out, shareID) {
		t.Fatalf("session shares: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := sandpit("session", "unshare", id, shareID); code != 0 {
		t.Fatalf("session unshare: %d %q", code, errOut)
	}
	if code, out, _ := sandpit("session", "shares", id); code != 0 || strings.Contains(out, shareID) {
		t.Fatalf("an unshared share is still listed: %d %q", code, out)
	}

	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: url + "/mcp?agent=walt", HTTPClient: &http.Client{Transport: bearer{token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tool := func(name string, args map[string]any) string {
		t.Helper()
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(res.StructuredContent)
		if res.IsError {
			t.Fatalf("%s: %+v", name, res.Content)
		}
		return string(b)
	}
	if got := tool("list_ports", map[string]any{"session_id": id}); !strings.Contains(got, `"port":8000`) || !strings.Contains(got, `/ports/8000/"`) {
		t.Fatalf("list_ports: %s", got)
	}
	if got := tool("list_port_requests", map[string]any{"id": id, "limit": 1}); !strings.Contains(got, `"port":8000`) {
		t.Fatalf("list_port_requests: %s", got)
	}
	var sh apitype.Share
	if got := tool("share_port", map[string]any{"id": id, "port": 8000, "ttl_ms": 60000}); json.Unmarshal([]byte(got), &sh) != nil ||
		!strings.Contains(sh.URL, "?sandpit_share=") || time.Until(sh.ExpiresAt) > time.Minute {
		t.Fatalf("share_port: %s", got)
	}
	if got := tool("list_shares", map[string]any{"id": id}); !strings.Contains(got, sh.ID) || strings.Contains(got, "sandpit_share") {
		t.Fatalf("list_shares: %s", got)
	}
	tool("revoke_share", map[string]any{"id": id, "share_id": sh.ID})
	if got := tool("list_shares", map[string]any{"id": id}); strings.Contains(got, sh.ID) {
		t.Fatalf("a revoked share is still listed: %s", got)
	}
}
