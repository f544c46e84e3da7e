package graphs_test

import (
	"strings"
	"testing"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
)

// TestExplainReportsWhatTheSliceTransformLeftOut: an address that is not an IP and one whose Pod
// has not arrived are explained by the rule the slice transform recorded, and a valid one is
// sent.
func TestExplainReportsWhatTheSliceTransformLeftOut(t *testing.T) {
	slice := fixtures.Slice("ns1", "foo-a", "foo", fixtures.HTTPSlice,
		fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.0.0.2", Pod: "foo-2", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "not-an-ip", Cond: fixtures.Ready})
	g := rigs.NewGraph(t, fixtures.Service("ns1", "foo", fixtures.HTTP...), fixtures.Pod("ns1", "foo-1", "foo", "10.0.0.1", ""), slice,
		fixtures.Pod("ns1", "client", "client", "10.9.0.1", ""))
	g.Connect(collections.ConnectedProxy{ConnID: "c1", ID: "sidecar~10.9.0.1~client.ns1~ns1.svc.cluster.local", Type: "sidecar",
		IP: "10.9.0.1", PodName: "client", Namespace: "ns1"})
	var p *collections.Proxy
	g.Await(t, "the proxy", func() (bool, string) {
		p = g.Proxies.GetKey("c1")
		return p != nil, ""
	})
	cluster := "outbound|80||foo.ns1.svc.cluster.local"
	g.Await(t, "the CLA", func() (bool, string) { return g.CLAs.GetKey(cluster) != nil, "" })
	ex, err := g.Explain(p, cluster, "")
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	sent := map[string]bool{}
	for _, v := range ex.Endpoints {
		reasons[v.Address], sent[v.Address] = v.Reason, v.Sent
	}
	if !sent["10.0.0.1"] {
		t.Errorf("10.0.0.1 not sent: %q", reasons["10.0.0.1"])
	}
	if r := reasons["10.0.0.2"]; !strings.Contains(r, "targetRef Pod ns1/foo-2") || !strings.Contains(r, "withheld until it appears") {
		t.Errorf("10.0.0.2: %q, want the pending Pod", r)
	}
	if r := reasons["not-an-ip"]; !strings.Contains(r, "skipped as invalid") || !strings.Contains(r, collections.ReasonInvalidAddress) {
		t.Errorf("not-an-ip: %q, want the invalid address", r)
	}
}
