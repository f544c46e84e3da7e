package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"istio.io/istio/pkg/kube"
	"istio.io/istio/pkg/kube/krt"
	istiolog "istio.io/istio/pkg/log"
	"istio.io/istio/pkg/test"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/collections/sources"
	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/outputs/xds"
)

func TestMain(m *testing.M) {
	// The kube client and krt log every informer sync at info; keep benchmark output readable.
	o := istiolog.DefaultOptions()
	o.SetDefaultOutputLevel(istiolog.OverrideScopeName, istiolog.NoneLevel)
	_ = istiolog.Configure(o)
	os.Exit(m.Run())
}

// running is krteds' graph and xDS server over static input collections seeded with a mesh (the
// objects as informers would hold them, without the cost of an API server), with a fleet of
// proxies connected over gRPC on loopback.
type running struct {
	mesh  *Mesh
	in    sources.Static
	g     *graphs.Graph
	grpc  *grpc.Server
	stopc chan struct{}
	fleet *Fleet
}

func start(b *testing.B, m *Mesh, extra ...any) *running {
	b.Helper()
	stop := make(chan struct{})
	opts := krt.NewOptionsBuilder(stop, "", nil)
	for _, p := range m.Pods {
		_, _ = kube.StripPodUnusedFields(p)
	}
	in := sources.NewStatic(opts, nil, append(m.Objects(), extra...)...)
	g := graphs.Build(collections.DefaultConfig(), in.Inputs(), opts, nil)
	srv := xds.NewServer(g, "Kubernetes", nil, nil)
	srv.Start(stop)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := xds.NewGRPCServer(context.Background(), srv)
	go func() { _ = gs.Serve(lis) }()
	fleet, err := Connect(lis.Addr().String(), m.Size)
	if err != nil {
		b.Fatal(err)
	}
	return &running{mesh: m, in: in, g: g, grpc: gs, stopc: stop, fleet: fleet}
}

func (r *running) stop() {
	r.fleet.Close()
	r.grpc.Stop()
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
		r.in.Apply(slice, false)
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
	deadline := time.Now().Add(5 * time.Minute)
	for len(r.g.ServiceEndpoints.List()) < size.Services {
		if time.Now().After(deadline) {
			b.Fatal("graph never computed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	changed := make(chan string, 1024)
	r.g.CLAs.RegisterBatch(func(evs []krt.Event[collections.ResourceSet]) {
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
		r.in.Apply(slice, false)
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
	const n = 500
	name := "rollout"
	// The pause between two pods' restarts (KRTEDS_BENCH_ROLLOUT_PACE, default 2ms; 0 writes
	// everything back to back, a worst case no Deployment produces).
	pace := 2 * time.Millisecond
	if v, err := time.ParseDuration(os.Getenv("KRTEDS_BENCH_ROLLOUT_PACE")); err == nil {
		pace = v
	}
	cluster := fmt.Sprintf("outbound|80||%s.%s.svc.cluster.local", name, meshNamespace)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		m := Generate(size)
		svc := m.Services[1].DeepCopy()
		svc.Name, svc.Spec.TrafficDistribution, svc.Spec.Selector = name, nil, map[string]string{"app": name}
		var extra []any
		extra = append(extra, svc)
		slicesOf := make([]*discovery.EndpointSlice, n/sliceSize)
		podIP := func(gen, k int) string { return fmt.Sprintf("10.200.%d.%d", gen*2+k/256, k%256) }
		podName := func(gen, k int) string { return fmt.Sprintf("%s-g%d-%d", name, gen, k) }
		mkPod := func(gen, k int, ready bool) *corev1.Pod {
			p := Pod(1, 0, m.Nodes[k%len(m.Nodes)].Name)
			p.Name, p.Status.PodIP, p.Status.PodIPs = podName(gen, k), podIP(gen, k), []corev1.PodIP{{IP: podIP(gen, k)}}
			p.Labels = map[string]string{"app": name}
			if !ready {
				p.Status.Conditions[0].Status = corev1.ConditionFalse
			}
			return p
		}
		epOf := func(gen, k int, ready, serving, terminating bool) discovery.Endpoint {
			return discovery.Endpoint{Addresses: []string{podIP(gen, k)},
				Conditions: discovery.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: meshNamespace, Name: podName(gen, k)}}
		}
		for s := range slicesOf {
			slicesOf[s] = &discovery.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, s), Namespace: meshNamespace, Labels: map[string]string{"kubernetes.io/service-name": name}},
				AddressType: discovery.AddressTypeIPv4,
				Ports:       []discovery.EndpointPort{{Name: ptr("http"), Port: ptr(int32(targetPort)), Protocol: ptr(corev1.ProtocolTCP)}},
			}
			for k := s * sliceSize; k < (s+1)*sliceSize; k++ {
				slicesOf[s].Endpoints = append(slicesOf[s].Endpoints, epOf(0, k, true, true, false))
				extra = append(extra, mkPod(0, k, true))
			}
			extra = append(extra, slicesOf[s])
		}
		r := start(b, m, extra...)
		// Every proxy also watches the rollout service.
		if err := r.fleet.Subscribe(cluster); err != nil {
			b.Fatal(err)
		}
		all := make([]int, size.Proxies)
		for p := range all {
			all[p] = p
		}
		if _, err := r.fleet.WaitAll(10 * time.Minute); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		var lastWrite time.Time
		for k := 0; k < n; k++ {
			s := k / sliceSize
			sl := slicesOf[s]
			idx := k % sliceSize
			// New pod, not ready yet.
			write := func() {
				sl = sl.DeepCopy()
				slicesOf[s] = sl
				r.in.Apply(sl, false)
			}
			r.in.Apply(mkPod(1, k, false), false)
			sl.Endpoints = append(sl.Endpoints, epOf(1, k, false, false, false))
			write()
			// New pod ready.
			r.in.Apply(mkPod(1, k, true), false)
			sl.Endpoints[len(sl.Endpoints)-1] = epOf(1, k, true, true, false)
			write()
			// Old pod terminating, then gone.
			sl.Endpoints[idx] = epOf(0, k, false, true, true)
			write()
			sl.Endpoints[idx] = sl.Endpoints[len(sl.Endpoints)-1]
			sl.Endpoints = sl.Endpoints[:len(sl.Endpoints)-1]
			write()
			r.in.Apply(mkPod(0, k, true), true)
			lastWrite = time.Now()
			if pace > 0 {
				time.Sleep(pace)
			}
		}
		// The final state: 500 new, healthy endpoints.
		final := func() *collections.Resource {
			set := r.g.CLAs.GetKey(cluster)
			if set == nil || set.Shared == nil || set.Shared.Endpoints != n {
				return nil
			}
			res := set.Shared
			se := r.g.ServiceEndpoints.GetKey(meshNamespace + "/" + name)
			if se == nil || len(se.Endpoints) != n {
				return nil
			}
			for _, e := range se.Endpoints {
				if e.Health != collections.Healthy || e.Pod[len(meshNamespace)+1:len(meshNamespace)+1+len(name)+3] != name+"-g1" {
					return nil
				}
			}
			return res
		}
		var want *collections.Resource
		deadline := time.Now().Add(5 * time.Minute)
		for want = final(); want == nil; want = final() {
			if time.Now().After(deadline) {
				b.Fatal("the rollout never settled in the graph")
			}
			time.Sleep(time.Millisecond)
		}
		last, err := r.fleet.WaitVersion(cluster, all, func(int) string { return want.VersionString() }, 5*time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		conv := last.Sub(lastWrite)
		if conv < 0 {
			conv = 0
		}
		b.ReportMetric(ms(conv), "ms-converged-after-last-write")
		r.stop()
	}
}

// BenchmarkMemory: heap held per endpoint at the current size, after GC, for the input objects
// (stripped as the informers strip them) plus every derived collection; then per connected proxy.
func BenchmarkMemory(b *testing.B) {
	size := CurrentSize()
	for i := 0; i < b.N; i++ {
		heap := func() uint64 {
			runtime.GC()
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			return ms.HeapAlloc
		}
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
		opts := krt.NewOptionsBuilder(stop, "", nil)
		in := sources.NewStatic(opts, nil, m.Objects()...)
		g := graphs.Build(collections.DefaultConfig(), in.Inputs(), opts, nil)
		if !g.WaitUntilSynced(stop) {
			b.Fatal("not synced")
		}
		deadline := time.Now().Add(5 * time.Minute)
		plain := size.Services
		if size.PreferCloseEvery > 0 {
			plain -= (size.Services + size.PreferCloseEvery - 1) / size.PreferCloseEvery
		}
		for len(g.CLAs.List()) < plain {
			if time.Now().After(deadline) {
				b.Fatal("CLAs never computed")
			}
			time.Sleep(10 * time.Millisecond)
		}
		m = nil
		withGraph := heap()
		srv := xds.NewServer(g, "Kubernetes", nil, nil)
		srv.Start(stop)
		lis, _ := net.Listen("tcp", "127.0.0.1:0")
		gs := xds.NewGRPCServer(context.Background(), srv)
		go func() { _ = gs.Serve(lis) }()
		beforeProxies := heap()
		fleet, err := Connect(lis.Addr().String(), size)
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
		gs.Stop()
	}
}
