// Package rig is the scale rig: krteds against a real control loop at scale, etcd,
// kube-apiserver and kube-controller-manager as the integration suite builds them (the
// Deployment, ReplicaSet, EndpointSlice, node lifecycle and pod GC controllers on),
// kube-scheduler, and kwok playing the kubelets of fake nodes; krteds as replicas (the binary, against a kubeconfig of its own), and
// the addresses a fleet of ADS clients (test/fleet) moves between. test/scale's TestScale
// (run.sh small|medium|large) drives it and judges what the clients hold.
package rig

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

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
		r.T.Logf("the rig's folder (logs, audit log) is kept: %s", r.Dir)
		return
	}
	_ = os.RemoveAll(r.Dir)
}

// RestartAPIServer kills the API server and starts it again with the same flags and data.
func (r *Rig) RestartAPIServer() {
	r.T.Helper()
	kube := filepath.Join(r.Dir, "kube")
	b, err := os.ReadFile(filepath.Join(kube, "apiserver.pid"))
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
	_ = os.WriteFile(filepath.Join(kube, "apiserver.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
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

// KillProcess kills one of the rig's programs by the name it was started with (kwok-doomed: the
// kubelet of DoomedNode).
func (r *Rig) KillProcess(name string) {
	if cmd, ok := r.procs.Load(name); ok {
		_ = cmd.(*exec.Cmd).Process.Kill()
	}
}
