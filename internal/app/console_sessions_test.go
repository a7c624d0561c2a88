package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/testenv/browser"
)

// TestConsoleSessionInBrowser drives a session's console page in Chromium against a real
// daemon (real engine): its call and its commands from the ledger, its files browsed (a
// directory, a text file shown as text, hostile names and text as text, a download), then,
// paused, a plain word on why its files are not browsable, and the look resumes nothing (the
// session was created with auto_resume) nor counts as a use.
func TestConsoleSessionInBrowser(t *testing.T) {
	ctx := browser.New(t)
	cfg := testConfig(t)
	cfg.Token = "console-session-token-0123456789"
	cfg.Slots, cfg.ForkServer = 1, false
	url, _ := startDaemon(t, cfg)
	const step = 3 * time.Minute
	api := url + "/v1/agents/walt/sessions"

	var s sandbox.SessionInfo
	if st := withToken(t, cfg.Token, "POST", api, `{"auto_resume": true}`, &s); st != http.StatusCreated {
		t.Fatalf("creating a session: %d", st)
	}
	base := api + "/" + s.ID
	var res struct {
		ID string `json:"id"`
	}
	if st := withToken(t, cfg.Token, "POST", base+"/executions", `{"code": "open('made-by-python.txt', 'w').write('from the interpreter')\nprint('called')"}`, &res); st != 200 {
		t.Fatalf("a call: %d", st)
	}
	cmd, _ := json.Marshal(map[string]string{"cmd": "mkdir -p data && printf '<script>window.__pwned=1</script>\\nline 2\\n' > 'data/<img src=x onerror=window.__pwned=1>.txt' && echo made"})
	var cr struct {
		Process struct {
			ID string `json:"id"`
		} `json:"process"`
	}
	if st := withToken(t, cfg.Token, "POST", base+"/commands", string(cmd), &cr); st != 200 {
		t.Fatalf("a command: %d", st)
	}
	var before sandbox.SessionInfo
	withToken(t, cfg.Token, "GET", base, "", &before)

	page := url + "/ui/sessions/walt/" + s.ID
	browser.Within(t, ctx, step, "signing in and opening the session's page",
		chromedp.Navigate(url+"/ui/sessions?agent=walt"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), cfg.Token),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/ui/sessions/walt/`+s.ID+`"]`)),
		chromedp.Click(chromedp.CSS(`a[href="/ui/sessions/walt/`+s.ID+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#calls tr[data-id="`+res.ID+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#commands tr[data-id="`+cr.Process.ID+`"]`)),
	)
	if got := browser.Eval[string](t, ctx, `document.querySelector("#commands .cmdline").textContent`); !strings.Contains(got, "<script>window.__pwned=1</script>") {
		t.Fatalf("the command line reads %q", got)
	}
	browser.Within(t, ctx, step, "browsing into data and opening the file",
		chromedp.Click(chromedp.CSS(`#files a[href*="path=%2Fhome%2Fuser%2Fdata#files"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#files[data-path="/home/user/data"]`)),
		browser.Await(`[...document.querySelectorAll("#files .entries a")].some(a => a.textContent === "<img src=x onerror=window.__pwned=1>.txt")`),
		chromedp.Click(chromedp.CSS(`#files .entries a:not([download])`)),
		chromedp.WaitVisible(chromedp.CSS(`#files[data-path="/home/user/data/<img src=x onerror=window.__pwned=1>.txt"] #file-text`)),
	)
	if got := browser.Eval[string](t, ctx, `document.getElementById("file-text").textContent`); got != "<script>window.__pwned=1</script>\nline 2\n" {
		t.Fatalf("the file shows %q", got)
	}
	if p := browser.Eval[any](t, ctx, "window.__pwned"); p != nil {
		t.Fatalf("a file's name or text ran script: %v", p)
	}
	if n := browser.Eval[float64](t, ctx, `document.querySelectorAll("#file-text *, .crumbs b *").length`); n != 0 {
		t.Fatalf("%v elements came from the file", n)
	}
	// The download: the file's bytes, named as the file, fetched as the page would.
	sub, cancel := context.WithTimeout(ctx, step)
	defer cancel()
	got, err := chromedp.Run(sub, chromedp.Evaluate[string](`(async () => { const r = await fetch(document.getElementById("download").href);
		return r.status + " " + r.headers.get("content-disposition") + " " + await r.text(); })()`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("fetching the download: %v", err)
	}
	if !strings.HasPrefix(got, `200 attachment; filename="<img src=x onerror=window.__pwned=1>.txt" <script>`) {
		t.Fatalf("the download: %q", got)
	}
	browser.Within(t, ctx, step, "the interpreter's file from the home",
		chromedp.Navigate(page+"?path=made-by-python.txt"),
		chromedp.WaitVisible(chromedp.CSS(`#files[data-path="/home/user/made-by-python.txt"] #file-text`)),
	)
	if got := browser.Eval[string](t, ctx, `document.getElementById("file-text").textContent`); got != "from the interpreter" {
		t.Fatalf("the interpreter's file shows %q", got)
	}

	// Looking on counts as no use of the session.
	var after sandbox.SessionInfo
	withToken(t, cfg.Token, "GET", base, "", &after)
	if !after.LastUsedAt.Equal(before.LastUsedAt) {
		t.Fatalf("browsing the files used the session: last used %v, then %v", before.LastUsedAt, after.LastUsedAt)
	}

	// Paused: the files are not browsable, and looking does not resume it (auto_resume).
	if st := withToken(t, cfg.Token, "POST", base+"/pause", "", &after); st != 200 || after.State != sandbox.SessionPaused {
		t.Fatalf("pause: %d %+v", st, after)
	}
	browser.Within(t, ctx, step, "the paused session's page",
		chromedp.Navigate(page+"?path=data"),
		chromedp.WaitVisible(chromedp.CSS("#not-browsable")),
	)
	if got := browser.Eval[string](t, ctx, `document.getElementById("not-browsable").textContent`); !strings.Contains(got, "This session is paused") {
		t.Fatalf("the paused session says %q", got)
	}
	if st := withToken(t, cfg.Token, "GET", base, "", &after); st != 200 || after.State != sandbox.SessionPaused {
		t.Fatalf("after a look the session is %q, want it still paused", after.State)
	}
	// Ended: the ledger's calls and commands stay, the files are gone.
	if st := withToken(t, cfg.Token, "DELETE", base, "", &after); st != 200 {
		t.Fatalf("closing: %d", st)
	}
	browser.Within(t, ctx, step, "the ended session's page",
		chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.CSS("#not-browsable")),
		chromedp.WaitVisible(chromedp.CSS(`#commands tr[data-id="`+cr.Process.ID+`"]`)),
	)
	if got := browser.Eval[string](t, ctx, `document.getElementById("not-browsable").textContent`); !strings.Contains(got, "has ended (closed)") {
		t.Fatalf("the ended session says %q", got)
	}
}
