package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	networking "istio.io/api/networking/v1"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms/transformtest"
)

func visTestService(ns, name string, exportTo ...string) *collections.ServiceInfo {
	return &collections.ServiceInfo{Name: name, Namespace: ns, Hostname: name + "." + ns + ".svc.cluster.local", ExportTo: exportTo}
}

func TestVisibilityServiceExportTo(t *testing.T) {
	cases := []struct {
		name     string
		exportTo []string
		// visible maps proxy namespaces to the expected answer; the service is in ns1.
		visible map[string]bool
	}{
		{"no annotation: everywhere", nil, map[string]bool{"ns1": true, "ns2": true}},
		{"*: everywhere", []string{"*"}, map[string]bool{"ns1": true, "ns2": true}},
		{".: own namespace", []string{"."}, map[string]bool{"ns1": true, "ns2": false}},
		{"~: nowhere, not even its own namespace", []string{"~"}, map[string]bool{"ns1": false, "ns2": false}},
		{"namespace list", []string{"ns2", "ns3"}, map[string]bool{"ns1": false, "ns2": true, "ns3": true, "ns4": false}},
		{"own namespace by name", []string{"ns1"}, map[string]bool{"ns1": true, "ns2": false}},
		{". and a namespace", []string{".", "ns2"}, map[string]bool{"ns1": true, "ns2": true, "ns3": false}},
		{"~ with namespaces: nowhere", []string{"~", "ns2"}, map[string]bool{"ns1": false, "ns2": false}},
		{"* with ~: everywhere", []string{"*", "~"}, map[string]bool{"ns1": true, "ns2": true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			svc := visTestService("ns1", "foo", c.exportTo...)
			for ns, want := range c.visible {
				if got := serviceExportedTo(svc.Visibility(), ns); got != want {
					t.Errorf("exportTo %v, proxy in %s: got %v, want %v", c.exportTo, ns, got, want)
				}
				if got := Visible(svc.Visibility(), ns, nil); got != want {
					t.Errorf("Visible without Sidecar, exportTo %v, proxy in %s: got %v, want %v", c.exportTo, ns, got, want)
				}
			}
		})
	}
}

func TestVisibilitySidecarEgress(t *testing.T) {
	foo := visTestService("ns1", "foo")
	bar := visTestService("ns1", "bar")
	baz := visTestService("ns2", "baz")
	all := []*collections.ServiceInfo{foo, bar, baz}
	cases := []struct {
		name  string
		hosts []string
		// want lists the visible services for a proxy in ns1.
		want []string
	}{
		{"no Sidecar: everything", nil, []string{"foo", "bar", "baz"}},
		{"*/*", []string{"*/*"}, []string{"foo", "bar", "baz"}},
		{"./*: the proxy's namespace", []string{"./*"}, []string{"foo", "bar"}},
		{"ns2/*", []string{"ns2/*"}, []string{"baz"}},
		{"a namespace and the system namespace", []string{"./*", "istio-system/*"}, []string{"foo", "bar"}},
		{"exact host in a namespace", []string{"ns1/foo.ns1.svc.cluster.local"}, []string{"foo"}},
		{"exact host in any namespace", []string{"*/baz.ns2.svc.cluster.local"}, []string{"baz"}},
		{"exact host in the wrong namespace", []string{"ns2/foo.ns1.svc.cluster.local"}, nil},
		{"wildcard suffix", []string{"*/*.ns1.svc.cluster.local"}, []string{"foo", "bar"}},
		{"wildcard suffix in a namespace", []string{"ns2/*.svc.cluster.local"}, []string{"baz"}},
		{"~/*: nothing", []string{"~/*"}, nil},
		{"~/* excludes even what other entries import", []string{"~/*", "./*"}, nil},
		{"exclude one host of a namespace", []string{"~ns1/foo.ns1.svc.cluster.local", "*/*"}, []string{"bar", "baz"}},
		{"exclude the proxy's namespace", []string{"~./*", "*/*"}, []string{"baz"}},
		{"exclude a suffix everywhere", []string{"~*/*.ns2.svc.cluster.local", "*/*"}, []string{"foo", "bar"}},
		{"exclusion in another namespace does not apply", []string{"~ns2/foo.ns1.svc.cluster.local", "*/*"}, []string{"foo", "bar", "baz"}},
		{"entries not of the form ns/host are ignored", []string{"foo.ns1.svc.cluster.local", "ns1/a/b", "ns2/*"}, []string{"baz"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, s := range all {
				imported := sidecarImports(c.hosts, "ns1", s.Visibility())
				if imported {
					got = append(got, s.Name)
				}
				if Visible(s.Visibility(), "ns1", egressOn(0, c.hosts...)) != imported {
					t.Errorf("%s: Visible disagrees with sidecarImports for an exported service", s.Name)
				}
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("visible services (-want +got):\n%s", diff)
			}
		})
	}
}

func TestVisibilityVisibleCombines(t *testing.T) {
	private := visTestService("ns2", "priv", ".").Visibility()
	if Visible(private, "ns1", egressOn(0, "*/*")) {
		t.Error("a Sidecar cannot import a service not exported to the proxy's namespace")
	}
	if !Visible(private, "ns2", egressOn(0, "./*")) {
		t.Error("a private service is visible in its namespace through ./*")
	}
	if Visible(visTestService("ns2", "pub").Visibility(), "ns1", egressOn(0, "./*")) {
		t.Error("an exported service is hidden by the Sidecar")
	}
}

// egressOn is a Sidecar's egress listener of a port (0: none) with hosts; nil without hosts.
func egressOn(port uint32, hosts ...string) []collections.EgressListener {
	if hosts == nil {
		return nil
	}
	return []collections.EgressListener{{Port: port, Hosts: hosts}}
}

// TestVisibilityEgressListenerPorts: istiod's sidecar scope selects services per egress
// listener (pilot/pkg/model/sidecar.go selectServices, needsPortMatch,
// serviceMatchingListenerPort): a listener bound to a port imports, of its hosts, the services
// that have that port, and of them only that port; each listener applies its own exclusions; a
// service no listener admits is not visible.
func TestVisibilityEgressListenerPorts(t *testing.T) {
	svc := func(ns, name string, ports ...int32) *collections.ServiceInfo {
		s := visTestService(ns, name)
		s.Ports = nil
		for _, p := range ports {
			s.Ports = append(s.Ports, collections.ServicePort{Name: fmt.Sprint("p", p), Port: p, Protocol: "TCP"})
		}
		return s
	}
	web := svc("ns1", "web", 80, 8080)
	db := svc("ns1", "db", 5432)
	other := svc("ns2", "other", 80)
	on := func(port uint32, hosts ...string) collections.EgressListener {
		return collections.EgressListener{Port: port, Hosts: hosts}
	}
	type want map[string][]uint32 // service → its visible ports
	cases := []struct {
		name   string
		egress []collections.EgressListener
		want   want
	}{
		{"no Sidecar: every port", nil, want{"web": {80, 8080}, "db": {5432}, "other": {80}}},
		{"a listener without a port: every port of what it imports", []collections.EgressListener{on(0, "./*")},
			want{"web": {80, 8080}, "db": {5432}}},
		{"a listener on port 80: the services with port 80, that port only", []collections.EgressListener{on(80, "*/*")},
			want{"web": {80}, "other": {80}}},
		{"a port no service has: nothing", []collections.EgressListener{on(9999, "*/*")}, want{}},
		{"two listeners: the union, port by port", []collections.EgressListener{on(5432, "./*"), on(8080, "*/*")},
			want{"web": {8080}, "db": {5432}}},
		{"a port listener and a catch-all of another namespace", []collections.EgressListener{on(80, "./*"), on(0, "ns2/*")},
			want{"web": {80}, "other": {80}}},
		{"an exclusion applies to its own listener only", []collections.EgressListener{on(80, "~ns1/web.ns1.svc.cluster.local", "*/*"), on(8080, "./*")},
			want{"web": {8080}, "other": {80}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := want{}
			for _, s := range []*collections.ServiceInfo{web, db, other} {
				for _, p := range s.Ports {
					if Visible(s.PortVisibility(p.Port), "ns1", c.egress) {
						got[s.Name] = append(got[s.Name], uint32(p.Port))
					}
				}
				if anyPort := Visible(s.Visibility(), "ns1", c.egress); anyPort != (len(got[s.Name]) > 0) {
					t.Errorf("%s: visible as a service %v, with ports %v", s.Name, anyPort, got[s.Name])
				}
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("visible ports (-want +got):\n%s", diff)
			}
		})
	}
}

func TestVisibilitySidecarFor(t *testing.T) {
	const root = "istio-system"
	at := func(sec int) time.Time { return time.Date(2026, 1, 1, 0, 0, sec, 0, time.UTC) }
	sidecars := []collections.Sidecar{
		{Name: "default", Namespace: "ns1", CreationTime: at(5)},
		{Name: "default-older", Namespace: "ns1", CreationTime: at(1)},
		{Name: "app-a", Namespace: "ns1", CreationTime: at(3), WorkloadSelector: map[string]string{"app": "a"}},
		{Name: "app-a-too", Namespace: "ns1", CreationTime: at(3), WorkloadSelector: map[string]string{"app": "a", "v": "1"}},
		{Name: "empty-selector", Namespace: "ns3", CreationTime: at(1), WorkloadSelector: map[string]string{}},
		{Name: "app-b", Namespace: "ns2", CreationTime: at(1), WorkloadSelector: map[string]string{"app": "b"}},
		{Name: "mesh-selected", Namespace: root, CreationTime: at(0), WorkloadSelector: map[string]string{"app": "b"}},
		{Name: "mesh", Namespace: root, CreationTime: at(2)},
	}
	cases := []struct {
		name   string
		ns     string
		labels map[string]string
		want   string
	}{
		{"selector match wins over the namespace default", "ns1", map[string]string{"app": "a", "v": "1"}, "ns1/app-a"},
		{"no selector match: the oldest namespace default", "ns1", map[string]string{"app": "z"}, "ns1/default-older"},
		{"an empty selector selects everything", "ns3", nil, "ns3/empty-selector"},
		{"no match in the namespace: the root default", "ns2", map[string]string{"app": "c"}, root + "/mesh"},
		{"a root Sidecar with a selector applies to nobody else", "ns4", map[string]string{"app": "b"}, root + "/mesh"},
		{"selector match in the proxy's namespace", "ns2", map[string]string{"app": "b"}, "ns2/app-b"},
		{"root proxies use their namespace's rules", root, map[string]string{"app": "b"}, root + "/mesh-selected"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := SidecarFor(sidecars, c.ns, c.labels, root)
			if got == nil || got.ResourceName() != c.want {
				t.Errorf("got %v, want %s", got, c.want)
			}
		})
	}
	if got := SidecarFor(sidecars[:2], "ns9", nil, root); got != nil {
		t.Errorf("no Sidecar applies: got %s", got.ResourceName())
	}
}

func TestVisibilityConvertSidecar(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	meta := metav1.ObjectMeta{Namespace: "ns1", Name: "sc", CreationTimestamp: metav1.NewTime(created)}
	cases := []struct {
		name   string
		in     *networkingclient.Sidecar
		want   *collections.Sidecar
		detail string
	}{
		{name: "nil"},
		{
			name: "egress listeners, their hosts deduplicated, a port bound unless the listener is an HTTP proxy",
			in: &networkingclient.Sidecar{ObjectMeta: meta, Spec: networking.Sidecar{
				WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "a"}},
				Egress: []*networking.IstioEgressListener{
					{Port: &networking.SidecarPort{Number: 9080, Protocol: "HTTP", Name: "http"}, Hosts: []string{"ns2/*", "./*", "ns2/*"}},
					{Port: &networking.SidecarPort{Number: 3128, Protocol: "HTTP_PROXY", Name: "proxy"}, Hosts: []string{"*/*"}},
					{Hosts: []string{"istio-system/*", "./*", "~ns3/*.ns3.svc.cluster.local"}},
				},
			}},
			want: &collections.Sidecar{Name: "sc", Namespace: "ns1", CreationTime: created,
				WorkloadSelector: map[string]string{"app": "a"},
				Egress: []collections.EgressListener{
					{Port: 9080, Hosts: []string{"ns2/*", "./*"}},
					{Hosts: []string{"*/*"}},
					{Hosts: []string{"istio-system/*", "./*", "~ns3/*.ns3.svc.cluster.local"}},
				}},
		},
		{
			name: "no egress listener imports everything",
			in: &networkingclient.Sidecar{ObjectMeta: meta, Spec: networking.Sidecar{
				WorkloadSelector:      &networking.WorkloadSelector{},
				OutboundTrafficPolicy: &networking.OutboundTrafficPolicy{Mode: networking.OutboundTrafficPolicy_REGISTRY_ONLY},
			}},
			want: &collections.Sidecar{Name: "sc", Namespace: "ns1", CreationTime: created, WorkloadSelector: map[string]string{}},
		},
		{name: "empty configuration", in: &networkingclient.Sidecar{ObjectMeta: meta}, detail: "empty configuration"},
		{name: "listener without hosts", in: &networkingclient.Sidecar{ObjectMeta: meta, Spec: networking.Sidecar{
			Egress: []*networking.IstioEgressListener{{}},
		}}, detail: "must contain at least one host"},
		{name: "host without namespace", in: &networkingclient.Sidecar{ObjectMeta: meta, Spec: networking.Sidecar{
			Egress: []*networking.IstioEgressListener{{Hosts: []string{"foo.com"}}},
		}}, detail: "host must be of form namespace/dnsName"},
		{name: "short host name", in: &networkingclient.Sidecar{ObjectMeta: meta, Spec: networking.Sidecar{
			Egress: []*networking.IstioEgressListener{{Hosts: []string{"ns1/foo"}}},
		}}, detail: "short names (non FQDN) are not allowed"},
		{name: "partial wildcard", in: &networkingclient.Sidecar{ObjectMeta: meta, Spec: networking.Sidecar{
			Egress: []*networking.IstioEgressListener{{Hosts: []string{"ns1/*foo.com"}}},
		}}, detail: `partial wildcard "*foo.com" not allowed`},
		{name: "invalid namespace", in: &networkingclient.Sidecar{ObjectMeta: meta, Spec: networking.Sidecar{
			Egress: []*networking.IstioEgressListener{{Hosts: []string{"ns_1/*"}}},
		}}, detail: `invalid namespace value "ns_1"`},
		{name: "selector with a wildcard", in: &networkingclient.Sidecar{ObjectMeta: meta, Spec: networking.Sidecar{
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "*"}},
			Egress:           []*networking.IstioEgressListener{{Hosts: []string{"*/*"}}},
		}}, detail: "wildcard is not supported in selector"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			probs, got := ConvertSidecar(c.in)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("ConvertSidecar (-want +got):\n%s", diff)
			}
			problems := transformtest.ProblemsOf(probs)
			if c.detail == "" {
				if len(problems) > 0 {
					t.Errorf("unexpected problems %v", problems)
				}
				return
			}
			if len(problems) != 1 || problems[0].Reason != collections.ReasonInvalidSidecar || problems[0].Kind != KindSidecar ||
				problems[0].Object != "ns1/sc" || !strings.Contains(problems[0].Detail, c.detail) {
				t.Errorf("problems %v, want one %s containing %q", problems, collections.ReasonInvalidSidecar, c.detail)
			}
		})
	}
}

func TestVisibilitySidecarEquals(t *testing.T) {
	a := collections.Sidecar{Name: "s", Namespace: "ns1", Egress: egressOn(0, "./*")}
	b := a
	if !a.Equals(b) {
		t.Fatal("identical Sidecars differ")
	}
	b.WorkloadSelector = map[string]string{}
	if a.Equals(b) {
		t.Error("no selector equals an empty selector")
	}
	c := a
	c.Egress = egressOn(0, "*/*")
	if a.Equals(c) {
		t.Error("different egress hosts are equal")
	}
	d := a
	d.Egress = egressOn(80, "./*")
	if a.Equals(d) {
		t.Error("listeners of different ports are equal")
	}
}
