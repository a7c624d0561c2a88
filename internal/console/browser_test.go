package console_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/testenv/browser"
)

// step bounds one browser step: a hang detector for a loaded machine, not a timing assertion.
const step = 2 * time.Minute

// TestBrowserLiveList: in Chromium, after signing in with the form, the list shows a run that
// starts while the page is open, then its outcome when it finishes, without the page being
// reloaded.
func TestBrowserLiveList(t *testing.T) {
	h := newHarness(t, "browser-token")
	old := h.add(t, record{code: "print(1)", stdout: "1\n"})
	ctx := browser.New(t)
	browser.Within(t, ctx, step, "signing in",
		chromedp.Navigate(h.srv.URL+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), h.token),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS(`#rows tr[data-id="`+old+`"]`)),
	)
	if got := browser.Eval[string](t, ctx, "document.cookie"); got != "" {
		t.Fatalf("the login cookie is readable from script: %q", got)
	}
	browser.Eval[bool](t, ctx, "window.__stay = true")

	id := h.add(t, record{code: "import time; time.sleep(1)", running: true})
	browser.Within(t, ctx, step, "waiting for the running run to appear",
		chromedp.WaitVisible(chromedp.CSS(`#rows tr.running[data-id="`+id+`"]`)))
	h.finish(t, id, record{outcome: sandbox.OutcomeTimeout, stdout: "slow"})
	browser.Within(t, ctx, step, "waiting for its outcome",
		chromedp.WaitVisible(chromedp.CSS(`#rows tr.o-timeout[data-id="`+id+`"]`)))
	if !browser.Eval[bool](t, ctx, "window.__stay === true") {
		t.Fatal("the page was reloaded; the list should update in place")
	}

	// The keyboard: "/" jumps to the filters; Enter there filters; Tab reaches the rows' links.
	browser.Within(t, ctx, step, "filtering with the keyboard",
		chromedp.KeyEvent("/"),
		browser.Await(`document.activeElement && document.activeElement.id === "filter-agent"`),
	)
	// DevTools sends the key's character as an event of its own, which the page's
	// preventDefault on keydown does not stop as a real key press is stopped: clear it.
	browser.Eval[string](t, ctx, `document.activeElement.value = ""`)
	browser.Within(t, ctx, step, "filtering with the keyboard",
		chromedp.KeyEvent("nobody\r"),
		chromedp.WaitVisible(chromedp.CSS(`#rows td.empty`)),
	)
	if got := browser.Eval[string](t, ctx, "location.search"); got != "?agent=nobody&source=&outcome=&job=&code=&since=" {
		t.Fatalf("filtering went to %q", got)
	}
}

// TestBrowserRecord: a record's page shows its PNG output file as an image the browser
// decoded, its ANSI colours as colours, and hostile output as text: no script runs, no
// element comes from it.
func TestBrowserRecord(t *testing.T) {
	h := newHarness(t, "")
	id := h.add(t, record{code: "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\n", stdout: hostileStdout,
		files: map[string][]byte{"figure-1.png": chartPNG(t), hostileName: []byte("x")}})
	ctx := browser.New(t)
	browser.Within(t, ctx, step, "opening the record",
		chromedp.Navigate(h.srv.URL+"/ui/executions/"+id),
		chromedp.WaitVisible(chromedp.CSS("#stdout")),
		browser.Await(`(() => { const i = document.querySelector(".files img"); return !!i && i.complete && i.naturalWidth === 320; })()`),
	)
	if w := browser.Eval[float64](t, ctx, `document.querySelector(".files img").getBoundingClientRect().width`); w < 100 {
		t.Fatalf("the chart is %v px wide on the page", w)
	}
	if p := browser.Eval[any](t, ctx, "window.__pwned"); p != nil {
		t.Fatalf("hostile output ran script: window.__pwned = %v", p)
	}
	if n := browser.Eval[float64](t, ctx, `document.querySelectorAll("#stdout *:not(span), #stdout [href], main script, main img:not(.files img)").length`); n != 0 {
		t.Fatalf("%v elements came from the output", n)
	}
	text := browser.Eval[string](t, ctx, `document.getElementById("stdout").textContent`)
	if !strings.Contains(text, "<script>window.__pwned=1</script>") || !strings.Contains(text, "click me") || strings.Contains(text, "\x1b") {
		t.Fatalf("stdout shows %q", text)
	}
	if c := browser.Eval[string](t, ctx, `getComputedStyle(document.querySelector("#stdout .ansi-fg1")).color`); c != "rgb(201, 27, 0)" {
		t.Fatalf("red text is %s", c)
	}
	if got := browser.Eval[string](t, ctx, `[...document.querySelectorAll(".files a")].map(a => a.textContent).join("|")`); !strings.Contains(got, hostileName) {
		t.Fatalf("file links %q, want the hostile name as text", got)
	}
}

// TestBrowserRunningRecord: the page of a running execution shows it running, then its
// outcome once it has finished, by itself.
func TestBrowserRunningRecord(t *testing.T) {
	h := newHarness(t, "")
	id := h.add(t, record{code: "import time; time.sleep(5)", running: true})
	ctx := browser.New(t)
	browser.Within(t, ctx, step, "opening the running record",
		chromedp.Navigate(h.srv.URL+"/ui/executions/"+id),
		chromedp.WaitVisible(chromedp.CSS(".summary .badge.running")),
	)
	h.finish(t, id, record{outcome: sandbox.OutcomeOK, stdout: "done\n"})
	browser.Within(t, ctx, step, "waiting for the outcome",
		chromedp.WaitVisible(chromedp.CSS("#outcome.o-ok")))
	if got := browser.Eval[string](t, ctx, `document.getElementById("stdout").textContent`); got != "done\n" {
		t.Fatalf("stdout shows %q", got)
	}
}
