package graphs_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
	"github.com/krteds/krteds/transforms"
)

// waitResolves waits until the CLA name resolves, for the connection's view, to want
// ("address:port@cluster" in order).
func waitResolves(t *testing.T, g *rigs.Graph, conn, name string, want []string) {
	t.Helper()
	g.Await(t, conn+"'s view of "+name, func() (bool, string) {
		v := g.Served.View(conn)
		if v == nil {
			return false, "no view"
		}
		r, pending := g.Served.Resolve(v, transforms.TypeCLA, name)
		if pending {
			return false, "pending"
		}
		got := rigs.CLAEndpoints(t, r)
		return slices.Equal(got, want), fmt.Sprint(got)
	})
}

// TestRemoteClusterShards: a remote cluster's endpoints join the local cluster's as a shard of
// their own (an address both clusters use is two endpoints), after the local shard in cluster
// order; a Service only the remote cluster has is served; a cluster-local service shows each
// proxy its own cluster's endpoints only; the cluster's collections appear in the graph under
// its name. When the cluster leaves, its endpoints, services and collections go with it.
func TestRemoteClusterShards(t *testing.T) {
	local := []any{
		fixtures.Service("ns1", "foo", fixtures.HTTP...),
		fixtures.Pod("ns1", "foo-1", "foo", "10.0.0.1", ""),
		fixtures.Slice("ns1", "foo-a", "foo", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready}),
		fixtures.Service("kube-system", "dns", fixtures.HTTP...),
		fixtures.Pod("kube-system", "dns-1", "dns", "10.0.9.1", ""),
		fixtures.Slice("kube-system", "dns-a", "dns", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.9.1", Pod: "dns-1", Cond: fixtures.Ready}),
	}
	g := rigs.NewGraphWith(t, rigs.GraphOptions{Remote: true}, local...)
	const foo, bar, dns = "outbound|80||foo.ns1.svc.cluster.local", "outbound|80||bar.ns1.svc.cluster.local", "outbound|80||dns.kube-system.svc.cluster.local"
	shared := func(name string) []string {
		set := g.CLAs.GetKey(name)
		if set == nil {
			return nil
		}
		return rigs.CLAEndpoints(t, set.Shared)
	}
	g.Await(t, "the local shard", func() (bool, string) {
		got := shared(foo)
		return slices.Equal(got, []string{"10.0.0.1:8080@Kubernetes"}), fmt.Sprint(got)
	})

	remote := g.Remote("cluster-2",
		fixtures.Service("ns1", "foo", fixtures.HTTP...),
		fixtures.Pod("ns1", "foo-r1", "foo", "10.0.0.1", ""), // the same address as the local pod
		fixtures.Pod("ns1", "foo-r2", "foo", "10.1.0.2", ""),
		fixtures.Slice("ns1", "foo-r", "foo", fixtures.HTTPSlice,
			fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-r1", Cond: fixtures.Ready}, fixtures.Endpoint{IP: "10.1.0.2", Pod: "foo-r2", Cond: fixtures.Ready}),
		fixtures.Service("ns1", "bar", fixtures.HTTP...),
		fixtures.Pod("ns1", "bar-1", "bar", "10.1.0.3", ""),
		fixtures.Slice("ns1", "bar-r", "bar", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.1.0.3", Pod: "bar-1", Cond: fixtures.Ready}),
		fixtures.Service("kube-system", "dns", fixtures.HTTP...),
		fixtures.Pod("kube-system", "dns-r", "dns", "10.1.9.1", ""),
		fixtures.Slice("kube-system", "dns-r", "dns", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.1.9.1", Pod: "dns-r", Cond: fixtures.Ready}),
	)
	g.RemoteClusters.UpdateObject(remote.Cluster)
	g.Await(t, "both shards, local first", func() (bool, string) {
		got := shared(foo)
		return slices.Equal(got, []string{"10.0.0.1:8080@Kubernetes", "10.0.0.1:8080@cluster-2", "10.1.0.2:8080@cluster-2"}), fmt.Sprint(got)
	})
	g.Await(t, "the remote-only service", func() (bool, string) {
		got := shared(bar)
		return slices.Equal(got, []string{"10.1.0.3:8080@cluster-2"}), fmt.Sprint(got)
	})
	// The description counts a collection's objects from a handler of its own, which may run
	// after the shards derived from them are seen, and offers no hook: polled, not read once.
	fixtures.Polling("the description counts a collection's objects from a handler of its own").Await(t, rigs.Timeout, "the remote cluster's slices in the graph", func() (bool, string) {
		n, ok := g.Description.Snapshot().Node("cluster-2/" + graphs.NameSliceEndpoints)
		return ok && n.Size == 3, fmt.Sprintf("%+v", n)
	})

	// A cluster-local service: each proxy sees its own cluster's endpoints.
	g.Served.Connect(collections.ConnectedProxy{ConnID: "local", ID: "sidecar~10.0.0.50~x.ns1~ns1.svc.cluster.local", Type: "sidecar",
		IP: "10.0.0.50", Namespace: "ns1", ClusterID: "Kubernetes"})
	g.Served.Connect(collections.ConnectedProxy{ConnID: "remote", ID: "sidecar~10.1.0.50~x.ns1~ns1.svc.cluster.local", Type: "sidecar",
		IP: "10.1.0.50", Namespace: "ns1", ClusterID: "cluster-2"})
	for conn, want := range map[string][]string{"local": {"10.0.9.1:8080@Kubernetes"}, "remote": {"10.1.9.1:8080@cluster-2"}} {
		waitResolves(t, g, conn, dns, want)
	}

	// The cluster leaves.
	g.RemoteClusters.DeleteObject(remote.ID)
	remote.Leave()
	g.Await(t, "the local shard alone", func() (bool, string) {
		got := shared(foo)
		return slices.Equal(got, []string{"10.0.0.1:8080@Kubernetes"}), fmt.Sprint(got)
	})
	g.Await(t, "the remote-only service to go", func() (bool, string) { return g.CLAs.GetKey(bar) == nil, "present" })
	fixtures.Polling("the description drops a cluster's collections from a goroutine of its own when the cluster stops").
		Await(t, rigs.Timeout, "the remote cluster's collections to leave the graph", func() (bool, string) {
			_, ok := g.Description.Snapshot().Node("cluster-2/" + graphs.NameSliceEndpoints)
			return !ok, "present"
		})
}

// TestSplitHorizonAcrossClusters: a remote cluster on another network, with an east-west gateway
// Service: a proxy of the local network reaches the remote endpoints through the gateway; a
// proxy of the remote network reaches both clusters' endpoints directly (the local network has
// no gateway).
func TestSplitHorizonAcrossClusters(t *testing.T) {
	mtls := func(p *corev1.Pod) *corev1.Pod {
		p.Labels["security.istio.io/tlsMode"] = "istio"
		return p
	}
	g := rigs.NewGraphWith(t, rigs.GraphOptions{Remote: true},
		fixtures.Namespace("istio-system", map[string]string{"topology.istio.io/network": "net1"}, nil),
		fixtures.Service("ns1", "foo", fixtures.HTTP...),
		mtls(fixtures.Pod("ns1", "foo-1", "foo", "10.0.0.1", "")),
		fixtures.Slice("ns1", "foo-a", "foo", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready}),
		// bar is only on net1, which has no gateway: its CLA is the same for every network.
		fixtures.Service("ns1", "bar", fixtures.HTTP...),
		fixtures.Pod("ns1", "bar-1", "bar", "10.0.0.2", ""),
		fixtures.Slice("ns1", "bar-a", "bar", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.0.2", Pod: "bar-1", Cond: fixtures.Ready}))
	gw := fixtures.Service("istio-system", "eastwestgateway", fixtures.Port{Name: "tls", Port: 15443, Target: 15443})
	gw.Labels = map[string]string{"topology.istio.io/network": "net2"}
	gw.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.10"}}
	remote := g.Remote("east",
		fixtures.Namespace("istio-system", map[string]string{"topology.istio.io/network": "net2"}, nil), gw,
		fixtures.Service("ns1", "foo", fixtures.HTTP...),
		mtls(fixtures.Pod("ns1", "foo-r", "foo", "10.1.0.2", "")),
		fixtures.Slice("ns1", "foo-r", "foo", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.1.0.2", Pod: "foo-r", Cond: fixtures.Ready}))
	g.RemoteClusters.UpdateObject(remote.Cluster)
	g.Served.Connect(collections.ConnectedProxy{ConnID: "west", ID: "sidecar~10.0.0.50~x.ns1~ns1.svc.cluster.local", Type: "sidecar",
		IP: "10.0.0.50", Namespace: "ns1", ClusterID: "Kubernetes", Network: "net1"})
	g.Served.Connect(collections.ConnectedProxy{ConnID: "east", ID: "sidecar~10.1.0.50~x.ns1~ns1.svc.cluster.local", Type: "sidecar",
		IP: "10.1.0.50", Namespace: "ns1", ClusterID: "east", Network: "net2"})
	const foo = "outbound|80||foo.ns1.svc.cluster.local"
	for conn, want := range map[string][]string{
		"west": {"10.0.0.1:8080@Kubernetes", "203.0.113.10:15443@east"},
		"east": {"10.0.0.1:8080@Kubernetes", "10.1.0.2:8080@east"},
	} {
		waitResolves(t, g, conn, foo, want)
	}
	if set := g.CLAs.GetKey("outbound|80||bar.ns1.svc.cluster.local"); set == nil || set.Shared == nil {
		t.Fatalf("a service on no gateway's network must share one CLA across networks: %+v", set)
	}
}

// TestClusterLocalHostsAcrossClusters holds which services show each proxy only its own
// cluster's endpoints to istiod's cluster-local hosts (clusterLocalProvider.onMeshUpdated, read
// by the endpoint builder's snapshotShards): by default *.kube-system.svc, kubernetes.default.svc
// and the discovery address's host (istiod.istio-system.svc); another discovery address moves
// that one; mesh config's serviceSettings make hosts cluster-local (a ServiceEntry host too: its
// endpoints are the config cluster's) or global (removing a default). A proxy of each of two
// clusters asks for every service; a global one gets both clusters' endpoints.
func TestClusterLocalHostsAcrossClusters(t *testing.T) {
	const (
		istiod     = "outbound|15012||istiod.istio-system.svc.cluster.local"
		canary     = "outbound|15012||istiod-canary.istio-system.svc.cluster.local"
		kubernetes = "outbound|80||kubernetes.default.svc.cluster.local"
		dns        = "outbound|80||dns.kube-system.svc.cluster.local"
		foo        = "outbound|80||foo.ns1.svc.cluster.local"
		ext        = "outbound|80||api.example.com"
	)
	grpc := fixtures.Port{Name: "grpc", Port: 15012, Target: 15012}
	// cluster gives a cluster's objects, its endpoints at 10.<n>.x.y.
	cluster := func(n int) []any {
		ip := func(host int) string { return fmt.Sprintf("10.%d.0.%d", n, host) }
		var out []any
		for i, s := range []struct {
			ns, name string
			port     fixtures.Port
		}{{"istio-system", "istiod", grpc}, {"istio-system", "istiod-canary", grpc}, {"default", "kubernetes", fixtures.HTTP[0]},
			{"kube-system", "dns", fixtures.HTTP[0]}, {"ns1", "foo", fixtures.HTTP[0]}} {
			pod := s.name + "-pod"
			slicePorts := []fixtures.SlicePort{{Name: s.port.Name, Port: s.port.Target}}
			out = append(out, fixtures.Service(s.ns, s.name, s.port), fixtures.Pod(s.ns, pod, s.name, ip(i+1), ""),
				fixtures.Slice(s.ns, s.name+"-a", s.name, slicePorts, fixtures.Endpoint{IP: ip(i + 1), Pod: pod, Cond: fixtures.Ready}))
		}
		return out
	}
	entry, err := rigs.ObjectsOf([]byte(`
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: ns1}
spec:
  hosts: [api.example.com]
  resolution: STATIC
  ports: [{number: 80, name: http}]
  endpoints: [{address: 192.0.2.1}]
`))
	if err != nil {
		t.Fatal(err)
	}
	local, remote := []string{"10.0.0"}, []string{"10.1.0"}
	both := []string{"10.0.0", "10.1.0"}
	for _, tc := range []struct {
		name string
		cfg  collections.Config
		// want maps a cluster name to the address prefixes each proxy gets, the local proxy's
		// first; nil for the remote proxy: none (a ServiceEntry's endpoints are local).
		want map[string][2][]string
	}{{
		name: "istiod's defaults",
		cfg:  collections.DefaultConfig(),
		want: map[string][2][]string{istiod: {local, remote}, canary: {both, both}, kubernetes: {local, remote}, dns: {local, remote}, foo: {both, both},
			ext: {{"192.0.2"}, {"192.0.2"}}},
	}, {
		name: "another discovery address",
		cfg:  collections.Config{DiscoveryAddress: "istiod-canary.istio-system.svc:15012"},
		want: map[string][2][]string{istiod: {both, both}, canary: {local, remote}, kubernetes: {local, remote}},
	}, {
		name: "serviceSettings: a host made cluster-local, a ServiceEntry host too, a default made global",
		cfg: collections.Config{ServiceSettings: []collections.ServiceSetting{
			{Hosts: []string{"*.ns1.svc.cluster.local", "api.example.com"}, ClusterLocal: true},
			{Hosts: []string{"kubernetes.default.svc.cluster.local"}},
		}},
		want: map[string][2][]string{foo: {local, remote}, kubernetes: {both, both}, istiod: {local, remote}, dns: {local, remote}, ext: {{"192.0.2"}, nil}},
	}, {
		name: "--cluster-local-host adds to the defaults",
		cfg:  collections.Config{ClusterLocalHosts: []string{"foo.ns1.svc.cluster.local"}},
		want: map[string][2][]string{foo: {local, remote}, kubernetes: {local, remote}, istiod: {local, remote}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := rigs.NewGraphWith(t, rigs.GraphOptions{Config: tc.cfg, Remote: true}, append(cluster(0), entry...)...)
			g.RemoteClusters.UpdateObject(g.Remote("cluster-2", cluster(1)...).Cluster)
			g.Served.Connect(collections.ConnectedProxy{ConnID: "local", ID: "sidecar~10.0.0.50~x.ns1~ns1.svc.cluster.local", Type: "sidecar",
				IP: "10.0.0.50", Namespace: "ns1", ClusterID: "Kubernetes"})
			g.Served.Connect(collections.ConnectedProxy{ConnID: "remote", ID: "sidecar~10.1.0.50~x.ns1~ns1.svc.cluster.local", Type: "sidecar",
				IP: "10.1.0.50", Namespace: "ns1", ClusterID: "cluster-2"})
			w := fixtures.NewWaker()
			fixtures.WakeOn(t, w, g.CLAs)
			fixtures.WakeOn(t, w, g.Proxies)
			for name, want := range tc.want {
				for i, conn := range []string{"local", "remote"} {
					w.Await(t, 10*time.Second, conn+"'s CLA of "+name, func() (bool, string) {
						v := g.Served.View(conn)
						if v == nil {
							return false, "no view"
						}
						r, pending := g.Served.Resolve(v, transforms.TypeCLA, name)
						if pending {
							return false, "pending"
						}
						var got []string
						for _, e := range rigs.CLAEndpoints(t, r) {
							if p := e[:strings.LastIndexByte(e[:strings.IndexByte(e, ':')], '.')]; !slices.Contains(got, p) {
								got = append(got, p)
							}
						}
						return slices.Equal(got, want[i]), fmt.Sprintf("%v, want %v", got, want[i])
					})
				}
			}
		})
	}
}
