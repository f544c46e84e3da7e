package eds

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/transforms/policy"
	"github.com/krteds/krteds/transforms/registry"
	"github.com/krteds/krteds/transforms/transformtest"
)

// claFor runs the whole CLA path for one proxy: Proxies (against the registry objs and the
// failover label names of the rules), ServiceCLAs over the proxy's class, and the CLA of
// cluster name that proxy is sent.
func claFor(t *testing.T, cp collections.ConnectedProxy, svc collections.ServiceInfo, eps []collections.Endpoint,
	rules []collections.DestinationRule, name string, objs ...any,
) (*endpoint.ClusterLoadAssignment, collections.Proxy) {
	t.Helper()
	stop := test.NewStop(t)
	cfg := collections.DefaultConfig()
	drs := krt.NewStaticCollection(nil, rules, krt.WithStop(stop))
	names, _ := policy.FailoverLabelNames(drs)
	failover := names(krt.TestingDummyContext{})
	p := policy.Proxies(cfg, policy.ProxyInputs{Workloads: registry.StaticWorkloadInputs(test.NewStop(t), objs...),
		FailoverLabels: krt.NewStatic(failover, true, krt.WithStop(stop))}).Fn(krt.TestingDummyContext{}, cp)
	sp := collections.ServicePolicy{Service: svc.ResourceName(), Rules: rules}
	sets := ServiceCLAs(CLAInputs{
		RootNamespace: cfg.SystemNamespace,
		Services:      krt.NewStaticCollection(nil, []*collections.ServiceInfo{&svc}, krt.WithStop(stop)),
		Policies:      krt.NewStaticCollection(nil, []collections.ServicePolicy{sp}, krt.WithStop(stop)),
		Classes:       krt.NewStaticCollection(nil, []collections.ProxyClass{p.Class}, krt.WithStop(stop)),
	}).Fn(krt.TestingDummyContext{}, collections.ServiceEndpoints{Hostname: svc.Hostname, Namespace: svc.Namespace, Name: svc.Name,
		ClusterID: cfg.ClusterID, Endpoints: collections.AppendRefs(nil, eps)})
	for _, s := range sets {
		if s.Name != name {
			continue
		}
		r := s.For(p.Class.Key())
		if r == nil {
			t.Fatalf("no CLA of %s for class %q", name, p.Class.Key())
		}
		var cla endpoint.ClusterLoadAssignment
		if err := proto.Unmarshal(r.Body, &cla); err != nil {
			t.Fatal(err)
		}
		return &cla, *p
	}
	t.Fatalf("no set %s", name)
	return nil, *p
}

// TestFailoverPriorityOfProxyLabels: a failoverPriority on a label of the proxy's own compares
// the proxy's labels as istiod has them (SetWorkloadLabels: its Pod's labels when the registry
// knows the Pod, else the node metadata LABELS; then setTopologyLabels) with each endpoint's, in
// applyFailoverPriorities (pilot/pkg/networking/core/loadbalancer/loadbalancer.go): agreeing
// endpoints at priority 0, the others at 1.
func TestFailoverPriorityOfProxyLabels(t *testing.T) {
	httpPort := collections.ServicePort{Name: "http", Port: 80, Protocol: "TCP"}
	svc := collections.ServiceInfo{Name: "foo", Namespace: "ns1", Hostname: "foo.ns1.svc.cluster.local", Ports: []collections.ServicePort{httpPort}}
	version := func(v string) func(*collections.EndpointMeta) {
		return func(m *collections.EndpointMeta) {
			m.PodLabels = collections.InternLabels(map[string]string{"app": "foo", "version": v})
		}
	}
	H, HE := collections.Healthy, core.HealthStatus_HEALTHY
	eps := []collections.Endpoint{
		transformtest.Ep("10.1.0.1", H, transformtest.R1z1, "n1", version("v1")),
		transformtest.Ep("10.1.0.2", H, transformtest.R1z1, "n1", version("v2")),
		transformtest.Ep("10.1.0.3", H, transformtest.R1z1, "n1"),
	}
	rule := func(priorities ...string) []collections.DestinationRule {
		return []collections.DestinationRule{{Name: "dr", Namespace: "ns1", Host: "foo",
			Policy: &collections.TrafficPolicy{OutlierDetection: true, LoadBalancer: true,
				Locality: &collections.LocalitySetting{FailoverPriority: priorities}}}}
	}
	pod := fixtures.Pod("ns1", "client-1", "client", "10.2.0.1", "n1")
	pod.Labels["version"] = "v2"
	g := func(prio uint32, ips ...string) wantGroup {
		w := wantGroup{loc: transformtest.R1z1, priority: prio}
		for _, ip := range ips {
			w.eps = append(w.eps, wantEP{ip: ip, health: HE})
		}
		return w
	}
	cases := []struct {
		name  string
		proxy collections.ConnectedProxy
		rules []collections.DestinationRule
		want  *endpoint.ClusterLoadAssignment
	}{
		{
			name:  "no Pod: the metadata label version=v1 is the proxy's",
			proxy: collections.ConnectedProxy{ConnID: "a", IP: "10.9.9.9", Namespace: "ns1", Labels: map[string]string{"version": "v1", "app": "client"}},
			rules: rule("version"),
			want:  wantCLA(fooName, g(0, "10.1.0.1"), g(1, "10.1.0.2", "10.1.0.3")),
		},
		{
			name: "the Pod's labels win over the metadata's",
			proxy: collections.ConnectedProxy{ConnID: "b", IP: "10.2.0.1", PodName: "client-1", Namespace: "ns1",
				Labels: map[string]string{"version": "v1"}},
			rules: rule("version"),
			want:  wantCLA(fooName, g(0, "10.1.0.2"), g(1, "10.1.0.1", "10.1.0.3")),
		},
		{
			name:  "no version label: endpoints without one agree",
			proxy: collections.ConnectedProxy{ConnID: "c", IP: "10.9.9.9", Namespace: "ns1", Labels: map[string]string{"app": "client"}},
			rules: rule("version"),
			want:  wantCLA(fooName, g(0, "10.1.0.3"), g(1, "10.1.0.1", "10.1.0.2")),
		},
		{
			name:  "label=value compares the value, not the proxy's label",
			proxy: collections.ConnectedProxy{ConnID: "d", IP: "10.9.9.9", Namespace: "ns1", Labels: map[string]string{"version": "v1"}},
			rules: rule("version=v2"),
			want:  wantCLA(fooName, g(0, "10.1.0.2"), g(1, "10.1.0.1", "10.1.0.3")),
		},
		{
			name: "a later entry splits further: version then zone",
			proxy: collections.ConnectedProxy{ConnID: "e", IP: "10.9.9.9", Namespace: "ns1", Locality: transformtest.R1z2,
				Labels: map[string]string{"version": "v1"}},
			rules: rule("version", collections.LabelTopologyZone),
			// version agrees, zone not: 2-1 = 1; version disagrees: 2-0 = 2.
			want: wantCLA(fooName, g(0, "10.1.0.1"), g(1, "10.1.0.2", "10.1.0.3")),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := claFor(t, tc.proxy, svc, eps, tc.rules, fooName, fixtures.ZoneNode("n1", "r1", "z1"), pod)
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Fatalf("CLA (-want +got):\n%s", diff)
			}
			checkClientLimits(t, got)
		})
	}
}

// TestProxyClassKeepsFailoverLabels: a class keeps the proxy's own labels that some rule's
// failoverPriority compares (and the topology labels), not the others, so proxies differing
// elsewhere share a class; without the names it keeps every label.
func TestProxyClassKeepsFailoverLabels(t *testing.T) {
	stop := test.NewStop(t)
	cfg := collections.DefaultConfig()
	drs := krt.NewStaticCollection(nil, []collections.DestinationRule{
		{Name: "a", Namespace: "ns1", Host: "foo", Policy: &collections.TrafficPolicy{Locality: &collections.LocalitySetting{
			FailoverPriority: []string{"version", "track=canary", "a=b=c"}}}},
		{Name: "b", Namespace: "ns2", Host: "bar", Subsets: []collections.Subset{{Name: "s",
			PortPolicies: map[uint32]*collections.TrafficPolicy{80: {Locality: &collections.LocalitySetting{ZoneAware: true, FailoverPriority: []string{"tier"}}}}}}},
	}, krt.WithStop(stop))
	names, _ := policy.FailoverLabelNames(drs)
	got := names(krt.TestingDummyContext{})
	want := []string{"a", "kubernetes.io/hostname", "tier", "topology.istio.io/network", "topology.istio.io/subzone",
		"topology.kubernetes.io/region", "topology.kubernetes.io/zone", "version"}
	if diff := cmp.Diff(want, got.Names); diff != "" {
		t.Fatalf("names (-want +got):\n%s", diff)
	}

	in := policy.ProxyInputs{Workloads: registry.StaticWorkloadInputs(test.NewStop(t)), FailoverLabels: krt.NewStatic(got, true, krt.WithStop(stop))}
	class := func(in policy.ProxyInputs, labels map[string]string) collections.ProxyClass {
		return policy.Proxies(cfg, in).Fn(krt.TestingDummyContext{}, collections.ConnectedProxy{ConnID: "x", IP: "10.9.9.9", Namespace: "ns1", Labels: labels}).Class
	}
	a := class(in, map[string]string{"version": "v1", "pod-template-hash": "abc", "track": "canary"})
	b := class(in, map[string]string{"version": "v1", "pod-template-hash": "def"})
	if a != b {
		t.Fatalf("proxies differing only in labels no failoverPriority compares have classes %q and %q", a.Key(), b.Key())
	}
	if c := class(in, map[string]string{"version": "v2"}); c == a {
		t.Fatal("proxies of another version share a class")
	}
	all := policy.ProxyInputs{Workloads: in.Workloads}
	if class(all, map[string]string{"version": "v1", "pod-template-hash": "abc"}) == class(all, map[string]string{"version": "v1", "pod-template-hash": "def"}) {
		t.Fatal("without the failover label names a class keeps every label")
	}
}
