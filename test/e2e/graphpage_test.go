package e2e

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/krteds/krteds/cmd/krteds/app"
	"github.com/krteds/krteds/collections"
)

// chromiumPath finds Debian's chromium; the test is skipped with a message where it is missing.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("KRTEDS_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := exec.LookPath(p); err == nil {
			return p
		}
	}
	t.Skip("chromium is not installed (apt-get install chromium); .ci/run installs it")
	return ""
}

// TestGraphPageRendersEveryCollection opens /debug/krt?format=html in headless Chromium and
// checks that the drawn page shows every collection of the graph; it saves a screenshot.
func TestGraphPageRendersEveryCollection(t *testing.T) {
	chrome := chromiumPath(t)
	xl, _ := net.Listen("tcp", "127.0.0.1:0")
	dl, _ := net.Listen("tcp", "127.0.0.1:0")
	a, err := app.Start(app.Options{Config: collections.DefaultConfig(), Manifests: filepath.Join(repoRoot(t), "examples", "mesh"),
		XDSListener: xl, DebugListener: dl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	stop := make(chan struct{})
	defer close(stop)
	if !a.WaitUntilSynced(stop) {
		t.Fatal("not synced")
	}

	allocOpts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1800, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), allocOpts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 60*time.Second)
	defer cancelT()

	url := "http://" + dl.Addr().String() + "/debug/krt?format=html"
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitReady(`g.node`)); err != nil {
		t.Fatalf("opening %s in chromium: %v", url, err)
	}
	names, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("g.node")).map(g => g.getAttribute("data-name"))`))
	if err != nil {
		t.Fatalf("reading the drawn collections: %v", err)
	}
	status, err := chromedp.Run(ctx, chromedp.Text(`#status`))
	if err != nil {
		t.Fatalf("reading the status line: %v", err)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("taking a screenshot: %v", err)
	}
	png := filepath.Join(t.TempDir(), "krt-graph.png")
	if err := os.WriteFile(png, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes); status: %s", png, len(shot), status)
	drawn := map[string]bool{}
	for _, n := range names {
		drawn[n] = true
	}
	for _, n := range a.Graph.Description.Snapshot().Nodes {
		if !drawn[n.Name] {
			t.Errorf("collection %s is not drawn (drawn: %v)", n.Name, names)
		}
	}
	if !strings.Contains(status, "collections") {
		t.Errorf("status line: %q", status)
	}
	if os.Getenv("KRTEDS_KEEP_SCREENSHOT") != "" {
		_ = os.WriteFile(os.Getenv("KRTEDS_KEEP_SCREENSHOT"), shot, 0o644)
	}
}
