// Package rig is the scale rig: krteds against a real control loop at scale, etcd,
// kube-apiserver and kube-controller-manager as the integration suite builds them (the
// Deployment, ReplicaSet, EndpointSlice, node lifecycle and pod GC controllers on),
// kube-scheduler, and kwok playing the kubelets of fake nodes; krteds as replicas (the binary, against a kubeconfig of its own), and
// the addresses a fleet of ADS clients (test/fleet) moves between. test/scale's TestScale
// (run.sh small|medium|large) drives it and judges what the clients hold.
package rig

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/krteds/krteds/outputs/xds/xdsdebug"
	"github.com/krteds/krteds/test/fixtures"
)

// Size is one shape of the rig.
type Size struct {
	Name                            string
	Services, PodsPerService, Nodes int
	Zones, Regions                  int
	// Proxies are the ADS clients, half of them delta, half state of the world.
	Proxies, Replicas int
	// Rollout is the Deployment rolled out; ScaleTo the one scaled from 0.
	Rollout, ScaleTo int
	Flips            int
}

var Sizes = map[string]Size{
	"small":  {Name: "small", Services: 50, PodsPerService: 10, Nodes: 20, Zones: 4, Regions: 2, Proxies: 20, Replicas: 2, Rollout: 100, ScaleTo: 100, Flips: 40},
	"medium": {Name: "medium", Services: 1000, PodsPerService: 10, Nodes: 200, Zones: 6, Regions: 3, Proxies: 100, Replicas: 2, Rollout: 500, ScaleTo: 500, Flips: 200},
	"large":  {Name: "large", Services: 3000, PodsPerService: 10, Nodes: 600, Zones: 6, Regions: 3, Proxies: 100, Replicas: 2, Rollout: 500, ScaleTo: 1000, Flips: 200},
}

const (
	Namespace = "bench"
	kwokNode  = "kwok.x-k8s.io/node"
)

func ServiceName(i int) string { return fmt.Sprintf("svc-%05d", i) }

func ClusterName(svc string) string {
	return fmt.Sprintf("outbound|80||%s.%s.svc.cluster.local", svc, Namespace)
}

// binaries are where the rig's programs are: the integration suite's, and the scale rig's own.
func binaries(t *testing.T) (envtest, scale string) {
	t.Helper()
	home, _ := os.UserHomeDir()
	envtest = os.Getenv("KRTEDS_ENVTEST_BIN")
	if envtest == "" {
		envtest = filepath.Join(home, ".cache", "krteds", "envtest", "v1.37.2")
	}
	out, err := exec.Command("bash", filepath.Join(here(), "..", "bin.sh")).Output()
	if err != nil {
		t.Fatalf("bin.sh: %v", err)
	}
	scale = strings.TrimSpace(string(out))
	for _, b := range []string{filepath.Join(envtest, "kube-apiserver"), filepath.Join(envtest, "kube-controller-manager"), filepath.Join(envtest, "etcd"),
		filepath.Join(scale, "kube-scheduler"), filepath.Join(scale, "kwok"), filepath.Join(scale, "kwok-stages.yaml")} {
		if _, err := os.Stat(b); err != nil {
			t.Fatalf("%s missing: run test/envtest/build.sh and test/scale/build.sh (run.sh does)", b)
		}
	}
	return envtest, scale
}

func here() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Rig is the control loop and the replicas.
type Rig struct {
	T    *testing.T
	Size Size
	// Dir is the rig's folder: logs, the audit log, kubeconfigs.
	Dir      string
	envtest  string
	scaleBin string
	// kubeconfig is the admin's; tokens the replicas' users'.
	kubeconfig string
	// Admin is a client of the API server as its admin.
	Admin    kubernetes.Interface
	audit    string
	procs    sync.Map // name → *exec.Cmd
	Replicas []*Replica
	krteds   string // the binary
	// restarts are when the API server was restarted (the watches open before are gone).
	restarts []time.Time
	// mu guards the replicas' processes (a replica restarted is a new one) and the samples.
	mu      sync.Mutex
	samples [][]sample // per replica
}

// auditPolicy logs the metadata of the replicas' requests (not the controllers': they would
// cost the API server more than krteds does) once answered; a watch is logged when it opens
// (ResponseStarted) and when it ends.
func auditPolicy(replicas int) string {
	var users []string
	for i := 0; i < replicas; i++ {
		users = append(users, fmt.Sprintf("krteds-%d", i))
	}
	return `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: [` + strings.Join(users, ", ") + `]
- level: None
`
}

// Start starts the control loop (etcd, the API server, the controllers, the scheduler, two kwoks)
// for a rig of size sz; the test stops it.
func Start(t *testing.T, sz Size) *Rig {
	t.Helper()
	envtest, scaleBin := binaries(t)
	dir, err := os.MkdirTemp("", "krteds-scale-")
	if err != nil {
		t.Fatal(err)
	}
	r := &Rig{T: t, Size: sz, Dir: dir, envtest: envtest, scaleBin: scaleBin, audit: filepath.Join(dir, "audit.log")}
	if err := os.WriteFile(filepath.Join(dir, "audit-policy.yaml"), []byte(auditPolicy(sz.Replicas)), 0o644); err != nil {
		t.Fatal(err)
	}
	var tokens []string
	for i := 0; i < sz.Replicas; i++ {
		tokens = append(tokens, fmt.Sprintf(`krteds-%d-token,krteds-%d,krteds-%d-uid,"system:masters"`, i, i, i))
	}
	qps := "--kube-api-qps=2000 --kube-api-burst=4000"
	env := append(os.Environ(), "BIN_DIR="+envtest, "WORKDIR="+filepath.Join(dir, "kube"), "START_KCM=1",
		"ETCD_PORT="+strconv.Itoa(fixtures.FreePort(t)), "ETCD_PEER_PORT="+strconv.Itoa(fixtures.FreePort(t)),
		"APISERVER_PORT="+strconv.Itoa(fixtures.FreePort(t)), "KCM_PORT="+strconv.Itoa(fixtures.FreePort(t)),
		"SERVICE_CIDR=10.96.0.0/16", // clear of kwok's pod ranges, room for the large size
		"ETCD_EXTRA_ARGS=--unsafe-no-fsync --quota-backend-bytes=8589934592",
		"APISERVER_EXTRA_ARGS=--audit-log-path="+r.audit+" --audit-policy-file="+filepath.Join(dir, "audit-policy.yaml")+
			" --audit-log-format=json --max-requests-inflight=4000 --max-mutating-requests-inflight=2000",
		"KCM_CONTROLLERS=deployment-controller,replicaset-controller,endpointslice-controller,node-lifecycle-controller,taint-eviction-controller,pod-garbage-collector-controller",
		// The controllers' own defaults but their client rate (20/s would hold 10 000 pods back) and
		// a node heartbeat grace shorter than the default 50 s (kwok renews its leases every 10 s).
		"KCM_EXTRA_ARGS="+qps+" --node-monitor-grace-period=40s --node-monitor-period=2s",
		"ADMIN_TOKEN=krteds-scale-admin", "EXTRA_TOKENS="+strings.Join(tokens, "\n"), "READY_TIMEOUT=300")
	cmd := exec.Command("bash", filepath.Join(here(), "..", "..", "envtest", "start-apiserver.sh"))
	cmd.Env = env
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("start-apiserver.sh: %v", err)
	}
	t.Cleanup(r.stop)
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "export KUBECONFIG="); ok {
			r.kubeconfig = strings.Trim(v, `"'`)
		}
	}
	if r.kubeconfig == "" {
		t.Fatal("start-apiserver.sh printed no KUBECONFIG")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", r.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rc.QPS, rc.Burst = 2000, 4000
	if r.Admin, err = kubernetes.NewForConfig(rc); err != nil {
		t.Fatal(err)
	}
	r.start("kube-scheduler", filepath.Join(scaleBin, "kube-scheduler"), "--kubeconfig="+r.kubeconfig, "--authentication-kubeconfig="+r.kubeconfig,
		"--authorization-kubeconfig="+r.kubeconfig, "--leader-elect=false", "--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(fixtures.FreePort(t)), "--kube-api-qps=2000", "--kube-api-burst=4000", "--v=1")
	// Two kwoks play the kubelets: one every node but one, the other that one node alone, so
	// that killing it is a node whose kubelet is gone (its own pod addresses, so none collide).
	stages := r.kwokStages(filepath.Join(scaleBin, "kwok-stages.yaml"))
	kwok := func(name, nodes, cidr string) {
		r.start(name, filepath.Join(scaleBin, "kwok"), "--kubeconfig="+r.kubeconfig, "--config="+stages,
			"--manage-nodes-with-annotation-selector="+kwokNode+"="+nodes, "--cidr="+cidr, "--node-ip=10.127.0.1",
			"--node-lease-duration-seconds=40", "--server-address=127.0.0.1:"+strconv.Itoa(fixtures.FreePort(t)))
	}
	kwok("kwok", "fake", "10.128.0.0/12")
	kwok("kwok-doomed", "doomed", "10.160.0.0/16")
	return r
}

// kwokStages writes kwok's stages with a shutdown time for Pods: kwok's own delete a Pod the
// instant it has a deletion timestamp, where a kubelet first stops its containers (a second or
// two for an application that exits on SIGTERM). The EndpointSlice controller marks a
// terminating Pod's endpoint not ready meanwhile, as it does in a cluster; with no delay the Pod
// is gone before its slice says so, a race no cluster runs.
func (r *Rig) kwokStages(from string) string {
	r.T.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		r.T.Fatal(err)
	}
	const deleteStage = "  name: pod-delete\nspec:\n"
	s := string(b)
	if !strings.Contains(s, deleteStage) {
		r.T.Fatalf("%s has no pod-delete stage", from)
	}
	s = strings.Replace(s, deleteStage, deleteStage+"  delay:\n    durationMilliseconds: 1000\n    jitterDurationMilliseconds: 2000\n", 1)
	out := filepath.Join(r.Dir, "kwok-stages.yaml")
	if err := os.WriteFile(out, []byte(s), 0o644); err != nil {
		r.T.Fatal(err)
	}
	return out
}

// start runs a program of the rig, its output in the rig's logs, killed with the test; done is
// closed once it has exited.
func (r *Rig) start(name, bin string, args ...string) (cmd *exec.Cmd, done chan struct{}) {
	r.T.Helper()
	logf, err := os.OpenFile(filepath.Join(r.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		r.T.Fatal(err)
	}
	cmd = exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		r.T.Fatalf("starting %s: %v", name, err)
	}
	r.procs.Store(name, cmd)
	done = make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(done) }()
	return cmd, done
}

func (r *Rig) stop() {
	for _, rep := range r.Replicas {
		rep.Kill()
	}
	r.procs.Range(func(_, v any) bool {
		_ = v.(*exec.Cmd).Process.Kill()
		return true
	})
	stop := exec.Command("bash", filepath.Join(here(), "..", "..", "envtest", "start-apiserver.sh"), "stop", filepath.Join(r.Dir, "kube"))
	stop.Env = append(os.Environ(), "STOP_SIGNAL=KILL")
	_ = stop.Run()
	if os.Getenv("KRTEDS_SCALE_KEEP") != "" || r.T.Failed() {
		r.T.Logf("the Rig's folder (logs, audit log) is kept: %s", r.Dir)
		return
	}
	_ = os.RemoveAll(r.Dir)
}

// RestartAPIServer kills the API server and starts it again with the same flags and data.
func (r *Rig) RestartAPIServer() {
	r.T.Helper()
	kube := filepath.Join(r.Dir, "kube")
	b, err := os.ReadFile(filepath.Join(kube, "apiserver.PID"))
	if err != nil {
		r.T.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	_ = syscall.Kill(pid, syscall.SIGKILL)
	fixtures.Polling("the API server is no child of the test: its end is seen by signal 0").
		Await(r.T, time.Minute, "the killed API server gone", func() (bool, string) {
			return syscall.Kill(pid, 0) != nil, fmt.Sprintf("pid %d alive", pid)
		})
	r.restarts = append(r.restarts, time.Now())
	cmd := exec.Command(filepath.Join(kube, "apiserver.sh"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		r.T.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(kube, "apiserver.PID"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	go func() { _ = cmd.Wait() }()
	APIServer.Await(r.T, 2*time.Minute, "the API server back", func() (bool, string) {
		ok, err := r.Admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
		return string(ok) == "ok", fmt.Sprintf("/readyz: %q, %v", ok, err)
	})
}

// kubeconfigFor writes a kubeconfig of replica i's own user (the admin's, another token).
func (r *Rig) kubeconfigFor(i int) string {
	r.T.Helper()
	b, err := os.ReadFile(r.kubeconfig)
	if err != nil {
		r.T.Fatal(err)
	}
	p := filepath.Join(r.Dir, fmt.Sprintf("kubeconfig-%d", i))
	if err := os.WriteFile(p, []byte(strings.Replace(string(b), "krteds-scale-admin", fmt.Sprintf("krteds-%d-token", i), 1)), 0o600); err != nil {
		r.T.Fatal(err)
	}
	return p
}

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
	fixtures.Polling("a Replica is another process: /ready is its HTTP endpoint").
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

// Usage is a replica's CPU time, RSS and live heap (Go's accounting, from its metrics).
type Usage struct {
	PID  int
	CPU  time.Duration
	RSS  int64
	Heap int64
	// Pending is the replica's slice endpoints waiting for the Pod they name
	// (pilot_k8s_endpoints_pending_pod).
	Pending int64
}

func (rep *Replica) Usage() Usage {
	var u Usage
	rep.r.mu.Lock()
	pid := rep.cmd.Process.Pid
	rep.r.mu.Unlock()
	u.PID = pid
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+2:])
		if len(f) > 13 {
			ut, _ := strconv.ParseInt(f[11], 10, 64)
			st, _ := strconv.ParseInt(f[12], 10, 64)
			u.CPU = time.Duration(ut+st) * time.Second / 100 // clock ticks (USER_HZ 100)
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				u.RSS = n << 10
			}
		}
	}
	c := http.Client{Timeout: 2 * time.Second}
	if resp, err := c.Get("http://" + rep.Debug + "/metrics"); err == nil {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_inuse_bytes "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				u.Heap = int64(f)
			}
			if v, ok := strings.CutPrefix(sc.Text(), "pilot_k8s_endpoints_pending_pod "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				u.Pending = int64(f)
			}
		}
		resp.Body.Close()
	}
	return u
}

// Convergence reads the replica's histogram of its own part of a change (an input change to the
// response carrying it: krteds_xds_convergence_seconds for CLAs), as cumulative counts by upper
// bound; nil when the replica does not answer.
func (rep *Replica) Convergence() map[float64]float64 {
	return rep.histogram(`krteds_xds_convergence_seconds_bucket{type="ClusterLoadAssignment",le="`)
}

// Programming reads the replica's network programming latency of slice changes, trigger → ACK
// (krteds_network_programming_duration_seconds, stage total), as convergence does.
func (rep *Replica) Programming() map[float64]float64 { return rep.ProgrammingStage("total") }

// ProgrammingStage reads one stage of the replica's network programming latency of the changes
// whose trigger time is a Pod's readiness, stamped on a slice by the EndpointSlice controller or
// read off the Pod (kind EndpointSlice and Pod, summed): what the rig measures from the stamps.
func (rep *Replica) ProgrammingStage(stage string) map[float64]float64 {
	out := rep.histogram(`krteds_network_programming_duration_seconds_bucket{kind="EndpointSlice",stage="` + stage + `",le="`)
	for b, n := range rep.histogram(`krteds_network_programming_duration_seconds_bucket{kind="Pod",stage="` + stage + `",le="`) {
		out[b] += n
	}
	return out
}

// ProgrammingKind reads the network programming latency, trigger → ACK, of the changes whose
// trigger is of one kind.
func (rep *Replica) ProgrammingKind(kind string) map[float64]float64 {
	return rep.histogram(`krteds_network_programming_duration_seconds_bucket{kind="` + kind + `",stage="total",le="`)
}

// histogram reads the buckets of one series of the replica's metrics whose lines start with
// prefix (up to the bound), as cumulative counts by upper bound; nil when it does not answer.
func (rep *Replica) histogram(prefix string) map[float64]float64 {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + rep.Debug + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	out := map[float64]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		le, count, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		b, err1 := strconv.ParseFloat(le, 64)
		n, err2 := strconv.ParseFloat(count, 64)
		if err1 == nil && err2 == nil {
			out[b] = n
		}
	}
	return out
}

// HistogramQuantile is the upper bound of the bucket holding quantile q of the counts added
// between two readings of a cumulative histogram (from may be nil: a process started since), and
// the number of observations.
func HistogramQuantile(from, to map[float64]float64, q float64) (bound float64, n float64) {
	bounds := make([]float64, 0, len(to))
	for b := range to {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 {
		return 0, 0
	}
	reset := false
	for b, c := range from {
		if to[b] < c {
			reset = true
		}
	}
	delta := func(b float64) float64 {
		if reset || from == nil {
			return to[b]
		}
		return to[b] - from[b]
	}
	n = delta(bounds[len(bounds)-1])
	for _, b := range bounds {
		if n > 0 && delta(b) >= q*n {
			return b, n
		}
	}
	return bounds[len(bounds)-1], n
}

// SelfCPU is the CPU the rig's own process (the clients and the judge) has used.
func SelfCPU() time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+2:])
	if len(f) <= 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100
}

// sample is one reading of a replica's usage.
type sample struct {
	at time.Time
	Usage
}

// SampleUsage reads every replica's usage every second until the test ends.
func (r *Rig) SampleUsage() {
	stop := make(chan struct{})
	done := make(chan struct{})
	r.T.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				for i, rep := range r.Replicas {
					u := rep.Usage()
					r.mu.Lock()
					for len(r.samples) <= i {
						r.samples = append(r.samples, nil)
					}
					r.samples[i] = append(r.samples[i], sample{at: now, Usage: u})
					r.mu.Unlock()
				}
			}
		}
	}()
}

// Window is a replica's usage over [from, to]: CPU used (in cores: seconds of CPU per second),
// and the peak RSS and heap sampled.
type Window struct {
	Cores             float64
	PeakRSS, PeakHeap int64
	// PeakPending is the most slice endpoints sampled waiting for their Pod.
	PeakPending int64
	// Samples is the readings in the window.
	Samples int
}

func (r *Rig) UsageOver(i int, from, to time.Time) Window {
	r.mu.Lock()
	defer r.mu.Unlock()
	var w Window
	var cpu time.Duration
	var prev *sample
	for k := range r.samples[i] {
		s := &r.samples[i][k]
		if s.RSS == 0 {
			continue // the process was gone
		}
		if s.at.Before(from) || s.at.After(to) {
			if s.at.Before(from) {
				prev = s
			}
			continue
		}
		w.Samples++
		w.PeakRSS, w.PeakHeap, w.PeakPending = max(w.PeakRSS, s.RSS), max(w.PeakHeap, s.Heap), max(w.PeakPending, s.Pending)
		switch {
		case prev == nil:
		case prev.PID != s.PID:
			cpu += s.CPU // a new process: all its CPU is in the window
		default:
			cpu += s.CPU - prev.CPU
		}
		prev = s
	}
	if d := to.Sub(from); d > 0 {
		w.Cores = cpu.Seconds() / d.Seconds()
	}
	return w
}

// Busy is the machine's CPU time, all cores, Busy and in all, from /proc/stat.
func Busy() (busyTicks, allTicks int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for k, f := range strings.Fields(line)[1:] {
		n, _ := strconv.ParseInt(f, 10, 64)
		allTicks += n
		if k != 3 && k != 4 { // idle, iowait
			busyTicks += n
		}
	}
	return busyTicks, allTicks
}

// auditEvent is what the rig reads of an audit log line.
type auditEvent struct {
	Stage string `json:"stage"`
	Verb  string `json:"verb"`
	User  struct {
		Username string `json:"username"`
	} `json:"user"`
	RequestURI string `json:"requestURI"`
	ObjectRef  struct {
		Resource string `json:"resource"`
	} `json:"objectRef"`
	Stamp time.Time `json:"stageTimestamp"`
}

// APILoad is one user's requests between two times: completed requests by verb, and the
// watches it opened and those still open at the end.
type APILoad struct {
	ByVerb map[string]int
	// WatchesOpened counts the watches opened in the window; Watching is, per resource, the
	// watches open at its end.
	WatchesOpened int
	Watching      map[string]int
	ListsByKind   map[string]int
	// WatchLists counts the watches opened with sendInitialEvents: a list streamed over a watch
	// (client-go's watch-list), which the API server serves from its watch cache and which the
	// audit log shows as a watch, not a list.
	WatchLists int
}

// APILoadOf reads the audit log for the users' requests between from and to.
func (r *Rig) APILoadOf(users []string, from, to time.Time) map[string]*APILoad {
	out := map[string]*APILoad{}
	for _, u := range users {
		out[u] = &APILoad{ByVerb: map[string]int{}, ListsByKind: map[string]int{}, Watching: map[string]int{}}
	}
	f, err := os.Open(r.audit)
	if err != nil {
		r.T.Logf("audit log: %v", err)
		return out
	}
	defer f.Close()
	type watchOf struct{ user, resource string }
	open := map[watchOf]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	restarts := r.restarts
	for sc.Scan() {
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		for len(restarts) > 0 && e.Stamp.After(restarts[0]) {
			clear(open) // the API server that held them is gone
			restarts = restarts[1:]
		}
		l := out[e.User.Username]
		if l == nil || e.Stamp.After(to) {
			continue
		}
		if e.Verb == "watch" {
			switch e.Stage {
			case "ResponseStarted":
				open[watchOf{e.User.Username, e.ObjectRef.Resource}]++
				if !e.Stamp.Before(from) {
					l.WatchesOpened++
					if strings.Contains(e.RequestURI, "sendInitialEvents=true") {
						l.WatchLists++
					}
				}
			case "ResponseComplete", "Panic":
				open[watchOf{e.User.Username, e.ObjectRef.Resource}]--
			}
			continue
		}
		if e.Stage != "ResponseComplete" || e.Stamp.Before(from) {
			continue
		}
		l.ByVerb[e.Verb]++
		if e.Verb == "list" {
			l.ListsByKind[e.ObjectRef.Resource]++
		}
	}
	for w, n := range open {
		if n > 0 {
			out[w.user].Watching[w.resource] = n
		}
	}
	return out
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

// KillProcess kills one of the rig's programs by the name it was started with (kwok-doomed: the
// kubelet of DoomedNode).
func (r *Rig) KillProcess(name string) {
	if cmd, ok := r.procs.Load(name); ok {
		_ = cmd.(*exec.Cmd).Process.Kill()
	}
}
