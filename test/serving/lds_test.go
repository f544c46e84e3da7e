package serving

import (
	"maps"
	"testing"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
)

// listenersOf decodes an LDS response (each listener's name and the route it names) and
// acknowledges it, subscribed to names.
func listenersOf(t *testing.T, s *adsclient.Stream, names []string) map[string]string {
	t.Helper()
	resp := recv(t, s)
	if resp.TypeUrl != adsclient.TypeListener {
		t.Fatalf("got %s", resp.TypeUrl)
	}
	ls, err := adsclient.Decode(resp, func() *listener.Listener { return &listener.Listener{} })
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range ls {
		var m hcm.HttpConnectionManager
		if err := l.GetApiListener().GetApiListener().UnmarshalTo(&m); err != nil {
			t.Fatal(err)
		}
		if m.StatPrefix != l.Name {
			t.Errorf("listener %s has stat prefix %s", l.Name, m.StatPrefix)
		}
		out[l.Name] = m.GetRds().GetRouteConfigName()
	}
	if err := s.Ack(resp, names...); err != nil {
		t.Fatal(err)
	}
	return out
}

// A gRPC client asks for a Kubernetes service's listener by its short names before the service
// exists: the listeners arrive, named as asked and routing to the service's cluster, when the
// service is created. A client of another namespace resolves "<name>:<port>" in its own.
func TestListenerAliasesFollowTheService(t *testing.T) {
	r := newRig(t, mesh()...)
	grpcNode := func(ip, ns string) adsclient.Node {
		n := sidecar(ip, ns)
		n.Generator = collections.GeneratorGRPC
		return n
	}
	same := r.Open(grpcNode("10.9.0.1", "ns1"))
	other := r.Open(grpcNode("10.9.0.2", "ns2"))
	// Only short names: nothing but their own notification can tell these streams of bar.
	sameNames, otherNames := []string{"bar:80", "foo:80"}, []string{"bar.ns1:80", "bar:80"}
	if err := same.Request(adsclient.TypeListener, sameNames...); err != nil {
		t.Fatal(err)
	}
	if err := other.Request(adsclient.TypeListener, otherNames...); err != nil {
		t.Fatal(err)
	}
	fooRoute := "outbound|80||foo.ns1.svc.cluster.local"
	if got := listenersOf(t, same, sameNames); !maps.Equal(got, map[string]string{"foo:80": fooRoute}) {
		t.Fatalf("ns1 client before bar exists: %v", got)
	}
	if got := listenersOf(t, other, otherNames); len(got) != 0 {
		t.Fatalf("ns2 client before bar exists: %v", got)
	}

	r.In.Apply(fixtures.Service("ns1", "bar", fixtures.HTTP...), false)
	barRoute := "outbound|80||bar.ns1.svc.cluster.local"
	if got := listenersOf(t, same, sameNames); !maps.Equal(got, map[string]string{"foo:80": fooRoute, "bar:80": barRoute}) {
		t.Fatalf("ns1 client once bar exists: %v", got)
	}
	if got := listenersOf(t, other, otherNames); !maps.Equal(got, map[string]string{"bar.ns1:80": barRoute}) {
		t.Fatalf("ns2 client once bar exists: %v", got)
	}
}
