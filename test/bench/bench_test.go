package bench

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"istio.io/istio/pkg/kube"
	"istio.io/istio/pkg/kube/krt"
	istiolog "istio.io/istio/pkg/log"
	"istio.io/istio/pkg/test"
	discovery "k8s.io/api/discovery/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/xdsdebug"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
)

func TestMain(m *testing.M) {
	// The kube client and krt log every informer sync at info; keep benchmark output readable.
	o := istiolog.DefaultOptions()
	o.SetDefaultOutputLevel(istiolog.OverrideScopeName, istiolog.NoneLevel)
	_ = istiolog.Configure(o)
	os.Exit(m.Run())
}

// running is the serving layer's rig (rigs.Serving: krteds' graph and xDS server over static
// input collections seeded with a mesh, the objects as informers would hold them, without the
// cost of an API server), with a fleet of proxies connected over gRPC on loopback.
type running struct {
	*rigs.Serving
	mesh  *Mesh
	stopc chan struct{}
	fleet *Fleet
}

// start serves the mesh (and extra objects) and connects the fleet of its size at once, while the
// graph computes (a cold start measures that).
func start(b testing.TB, m *Mesh, extra ...any) *running {
	b.Helper()
	stop := make(chan struct{})
	s := serve(b, stop, append(m.Objects(), extra...)...)
	fleet, err := Connect(s.Addr, m.Size)
	if err != nil {
		b.Fatal(err)
	}
	return &running{Serving: s, mesh: m, stopc: stop, fleet: fleet}
}

// serve serves objs over ADS until stop closes and the caller closes the rig: a graph without a
// krt debug handler, as the figures measure it, returned before it has synced.
func serve(tb testing.TB, stop chan struct{}, objs ...any) *rigs.Serving {
	tb.Helper()
	return serveGraph(tb, rigs.NewGraphWith(tb, rigs.GraphOptions{Stop: stop, NoDebugger: true, NoWait: true}, objs...))
}

// serveGraph serves a graph with the server's default limits.
func serveGraph(tb testing.TB, g *rigs.Graph) *rigs.Serving {
	tb.Helper()
	return rigs.Serve(tb, g, rigs.ServeOptions{})
}

func (r *running) stop() {
	r.fleet.Close()
	r.Close()
	close(r.stopc)
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p)
	return s[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkColdStart: the mesh's objects are loaded, krteds starts, every proxy connects and asks
// for its clusters; the time until the last proxy has its last CLA.
func BenchmarkColdStart(b *testing.B) {
	size := CurrentSize()
	m := Generate(size)
	var total time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		r := start(b, m)
		last, err := r.fleet.WaitAll(10 * time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		total += last.Sub(t0)
		b.StopTimer()
		r.stop()
		runtime.GC()
		b.StartTimer()
	}
	b.ReportMetric(ms(total/time.Duration(b.N)), "ms/coldstart")
	b.ReportMetric(float64(size.Endpoints()), "endpoints")
	b.ReportMetric(float64(size.Proxies), "proxies")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEndpointFlip: one endpoint flips ready ↔ not ready; the time until every proxy
// subscribed to its service has received the new CLA. Reports the distribution over the flips,
// and the CPU time and bytes allocated per flip.
func BenchmarkEndpointFlip(b *testing.B) {
	size := CurrentSize()
	m := Generate(size)
	r := start(b, m)
	defer r.stop()
	if _, err := r.fleet.WaitAll(10 * time.Minute); err != nil {
		b.Fatal(err)
	}
	var samples []time.Duration
	var ms0, ms1 runtime.MemStats
	var cpu, endpointsTouched time.Duration
	var allocs uint64
	slicesBySvc := map[string][]*discovery.EndpointSlice{}
	for _, s := range m.Slices {
		slicesBySvc[s.Labels["kubernetes.io/service-name"]] = append(slicesBySvc[s.Labels["kubernetes.io/service-name"]], s)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		svc := (i * 7919) % size.Services
		cluster := ClusterName(svc)
		subs := r.fleet.Subscribers(cluster)
		old := r.fleet.Versions(cluster, subs)
		slice := slicesBySvc[ServiceName(svc)][0].DeepCopy()
		ready := !*slice.Endpoints[0].Conditions.Ready
		slice.Endpoints[0].Conditions = discovery.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: ptr(false)}
		slicesBySvc[ServiceName(svc)][0] = slice
		runtime.ReadMemStats(&ms0)
		c0 := cpuTime()
		t0 := time.Now()
		r.In.Apply(slice, false)
		last, err := r.fleet.WaitChanged(cluster, subs, old, time.Minute)
		if err != nil {
			b.Fatalf("flip %d of %s: %v", i, cluster, err)
		}
		cpu += cpuTime() - c0
		runtime.ReadMemStats(&ms1)
		allocs += ms1.TotalAlloc - ms0.TotalAlloc
		samples = append(samples, last.Sub(t0))
		endpointsTouched += time.Duration(size.EndpointsPerService)
	}
	b.StopTimer()
	b.ReportMetric(ms(percentile(samples, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(samples, 0.99)), "p99-ms")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/flip")
	b.ReportMetric(float64(allocs)/float64(b.N), "B-alloc/flip")
	b.ReportMetric(float64(allocs)/float64(endpointsTouched), "B-alloc/endpoint")
}

// BenchmarkGraphUpdate: the graph's own cost of one endpoint flip, without any client: the time
// and bytes allocated until the service's CLA has its new version, per endpoint of the service
// and per CLA (proxy class projection) it has.
func BenchmarkGraphUpdate(b *testing.B) {
	size := CurrentSize()
	size.Proxies = 0
	m := Generate(size)
	r := start(b, m)
	defer r.stop()
	slicesBySvc := map[string][]*discovery.EndpointSlice{}
	for _, s := range m.Slices {
		slicesBySvc[s.Labels["kubernetes.io/service-name"]] = append(slicesBySvc[s.Labels["kubernetes.io/service-name"]], s)
	}
	// The whole initial computation first (every collection synced, every CLA built): at the
	// large size it outlasts the service endpoints', and the first update would carry it.
	if !r.WaitUntilSynced(r.stopc) {
		b.Fatal("not synced")
	}
	waitCLAs(b, r.Graph, size)
	changed := make(chan string, 1024)
	r.CLAs.RegisterBatch(func(evs []krt.Event[collections.ResourceSet]) {
		for _, e := range evs {
			changed <- e.Latest().Name
		}
	}, false)
	var ms0, ms1 runtime.MemStats
	var allocs uint64
	var clas int
	c0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		svc := 1 + (i*7919)%(size.Services-1)
		if size.PreferCloseEvery > 0 && svc%size.PreferCloseEvery == 0 {
			svc++ // a plain service: its CLA exists without proxies
		}
		svc %= size.Services
		cluster := ClusterName(svc)
		slice := slicesBySvc[ServiceName(svc)][0].DeepCopy()
		ready := !*slice.Endpoints[0].Conditions.Ready
		slice.Endpoints[0].Conditions = discovery.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: ptr(false)}
		slicesBySvc[ServiceName(svc)][0] = slice
		runtime.ReadMemStats(&ms0)
		r.In.Apply(slice, false)
		for name := range changed {
			if name == cluster {
				break
			}
		}
		runtime.ReadMemStats(&ms1)
		allocs += ms1.TotalAlloc - ms0.TotalAlloc
		clas++
	}
	b.StopTimer()
	cpu := cpuTime() - c0
	per := float64(b.N * size.EndpointsPerService)
	b.ReportMetric(float64(cpu.Nanoseconds())/1000/per, "cpu-µs/endpoint")
	b.ReportMetric(float64(allocs)/per, "B-alloc/endpoint")
	b.ReportMetric(float64(allocs)/float64(b.N), "B-alloc/update")
}

// BenchmarkRollout500: a 500-pod Deployment restarts pod by pod (new pod not ready → ready, old
// pod terminating → gone), every proxy subscribed to it; the time from the last write to every
// proxy holding the final CLA.
func BenchmarkRollout500(b *testing.B) {
	size := CurrentSize()
	// The pause between two pods' restarts (KRTEDS_BENCH_ROLLOUT_PACE, default 2ms; 0 writes
	// everything back to back, a worst case no Deployment produces).
	pace := 2 * time.Millisecond
	if v, err := time.ParseDuration(os.Getenv("KRTEDS_BENCH_ROLLOUT_PACE")); err == nil {
		pace = v
	}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		m := Generate(size)
		ro := NewRollout(m, "rollout", 500)
		r := start(b, m, ro.Objects()...)
		if err := r.fleet.Subscribe(ro.Cluster); err != nil {
			b.Fatal(err)
		}
		if _, err := r.fleet.WaitAll(10 * time.Minute); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		delivered := r.fleet.Deliveries(ro.Cluster)
		var lastWrite time.Time
		ro.Restart(func(o any, del bool) { r.In.Apply(o, del); lastWrite = time.Now() }, func() {
			if pace > 0 {
				time.Sleep(pace)
			}
		})
		graphAt, last, err := r.waitRolledOut(b, ro, 5*time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		b.ReportMetric(ms(max(0, last.Sub(lastWrite))), "ms-converged-after-last-write")
		// When the graph held the final CLA: what of the convergence is the graph's.
		b.ReportMetric(ms(max(0, graphAt.Sub(lastWrite))), "ms-graph-after-last-write")
		// Intermediate states a proxy saw: each proxy has at most one response in flight, so a
		// burst of writes reaches it as few responses as it can take.
		b.ReportMetric(float64(r.fleet.Deliveries(ro.Cluster)-delivered)/float64(len(r.fleet.Subscribers(ro.Cluster))), "responses/proxy")
		r.stop()
	}
}

// waitRolledOut waits until the graph holds the rollout's final CLA and every proxy has it,
// returning when the graph was seen holding it and when the last proxy got it.
func (r *running) waitRolledOut(tb testing.TB, ro *Rollout, timeout time.Duration) (graphAt, last time.Time, err error) {
	deadline := time.Now().Add(timeout)
	var want *collections.Resource
	final := ro.finalIn()
	// The CLA's content, not only its size: while the graph catches up, a CLA built from an
	// earlier state may have as many endpoints. Woken by the CLAs' events only, and closed after,
	// so that nothing of the wait runs in what follows.
	w := fixtures.WakeOn(tb, fixtures.NewWaker(), r.CLAs)
	defer w.Close()
	if err := w.Wait(timeout, "the rollout's final CLA in the graph", func() (bool, string) {
		if set := r.CLAs.GetKey(ro.Cluster); final(set) {
			want = set.Shared
			return true, ""
		}
		return false, "an earlier state"
	}); err != nil {
		return time.Time{}, time.Time{}, err
	}
	graphAt = time.Now()
	last, err = r.fleet.WaitVersion(ro.Cluster, r.fleet.All(), func(int) string { return want.VersionString() }, time.Until(deadline))
	if err != nil {
		return graphAt, last, fmt.Errorf("%w; %s", err, r.lagging(ro.Cluster, want.VersionString()))
	}
	return graphAt, last, nil
}

// lagging describes the proxies that do not hold version want of cluster, and their streams.
func (r *running) lagging(cluster, want string) string {
	var b strings.Builder
	status := map[string]xdsdebug.ConnStatus{}
	for _, st := range r.Srv.Statuses() {
		if st.Proxy != nil {
			status[st.Proxy.ID] = st
		}
	}
	set := r.CLAs.GetKey(cluster)
	fmt.Fprintf(&b, "the server last heard of a change to %s at %v; the graph has version %s with %d endpoints\n", cluster,
		r.Srv.LastChange("type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment", cluster).Format(time.RFC3339Nano),
		set.Shared.VersionString(), set.Shared.Endpoints)
	for i, v := range r.fleet.Versions(cluster, r.fleet.All()) {
		if v == want {
			continue
		}
		st := status[r.fleet.NodeID(i)]
		fmt.Fprintf(&b, "proxy %d holds %s (want %s); stream %+v\n", i, v, want, st.Types)
		if b.Len() > 4000 {
			break
		}
	}
	return b.String()
}

// BenchmarkMemory: heap held per endpoint at the current size, after GC, for the input objects
// (stripped as the informers strip them) plus every derived collection; then per connected proxy.
func BenchmarkMemory(b *testing.B) {
	size := CurrentSize()
	for i := 0; i < b.N; i++ {
		heap := fixtures.LiveHeap
		base := heap()
		m := Generate(size)
		for _, p := range m.Pods {
			_, _ = kube.StripPodUnusedFields(p)
		}
		for _, n := range m.Nodes {
			_, _ = kube.StripNodeUnusedFields(n)
		}
		withObjects := heap()
		stop := test.NewStop(b)
		g := rigs.NewGraphWith(b, rigs.GraphOptions{Stop: stop, NoDebugger: true}, m.Objects()...)
		awaitCLAs(b, g, plainServices(size), 0)
		m = nil
		withGraph := heap()
		s := serveGraph(b, g)
		beforeProxies := heap()
		fleet, err := Connect(s.Addr, size)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := fleet.WaitAll(10 * time.Minute); err != nil {
			b.Fatal(err)
		}
		// The fleet's own client-side state is in this process too; count the server side by
		// subtracting a client-only estimate is not possible, so the figure is an upper bound.
		withProxies := heap()
		eps := float64(size.Endpoints())
		b.ReportMetric((float64(withGraph)-float64(base))/eps, "heap-B/endpoint")
		b.ReportMetric((float64(withObjects)-float64(base))/eps, "objects-B/endpoint")
		b.ReportMetric((float64(withGraph)-float64(withObjects))/eps, "graph-B/endpoint")
		b.ReportMetric((float64(withProxies)-float64(beforeProxies))/float64(size.Proxies), "proxy-B/proxy(incl-client)")
		fleet.Close()
		s.Close()
	}
}
