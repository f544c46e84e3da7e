// Package integration runs krteds against a real kube-apiserver, etcd and the EndpointSlice
// controller, started on loopback by the tests (binaries from test/envtest/build.sh).
package integration

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/krteds/krteds/test/fixtures"
)

var (
	// kubeconfig of the running apiserver; "" when the binaries are missing.
	kubeconfig string
	skipReason string
	workdir    string
	startEnv   []string
)

func binDir() string {
	if d := os.Getenv("KRTEDS_ENVTEST_BIN"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "krteds", "envtest", "v1.37.2")
}

func scriptDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "envtest")
}

// startAPIServer starts etcd, kube-apiserver and the EndpointSlice controller with the
// environment prepared by TestMain (the same data directory and ports on a restart).
func startAPIServer() (string, error) {
	cmd := exec.Command("bash", filepath.Join(scriptDir(), "start-apiserver.sh"))
	cmd.Env = startEnv
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", err
	}
	var kc string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "export KUBECONFIG="); ok {
			kc = strings.Trim(v, `"'`)
		}
	}
	if err := cmd.Wait(); err != nil {
		return "", fmt.Errorf("start-apiserver.sh: %w", err)
	}
	if kc == "" {
		return "", fmt.Errorf("start-apiserver.sh printed no KUBECONFIG")
	}
	return kc, nil
}

func stopAPIServer() {
	cmd := exec.Command("bash", filepath.Join(scriptDir(), "start-apiserver.sh"), "stop", workdir)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	_ = cmd.Run()
}

func TestMain(m *testing.M) {
	bin := binDir()
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			skipReason = fmt.Sprintf("envtest binaries not built (%s missing); run test/envtest/build.sh", filepath.Join(bin, b))
		}
	}
	if skipReason == "" {
		var err error
		workdir, err = os.MkdirTemp("", "krteds-envtest-")
		if err != nil {
			skipReason = err.Error()
		}
		ep, apiPort, kcmPort := fixtures.FreePort(nil), fixtures.FreePort(nil), fixtures.FreePort(nil)
		etcdPort = strconv.Itoa(ep)
		startEnv = append(os.Environ(), "BIN_DIR="+bin, "WORKDIR="+workdir, "START_KCM=1",
			"ETCD_PORT="+etcdPort, "ETCD_PEER_PORT="+strconv.Itoa(fixtures.FreePort(nil)),
			"APISERVER_PORT="+strconv.Itoa(apiPort), "KCM_PORT="+strconv.Itoa(kcmPort),
			"ETCD_EXTRA_ARGS=--unsafe-no-fsync",
			// Watches go to etcd itself, so a compaction makes an old resource version "too old"
			// for sure (TestTooOldResourceVersionRelists).
			"APISERVER_EXTRA_ARGS=--watch-cache=false",
			// A fixed token: clients made before a restart of the API server keep working.
			"ADMIN_TOKEN=krteds-integration-"+strconv.Itoa(os.Getpid()))
		if skipReason == "" {
			if kubeconfig, err = startAPIServer(); err != nil {
				fmt.Fprintln(os.Stderr, "starting the API server:", err)
				stopAPIServer()
				os.Exit(1)
			}
		}
	}
	if skipReason != "" {
		// Run nothing, so that go test's line for this package says "[no tests to run]" rather
		// than a bare ok.
		fmt.Println("integration tests skipped:", skipReason)
		_ = flag.Set("test.run", "^$")
	}
	code := m.Run()
	if kubeconfig != "" {
		stopAPIServer()
		_ = os.RemoveAll(workdir)
	}
	os.Exit(code)
}

func needAPIServer(t *testing.T) {
	t.Helper()
	if kubeconfig == "" {
		t.Skip(skipReason)
	}
}
