package bench

import (
	"runtime"
	"testing"
	"time"

	discovery "k8s.io/api/discovery/v1"

	"github.com/krteds/krteds/collections/sources"
	"github.com/krteds/krteds/test/rigs"
)

// multiClusterSize is the mesh of each of the four clusters: the same 250 services in each, so
// every service has four shards; 100 proxies subscribe to every service.
var multiClusterSize = Size{Name: "multicluster", Services: 250, EndpointsPerService: 10, Nodes: 20, Zones: 4, Regions: 2,
	Proxies: 100, Classes: 4, PreferCloseEvery: 10}

// BenchmarkMultiCluster: a local cluster and three remote clusters of 250 services × 10 pods,
// 100 delta (or SotW) proxies. It reports how long adding a fourth cluster takes to reach every
// proxy (cluster added → every proxy has every service's new CLA), then flips an endpoint in a
// remote cluster b.N times: p50/p99 from the write to the last proxy's new CLA.
func BenchmarkMultiCluster(b *testing.B) {
	size := multiClusterSize
	m := Generate(size)
	stop := make(chan struct{})
	defer close(stop)
	g := rigs.NewGraphWith(b, rigs.GraphOptions{Stop: stop, NoDebugger: true, NoWait: true, Remote: true}, m.Objects()...)
	remote := func(id string) sources.Static {
		c := g.Remote(id, m.Objects()...)
		g.RemoteClusters.UpdateObject(c.Cluster)
		return c.In
	}
	east := remote("east")
	remote("north")
	s := serveGraph(b, g)
	defer s.Close()
	fleet, err := Connect(s.Addr, size)
	if err != nil {
		b.Fatal(err)
	}
	defer fleet.Close()
	if _, err := fleet.WaitAll(10 * time.Minute); err != nil {
		b.Fatal(err)
	}
	waitAllChanged := func(t0 time.Time, olds map[string][]string) time.Duration {
		var last time.Time
		for i := 0; i < size.Services; i++ {
			c := ClusterName(i)
			t, err := fleet.WaitChanged(c, fleet.Subscribers(c), olds[c], time.Minute)
			if err != nil {
				b.Fatalf("%s: %v", c, err)
			}
			if t.After(last) {
				last = t
			}
		}
		return last.Sub(t0)
	}
	versions := func() map[string][]string {
		out := map[string][]string{}
		for i := 0; i < size.Services; i++ {
			c := ClusterName(i)
			out[c] = fleet.Versions(c, fleet.Subscribers(c))
		}
		return out
	}
	// A fourth cluster joins.
	olds := versions()
	t0 := time.Now()
	remote("south")
	join := waitAllChanged(t0, olds)

	slicesBySvc := map[string]*discovery.EndpointSlice{}
	for _, s := range m.Slices {
		if _, ok := slicesBySvc[s.Labels["kubernetes.io/service-name"]]; !ok {
			slicesBySvc[s.Labels["kubernetes.io/service-name"]] = s
		}
	}
	runtime.GC()
	var samples []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		svc := (i * 7919) % size.Services
		cluster := ClusterName(svc)
		subs := fleet.Subscribers(cluster)
		old := fleet.Versions(cluster, subs)
		slice := slicesBySvc[ServiceName(svc)].DeepCopy()
		ready := !*slice.Endpoints[0].Conditions.Ready
		slice.Endpoints[0].Conditions = discovery.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: ptr(false)}
		slicesBySvc[ServiceName(svc)] = slice
		t0 := time.Now()
		east.Apply(slice, false)
		last, err := fleet.WaitChanged(cluster, subs, old, time.Minute)
		if err != nil {
			b.Fatalf("flip %d of %s in east: %v", i, cluster, err)
		}
		samples = append(samples, last.Sub(t0))
	}
	b.StopTimer()
	b.ReportMetric(ms(join), "join-ms")
	b.ReportMetric(ms(percentile(samples, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(samples, 0.99)), "p99-ms")
	b.ReportMetric(float64(4*size.Endpoints()), "endpoints")
}
