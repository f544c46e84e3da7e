package eds

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms/policy"
	"github.com/krteds/krteds/transforms/registry"
	"github.com/krteds/krteds/transforms/transformtest"
)

// TestEncodeEqualsProtoMarshal requires the hand encoder to produce exactly the bytes of the
// deterministic proto marshaller, for plans with every feature the encoder writes.
func TestEncodeEqualsProtoMarshal(t *testing.T) {
	port := collections.ServicePort{Name: "http", Port: 80}
	zone := &collections.ServiceInfo{Name: "foo", Namespace: "ns1", TrafficDistribution: collections.TrafficDistributionPreferSameZone, PersistentSession: true}
	plain := &collections.ServiceInfo{Name: "foo", Namespace: "ns1"}
	eps := syntheticEndpoints(300)
	eps[1].Health = collections.UnHealthy
	eps[2].Health = collections.Draining
	eps[12].Health = collections.Unknown // a WorkloadEntry's: no health_status on the wire
	eps[3].Meta = registry.RegistryOnlyMeta(collections.DefaultConfig(), "")
	eps[4].Address = "fd00::4"
	eps[5].Meta = collections.NewEndpointMeta(collections.WorkloadMeta{TLSMode: "disabled"}, collections.TopologyMeta{Locality: collections.Locality{Region: "r9", Subzone: "s"}}, "", "")
	eps[6].Meta = collections.NewEndpointMeta(collections.WorkloadMeta{TLSMode: "custom"}, collections.TopologyMeta{Locality: collections.Locality{Region: "r9", Subzone: "s"}}, "", "")
	eps[7].Meta = collections.NewEndpointMeta(collections.WorkloadMeta{TLSMode: ""}, collections.TopologyMeta{Locality: collections.Locality{Region: "r9", Subzone: "s"}}, "", "")
	eps[8].Meta = collections.NewEndpointMeta(collections.WorkloadMeta{TLSMode: "other-value"}, collections.TopologyMeta{Locality: collections.Locality{Region: "r9", Subzone: "s"}}, "", "")
	eps[9].Meta = eps[9].Meta.Edit(func(m *collections.EndpointMeta) { m.Weight = 300 }) // a two-byte varint
	eps[10].Port = 0                                                                     // a DNS ServiceEntry's endpoint
	eps[11].Meta = eps[11].Meta.Edit(func(m *collections.EndpointMeta) { m.ClusterID = "other" })
	for i := 13; i < 40; i++ { // more workloads than the encoder scans before it keeps a map
		eps[i].Meta = eps[i].Meta.Edit(func(m *collections.EndpointMeta) { m.WorkloadName = fmt.Sprintf("w%d", i) })
	}
	// Pods, some with the annotation a hash key names: a key of 200 bytes (a two-byte length).
	for i := 0; i < len(eps); i += 2 {
		eps[i].Pod = fmt.Sprintf("ns1/foo-%d", i)
	}
	for i := 0; i < len(eps); i += 3 {
		eps[i].Meta = eps[i].Meta.Edit(func(m *collections.EndpointMeta) {
			m.Annotations = collections.InternLabels(map[string]string{"ring": strings.Repeat("k", i%5*50) + strconv.Itoa(i)})
		})
	}
	class := collections.ProxyClass{Locality: transformtest.R1z1, NodeName: "node-0"}
	// A PeerAuthentication disabling mTLS for the workloads on node-1: a third of the endpoints.
	node1 := policy.NewPeerAuthn("istio-system", []collections.PeerAuthentication{
		transformtest.Peer("ns1", "node-1", 1, map[string]string{collections.LabelHostname: "node-1"}, transformtest.Disable, nil)})
	for name, svc := range map[string]*collections.ServiceInfo{"plain": plain, "failover": zone} {
		for _, tls := range []policy.EndpointTLS{{Mode: policy.TLSByEndpoint}, {Mode: policy.TLSIstioMutual}, {Mode: policy.TLSOff}, {Mode: policy.TLSByEndpoint, Peer: node1}} {
			for _, n := range []int{0, 1, len(eps)} {
				plan := planCLA(fooName, svc, port, collections.AppendRefs(nil, eps[:n]), PolicyFor(svc), project(svc, PolicyFor(svc), class), nil)
				plan.TLS = tls
				for _, hashKey := range []string{"", collections.HashKeyPodName, "ring"} {
					plan.HashKey = hashKey
					want, err := proto.MarshalOptions{Deterministic: true}.Marshal(plan.Proto())
					if err != nil {
						t.Fatal(err)
					}
					got := plan.Encode()
					if !bytes.Equal(got, want) {
						var g endpoint.ClusterLoadAssignment
						err := proto.Unmarshal(got, &g)
						t.Fatalf("%s/tls=%+v/hash key %q/%d: encoded bytes differ from proto.Marshal (%d vs %d bytes; decodes: %v, equal: %v)",
							name, tls, hashKey, n, len(got), len(want), err, proto.Equal(&g, plan.Proto()))
					}
				}
			}
		}
	}
}

// TestUnknownHealthIsNotWritten: an endpoint of unknown health (istiod's zero HealthStatus, a
// ServiceEntry's or WorkloadEntry's) has no health_status on the wire, so it decodes as UNKNOWN,
// as istiod's buildEnvoyLbEndpoint writes core.HealthStatus(0); a HEALTHY one carries it.
func TestUnknownHealthIsNotWritten(t *testing.T) {
	port := collections.ServicePort{Name: "http", Port: 80}
	svc := &collections.ServiceInfo{Name: "foo", Namespace: "ns1"}
	eps := syntheticEndpoints(2)
	eps[0].Health = collections.Unknown
	plan := planCLA(fooName, svc, port, collections.AppendRefs(nil, eps), PolicyFor(svc), collections.ProxyClass{}, nil)
	body := plan.Encode()
	var cla endpoint.ClusterLoadAssignment
	if err := proto.Unmarshal(body, &cla); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range cla.Endpoints {
		for _, e := range l.LbEndpoints {
			got[e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()] = e.HealthStatus.String()
		}
	}
	if got[eps[0].Address] != "UNKNOWN" || got[eps[1].Address] != "HEALTHY" || len(got) != 2 {
		t.Errorf("health on the wire: %v", got)
	}
	// Not written at all: one byte pair (tag, value) shorter than the same endpoint HEALTHY.
	eps[0].Health = collections.Healthy
	healthy := planCLA(fooName, svc, port, collections.AppendRefs(nil, eps), PolicyFor(svc), collections.ProxyClass{}, nil).Encode()
	if len(healthy)-len(body) != 2 {
		t.Errorf("an UNKNOWN endpoint is %d bytes shorter than a HEALTHY one, want 2 (the absent field)", len(healthy)-len(body))
	}
}
