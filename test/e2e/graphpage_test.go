package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/krteds/krteds/cmd/krteds/app"
	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/test/rigs"
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

// drawing is what the page drew: its boxes and its edges as polylines, in window pixels.
type drawing struct {
	Width  float64 `json:"width"`
	Height float64 `json:"height"`
	Nodes  []struct {
		Name string  `json:"name"`
		X    float64 `json:"x"`
		Y    float64 `json:"y"`
		W    float64 `json:"w"`
		H    float64 `json:"h"`
	} `json:"nodes"`
	Edges []struct {
		From   string       `json:"from"`
		To     string       `json:"to"`
		Points [][2]float64 `json:"points"`
	} `json:"edges"`
	Status string `json:"status"`
}

// settled waits until the page has drawn the graph and written its status line.
var settled chromedp.Action[chromedp.Void] = func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
	_, err := chromedp.Poll[bool](`document.getElementById("status").textContent.includes("collections")`)(ctx, t)
	return chromedp.Void{}, err
}

const readDrawing = `(() => {
  const m = document.getElementById("graph").getScreenCTM();
  return {
    width: window.innerWidth, height: window.innerHeight,
    status: document.getElementById("status").textContent,
    nodes: Array.from(document.querySelectorAll("g.node")).map(g => {
      const r = g.querySelector("rect").getBoundingClientRect();
      return { name: g.dataset.name, x: r.left, y: r.top, w: r.width, h: r.height };
    }),
    edges: Array.from(document.querySelectorAll("path.edge")).map(p => ({
      from: p.dataset.from, to: p.dataset.to,
      points: p.dataset.points.split(" ").map(s => {
        const [x, y] = s.split(",").map(Number);
        const q = new DOMPoint(x, y).matrixTransform(m);
        return [q.x, q.y];
      }),
    })),
  };
})()`

// startDemo runs krteds on a folder of the local cluster's manifests and the example's east
// cluster, as krteds serve --demo does, and waits until it has synced; it returns the xDS and
// debug addresses.
func startDemo(t *testing.T, mesh string) (a *app.App, xdsAddr, debugAddr string) {
	t.Helper()
	r := rigs.StartApp(t, app.Options{Config: collections.DefaultConfig(), Manifests: mesh,
		Remote:        []app.Remote{{ID: "east", Manifests: filepath.Join(repoRoot(t), "examples", "east")}},
		DebugListener: rigs.Listen(t)})
	r.AwaitSynced()
	return r.App, r.XDSAddr, r.DebugAddr
}

// segmentCrossesBox reports whether the segment a→b passes through the inside of the box
// (Liang–Barsky clipping against the box shrunk by a pixel, so touching an edge is allowed).
func segmentCrossesBox(a, b [2]float64, x, y, w, h float64) bool {
	const inset = 1
	x0, y0, x1, y1 := x+inset, y+inset, x+w-inset, y+h-inset
	if x1 <= x0 || y1 <= y0 {
		return false
	}
	dx, dy := b[0]-a[0], b[1]-a[1]
	t0, t1 := 0.0, 1.0
	for _, c := range [][2]float64{{-dx, a[0] - x0}, {dx, x1 - a[0]}, {-dy, a[1] - y0}, {dy, y1 - a[1]}} {
		p, q := c[0], c[1]
		if p == 0 {
			if q < 0 {
				return false
			}
			continue
		}
		r := q / p
		if p < 0 {
			t0 = max(t0, r)
		} else {
			t1 = min(t1, r)
		}
		if t0 > t1 {
			return false
		}
	}
	return true
}

func TestSegmentCrossesBox(t *testing.T) {
	for _, tc := range []struct {
		a, b [2]float64
		want bool
	}{
		{[2]float64{0, 5}, [2]float64{20, 5}, true},  // straight through
		{[2]float64{0, 0}, [2]float64{20, 0}, false}, // along the top edge
		{[2]float64{0, 20}, [2]float64{20, 20}, false},
		{[2]float64{-5, -5}, [2]float64{15, 15}, true}, // diagonal
		{[2]float64{12, 0}, [2]float64{30, 10}, false}, // beside it
		{[2]float64{5, 5}, [2]float64{6, 6}, true},     // inside
	} {
		if got := segmentCrossesBox(tc.a, tc.b, 0, 0, 10, 10); got != tc.want {
			t.Errorf("%v→%v: %t, want %t", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestGraphPage opens /debug/krt?format=html in headless Chromium at two window sizes and holds
// the drawing to what a reader needs: every collection drawn, every box inside the window, no
// edge through a box it does not join; hovering a collection highlights exactly its inputs and
// readers; clicking it opens its contents in /debug/krtz. Screenshots are saved (and kept in
// $KRTEDS_KEEP_SCREENSHOTS, a folder, when set).
func TestGraphPage(t *testing.T) {
	chrome := chromiumPath(t)
	// The demo's two clusters: the largest graph krteds draws.
	a, _, debugAddr := startDemo(t, filepath.Join(repoRoot(t), "examples", "mesh"))
	snap := a.Graph.Description.Snapshot()

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
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), allocOpts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	defer cancelT()
	url := "http://" + debugAddr + "/debug/krt?format=html"

	for _, size := range [][2]int64{{1280, 800}, {1920, 1080}} {
		name := fmt.Sprintf("%dx%d", size[0], size[1])
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(size[0], size[1]), chromedp.Navigate(url), chromedp.WaitReady(chromedp.CSS(`g.node`)), settled); err != nil {
			t.Fatalf("%s: opening %s in chromium: %v", name, url, err)
		}
		d, err := chromedp.Run(ctx, chromedp.Evaluate[drawing](readDrawing))
		if err != nil {
			t.Fatalf("%s: reading the drawing: %v", name, err)
		}
		screenshot(ctx, t, "krt-graph-"+name+".png")
		t.Logf("%s: status: %s", name, d.Status)
		checkDrawing(t, name, d, snap.Nodes, len(snap.Edges))
	}

	// Hover and click, at the smaller size: a collection with both inputs and readers.
	const focus = "ServiceInfos"
	var in, out []string
	for _, e := range snap.Edges {
		if e.To == focus {
			in = append(in, e.From)
		}
		if e.From == focus {
			out = append(out, e.To)
		}
	}
	if len(in) == 0 || len(out) == 0 {
		t.Fatalf("%s should have inputs and readers in the example graph: in %v out %v", focus, in, out)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(url), chromedp.WaitReady(chromedp.CSS(`g.node`)), settled); err != nil {
		t.Fatal(err)
	}
	d, err := chromedp.Run(ctx, chromedp.Evaluate[drawing](readDrawing))
	if err != nil {
		t.Fatal(err)
	}
	var cx, cy float64
	for _, n := range d.Nodes {
		if n.Name == focus {
			cx, cy = n.X+n.W/2, n.Y+n.H/2
		}
	}
	if err := chromedp.Do(ctx, chromedp.MouseEvent(chromedp.MouseMoved, cx, cy)); err != nil {
		t.Fatal(err)
	}
	type highlight struct {
		Focus []string `json:"focus"`
		Nodes []string `json:"nodes"`
		In    []string `json:"in"`
		Out   []string `json:"out"`
	}
	hl, err := chromedp.Run(ctx, chromedp.Poll[highlight](`(() => {
	  const names = s => Array.from(document.querySelectorAll(s)).map(e => e.dataset.name || e.dataset.from + ">" + e.dataset.to);
	  const f = names("g.node.focus");
	  return f.length ? { focus: f, nodes: names("g.node.hl"), in: names("path.edge.in"), out: names("path.edge.out") } : null;
	})()`))
	if err != nil {
		t.Fatalf("hovering %s highlights nothing: %v", focus, err)
	}
	wantNodes := slices.Concat(in, out)
	var wantIn, wantOut []string
	for _, n := range in {
		wantIn = append(wantIn, n+">"+focus)
	}
	for _, n := range out {
		wantOut = append(wantOut, focus+">"+n)
	}
	for _, c := range []struct {
		what      string
		got, want []string
	}{{"focused", hl.Focus, []string{focus}}, {"highlighted collections", hl.Nodes, wantNodes}, {"highlighted inputs", hl.In, wantIn}, {"highlighted readers", hl.Out, wantOut}} {
		slices.Sort(c.got)
		c.want = slices.Compact(slices.Sorted(slices.Values(c.want)))
		c.got = slices.Compact(c.got)
		if !slices.Equal(c.got, c.want) {
			t.Errorf("hovering %s: %s %v, want %v", focus, c.what, c.got, c.want)
		}
	}

	screenshot(ctx, t, "krt-graph-1280x800-hover.png")
	if err := chromedp.Do(ctx, chromedp.MouseClickXY(cx, cy)); err != nil {
		t.Fatal(err)
	}
	// Chromium shows a JSON document in a <pre>; the graph page has none.
	if err := chromedp.Do(ctx, chromedp.WaitReady(chromedp.CSS(`pre`))); err != nil {
		t.Fatalf("clicking %s opened no JSON document: %v", focus, err)
	}
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if want := "http://" + debugAddr + "/debug/krtz?collection=" + focus; loc != want {
		t.Errorf("clicking %s opened %s, want %s", focus, loc, want)
	}
	body, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`pre`)))
	if err != nil {
		t.Fatal(err)
	}
	var dump []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal([]byte(body), &dump); err != nil || len(dump) != 1 || dump[0].Name != focus {
		t.Errorf("clicking %s opened %.300q (err %v), want its krtz dump", focus, body, err)
	}
}

// screenshot saves what the window shows, in $KRTEDS_KEEP_SCREENSHOTS (a folder) when set.
func screenshot(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("taking screenshot %s: %v", name, err)
	}
	dir := os.Getenv("KRTEDS_KEEP_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%d bytes)", file, len(shot))
}

// checkDrawing fails the test for a collection not drawn, a box outside the window, or an edge
// through a box that is neither of its ends.
func checkDrawing(t *testing.T, size string, d drawing, nodes []graphs.NodeInfo, edges int) {
	t.Helper()
	drawn := map[string]bool{}
	for _, n := range d.Nodes {
		drawn[n.Name] = true
		const slack = 0.5
		if n.X < -slack || n.Y < -slack || n.X+n.W > d.Width+slack || n.Y+n.H > d.Height+slack {
			t.Errorf("%s: box %s at (%.0f,%.0f) %.0f×%.0f lies outside the %.0f×%.0f window", size, n.Name, n.X, n.Y, n.W, n.H, d.Width, d.Height)
		}
	}
	for _, n := range nodes {
		if !drawn[n.Name] {
			t.Errorf("%s: collection %s is not drawn", size, n.Name)
		}
	}
	if len(d.Edges) != edges {
		t.Errorf("%s: %d edges drawn, the graph has %d", size, len(d.Edges), edges)
	}
	for _, e := range d.Edges {
		for i := 1; i < len(e.Points); i++ {
			for _, n := range d.Nodes {
				if n.Name == e.From || n.Name == e.To {
					continue
				}
				if segmentCrossesBox(e.Points[i-1], e.Points[i], n.X, n.Y, n.W, n.H) {
					t.Errorf("%s: edge %s → %s crosses the box of %s", size, e.From, e.To, n.Name)
				}
			}
		}
	}
	if !strings.Contains(d.Status, "collections") {
		t.Errorf("%s: status line %q", size, d.Status)
	}
}
