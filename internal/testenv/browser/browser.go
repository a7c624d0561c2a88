// Package browser starts a headless Chromium for tests, driven by chromedp. Tests that need
// it skip with a message when no Chromium is installed, and fail instead when
// SANDPIT_REQUIRE_CHROMIUM=1 (CI sets it; Debian: apt-get install chromium).
package browser

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Names are the executables looked for on PATH, in order.
var Names = []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"}

// Path returns the Chromium executable, or "" when none is installed.
func Path() string {
	for _, n := range Names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// New starts a headless Chromium for t (stopped when t ends) and returns a context of one
// tab; bound each step with Within. It skips t when Chromium is absent, or fails it when
// SANDPIT_REQUIRE_CHROMIUM=1.
func New(t testing.TB) context.Context {
	t.Helper()
	path := Path()
	if path == "" {
		if os.Getenv("SANDPIT_REQUIRE_CHROMIUM") == "1" {
			t.Fatal("SANDPIT_REQUIRE_CHROMIUM=1 but no Chromium is installed (apt-get install chromium)")
		}
		t.Skip("no Chromium installed (apt-get install chromium); set SANDPIT_REQUIRE_CHROMIUM=1 to require it")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // tests run as root in CI containers, where Chromium's sandbox cannot start
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	// The first action starts the browser, which lives as long as ctx: no timeout on it.
	if err := chromedp.Do(ctx, chromedp.Sleep(0)); err != nil {
		t.Fatalf("starting Chromium (%s): %v", path, err)
	}
	return ctx
}

// Within runs steps in ctx's tab, failing t when they fail or take longer than limit (a
// generous bound for a loaded machine: it is a hang detector, not a timing assertion).
func Within(t testing.TB, ctx context.Context, limit time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sub, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if err := chromedp.Do(sub, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Eval evaluates the JavaScript expression in ctx's tab and returns its value.
func Eval[T any](t testing.TB, ctx context.Context, expr string) T {
	t.Helper()
	sub, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(sub, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// Await waits until the JavaScript expression is truthy in the current page, checking every
// 100 ms, with no timeout of its own (bound it with Within).
func Await(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(0))
}
