package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/krteds/krteds/outputs/xds/xdsdebug"
	"github.com/krteds/krteds/test/fixtures"
)

// docSection is the fenced code blocks of the section of that heading in file (a path from the
// repository's root, such as docs/OPERATING.md).
func docSection(t *testing.T, file, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), filepath.FromSlash(file)))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no %q section", file, heading)
	}
	section, _, _ = strings.Cut(section, "\n#")
	blocks, _ := fenced(section)
	return blocks
}

// fenced splits a section of Markdown into its fenced code blocks, in order, and the prose
// around them.
func fenced(section string) (blocks []string, prose string) {
	var block []string
	in := false
	for line := range strings.Lines(section) {
		switch {
		case strings.HasPrefix(line, "```") && !in:
			in, block = true, nil
		case strings.HasPrefix(line, "```"):
			in = false
			blocks = append(blocks, strings.Join(block, ""))
		case in:
			block = append(block, line)
		default:
			prose += line
		}
	}
	return blocks, prose
}

// whenPage is the page of the "why does a proxy still send to an endpoint" example.
const whenPage = "docs/OPERATING.md"

// masked replaces what differs from run to run in explain's text: clock times, CLA versions,
// durations.
func masked(s string) []string {
	s = regexp.MustCompile(`\d\d:\d\d:\d\d\.\d{6}`).ReplaceAllString(s, "HH:MM:SS.ffffff")
	s = regexp.MustCompile(`CLA [0-9a-f]+`).ReplaceAllString(s, "CLA v")
	s = regexp.MustCompile(`for [0-9.]+(ms|s|µs)`).ReplaceAllString(s, "for D")
	return strings.Split(strings.TrimRight(s, "\n"), "\n")
}

// TestDocsWhenExample runs the "why does a proxy still send to an endpoint" example of
// docs/OPERATING.md on the example mesh, as the page says (a proxy watching, the late Pod coming
// and going, then krteds explain --history), with the README's serve command, and holds
// explain's output to the page's block, times and versions aside.
func TestDocsWhenExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	blocks := docSection(t, whenPage, "### Why does a proxy still send to an endpoint?")
	if len(blocks) != 2 {
		t.Fatalf("the section has %d code blocks; want the commands and explain's output", len(blocks))
	}
	var lines []string
	for l := range strings.Lines(blocks[0]) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) != 4 || !strings.Contains(lines[0], " endpoints --watch ") || !strings.HasPrefix(lines[1], "cp ") ||
		!strings.HasPrefix(lines[2], "rm ") || !strings.Contains(lines[3], " explain ") {
		t.Fatalf("the commands of %s: %q; want the watcher, cp, rm, explain", whenPage, lines)
	}
	serveLine := readTryIt(t).blocks[0]
	bin := buildBinary(t)
	dir := t.TempDir()
	copyDir(t, filepath.Join(repoRoot(t), "examples"), filepath.Join(dir, "examples"))
	xdsAddr, debugAddr := fmt.Sprintf("127.0.0.1:%d", fixtures.FreePort(t)), fmt.Sprintf("127.0.0.1:%d", fixtures.FreePort(t))
	startLogged(t, readmeShell(t, bin, dir, serveLine, "--xds-addr", xdsAddr, "--debug-addr", debugAddr))
	waitFor(t, "/ready", answers(debugAddr, http.StatusOK))

	rows := outputLines(t, readmeShell(t, bin, dir, lines[0], "--xds", xdsAddr), 256)
	waitLine(t, rows, "the watcher's first table", func(l string) bool { return strings.HasPrefix(l, "10.10.1.13:9080 ") })
	if out, err := readmeShell(t, bin, dir, lines[1]).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", lines[1], err, out)
	}
	waitLine(t, rows, "10.10.1.15 sent", func(l string) bool { return strings.HasPrefix(l, "10.10.1.15:9080 ") })
	if out, err := readmeShell(t, bin, dir, lines[2]).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", lines[2], err, out)
	}
	waitFor(t, "10.10.1.15 withheld", func() (bool, string) {
		out, err := run(t, bin, "endpoints", "--xds", xdsAddr, "--cluster", "outbound|9080||reviews.shop.svc.cluster.local",
			"--node-id", "sidecar~10.10.9.9~check-1.shop~shop.svc.cluster.local")
		return err == nil && !strings.Contains(out, "10.10.1.15"), out
	})
	waitFor(t, "the watcher to acknowledge it", func() (bool, string) {
		resp, err := http.Get("http://" + debugAddr + "/debug/staleness")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var s xdsdebug.Staleness
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
			return false, err.Error()
		}
		return s.Proxies == 1 && len(s.Behind) == 0, "behind"
	})
	out, err := readmeShell(t, bin, dir, lines[3], "--debug", debugAddr).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", lines[3], err, out)
	}
	if diff := cmp.Diff(masked(blocks[1]), masked(string(out))); diff != "" {
		t.Errorf("the block of %s is not what krteds explain --history prints, times and versions aside (-%s +krteds):\n%s\nkrteds printed:\n%s", whenPage, whenPage, diff, out)
	}
}
