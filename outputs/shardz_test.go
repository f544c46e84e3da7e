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

// TestShardsOfAHostInSeveralNamespaces: ServiceEntries of two namespaces defining one host are
// two services, as istiod's /debug/endpointShardz (hostname → namespace) and /debug/registryz
// (one entry per service, here ordered by hostname, then namespace) list them.
func TestShardsOfAHostInSeveralNamespaces(t *testing.T) {
	ep := func(ip, ns string) *collections.Endpoint {
		return &collections.Endpoint{Address: ip, Port: 80, PortName: "http",
			Meta: collections.NewEndpointMeta(collections.WorkloadMeta{Namespace: ns}, collections.TopologyMeta{ClusterID: "Kubernetes"}, "", "")}
	}
	shards := EndpointShardz([]collections.ServiceEndpoints{
		{Hostname: "api.example.com", Namespace: "b", Name: "api.example.com", Registry: collections.RegistryServiceEntry, Endpoints: []*collections.Endpoint{ep("10.2.0.1", "b")}},
		{Hostname: "api.example.com", Namespace: "a", Name: "api.example.com", Registry: collections.RegistryServiceEntry, Endpoints: []*collections.Endpoint{ep("10.1.0.1", "a")}},
	})
	for ns, ip := range map[string]string{"a": "10.1.0.1", "b": "10.2.0.1"} {
		if eps := shards["api.example.com"][ns].Shards["External/Kubernetes"]; len(eps) != 1 || eps[0].Addresses[0] != ip || eps[0].HealthStatus != 0 {
			t.Errorf("%s's shard: %+v", ns, eps)
		}
	}
	svc := func(host, ns string) *collections.ServiceInfo {
		return &collections.ServiceInfo{Name: host, Namespace: ns, Hostname: host, Registry: collections.RegistryServiceEntry, SharedHost: true}
	}
	var got []string
	for _, s := range Registryz([]*collections.ServiceInfo{svc("b.example.com", "a"), svc("api.example.com", "b"), svc("api.example.com", "a")}, "Kubernetes") {
		got = append(got, s.Attributes.Namespace+"/"+s.Hostname)
	}
	if want := []string{"a/api.example.com", "b/api.example.com", "a/b.example.com"}; !slices.Equal(got, want) {
		t.Errorf("registryz order %v, want %v", got, want)
	}
}
