package eds

import (
	"cmp"
	"encoding/json"
	"net/netip"
	"slices"
	"testing"

	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"
	discovery "k8s.io/api/discovery/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/transforms/registry"
	"github.com/krteds/krteds/transforms/transformtest"
)

// FuzzSliceEndpoints feeds arbitrary JSON-decoded EndpointSlices to the registry's transform and
// plans and encodes the CLA of what it keeps: none may panic, and every endpoint must be well
// formed.

func FuzzSliceEndpoints(f *testing.F) {
	transformtest.SeedJSON(f,
		fixtures.Slice("ns1", "s", "foo", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready},
			fixtures.Endpoint{IP: "10.0.0.2", Cond: fixtures.NotReady}),
		&discovery.EndpointSlice{AddressType: discovery.AddressTypeFQDN},
		// Pods named out of key order: each endpoint must take its own.
		fixtures.Slice("ns1", "s", "foo", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready},
			fixtures.Endpoint{IP: "10.0.0.2", Pod: "foo-0", Cond: fixtures.Ready}),
	)
	f.Add([]byte(`{"metadata":{"name":"s","namespace":"ns1","labels":{"kubernetes.io/service-name":"foo"}},"addressType":"IPv6",
		"ports":[{"name":"http"},{"port":-1},{"port":70000}],"endpoints":[{"addresses":["::1","x",""],"targetRef":{"kind":"Node"}}]}`))
	f.Add([]byte(`{"metadata":{"name":"s","namespace":"ns1","labels":{"kubernetes.io/service-name":"foo"}},"addressType":"IPv4",
		"ports":[{"name":"http","port":8080}],"endpoints":[{"addresses":["fd00::1","fe80::1%eth0","::ffff:10.0.0.1","10.0.0.1"]}]}`))
	stop := test.NewStop(f)
	cfg := collections.DefaultConfig()
	svc := registry.ConvertService(cfg, fixtures.Service("ns1", "foo", fixtures.HTTP...), nil)
	in := registry.SliceInputs{
		Services:  krt.NewStaticCollection(nil, []*collections.ServiceInfo{svc}, krt.WithStop(stop)),
		Workloads: registry.StaticWorkloadInputs(test.NewStop(f), fixtures.Pod("ns1", "foo-1", "foo", "10.0.0.1", "n1"), fixtures.Pod("ns1", "foo-0", "foo", "10.0.0.2", "n1")),
	}
	fn := registry.SliceEndpointsOf(cfg, in).Fn
	f.Fuzz(func(t *testing.T, data []byte) {
		var s discovery.EndpointSlice
		if json.Unmarshal(data, &s) != nil {
			return
		}
		kept := collections.NewSlice(&s)
		if !kept.Equals(kept.DeepCopyObject().(*collections.Slice)) {
			t.Fatal("a slice differs from its copy")
		}
		_, out := fn(krt.TestingDummyContext{}, kept)
		if out == nil {
			return
		}
		// The Pods the slice's endpoints name, by canonical address ("" for an endpoint that
		// names none: its Pod is looked up by IP).
		named := map[string][]string{}
		for _, se := range s.Endpoints {
			key := ""
			if ref := se.TargetRef; collections.IsPodRef(ref) {
				key = cmp.Or(ref.Namespace, s.Namespace) + "/" + ref.Name
			}
			for _, a := range se.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil {
					named[ip.String()] = append(named[ip.String()], key)
				}
			}
		}
		for _, e := range out.Endpoints {
			if e.Meta == nil || e.Port == 0 || e.Port > 65535 || e.Address == "" {
				t.Fatalf("malformed endpoint %+v", e)
			}
			if e.Pod != "" && !slices.Contains(named[e.Address], e.Pod) && !slices.Contains(named[e.Address], "") {
				t.Fatalf("endpoint %s carries Pod %s; the slice names %v there", e.Address, e.Pod, named[e.Address])
			}
			ip, err := netip.ParseAddr(e.Address)
			if err != nil || ip.Zone() != "" || ip.Is4In6() || (s.AddressType == discovery.AddressTypeIPv4 && !ip.Is4()) ||
				(s.AddressType == discovery.AddressTypeIPv6 && !ip.Is6()) {
				t.Fatalf("address %q kept in an %s slice", e.Address, s.AddressType)
			}
		}
		merged, _ := collections.MergeRecorded(collections.AppendRefs(nil, out.Endpoints))
		plan := PlanCLA("c", svc, svc.Ports[0], merged, ClusterPolicy{LB: PolicyFor(svc)}, collections.ProxyClass{}, nil)
		_ = plan.Encode()
	})
}
