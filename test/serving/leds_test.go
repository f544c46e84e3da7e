package serving

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/transforms/eds"
)

// ledsClient follows one cluster over delta ADS as Envoy does with LEDS: it subscribes to the
// CLA, to the collections the CLA names (and away from those it names no more), applies the
// endpoints sent and removed, and acknowledges every response.
type ledsClient struct {
	t       *testing.T
	s       *adsclient.DeltaStream
	cla     *endpoint.ClusterLoadAssignment
	members map[string]map[string]*endpoint.LbEndpoint // by collection, by name
	// responses counts the responses of each type; resources and removed the endpoints sent and
	// removed by LEDS.
	responses          map[string]int
	resources, removed int
}

// ledsRig serves objs with a LEDS threshold of 2 endpoints.
func ledsRig(t *testing.T, objs ...any) *rig {
	t.Helper()
	cfg := collections.DefaultConfig()
	cfg.LEDSThreshold = 2
	return newRigWith(t, cfg, objs...)
}

func openLEDS(t *testing.T, r *rig, cluster string) *ledsClient {
	t.Helper()
	s := r.OpenDelta(sidecar("10.9.0.7", "ns1"))
	if err := s.Subscribe(adsclient.TypeCLA, []string{cluster}, nil); err != nil {
		t.Fatal(err)
	}
	return &ledsClient{t: t, s: s, members: map[string]map[string]*endpoint.LbEndpoint{}, responses: map[string]int{}}
}

// step receives and applies one response.
func (c *ledsClient) step() {
	c.t.Helper()
	resp, err := c.s.Recv(wait)
	if err != nil {
		c.t.Fatalf("waiting for a delta response: %v", err)
	}
	c.apply(resp)
}

func (c *ledsClient) apply(resp *discovery.DeltaDiscoveryResponse) {
	c.t.Helper()
	c.responses[resp.TypeUrl]++
	switch resp.TypeUrl {
	case adsclient.TypeCLA:
		if len(resp.Resources) != 1 {
			c.t.Fatalf("%d CLAs in one response", len(resp.Resources))
		}
		var cla endpoint.ClusterLoadAssignment
		if err := resp.Resources[0].Resource.UnmarshalTo(&cla); err != nil {
			c.t.Fatal(err)
		}
		if err := cla.ValidateAll(); err != nil {
			c.t.Fatalf("invalid CLA: %v", err)
		}
		c.cla = &cla
		var sub, unsub []string
		named := map[string]bool{}
		for _, l := range cla.Endpoints {
			glob := l.GetLedsClusterLocalityConfig().GetLedsCollectionName()
			if glob == "" {
				c.t.Fatalf("a locality of the LEDS client's CLA has no collection: %v", l)
			}
			named[glob] = true
			if _, ok := c.members[glob]; !ok {
				sub = append(sub, glob)
				c.members[glob] = map[string]*endpoint.LbEndpoint{}
			}
		}
		for glob := range c.members {
			if !named[glob] {
				unsub = append(unsub, glob)
				delete(c.members, glob)
			}
		}
		c.ack(resp)
		if len(sub)+len(unsub) > 0 {
			if err := c.s.Subscribe(eds.TypeLbEndpoint, sub, unsub); err != nil {
				c.t.Fatal(err)
			}
		}
	case eds.TypeLbEndpoint:
		for _, r := range resp.Resources {
			var lb endpoint.LbEndpoint
			if err := r.Resource.UnmarshalTo(&lb); err != nil {
				c.t.Fatal(err)
			}
			if err := lb.ValidateAll(); err != nil {
				c.t.Fatalf("invalid LbEndpoint %s: %v", r.Name, err)
			}
			glob := r.Name[:strings.LastIndexByte(r.Name, '/')+1] + "*"
			if c.members[glob] == nil {
				c.t.Fatalf("endpoint %s of collection %s the client is not subscribed to", r.Name, glob)
			}
			c.members[glob][r.Name] = &lb
			c.resources++
		}
		for _, name := range resp.RemovedResources {
			glob := name[:strings.LastIndexByte(name, '/')+1] + "*"
			delete(c.members[glob], name)
			c.removed++
		}
		c.ack(resp)
	default:
		c.t.Fatalf("unexpected response of type %s", resp.TypeUrl)
	}
}

func (c *ledsClient) ack(resp *discovery.DeltaDiscoveryResponse) {
	if err := c.s.Ack(resp); err != nil {
		c.t.Fatal(err)
	}
}

// assembled is the cluster's endpoints as the client holds them, as endpointsOf renders a CLA.
func (c *ledsClient) assembled() []string {
	var out []string
	if c.cla == nil {
		return nil
	}
	for _, l := range c.cla.Endpoints {
		for _, e := range c.members[l.GetLedsClusterLocalityConfig().GetLedsCollectionName()] {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, fmt.Sprintf("%s:%d %s p%d %s/%s", sa.GetAddress(), sa.GetPortValue(), e.HealthStatus, l.Priority,
				l.GetLocality().GetRegion(), l.GetLocality().GetZone()))
		}
	}
	slices.Sort(out)
	return out
}

// until applies responses until the assembled endpoints are want. It needs no Waker: the client
// changes only by the responses it receives, and each Recv blocks until the server sends one.
func (c *ledsClient) until(want []string) {
	c.t.Helper()
	deadline := time.Now().Add(wait)
	for !slices.Equal(c.assembled(), want) {
		if time.Now().After(deadline) {
			c.t.Fatalf("the LEDS client holds %v, want %v", c.assembled(), want)
		}
		c.step()
	}
}

// settle applies every response due on the client's stream.
func (c *ledsClient) settle() {
	c.t.Helper()
	if err := c.s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: probeType}); err != nil {
		c.t.Fatal(err)
	}
	for {
		resp, err := c.s.Recv(wait)
		if err != nil {
			c.t.Fatal(err)
		}
		if resp.TypeUrl == probeType {
			return
		}
		c.apply(resp)
	}
}

// noneDue checks that nothing is due on the client's stream.
func (c *ledsClient) noneDue() {
	c.t.Helper()
	if err := c.s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: probeType}); err != nil {
		c.t.Fatal(err)
	}
	resp, err := c.s.Recv(wait)
	if err != nil {
		c.t.Fatal(err)
	}
	if resp.TypeUrl != probeType {
		c.t.Fatalf("expected nothing due, got %s with %d resources and %d removed", resp.TypeUrl, len(resp.Resources), len(resp.RemovedResources))
	}
}

// TestLEDSOverDeltaADS: with a LEDS threshold, an Envoy on delta ADS gets the cluster's CLA as
// LEDS collections, and the endpoints it assembles from them are, after every change, those the
// plain CLA lists (read by a state-of-the-world client); an endpoint changing health is one
// resource on the wire and no CLA; endpoints added and removed are resources added and removed;
// a gRPC client is sent the plain CLA.
func TestLEDSOverDeltaADS(t *testing.T) {
	r := ledsRig(t, mesh()...)
	in := r.In

	plain := r.Open(sidecar("10.9.0.1", "ns1"))
	if err := plain.Request(adsclient.TypeCLA, fooCluster); err != nil {
		t.Fatal(err)
	}
	inline := func() []string {
		t.Helper()
		resp := recv(t, plain)
		if err := plain.Ack(resp, fooCluster); err != nil {
			t.Fatal(err)
		}
		got := endpointsOf(onlyCLA(t, resp))
		slices.Sort(got)
		return got
	}
	want := inline()
	if len(want) != 3 {
		t.Fatalf("the plain CLA lists %v", want)
	}
	leds := openLEDS(t, r, fooCluster)
	leds.until(want)
	if len(leds.cla.Endpoints) != 3 || leds.resources != 3 {
		t.Fatalf("the LEDS CLA has %d localities; %d endpoints were sent", len(leds.cla.Endpoints), leds.resources)
	}

	// An endpoint turns not ready: the client is sent that endpoint, and no CLA (the
	// localities and their weights stay).
	since := time.Now()
	in.Apply(fooSlice(fixtures.Ready, fixtures.NotReady, fixtures.Ready), false)
	want = inline()
	before, claBefore := leds.resources, leds.responses[adsclient.TypeCLA]
	leds.until(want)
	waitTold(t, r, adsclient.TypeCLA, fooCluster, since)
	waitTold(t, r, eds.TypeLbEndpoint, leds.cla.Endpoints[1].GetLedsClusterLocalityConfig().GetLedsCollectionName(), since)
	leds.noneDue()
	if leds.resources-before != 1 || leds.responses[adsclient.TypeCLA] != claBefore {
		t.Fatalf("a health change sent %d endpoints and %d CLAs, want 1 and 0", leds.resources-before, leds.responses[adsclient.TypeCLA]-claBefore)
	}

	// A pod joins on n1: its locality's collection gains it (and the CLA its new weight).
	in.Apply(fixtures.Pod("ns1", "foo-4", "foo", "10.0.0.4", "n1"), false)
	in.Apply(fixtures.Slice("ns1", "foo-a", "foo", fixtures.HTTPSlice,
		fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.0.0.2", Pod: "foo-2", Cond: fixtures.NotReady},
		fixtures.Endpoint{IP: "10.0.0.3", Pod: "foo-3", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.0.0.4", Pod: "foo-4", Cond: fixtures.Ready}), false)
	for want = inline(); len(want) != 4; want = inline() {
	}
	before = leds.resources
	leds.until(want)
	if leds.resources-before != 1 {
		t.Fatalf("a new endpoint sent %d endpoints, want 1", leds.resources-before)
	}

	// The only pod of r2/z3 leaves: its locality and collection go, and the client, which
	// unsubscribes from it, is told its endpoint was removed.
	since = time.Now()
	in.Apply(fixtures.Slice("ns1", "foo-a", "foo", fixtures.HTTPSlice,
		fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.0.0.2", Pod: "foo-2", Cond: fixtures.NotReady},
		fixtures.Endpoint{IP: "10.0.0.4", Pod: "foo-4", Cond: fixtures.Ready}), false)
	want = inline()
	leds.until(want)
	// The removal and the new CLA may come in either order.
	for deadline := time.Now().Add(wait); len(leds.cla.Endpoints) != 2; leds.step() {
		if time.Now().After(deadline) {
			t.Fatalf("the LEDS CLA has %d localities after r2/z3 emptied", len(leds.cla.Endpoints))
		}
	}
	waitTold(t, r, adsclient.TypeCLA, fooCluster, since)
	leds.settle()
	if !slices.Equal(leds.assembled(), want) {
		t.Fatalf("after the change settled the client holds %v, want %v", leds.assembled(), want)
	}

	// A gRPC client on delta ADS is sent the plain CLA.
	grpcNode := sidecar("10.9.0.8", "ns1")
	grpcNode.Generator = collections.GeneratorGRPC
	g := r.OpenDelta(grpcNode)
	if err := g.Subscribe(adsclient.TypeCLA, []string{fooCluster}, nil); err != nil {
		t.Fatal(err)
	}
	resp, err := g.Recv(wait)
	if err != nil {
		t.Fatal(err)
	}
	var cla endpoint.ClusterLoadAssignment
	if err := resp.Resources[0].Resource.UnmarshalTo(&cla); err != nil {
		t.Fatal(err)
	}
	got := endpointsOf(&cla)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("the gRPC client got %v, want the plain CLA %v", got, want)
	}
}

// A client cannot read another class's collections, nor a collection of a service it cannot
// see: such a subscription lists nothing. A state-of-the-world stream asking for LEDS is
// answered as for a type krteds does not serve.
func TestLEDSCollectionsAreScopedToTheView(t *testing.T) {
	objs := mesh()
	for i, o := range objs {
		if svc, ok := o.(*corev1.Service); ok {
			// foo is exported to its own namespace only.
			svc.Annotations = map[string]string{"networking.istio.io/exportTo": "."}
			objs[i] = svc
		}
	}
	r := ledsRig(t, objs...)
	leds := openLEDS(t, r, fooCluster)
	leds.until([]string{"10.0.0.1:8080 HEALTHY p0 r1/z1", "10.0.0.2:8080 HEALTHY p0 r1/z2", "10.0.0.3:8080 HEALTHY p0 r2/z3"})
	glob := leds.cla.Endpoints[0].GetLedsClusterLocalityConfig().GetLedsCollectionName()

	// A proxy of ns2 subscribing to foo's collection directly (and to a name that is not a
	// collection) is sent nothing.
	other := r.OpenDelta(sidecar("10.9.1.1", "ns2"))
	if err := other.Subscribe(eds.TypeLbEndpoint, []string{glob, eds.TypeLbEndpoint}, nil); err != nil {
		t.Fatal(err)
	}
	if err := other.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: probeType}); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := other.Recv(wait)
		if err != nil {
			t.Fatal(err)
		}
		if resp.TypeUrl == probeType {
			break
		}
		if len(resp.Resources) != 0 {
			t.Fatalf("a proxy of ns2 was sent %d endpoints of a collection of ns1's foo", len(resp.Resources))
		}
	}

	sotw := r.Open(sidecar("10.9.0.2", "ns1"))
	if err := sotw.Request(eds.TypeLbEndpoint, glob); err != nil {
		t.Fatal(err)
	}
	resp := recv(t, sotw)
	if resp.TypeUrl != eds.TypeLbEndpoint || len(resp.Resources) != 0 {
		t.Fatalf("a state-of-the-world LEDS request got %d resources", len(resp.Resources))
	}
}

// An Envoy that rejects a CLA of LEDS collections (one built without LEDS) is sent the whole
// CLA instead, and whole CLAs from then on.
func TestLEDSRejectedFallsBackToWholeCLAs(t *testing.T) {
	r := ledsRig(t, mesh()...)
	in := r.In
	s := r.OpenDelta(sidecar("10.9.0.7", "ns1"))
	cla := func() *endpoint.ClusterLoadAssignment {
		t.Helper()
		resp, err := s.Recv(wait)
		if err != nil {
			t.Fatal(err)
		}
		var c endpoint.ClusterLoadAssignment
		if resp.TypeUrl != adsclient.TypeCLA || len(resp.Resources) != 1 || resp.Resources[0].Resource.UnmarshalTo(&c) != nil {
			t.Fatalf("expected one CLA, got %s with %d resources", resp.TypeUrl, len(resp.Resources))
		}
		if len(c.Endpoints) > 0 && c.Endpoints[0].GetLedsClusterLocalityConfig() != nil {
			if err := s.Nack(resp, "LEDS is not supported"); err != nil {
				t.Fatal(err)
			}
		} else if err := s.Ack(resp); err != nil {
			t.Fatal(err)
		}
		return &c
	}
	if err := s.Subscribe(adsclient.TypeCLA, []string{fooCluster}, nil); err != nil {
		t.Fatal(err)
	}
	if first := cla(); first.Endpoints[0].GetLedsClusterLocalityConfig() == nil {
		t.Fatal("the first CLA is not a LEDS form")
	}
	want := []string{"10.0.0.1:8080 HEALTHY p0 r1/z1", "10.0.0.2:8080 HEALTHY p0 r1/z2", "10.0.0.3:8080 HEALTHY p0 r2/z3"}
	if got := endpointsOf(cla()); !slices.Equal(got, want) {
		t.Fatalf("after the rejection: %v, want the whole CLA %v", got, want)
	}
	if st := r.Srv.Statuses(); st[0].Types[adsclient.TypeCLA].NACKs != 1 {
		t.Fatalf("the rejection is not recorded: %+v", st[0].Types[adsclient.TypeCLA])
	}
	// Later changes come as whole CLAs too.
	in.Apply(fooSlice(fixtures.Ready, fixtures.NotReady, fixtures.Ready), false)
	if got := endpointsOf(cla()); !slices.Contains(got, "10.0.0.2:8080 UNHEALTHY p0 r1/z2") || len(got) != 3 {
		t.Fatalf("after a change: %v", got)
	}
}
