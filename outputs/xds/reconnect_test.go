package xds

import (
	"context"
	"slices"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/krteds/krteds/outputs/xds/adsclient"
)

// TestReconnectCarryingTheOldStreamsNonce: an Envoy before 1.29 reconnecting on state of the
// world sends its first requests with the previous stream's nonce and version
// (envoyproxy/envoy#30155). They subscribe as any first request does: the legacy wildcard of
// clusters lists every cluster and stays after the ACK, and the endpoints asked for are sent.
func TestReconnectCarryingTheOldStreamsNonce(t *testing.T) {
	fs := startFake(t)
	fs.src.set(tCluster.url(), "c1")
	fs.src.set(tCluster.url(), "c2")
	fs.src.set(tEndpoint.url(), "c1")
	s, err := adsclient.Open(context.Background(), fs.cc, sidecarNode(1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	names := func(r *discovery.DiscoveryResponse) []string {
		var out []string
		for _, a := range r.Resources {
			out = append(out, fakeName(t, a.Value))
		}
		slices.Sort(out)
		return out
	}
	must := func(typeURL string, want ...string) *discovery.DiscoveryResponse {
		t.Helper()
		r, err := s.Recv(10 * time.Second)
		if err != nil {
			t.Fatalf("waiting for %s %v: %v", typeURL, want, err)
		}
		if r.TypeUrl != typeURL || !slices.Equal(names(r), want) {
			t.Fatalf("got %s %v, want %s %v", r.TypeUrl, names(r), typeURL, want)
		}
		return r
	}
	if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: tCluster.url(), VersionInfo: "5f3a9c", ResponseNonce: "17"}); err != nil {
		t.Fatal(err)
	}
	cds := must(tCluster.url(), "c1", "c2")
	if err := s.Ack(cds); err != nil { // no names: the legacy wildcard, kept
		t.Fatal(err)
	}
	if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: tEndpoint.url(), VersionInfo: "77", ResponseNonce: "18", ResourceNames: []string{"c1"}}); err != nil {
		t.Fatal(err)
	}
	must(tEndpoint.url(), "c1")
	fs.src.set(tCluster.url(), "c3")
	must(tCluster.url(), "c1", "c2", "c3")
}
