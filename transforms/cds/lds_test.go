package cds

import (
	"testing"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/proto"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

func TestListenerAliasTarget(t *testing.T) {
	for _, c := range []struct {
		alias, ns   string
		target, svc string
		ok          bool
	}{
		{"foo:80", "ns1", "foo.ns1.svc.cluster.local:80", "ns1/foo", true},
		{"foo.ns2:8080", "ns1", "foo.ns2.svc.cluster.local:8080", "ns2/foo", true},
		{"foo.ns2.svc:80", "ns1", "", "", false}, // neither form: only a fully qualified name resolves
		{"foo.ns2.svc.cluster.local:80", "ns1", "", "", false},
		{"foo", "ns1", "", "", false},
		{"foo:", "ns1", "", "", false},
		{":80", "ns1", "", "", false},
		{"foo:0", "ns1", "", "", false},
		{"foo:65536", "ns1", "", "", false},
		{"foo:080", "ns1", "", "", false},
		{"foo:http", "ns1", "", "", false},
		{".ns1:80", "ns1", "", "", false},
		{"foo.:80", "ns1", "", "", false},
		{"foo:80", "", "", "", false},
	} {
		target, svc, ok := ListenerAliasTarget(c.alias, c.ns, "cluster.local")
		if target != c.target || svc != c.svc || ok != c.ok {
			t.Errorf("%q from %q: %q %q %v, want %q %q %v", c.alias, c.ns, target, svc, ok, c.target, c.svc, c.ok)
		}
	}
}

// A listener under an alias is the one Listeners would build under that name: the same route,
// the alias as name and stat prefix; every alias a set announces resolves back to the set.
func TestListenerAliasIsTheListenerUnderItsName(t *testing.T) {
	svc := &collections.ServiceInfo{Name: "foo", Namespace: "ns1", Hostname: "foo.ns1.svc.cluster.local",
		Ports: []collections.ServicePort{{Name: "http", Port: 80, Protocol: "HTTP"}}}
	sets := Listeners().Fn(nil, svc)
	if len(sets) != 1 || sets[0].Name != "foo.ns1.svc.cluster.local:80" {
		t.Fatalf("listener sets %+v", sets)
	}
	aliases := ListenerAliases(&sets[0])
	if len(aliases) != 2 {
		t.Fatalf("aliases %v", aliases)
	}
	for _, alias := range aliases {
		if target, key, ok := ListenerAliasTarget(alias, "ns1", "cluster.local"); !ok || target != sets[0].Name || key != sets[0].Service {
			t.Errorf("alias %s resolves to %s (%s, %v)", alias, target, key, ok)
		}
		r := ListenerAlias(sets[0].Shared, alias)
		if r == nil || r.Name != alias || r.TypeURL != transforms.TypeListener {
			t.Fatalf("alias %s: %+v", alias, r)
		}
		want, err := APIListener(alias, "outbound|80||foo.ns1.svc.cluster.local")
		if err != nil {
			t.Fatal(err)
		}
		var got listener.Listener
		if err := proto.Unmarshal(r.Body, &got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, want) {
			t.Errorf("alias %s: %v, want %v", alias, &got, want)
		}
		if err := got.ValidateAll(); err != nil {
			t.Error(err)
		}
	}
	entry := collections.ResourceSet{Name: "db.example.com:80", Service: "db.example.com"}
	if a := ListenerAliases(&entry); a != nil {
		t.Errorf("a ServiceEntry host's listener has aliases %v", a)
	}
}
