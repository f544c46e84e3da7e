package registry

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"
	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/test/fixtures"
)

func TestConvertService(t *testing.T) {
	cfg := collections.DefaultConfig()
	base := func(mut func(s *corev1.Service)) *corev1.Service {
		s := fixtures.Service("ns1", "foo", fixtures.Port{Name: "http", Port: 80, Target: 8080},
			fixtures.Port{Name: "dns", Port: 53, Target: 53, Protocol: corev1.ProtocolUDP})
		if mut != nil {
			mut(s)
		}
		return s
	}
	want := func(mut func(s *collections.ServiceInfo)) collections.ServiceInfo {
		si := collections.ServiceInfo{
			Name: "foo", Namespace: "ns1", Hostname: "foo.ns1.svc.cluster.local",
			Ports: []collections.ServicePort{
				{Name: "http", Port: 80, TargetPort: "8080", Protocol: "TCP"},
				{Name: "dns", Port: 53, TargetPort: "53", Protocol: "UDP"},
			},
			Selector:   map[string]string{"app": "foo"},
			Type:       "ClusterIP",
			ClusterIPs: []string{"10.96.0.10"},
			Cluster:    "Kubernetes",
		}
		if mut != nil {
			mut(&si)
		}
		return si
	}
	cases := []struct {
		name   string
		svc    *corev1.Service
		nsAnno map[string]string
		domain string
		want   collections.ServiceInfo
	}{
		{name: "plain ClusterIP", svc: base(nil), want: want(nil)},
		{name: "custom domain", svc: base(nil), domain: "example.org",
			want: want(func(s *collections.ServiceInfo) { s.Hostname = "foo.ns1.svc.example.org" })},
		{name: "headless is Passthrough", svc: base(func(s *corev1.Service) { s.Spec.ClusterIP = "None" }),
			want: want(func(s *collections.ServiceInfo) {
				s.Resolution = collections.Passthrough
				s.ClusterIPs = []string{"None"}
			})},
		{name: "ExternalName is Alias", svc: base(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeExternalName
			s.Spec.ExternalName = "example.com"
			s.Spec.ClusterIP = ""
		}), want: want(func(s *collections.ServiceInfo) {
			s.Resolution = collections.Alias
			s.Type = "ExternalName"
			s.ExternalName = "example.com"
			s.ClusterIPs = nil
		})},
		{name: "labels, exportTo, persistent sessions", svc: base(func(s *corev1.Service) {
			s.Labels = map[string]string{"istio.io/persistent-session": "c", "istio.io/persistent-session-header": "h"}
			s.Annotations = map[string]string{"networking.istio.io/exportTo": " ns2, ., ns2 "}
		}), want: want(func(s *collections.ServiceInfo) {
			s.Labels = map[string]string{"istio.io/persistent-session": "c", "istio.io/persistent-session-header": "h"}
			s.ExportTo = []string{".", "ns2"}
			s.PersistentSession = true
			s.PersistentSessionHeader = true
		})},
		{name: "internalTrafficPolicy Local and publishNotReadyAddresses", svc: base(func(s *corev1.Service) {
			s.Spec.InternalTrafficPolicy = fixtures.Ptr(corev1.ServiceInternalTrafficPolicyLocal)
			s.Spec.PublishNotReadyAddresses = true
		}), want: want(func(s *collections.ServiceInfo) { s.NodeLocal = true; s.PublishNotReadyAddresses = true })},
		{name: "trafficDistribution spec PreferClose", svc: base(func(s *corev1.Service) {
			s.Spec.TrafficDistribution = fixtures.Ptr("PreferClose")
			s.Annotations = map[string]string{"networking.istio.io/traffic-distribution": "PreferSameNode"}
		}), want: want(func(s *collections.ServiceInfo) {
			s.TrafficDistribution = collections.TrafficDistributionPreferSameZone
		})},
		{name: "trafficDistribution spec PreferSameNode", svc: base(func(s *corev1.Service) {
			s.Spec.TrafficDistribution = fixtures.Ptr("PreferSameNode")
		}), want: want(func(s *collections.ServiceInfo) {
			s.TrafficDistribution = collections.TrafficDistributionPreferSameNode
		})},
		{name: "unknown spec value falls through to annotation (case-insensitive)", svc: base(func(s *corev1.Service) {
			s.Spec.TrafficDistribution = fixtures.Ptr("Bogus")
			s.Annotations = map[string]string{"networking.istio.io/traffic-distribution": "prefersamezone"}
		}), want: want(func(s *collections.ServiceInfo) {
			s.TrafficDistribution = collections.TrafficDistributionPreferSameZone
		})},
		{name: "unknown service annotation is Any and hides the namespace's", svc: base(func(s *corev1.Service) {
			s.Annotations = map[string]string{"networking.istio.io/traffic-distribution": "nearby"}
		}), nsAnno: map[string]string{"networking.istio.io/traffic-distribution": "PreferClose"},
			want: want(nil)},
		{name: "namespace annotation inherited", svc: base(nil),
			nsAnno: map[string]string{"networking.istio.io/traffic-distribution": "PreferSameNode"},
			want: want(func(s *collections.ServiceInfo) {
				s.TrafficDistribution = collections.TrafficDistributionPreferSameNode
			})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			if tc.domain != "" {
				c.Domain = tc.domain
			}
			namespaces := krt.NewStaticCollection(nil, []*corev1.Namespace{fixtures.Namespace("ns1", nil, tc.nsAnno)},
				krt.WithStop(test.NewStop(t)))
			probs, got := ServiceInfos(c, namespaces).Fn(krt.TestingDummyContext{}, tc.svc)
			if got == nil {
				t.Fatal("no ServiceInfo")
			}
			if probs != nil {
				t.Fatalf("problems %v", probs.Problems)
			}
			if diff := cmp.Diff(tc.want, **got); diff != "" {
				t.Fatalf("ServiceInfo (-want +got):\n%s", diff)
			}
			if !(*got).Equals(&tc.want) {
				t.Fatal("Equals disagrees with cmp")
			}
		})
	}
}

// TestServicePortOutOfRange: a port number outside 1..65535 (which Kubernetes validation rejects,
// and a manifest may carry) gives no cluster; the Service is reported once per such port, by
// name, and its other ports are served.
func TestServicePortOutOfRange(t *testing.T) {
	svc := fixtures.Service("ns1", "foo",
		fixtures.Port{Name: "http", Port: 80},
		fixtures.Port{Name: "big", Port: 70000},
		fixtures.Port{Name: "zero", Port: 0},
		fixtures.Port{Name: "negative", Port: -1},
		fixtures.Port{Name: "max", Port: 65535})
	namespaces := krt.NewStaticCollection[*corev1.Namespace](nil, nil, krt.WithStop(test.NewStop(t)))
	probs, sip := ServiceInfos(collections.DefaultConfig(), namespaces).Fn(krt.TestingDummyContext{}, svc)
	si := *sip
	var ports []int32
	for _, p := range si.Ports {
		ports = append(ports, p.Port)
	}
	if diff := cmp.Diff([]int32{80, 65535}, ports); diff != "" {
		t.Fatalf("ports (-want +got):\n%s", diff)
	}
	if probs == nil || probs.Kind != "Service" || probs.Object != "ns1/foo" || len(probs.Problems) != 3 {
		t.Fatalf("problems %+v", probs)
	}
	for i, name := range []string{"big", "zero", "negative"} {
		if p := probs.Problems[i]; p.Reason != collections.ReasonInvalidPort || !strings.Contains(p.Detail, `"`+name+`"`) {
			t.Fatalf("problem %d: %+v", i, p)
		}
	}
	// The cluster of the skipped port does not exist.
	for _, c := range ClusterPorts(si) {
		if c.Port == 70000 {
			t.Fatal("a cluster for port 70000")
		}
	}
	if p, clean := ServiceInfos(collections.DefaultConfig(), namespaces).Fn(krt.TestingDummyContext{}, fixtures.Service("ns1", "ok", fixtures.HTTP...)); clean == nil || p != nil {
		t.Fatalf("a valid Service: %v, problems %+v", clean, p)
	}
}

func TestServicePortsUDPHasNoCluster(t *testing.T) {
	si := ConvertService(collections.DefaultConfig(), fixtures.Service("a", "b",
		fixtures.Port{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
		fixtures.Port{Name: "tcp", Port: 53}), nil)
	if si.Ports[0].HasCluster() || !si.Ports[1].HasCluster() {
		t.Fatalf("UDP port must have no cluster, TCP must: %+v", si.Ports)
	}
}

func TestNodeLocality(t *testing.T) {
	cases := []struct {
		name   string
		labels map[string]string
		want   collections.Locality
	}{
		{"GA labels", map[string]string{"topology.kubernetes.io/region": "r1", "topology.kubernetes.io/zone": "z1", "topology.istio.io/subzone": "s1"},
			collections.Locality{Region: "r1", Zone: "z1", Subzone: "s1"}},
		{"beta fallback", map[string]string{"failure-domain.beta.kubernetes.io/region": "r2", "failure-domain.beta.kubernetes.io/zone": "z2"},
			collections.Locality{Region: "r2", Zone: "z2"}},
		{"GA wins over beta", map[string]string{"topology.kubernetes.io/region": "r1", "failure-domain.beta.kubernetes.io/region": "r2",
			"failure-domain.beta.kubernetes.io/zone": "z2"}, collections.Locality{Region: "r1", Zone: "z2"}},
		{"no labels", nil, collections.Locality{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := *NodeLocalities(StaticNetwork(test.NewStop(t))).Fn(krt.TestingDummyContext{}, fixtures.Node("n", tc.labels))
			if got.Name != "n" || got.Locality != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if s := (collections.Locality{Region: "r", Zone: "z"}).String(); s != "r/z/" {
		t.Fatalf("node locality label must have three segments, got %q", s)
	}
}
