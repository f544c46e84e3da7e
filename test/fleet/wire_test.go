package fleet

import (
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestDecodeCLAAgreesWithTheFullDecode holds the fleet's lean decoder to the full one: the same
// cluster name and healthy addresses for CLAs with every field krteds writes, and the health
// statuses a client skips; truncated bytes are an error, never a wrong set.
func TestDecodeCLAAgreesWithTheFullDecode(t *testing.T) {
	ep := func(ip string, h core.HealthStatus) *endpoint.LbEndpoint {
		md, _ := structpb.NewStruct(map[string]any{"workload": "w;ns;svc;;", "labels": map[string]any{"app": "a"}})
		return &endpoint.LbEndpoint{
			HealthStatus:        h,
			LoadBalancingWeight: wrapperspb.UInt32(1),
			Metadata:            &core.Metadata{FilterMetadata: map[string]*structpb.Struct{"istio": md}},
			HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
				Hostname: "h",
				Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
					Address: ip, PortSpecifier: &core.SocketAddress_PortValue{PortValue: 8080}}}}}},
		}
	}
	cases := map[string]*endpoint.ClusterLoadAssignment{
		"empty": {ClusterName: "outbound|80||a.bench.svc.cluster.local"},
		"localities and health": {ClusterName: "outbound|80||b.bench.svc.cluster.local", Endpoints: []*endpoint.LocalityLbEndpoints{
			{Locality: &core.Locality{Region: "r", Zone: "z"}, Priority: 1, LoadBalancingWeight: wrapperspb.UInt32(3),
				LbEndpoints: []*endpoint.LbEndpoint{ep("10.0.0.3", core.HealthStatus_HEALTHY), ep("10.0.0.1", core.HealthStatus_UNHEALTHY), ep("10.0.0.2", core.HealthStatus_UNKNOWN)}},
			{LbEndpoints: []*endpoint.LbEndpoint{ep("10.0.0.2", core.HealthStatus_HEALTHY), ep("10.0.0.9", core.HealthStatus_DRAINING), ep("fd00::1", core.HealthStatus_HEALTHY), ep("10.0.1.1", core.HealthStatus_HEALTHY)}},
		}},
		"policy": {ClusterName: "c", Policy: &endpoint.ClusterLoadAssignment_Policy{OverprovisioningFactor: wrapperspb.UInt32(140)},
			Endpoints: []*endpoint.LocalityLbEndpoints{{LbEndpoints: []*endpoint.LbEndpoint{ep("192.168.0.1", core.HealthStatus_HEALTHY)}}}},
	}
	for name, cla := range cases {
		t.Run(name, func(t *testing.T) {
			b, err := proto.Marshal(cla)
			if err != nil {
				t.Fatal(err)
			}
			gotName, got, err := DecodeCLA(b)
			if err != nil {
				t.Fatal(err)
			}
			if n := CLAName(b); n != gotName {
				t.Fatalf("CLAName = %q, DecodeCLA's name %q", n, gotName)
			}
			full := &endpoint.ClusterLoadAssignment{}
			if err := proto.Unmarshal(b, full); err != nil {
				t.Fatal(err)
			}
			if want := HealthyOf(full); gotName != full.ClusterName || !slices.Equal(got, want) {
				t.Fatalf("decodeCLA = %q %v, the full decode %q %v", gotName, got, full.ClusterName, want)
			}
			for n := 1; n < len(b); n++ {
				if _, set, err := DecodeCLA(b[:n]); err == nil && n < len(b) {
					// A cut at a field boundary reads as a shorter message: fine if it names no
					// endpoint the whole does not.
					for _, a := range set {
						if _, ok := slices.BinarySearch(got, a); !ok {
							t.Fatalf("cut at %d: decodeCLA invented %s", n, IPString(a))
						}
					}
				}
			}
		})
	}
}
