package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/krteds/krteds/test/fixtures"
)

// repoRoot is the module root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	binDir    string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildBinary builds cmd/krteds once per test binary run.
func buildBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "krteds-bin-")
		if buildErr != nil {
			return
		}
		builtBin = filepath.Join(binDir, "krteds")
		cmd := exec.Command("go", "build", "-o", builtBin, "./cmd/krteds")
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building krteds: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// serveExample runs `krteds serve` (with extra flags) on a copy of examples/mesh, killed with the
// test, its output logged if the test fails; done says how it exited.
func serveExample(t *testing.T, bin string, extra ...string) (dir, xdsAddr, debugAddr string, serve *exec.Cmd, done <-chan error) {
	t.Helper()
	dir = t.TempDir()
	copyDir(t, filepath.Join(repoRoot(t), "examples", "mesh"), dir)
	xdsAddr, debugAddr = fmt.Sprintf("127.0.0.1:%d", fixtures.FreePort(t)), fmt.Sprintf("127.0.0.1:%d", fixtures.FreePort(t))
	serve = exec.Command(bin, append([]string{"serve", "--manifests", dir, "--xds-addr", xdsAddr, "--debug-addr", debugAddr}, extra...)...)
	_, done = startLogged(t, serve)
	return dir, xdsAddr, debugAddr, serve, done
}

// startLogged starts a command, its output kept in logs, killed with the test, its output logged
// if the test fails; exited says how it ended.
func startLogged(t *testing.T, cmd *exec.Cmd) (logs *syncBuffer, exited <-chan error) {
	t.Helper()
	logs = new(syncBuffer)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done, finished := make(chan error, 1), make(chan struct{})
	go func() {
		done <- cmd.Wait()
		close(finished)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-finished
		if t.Failed() {
			t.Logf("%s output:\n%s", cmd.Args[0], logs.String())
		}
	})
	return logs, done
}

// readyStatus is the status /ready answers (0 when nothing answers).
func readyStatus(debugAddr string) int {
	resp, err := http.Get("http://" + debugAddr + "/ready")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func run(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if err != nil {
		return out.String() + errOut.String(), err
	}
	return out.String(), nil
}

// syncBuffer is a bytes.Buffer a process writes to while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestBinaryServesExamplesAndFollowsEdits runs the real binary on a copy of the bundled
// examples, edits the manifests, and reads the result with `krteds endpoints`.
func TestBinaryServesExamplesAndFollowsEdits(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	dir, xdsAddr, debugAddr, serve, done := serveExample(t, bin)
	waitFor(t, "/ready", answers(debugAddr, http.StatusOK))
	const reviews = "outbound|9080||reviews.shop.svc.cluster.local"
	endpoints := func() string {
		out, err := run(t, bin, "endpoints", "--xds", xdsAddr, "--cluster", reviews,
			"--node-id", "sidecar~10.10.0.11~frontend-7d9f8-aaaaa.shop~shop.svc.cluster.local")
		if err != nil {
			t.Fatalf("krteds endpoints: %v\n%s", err, out)
		}
		return out
	}
	out := endpoints()
	for _, want := range []string{"ENDPOINT", "STATUS", "LOCALITY", "PRIORITY", "WEIGHT", "CLUSTER",
		"10.10.1.11:9080   HEALTHY", "10.10.1.13:9080   UNHEALTHY   eu-west/eu-west-1a"} {
		if !strings.Contains(out, want) {
			t.Fatalf("endpoints output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "10.10.1.14") || strings.Contains(out, "10.10.1.15") {
		t.Fatalf("terminating endpoint and the one without a Pod must not be served:\n%s", out)
	}

	// The VM behind a ServiceEntry: a WorkloadEntry's endpoint carries no health status, as
	// istiod sends it.
	out, err := run(t, bin, "endpoints", "--xds", xdsAddr, "--cluster", "outbound|80||payments.shop.internal",
		"--node-id", "sidecar~10.10.0.11~frontend-7d9f8-aaaaa.shop~shop.svc.cluster.local")
	if err != nil || !strings.Contains(out, "10.20.0.5:8080   UNKNOWN   us-east/us-east-1a") {
		t.Fatalf("the WorkloadEntry behind payments.shop.internal is not served (%v):\n%s", err, out)
	}

	// A watcher: `krteds endpoints --watch` prints the endpoints again each time they change.
	var watchOut syncBuffer
	watch := exec.Command(bin, "endpoints", "--xds", xdsAddr, "--watch", "--cluster", reviews,
		"--node-id", "sidecar~10.10.0.11~frontend-7d9f8-aaaaa.shop~shop.svc.cluster.local")
	watch.Stdout, watch.Stderr = &watchOut, &watchOut
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = watch.Process.Kill(); _ = watch.Wait() })
	waitFor(t, "the watcher's first table", holds(watchOut.String, "10.10.1.11:9080"))

	// The late Pod arrives as a new file.
	late, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", "late", "reviews-late-pod.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "20-late.yaml"), late, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the late pod's endpoint", holds(endpoints, "10.10.1.15:9080   HEALTHY"))
	waitFor(t, "the watcher to print the late pod's endpoint", func() (bool, string) {
		out := watchOut.String()
		return strings.Count(out, "# ") >= 2 && strings.Contains(out, "10.10.1.15:9080"), "…" + out[max(0, len(out)-600):]
	})

	// An edit: the not-ready endpoint becomes ready.
	shop := filepath.Join(dir, "10-shop.yaml")
	b, err := os.ReadFile(shop)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(b), "conditions: {ready: false, serving: false, terminating: false}", "conditions: {ready: true, serving: true, terminating: false}", 1)
	if edited == string(b) {
		t.Fatal("the example no longer has a not-ready endpoint to edit")
	}
	if err := os.WriteFile(shop, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the edited endpoint to be healthy", holds(endpoints, "10.10.1.13:9080   HEALTHY"))

	// The graph command reads the live graph.
	g, err := run(t, bin, "graph", "--debug", debugAddr)
	if err != nil {
		t.Fatalf("krteds graph: %v\n%s", err, g)
	}
	for _, c := range []string{"input/EndpointSlices", "input/Pods", "SliceEndpoints", "ServiceEndpoints", "ClusterLoadAssignments", "ProxyClasses"} {
		if !strings.Contains(g, c) {
			t.Fatalf("graph output lacks %s:\n%s", c, g)
		}
	}

	// SIGTERM: a clean exit.
	if err := serve.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("krteds serve exited with %v after SIGTERM", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("krteds serve did not exit after SIGTERM")
	}
}

func TestBinaryWithoutClusterSaysHowToRunTheExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	home := t.TempDir()
	cmd := exec.Command(bin, "serve", "--xds-addr", fmt.Sprintf("127.0.0.1:%d", fixtures.FreePort(t)), "--debug-addr", fmt.Sprintf("127.0.0.1:%d", fixtures.FreePort(t)))
	cmd.Env = append(os.Environ(), "HOME="+home, "KUBECONFIG="+filepath.Join(home, "missing"), "KUBERNETES_SERVICE_HOST=")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("want a failing exit, got %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := lines[len(lines)-1]
	if !strings.Contains(last, "no Kubernetes cluster reachable") || !strings.Contains(last, "krteds serve --demo") {
		t.Fatalf("unhelpful message:\n%s", out)
	}
}

// waitFor waits until cond holds. The binary is another process: what it serves is read through
// its HTTP endpoint, its CLI and its output, which signal nothing; they are polled.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	fixtures.Polling("the binary is another process, read through its endpoints and output").Await(t, 20*time.Second, what, cond)
}

// answers is a condition on /ready's status.
func answers(debugAddr string, want int) func() (bool, string) {
	return func() (bool, string) {
		got := readyStatus(debugAddr)
		return got == want, fmt.Sprintf("/ready answers %d", got)
	}
}

// holds is a condition on a text holding want; the detail is the text's last lines.
func holds(text func() string, want ...string) func() (bool, string) {
	return func() (bool, string) {
		s := text()
		for _, w := range want {
			if !strings.Contains(s, w) {
				return false, fmt.Sprintf("no %q in …%s", w, s[max(0, len(s)-600):])
			}
		}
		return true, ""
	}
}

// TestBinaryServesTwoClustersOnTwoNetworks runs `krteds serve --demo` outside any checkout: the
// bundled two-cluster, two-network example, embedded in the binary. A proxy of network1 reaches
// east's reviews pods through east's gateway, a proxy of network2 reaches them directly, and
// both reach network1's directly.
func TestBinaryServesTwoClustersOnTwoNetworks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	xdsAddr, debugAddr := fmt.Sprintf("127.0.0.1:%d", fixtures.FreePort(t)), fmt.Sprintf("127.0.0.1:%d", fixtures.FreePort(t))
	serve := exec.Command(bin, "serve", "--demo", "--xds-addr", xdsAddr, "--debug-addr", debugAddr)
	serve.Dir = t.TempDir()
	startLogged(t, serve)
	for network, want := range map[string][]string{
		"network1": {"10.10.1.11:9080", "203.0.113.10:15443"},
		"network2": {"10.10.1.11:9080", "10.30.1.11:9080", "10.30.1.12:9080"},
	} {
		waitFor(t, "the reviews endpoints of a proxy on "+network, func() (bool, string) {
			out, err := run(t, bin, "endpoints", "--xds", xdsAddr, "--network", network, "--cluster", "outbound|9080||reviews.shop.svc.cluster.local",
				"--node-id", "sidecar~10.10.0.99~probe.shop~shop.svc.cluster.local")
			if err != nil {
				return false, fmt.Sprintf("%v: %s", err, out)
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					return false, out
				}
			}
			return network != "network1" || !strings.Contains(out, "10.30.1.1"), out
		})
	}
}
