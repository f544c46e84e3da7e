package serving

import (
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/adsclient"
)

// drRingHashHere applies to proxies in ns1 only.
const drRingHashHere = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: foo, namespace: ns1}
spec:
  host: foo
  exportTo: ["."]
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 5, minHealthPercent: 30}
    loadBalancer:
      consistentHash: {useSourceIp: true, ringHash: {minimumRingSize: 2048}}
`

func onlyCluster(t *testing.T, resp *discovery.DiscoveryResponse, name string) *cluster.Cluster {
	t.Helper()
	c := findCluster(t, resp, name)
	if c == nil {
		t.Fatalf("no cluster %s in %d clusters", name, len(resp.Resources))
	}
	return c
}

// findCluster is the cluster of a name in a response (checked valid), nil if it has none.
func findCluster(t *testing.T, resp *discovery.DiscoveryResponse, name string) *cluster.Cluster {
	t.Helper()
	cls, err := adsclient.Decode(resp, func() *cluster.Cluster { return &cluster.Cluster{} })
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cls {
		if c.Name == name {
			if err := c.ValidateAll(); err != nil {
				t.Errorf("%s: %v", name, err)
			}
			return c
		}
	}
	return nil
}

// TestClustersFollowTheRuleOfTheProxysNamespace: the rule that applies, and so the cluster,
// depends on the proxy's namespace and kind; a rule change pushes only to the proxies whose
// cluster changes.
func TestClustersFollowTheRuleOfTheProxysNamespace(t *testing.T) {
	r := newRig(t, append(mesh(), decode(t, drRingHashHere)...)...)
	inside := r.Open(sidecar("10.9.0.1", "ns1"))
	outside := r.Open(sidecar("10.9.0.2", "ns2"))
	grpcNode := sidecar("10.9.0.3", "ns1")
	grpcNode.Generator = collections.GeneratorGRPC
	grpcClient := r.Open(grpcNode)

	check := func(resp *discovery.DiscoveryResponse, what string, lb cluster.Cluster_LbPolicy, outlier bool, panic float64) {
		t.Helper()
		c := onlyCluster(t, resp, fooCluster)
		if c.LbPolicy != lb || (c.OutlierDetection != nil) != outlier || c.GetCommonLbConfig().GetHealthyPanicThreshold().GetValue() != panic {
			t.Errorf("%s: lb %v, outlier detection %v, panic threshold %v; want %v, %v, %v", what, c.LbPolicy, c.OutlierDetection != nil,
				c.GetCommonLbConfig().GetHealthyPanicThreshold().GetValue(), lb, outlier, panic)
		}
	}
	_ = inside.Request(adsclient.TypeCluster)
	resp := recv(t, inside)
	check(resp, "Envoy in ns1", cluster.Cluster_RING_HASH, true, 30)
	_ = inside.Ack(resp)
	_ = outside.Request(adsclient.TypeCluster)
	resp = recv(t, outside)
	check(resp, "Envoy in ns2", cluster.Cluster_LEAST_REQUEST, false, 0)
	_ = outside.Ack(resp)
	_ = grpcClient.Request(adsclient.TypeCluster, fooCluster)
	resp = recv(t, grpcClient)
	check(resp, "gRPC in ns1", cluster.Cluster_RING_HASH, false, 0)
	_ = grpcClient.Ack(resp, fooCluster)

	// The rule now says RANDOM: ns1's Envoy gets it; nothing changes for ns2, nor for gRPC
	// (which keeps round robin for RANDOM, as istiod's grpcgen).
	r.In.Apply(decode(t, strings.Replace(drRingHashHere, "consistentHash: {useSourceIp: true, ringHash: {minimumRingSize: 2048}}", "simple: RANDOM", 1))[0], false)
	resp = recv(t, inside)
	check(resp, "Envoy in ns1 after the change", cluster.Cluster_RANDOM, true, 30)
	_ = inside.Ack(resp)
	resp = recv(t, grpcClient)
	check(resp, "gRPC in ns1 after the change", cluster.Cluster_ROUND_ROBIN, false, 0)
	_ = grpcClient.Ack(resp, fooCluster)
	expectNone(t, outside)
}
