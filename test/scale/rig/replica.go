package rig

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/krteds/krteds/outputs/xds/xdsdebug"
	"github.com/krteds/krteds/test/fixtures"
)

// Replica is one krteds process.
type Replica struct {
	r     *Rig
	Index int
	// XDS and Debug are its addresses: ADS, and the debug server's (metrics, /ready).
	XDS, Debug string
	cmd        *exec.Cmd
	// Done is closed once its process has exited.
	Done chan struct{}
}

// BuildKrteds builds the binary once.
func (r *Rig) BuildKrteds() string {
	r.T.Helper()
	if r.krteds != "" {
		return r.krteds
	}
	bin := filepath.Join(r.Dir, "krteds")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/krteds")
	cmd.Dir = filepath.Join(here(), "..", "..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		r.T.Fatalf("building krteds: %v\n%s", err, out)
	}
	r.krteds = bin
	return bin
}

// StartReplica starts replica i (on the ports it had, when it is started again).
func (r *Rig) StartReplica(i int) *Replica {
	r.T.Helper()
	for len(r.Replicas) <= i {
		r.Replicas = append(r.Replicas, &Replica{r: r, Index: len(r.Replicas), XDS: fmt.Sprintf("127.0.0.1:%d", fixtures.FreePort(r.T)), Debug: fmt.Sprintf("127.0.0.1:%d", fixtures.FreePort(r.T))})
	}
	rep := r.Replicas[i]
	bin, args := r.BuildKrteds(), []string{"serve", "--kubeconfig=" + r.kubeconfigFor(i), "--xds-addr=" + rep.XDS,
		"--debug-addr=" + rep.Debug, "--cluster-secrets=false", "--drain-duration=2s", "--log-level=info"}
	if n := os.Getenv("KRTEDS_SCALE_REPLICA_NICE"); n != "" {
		// The replicas at another scheduling priority than the control loop and the clients they
		// share the machine with (a cluster gives krteds cores of its own).
		bin, args = "nice", append([]string{"-n", n, bin}, args...)
	}
	cmd, done := r.start(fmt.Sprintf("krteds-%d", i), bin, args...)
	r.mu.Lock()
	rep.cmd, rep.Done = cmd, done
	r.mu.Unlock()
	return rep
}

// WaitReady waits until the replica's /ready answers 200.
func (rep *Replica) WaitReady(timeout time.Duration) {
	rep.r.T.Helper()
	fixtures.Polling("a replica is another process: /ready is its HTTP endpoint").
		Await(rep.r.T, timeout, fmt.Sprintf("krteds %d ready (its log: %s)", rep.Index, filepath.Join(rep.r.Dir, fmt.Sprintf("krteds-%d.log", rep.Index))), func() (bool, string) {
			code := rep.status("/ready")
			return code == http.StatusOK, fmt.Sprintf("/ready answers %d", code)
		})
}

func (rep *Replica) status(path string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + rep.Debug + path)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func (rep *Replica) Kill() {
	if rep.cmd != nil && rep.cmd.Process != nil {
		_ = rep.cmd.Process.Kill()
	}
}

// Terminate sends SIGTERM and waits until the process is gone.
func (rep *Replica) Terminate(timeout time.Duration) {
	rep.r.T.Helper()
	_ = rep.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-rep.Done:
	case <-time.After(timeout):
		rep.r.T.Fatalf("krteds %d did not exit %v after SIGTERM", rep.Index, timeout)
	}
}

// Behind asks the replica which of its proxies are behind what it would send them
// (/debug/staleness); ok is false when it does not answer.
func (rep *Replica) Behind() (s xdsdebug.Staleness, ok bool) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + rep.Debug + "/debug/staleness")
	if err != nil {
		return s, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&s) != nil {
		return s, false
	}
	return s, true
}
