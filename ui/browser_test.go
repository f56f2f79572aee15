package ui_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasegate/leasegate/internal/timingtest"
)

// The browser tests drive Debian's chromium, headless, through the
// DevTools protocol (chromedp). CI installs it (.ci/run); a developer
// without it may set LEASEGATE_SKIP_BROWSER=1 to skip them, which CI
// (CI=true) never does.
const (
	// chromiumEnv names a Chromium binary to use instead of looking for
	// one on PATH.
	chromiumEnv = "LEASEGATE_CHROMIUM"
	// skipEnv=1 skips the browser tests when no Chromium is found, outside CI.
	skipEnv = "LEASEGATE_SKIP_BROWSER"
	// screenshotsEnv names a directory for the pages' screenshots; unset,
	// they go to the test's temporary directory. Point it at docs/img to
	// refresh the README's pictures.
	screenshotsEnv = "LEASEGATE_UI_SCREENSHOTS"
)

func chromiumPath() string {
	if p := os.Getenv(chromiumEnv); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// newBrowser starts a headless Chromium with a fresh profile for t and
// returns a context for its one tab; both end at t's cleanup.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath()
	if path == "" {
		if os.Getenv(skipEnv) == "1" && os.Getenv("CI") != "true" {
			t.Skipf("no Chromium on PATH and %s=1: skipping the browser test", skipEnv)
		}
		t.Fatalf("no Chromium found (looked for chromium, chromium-browser, google-chrome on PATH, and $%s). "+
			"Install Debian's package: apt-get install -y chromium (.ci/run does). Outside CI, %s=1 skips these tests.", chromiumEnv, skipEnv)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	var logs strings.Builder
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(func(f string, a ...any) { fmt.Fprintf(&logs, f+"\n", a...) }))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		if t.Failed() && logs.Len() > 0 {
			t.Logf("browser log:\n%s", logs.String())
		}
	})
	// Start the browser now, so a failure to launch is reported as such.
	// The first call's context lives as long as the browser: no timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx
}

// run runs actions in the browser, failing t after limit.
func run(t *testing.T, ctx context.Context, limit time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if err := chromedp.Do(rctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// value runs one action that returns a value, failing t after limit.
func value[T any](t *testing.T, ctx context.Context, limit time.Duration, what string, a chromedp.Action[T]) T {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	v, err := chromedp.Run(rctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// await waits until the page has an element matching sel (CSS), failing
// t after limit.
func await(t *testing.T, ctx context.Context, limit time.Duration, sel string) {
	t.Helper()
	run(t, ctx, limit, "waiting for "+sel, chromedp.WaitVisible(chromedp.CSS(sel)))
}

// awaitJS waits until expr, evaluated in the page, is true.
func awaitJS(t *testing.T, ctx context.Context, limit time.Duration, what, expr string) {
	t.Helper()
	run(t, ctx, limit, "waiting until "+what, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(limit)))
}

// live bounds a wait for the page to follow a change: a second when
// timing is judged (LEASEGATE_TIMING=1), else long enough for a loaded
// machine. The wait itself is for a DOM condition, never a sleep.
func live() time.Duration {
	if timingtest.Enabled() {
		return time.Second
	}
	return 15 * time.Second
}

// screenshot writes the page to name in the screenshots directory.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv(screenshotsEnv)
	if dir == "" {
		dir = t.TempDir()
	}
	png := value(t, ctx, 10*time.Second, "screenshot", chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", filepath.Join(dir, name))
}
