package eds

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms/registry"
)

// TestSplitHorizon holds the split-horizon CLA to istiod's EndpointsByNetworkFilter
// (pilot/pkg/xds/endpoints/ep_filters.go) and NetworkGateways.update (pilot/pkg/model/network.go):
// every weight scaled by the LCM of the gateway list sizes; endpoints of the proxy's network, of
// a network without gateways, or without a network, sent directly; others dropped unless mTLS,
// their weight split (integer division) among their network's gateways of their cluster (else
// of the network), one endpoint per gateway in address order with the summed weight, tlsMode
// istio, the workload ";;;;<gateway cluster>" and no health status.
func TestSplitHorizon(t *testing.T) {
	gwsIn := krt.NewStaticCollection(nil, []collections.ClusterGateways{{Source: "cluster/c2", Gateways: []collections.NetworkGateway{
		{Network: "net2", Cluster: "c2", Addr: "2.2.2.3", Port: 15443},
		{Network: "net2", Cluster: "c2", Addr: "2.2.2.2", Port: 15443},
	}}, {Source: "meshNetworks", Gateways: []collections.NetworkGateway{{Network: "net3", Addr: "3.3.3.3", Port: 15443}}}}, krt.WithStop(test.NewStop(t)))
	index, _ := GatewayIndex(gwsIn)
	gws := index(krt.TestingDummyContext{})
	if gws.ScaleFactor != 2 {
		t.Fatalf("scale factor %d, want lcm(2, 1, 2, 1) = 2", gws.ScaleFactor)
	}
	ep := func(ip, network, cluster, tls string, weight uint32) collections.Endpoint {
		return collections.Endpoint{Address: ip, Port: 8080, PortName: "http", Health: collections.Healthy,
			Meta: collections.NewEndpointMeta(collections.WorkloadMeta{TLSMode: tls, Weight: weight, WorkloadName: "w", Namespace: "ns1"}, collections.TopologyMeta{Network: network, ClusterID: cluster}, "", "")}
	}
	eps := []collections.Endpoint{
		ep("10.0.0.1", "net1", "c1", "istio", 0),
		ep("10.0.0.2", "net2", "c2", "istio", 0),
		ep("10.0.0.3", "net2", "c2", "istio", 3),
		ep("10.0.0.4", "net2", "c2", "disabled", 0), // no mTLS: not across networks
		ep("10.0.0.5", "net4", "c4", "istio", 0),    // no gateway for net4: direct
		ep("10.0.0.6", "", "c1", "istio", 0),        // no network: direct
		ep("10.0.0.7", "net3", "c3", "istio", 0),    // net3's gateway has no cluster: the network's
	}
	svc := &collections.ServiceInfo{Name: "foo", Namespace: "ns1", Hostname: "foo.ns1.svc.cluster.local"}
	port := collections.ServicePort{Name: "http", Port: 80}
	for _, tc := range []struct {
		network string
		want    []string // address:port/weight/workload; then the locality weight
	}{
		{"net1", []string{"10.0.0.1:8080/2/w;ns1;;;c1", "10.0.0.5:8080/2/w;ns1;;;c4", "10.0.0.6:8080/2/w;ns1;;;c1",
			"2.2.2.2:15443/4/;;;;c2", "2.2.2.3:15443/4/;;;;c2", "3.3.3.3:15443/2/;;;;", "locality 16"}},
		// The proxy's own network's endpoints direct, mTLS or not.
		{"net2", []string{"10.0.0.1:8080/2/w;ns1;;;c1", "10.0.0.2:8080/2/w;ns1;;;c2", "10.0.0.3:8080/6/w;ns1;;;c2", "10.0.0.4:8080/2/w;ns1;;;c2",
			"10.0.0.5:8080/2/w;ns1;;;c4", "10.0.0.6:8080/2/w;ns1;;;c1", "3.3.3.3:15443/2/;;;;", "locality 18"}},
		// A proxy without a network goes through the gateways of every network that has some.
		{"", []string{"10.0.0.1:8080/2/w;ns1;;;c1", "10.0.0.5:8080/2/w;ns1;;;c4", "10.0.0.6:8080/2/w;ns1;;;c1",
			"2.2.2.2:15443/4/;;;;c2", "2.2.2.3:15443/4/;;;;c2", "3.3.3.3:15443/2/;;;;", "locality 16"}},
	} {
		policy := PolicyFor(svc)
		policy.Networks = &NetworkFilter{Gateways: gws, Crosses: CrossesNetworks(gws, collections.AppendRefs(nil, eps))}
		class := project(svc, policy, collections.ProxyClass{Network: tc.network, ClusterID: "c1"})
		if class.Network != tc.network {
			t.Fatalf("the projection drops the proxy's network: %+v", class)
		}
		cla := planCLA("outbound|80||foo.ns1.svc.cluster.local", svc, port, collections.AppendRefs(nil, eps), policy, class, nil).Proto()
		var got []string
		for _, l := range cla.Endpoints {
			for _, e := range l.LbEndpoints {
				sa := e.GetEndpoint().GetAddress().GetSocketAddress()
				md := e.GetMetadata().GetFilterMetadata()
				// istiod's gateway endpoint has no HealthStatus (UNKNOWN); the others keep theirs.
				if gateway := sa.GetPortValue() == 15443; (gateway && e.HealthStatus != core.HealthStatus_UNKNOWN) || (!gateway && e.HealthStatus != core.HealthStatus_HEALTHY) {
					t.Errorf("network %q: %s is %s", tc.network, sa.GetAddress(), e.HealthStatus)
				}
				if md["envoy.transport_socket_match"].GetFields()["tlsMode"].GetStringValue() != "istio" && sa.GetAddress() != "10.0.0.4" {
					t.Errorf("network %q: %s has no tlsMode istio", tc.network, sa.GetAddress())
				}
				got = append(got, fmt.Sprintf("%s:%d/%d/%s", sa.GetAddress(), sa.GetPortValue(), e.GetLoadBalancingWeight().GetValue(),
					md["istio"].GetFields()["workload"].GetStringValue()))
			}
			got = append(got, fmt.Sprintf("locality %d", l.GetLoadBalancingWeight().GetValue()))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("proxy network %q:\n got  %v\n want %v", tc.network, got, tc.want)
		}
	}
}

func TestMeshNetworkSettings(t *testing.T) {
	mn, err := mesh.ParseMeshNetworks(`
networks:
  net1:
    endpoints: [{fromRegistry: Kubernetes}]
    gateways: [{address: 198.51.100.1, port: 15443}]
  net2:
    endpoints: [{fromRegistry: east}, {fromCidr: 10.1.0.0/16}]
    gateways: [{registryServiceName: eastwestgateway.istio-system.svc.cluster.local, port: 15443}, {address: 198.51.100.2, port: 15443}]
`)
	if err != nil {
		t.Fatal(err)
	}
	fromRegistry, gws := MeshNetworkSettings(mn)
	if !maps.Equal(fromRegistry, map[string]string{"Kubernetes": "net1", "east": "net2"}) {
		t.Fatalf("fromRegistry: %v", fromRegistry)
	}
	want := []collections.NetworkGateway{{Network: "net1", Addr: "198.51.100.1", Port: 15443}, {Network: "net2", Addr: "198.51.100.2", Port: 15443}}
	if !slices.Equal(gws, want) {
		t.Fatalf("gateways %v, want %v", gws, want)
	}
	// fromRegistry is the cluster's default network, over the system namespace's label.
	cfg := collections.DefaultConfig()
	cfg.RegistryNetworks = fromRegistry
	network, _ := registry.SystemNetwork(cfg, nil)
	if n := network(krt.TestingDummyContext{}); *n != "net1" {
		t.Fatalf("default network %q", *n)
	}
}
