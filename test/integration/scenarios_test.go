package integration

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"istio.io/istio/pkg/cluster"
	"istio.io/istio/pkg/kube"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	krteds "github.com/krteds/krteds/cmd/krteds/app"
	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
)

func client(t *testing.T) kube.Client {
	t.Helper()
	return clientOf(t, kubeconfig)
}

// clientOf is a client of the API server of a kubeconfig.
func clientOf(t *testing.T, kubeconfig string) kube.Client {
	t.Helper()
	rc, err := kube.DefaultRestConfig(kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := kube.NewClient(kube.NewClientConfigForRestConfig(rc), cluster.ID("Kubernetes"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startKrteds runs krteds on the API server, serving xDS on addr (":0" picks a port).
func startKrteds(t *testing.T, addr string) (*krteds.App, string) {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	app, err := krteds.Start(krteds.Options{Config: collections.DefaultConfig(), Cluster: client(t), XDSListener: lis})
	if err != nil {
		t.Fatal(err)
	}
	return app, lis.Addr().String()
}

// mesh creates, through the API, a namespace, a node, a Service and n Pods whose status says
// Running and Ready: the EndpointSlice controller then writes the slices.
func mesh(t *testing.T, c kube.Client, ns string, n int) {
	t.Helper()
	ctx := context.Background()
	k := c.Kube()
	if _, err := k.CoreV1().Namespaces().Create(ctx, fixtures.Namespace(ns, nil, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.CoreV1().Nodes().Create(ctx, fixtures.ZoneNode("node-"+ns, "r1", "z1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := fixtures.Service(ns, "web", fixtures.Port{Name: "http", Port: 80, Target: 8080})
	svc.Spec.ClusterIP = ""
	if _, err := k.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		setPod(t, c, ns, i, true)
	}
}

// waitSlices waits until Kubernetes' slices of the service list n ready endpoints.
func waitSlices(t *testing.T, c kube.Client, ns string, n int) {
	t.Helper()
	apiServer.Await(t, 60*time.Second, fmt.Sprintf("the EndpointSlice controller writing %d ready endpoints", n), func() (bool, string) {
		l, err := c.Kube().DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=web"})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, s := range l.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					ready++
				}
			}
		}
		return ready == n, fmt.Sprintf("%d ready", ready)
	})
}

// apiServer polls what the tests read from the API server (LIST, GET), which signals nothing.
var apiServer = fixtures.Polling("the API server is read by LIST and GET, which signal nothing")

func podName(i int) string { return fmt.Sprintf("web-%d", i) }

// setPod creates the pod if needed and sets its status (Running, IP, Ready condition).
func setPod(t *testing.T, c kube.Client, ns string, i int, ready bool) {
	t.Helper()
	ctx := context.Background()
	pods := c.Kube().CoreV1().Pods(ns)
	p, err := pods.Get(ctx, podName(i), metav1.GetOptions{})
	if err != nil {
		want := fixtures.Pod(ns, podName(i), "web", fmt.Sprintf("10.20.0.%d", i+1), "node-"+ns)
		want.OwnerReferences = nil
		want.Spec.Containers = []corev1.Container{{Name: "app", Image: "app", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}
		status := want.Status
		if p, err = pods.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p.Status = status
	}
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP = fmt.Sprintf("10.20.0.%d", i+1)
	p.Status.PodIPs = []corev1.PodIP{{IP: p.Status.PodIP}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: cond}}
	if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// watcher is an ADS client that records every CLA it receives, waking its waits after each.
type watcher struct {
	mu       sync.Mutex
	clas     []*endpoint.ClusterLoadAssignment
	latest   *endpoint.ClusterLoadAssignment
	received *fixtures.Waker
}

func newWatcher() *watcher { return &watcher{received: fixtures.NewWaker()} }

func (w *watcher) record(resp *discovery.DiscoveryResponse) {
	clas, _ := adsclient.CLAs(resp)
	w.mu.Lock()
	for _, c := range clas {
		w.clas = append(w.clas, c)
		w.latest = c
	}
	w.mu.Unlock()
	w.received.Wake()
}

// count is how many CLAs the watcher has received.
func (w *watcher) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.clas)
}

// healthy is the addresses of a CLA's endpoints a client sends requests to: HEALTHY ones, and
// those of unknown health (a WorkloadEntry's, which istiod sends with no health status).
func healthy(cla *endpoint.ClusterLoadAssignment) []string {
	var out []string
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.LbEndpoints {
			if s := e.HealthStatus.String(); s == "HEALTHY" || s == "UNKNOWN" {
				out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
			}
		}
	}
	slices.Sort(out)
	return out
}

// follow subscribes as a proxy and keeps ACKing, reconnecting when the stream breaks.
func follow(ctx context.Context, addr func() string, cluster string, w *watcher) {
	var lastVersion string
	for ctx.Err() == nil {
		cc, err := adsclient.Dial(addr())
		if err != nil {
			time.Sleep(50 * time.Millisecond) // the client's back-off before it dials again
			continue
		}
		s, err := adsclient.Open(ctx, cc, adsclient.Node{ID: "sidecar~10.30.0.1~client.default~default.svc.cluster.local", Namespace: "default"})
		if err == nil {
			err = s.Send(&discovery.DiscoveryRequest{TypeUrl: adsclient.TypeCLA, VersionInfo: lastVersion, ResourceNames: []string{cluster}})
		}
		for err == nil {
			var resp *discovery.DiscoveryResponse
			if resp, err = s.Recv(time.Hour); err == nil {
				w.record(resp)
				lastVersion = resp.VersionInfo
				err = s.Ack(resp, cluster)
			}
		}
		_ = cc.Close()
		time.Sleep(50 * time.Millisecond) // the client's back-off before it reconnects
	}
}

// waitHealthy waits, on the CLAs the watcher receives, until the last one's healthy endpoints
// are want.
func waitHealthy(t *testing.T, w *watcher, want []string) {
	t.Helper()
	w.received.Await(t, 60*time.Second, fmt.Sprintf("healthy endpoints %v", want), func() (bool, string) {
		w.mu.Lock()
		got := healthy(w.latest)
		w.mu.Unlock()
		return slices.Equal(got, want), fmt.Sprintf("healthy endpoints %v", got)
	})
}

func ips(n ...int) []string {
	var out []string
	for _, i := range n {
		out = append(out, fmt.Sprintf("10.20.0.%d", i+1))
	}
	slices.Sort(out)
	return out
}

// TestSlicesMadeByKubernetes: Pods become ready, Kubernetes' EndpointSlice controller writes the
// slices, and an ADS client receives the CLA built from them; readiness flips and a deleted Pod
// follow.
func TestSlicesMadeByKubernetes(t *testing.T) {
	needAPIServer(t)
	c := client(t)
	mesh(t, c, "scenario1", 3)
	app, addr := startKrteds(t, "127.0.0.1:0")
	defer app.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := newWatcher()
	go follow(ctx, func() string { return addr }, "outbound|80||web.scenario1.svc.cluster.local", w)
	waitHealthy(t, w, ips(0, 1, 2))
	setPod(t, c, "scenario1", 1, false)
	waitHealthy(t, w, ips(0, 2))
	if err := c.Kube().CoreV1().Pods("scenario1").Delete(ctx, podName(2), metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, w, ips(0))
}

// TestKrtedsRestartNeverServesAnEmptyCLA: a client follows a service with endpoints while krteds
// restarts twice; it re-converges each time and never receives an empty or partial CLA.
func TestKrtedsRestartNeverServesAnEmptyCLA(t *testing.T) {
	needAPIServer(t)
	c := client(t)
	mesh(t, c, "scenario3", 4)
	waitSlices(t, c, "scenario3", 4) // so that "partial" means krteds' fault, not the controller's
	app, addr := startKrteds(t, "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := newWatcher()
	go follow(ctx, func() string { return addr }, "outbound|80||web.scenario3.svc.cluster.local", w)
	want := ips(0, 1, 2, 3)
	waitHealthy(t, w, want)
	for i := 0; i < 2; i++ {
		app.Stop()
		app, _ = startKrteds(t, addr) // the same address: the client reconnects to it
		before := w.count()
		w.received.Await(t, 60*time.Second, "a CLA from the restarted krteds", func() (bool, string) {
			n := w.count()
			return n > before, fmt.Sprintf("%d CLAs, as before the restart", n)
		})
		waitHealthy(t, w, want)
	}
	app.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, cla := range w.clas {
		if got := healthy(cla); !slices.Equal(got, want) {
			t.Fatalf("response %d of %d carried %v, want %v", i+1, len(w.clas), got, want)
		}
	}
}

// TestAPIServerRestartDuringBurst: while Pods flip readiness, etcd and the API server stop and
// start again; krteds reconnects, and the client's final CLA is exactly the Pods that are ready.
func TestAPIServerRestartDuringBurst(t *testing.T) {
	needAPIServer(t)
	c := client(t)
	const n = 6
	mesh(t, c, "scenario2", n)
	app, addr := startKrteds(t, "127.0.0.1:0")
	defer app.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := newWatcher()
	go follow(ctx, func() string { return addr }, "outbound|80||web.scenario2.svc.cluster.local", w)
	waitHealthy(t, w, ips(0, 1, 2, 3, 4, 5))

	ready := map[int]bool{}
	for i := 0; i < n; i++ {
		ready[i] = true
	}
	burstDone := make(chan struct{})
	go func() {
		defer close(burstDone)
		for step := 0; step < 40; step++ {
			i := step % n
			ready[i] = !ready[i]
			// Retry through the restart: each write eventually lands.
			for {
				if err := trySetPod(c, "scenario2", i, ready[i]); err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond) // the writer's back-off while the API server is down
			}
			time.Sleep(50 * time.Millisecond) // the burst's pace: readiness flips over real time
		}
	}()
	time.Sleep(500 * time.Millisecond) // the API server restarts in the middle of the burst
	stopAPIServer()
	if _, err := startAPIServer(); err != nil {
		t.Fatalf("restarting the API server: %v", err)
	}
	<-burstDone
	var want []int
	for i := 0; i < n; i++ {
		if ready[i] {
			want = append(want, i)
		}
	}
	waitHealthy(t, w, ips(want...))
}

// trySetPod is setPod that reports errors instead of failing (the API server may be down).
func trySetPod(c kube.Client, ns string, i int, ready bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pods := c.Kube().CoreV1().Pods(ns)
	p, err := pods.Get(ctx, podName(i), metav1.GetOptions{})
	if err != nil {
		return err
	}
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: cond}}
	_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}
