package graphs_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1"
	securityapi "istio.io/api/security/v1beta1"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	securityclient "istio.io/client-go/pkg/apis/security/v1"
	"istio.io/istio/pkg/kube/krt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
)

// TestReadsAreWhatKrtRecords: the edges /debug/krt draws come from the collections each
// transform declares it reads; they must be exactly the collections krt recorded the transform
// Fetching, on a mesh that exercises every transform.
func TestReadsAreWhatKrtRecords(t *testing.T) {
	dr := &networkingclient.DestinationRule{ObjectMeta: metav1.ObjectMeta{Name: "dr", Namespace: "ns1"},
		Spec: networking.DestinationRule{Host: "foo", Subsets: []*networking.Subset{{Name: "v1", Labels: map[string]string{"app": "foo"}}}}}
	sc := &networkingclient.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "ns1"},
		Spec: networking.Sidecar{Egress: []*networking.IstioEgressListener{{Hosts: []string{"./*"}}}}}
	// A STATIC entry with an inline endpoint (and a host under the cluster domain, checked
	// against the Kubernetes services); an entry selecting the foo Pods and a WorkloadEntry,
	// which the foo Service selects too.
	ext := &networkingclient.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: "ns1"},
		Spec: networking.ServiceEntry{Hosts: []string{"api.example.com", "bar.ns1.svc.cluster.local"}, Resolution: networking.ServiceEntry_STATIC,
			Ports: []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}, Endpoints: []*networking.WorkloadEntry{{Address: "10.1.0.1"}}}}
	sel := &networkingclient.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: "sel", Namespace: "ns1"},
		Spec: networking.ServiceEntry{Hosts: []string{"foo.example.com"}, Resolution: networking.ServiceEntry_STATIC,
			Ports:            []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}},
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "foo"}}}}
	vm := &networkingclient.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{Name: "vm-1", Namespace: "ns1"},
		Spec: networking.WorkloadEntry{Address: "10.2.0.1", Labels: map[string]string{"app": "foo"}}}
	// A DNS entry whose endpoint has a sidecar (a service account): its cluster's load
	// assignment reads the PeerAuthentications, as the foo Pod's CLAs do.
	dns := &networkingclient.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: "dns", Namespace: "ns1"},
		Spec: networking.ServiceEntry{Hosts: []string{"dns.example.com"}, Resolution: networking.ServiceEntry_DNS,
			Ports:     []*networking.ServicePort{{Number: 443, Name: "tls", Protocol: "TLS"}},
			Endpoints: []*networking.WorkloadEntry{{Address: "backend.example.com", ServiceAccount: "backend"}}}}
	pa := &securityclient.PeerAuthentication{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "ns1"},
		Spec: securityapi.PeerAuthentication{Mtls: &securityapi.PeerAuthentication_MutualTLS{Mode: securityapi.PeerAuthentication_MutualTLS_STRICT}}}
	foo1 := fixtures.Pod("ns1", "foo-1", "foo", "10.0.0.1", "n1")
	foo1.Labels[collections.LabelTLSMode] = collections.TLSModeIstio
	g := rigs.NewGraph(t, ext, sel, vm, dns, pa,
		fixtures.Namespace("istio-system", map[string]string{"topology.istio.io/network": "net1"}, nil),
		fixtures.ZoneNode("n1", "r1", "z1"),
		fixtures.Service("ns1", "foo", fixtures.HTTP...),
		foo1,
		// Not scheduled yet: its proxy reads the default network itself.
		fixtures.Pod("ns1", "foo-2", "foo", "10.0.0.2", ""),
		fixtures.Slice("ns1", "foo-a", "foo", fixtures.HTTPSlice,
			fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready}, fixtures.Endpoint{IP: "10.0.0.9", Cond: fixtures.Ready}),
		dr, sc)
	g.Served.Connect(collections.ConnectedProxy{ConnID: "c1", ID: "sidecar~10.0.0.1~foo-1.ns1~ns1.svc.cluster.local", Type: "sidecar",
		IP: "10.0.0.1", PodName: "foo-1", Namespace: "ns1"})
	g.Served.Connect(collections.ConnectedProxy{ConnID: "c2", ID: "sidecar~10.0.0.2~foo-2.ns1~ns1.svc.cluster.local", Type: "sidecar",
		IP: "10.0.0.2", PodName: "foo-2", Namespace: "ns1"})
	g.Await(t, "the proxies' views and per-class CLAs", func() (bool, string) {
		set := g.CLAs.GetKey("outbound|80|v1|foo.ns1.svc.cluster.local")
		if set == nil {
			return false, fmt.Sprintf("%d views, no CLA set", len(g.Views.List()))
		}
		return len(g.Views.List()) > 0 && len(set.ByClass) > 0, fmt.Sprintf("%d views, %d per-class CLAs", len(g.Views.List()), len(set.ByClass))
	})
	raw, err := json.Marshal(g.Debugger)
	if err != nil {
		t.Fatal(err)
	}
	var dump []struct {
		Name  string `json:"name"`
		State struct {
			Inputs map[string]struct {
				Dependencies []string `json:"dependencies"`
			} `json:"inputs"`
		} `json:"state"`
	}
	if err := json.Unmarshal(raw, &dump); err != nil {
		t.Fatal(err)
	}
	// krt names an index collection "index/<name>"; the graph's node is <name>.
	indexes := map[string]bool{}
	for _, n := range g.Description.Snapshot().Nodes {
		indexes[n.Name] = n.Kind == graphs.KindIndex
	}
	recorded := map[string][]string{}
	for _, c := range dump {
		for _, in := range c.State.Inputs {
			for _, dep := range in.Dependencies {
				if name, ok := strings.CutPrefix(dep, "index/"); ok && indexes[name] {
					dep = name
				}
				if !slices.Contains(recorded[c.Name], dep) {
					recorded[c.Name] = append(recorded[c.Name], dep)
				}
			}
		}
	}
	for _, n := range g.Description.Snapshot().Nodes {
		if n.Kind != graphs.KindDerived {
			continue
		}
		got := slices.Sorted(slices.Values(recorded[n.Name]))
		if !slices.Equal(got, n.Dependencies) {
			t.Errorf("%s: declares it reads %v; krt recorded %v", n.Name, n.Dependencies, got)
		}
	}
}

// TestRuleChangeRecomputesOnlyItsServices: DestinationRules are read through their host index, so
// a rule recomputes the policies of the services its host can match and no others.
func TestRuleChangeRecomputesOnlyItsServices(t *testing.T) {
	var objs []any
	for i := 0; i < 50; i++ {
		objs = append(objs, fixtures.Service("ns1", fmt.Sprintf("s%d", i), fixtures.HTTP...))
	}
	g := rigs.NewGraph(t, objs...)
	changed := make(chan string, 100)
	g.ServicePolicies.RegisterBatch(func(evs []krt.Event[collections.ServicePolicy]) {
		for _, e := range evs {
			changed <- e.Latest().Service
		}
	}, false)
	recomputes := func() uint64 {
		n, _ := g.Description.Snapshot().Node(graphs.NamePolicies)
		return n.Recomputes
	}
	before := recomputes()
	rule := func(name, host string) *networkingclient.DestinationRule {
		return &networkingclient.DestinationRule{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns1"},
			Spec: networking.DestinationRule{Host: host, Subsets: []*networking.Subset{{Name: "v1", Labels: map[string]string{"v": "1"}}}}}
	}
	g.In.Apply(rule("a", "s7"), false)
	if got := <-changed; got != "ns1/s7" {
		t.Fatalf("policy of %s changed", got)
	}
	// A second rule, for another host: its event proves the first change is fully processed.
	g.In.Apply(rule("b", "s8.ns1.svc.cluster.local"), false)
	if got := <-changed; got != "ns1/s8" {
		t.Fatalf("policy of %s changed", got)
	}
	if d := recomputes() - before; d != 2 {
		t.Fatalf("two rules for one service each recomputed %d service policies, want 2", d)
	}
	// A wildcard rule matches every service of the namespace.
	g.In.Apply(rule("c", "*.ns1.svc.cluster.local"), false)
	for i := 0; i < 50; i++ {
		<-changed
	}
	if d := recomputes() - before; d != 52 {
		t.Fatalf("a wildcard rule recomputed %d policies, want 50 more", d-2)
	}
}
