package eds

import (
	"fmt"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/policy"
	"github.com/krteds/krteds/transforms/registry"
	"github.com/krteds/krteds/transforms/transformtest"
)

// drainingLabel gives an endpoint's Pod the istio.io/draining label with that value.
func drainingLabel(v string) func(*collections.EndpointMeta) {
	return func(m *collections.EndpointMeta) {
		m.PodLabels = collections.InternLabels(map[string]string{"app": "foo", DrainingLabel: v})
	}
}

type wantEP struct {
	ip     string
	health core.HealthStatus
	// plain: no tlsMode metadata; tls: the tlsMode value ("" = istio); workload overrides the
	// istio.workload value.
	plain    bool
	tls      string
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
				tls := e.tls
				if tls == "" {
					tls = "istio"
				}
				fm["envoy.transport_socket_match"] = &structpb.Struct{Fields: map[string]*structpb.Value{"tlsMode": structpb.NewStringValue(tls)}}
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
		Meta: registry.RegistryOnlyMeta(collections.DefaultConfig(), "")}

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
				transformtest.Ep("10.1.0.1", H, transformtest.R1z1, "n1"),
				transformtest.Ep("10.1.0.3", U, transformtest.R2z3, "n3"),
				transformtest.Ep("10.1.0.4", T, transformtest.R1z1, "n1"),
				transformtest.Ep("10.1.0.2", H, collections.Locality{Region: "rx", Zone: "zx", Subzone: "sx"}, "n2"),
				noPod,
			},
			want: wantCLA(fooName,
				wantGroup{loc: transformtest.None, eps: []wantEP{{ip: "10.9.9.9", health: HE, plain: true, workload: ";;;;Kubernetes"}}},
				wantGroup{loc: transformtest.R1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE}}},
				wantGroup{loc: transformtest.R2z3, eps: []wantEP{{ip: "10.1.0.3", health: UN}}},
				wantGroup{loc: collections.Locality{Region: "rx", Zone: "zx", Subzone: "sx"}, eps: []wantEP{{ip: "10.1.0.2", health: HE}}},
			),
		},
		{
			// istiod's convertWorkloadEntryToWorkloadInstance and convertServiceEntryToInstances set
			// no HealthStatus: buildEnvoyLbEndpoint writes core.HealthStatus(0), UNKNOWN.
			name: "an endpoint of unknown health (a WorkloadEntry's) is sent with no health status",
			svc:  plainSvc,
			eps:  []collections.Endpoint{transformtest.Ep("10.1.0.1", H, transformtest.R1z1, "n1"), transformtest.Ep("10.1.0.2", collections.Unknown, transformtest.R1z1, "n1")},
			want: wantCLA(fooName, wantGroup{loc: transformtest.R1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE}, {ip: "10.1.0.2", health: core.HealthStatus_UNKNOWN}}}),
		},
		{
			name: "endpoints of other port names are not in this cluster",
			svc:  plainSvc,
			eps: []collections.Endpoint{transformtest.Ep("10.1.0.1", H, transformtest.R1z1, "n1"), func() collections.Endpoint {
				e := transformtest.Ep("10.1.0.2", H, transformtest.R1z1, "n1")
				e.PortName = "grpc"
				return e
			}()},
			want: wantCLA(fooName, wantGroup{loc: transformtest.R1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE}}}),
		},
		{
			name: "draining dropped without persistent session",
			svc:  plainSvc,
			eps:  []collections.Endpoint{transformtest.Ep("10.1.0.1", H, transformtest.R1z1, "n1"), transformtest.Ep("10.1.0.2", D, transformtest.R1z1, "n1")},
			want: wantCLA(fooName, wantGroup{loc: transformtest.R1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE}}}),
		},
		{
			name: "draining kept with the cookie persistent-session label",
			svc:  with(func(s *collections.ServiceInfo) { s.PersistentSession = true }),
			eps:  []collections.Endpoint{transformtest.Ep("10.1.0.1", H, transformtest.R1z1, "n1"), transformtest.Ep("10.1.0.2", D, transformtest.R1z1, "n1")},
			want: wantCLA(fooName, wantGroup{loc: transformtest.R1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE}, {ip: "10.1.0.2", health: DR}}}),
		},
		{
			name: "draining kept with the header persistent-session label (deliberate difference)",
			svc:  with(func(s *collections.ServiceInfo) { s.PersistentSessionHeader = true }),
			eps:  []collections.Endpoint{transformtest.Ep("10.1.0.2", D, transformtest.R1z1, "n1")},
			want: wantCLA(fooName, wantGroup{loc: transformtest.R1z1, eps: []wantEP{{ip: "10.1.0.2", health: DR}}}),
		},
		{
			// filterIstioEndpoint: the endpoint label PILOT_DRAINING_LABEL (istio.io/draining) with
			// a non-empty value makes it draining, whatever its conditions.
			name: "the draining label leaves an endpoint out of a service without persistent session",
			svc:  plainSvc,
			eps:  []collections.Endpoint{transformtest.Ep("10.1.0.1", H, transformtest.R1z1, "n1"), transformtest.Ep("10.1.0.2", H, transformtest.R1z1, "n1", drainingLabel("true"))},
			want: wantCLA(fooName, wantGroup{loc: transformtest.R1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE}}}),
		},
		{
			name: "the draining label with an empty value is no draining",
			svc:  plainSvc,
			eps:  []collections.Endpoint{transformtest.Ep("10.1.0.2", H, transformtest.R1z1, "n1", drainingLabel(""))},
			want: wantCLA(fooName, wantGroup{loc: transformtest.R1z1, eps: []wantEP{{ip: "10.1.0.2", health: HE}}}),
		},
		{
			// buildEnvoyLbEndpoint forces DRAINING for a labelled endpoint, over UNHEALTHY too; a
			// terminating one is dropped before.
			name: "the draining label sends DRAINING to a persistent-session service, over UNHEALTHY",
			svc:  with(func(s *collections.ServiceInfo) { s.PersistentSession = true }),
			eps: []collections.Endpoint{transformtest.Ep("10.1.0.1", H, transformtest.R1z1, "n1", drainingLabel("yes")), transformtest.Ep("10.1.0.2", U, transformtest.R1z1, "n1", drainingLabel("yes")),
				transformtest.Ep("10.1.0.3", T, transformtest.R1z1, "n1", drainingLabel("yes"))},
			want: wantCLA(fooName, wantGroup{loc: transformtest.R1z1, eps: []wantEP{{ip: "10.1.0.1", health: DR}, {ip: "10.1.0.2", health: DR}}}),
		},
		{
			name: "only terminating endpoints give an empty CLA",
			svc:  plainSvc,
			eps:  []collections.Endpoint{transformtest.Ep("10.1.0.4", T, transformtest.R1z1, "n1")},
			want: wantCLA(fooName),
		},
		{
			name:  "internalTrafficPolicy Local keeps endpoints on the proxy's node",
			svc:   with(func(s *collections.ServiceInfo) { s.NodeLocal = true }),
			eps:   []collections.Endpoint{transformtest.Ep("10.1.0.1", H, transformtest.R1z1, "n1"), transformtest.Ep("10.1.0.2", H, transformtest.R1z1, "n2")},
			class: class(transformtest.R1z1, "n2"),
			want:  wantCLA(fooName, wantGroup{loc: transformtest.R1z1, eps: []wantEP{{ip: "10.1.0.2", health: HE}}}),
		},
		{
			name: "pod label locality r/z and node locality r/z/ share one group (one locality per priority)",
			svc:  plainSvc,
			eps: []collections.Endpoint{transformtest.Ep("10.1.0.1", H, transformtest.R1z1, "n1"), transformtest.Ep("10.1.0.2", H, transformtest.R1z1, "n1", func(m *collections.EndpointMeta) {
				m.LocalityLabel = "r1/z1"
			})},
			want: wantCLA(fooName, wantGroup{loc: transformtest.R1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE}, {ip: "10.1.0.2", health: HE}}}),
		},
		{
			name: "tlsMode metadata only for istio",
			svc:  plainSvc,
			eps: []collections.Endpoint{transformtest.Ep("10.1.0.1", H, transformtest.R1z1, "n1", func(m *collections.EndpointMeta) { m.TLSMode = "disabled" }),
				transformtest.Ep("10.1.0.2", H, transformtest.R1z1, "n1", func(m *collections.EndpointMeta) { m.TLSMode = "weird" })},
			want: wantCLA(fooName, wantGroup{loc: transformtest.R1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE, plain: true}, {ip: "10.1.0.2", health: HE, plain: true}}}),
		},
		{
			name: "istio.workload carries canonical name and revision",
			svc:  plainSvc,
			eps: []collections.Endpoint{transformtest.Ep("10.1.0.1", H, transformtest.R1z1, "n1", func(m *collections.EndpointMeta) {
				m.WorkloadName, m.CanonicalName, m.CanonicalRevision = "foo-abc", "foo-canon", "v1"
			})},
			want: wantCLA(fooName, wantGroup{loc: transformtest.R1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE, workload: "foo-abc;ns1;foo-canon;v1;Kubernetes"}}}),
		},
		{
			name: "PreferClose: same zone 0, same region 1, other region 2",
			svc: with(func(s *collections.ServiceInfo) {
				s.TrafficDistribution = collections.TrafficDistributionPreferSameZone
			}),
			eps:   []collections.Endpoint{transformtest.Ep("10.1.0.1", H, transformtest.R1z1, "n1"), transformtest.Ep("10.1.0.2", H, transformtest.R1z2, "n2"), transformtest.Ep("10.1.0.3", U, transformtest.R2z3, "n3")},
			class: class(transformtest.R1z1, "n1"),
			want: wantCLA(fooName,
				wantGroup{loc: transformtest.R1z1, priority: 0, eps: []wantEP{{ip: "10.1.0.1", health: HE}}},
				wantGroup{loc: transformtest.R1z2, priority: 1, eps: []wantEP{{ip: "10.1.0.2", health: HE}}},
				wantGroup{loc: transformtest.R2z3, priority: 2, eps: []wantEP{{ip: "10.1.0.3", health: UN}}},
			),
		},
		{
			name: "PreferClose compacts priorities: no same-zone endpoint",
			svc: with(func(s *collections.ServiceInfo) {
				s.TrafficDistribution = collections.TrafficDistributionPreferSameZone
			}),
			eps:   []collections.Endpoint{transformtest.Ep("10.1.0.2", H, transformtest.R1z2, "n2"), transformtest.Ep("10.1.0.3", H, transformtest.R2z3, "n3")},
			class: class(transformtest.R1z1, "n1"),
			want: wantCLA(fooName,
				wantGroup{loc: transformtest.R1z2, priority: 0, eps: []wantEP{{ip: "10.1.0.2", health: HE}}},
				wantGroup{loc: transformtest.R2z3, priority: 1, eps: []wantEP{{ip: "10.1.0.3", health: HE}}},
			),
		},
		{
			name: "PreferSameNode splits one locality by node",
			svc: with(func(s *collections.ServiceInfo) {
				s.TrafficDistribution = collections.TrafficDistributionPreferSameNode
			}),
			eps:   []collections.Endpoint{transformtest.Ep("10.1.0.1", H, transformtest.R1z1, "n1"), transformtest.Ep("10.1.0.2", H, transformtest.R1z1, "n2"), transformtest.Ep("10.1.0.3", H, transformtest.R1z2, "n3")},
			class: class(transformtest.R1z1, "n2"),
			want: wantCLA(fooName,
				wantGroup{loc: transformtest.R1z1, priority: 0, eps: []wantEP{{ip: "10.1.0.2", health: HE}}},
				wantGroup{loc: transformtest.R1z1, priority: 1, eps: []wantEP{{ip: "10.1.0.1", health: HE}}},
				wantGroup{loc: transformtest.R1z2, priority: 2, eps: []wantEP{{ip: "10.1.0.3", health: HE}}},
			),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lb := PolicyFor(tc.svc)
			got := planCLA(fooName, tc.svc, httpPort, collections.AppendRefs(nil, tc.eps), lb, project(tc.svc, lb, tc.class), nil).Proto()
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

// TestUnknownHealthIsUsable: istiod's filterIstioEndpoint drops UnHealthy endpoints only where
// supportsUnhealthyEndpoints is false (outlierDetection.minHealthPercent > 0), Terminating ones
// always and Draining ones without a persistent session; an endpoint of unknown health (zero) is
// none of these and is always kept.
func TestUnknownHealthIsUsable(t *testing.T) {
	port := collections.ServicePort{Name: "http", Port: 80}
	svc := &collections.ServiceInfo{Name: "foo", Namespace: "ns1"}
	for _, supports := range []bool{true, false} {
		lb := LBPolicy{SupportsUnhealthy: supports}
		if got := exclude(svc, port, lb, collections.ProxyClass{}, transformtest.Ep("10.1.0.1", collections.Unknown, transformtest.R1z1, "n1")); got != Kept {
			t.Errorf("SupportsUnhealthy %v: an endpoint of unknown health is excluded (%d)", supports, got)
		}
		want := Kept
		if !supports {
			want = ExcludedUnhealthy
		}
		if got := exclude(svc, port, lb, collections.ProxyClass{}, transformtest.Ep("10.1.0.1", collections.UnHealthy, transformtest.R1z1, "n1")); got != want {
			t.Errorf("SupportsUnhealthy %v: an unhealthy endpoint gives %d, want %d", supports, got, want)
		}
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
	if p := project(plain, PolicyFor(plain), c); transforms.ProjectionKey(p) != "" {
		t.Fatalf("a plain service must not depend on the proxy: %+v", p)
	}
	zone := &collections.ServiceInfo{TrafficDistribution: collections.TrafficDistributionPreferSameZone}
	if p := project(zone, PolicyFor(zone), c); p != (collections.ProxyClass{Network: "net", Locality: collections.Locality{Region: "r", Zone: "z"}}) {
		t.Fatalf("PreferSameZone projection %+v", p)
	}
	node := &collections.ServiceInfo{TrafficDistribution: collections.TrafficDistributionPreferSameNode}
	if p := project(node, PolicyFor(node), c); p.NodeName != "n1" || p.Locality.Subzone != "s" {
		t.Fatalf("PreferSameNode projection must keep node and subzone: %+v", p)
	}
	// Node names are per cluster: a node-local service keeps the cluster too.
	local := &collections.ServiceInfo{NodeLocal: true}
	if p := project(local, PolicyFor(local), c); p != (collections.ProxyClass{NodeName: "n1", ClusterID: c.ClusterID}) {
		t.Fatalf("node-local projection %+v", p)
	}
	clusterLocal := &collections.ServiceInfo{ClusterLocal: true}
	if p := project(clusterLocal, PolicyFor(clusterLocal), c); p != (collections.ProxyClass{ClusterID: c.ClusterID}) {
		t.Fatalf("cluster-local projection %+v", p)
	}
}

// TestTLSModeMetadata follows istiod's mtlsChecker (pilot/pkg/xds/endpoints/mtls_checker.go:
// checkMtlsEnabled, tlsModeForDestinationRule, trafficPolicyTLSModeForPort) and
// util.AppendLbEndpointMetadata: an endpoint's TLSMode is blanked unless mTLS is on for it, and
// envoy.transport_socket_match {tlsMode: <TLSMode>} is written when it is neither "" nor
// "disabled". mTLS is on iff the rule's mode for the cluster is ISTIO_MUTUAL when the rule gives
// one (so any pod label value is copied), else iff the endpoint's TLSMode is "istio".
func TestTLSModeMetadata(t *testing.T) {
	httpPort := collections.ServicePort{Name: "http", Port: 80, Protocol: "TCP"}
	svc := &collections.ServiceInfo{Name: "foo", Namespace: "ns1", Hostname: "foo.ns1.svc.cluster.local", Ports: []collections.ServicePort{httpPort}}
	H, HE := collections.Healthy, core.HealthStatus_HEALTHY
	tlsMode := func(v string) func(*collections.EndpointMeta) {
		return func(m *collections.EndpointMeta) { m.TLSMode = v }
	}
	// One endpoint per pod label value: istio, a custom value, disabled (also the value of a
	// pod without the label), and the label set empty.
	eps := []collections.Endpoint{
		transformtest.Ep("10.1.0.1", H, transformtest.R1z1, "n1", tlsMode("istio")),
		transformtest.Ep("10.1.0.2", H, transformtest.R1z1, "n1", tlsMode("custom")),
		transformtest.Ep("10.1.0.3", H, transformtest.R1z1, "n1", tlsMode("disabled")),
		transformtest.Ep("10.1.0.4", H, transformtest.R1z1, "n1", tlsMode("")),
	}
	byEndpoint := []wantEP{{ip: "10.1.0.1", health: HE}, {ip: "10.1.0.2", health: HE, plain: true},
		{ip: "10.1.0.3", health: HE, plain: true}, {ip: "10.1.0.4", health: HE, plain: true}}
	istioMutual := []wantEP{{ip: "10.1.0.1", health: HE}, {ip: "10.1.0.2", health: HE, tls: "custom"},
		{ip: "10.1.0.3", health: HE, plain: true}, {ip: "10.1.0.4", health: HE, plain: true}}
	off := []wantEP{{ip: "10.1.0.1", health: HE, plain: true}, {ip: "10.1.0.2", health: HE, plain: true},
		{ip: "10.1.0.3", health: HE, plain: true}, {ip: "10.1.0.4", health: HE, plain: true}}

	tp := func(mode string) *collections.TrafficPolicy { return &collections.TrafficPolicy{TLSMode: mode} }
	rule := func(top *collections.TrafficPolicy, ports map[uint32]*collections.TrafficPolicy, subsets ...collections.Subset) *collections.ServicePolicy {
		return &collections.ServicePolicy{Service: "ns1/foo", Rules: []collections.DestinationRule{{
			Name: "dr", Namespace: "ns1", Host: "foo", Policy: top, PortPolicies: ports, Subsets: subsets,
		}}}
	}
	cases := []struct {
		name   string
		sp     *collections.ServicePolicy
		subset string
		want   []wantEP
	}{
		{name: "no rule: only tlsMode=istio endpoints carry it", want: byEndpoint},
		{name: "rule without tls: as without a rule", sp: rule(&collections.TrafficPolicy{OutlierDetection: true}, nil), want: byEndpoint},
		{name: "ISTIO_MUTUAL: every value but disabled and empty is copied", sp: rule(tp(collections.ClientTLSIstioMutual), nil), want: istioMutual},
		{name: "SIMPLE: none", sp: rule(tp(collections.ClientTLSSimple), nil), want: off},
		{name: "DISABLE: none", sp: rule(tp(collections.ClientTLSDisable), nil), want: off},
		{name: "port-level setting without tls keeps the top-level mode",
			sp: rule(tp(collections.ClientTLSSimple), map[uint32]*collections.TrafficPolicy{80: {OutlierDetection: true}}), want: off},
		{name: "port-level ISTIO_MUTUAL over top-level SIMPLE",
			sp: rule(tp(collections.ClientTLSSimple), map[uint32]*collections.TrafficPolicy{80: tp(collections.ClientTLSIstioMutual)}), want: istioMutual},
		{name: "port-level setting of another port does not apply",
			sp: rule(tp(collections.ClientTLSSimple), map[uint32]*collections.TrafficPolicy{9090: tp(collections.ClientTLSIstioMutual)}), want: off},
		{name: "subset without tls falls back to the rule's mode",
			sp: rule(tp(collections.ClientTLSIstioMutual), nil, collections.Subset{Name: "v1", Policy: &collections.TrafficPolicy{OutlierDetection: true}}), subset: "v1", want: istioMutual},
		{name: "subset mode over the rule's",
			sp: rule(tp(collections.ClientTLSIstioMutual), nil, collections.Subset{Name: "v1", Policy: tp(collections.ClientTLSSimple)}), subset: "v1", want: off},
		{name: "subset port-level mode over the subset's",
			sp: rule(tp(collections.ClientTLSSimple), nil, collections.Subset{Name: "v1", Policy: tp(collections.ClientTLSSimple),
				PortPolicies: map[uint32]*collections.TrafficPolicy{80: tp(collections.ClientTLSIstioMutual)}}), subset: "v1", want: istioMutual},
		{name: "a subset the rule does not define: the rule's mode is not consulted",
			sp: rule(tp(collections.ClientTLSSimple), nil), subset: "nosuch", want: byEndpoint},
		{name: "a subset the rule does not define, under ISTIO_MUTUAL: by endpoint",
			sp: rule(tp(collections.ClientTLSIstioMutual), nil, collections.Subset{Name: "v1"}), subset: "nosuch", want: byEndpoint},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := transforms.ClusterName(80, tc.subset, svc.Hostname)
			cp := ClusterPolicyFor(svc, tc.sp, "istio-system", policy.RuleProxy{Namespace: "ns1"}, 80, tc.subset)
			plan := PlanCLA(name, svc, httpPort, collections.AppendRefs(nil, eps), cp, collections.ProxyClass{}, nil)
			want := wantCLA(name, wantGroup{loc: transformtest.R1z1, eps: tc.want})
			if diff := cmp.Diff(want, plan.Proto(), protocmp.Transform()); diff != "" {
				t.Fatalf("CLA (-want +got):\n%s", diff)
			}
			body := plan.Encode()
			var got endpoint.ClusterLoadAssignment
			if err := proto.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, &got, protocmp.Transform()); diff != "" {
				t.Fatalf("encoded CLA (-want +got):\n%s", diff)
			}
		})
	}
}
