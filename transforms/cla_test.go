package transforms

import (
	"fmt"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/krteds/krteds/collections"
)

// ep builds an endpoint on a node/locality with pod-like metadata.
func ep(ip string, h collections.HealthStatus, loc collections.Locality, node string, mut ...func(*collections.EndpointMeta)) collections.Endpoint {
	m := &collections.EndpointMeta{
		PodLabels: collections.InternLabels(map[string]string{"app": "foo"}),
		TLSMode:   "istio",
		Namespace: "ns1", WorkloadName: "foo", CanonicalName: "foo", ClusterID: "Kubernetes",
		Locality: loc, LocalityLabel: loc.String(), NodeName: node,
	}
	for _, f := range mut {
		f(m)
	}
	return collections.Endpoint{Address: ip, Port: 8080, PortName: "http", Health: h, Slice: "s", Meta: m}
}

type wantEP struct {
	ip     string
	health core.HealthStatus
	// plain: no tlsMode metadata; workload overrides the istio.workload value.
	plain    bool
	workload string
}

type wantGroup struct {
	loc      collections.Locality
	priority uint32
	eps      []wantEP
}

func wantCLA(name string, groups ...wantGroup) *endpoint.ClusterLoadAssignment {
	cla := &endpoint.ClusterLoadAssignment{ClusterName: name}
	for _, g := range groups {
		l := &endpoint.LocalityLbEndpoints{
			Locality:            &core.Locality{Region: g.loc.Region, Zone: g.loc.Zone, SubZone: g.loc.Subzone},
			LoadBalancingWeight: wrapperspb.UInt32(uint32(len(g.eps))),
			Priority:            g.priority,
		}
		for _, e := range g.eps {
			wl := e.workload
			if wl == "" {
				wl = "foo;ns1;foo;;Kubernetes"
			}
			fm := map[string]*structpb.Struct{"istio": {Fields: map[string]*structpb.Value{"workload": structpb.NewStringValue(wl)}}}
			if !e.plain {
				fm["envoy.transport_socket_match"] = &structpb.Struct{Fields: map[string]*structpb.Value{"tlsMode": structpb.NewStringValue("istio")}}
			}
			l.LbEndpoints = append(l.LbEndpoints, &endpoint.LbEndpoint{
				HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{Address: &core.Address{
					Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{Address: e.ip, PortSpecifier: &core.SocketAddress_PortValue{PortValue: 8080}}},
				}}},
				HealthStatus:        e.health,
				LoadBalancingWeight: wrapperspb.UInt32(1),
				Metadata:            &core.Metadata{FilterMetadata: fm},
			})
		}
		cla.Endpoints = append(cla.Endpoints, l)
	}
	return cla
}

var (
	r1z1 = collections.Locality{Region: "r1", Zone: "z1"}
	r1z2 = collections.Locality{Region: "r1", Zone: "z2"}
	r2z3 = collections.Locality{Region: "r2", Zone: "z3"}
	none = collections.Locality{}
)

const fooName = "outbound|80||foo.ns1.svc.cluster.local"

func TestPlanCLA(t *testing.T) {
	httpPort := collections.ServicePort{Name: "http", Port: 80, Protocol: "TCP"}
	plainSvc := &collections.ServiceInfo{Name: "foo", Namespace: "ns1", Hostname: "foo.ns1.svc.cluster.local", Ports: []collections.ServicePort{httpPort}}
	with := func(mut func(s *collections.ServiceInfo)) *collections.ServiceInfo {
		s := *plainSvc
		mut(&s)
		return &s
	}
	H, U, D, T := collections.Healthy, collections.UnHealthy, collections.Draining, collections.Terminating
	HE, UN, DR := core.HealthStatus_HEALTHY, core.HealthStatus_UNHEALTHY, core.HealthStatus_DRAINING
	class := func(loc collections.Locality, node string) collections.ProxyClass {
		return collections.ProxyClass{Namespace: "ns1", ClusterID: "Kubernetes", Locality: loc, NodeName: node}
	}
	noPod := collections.Endpoint{Address: "10.9.9.9", Port: 8080, PortName: "http", Health: H, Slice: "s",
		Meta: RegistryOnlyMeta(collections.DefaultConfig(), "")}

	cases := []struct {
		name  string
		svc   *collections.ServiceInfo
		eps   []collections.Endpoint
		class collections.ProxyClass
		want  *endpoint.ClusterLoadAssignment
	}{
		{
			name: "§10.1 mixed health, pod and no-pod, localities sorted, weights summed",
			svc:  plainSvc,
			eps: []collections.Endpoint{
				ep("10.1.0.1", H, r1z1, "n1"),
				ep("10.1.0.3", U, r2z3, "n3"),
				ep("10.1.0.4", T, r1z1, "n1"),
				ep("10.1.0.2", H, collections.Locality{Region: "rx", Zone: "zx", Subzone: "sx"}, "n2"),
				noPod,
			},
			want: wantCLA(fooName,
				wantGroup{loc: none, eps: []wantEP{{ip: "10.9.9.9", health: HE, plain: true, workload: ";;;;Kubernetes"}}},
				wantGroup{loc: r1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE}}},
				wantGroup{loc: r2z3, eps: []wantEP{{ip: "10.1.0.3", health: UN}}},
				wantGroup{loc: collections.Locality{Region: "rx", Zone: "zx", Subzone: "sx"}, eps: []wantEP{{ip: "10.1.0.2", health: HE}}},
			),
		},
		{
			name: "endpoints of other port names are not in this cluster",
			svc:  plainSvc,
			eps: []collections.Endpoint{ep("10.1.0.1", H, r1z1, "n1"), func() collections.Endpoint {
				e := ep("10.1.0.2", H, r1z1, "n1")
				e.PortName = "grpc"
				return e
			}()},
			want: wantCLA(fooName, wantGroup{loc: r1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE}}}),
		},
		{
			name: "draining dropped without persistent session",
			svc:  plainSvc,
			eps:  []collections.Endpoint{ep("10.1.0.1", H, r1z1, "n1"), ep("10.1.0.2", D, r1z1, "n1")},
			want: wantCLA(fooName, wantGroup{loc: r1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE}}}),
		},
		{
			name: "draining kept with the cookie persistent-session label",
			svc:  with(func(s *collections.ServiceInfo) { s.PersistentSession = true }),
			eps:  []collections.Endpoint{ep("10.1.0.1", H, r1z1, "n1"), ep("10.1.0.2", D, r1z1, "n1")},
			want: wantCLA(fooName, wantGroup{loc: r1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE}, {ip: "10.1.0.2", health: DR}}}),
		},
		{
			name: "draining kept with the header persistent-session label (deliberate difference)",
			svc:  with(func(s *collections.ServiceInfo) { s.PersistentSessionHeader = true }),
			eps:  []collections.Endpoint{ep("10.1.0.2", D, r1z1, "n1")},
			want: wantCLA(fooName, wantGroup{loc: r1z1, eps: []wantEP{{ip: "10.1.0.2", health: DR}}}),
		},
		{
			name: "only terminating endpoints give an empty CLA",
			svc:  plainSvc,
			eps:  []collections.Endpoint{ep("10.1.0.4", T, r1z1, "n1")},
			want: wantCLA(fooName),
		},
		{
			name:  "internalTrafficPolicy Local keeps endpoints on the proxy's node",
			svc:   with(func(s *collections.ServiceInfo) { s.NodeLocal = true }),
			eps:   []collections.Endpoint{ep("10.1.0.1", H, r1z1, "n1"), ep("10.1.0.2", H, r1z1, "n2")},
			class: class(r1z1, "n2"),
			want:  wantCLA(fooName, wantGroup{loc: r1z1, eps: []wantEP{{ip: "10.1.0.2", health: HE}}}),
		},
		{
			name: "pod label locality r/z and node locality r/z/ share one group (one locality per priority)",
			svc:  plainSvc,
			eps: []collections.Endpoint{ep("10.1.0.1", H, r1z1, "n1"), ep("10.1.0.2", H, r1z1, "n1", func(m *collections.EndpointMeta) {
				m.LocalityLabel = "r1/z1"
			})},
			want: wantCLA(fooName, wantGroup{loc: r1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE}, {ip: "10.1.0.2", health: HE}}}),
		},
		{
			name: "tlsMode metadata only for istio",
			svc:  plainSvc,
			eps: []collections.Endpoint{ep("10.1.0.1", H, r1z1, "n1", func(m *collections.EndpointMeta) { m.TLSMode = "disabled" }),
				ep("10.1.0.2", H, r1z1, "n1", func(m *collections.EndpointMeta) { m.TLSMode = "weird" })},
			want: wantCLA(fooName, wantGroup{loc: r1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE, plain: true}, {ip: "10.1.0.2", health: HE, plain: true}}}),
		},
		{
			name: "istio.workload carries canonical name and revision",
			svc:  plainSvc,
			eps: []collections.Endpoint{ep("10.1.0.1", H, r1z1, "n1", func(m *collections.EndpointMeta) {
				m.WorkloadName, m.CanonicalName, m.CanonicalRevision = "foo-abc", "foo-canon", "v1"
			})},
			want: wantCLA(fooName, wantGroup{loc: r1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE, workload: "foo-abc;ns1;foo-canon;v1;Kubernetes"}}}),
		},
		{
			name: "PreferClose: same zone 0, same region 1, other region 2",
			svc: with(func(s *collections.ServiceInfo) {
				s.TrafficDistribution = collections.TrafficDistributionPreferSameZone
			}),
			eps:   []collections.Endpoint{ep("10.1.0.1", H, r1z1, "n1"), ep("10.1.0.2", H, r1z2, "n2"), ep("10.1.0.3", U, r2z3, "n3")},
			class: class(r1z1, "n1"),
			want: wantCLA(fooName,
				wantGroup{loc: r1z1, priority: 0, eps: []wantEP{{ip: "10.1.0.1", health: HE}}},
				wantGroup{loc: r1z2, priority: 1, eps: []wantEP{{ip: "10.1.0.2", health: HE}}},
				wantGroup{loc: r2z3, priority: 2, eps: []wantEP{{ip: "10.1.0.3", health: UN}}},
			),
		},
		{
			name: "PreferClose compacts priorities: no same-zone endpoint",
			svc: with(func(s *collections.ServiceInfo) {
				s.TrafficDistribution = collections.TrafficDistributionPreferSameZone
			}),
			eps:   []collections.Endpoint{ep("10.1.0.2", H, r1z2, "n2"), ep("10.1.0.3", H, r2z3, "n3")},
			class: class(r1z1, "n1"),
			want: wantCLA(fooName,
				wantGroup{loc: r1z2, priority: 0, eps: []wantEP{{ip: "10.1.0.2", health: HE}}},
				wantGroup{loc: r2z3, priority: 1, eps: []wantEP{{ip: "10.1.0.3", health: HE}}},
			),
		},
		{
			name: "PreferSameNode splits one locality by node",
			svc: with(func(s *collections.ServiceInfo) {
				s.TrafficDistribution = collections.TrafficDistributionPreferSameNode
			}),
			eps:   []collections.Endpoint{ep("10.1.0.1", H, r1z1, "n1"), ep("10.1.0.2", H, r1z1, "n2"), ep("10.1.0.3", H, r1z2, "n3")},
			class: class(r1z1, "n2"),
			want: wantCLA(fooName,
				wantGroup{loc: r1z1, priority: 0, eps: []wantEP{{ip: "10.1.0.2", health: HE}}},
				wantGroup{loc: r1z1, priority: 1, eps: []wantEP{{ip: "10.1.0.1", health: HE}}},
				wantGroup{loc: r1z2, priority: 2, eps: []wantEP{{ip: "10.1.0.3", health: HE}}},
			),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			policy := PolicyFor(tc.svc)
			got := PlanCLA(fooName, tc.svc, httpPort, tc.eps, policy, Project(tc.svc, policy, tc.class)).Proto()
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Fatalf("CLA (-want +got):\n%s", diff)
			}
			checkClientLimits(t, got)
		})
	}
}

// checkClientLimits asserts what real xDS clients require of every CLA.
func checkClientLimits(t *testing.T, cla *endpoint.ClusterLoadAssignment) {
	t.Helper()
	seen := map[string]bool{}
	type lp struct {
		loc string
		p   uint32
	}
	groups := map[lp]bool{}
	var maxP uint32
	prios := map[uint32]bool{}
	for _, l := range cla.Endpoints {
		if l.Locality == nil || l.GetLoadBalancingWeight().GetValue() == 0 {
			t.Fatalf("locality without weight: %v", l)
		}
		k := lp{l.Locality.String(), l.Priority}
		if groups[k] {
			t.Fatalf("duplicate locality %v in priority %d", l.Locality, l.Priority)
		}
		groups[k] = true
		prios[l.Priority] = true
		maxP = max(maxP, l.Priority)
		for _, e := range l.LbEndpoints {
			if e.GetLoadBalancingWeight().GetValue() == 0 {
				t.Fatal("endpoint weight 0")
			}
			a := e.GetEndpoint().GetAddress().GetSocketAddress()
			key := fmt.Sprintf("%s:%d", a.GetAddress(), a.GetPortValue())
			if seen[key] {
				t.Fatalf("duplicate address %s", a.GetAddress())
			}
			seen[key] = true
		}
	}
	if len(cla.Endpoints) > 0 && len(prios) != int(maxP)+1 {
		t.Fatalf("priorities have gaps: %v", prios)
	}
}

func TestFailoverPriority(t *testing.T) {
	labels := []string{"topology.istio.io/network", "topology.kubernetes.io/region", "topology.kubernetes.io/zone"}
	proxy := map[string]string{"topology.istio.io/network": "n1", "topology.kubernetes.io/region": "r1", "topology.kubernetes.io/zone": "z1"}
	cases := []struct {
		name   string
		ep     map[string]string
		labels []string
		want   int
	}{
		{"all match", proxy, labels, 0},
		{"other zone", map[string]string{"topology.istio.io/network": "n1", "topology.kubernetes.io/region": "r1", "topology.kubernetes.io/zone": "z2"}, labels, 1},
		{"other region", map[string]string{"topology.istio.io/network": "n1", "topology.kubernetes.io/region": "r2", "topology.kubernetes.io/zone": "z1"}, labels, 2},
		{"other network, same region and zone", map[string]string{"topology.istio.io/network": "n2", "topology.kubernetes.io/region": "r1", "topology.kubernetes.io/zone": "z1"}, labels, 3},
		{"other network and region", map[string]string{"topology.istio.io/network": "n2", "topology.kubernetes.io/region": "r2"}, labels, 5},
		{"override label=value", map[string]string{"topology.kubernetes.io/region": "r9"}, []string{"topology.kubernetes.io/region=r9"}, 0},
		{"override mismatch", map[string]string{"topology.kubernetes.io/region": "r1"}, []string{"topology.kubernetes.io/region=r9"}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := FailoverPriority(proxy, func(k string) string { return tc.ep[k] }, tc.labels); got != tc.want {
				t.Fatalf("got %d want %d", got, tc.want)
			}
		})
	}
}

func TestProjection(t *testing.T) {
	c := collections.ProxyClass{Namespace: "ns1", ClusterID: "Kubernetes", Network: "net", Locality: collections.Locality{Region: "r", Zone: "z", Subzone: "s"}, NodeName: "n1"}
	plain := &collections.ServiceInfo{}
	if p := Project(plain, PolicyFor(plain), c); ProjectionKey(p) != "" {
		t.Fatalf("a plain service must not depend on the proxy: %+v", p)
	}
	zone := &collections.ServiceInfo{TrafficDistribution: collections.TrafficDistributionPreferSameZone}
	if p := Project(zone, PolicyFor(zone), c); p != (collections.ProxyClass{Network: "net", Locality: collections.Locality{Region: "r", Zone: "z"}}) {
		t.Fatalf("PreferSameZone projection %+v", p)
	}
	node := &collections.ServiceInfo{TrafficDistribution: collections.TrafficDistributionPreferSameNode}
	if p := Project(node, PolicyFor(node), c); p.NodeName != "n1" || p.Locality.Subzone != "s" {
		t.Fatalf("PreferSameNode projection must keep node and subzone: %+v", p)
	}
	local := &collections.ServiceInfo{NodeLocal: true}
	if p := Project(local, PolicyFor(local), c); p != (collections.ProxyClass{NodeName: "n1"}) {
		t.Fatalf("node-local projection %+v", p)
	}
}
