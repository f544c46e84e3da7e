package serving

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	discovery_v1 "k8s.io/api/discovery/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
)

const (
	fooCluster = "outbound|80||foo.ns1.svc.cluster.local"
	wait       = 10 * time.Second
)

// rig is the serving layer's rig, with the limits these tests need.
type rig = rigs.Serving

// newRig serves objs through a graph with istiod's default configuration.
func newRig(t *testing.T, objs ...any) *rig {
	t.Helper()
	return newRigWith(t, collections.DefaultConfig(), objs...)
}

// newRigWith serves objs through a graph built with cfg.
func newRigWith(t *testing.T, cfg collections.Config, objs ...any) *rig {
	t.Helper()
	return serve(t, rigs.NewGraphWith(t, rigs.GraphOptions{Config: cfg}, objs...), nil)
}

// serve serves g, with metrics m (nil: unregistered ones).
func serve(t *testing.T, g *rigs.Graph, m *xds.Metrics) *rig {
	t.Helper()
	// No stream rate: the tests open streams faster than any herd.
	return rigs.Serve(t, g, rigs.ServeOptions{Metrics: m, Limits: xds.Limits{StreamRate: -1}})
}

func sidecar(ip, ns string) adsclient.Node {
	return adsclient.Node{ID: fmt.Sprintf("sidecar~%s~app-%s.%s~%s.svc.cluster.local", ip, strings.ReplaceAll(ip, ".", "-"), ns, ns), Namespace: ns}
}

func recv(t *testing.T, s *adsclient.Stream) *discovery.DiscoveryResponse {
	t.Helper()
	resp, err := s.Recv(wait)
	if err != nil {
		t.Fatalf("waiting for a response: %v", err)
	}
	return resp
}

// probeType is a type krteds does not serve: it answers a request for it with an empty response,
// after everything that was due.
const probeType = "type.googleapis.com/krteds.test.Probe"

// settle returns the responses the server sends before it has handled every request the stream
// sent so far: the answer to a probe comes after everything that was due when it was handled.
func settle(t *testing.T, s *adsclient.Stream) []*discovery.DiscoveryResponse {
	t.Helper()
	if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: probeType}); err != nil {
		t.Fatal(err)
	}
	var out []*discovery.DiscoveryResponse
	for {
		resp := recv(t, s)
		if resp.TypeUrl == probeType {
			return out
		}
		out = append(out, resp)
	}
}

// expectNone checks that nothing was due on the stream.
func expectNone(t *testing.T, s *adsclient.Stream) {
	t.Helper()
	if got := settle(t, s); len(got) > 0 {
		t.Fatalf("expected no response, got %s version %s with %d resources", got[0].TypeUrl, got[0].VersionInfo, len(got[0].Resources))
	}
}

// waitTold waits until the server has told every stream holding name of a change made at or
// after since: it wakes each time the server has taken a change of the graph.
func waitTold(t *testing.T, r *rig, typeURL, name string, since time.Time) {
	t.Helper()
	r.Await(t, "the server to tell the streams holding "+name+" of the change", func() (bool, string) {
		last := r.Srv.LastChange(typeURL, name)
		return !last.Before(since), fmt.Sprintf("last told of a change at %v, want %v or later", last, since)
	})
}

// waitResolved waits until the graph resolves the CLA name, for the rig's only client, to want,
// looking again after each event of the graph.
func waitResolved(t *testing.T, r *rig, name string, want []string) {
	t.Helper()
	var got []string
	r.Await(t, "the graph resolves "+name, func() (bool, string) {
		if st := r.Srv.Statuses(); len(st) == 1 {
			if v := r.Served.View(st[0].ConnID); v != nil {
				if res, _ := r.Served.Resolve(v, adsclient.TypeCLA, name); res != nil {
					cla := &endpoint.ClusterLoadAssignment{}
					if err := proto.Unmarshal(res.Body, cla); err != nil {
						t.Fatal(err)
					}
					got = endpointsOf(cla)
				}
			}
		}
		return slices.Equal(got, want), fmt.Sprintf("want %v, last %v", want, got)
	})
}

// waitClassOf waits until the class of the rig's only client is among the graph's proxy classes:
// it wakes on the graph's events and after the server has taken each change (which sets the
// stream's view).
func waitClassOf(t *testing.T, r *rig) {
	t.Helper()
	r.Await(t, "the client's proxy class", func() (bool, string) {
		st := r.Srv.Statuses()
		if len(st) != 1 || st[0].View == nil {
			return false, fmt.Sprintf("%d clients, or no view yet", len(st))
		}
		return r.ProxyClasses.GetKey(st[0].View.ClassKey) != nil, "class " + st[0].View.ClassKey
	})
}

// endpointsOf renders a CLA as "ip:port HEALTH p<priority> <region>/<zone>" lines.
func endpointsOf(cla *endpoint.ClusterLoadAssignment) []string {
	var out []string
	for _, l := range cla.Endpoints {
		for _, e := range l.LbEndpoints {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, fmt.Sprintf("%s:%d %s p%d %s/%s", sa.GetAddress(), sa.GetPortValue(), e.HealthStatus, l.Priority,
				l.GetLocality().GetRegion(), l.GetLocality().GetZone()))
		}
	}
	return out
}

func onlyCLA(t *testing.T, resp *discovery.DiscoveryResponse) *endpoint.ClusterLoadAssignment {
	t.Helper()
	clas, err := adsclient.CLAs(resp)
	if err != nil || len(clas) != 1 {
		t.Fatalf("want one CLA, got %d (%v)", len(clas), err)
	}
	return clas[0]
}

func mesh() []any {
	return []any{
		fixtures.ZoneNode("n1", "r1", "z1"), fixtures.ZoneNode("n2", "r1", "z2"), fixtures.ZoneNode("n3", "r2", "z3"),
		fixtures.Service("ns1", "foo", fixtures.HTTP...),
		fixtures.Pod("ns1", "foo-1", "foo", "10.0.0.1", "n1"),
		fixtures.Pod("ns1", "foo-2", "foo", "10.0.0.2", "n2"),
		fixtures.Pod("ns1", "foo-3", "foo", "10.0.0.3", "n3"),
		fooSlice(fixtures.Ready, fixtures.Ready, fixtures.Ready),
	}
}

func fooSlice(c1, c2, c3 discovery_v1.EndpointConditions) any {
	return fixtures.Slice("ns1", "foo-a", "foo", fixtures.HTTPSlice,
		fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: c1},
		fixtures.Endpoint{IP: "10.0.0.2", Pod: "foo-2", Cond: c2},
		fixtures.Endpoint{IP: "10.0.0.3", Pod: "foo-3", Cond: c3})
}

func TestSotwSubscribeAckUpdateNack(t *testing.T) {
	r := newRig(t, mesh()...)
	s := r.Open(sidecar("10.9.0.1", "ns1"))
	if err := s.Request(adsclient.TypeCLA, fooCluster); err != nil {
		t.Fatal(err)
	}
	resp := recv(t, s)
	cla := onlyCLA(t, resp)
	want := []string{"10.0.0.1:8080 HEALTHY p0 r1/z1", "10.0.0.2:8080 HEALTHY p0 r1/z2", "10.0.0.3:8080 HEALTHY p0 r2/z3"}
	if got := endpointsOf(cla); !slices.Equal(got, want) {
		t.Fatalf("endpoints %v, want %v", got, want)
	}
	if err := s.Ack(resp, fooCluster); err != nil {
		t.Fatal(err)
	}
	expectNone(t, s)

	// An endpoint turns not ready: a new version arrives by itself.
	r.In.Apply(fooSlice(fixtures.Ready, fixtures.NotReady, fixtures.Ready), false)
	resp2 := recv(t, s)
	if resp2.VersionInfo == resp.VersionInfo {
		t.Fatal("version did not change")
	}
	if got := endpointsOf(onlyCLA(t, resp2)); !slices.Contains(got, "10.0.0.2:8080 UNHEALTHY p0 r1/z2") {
		t.Fatalf("endpoints %v", got)
	}

	// NACK: no reply, the error is recorded.
	if err := s.Nack(resp2, resp.VersionInfo, "bad cla", fooCluster); err != nil {
		t.Fatal(err)
	}
	expectNone(t, s)
	st := r.Srv.Statuses()
	if len(st) != 1 || st[0].Types[adsclient.TypeCLA].LastError != "bad cla" || st[0].Types[adsclient.TypeCLA].NACKs != 1 {
		t.Fatalf("NACK not recorded: %+v", st)
	}
	// A later change is still pushed after a NACK.
	r.In.Apply(fooSlice(fixtures.Ready, fixtures.Ready, fixtures.Ready), false)
	resp3 := recv(t, s)
	if got := endpointsOf(onlyCLA(t, resp3)); len(got) != 3 || !slices.Contains(got, "10.0.0.2:8080 HEALTHY p0 r1/z2") {
		t.Fatalf("endpoints %v", got)
	}
	if err := s.Ack(resp3, fooCluster); err != nil {
		t.Fatal(err)
	}
	expectNone(t, s)
	if st := r.Srv.Statuses(); st[0].Types[adsclient.TypeCLA].LastError != "" {
		t.Fatalf("ACK must clear the last error: %+v", st[0].Types)
	}
}

func TestSotwUnknownClusterGetsEmptyCLA(t *testing.T) {
	r := newRig(t, mesh()...)
	s := r.Open(sidecar("10.9.0.1", "ns1"))
	names := []string{"outbound|80||nope.ns1.svc.cluster.local", "outbound|81||foo.ns1.svc.cluster.local", "garbage"}
	if err := s.Request(adsclient.TypeCLA, names...); err != nil {
		t.Fatal(err)
	}
	resp := recv(t, s)
	clas, _ := adsclient.CLAs(resp)
	if len(clas) != 3 {
		t.Fatalf("want 3 empty CLAs, got %d", len(clas))
	}
	for _, c := range clas {
		if len(c.Endpoints) != 0 || !slices.Contains(names, c.ClusterName) {
			t.Fatalf("CLA %s not empty: %v", c.ClusterName, c.Endpoints)
		}
	}
	// The service appears later: its CLA is pushed.
	if err := s.Ack(resp, names...); err != nil {
		t.Fatal(err)
	}
	r.In.Apply(fixtures.Service("ns1", "nope", fixtures.HTTP...), false)
	r.In.Apply(fixtures.Slice("ns1", "nope-a", "nope", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.5.1", Cond: fixtures.Ready}), false)
	for {
		resp := recv(t, s)
		cla := onlyCLA(t, resp)
		if cla.ClusterName != names[0] {
			t.Fatalf("unexpected push of %s", cla.ClusterName)
		}
		if len(endpointsOf(cla)) == 1 {
			break
		}
		_ = s.Ack(resp, names...)
	}
}

func TestSotwUnsubscribe(t *testing.T) {
	r := newRig(t, mesh()...)
	s := r.Open(sidecar("10.9.0.1", "ns1"))
	_ = s.Request(adsclient.TypeCLA, fooCluster)
	resp := recv(t, s)
	// Unsubscribe: an empty name list on EDS.
	if err := s.Ack(resp); err != nil {
		t.Fatal(err)
	}
	r.In.Apply(fooSlice(fixtures.NotReady, fixtures.Ready, fixtures.Ready), false)
	expectNone(t, s)
}

func TestReconnectWithStaleVersionGetsReply(t *testing.T) {
	r := newRig(t, mesh()...)
	s := r.Open(sidecar("10.9.0.1", "ns1"))
	_ = s.Request(adsclient.TypeCLA, fooCluster)
	resp := recv(t, s)
	s.Close()
	// A new stream that claims the version it had: it still gets an answer.
	s2 := r.Open(sidecar("10.9.0.1", "ns1"))
	if err := s2.Send(&discovery.DiscoveryRequest{TypeUrl: adsclient.TypeCLA, VersionInfo: resp.VersionInfo, ResourceNames: []string{fooCluster}}); err != nil {
		t.Fatal(err)
	}
	resp2 := recv(t, s2)
	if resp2.VersionInfo != resp.VersionInfo {
		t.Fatalf("same content must carry the same version: %s vs %s", resp2.VersionInfo, resp.VersionInfo)
	}
}

// preferCloseMesh is mesh() with foo's trafficDistribution PreferClose.
func preferCloseMesh() []any {
	objs := mesh()
	svc := fixtures.Service("ns1", "foo", fixtures.HTTP...)
	svc.Spec.TrafficDistribution = fixtures.Ptr("PreferClose")
	objs[3] = svc
	return objs
}

func TestLocalitiesGetDifferentPriorities(t *testing.T) {
	r := newRig(t, preferCloseMesh()...)
	zone1 := sidecar("10.9.0.1", "ns1")
	zone1.Locality = &core.Locality{Region: "r1", Zone: "z1"}
	region2 := sidecar("10.9.0.2", "ns1")
	region2.Locality = &core.Locality{Region: "r2", Zone: "z3"}
	got := map[string][]string{}
	for name, n := range map[string]adsclient.Node{"z1": zone1, "r2": region2} {
		s := r.Open(n)
		_ = s.Request(adsclient.TypeCLA, fooCluster)
		got[name] = endpointsOf(onlyCLA(t, recv(t, s)))
	}
	want := map[string][]string{
		"z1": {"10.0.0.1:8080 HEALTHY p0 r1/z1", "10.0.0.2:8080 HEALTHY p1 r1/z2", "10.0.0.3:8080 HEALTHY p2 r2/z3"},
		"r2": {"10.0.0.1:8080 HEALTHY p1 r1/z1", "10.0.0.2:8080 HEALTHY p1 r1/z2", "10.0.0.3:8080 HEALTHY p0 r2/z3"},
	}
	for k := range want {
		if !slices.Equal(got[k], want[k]) {
			t.Errorf("%s: got %v want %v", k, got[k], want[k])
		}
	}
}

func TestSlowClientGetsOnlyTheLatest(t *testing.T) {
	r := newRig(t, mesh()...)
	s := r.Open(sidecar("10.9.0.1", "ns1"))
	_ = s.Request(adsclient.TypeCLA, fooCluster)
	first := recv(t, s)
	// The client does not ACK while ten changes happen.
	for i := 0; i < 10; i++ {
		c := fixtures.Ready
		if i%2 == 0 {
			c = fixtures.NotReady
		}
		r.In.Apply(fooSlice(fixtures.Ready, fixtures.Ready, c), false)
	}
	last := time.Now()
	r.In.Apply(fixtures.Pod("ns1", "foo-3", "foo", "10.0.0.3", "n1"), false) // the pod moves to n1
	final := []string{"10.0.0.1:8080 HEALTHY p0 r1/z1", "10.0.0.3:8080 HEALTHY p0 r1/z1", "10.0.0.2:8080 HEALTHY p0 r1/z2"}
	// The graph has the final state for this client (a change told after last may still be an
	// intermediate one: the input clock moved before the graph caught up), and the server has
	// heard of a change since; it sent nothing while the client did not ACK.
	waitResolved(t, r, fooCluster, final)
	waitTold(t, r, adsclient.TypeCLA, fooCluster, last)
	expectNone(t, s)
	_ = s.Ack(first, fooCluster)
	latest := recv(t, s)
	if got := endpointsOf(onlyCLA(t, latest)); !slices.Equal(got, final) {
		t.Fatalf("catch-up response is not the latest state: %v", got)
	}
	_ = s.Ack(latest, fooCluster)
	expectNone(t, s)
}

func TestMalformedNodeIsRefused(t *testing.T) {
	r := newRig(t, mesh()...)
	for _, n := range []adsclient.Node{
		{ID: "not-an-istio-id"},
		{ID: "sidecar~not-an-ip~a.b~b.svc.cluster.local"},
		{ID: "waypoint~10.0.0.1~a.b~b.svc.cluster.local"},
	} {
		s := r.Open(n)
		_ = s.Request(adsclient.TypeCLA, fooCluster)
		_, err := s.Recv(wait)
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("node %q: want InvalidArgument, got %v", n.ID, err)
		}
	}
	// Others are unaffected.
	s := r.Open(sidecar("10.9.0.1", "ns1"))
	_ = s.Request(adsclient.TypeCLA, fooCluster)
	if len(endpointsOf(onlyCLA(t, recv(t, s)))) != 3 {
		t.Fatal("a healthy client was affected")
	}
}

func TestNoResponseBeforeSync(t *testing.T) {
	synced := &gate{ch: make(chan struct{})}
	r := serve(t, rigs.NewGraphWith(t, rigs.GraphOptions{Synced: synced}, fixtures.Service("ns1", "foo", fixtures.HTTP...)), nil)
	s := r.Open(sidecar("10.9.0.1", "ns1"))
	_ = s.Request(adsclient.TypeCLA, fooCluster)
	expectNone(t, s)
	close(synced.ch)
	if cla := onlyCLA(t, recv(t, s)); cla.ClusterName != fooCluster {
		t.Fatalf("got %s", cla.ClusterName)
	}
}

func TestDeltaSubscribeAckNackUnsubscribe(t *testing.T) {
	r := newRig(t, mesh()...)
	s := r.OpenDelta(sidecar("10.9.0.1", "ns1"))
	recvD := func() *discovery.DeltaDiscoveryResponse {
		t.Helper()
		resp, err := s.Recv(wait)
		if err != nil {
			t.Fatalf("waiting for a delta response: %v", err)
		}
		return resp
	}
	noneD := func() {
		t.Helper()
		if err := s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: probeType}); err != nil {
			t.Fatal(err)
		}
		if resp := recvD(); resp.TypeUrl != probeType {
			t.Fatalf("expected no delta response, got %v", resp)
		}
	}
	_ = s.Subscribe(adsclient.TypeCLA, []string{fooCluster}, nil)
	resp := recvD()
	if len(resp.Resources) != 1 || resp.Resources[0].Name != fooCluster || resp.Resources[0].Version == "" {
		t.Fatalf("delta response %v", resp)
	}
	_ = s.Ack(resp)
	noneD()
	r.In.Apply(fooSlice(fixtures.NotReady, fixtures.Ready, fixtures.Ready), false)
	resp2 := recvD()
	if len(resp2.Resources) != 1 || resp2.Resources[0].Version == resp.Resources[0].Version {
		t.Fatalf("delta update %v", resp2)
	}
	_ = s.Nack(resp2, "rejected")
	noneD()
	if st := r.Srv.Statuses(); st[0].Types[adsclient.TypeCLA].LastError != "rejected" {
		t.Fatalf("delta NACK not recorded: %+v", st[0].Types)
	}
	// Unsubscribe: later changes are not sent.
	_ = s.Subscribe(adsclient.TypeCLA, nil, []string{fooCluster})
	noneD()
	r.In.Apply(fooSlice(fixtures.Ready, fixtures.Ready, fixtures.Ready), false)
	noneD()
	// Subscribing to a second name sends only that one.
	_ = s.Subscribe(adsclient.TypeCLA, []string{"outbound|80||other.ns1.svc.cluster.local"}, nil)
	resp3 := recvD()
	if len(resp3.Resources) != 1 || resp3.Resources[0].Name != "outbound|80||other.ns1.svc.cluster.local" {
		t.Fatalf("delta subscribe %v", resp3)
	}
}

// gate is a krt.Syncer that reports synced once ch is closed.
type gate struct{ ch chan struct{} }

func (g *gate) HasSynced() bool {
	select {
	case <-g.ch:
		return true
	default:
		return false
	}
}

func (g *gate) WaitUntilSynced(stop <-chan struct{}) bool {
	select {
	case <-g.ch:
		return true
	case <-stop:
		return false
	}
}
