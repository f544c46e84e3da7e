package eds

import (
	"fmt"
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/krteds/krteds/collections"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"

	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/policy"
	"github.com/krteds/krteds/transforms/transformtest"
)

// TestPeerAuthnTLSMetadata holds the whole CLA to istiod's mtlsChecker.checkMtlsEnabled
// (pilot/pkg/xds/endpoints/mtls_checker.go) with PeerAuthentications: a DestinationRule's TLS
// mode for the cluster (subset, port-level, top-level: tlsModeForDestinationRule) decides alone,
// ISTIO_MUTUAL on and anything else off; without one, an endpoint with tlsMode istio keeps its
// metadata unless NewMtlsPolicy(...).GetMutualTLSModeForPort(ep.EndpointPort) is DISABLE; an
// endpoint without tlsMode istio never has it.
func TestPeerAuthnTLSMetadata(t *testing.T) {
	httpPort := collections.ServicePort{Name: "http", Port: 80, Protocol: "TCP"}
	svc := &collections.ServiceInfo{Name: "foo", Namespace: "ns1", Hostname: "foo.ns1.svc.cluster.local", Ports: []collections.ServicePort{httpPort}}
	H, HE := collections.Healthy, core.HealthStatus_HEALTHY
	labels := func(l map[string]string) func(*collections.EndpointMeta) {
		return func(m *collections.EndpointMeta) { m.PodLabels = collections.InternLabels(l) }
	}
	// v1 and v2 workloads with sidecars, and a v3 one without.
	eps := []collections.Endpoint{
		transformtest.Ep("10.1.0.1", H, transformtest.R1z1, "n1", labels(map[string]string{"app": "foo", "version": "v1"})),
		transformtest.Ep("10.1.0.2", H, transformtest.R1z1, "n1", labels(map[string]string{"app": "foo", "version": "v2"})),
		transformtest.Ep("10.1.0.3", H, transformtest.R1z1, "n1", labels(map[string]string{"app": "foo", "version": "v3"}), func(m *collections.EndpointMeta) { m.TLSMode = "disabled" }),
	}
	mtls := func(v1, v2 bool) []wantEP {
		return []wantEP{{ip: "10.1.0.1", health: HE, plain: !v1}, {ip: "10.1.0.2", health: HE, plain: !v2}, {ip: "10.1.0.3", health: HE, plain: true}}
	}
	tp := func(mode string) *collections.TrafficPolicy { return &collections.TrafficPolicy{TLSMode: mode} }
	rule := func(top *collections.TrafficPolicy, ports map[uint32]*collections.TrafficPolicy, subsets ...collections.Subset) *collections.ServicePolicy {
		return &collections.ServicePolicy{Service: "ns1/foo", Rules: []collections.DestinationRule{{
			Name: "dr", Namespace: "ns1", Host: "foo", Policy: top, PortPolicies: ports, Subsets: subsets,
		}}}
	}
	meshDisable := []collections.PeerAuthentication{transformtest.Peer("istio-system", "default", 1, nil, transformtest.Disable, nil)}
	v1Disable := []collections.PeerAuthentication{transformtest.Peer("ns1", "v1", 1, map[string]string{"version": "v1"}, transformtest.Disable, nil)}
	v1PortDisable := []collections.PeerAuthentication{transformtest.Peer("ns1", "v1", 1, map[string]string{"version": "v1"}, transformtest.Strict, map[uint32]collections.MTLSMode{8080: transformtest.Disable})}
	v1ServicePortDisable := []collections.PeerAuthentication{transformtest.Peer("ns1", "v1", 1, map[string]string{"version": "v1"}, transformtest.Strict, map[uint32]collections.MTLSMode{80: transformtest.Disable})}
	cases := []struct {
		name     string
		policies []collections.PeerAuthentication
		sp       *collections.ServicePolicy
		subset   string
		want     []wantEP
	}{
		{name: "no policy: tlsMode istio endpoints carry it", want: mtls(true, true)},
		{name: "mesh-wide DISABLE: none", policies: meshDisable, want: mtls(false, false)},
		{name: "mesh-wide DISABLE, namespace STRICT: back on", want: mtls(true, true),
			policies: append(slices.Clone(meshDisable), transformtest.Peer("ns1", "default", 1, nil, transformtest.Strict, nil))},
		{name: "mesh-wide DISABLE, v2 selected PERMISSIVE: v2 only", want: mtls(false, true),
			policies: append(slices.Clone(meshDisable), transformtest.Peer("ns1", "v2", 1, map[string]string{"version": "v2"}, transformtest.Permissive, nil))},
		{name: "workload DISABLE: that workload only", policies: v1Disable, want: mtls(false, true)},
		{name: "portLevelMtls DISABLE of the target port", policies: v1PortDisable, want: mtls(false, true)},
		{name: "portLevelMtls of the service port is not the target port", policies: v1ServicePortDisable, want: mtls(true, true)},
		{name: "a DISABLE of another namespace does not apply", want: mtls(true, true),
			policies: []collections.PeerAuthentication{transformtest.Peer("ns2", "default", 1, nil, transformtest.Disable, nil)}},
		{name: "rule ISTIO_MUTUAL overrides a DISABLE", policies: meshDisable, sp: rule(tp(collections.ClientTLSIstioMutual), nil), want: mtls(true, true)},
		{name: "rule DISABLE over a STRICT", sp: rule(tp(collections.ClientTLSDisable), nil), want: mtls(false, false),
			policies: []collections.PeerAuthentication{transformtest.Peer("ns1", "default", 1, nil, transformtest.Strict, nil)}},
		{name: "rule SIMPLE: none", policies: v1Disable, sp: rule(tp(collections.ClientTLSSimple), nil), want: mtls(false, false)},
		{name: "rule without tls: the policies decide", policies: v1Disable, sp: rule(&collections.TrafficPolicy{OutlierDetection: true}, nil), want: mtls(false, true)},
		{name: "rule port-level ISTIO_MUTUAL for the service port overrides", policies: meshDisable,
			sp: rule(&collections.TrafficPolicy{}, map[uint32]*collections.TrafficPolicy{80: tp(collections.ClientTLSIstioMutual)}), want: mtls(true, true)},
		{name: "rule subset ISTIO_MUTUAL overrides", policies: meshDisable, subset: "all",
			sp: rule(nil, nil, collections.Subset{Name: "all", Policy: tp(collections.ClientTLSIstioMutual)}), want: mtls(true, true)},
		{name: "rule subset without tls: the rule's top-level mode", policies: meshDisable, subset: "all",
			sp: rule(tp(collections.ClientTLSIstioMutual), nil, collections.Subset{Name: "all"}), want: mtls(true, true)},
		{name: "rule subset without any tls: the policies decide", policies: v1Disable, subset: "all",
			sp: rule(nil, nil, collections.Subset{Name: "all"}), want: mtls(false, true)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := transforms.ClusterName(80, tc.subset, svc.Hostname)
			cp := ClusterPolicyFor(svc, tc.sp, "istio-system", policy.RuleProxy{Namespace: "ns1"}, 80, tc.subset)
			if tc.policies != nil {
				cp.Peer = policy.NewPeerAuthn("istio-system", tc.policies)
			}
			plan := PlanCLA(name, svc, httpPort, collections.AppendRefs(nil, eps), cp, collections.ProxyClass{}, nil)
			want := wantCLA(name, wantGroup{loc: transformtest.R1z1, eps: tc.want})
			if diff := cmp.Diff(want, plan.Proto(), protocmp.Transform()); diff != "" {
				t.Fatalf("CLA (-want +got):\n%s", diff)
			}
			var got endpoint.ClusterLoadAssignment
			if err := proto.Unmarshal(plan.Encode(), &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, &got, protocmp.Transform()); diff != "" {
				t.Fatalf("encoded CLA (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPeerAuthnSplitHorizon: istiod's EndpointsByNetworkFilter sends an endpoint of another
// network through its gateways only when its built LbEndpoint has tlsMode istio (isMtlsEnabled,
// after mtlsChecker), so one a PeerAuthentication disables stays out; the gateway's own endpoint
// always carries tlsMode istio, whatever the mesh-wide policy.
func TestPeerAuthnSplitHorizon(t *testing.T) {
	gwsIn := krt.NewStaticCollection(nil, []collections.ClusterGateways{{Source: "cluster/c2", Gateways: []collections.NetworkGateway{
		{Network: "net2", Cluster: "c2", Addr: "2.2.2.2", Port: 15443}}}}, krt.WithStop(test.NewStop(t)))
	index, _ := GatewayIndex(gwsIn)
	gws := index(krt.TestingDummyContext{})
	remote := func(ip, version string) collections.Endpoint {
		return transformtest.Ep(ip, collections.Healthy, transformtest.R1z1, "n2", func(m *collections.EndpointMeta) {
			m.Network, m.ClusterID = "net2", "c2"
			m.PodLabels = collections.InternLabels(map[string]string{"app": "foo", "version": version})
		})
	}
	eps := []collections.Endpoint{remote("10.2.0.1", "v1"), remote("10.2.0.2", "v2")}
	svc := &collections.ServiceInfo{Name: "foo", Namespace: "ns1", Hostname: "foo.ns1.svc.cluster.local"}
	port := collections.ServicePort{Name: "http", Port: 80}
	for _, tc := range []struct {
		name     string
		policies []collections.PeerAuthentication
		want     []string
	}{
		{name: "no policy: both through the gateway", want: []string{"2.2.2.2:15443/2/istio"}},
		{name: "v1 disabled: only v2 through the gateway", want: []string{"2.2.2.2:15443/1/istio"},
			policies: []collections.PeerAuthentication{transformtest.Peer("ns1", "v1", 1, map[string]string{"version": "v1"}, transformtest.Disable, nil)}},
		{name: "mesh-wide DISABLE, v2 STRICT: the gateway still carries tlsMode istio", want: []string{"2.2.2.2:15443/1/istio"},
			policies: []collections.PeerAuthentication{transformtest.Peer("istio-system", "default", 1, nil, transformtest.Disable, nil),
				transformtest.Peer("ns1", "v2", 1, map[string]string{"version": "v2"}, transformtest.Strict, nil)}},
		{name: "mesh-wide DISABLE: no gateway", want: nil,
			policies: []collections.PeerAuthentication{transformtest.Peer("istio-system", "default", 1, nil, transformtest.Disable, nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := ClusterPolicyFor(svc, nil, "istio-system", policy.RuleProxy{Namespace: "ns1"}, 80, "")
			cp.Peer = policy.NewPeerAuthn("istio-system", tc.policies)
			(&SplitHorizon{gateways: gws, Crosses: true}).Apply(&cp)
			class := Project(svc, cp, collections.ProxyClass{Network: "net1", ClusterID: "c1"})
			plan := PlanCLA(transforms.ClusterName(80, "", svc.Hostname), svc, port, collections.AppendRefs(nil, eps), cp, class, nil)
			var got []string
			for _, l := range plan.Proto().Endpoints {
				for _, e := range l.LbEndpoints {
					sa := e.GetEndpoint().GetAddress().GetSocketAddress()
					got = append(got, fmt.Sprintf("%s:%d/%d/%s", sa.GetAddress(), sa.GetPortValue(), e.GetLoadBalancingWeight().GetValue(),
						e.GetMetadata().GetFilterMetadata()["envoy.transport_socket_match"].GetFields()["tlsMode"].GetStringValue()))
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
