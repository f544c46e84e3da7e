package serving

import (
	"slices"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
)

func decode(t *testing.T, yaml string) []any {
	t.Helper()
	out, err := rigs.ObjectsOf([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// versioned mesh: foo-1 is v1, foo-2 and foo-3 are v2.
func versionedMesh() []any {
	objs := mesh()
	for _, o := range objs {
		if p, ok := o.(interface{ GetLabels() map[string]string }); ok {
			if l := p.GetLabels(); l != nil && l["app"] == "foo" {
				l["version"] = "v2"
			}
		}
	}
	objs[4].(interface{ GetLabels() map[string]string }).GetLabels()["version"] = "v1"
	return objs
}

const drSubsets = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: foo, namespace: ns1}
spec:
  host: foo
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 5}
  subsets:
  - name: v1
    labels: {version: v1}
  - name: v2
    labels: {version: v2}
    trafficPolicy:
      tls: {mode: DISABLE}
`

func TestDestinationRuleSubsetsAndLocalityFailover(t *testing.T) {
	r := newRig(t, append(versionedMesh(), decode(t, drSubsets)...)...)
	n := sidecar("10.9.0.1", "ns1")
	n.Locality = &core.Locality{Region: "r1", Zone: "z1"}
	s := r.Open(n)

	// CDS lists the subset clusters.
	_ = s.Request(adsclient.TypeCluster)
	resp := recv(t, s)
	cls, err := adsclient.Decode(resp, func() *cluster.Cluster { return &cluster.Cluster{} })
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cls {
		names = append(names, c.Name)
	}
	slices.Sort(names)
	want := []string{"outbound|80|v1|foo.ns1.svc.cluster.local", "outbound|80|v2|foo.ns1.svc.cluster.local", fooCluster}
	if !slices.Equal(names, want) {
		t.Fatalf("clusters %v, want %v", names, want)
	}
	_ = s.Ack(resp)

	get := func(name string) []string {
		t.Helper()
		if err := s.Request(adsclient.TypeCLA, name); err != nil {
			t.Fatal(err)
		}
		for {
			resp := recv(t, s)
			if resp.TypeUrl != adsclient.TypeCLA {
				continue
			}
			cla := onlyCLA(t, resp)
			_ = s.Ack(resp, name)
			return endpointsOf(cla)
		}
	}
	// outlierDetection turns on failover: same zone 0, same region 1, other region 2.
	if got := get(fooCluster); !slices.Equal(got, []string{"10.0.0.1:8080 HEALTHY p0 r1/z1", "10.0.0.2:8080 HEALTHY p1 r1/z2", "10.0.0.3:8080 HEALTHY p2 r2/z3"}) {
		t.Fatalf("failover priorities: %v", got)
	}
	if got := get("outbound|80|v1|foo.ns1.svc.cluster.local"); !slices.Equal(got, []string{"10.0.0.1:8080 HEALTHY p0 r1/z1"}) {
		t.Fatalf("subset v1: %v", got)
	}
	v2, err := adsclient.CLAs(func() *discovery.DiscoveryResponse {
		_ = s.Request(adsclient.TypeCLA, "outbound|80|v2|foo.ns1.svc.cluster.local")
		return recv(t, s)
	}())
	if err != nil || len(v2) != 1 {
		t.Fatal(err)
	}
	if got := endpointsOf(v2[0]); !slices.Equal(got, []string{"10.0.0.2:8080 HEALTHY p0 r1/z2", "10.0.0.3:8080 HEALTHY p1 r2/z3"}) {
		t.Fatalf("subset v2: %v", got)
	}
	for _, l := range v2[0].Endpoints {
		for _, e := range l.LbEndpoints {
			if _, ok := e.GetMetadata().GetFilterMetadata()["envoy.transport_socket_match"]; ok {
				t.Fatal("tls.mode DISABLE must drop the tlsMode metadata")
			}
		}
	}
}

const drMinHealth = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: foo, namespace: ns1}
spec:
  host: foo.ns1.svc.cluster.local
  trafficPolicy:
    loadBalancer:
      localityLbSetting: {enabled: false}
    outlierDetection: {consecutive5xxErrors: 5, minHealthPercent: 50}
`

func TestMinHealthPercentStopsUnhealthyEndpoints(t *testing.T) {
	objs := mesh()
	objs[7] = fooSlice(fixtures.Ready, fixtures.NotReady, fixtures.Ready)
	r := newRig(t, append(objs, decode(t, drMinHealth)...)...)
	s := r.Open(sidecar("10.9.0.1", "ns1"))
	_ = s.Request(adsclient.TypeCLA, fooCluster)
	if got := endpointsOf(onlyCLA(t, recv(t, s))); !slices.Equal(got, []string{"10.0.0.1:8080 HEALTHY p0 r1/z1", "10.0.0.3:8080 HEALTHY p0 r2/z3"}) {
		t.Fatalf("with minHealthPercent > 0 and locality LB disabled: %v", got)
	}
}

const exportedOnlyHere = `
apiVersion: v1
kind: Service
metadata:
  name: private
  namespace: ns1
  annotations: {networking.istio.io/exportTo: "."}
spec: {clusterIP: 10.96.0.20, selector: {app: private}, ports: [{name: http, port: 80, targetPort: 8080}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: private-a, namespace: ns1, labels: {kubernetes.io/service-name: private}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- addresses: [10.0.7.1]
  conditions: {ready: true}
`

func TestVisibility(t *testing.T) {
	sidecarYAML := `
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: ns3}
spec:
  egress:
  - hosts: ["./*"]
`
	r := newRig(t, append(append(mesh(), decode(t, exportedOnlyHere)...), decode(t, sidecarYAML)...)...)
	private := "outbound|80||private.ns1.svc.cluster.local"

	inside := r.Open(sidecar("10.9.0.1", "ns1"))
	outside := r.Open(sidecar("10.9.0.2", "ns2"))
	scoped := r.Open(sidecar("10.9.0.3", "ns3"))
	for _, c := range []struct {
		name string
		s    *adsclient.Stream
		want int
	}{{"same namespace", inside, 1}, {"other namespace", outside, 0}, {"Sidecar ./*", scoped, 0}} {
		_ = c.s.Request(adsclient.TypeCLA, private)
		resp := recv(t, c.s)
		if n := len(endpointsOf(onlyCLA(t, resp))); n != c.want {
			t.Fatalf("%s: %d endpoints, want %d", c.name, n, c.want)
		}
		_ = c.s.Ack(resp, private)
	}
	// CDS: the private service only where it is visible; the Sidecar hides foo from ns3 too.
	for _, c := range []struct {
		name string
		s    *adsclient.Stream
		want []string
	}{{"same namespace", inside, []string{fooCluster, private}}, {"other namespace", outside, []string{fooCluster}}, {"Sidecar ./*", scoped, nil}} {
		_ = c.s.Request(adsclient.TypeCluster)
		resp := recv(t, c.s)
		cls, _ := adsclient.Decode(resp, func() *cluster.Cluster { return &cluster.Cluster{} })
		var got []string
		for _, cl := range cls {
			got = append(got, cl.Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Fatalf("%s: clusters %v, want %v", c.name, got, c.want)
		}
		_ = c.s.Ack(resp)
		// The next EDS request after CDS is answered (Envoy warming).
		_ = c.s.Request(adsclient.TypeCLA, private)
		_ = c.s.Ack(recv(t, c.s), private)
	}
	// A change to the private service pushes to the proxy that sees it, and to no other.
	before := map[string]int{}
	for _, st := range r.Srv.Statuses() {
		before[st.Proxy.IP] = st.Types[adsclient.TypeCLA].Responses
	}
	changed := time.Now()
	r.In.Apply(decode(t, strings.Replace(exportedOnlyHere[strings.Index(exportedOnlyHere, "apiVersion: discovery"):], "10.0.7.1", "10.0.7.2", 1))[0], false)
	resp := recv(t, inside)
	waitTold(t, r, adsclient.TypeCLA, private, changed)
	if got := endpointsOf(onlyCLA(t, resp)); len(got) != 1 || !strings.HasPrefix(got[0], "10.0.7.2") {
		t.Fatalf("visible proxy: %v", got)
	}
	expectNone(t, outside)
	expectNone(t, scoped)
	for _, st := range r.Srv.Statuses() {
		if st.Proxy.IP != "10.9.0.1" && st.Types[adsclient.TypeCLA].Responses != before[st.Proxy.IP] {
			t.Fatalf("proxy %s cannot see the service but got a push", st.Proxy.IP)
		}
	}
}

func TestDestinationRuleEditRecomputesOnlyItsHosts(t *testing.T) {
	objs := mesh()
	for i := 0; i < 20; i++ {
		name := "other-" + string(rune('a'+i))
		objs = append(objs, fixtures.Service("ns1", name, fixtures.HTTP...))
	}
	r := newRig(t, objs...)
	n := sidecar("10.9.0.1", "ns1")
	n.Locality = &core.Locality{Region: "r1", Zone: "z1"}
	s := r.Open(n)
	_ = s.Request(adsclient.TypeCLA, fooCluster)
	_ = s.Ack(recv(t, s), fooCluster)
	count := func() uint64 {
		n, _ := r.Description.Snapshot().Node(graphs.NameCLAs)
		return n.Recomputes
	}
	// The answer above needed the proxy's view, not its class: the class may still be on its
	// way. A rule that makes foo's CLAs per class, applied before the class arrives, recomputes
	// foo once for the rule and once more for the class; the baseline is taken once it is there.
	waitClassOf(t, r)
	before := count()
	r.In.Apply(decode(t, drSubsets)[0], false)
	resp := recv(t, s) // the new policy (failover priorities) reaches the proxy
	if got := endpointsOf(onlyCLA(t, resp)); !slices.Contains(got, "10.0.0.3:8080 HEALTHY p2 r2/z3") {
		t.Fatalf("after the DestinationRule: %v", got)
	}
	_ = s.Ack(resp, fooCluster)
	// A rule for another service, after it: once its CLA has changed, every recomputation the
	// first rule caused has happened (the CLA collection works through its changes in order).
	otherCLA := r.CLAs.GetKey("outbound|80||other-a.ns1.svc.cluster.local").Shared.Version
	r.In.Apply(decode(t, strings.NewReplacer("host: foo", "host: other-a", "{name: foo,", "{name: other-a,").Replace(drSubsets))[0], false)
	r.Await(t, "the second rule to reach its service's CLA", func() (bool, string) {
		set := r.CLAs.GetKey("outbound|80||other-a.ns1.svc.cluster.local")
		return set != nil && (set.Shared == nil || set.Shared.Version != otherCLA), "the CLA of other-a unchanged"
	})
	if d := count() - before; d != 2 {
		t.Fatalf("two DestinationRules, each for one service, recomputed %d services' CLAs, want 2", d)
	}
}

func TestInvalidDestinationRuleIsReportedAndIgnored(t *testing.T) {
	bad := `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: bad, namespace: ns1}
spec:
  host: foo
  subsets:
  - name: v1
    labels: {"not a label": x}
`
	r := newRig(t, append(mesh(), decode(t, bad)...)...)
	s := r.Open(sidecar("10.9.0.1", "ns1"))
	_ = s.Request(adsclient.TypeCLA, fooCluster)
	if n := len(endpointsOf(onlyCLA(t, recv(t, s)))); n != 3 {
		t.Fatalf("the mesh must be unaffected: %d endpoints", n)
	}
	// Problems is computed with the graph, which has synced: the rule's entry is there.
	ps := r.Problems.List()
	if len(ps) != 1 || ps[0].ResourceName() != "DestinationRule/ns1/bad" || ps[0].Problems[0].Reason != collections.ReasonInvalidDestinationRule {
		t.Fatalf("problems %+v", ps)
	}
}

// twoPorts is a service of two ports, each with one ready endpoint, in ns1.
const twoPorts = `
apiVersion: v1
kind: Service
metadata: {name: two, namespace: ns1}
spec: {clusterIP: 10.96.0.30, selector: {app: two}, ports: [{name: http, port: 80, targetPort: 8080}, {name: admin, port: 9090, targetPort: 9090}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: two-a, namespace: ns1, labels: {kubernetes.io/service-name: two}}
addressType: IPv4
ports: [{name: http, port: 8080}, {name: admin, port: 9090}]
endpoints:
- addresses: [10.0.8.1]
  conditions: {ready: true}
`

// TestSidecarEgressListenerPorts: a Sidecar's egress listener bound to a port imports, of its
// hosts, the services that have that port, and that port only (istiod's sidecar scope): the
// proxy gets the port's CLA, an empty CLA for the other port, and CDS lists the port's
// clusters only; a service without the port is not visible at all.
func TestSidecarEgressListenerPorts(t *testing.T) {
	sidecarYAML := `
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: ns4}
spec:
  egress:
  - port: {number: 9090, protocol: HTTP, name: admin}
    hosts: ["ns1/*"]
`
	r := newRig(t, append(append(mesh(), decode(t, twoPorts)...), decode(t, sidecarYAML)...)...)
	admin, http := "outbound|9090||two.ns1.svc.cluster.local", "outbound|80||two.ns1.svc.cluster.local"
	scoped := r.Open(sidecar("10.9.0.4", "ns4"))
	open := r.Open(sidecar("10.9.0.5", "ns5"))
	for _, c := range []struct {
		name    string
		s       *adsclient.Stream
		cluster string
		want    int
	}{{"the listener's port", scoped, admin, 1}, {"another port", scoped, http, 0}, {"a service without the port", scoped, fooCluster, 0},
		{"no Sidecar: the other port", open, http, 1}} {
		_ = c.s.Request(adsclient.TypeCLA, c.cluster)
		resp := recv(t, c.s)
		if n := len(endpointsOf(onlyCLA(t, resp))); n != c.want {
			t.Fatalf("%s (%s): %d endpoints, want %d", c.name, c.cluster, n, c.want)
		}
		_ = c.s.Ack(resp, c.cluster)
	}
	_ = scoped.Request(adsclient.TypeCluster)
	resp := recv(t, scoped)
	cls, _ := adsclient.Decode(resp, func() *cluster.Cluster { return &cluster.Cluster{} })
	var got []string
	for _, cl := range cls {
		got = append(got, cl.Name)
	}
	if !slices.Equal(got, []string{admin}) {
		t.Fatalf("clusters %v, want only %s", got, admin)
	}
}

// Rules for foo in ns4: one for every proxy there, one for the proxies labelled app=client
// (another subset canary, no mTLS, round robin).
const drWorkloadSelector = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: foo-all, namespace: ns4}
spec:
  host: foo.ns1.svc.cluster.local
  subsets:
  - name: canary
    labels: {version: v2}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: foo-client, namespace: ns4}
spec:
  host: foo.ns1.svc.cluster.local
  workloadSelector:
    matchLabels: {app: client}
  trafficPolicy:
    loadBalancer: {simple: ROUND_ROBIN}
    tls: {mode: DISABLE}
  subsets:
  - name: canary
    labels: {version: v1}
`

// TestDestinationRuleWorkloadSelector: a rule with a workloadSelector applies to the proxies of
// its namespace it selects, ahead of the namespace's other rule: its subset picks their
// endpoints, its TLS mode their tlsMode, its policy their cluster; the namespace's other proxies
// get the other rule, other namespaces neither. A change of the selector moves the proxies.
func TestDestinationRuleWorkloadSelector(t *testing.T) {
	objs := versionedMesh()
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			p.Labels["security.istio.io/tlsMode"] = "istio"
		}
	}
	r := newRig(t, append(objs, decode(t, drWorkloadSelector)...)...)
	canary := "outbound|80|canary|foo.ns1.svc.cluster.local"
	client := sidecar("10.9.0.6", "ns4")
	client.Labels = map[string]string{"app": "client"}
	other := sidecar("10.9.0.7", "ns4")
	other.Labels = map[string]string{"app": "other"}
	selected, unselected, elsewhere := r.Open(client), r.Open(other), r.Open(sidecar("10.9.0.8", "ns5"))
	v1 := []string{"10.0.0.1:8080 HEALTHY p0 r1/z1"}
	v2 := []string{"10.0.0.2:8080 HEALTHY p0 r1/z2", "10.0.0.3:8080 HEALTHY p0 r2/z3"}
	for _, c := range []struct {
		name string
		s    *adsclient.Stream
		want []string
		tls  string
	}{
		{"selected: its rule's subset, no mTLS", selected, v1, ""},
		{"not selected: the namespace's rule", unselected, v2, "istio"},
		{"another namespace: no rule, every endpoint", elsewhere, append(slices.Clone(v1), v2...), "istio"},
	} {
		_ = c.s.Request(adsclient.TypeCLA, canary)
		resp := recv(t, c.s)
		cla := onlyCLA(t, resp)
		if got := endpointsOf(cla); !slices.Equal(got, c.want) {
			t.Fatalf("%s: endpoints %v, want %v", c.name, got, c.want)
		}
		for _, m := range tlsModes(cla) {
			if m != c.tls {
				t.Fatalf("%s: tlsMode %q, want %q", c.name, m, c.tls)
			}
		}
		_ = c.s.Ack(resp, canary)
	}
	lbOf := func(s *adsclient.Stream) cluster.Cluster_LbPolicy {
		_ = s.Request(adsclient.TypeCluster)
		resp := recv(t, s)
		cls, _ := adsclient.Decode(resp, func() *cluster.Cluster { return &cluster.Cluster{} })
		_ = s.Ack(resp)
		for _, cl := range cls {
			if cl.Name == canary {
				return cl.LbPolicy
			}
		}
		t.Fatalf("no cluster %s", canary)
		return 0
	}
	if lb := lbOf(selected); lb != cluster.Cluster_ROUND_ROBIN {
		t.Errorf("selected proxy's cluster: %v, want ROUND_ROBIN", lb)
	}
	if lb := lbOf(unselected); lb != cluster.Cluster_LEAST_REQUEST {
		t.Errorf("unselected proxy's cluster: %v, want LEAST_REQUEST", lb)
	}

	// The selector stops matching: the proxy gets the namespace's rule, cluster and endpoints.
	r.In.Apply(decode(t, strings.Replace(drWorkloadSelector, "{app: client}", "{app: nobody}", 1))[1], false)
	for got := 0; got != 3; {
		resp := recv(t, selected)
		switch resp.TypeUrl {
		case adsclient.TypeCLA:
			if eps := endpointsOf(onlyCLA(t, resp)); !slices.Equal(eps, v2) {
				t.Fatalf("after the selector changed: endpoints %v, want %v", eps, v2)
			}
			got |= 1
			_ = selected.Ack(resp, canary)
		case adsclient.TypeCluster:
			cls, _ := adsclient.Decode(resp, func() *cluster.Cluster { return &cluster.Cluster{} })
			i := slices.IndexFunc(cls, func(cl *cluster.Cluster) bool { return cl.Name == canary })
			if i < 0 || cls[i].LbPolicy != cluster.Cluster_LEAST_REQUEST {
				t.Fatalf("after the selector changed: clusters %v, want %s with LEAST_REQUEST", cls, canary)
			}
			got |= 2
			_ = selected.Ack(resp)
		}
	}
}
