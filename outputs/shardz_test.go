package outputs

import (
	"slices"
	"testing"

	"github.com/krteds/krteds/collections"
)

// TestEndpointShardzOneShardPerCluster: a service's endpoints from two clusters are two shards,
// keyed as istiod keys them; a ServiceEntry host's are External.
func TestEndpointShardzOneShardPerCluster(t *testing.T) {
	ep := func(ip, cluster string) *collections.Endpoint {
		return &collections.Endpoint{Address: ip, Port: 80, PortName: "http", Health: collections.Healthy,
			Meta: collections.NewEndpointMeta(collections.WorkloadMeta{Namespace: "ns1"}, collections.TopologyMeta{ClusterID: cluster}, "", "")}
	}
	got := EndpointShardz([]collections.ServiceEndpoints{
		{Hostname: "foo.ns1.svc.cluster.local", Namespace: "ns1", Name: "foo", Endpoints: []*collections.Endpoint{
			ep("10.0.0.1", "Kubernetes"), ep("10.0.0.1", "east"), ep("10.0.0.2", "east")}},
		{Hostname: "api.example.com", Namespace: "ns1", Name: "api.example.com", Registry: collections.RegistryServiceEntry,
			Endpoints: []*collections.Endpoint{ep("10.9.0.1", "Kubernetes")}},
	})
	foo := got["foo.ns1.svc.cluster.local"]["ns1"].Shards
	if len(foo) != 2 || len(foo["Kubernetes/Kubernetes"]) != 1 || len(foo["Kubernetes/east"]) != 2 {
		t.Fatalf("foo's shards: %v", foo)
	}
	var keys []string
	for k := range got["api.example.com"]["ns1"].Shards {
		keys = append(keys, k)
	}
	if !slices.Equal(keys, []string{"External/Kubernetes"}) {
		t.Fatalf("api.example.com's shards: %v", keys)
	}
}
