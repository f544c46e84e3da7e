package policy

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/transforms/registry"
	"github.com/krteds/krteds/transforms/transformtest"
)

func TestParseProxy(t *testing.T) {
	cases := []struct {
		id      string
		md      collections.NodeMetadata
		wantErr bool
		wantNS  string
		wantPod string
		wantIP  string
	}{
		{id: "sidecar~10.1.0.1~foo-1.ns1~ns1.svc.cluster.local", wantNS: "ns1", wantPod: "foo-1", wantIP: "10.1.0.1"},
		{id: "router~10.1.0.2~gw.istio-system~istio-system.svc.cluster.local", wantNS: "istio-system", wantPod: "gw", wantIP: "10.1.0.2"},
		{id: "sidecar~fd00::1~foo.ns1~ns1.svc.cluster.local", wantNS: "ns1", wantPod: "foo", wantIP: "fd00::1"},
		{id: "sidecar~10.1.0.1~foo.ns1~ns1.svc.cluster.local", md: collections.NodeMetadata{Namespace: "other"}, wantNS: "other", wantPod: "foo", wantIP: "10.1.0.1"},
		{id: "sidecar~10.1.0.1~foo~ns2.svc.cluster.local", wantNS: "ns2", wantPod: "foo", wantIP: "10.1.0.1"},
		{id: "sidecar~10.1.0.1~foo.ns1", wantErr: true},
		{id: "ztunnel~10.1.0.1~foo.ns1~ns1.svc.cluster.local", wantErr: true},
		{id: "sidecar~10.1.0.300~foo.ns1~ns1.svc.cluster.local", wantErr: true},
		{id: "sidecar~10.1.0.1~foo~", wantErr: true},
		{id: "", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.id, func(t *testing.T) {
			p, err := collections.ParseProxy("c1", tc.id, tc.md, collections.Locality{})
			if tc.wantErr {
				if err == nil {
					t.Fatalf("want error, got %+v", p)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Namespace != tc.wantNS || p.PodName != tc.wantPod || p.IP != tc.wantIP {
				t.Fatalf("got %+v", p)
			}
		})
	}
}

func TestProxyEnrichment(t *testing.T) {
	cfg := collections.DefaultConfig()
	in := registry.StaticWorkloadInputs(test.NewStop(t), fixtures.ZoneNode("n1", "r1", "z1"), fixtures.Node("n2", nil),
		fixtures.Pod("ns1", "client-1", "client", "10.1.0.1", "n1"),
		fixtures.Pod("ns2", "other", "other", "10.1.0.2", "n1"),
		fixtures.Pod("ns1", "nowhere", "nowhere", "10.1.0.3", "n2"))
	// The failover label names without any DestinationRule: the topology labels only.
	names, _ := FailoverLabelNames(krt.NewStaticCollection[collections.DestinationRule](nil, nil, krt.WithStop(test.NewStop(t))))
	f := Proxies(cfg, ProxyInputs{Workloads: in, FailoverLabels: krt.NewStatic(names(krt.TestingDummyContext{}), true, krt.WithStop(test.NewStop(t)))}).Fn

	declared := collections.Locality{Region: "rd", Zone: "zd"}
	cases := []struct {
		name      string
		proxy     collections.ConnectedProxy
		wantPod   string
		wantClass collections.ProxyClass
		wantLabel map[string]string
	}{
		{
			name:      "pod named in the node id: registry labels and node locality win over what the proxy declared",
			proxy:     collections.ConnectedProxy{ConnID: "a", IP: "10.1.0.1", PodName: "client-1", Namespace: "ns1", Locality: declared, Labels: map[string]string{"app": "liar"}},
			wantPod:   "ns1/client-1",
			wantClass: collections.ProxyClass{Namespace: "ns1", ClusterID: "Kubernetes", Locality: transformtest.R1z1, NodeName: "n1"},
			wantLabel: map[string]string{"app": "client", "topology.kubernetes.io/region": "r1", "kubernetes.io/hostname": "n1"},
		},
		{
			name:      "pod found by IP when the id names another pod",
			proxy:     collections.ConnectedProxy{ConnID: "b", IP: "10.1.0.1", PodName: "renamed", Namespace: "ns1", Locality: declared},
			wantPod:   "ns1/client-1",
			wantClass: collections.ProxyClass{Namespace: "ns1", ClusterID: "Kubernetes", Locality: transformtest.R1z1, NodeName: "n1"},
			wantLabel: map[string]string{"app": "client"},
		},
		{
			name:      "IP of a pod in another namespace is not this proxy's",
			proxy:     collections.ConnectedProxy{ConnID: "c", IP: "10.1.0.2", PodName: "x", Namespace: "ns1", Locality: declared, NodeName: "n9"},
			wantClass: collections.ProxyClass{Namespace: "ns1", ClusterID: "Kubernetes", Locality: declared, NodeName: "n9"},
			wantLabel: map[string]string{"topology.kubernetes.io/region": "rd", "kubernetes.io/hostname": "n9"},
		},
		{
			name:      "unknown proxy: declared locality label wins over node.locality; cluster from metadata",
			proxy:     collections.ConnectedProxy{ConnID: "d", IP: "10.9.9.9", Namespace: "ns3", ClusterID: "c2", Network: "net2", Locality: declared, Labels: map[string]string{"istio-locality": "ra.za.sa"}},
			wantClass: collections.ProxyClass{Namespace: "ns3", ClusterID: "c2", Network: "net2", Locality: collections.Locality{Region: "ra", Zone: "za", Subzone: "sa"}},
			wantLabel: map[string]string{"topology.istio.io/network": "net2", "topology.istio.io/cluster": "c2"},
		},
		{
			// istiod's SetWorkloadLabels falls back to the metadata labels, setTopologyLabels
			// reads the locality back from the region/zone/subzone labels first
			// (localityFromProxyLabels), then adds the topology labels.
			name: "unknown proxy: its metadata labels are kept, topology labels give the locality",
			proxy: collections.ConnectedProxy{ConnID: "e", IP: "10.9.9.9", Namespace: "ns3", Locality: declared, NodeName: "n7",
				Labels: map[string]string{"app": "vm", "version": "v1", "topology.kubernetes.io/zone": "zl", "istio-locality": "ra.za"}},
			wantClass: collections.ProxyClass{Namespace: "ns3", ClusterID: "Kubernetes", Locality: collections.Locality{Zone: "zl"}, NodeName: "n7",
				Labels: collections.CanonicalLabels(map[string]string{"topology.kubernetes.io/zone": "zl"})},
			wantLabel: map[string]string{"app": "vm", "version": "v1", "topology.kubernetes.io/zone": "zl", "istio-locality": "ra.za",
				"kubernetes.io/hostname": "n7", "topology.istio.io/cluster": "Kubernetes"},
		},
		{
			name:      "known Pod on a node without locality: node.locality, as istiod reads it back from the labels",
			proxy:     collections.ConnectedProxy{ConnID: "f", IP: "10.1.0.3", PodName: "nowhere", Namespace: "ns1", Locality: declared},
			wantPod:   "ns1/nowhere",
			wantClass: collections.ProxyClass{Namespace: "ns1", ClusterID: "Kubernetes", Locality: declared, NodeName: "n2"},
			wantLabel: map[string]string{"app": "nowhere", "topology.kubernetes.io/region": "rd", "topology.kubernetes.io/zone": "zd"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := f(krt.TestingDummyContext{}, tc.proxy)
			if p.Pod != tc.wantPod {
				t.Fatalf("pod %q want %q", p.Pod, tc.wantPod)
			}
			if diff := cmp.Diff(tc.wantClass, p.Class); diff != "" {
				t.Fatalf("class (-want +got):\n%s", diff)
			}
			for k, v := range tc.wantLabel {
				if p.EffectiveLabels[k] != v {
					t.Fatalf("label %s=%q, want %q (labels %v)", k, p.EffectiveLabels[k], v, p.EffectiveLabels)
				}
			}
		})
	}
}

// TestProxyClassSelectedRules: the DestinationRules of the proxy's namespace whose
// workloadSelector matches its labels (topology labels too, as istiod's proxy labels) are part
// of its class, oldest first; rules of other namespaces and proxies they do not select are not.
func TestProxyClassSelectedRules(t *testing.T) {
	cfg := collections.DefaultConfig()
	in := registry.StaticWorkloadInputs(test.NewStop(t), fixtures.ZoneNode("n1", "r1", "z1"), fixtures.Pod("ns1", "client-1", "client", "10.1.0.1", "n1"))
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rule := func(ns, name string, age int, sel map[string]string) collections.DestinationRule {
		return collections.DestinationRule{Name: name, Namespace: ns, Host: "reviews", WorkloadSelector: sel, CreationTime: created.Add(time.Duration(age) * time.Second)}
	}
	rules := krt.NewStaticCollection(nil, []collections.DestinationRule{
		rule("ns1", "newer", 5, map[string]string{"app": "client"}),
		rule("ns1", "older", 1, map[string]string{"topology.kubernetes.io/region": "r1"}),
		rule("ns1", "all", 3, map[string]string{}),
		rule("ns1", "other-app", 0, map[string]string{"app": "server"}),
		rule("ns1", "no-selector", 0, nil),
		rule("ns2", "elsewhere", 0, map[string]string{"app": "client"}),
	}, krt.WithStop(test.NewStop(t)))
	f := Proxies(cfg, ProxyInputs{Workloads: in, Rules: rules, SelectorRules: krt.NewIndex(rules, "sel", SelectorRuleNamespace)}).Fn
	p := f(krt.TestingDummyContext{}, collections.ConnectedProxy{ConnID: "a", IP: "10.1.0.1", PodName: "client-1", Namespace: "ns1"})
	if p.Class.Rules != "older,all,newer" {
		t.Errorf("class rules %q, want older,all,newer", p.Class.Rules)
	}
	if !slices.Equal(p.View.Rules, []string{"older", "all", "newer"}) || !strings.Contains(p.View.ClassKey, "older,all,newer") {
		t.Errorf("view %+v does not carry the rules", p.View)
	}
	other := f(krt.TestingDummyContext{}, collections.ConnectedProxy{ConnID: "b", IP: "10.9.9.9", Namespace: "ns3", Labels: map[string]string{"app": "client"}})
	if other.Class.Rules != "" || other.View.Rules != nil {
		t.Errorf("a proxy of a namespace without selector rules: class %q, view %v", other.Class.Rules, other.View.Rules)
	}
}
