package serving

import (
	"slices"
	"strings"
	"testing"

	status "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"

	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/outputs/xds/xdsdebug"
)

// TestDebugSynczOverXDS: istioctl proxy-status --xds-address asks for istio.io/debug/syncz over
// ADS; a client on loopback gets one ClientConfig per connected proxy (not itself), with the
// sync state of each type as istiod's debugSyncStatus gives it.
func TestDebugSynczOverXDS(t *testing.T) {
	r := newRig(t, mesh()...)
	node := sidecar("10.9.0.1", "ns1")
	node.IstioVersion = "1.31.0"
	p := r.Open(node)
	_ = p.Request(adsclient.TypeCLA, fooCluster)
	first := recv(t, p)
	_ = p.Ack(first, fooCluster)
	// A second request after the ACK: answered, it proves the ACK was applied.
	_ = p.Request(adsclient.TypeCluster)
	_ = recv(t, p)

	q := r.Open(adsclient.Node{ID: "sidecar~127.0.0.1~istioctl.ns1~ns1.svc.cluster.local", Namespace: "ns1"})
	if err := q.Request(xdsdebug.TypeDebugSyncz); err != nil {
		t.Fatal(err)
	}
	resp := recv(t, q)
	if resp.TypeUrl != xdsdebug.TypeDebugSyncz || len(resp.Resources) != 1 {
		t.Fatalf("syncz: type %s, %d resources", resp.TypeUrl, len(resp.Resources))
	}
	cc := &status.ClientConfig{}
	if err := resp.Resources[0].UnmarshalTo(cc); err != nil {
		t.Fatal(err)
	}
	// istiod's proxy ID: <pod>.<namespace>, the node id's third field.
	if want := strings.Split(sidecar("10.9.0.1", "ns1").ID, "~")[2]; cc.GetNode().GetId() != want {
		t.Fatalf("node %s", cc.GetNode().GetId())
	}
	if v := cc.GetNode().GetMetadata().GetFields()["ISTIO_VERSION"].GetStringValue(); v != "1.31.0" {
		t.Errorf("ISTIO_VERSION %q, want the proxy's 1.31.0 (istioctl's VERSION column)", v)
	}
	got := map[string]status.ConfigStatus{}
	for _, g := range cc.GenericXdsConfigs {
		got[g.TypeUrl] = g.ConfigStatus
	}
	want := map[string]status.ConfigStatus{
		adsclient.TypeCLA:     status.ConfigStatus_SYNCED, // acknowledged
		adsclient.TypeCluster: status.ConfigStatus_STALE,  // sent, not yet acknowledged
	}
	for typ, st := range want {
		if got[typ] != st {
			t.Errorf("%s: %s, want %s (all: %v)", typ, got[typ], st, got)
		}
	}
	if !slices.ContainsFunc(cc.GenericXdsConfigs, func(g *status.ClientConfig_GenericXdsConfig) bool { return g.LastUpdated != nil }) {
		t.Error("no last update time")
	}
}
