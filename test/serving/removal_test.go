package serving

import (
	"testing"

	"github.com/krteds/krteds/collections/sources"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
)

// TestServiceRemovalSendsClustersFirst: a deleted Service's cluster is removed before its
// emptied CLA is sent, as istiod orders them (a cluster without endpoints for that moment, never
// endpoints of nothing), on both protocols.
func TestServiceRemovalSendsClustersFirst(t *testing.T) {
	for _, delta := range []bool{false, true} {
		name := map[bool]string{false: "sotw", true: "delta"}[delta]
		t.Run(name, func(t *testing.T) {
			r := newRig(t, append(mesh(), fixtures.Service("ns1", "bar", fixtures.HTTP...))...)
			node := sidecar("10.9.0.1", "ns1")
			// types lists the types of the responses after the Service is deleted, until the
			// clusters response that no longer lists foo.
			var types []string
			if delta {
				s := r.OpenDelta(node)
				_ = s.Subscribe(adsclient.TypeCluster, nil, nil)
				first, err := s.Recv(wait)
				if err != nil {
					t.Fatal(err)
				}
				_ = s.Ack(first)
				_ = s.Subscribe(adsclient.TypeCLA, []string{fooCluster}, nil)
				eds, err := s.Recv(wait)
				if err != nil {
					t.Fatal(err)
				}
				_ = s.Ack(eds)
				r.In.Delete(sources.KindService, "ns1/foo")
				for {
					resp, err := s.Recv(wait)
					if err != nil {
						t.Fatal(err)
					}
					_ = s.Ack(resp)
					types = append(types, resp.TypeUrl)
					if resp.TypeUrl == adsclient.TypeCluster && len(resp.RemovedResources) > 0 {
						break
					}
				}
			} else {
				s := r.Open(node)
				_ = s.Request(adsclient.TypeCluster)
				cds := recv(t, s)
				_ = s.Ack(cds)
				_ = s.Request(adsclient.TypeCLA, fooCluster)
				eds := recv(t, s)
				_ = s.Ack(eds, fooCluster)
				r.In.Delete(sources.KindService, "ns1/foo")
				for {
					resp := recv(t, s)
					types = append(types, resp.TypeUrl)
					if resp.TypeUrl == adsclient.TypeCluster {
						_ = s.Ack(resp)
						if findCluster(t, resp, fooCluster) == nil {
							break
						}
						continue
					}
					_ = s.Ack(resp, fooCluster)
				}
			}
			if len(types) != 1 {
				t.Fatalf("after the Service was deleted, %v came before (or with) the clusters response removing its cluster, want that response first", types)
			}
		})
	}
}
