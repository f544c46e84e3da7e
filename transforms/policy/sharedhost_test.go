package policy

import (
	"testing"
	"time"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// TestPickHostNamespace holds the namespace whose service of a hostname several namespaces
// define a proxy is sent to istiod's sidecar scope (pilot/pkg/model/sidecar.go:
// convertIstioListenerToWrapper, selectServices with PILOT_UNIFIED_SIDECAR_SCOPE; push_context.go:
// servicesExportedToNamespace, servicesForExactHosts, SortServicesByCreationTime): only what is
// exported to the proxy's namespace and imported by its Sidecar counts; its own namespace's
// wins; else, without a Sidecar or with wildcard egress hosts, the services exported to its
// namespace by name come before the public ones, each oldest first (ties: the lower namespace);
// with only exact egress hosts, the oldest.
func TestPickHostNamespace(t *testing.T) {
	const h = "api.example.com"
	t0 := time.Unix(1000, 0)
	svc := func(ns string, age int, exportTo ...string) *collections.ServiceInfo {
		return &collections.ServiceInfo{Name: h, Namespace: ns, Hostname: h, Registry: collections.RegistryServiceEntry,
			Created: t0.Add(time.Duration(age) * time.Second), SharedHost: true, ExportTo: exportTo}
	}
	view := func(ns string, egress ...string) *collections.View {
		v := &collections.View{Namespace: ns}
		if egress != nil {
			v.Egress = []collections.EgressListener{{Hosts: egress}}
		}
		return v
	}
	cases := []struct {
		name       string
		candidates []*collections.ServiceInfo
		view       *collections.View
		want       string
	}{
		{"the proxy's own namespace", []*collections.ServiceInfo{svc("a", 0), svc("b", 1)}, view("b"), "b"},
		{"the proxy's own namespace, younger", []*collections.ServiceInfo{svc("a", 0), svc("b", 1)}, view("a"), "a"},
		{"a third namespace: the oldest public one", []*collections.ServiceInfo{svc("b", 1), svc("a", 2)}, view("c"), "b"},
		{"created in the same second: the lower namespace", []*collections.ServiceInfo{svc("b", 0), svc("a", 0)}, view("c"), "a"},
		{"exported to the proxy's namespace by name before the public ones, older or not", []*collections.ServiceInfo{svc("a", 0), svc("b", 5, "c")}, view("c"), "b"},
		{"exported by name and to '*' is public", []*collections.ServiceInfo{svc("a", 0), svc("b", 5, "c", "*")}, view("c"), "a"},
		{"of two exported by name, the older", []*collections.ServiceInfo{svc("a", 3, "c"), svc("b", 1, "c", "d")}, view("c"), "b"},
		{"exported to its own namespace only: not to the others", []*collections.ServiceInfo{svc("a", 0, "."), svc("b", 5)}, view("c"), "b"},
		{"exported nowhere: not even to its own namespace", []*collections.ServiceInfo{svc("a", 0, "~"), svc("b", 5)}, view("a"), "b"},
		{"exported to another namespace only", []*collections.ServiceInfo{svc("a", 0, "d"), svc("b", 5, "d")}, view("c"), ""},
		{"a Sidecar importing one namespace", []*collections.ServiceInfo{svc("a", 0), svc("b", 5)}, view("a", "b/*"), "b"},
		{"a Sidecar importing its own namespace only, the host elsewhere", []*collections.ServiceInfo{svc("a", 0), svc("b", 5)}, view("c", "./*"), ""},
		{"a Sidecar excluding the older namespace", []*collections.ServiceInfo{svc("a", 0), svc("b", 5)}, view("c", "*/*", "~a/"+h), "b"},
		{"a Sidecar without egress (*/*)", []*collections.ServiceInfo{svc("a", 0), svc("b", 5, "c")}, view("c", "*/*"), "b"},
		// servicesForExactHosts: the candidates by creation, not exported-by-name first.
		{"exact egress hosts: the oldest, exported by name or not", []*collections.ServiceInfo{svc("a", 0), svc("b", 5, "c")}, view("c", "a/"+h, "b/"+h), "a"},
		{"exact egress hosts: '.' is the proxy's namespace", []*collections.ServiceInfo{svc("a", 0), svc("c", 5)}, view("c", "./"+h, "a/"+h), "c"},
		{"a wildcard host is not exact", []*collections.ServiceInfo{svc("a", 0), svc("b", 5, "c")}, view("c", "a/*.example.com", "b/"+h), "b"},
		{"an exclusion does not make the egress inexact", []*collections.ServiceInfo{svc("a", 0), svc("b", 5, "c")}, view("c", "a/"+h, "b/"+h, "~d/"+h), "a"},
		{"nothing visible", nil, view("c"), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := PickHostNamespace(tc.candidates, tc.view); got != tc.want {
				t.Errorf("picked %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSetKey: only a shared host's sets carry their namespace; a key splits back.
func TestSetKey(t *testing.T) {
	plain := &collections.ServiceInfo{Namespace: "a", Hostname: "api.example.com"}
	shared := &collections.ServiceInfo{Namespace: "a", Hostname: "api.example.com", SharedHost: true}
	name := transforms.ClusterName(80, "", "api.example.com")
	if k := SetKey(plain, name); k != name {
		t.Errorf("plain key %q", k)
	}
	variant := "grpc~ns9/" + name // the key of a gRPC variant for ns9 (cds.ClusterKey)
	k := SetKey(shared, variant)
	if ns, rest := SplitSetKey(k); ns != "a" || rest != variant {
		t.Errorf("split %q: %q, %q", k, ns, rest)
	}
	if ns, rest := SplitSetKey(name); ns != "" || rest != name {
		t.Errorf("split %q: %q, %q", name, ns, rest)
	}
	for typeURL, n := range map[string]string{transforms.TypeCLA: name, transforms.TypeCluster: "outbound|80|v1|api.example.com", transforms.TypeRoute: name, transforms.TypeListener: "api.example.com:80"} {
		if got := HostOfName(typeURL, n); got != "api.example.com" {
			t.Errorf("host of %s %q: %q", typeURL, n, got)
		}
	}
	if got := HostOfName(transforms.TypeCLA, "inbound|80||x"); got != "" {
		t.Errorf("host of a name krteds does not serve: %q", got)
	}
}
