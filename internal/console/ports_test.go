package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/testenv/browser"
)

// fakePorts answers the API's ports and shares routes of the active session as a daemon
// would (port 8000 listens), and passes the rest to the real API.
type fakePorts struct {
	next   http.Handler
	mu     sync.Mutex
	shares []apitype.Share
}

func (f *fakePorts) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	base := "/v1/agents/sam/sessions/" + activeID
	if r.URL.Path != base+"/ports" && !strings.HasPrefix(r.URL.Path, base+"/shares") {
		f.next.ServeHTTP(w, r)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == base+"/ports":
		fmt.Fprintf(w, `{"ports":[{"port":8000,"address":"0.0.0.0","path":"%s/ports/8000/"}]}`, base)
	case r.Method == http.MethodGet && r.URL.Path == base+"/shares":
		_ = json.NewEncoder(w).Encode(apitype.ShareList{Shares: append([]apitype.Share{}, f.shares...)})
	case r.Method == http.MethodPost && r.URL.Path == base+"/shares":
		var req apitype.ShareRequest
		if json.NewDecoder(r.Body).Decode(&req) != nil || req.Port != 8000 {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":{"code":"invalid_request","message":"port must be 8000 here"}}`)
			return
		}
		sh := apitype.Share{ID: fmt.Sprintf("sh_%026d", len(f.shares)), SessionID: activeID, Port: 8000,
			CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}
		f.shares = append(f.shares, sh)
		sh.URL = "http://8000-" + activeID + ".localhost:8765/?sandpit_share=s3cret<&>"
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(sh)
	case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, base+"/shares/"):
		id := strings.TrimPrefix(r.URL.Path, base+"/shares/")
		for i, s := range f.shares {
			if s.ID == id {
				f.shares = append(f.shares[:i], f.shares[i+1:]...)
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":{"code":"not_found","message":"no such share"}}`)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

func portsHarness(t *testing.T) (*harness, *fakePorts) {
	f := &fakePorts{}
	h := newHarnessWith(t, "", func(api http.Handler) http.Handler { f.next = api; return f })
	return h, f
}

// TestSessionPorts: an active session's page lists the ports it listens on, each with a Share
// button whose POST (same origin, CSRF token) makes a share through the API and shows its link
// once, escaped; the shares are listed without their secrets, each with Revoke; a session that
// is not active says why its ports are not listed.
func TestSessionPorts(t *testing.T) {
	h, f := portsHarness(t)
	c := client(t)
	base := "/ui/sessions/sam/" + activeID
	status, body, _ := get(t, c, h, base, nil)
	if status != 200 || !strings.Contains(body, `<tr data-port="8000"><td>8000</td><td><code>0.0.0.0</code>`) ||
		!strings.Contains(body, `action="`+base+`/shares#ports"`) || !strings.Contains(body, `name="port" value="8000"`) {
		t.Fatalf("the page: %d %s", status, body)
	}
	// Each port opens by its path form (a trial found the ports listed with no way to open one).
	if path := "/v1/agents/sam/sessions/" + activeID + "/ports/8000/"; !strings.Contains(body, `<a class="open" href="`+path+`"`) {
		t.Fatalf("the page has no link to %s: %s", path, body)
	}
	csrf := csrfPattern.FindStringSubmatch(body)[1]
	if st, _, _ := post(t, c, h, base+"/shares", "", url.Values{"csrf": {csrf}, "port": {"8000"}}); st != http.StatusForbidden {
		t.Fatalf("a share without the console's origin: %d", st)
	}
	status, body, _ = post(t, c, h, base+"/shares", h.srv.URL, url.Values{"csrf": {csrf}, "port": {"8000"}})
	if status != http.StatusCreated || !strings.Contains(body, `id="share-url"`) ||
		!strings.Contains(body, "sandpit_share=s3cret&lt;&amp;&gt;") || !strings.Contains(body, `data-share="sh_`) {
		t.Fatalf("sharing: %d %s", status, body)
	}
	if status, body, _ = post(t, c, h, base+"/shares", h.srv.URL, url.Values{"csrf": {csrf}, "port": {"9000"}}); status != http.StatusBadRequest ||
		!strings.Contains(body, "port must be 8000 here") {
		t.Fatalf("a refused share: %d %s", status, body)
	}
	_, body, _ = get(t, c, h, base, nil)
	if strings.Contains(body, "s3cret") || !strings.Contains(body, f.shares[0].ID) {
		t.Fatalf("the page after: %s", body)
	}
	if st, _, resp := post(t, c, h, base+"/shares/"+f.shares[0].ID+"/revoke", h.srv.URL, url.Values{"csrf": {csrf}}); st != http.StatusSeeOther ||
		resp.Header.Get("Location") != base+"#ports" || len(f.shares) != 0 {
		t.Fatalf("revoking: %d %d", st, len(f.shares))
	}
	if _, body, _ := get(t, c, h, "/ui/sessions/sam/"+hibID, nil); !strings.Contains(body, "The ports are listed while the session is active; it is hibernated.") {
		t.Fatalf("a hibernated session's ports: %s", body)
	}
}

// TestSessionPortsWithToken: with the daemon's token, which a browser does not send, a port's
// path is shown, not linked, and the page says to open it by a share link.
func TestSessionPortsWithToken(t *testing.T) {
	f := &fakePorts{}
	h := newHarnessWith(t, "console-token", func(api http.Handler) http.Handler { f.next = api; return f })
	c := client(t)
	if st, _, _ := post(t, c, h, "/ui/login", h.srv.URL, url.Values{"token": {"console-token"}}); st != http.StatusSeeOther {
		t.Fatalf("login: %d", st)
	}
	status, body, _ := get(t, c, h, "/ui/sessions/sam/"+activeID, nil)
	if status != 200 || !strings.Contains(body, `<code class="port-path">/v1/agents/sam/sessions/`+activeID+`/ports/8000/</code>`) ||
		strings.Contains(body, `class="open"`) || !strings.Contains(body, "open a port in a browser with a share link") {
		t.Fatalf("the page: %d %s", status, body)
	}
}

// TestBrowserSessionShare: in Chromium, the session page's Share button makes a link and
// shows it, under the console's CSP.
func TestBrowserSessionShare(t *testing.T) {
	h, _ := portsHarness(t)
	ctx := browser.New(t)
	browser.Within(t, ctx, step, "sharing port 8000",
		chromedp.Navigate(h.srv.URL+"/ui/sessions/sam/"+activeID),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-port="8000"] form.share button`)),
		chromedp.Click(chromedp.CSS(`tr[data-port="8000"] form.share button`)),
		chromedp.WaitVisible(chromedp.CSS("#share-url")),
	)
	if got := browser.Eval[string](t, ctx, `document.getElementById("share-url").href`); !strings.Contains(got, "8000-"+activeID+".localhost:8765/?sandpit_share=") {
		t.Fatalf("the link is %q", got)
	}
	if got, want := browser.Eval[string](t, ctx, `document.querySelector('tr[data-port="8000"] a.open').href`), h.srv.URL+"/v1/agents/sam/sessions/"+activeID+"/ports/8000/"; got != want {
		t.Fatalf("the open link is %q, want %q", got, want)
	}
}
