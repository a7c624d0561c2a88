package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sandpit-dev/sandpit/internal/testenv/browser"
)

// consoleCode draws its INPUT's squares, prints in colour and sums them.
const consoleCode = `import matplotlib.pyplot as plt
n = INPUT["n"]
plt.figure(figsize=(6, 3.5))
plt.plot(range(n), [i * i for i in range(n)], marker="o")
plt.title("squares")
plt.show()
print("\x1b[32mdrew\x1b[0m", n, "points <script>window.__pwned=1</script>")
OUTPUT = {"sum": sum(range(n))}
`

// withToken sends a JSON request with the daemon's token and decodes the answer into out.
func withToken(t *testing.T, token, method, url, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && json.Unmarshal(b, out) != nil {
		t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	return resp.StatusCode
}

// TestConsoleInBrowser drives the web console of a real daemon (real engine) in Chromium:
// signing in with the token form, running saved code from its form (the input refused first
// by the page's schema check, then by the daemon's), the record's page showing the run's
// matplotlib chart, and the executions list showing a new run without a reload. With
// SANDPIT_CONSOLE_SCREENSHOTS=dir it saves the screenshots of the README there.
func TestConsoleInBrowser(t *testing.T) {
	ctx := browser.New(t)
	cfg := testConfig(t)
	cfg.Token = "console-test-token-0123456789"
	cfg.DefaultTimeoutMS = 120000 // the first matplotlib import of a fresh engine on a busy machine
	url, _ := startDaemon(t, cfg)
	const step = 3 * time.Minute

	schema := `{"type": "object", "required": ["n"], "properties": {"n": {"type": "integer", "minimum": 2, "maximum": 50}}}`
	body, _ := json.Marshal(map[string]any{"name": "squares", "code": consoleCode, "input_schema": json.RawMessage(schema), "description": "plots squares"})
	if st := withToken(t, cfg.Token, "POST", url+"/v1/agents/charts/code", string(body), nil); st != http.StatusCreated {
		t.Fatalf("saving code: %d", st)
	}

	browser.Within(t, ctx, step, "signing in",
		chromedp.Navigate(url+"/ui/code/charts/squares"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), cfg.Token),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS("#run-input")),
	)
	// The page checks the schema's types before sending.
	browser.Within(t, ctx, step, "running with a string n",
		chromedp.SetValue(chromedp.CSS("#run-input"), `{"n": "four"}`),
		chromedp.Click(chromedp.CSS("#run-button")),
		chromedp.WaitVisible(chromedp.CSS("#run-problem")),
	)
	if msg := browser.Eval[string](t, ctx, `document.getElementById("run-problem").textContent`); !strings.Contains(msg, "/n must be integer") {
		t.Fatalf("the form says %q", msg)
	}
	// The daemon checks the rest (minimum), and the page shows its violations.
	browser.Within(t, ctx, step, "running with n below the minimum",
		chromedp.SetValue(chromedp.CSS("#run-input"), `{"n": 1}`),
		chromedp.Click(chromedp.CSS("#run-button")),
		chromedp.WaitVisible(chromedp.CSS(".violations")),
	)
	if msg := browser.Eval[string](t, ctx, `document.querySelector(".violations").textContent`); !strings.Contains(msg, "/n") {
		t.Fatalf("the violations say %q", msg)
	}
	browser.Within(t, ctx, step, "running with a valid input",
		chromedp.SetValue(chromedp.CSS("#run-input"), `{"n": 8}`),
		chromedp.Click(chromedp.CSS("#run-button")),
		chromedp.WaitVisible(chromedp.CSS("#outcome")),
		browser.Await(`(() => { const i = document.querySelector(".files img"); return !!i && i.complete && i.naturalWidth >= 200; })()`),
	)
	if got := browser.Eval[string](t, ctx, `document.getElementById("outcome").textContent + " " + document.getElementById("output").textContent`); !strings.Contains(got, "ok") || !strings.Contains(got, `"sum": 28`) {
		t.Fatalf("the record shows %q", got)
	}
	if got := browser.Eval[string](t, ctx, `document.querySelector("#stdout .ansi-fg2").textContent`); got != "drew" {
		t.Fatalf("the green text is %q", got)
	}
	if p := browser.Eval[any](t, ctx, "window.__pwned"); p != nil {
		t.Fatalf("the run's output ran script: %v", p)
	}
	shots := os.Getenv("SANDPIT_CONSOLE_SCREENSHOTS")
	shoot := func(name string) {
		if shots == "" {
			return
		}
		sub, cancel := context.WithTimeout(ctx, step)
		defer cancel()
		png, err := chromedp.Run(sub, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shoot("console-record.png")

	// The list shows a run that happens while it is open, without reloading.
	browser.Within(t, ctx, step, "opening the list",
		chromedp.Navigate(url+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#rows tr[data-id]")),
	)
	browser.Eval[bool](t, ctx, "window.__stay = true")
	var res struct {
		ID      string `json:"id"`
		Outcome string `json:"outcome"`
	}
	if st := withToken(t, cfg.Token, "POST", url+"/v1/executions", `{"agent": "charts", "code": "print('\\x1b[31mred\\x1b[0m'); raise SystemExit(3)"}`, &res); st != http.StatusOK || res.Outcome != "error" {
		t.Fatalf("running: %d %+v", st, res)
	}
	browser.Within(t, ctx, step, "waiting for the new run in the list",
		chromedp.WaitVisible(chromedp.CSS(`#rows tr.o-error[data-id="`+res.ID+`"]`)))
	if !browser.Eval[bool](t, ctx, "window.__stay === true") {
		t.Fatal("the list page was reloaded; it should update in place")
	}
	shoot("console-executions.png")

	// Jobs: the schedule in words, pause and resume, and "run now" whose run shows in the strip.
	var job struct {
		ID string `json:"id"`
	}
	if st := withToken(t, cfg.Token, "POST", url+"/v1/agents/charts/jobs", `{"code_name": "squares", "schedule": "0 6 * * *", "input": {"n": 3}}`, &job); st != http.StatusCreated {
		t.Fatalf("creating a job: %d", st)
	}
	browser.Within(t, ctx, step, "pausing the job",
		chromedp.Navigate(url+"/ui/jobs?agent=charts"),
		chromedp.WaitVisible(chromedp.CSS("#"+job.ID)),
		chromedp.Click(chromedp.CSS(`#`+job.ID+` form[action$="/pause"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`#`+job.ID+` .paused`)),
	)
	if got := browser.Eval[string](t, ctx, `document.querySelector("#`+job.ID+` .schedule").textContent`); !strings.Contains(got, "every day at 06:00") {
		t.Fatalf("the schedule reads %q", got)
	}
	browser.Within(t, ctx, step, "resuming it and running it now",
		chromedp.Click(chromedp.CSS(`#`+job.ID+` form[action$="/resume"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`#`+job.ID+` form[action$="/pause"]`)),
		chromedp.Click(chromedp.CSS(`#`+job.ID+` form[action$="/run"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`.notice[data-done$="fired now"]`)),
	)
	// The jobs page is not live: reload it until the fire's run has finished.
	for deadline := time.Now().Add(step); ; time.Sleep(500 * time.Millisecond) {
		browser.Within(t, ctx, step, "reloading the jobs page", chromedp.Navigate(url+"/ui/jobs?agent=charts"), chromedp.WaitVisible(chromedp.CSS("#"+job.ID)))
		if browser.Eval[bool](t, ctx, `!!document.querySelector("#`+job.ID+` .strip a.o-ok")`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fire's run is not in the strip: %s", browser.Eval[string](t, ctx, `document.querySelector("#`+job.ID+` .strip").outerHTML`))
		}
	}
}
