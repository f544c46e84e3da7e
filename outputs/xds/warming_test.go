package xds

import (
	"context"
	"slices"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/krteds/krteds/outputs/xds/adsclient"
)

// Envoy warms a cluster it is sent before using it: it waits for the cluster's CLA. After a
// clusters response the CLAs it needs come whole, however many parts they take.

// warmingLimits split an answer of the CLAs below into several parts.
func warmingLimits(o *Options) { o.Limits = Limits{StreamRate: -1, ResponseBytes: 64 << 10} }

// warmingMesh is 300 clusters and their CLAs of 1 KB each: 300 KB of CLAs, five parts or more.
func warmingMesh(fs *fakeServer) []string {
	names := fs.src.setBig(tCluster.url(), 300, 100)
	fs.src.setBig(tEndpoint.url(), 300, 1<<10)
	return names
}

// TestForcedEndpointsAfterClustersComeWhole: on state of the world, Envoy asks again for the
// endpoints of the clusters a clusters response made it warm, with the nonce it acknowledged
// already; the answer lists every CLA it subscribes to, changed or not, in as many parts as it
// takes.
func TestForcedEndpointsAfterClustersComeWhole(t *testing.T) {
	fs := startFake(t, warmingLimits)
	names := warmingMesh(fs)
	s, err := adsclient.Open(context.Background(), fs.cc, sidecarNode(1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_ = s.Request(tCluster.url())
	cds := recvType(t, s, tCluster.url())
	_ = s.Ack(cds)
	_ = s.Request(tEndpoint.url(), names...)
	last, parts := recvAllCLAs(t, s, names, "the first answer")
	if parts < 5 {
		t.Fatalf("the first answer in %d parts: the test wants several", parts)
	}

	fs.src.set(tCluster.url(), names[7])
	cds = recvType(t, s, tCluster.url())
	_ = s.Ack(cds)
	// Envoy's request for the endpoints of the clusters it warms: its last endpoints ACK again.
	_ = s.Ack(last, names...)
	if _, parts := recvAllCLAs(t, s, names, "after a clusters response"); parts < 5 {
		t.Fatalf("the forced answer in %d parts: the test wants several", parts)
	}
}

// recvType receives the next response, which must be of type typeURL.
func recvType(t *testing.T, s *adsclient.Stream, typeURL string) *discovery.DiscoveryResponse {
	t.Helper()
	r, err := s.Recv(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.TypeUrl != typeURL {
		t.Fatalf("a response of %s, want %s", r.TypeUrl, typeURL)
	}
	return r
}

// recvAllCLAs receives responses of endpoints, ACKing each, until every name has come; it
// returns the last response and the number of parts.
func recvAllCLAs(t *testing.T, s *adsclient.Stream, names []string, what string) (*discovery.DiscoveryResponse, int) {
	t.Helper()
	got := map[string]bool{}
	var last *discovery.DiscoveryResponse
	parts := 0
	for len(got) < len(names) {
		r, err := s.Recv(10 * time.Second)
		if err != nil {
			t.Fatalf("%s: %d of %d CLAs in %d parts, then %v", what, len(got), len(names), parts, err)
		}
		if r.TypeUrl != tEndpoint.url() {
			t.Fatalf("%s: a response of %s among the CLAs", what, r.TypeUrl)
		}
		parts++
		for _, a := range r.Resources {
			got[fakeName(t, a.Value)] = true
		}
		last = r
		_ = s.Ack(r, names...)
	}
	return last, parts
}

// TestDeltaEndpointsFollowTheClustersSent: on delta, Envoy does not ask again for the endpoints
// of a cluster it warms (istiod pushes them after a clusters answer, forceEDSPush): after a
// clusters response, the CLA of every cluster it sent comes again, in as many parts as it takes,
// and only those.
func TestDeltaEndpointsFollowTheClustersSent(t *testing.T) {
	fs := startFake(t, warmingLimits)
	names := warmingMesh(fs)
	s, err := adsclient.OpenDelta(context.Background(), fs.cc, sidecarNode(1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_ = s.Subscribe(tCluster.url(), nil, nil) // every cluster
	r := recvDeltaType(t, s, tCluster.url())
	_ = s.Ack(r)
	_ = s.Subscribe(tEndpoint.url(), names, nil)
	if parts := recvDeltaCLAs(t, s, names, "the first answer"); parts < 5 {
		t.Fatalf("the first answer in %d parts: the test wants several", parts)
	}

	// Every cluster changes: every CLA comes again.
	fs.src.setBig(tCluster.url(), 300, 100)
	if parts := recvDeltaCLAs(t, s, names, "after every cluster changed"); parts < 5 {
		t.Fatalf("the CLAs of the clusters sent in %d parts: the test wants several", parts)
	}

	// One cluster changes: its CLA comes again, alone.
	fs.src.set(tCluster.url(), names[7])
	r = recvDeltaType(t, s, tCluster.url())
	_ = s.Ack(r)
	r = recvDeltaType(t, s, tEndpoint.url())
	var sent []string
	for _, res := range r.Resources {
		sent = append(sent, res.Name)
	}
	if !slices.Equal(sent, names[7:8]) {
		t.Fatalf("after one cluster's change the CLAs %v came again, want %v", sent, names[7:8])
	}
	_ = s.Ack(r)
}

func recvDeltaType(t *testing.T, s *adsclient.DeltaStream, typeURL string) *discovery.DeltaDiscoveryResponse {
	t.Helper()
	r, err := s.Recv(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.TypeUrl != typeURL {
		t.Fatalf("a response of %s, want %s", r.TypeUrl, typeURL)
	}
	return r
}

// recvDeltaCLAs receives responses, ACKing each, until every name has come in a response of
// endpoints; clusters responses may come between them. It returns the number of CLA parts.
func recvDeltaCLAs(t *testing.T, s *adsclient.DeltaStream, names []string, what string) int {
	t.Helper()
	got := map[string]bool{}
	parts := 0
	for len(got) < len(names) {
		r, err := s.Recv(10 * time.Second)
		if err != nil {
			t.Fatalf("%s: %d of %d CLAs in %d parts, then %v", what, len(got), len(names), parts, err)
		}
		if r.TypeUrl == tEndpoint.url() {
			parts++
			for _, res := range r.Resources {
				if !slices.Contains(names, res.Name) {
					t.Fatalf("%s: a CLA %q not subscribed to", what, res.Name)
				}
				got[res.Name] = true
			}
		}
		_ = s.Ack(r)
	}
	return parts
}
