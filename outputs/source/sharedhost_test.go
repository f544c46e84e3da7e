package source_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/istio/pkg/test"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/explain"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/policy"
)

const sharedHostMesh = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api-a, namespace: a, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  hosts: [api.example.com]
  resolution: STATIC
  ports: [{number: 80, name: http}]
  endpoints: [{address: 10.1.0.1}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api-a2, namespace: a, creationTimestamp: "2026-03-01T00:00:00Z"}
spec:
  hosts: [api.example.com]
  resolution: STATIC
  ports: [{number: 80, name: http}]
  endpoints: [{address: 10.1.0.2}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api-b, namespace: b, creationTimestamp: "2026-02-01T00:00:00Z"}
spec:
  hosts: [api.example.com]
  resolution: STATIC
  ports: [{number: 80, name: http}, {number: 443, name: tls}]
  endpoints: [{address: 10.2.0.1}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: only-b, namespace: d}
spec:
  egress: [{hosts: ["b/*"]}]
`

// TestServiceEntryHostInSeveralNamespaces holds what a proxy is sent for a host ServiceEntries of
// several namespaces define to istiod: one service per (host, namespace), the entries of one
// namespace merged (serviceentry controller: mergeServicesInstancesByNamespaceHost), and each
// proxy's sidecar scope seeing one namespace's (sidecar.go selectServices; push_context.go
// servicesExportedToNamespace): its own namespace's, else one exported to its namespace by name,
// else the oldest public one; a Sidecar's egress hosts choose among those. The CLA, the cluster
// list (CDS) and explain follow the pick, through exportTo changes, deletions and re-creation.
func TestServiceEntryHostInSeveralNamespaces(t *testing.T) {
	const (
		http  = "outbound|80||api.example.com"
		tls   = "outbound|443||api.example.com"
		host  = "api.example.com"
		sixty = 10 * time.Second
	)
	objs, err := rigs.ObjectsOf([]byte(sharedHostMesh))
	if err != nil {
		t.Fatal(err)
	}
	stop := test.NewStop(t)
	gr := rigs.NewGraphWith(t, rigs.GraphOptions{Stop: stop}, objs...)
	g, s, in := gr.Graph, gr.Served, gr.In
	for i, ns := range []string{"a", "b", "c", "d"} {
		ip := fmt.Sprintf("10.9.0.%d", i+1)
		s.Connect(collections.ConnectedProxy{ConnID: ns, ID: "sidecar~" + ip + "~p." + ns + "~" + ns + ".svc.cluster.local", Type: "sidecar", IP: ip, Namespace: ns})
	}
	for i, ns := range []string{"b", "c"} { // proxyless gRPC clients: listeners and routes too
		ip := fmt.Sprintf("10.9.1.%d", i+1)
		s.Connect(collections.ConnectedProxy{ConnID: ns + "-grpc", ID: "sidecar~" + ip + "~g." + ns + "~" + ns + ".svc.cluster.local", Type: "sidecar",
			IP: ip, Namespace: ns, Generator: collections.GeneratorGRPC})
	}
	w := fixtures.NewWaker()
	fixtures.WakeOn(t, w, g.CLAs)
	fixtures.WakeOn(t, w, g.Clusters)
	fixtures.WakeOn(t, w, g.Proxies)
	fixtures.WakeOn(t, w, g.ServiceInfos)
	addresses := func(conn, name string) ([]string, bool) {
		v := s.View(conn)
		if v == nil {
			return nil, false
		}
		r, pending := s.Resolve(v, transforms.TypeCLA, name)
		if pending || r == nil {
			return nil, false
		}
		var out []string
		for _, e := range rigs.CLAEndpoints(t, r) {
			out = append(out, e[:strings.IndexByte(e, ':')])
		}
		return out, true
	}
	clusterNames := func(conn string) []string {
		v := s.View(conn)
		if v == nil {
			return nil
		}
		var out []string
		for _, r := range s.List(v, transforms.TypeCluster) {
			if strings.HasSuffix(r.Name, host) {
				out = append(out, r.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	expect := func(step string, want map[string][]string, clusters map[string][]string) {
		t.Helper()
		for conn, addrs := range want {
			w.Await(t, sixty, step+": "+conn+"'s CLA of "+http, func() (bool, string) {
				got, ok := addresses(conn, http)
				return ok && slices.Equal(got, addrs), fmt.Sprintf("%v, want %v", got, addrs)
			})
		}
		for conn, names := range clusters {
			w.Await(t, sixty, step+": "+conn+"'s clusters", func() (bool, string) {
				got := clusterNames(conn)
				return slices.Equal(got, names), fmt.Sprintf("%v, want %v", got, names)
			})
		}
	}
	aEndpoints, bEndpoints := []string{"10.1.0.1", "10.1.0.2"}, []string{"10.2.0.1"}
	both := []string{tls, http} // sorted
	// Each namespace its own (a's two entries merged); c, in neither, the oldest (a's); d's
	// Sidecar imports b's only.
	expect("at first", map[string][]string{"a": aEndpoints, "b": bEndpoints, "c": aEndpoints, "d": bEndpoints},
		map[string][]string{"a": {http}, "b": both, "c": {http}, "d": both})
	// A port only b's service has: the others' proxies get an empty CLA.
	for conn, want := range map[string][]string{"b": bEndpoints, "a": nil, "c": nil} {
		w.Await(t, sixty, conn+"'s CLA of "+tls, func() (bool, string) {
			got, ok := addresses(conn, tls)
			return ok && slices.Equal(got, want), fmt.Sprint(got)
		})
	}
	// gRPC clients: the listener and route of a port only the picked service has.
	for conn, want := range map[string]bool{"b-grpc": true, "c-grpc": false} {
		w.Await(t, sixty, conn+"'s listener of port 443", func() (bool, string) {
			v := s.View(conn)
			if v == nil {
				return false, "no view"
			}
			l, _ := s.Resolve(v, transforms.TypeListener, host+":443")
			r, _ := s.Resolve(v, transforms.TypeRoute, tls)
			var listed []string
			for _, l := range s.List(v, transforms.TypeListener) {
				if strings.HasPrefix(l.Name, host) {
					listed = append(listed, l.Name)
				}
			}
			ok := (l != nil) == want && (r != nil) == want && slices.Contains(listed, host+":443") == want && slices.Contains(listed, host+":80")
			return ok, fmt.Sprintf("listener %v, route %v, listed %v", l != nil, r != nil, listed)
		})
	}
	if set := g.CLAs.GetKey(http); set != nil {
		t.Errorf("a shared host's CLA is keyed by its name alone: %+v", set)
	}
	if set := g.CLAs.GetKey(policy.OwnedKey("b", http)); set == nil {
		t.Error("b's CLA is not keyed by its namespace")
	}
	explained, err := explain.Explain(s, g.Proxies.GetKey("c"), http, "")
	if err != nil || !slices.ContainsFunc(explained.Facts, func(f string) bool { return strings.Contains(f, "the proxy sees namespace a's") }) ||
		len(explained.Endpoints) != 2 || !explained.Endpoints[0].Sent {
		t.Errorf("explain for c: %v %+v", err, explained)
	}

	// b's entry exported to c (and b) by name: c now sees b's, before the older public one; a
	// still its own; d, whose Sidecar imports b's only, none.
	apiB := entryOf(t, objs, "b", "api-b")
	apiB.Spec.ExportTo = []string{"c", "b"}
	in.Apply(apiB, false)
	expect("b exported to c", map[string][]string{"a": aEndpoints, "b": bEndpoints, "c": bEndpoints, "d": nil},
		map[string][]string{"c": both, "d": nil})

	// a's entries deleted: the host is b's alone (keyed by name again), visible where b exports it.
	in.Apply(entryOf(t, objs, "a", "api-a"), true)
	in.Apply(entryOf(t, objs, "a", "api-a2"), true)
	expect("a's entries deleted", map[string][]string{"a": nil, "b": bEndpoints, "c": bEndpoints, "d": nil},
		map[string][]string{"a": nil, "c": both})
	w.Await(t, sixty, "the host's CLA keyed by its name", func() (bool, string) {
		return g.CLAs.GetKey(http) != nil && g.CLAs.GetKey(policy.OwnedKey("b", http)) == nil, "still keyed by namespace"
	})

	// One of a's entries re-created: shared again, a's proxy gets a's.
	in.Apply(entryOf(t, objs, "a", "api-a2"), false)
	expect("a's entry re-created", map[string][]string{"a": {"10.1.0.2"}, "b": bEndpoints, "c": bEndpoints, "d": nil},
		map[string][]string{"a": {http}, "c": both})
	explained, err = explain.Explain(s, g.Proxies.GetKey("a"), http, "")
	if err != nil || len(explained.Endpoints) != 1 || explained.Endpoints[0].Address != "10.1.0.2" || !explained.Endpoints[0].Sent {
		t.Errorf("explain for a: %v %+v", err, explained)
	}
}

// entryOf is a copy of the ServiceEntry ns/name among objs.
func entryOf(t *testing.T, objs []any, ns, name string) *networkingclient.ServiceEntry {
	t.Helper()
	for _, o := range objs {
		if se, ok := o.(*networkingclient.ServiceEntry); ok && se.Namespace == ns && se.Name == name {
			return se.DeepCopy()
		}
	}
	t.Fatalf("no ServiceEntry %s/%s", ns, name)
	return nil
}
