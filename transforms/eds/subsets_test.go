package eds

import (
	"bytes"
	"reflect"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/transformtest"
)

// TestUnknownSubsetCLAs: the CLA of a subset no DestinationRule defines is istiod's
// BuildClusterLoadAssignment for it (pilot/pkg/xds/endpoints/endpoint_builder.go):
// getSubSetLabels gives no labels (every endpoint of the port), getSubsetTrafficPolicy merges
// the rule's policy for the port as for the port's cluster (same priorities, same unhealthy
// rule), and tlsModeForDestinationRule consults no TLS mode of the rule. ServiceCLAs serves it
// as the set outbound|<port>|*|<host>, built under the port cluster's name.
func TestUnknownSubsetCLAs(t *testing.T) {
	httpPort := collections.ServicePort{Name: "http", Port: 80, Protocol: "TCP"}
	svc := collections.ServiceInfo{Name: "foo", Namespace: "ns1", Hostname: "foo.ns1.svc.cluster.local", Ports: []collections.ServicePort{httpPort}}
	version := func(v string) func(*collections.EndpointMeta) {
		return func(m *collections.EndpointMeta) {
			m.PodLabels = collections.InternLabels(map[string]string{"app": "foo", "version": v})
		}
	}
	H, U := collections.Healthy, collections.UnHealthy
	HE, UN := core.HealthStatus_HEALTHY, core.HealthStatus_UNHEALTHY
	eps := []collections.Endpoint{
		transformtest.Ep("10.1.0.1", H, transformtest.R1z1, "n1", version("v1")),
		transformtest.Ep("10.1.0.2", U, transformtest.R1z1, "n1", version("v2")),
		transformtest.Ep("10.1.0.3", H, transformtest.R1z2, "n2", version("v2")),
	}
	unknown := transforms.ClusterName(80, UnknownSubset, svc.Hostname)
	proxy := collections.ConnectedProxy{ConnID: "a", IP: "10.9.9.9", Namespace: "ns1", Locality: transformtest.R1z1, Labels: map[string]string{"version": "v1"}}
	tls := func(mode string) *collections.TrafficPolicy { return &collections.TrafficPolicy{TLSMode: mode} }
	failover := &collections.TrafficPolicy{OutlierDetection: true, MinHealthPercent: 10, LoadBalancer: true,
		Locality: &collections.LocalitySetting{FailoverPriority: []string{"version"}}}
	rules := func(top *collections.TrafficPolicy) []collections.DestinationRule {
		return []collections.DestinationRule{{Name: "dr", Namespace: "ns1", Host: "foo", Policy: top,
			Subsets: []collections.Subset{{Name: "v1", Labels: map[string]string{"version": "v1"}}}}}
	}
	cases := []struct {
		name        string
		rules       []collections.DestinationRule
		want, wantB *endpoint.ClusterLoadAssignment
	}{
		{
			name:  "no rule: every endpoint, as the port's cluster",
			want:  wantCLA(fooName, wantGroup{loc: transformtest.R1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE}, {ip: "10.1.0.2", health: UN}}}, wantGroup{loc: transformtest.R1z2, eps: []wantEP{{ip: "10.1.0.3", health: HE}}}),
			wantB: wantCLA(fooName, wantGroup{loc: transformtest.R1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE}, {ip: "10.1.0.2", health: UN}}}, wantGroup{loc: transformtest.R1z2, eps: []wantEP{{ip: "10.1.0.3", health: HE}}}),
		},
		{
			name:  "the rule's TLS mode is not consulted for an unknown subset",
			rules: rules(tls(collections.ClientTLSSimple)),
			want:  wantCLA(fooName, wantGroup{loc: transformtest.R1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE}, {ip: "10.1.0.2", health: UN}}}, wantGroup{loc: transformtest.R1z2, eps: []wantEP{{ip: "10.1.0.3", health: HE}}}),
			wantB: wantCLA(fooName, wantGroup{loc: transformtest.R1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE, plain: true}, {ip: "10.1.0.2", health: UN, plain: true}}},
				wantGroup{loc: transformtest.R1z2, eps: []wantEP{{ip: "10.1.0.3", health: HE, plain: true}}}),
		},
		{
			name:  "the rule's traffic policy applies: failover priorities, no unhealthy endpoints",
			rules: rules(failover),
			want:  wantCLA(fooName, wantGroup{loc: transformtest.R1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE}}}, wantGroup{loc: transformtest.R1z2, priority: 1, eps: []wantEP{{ip: "10.1.0.3", health: HE}}}),
			wantB: wantCLA(fooName, wantGroup{loc: transformtest.R1z1, eps: []wantEP{{ip: "10.1.0.1", health: HE}}}, wantGroup{loc: transformtest.R1z2, priority: 1, eps: []wantEP{{ip: "10.1.0.3", health: HE}}}),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := claFor(t, proxy, svc, eps, tc.rules, unknown)
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Fatalf("unknown subset CLA (-want +got):\n%s", diff)
			}
			base, _ := claFor(t, proxy, svc, eps, tc.rules, fooName)
			if diff := cmp.Diff(tc.wantB, base, protocmp.Transform()); diff != "" {
				t.Fatalf("port cluster CLA (-want +got):\n%s", diff)
			}
		})
	}
}

// TestUnknownSubsetSetSharesTheBaseCLAs: without a TLS mode the unknown-subset set holds the
// port cluster's CLAs themselves (one encoding, one ByClass map).
func TestUnknownSubsetSetSharesTheBaseCLAs(t *testing.T) {
	stop := test.NewStop(t)
	svc := collections.ServiceInfo{Name: "foo", Namespace: "ns1", Hostname: "foo.ns1.svc.cluster.local",
		Ports: []collections.ServicePort{{Name: "http", Port: 80, Protocol: "TCP"}}}
	eps := []collections.Endpoint{transformtest.Ep("10.1.0.1", collections.Healthy, transformtest.R1z1, "n1")}
	for _, rules := range [][]collections.DestinationRule{nil, {{Name: "dr", Namespace: "ns1", Host: "foo",
		Subsets: []collections.Subset{{Name: "v1", Labels: map[string]string{"version": "v1"}}}}}} {
		sets := ServiceCLAs(CLAInputs{
			RootNamespace: "istio-system",
			Services:      krt.NewStaticCollection(nil, []*collections.ServiceInfo{&svc}, krt.WithStop(stop)),
			Policies:      krt.NewStaticCollection(nil, []collections.ServicePolicy{{Service: "ns1/foo", Rules: rules}}, krt.WithStop(stop)),
			Classes: krt.NewStaticCollection(nil, []collections.ProxyClass{{Namespace: "ns1"}, {Namespace: "ns2"}},
				krt.WithStop(stop)),
		}).Fn(krt.TestingDummyContext{}, collections.ServiceEndpoints{Hostname: svc.Hostname, Namespace: "ns1", Name: "foo", Endpoints: collections.AppendRefs(nil, eps)})
		byName := map[string]collections.ResourceSet{}
		for _, s := range sets {
			byName[s.Name] = s
		}
		base, unk := byName[fooName], byName[transforms.ClusterName(80, UnknownSubset, svc.Hostname)]
		if unk.Key == "" {
			t.Fatalf("no unknown-subset set among %d sets", len(sets))
		}
		if unk.Shared != base.Shared || reflect.ValueOf(unk.ByClass).UnsafePointer() != reflect.ValueOf(base.ByClass).UnsafePointer() {
			t.Fatal("the unknown-subset set does not share the port cluster's CLAs")
		}
		if len(rules) > 0 && len(base.ByClass) != 2 {
			t.Fatalf("a service with a rule has CLAs per class: %d", len(base.ByClass))
		}
		for k, r := range base.ByClass {
			if unk.ByClass[k] != r {
				t.Fatalf("class %q: the unknown-subset CLA is not the port cluster's", k)
			}
		}
	}
}

// TestRelabelCLA: relabelling gives exactly the bytes the encoder gives under the new name.
func TestRelabelCLA(t *testing.T) {
	svc := &collections.ServiceInfo{Name: "foo", Namespace: "ns1"}
	port := collections.ServicePort{Name: "http", Port: 80}
	plan := planCLA(fooName, svc, port, collections.AppendRefs(nil, syntheticEndpoints(20)), PolicyFor(svc), collections.ProxyClass{}, nil)
	r := transforms.Versioned(fooName, transforms.TypeCLA, plan.Encode())
	r.Endpoints = 20
	name := "outbound|80|" + string(bytes.Repeat([]byte("x"), 200)) + "|foo.ns1.svc.cluster.local"
	got := RelabelCLA(r, name)
	plan.ClusterName = name
	if want := plan.Encode(); !bytes.Equal(got.Body, want) || got.Name != name || got.Endpoints != 20 || got.Version == r.Version {
		t.Fatalf("relabelled: name %q, %d endpoints, %d bytes; want %d bytes", got.Name, got.Endpoints, len(got.Body), len(want))
	}
	// A body that does not start with the name (an empty name is not written) is re-encoded.
	empty, err := proto.Marshal(&endpoint.ClusterLoadAssignment{Endpoints: []*endpoint.LocalityLbEndpoints{{Priority: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	var cla endpoint.ClusterLoadAssignment
	if err := proto.Unmarshal(RelabelCLA(&collections.Resource{Body: empty}, name).Body, &cla); err != nil || cla.ClusterName != name || len(cla.Endpoints) != 1 {
		t.Fatalf("re-encoded: %v %v", err, &cla)
	}
	if UnknownSubsetKey("outbound|80|v1|foo.ns1.svc.cluster.local") != "outbound|80|*|foo.ns1.svc.cluster.local" ||
		UnknownSubsetKey(fooName) != "" || UnknownSubsetKey("outbound|80|*|foo.ns1.svc.cluster.local") != "" || UnknownSubsetKey("inbound|80|v1|x") != "" {
		t.Fatal("UnknownSubsetKey")
	}
}
