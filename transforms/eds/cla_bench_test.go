package eds

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/transformtest"
)

// syntheticEndpoints makes n healthy endpoints over 3 zones in 2 regions, with pod-like metadata.
func syntheticEndpoints(n int) []collections.Endpoint {
	locs := []collections.Locality{transformtest.R1z1, transformtest.R1z2, transformtest.R2z3}
	eps := make([]collections.Endpoint, 0, n)
	metas := make([]*collections.EndpointMeta, len(locs))
	for i, l := range locs {
		metas[i] = collections.NewEndpointMeta(
			collections.WorkloadMeta{
				PodLabels:         collections.InternLabels(map[string]string{"app": "foo", "version": "v1"}),
				TLSMode:           "istio",
				Namespace:         "ns1",
				WorkloadName:      "foo",
				CanonicalName:     "foo",
				CanonicalRevision: "v1",
			},
			collections.TopologyMeta{
				ClusterID:     "Kubernetes",
				Locality:      l,
				LocalityLabel: l.String(),
				NodeName:      fmt.Sprintf("node-%d", i),
			},
			"", "")
	}
	for i := 0; i < n; i++ {
		eps = append(eps, collections.Endpoint{
			Address: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), Port: 8080, PortName: "http",
			Health: collections.Healthy, Slice: "s", Meta: metas[i%len(metas)],
		})
	}
	return eps
}

// BenchmarkBuildAndMarshalCLA measures building and marshalling one CLA, per endpoint.
func BenchmarkBuildAndMarshalCLA(b *testing.B) {
	port := collections.ServicePort{Name: "http", Port: 80, Protocol: "TCP"}
	svc := &collections.ServiceInfo{Name: "foo", Namespace: "ns1", Hostname: "foo.ns1.svc.cluster.local", Ports: []collections.ServicePort{port}}
	for _, n := range []int{1000, 10000} {
		eps := syntheticEndpoints(n)
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var size int
			for b.Loop() {
				// The service's list of pointers, allocated at its size as ClusterShard does.
				refs := collections.AppendRefs(make([]*collections.Endpoint, 0, len(eps)), eps)
				plan := planCLA(fooName, svc, port, refs, PolicyFor(svc), collections.ProxyClass{}, nil)
				r := transforms.Versioned(fooName, transforms.TypeCLA, plan.Encode())
				size = len(r.Body)
			}
			b.ReportMetric(float64(size), "bytes/cla")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/endpoint")
		})
	}
}

// BenchmarkEncodeCLA compares the hand encoder with building the ClusterLoadAssignment message and
// marshalling it with proto.Marshal (deterministic, as a byte-stable version needs), from the same
// plan. TestEncodeEqualsProtoMarshal holds both to the same bytes.
func BenchmarkEncodeCLA(b *testing.B) {
	port := collections.ServicePort{Name: "http", Port: 80, Protocol: "TCP"}
	svc := &collections.ServiceInfo{Name: "foo", Namespace: "ns1", Hostname: "foo.ns1.svc.cluster.local", Ports: []collections.ServicePort{port}}
	for _, n := range []int{10, 1000} {
		plan := planCLA(fooName, svc, port, collections.AppendRefs(nil, syntheticEndpoints(n)), PolicyFor(svc), collections.ProxyClass{}, nil)
		b.Run(fmt.Sprintf("encoder=hand/endpoints=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = plan.Encode()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/endpoint")
		})
		b.Run(fmt.Sprintf("encoder=proto/endpoints=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := (proto.MarshalOptions{Deterministic: true}).Marshal(plan.Proto()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/endpoint")
		})
	}
}
