package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections/sources"
	"github.com/krteds/krteds/test/fixtures"
)

// readmeTryIt is the README's "Try it" section: its fenced code blocks in order, and its prose.
type readmeTryIt struct {
	blocks []string
	prose  string
}

func readTryIt(t *testing.T) readmeTryIt {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Try it\n")
	if !ok {
		t.Fatal(`README.md has no "## Try it" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var out readmeTryIt
	out.blocks, out.prose = fenced(section)
	return out
}

// readmeShell runs a command line of the README with bash in dir, `go run ./cmd/krteds` standing
// for the binary built from the same source (go run would build it again, and leave the server
// running as its child when killed). extra flags are appended: the test's own loopback ports,
// so that it never meets another krteds on the defaults.
func readmeShell(t *testing.T, bin, dir, line string, extra ...string) *exec.Cmd {
	t.Helper()
	line = strings.TrimSpace(line)
	if strings.Contains(line, "\n") {
		t.Fatalf("the README's command is not one line: %q", line)
	}
	shim := `go() { if [ "$1 $2" != "run ./cmd/krteds" ]; then echo "the README runs go $*, not go run ./cmd/krteds" >&2; exit 2; fi; shift 2; exec "$KRTEDS_BIN" "$@"; }; `
	for _, e := range extra {
		line += " " + e
	}
	cmd := exec.Command("bash", "-c", shim+line)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KRTEDS_BIN="+bin)
	return cmd
}

// TestReadmeFirstExample runs the README's first example as a new user would (its two commands,
// read from the README's code blocks, in a copy of examples/) and holds krteds' output to the
// README's block; then its prose: the counts of the example mesh, the endpoints not sent, and the
// late Pod's endpoint appearing once the README's cp command has run.
func TestReadmeFirstExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	readme := readTryIt(t)
	if len(readme.blocks) < 3 {
		t.Fatalf(`the README's "Try it" has %d code blocks; want the serve command, the endpoints command and its output`, len(readme.blocks))
	}
	serveLine, endpointsLine, wantOut := readme.blocks[0], readme.blocks[1], readme.blocks[2]
	for _, c := range []struct{ line, verb string }{{serveLine, " serve "}, {endpointsLine, " endpoints "}} {
		if !strings.Contains(c.line, c.verb) {
			t.Fatalf("the README's example should run krteds%s, runs %q", c.verb, c.line)
		}
	}

	bin := buildBinary(t)
	dir := t.TempDir()
	copyDir(t, filepath.Join(repoRoot(t), "examples"), filepath.Join(dir, "examples"))
	xdsAddr, debugAddr := fmt.Sprintf("127.0.0.1:%d", fixtures.FreePort(t)), fmt.Sprintf("127.0.0.1:%d", fixtures.FreePort(t))
	serve := readmeShell(t, bin, dir, serveLine, "--xds-addr", xdsAddr, "--debug-addr", debugAddr)
	startLogged(t, serve)
	waitFor(t, "/ready", answers(debugAddr, http.StatusOK))

	endpoints := readmeShell(t, bin, dir, endpointsLine, "--xds", xdsAddr)
	out, err := endpoints.Output()
	if err != nil {
		t.Fatalf("the README's endpoints command: %v\n%s", err, out)
	}
	if diff := cmp.Diff(strings.Split(strings.TrimRight(wantOut, "\n"), "\n"), strings.Split(strings.TrimRight(string(out), "\n"), "\n")); diff != "" {
		t.Errorf("the README's output block is not what `krteds endpoints` prints (-README +krteds):\n%s", diff)
	}

	// "The terminating endpoint 10.10.1.14 is not sent, and 10.10.1.15 waits for its Pod."
	for _, ip := range []string{"10.10.1.14", "10.10.1.15"} {
		if !strings.Contains(readme.prose, ip) {
			t.Errorf("the README no longer says why %s is not sent; this test holds the output to it", ip)
		}
		if strings.Contains(string(out), ip+":") {
			t.Errorf("%s is sent, but the README says it is not:\n%s", ip, out)
		}
	}

	checkExampleCounts(t, readme.prose)

	// "`cp examples/late/reviews-late-pod.yaml examples/mesh/` creates that Pod and 10.10.1.15
	// appears": with the endpoints command watching, run the README's cp.
	cp := regexp.MustCompile("`(cp examples/late/[^`]+)`").FindStringSubmatch(readme.prose)
	if cp == nil {
		t.Fatal("the README no longer says how to create the late Pod (`cp examples/late/...`)")
	}
	lines := outputLines(t, readmeShell(t, bin, dir, endpointsLine, "--xds", xdsAddr, "--watch"), 64)
	// The first table is printed once every cluster has its CLA: the last row of the README's.
	lastRow := strings.Fields(wantOut[strings.LastIndex(strings.TrimRight(wantOut, "\n"), "\n")+1:])[0]
	waitLine(t, lines, "the watcher's first table", func(l string) bool { return strings.HasPrefix(l, lastRow+" ") })
	start := time.Now()
	if out, err := readmeShell(t, bin, dir, cp[1]).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cp[1], err, out)
	}
	waitLine(t, lines, "10.10.1.15 to appear", func(l string) bool { return strings.HasPrefix(l, "10.10.1.15:9080 ") && strings.Contains(l, "HEALTHY") })
	t.Logf("10.10.1.15 appeared %s after the README's cp", time.Since(start).Round(time.Millisecond))
}

// waitLine reads lines until one satisfies ok, failing after 20 s or when the stream ends.
func waitLine(t *testing.T, lines <-chan string, what string, ok func(string) bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case l, open := <-lines:
			if !open {
				t.Fatalf("the output ended before %s", what)
			}
			if ok(l) {
				return
			}
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// checkExampleCounts holds "namespace shop with three Services and eight pods on three nodes in
// two regions" to examples/mesh.
func checkExampleCounts(t *testing.T, prose string) {
	t.Helper()
	m := regexp.MustCompile(`with (\w+) Services and (\w+) pods on (\w+) nodes in (\w+) regions`).FindStringSubmatch(strings.Join(strings.Fields(prose), " "))
	if m == nil {
		t.Fatal("the README no longer counts the example's Services, pods, nodes and regions; update this test")
	}
	words := map[string]int{"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
	count := map[string]int{}
	regions := map[string]bool{}
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "examples", "mesh", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d, err := sources.Decode(b, nil)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, o := range d.Objects {
			count[o.Kind.String()]++
			if n, ok := o.Obj.(*corev1.Node); ok {
				regions[n.Labels["topology.kubernetes.io/region"]] = true
			}
		}
	}
	count["region"] = len(regions)
	for i, kind := range []string{"Service", "Pod", "Node", "region"} {
		n, ok := words[m[i+1]]
		if !ok {
			n, _ = strconv.Atoi(m[i+1])
		}
		if n != count[kind] {
			t.Errorf("the README says %s %s(s); examples/mesh has %d", m[i+1], kind, count[kind])
		}
	}
}

// outputLines starts cmd and sends each line it writes to the channel returned (buffered by
// n), closed when its output ends; the process is killed at the test's end.
func outputLines(t *testing.T, cmd *exec.Cmd, n int) <-chan string {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, n)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines
}
