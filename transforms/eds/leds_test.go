package eds

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/policy"
	"github.com/krteds/krteds/transforms/transformtest"
)

// ledsPlan is a plan with what the LEDS form must carry: several localities, failover
// priorities, an IPv6 endpoint, one address and port listed twice, and a locality whose names
// cannot stand in an xdstp path.
func ledsPlan() (CLAPlan, *collections.ServiceInfo, collections.ServicePort) {
	port := collections.ServicePort{Name: "http", Port: 80}
	svc := &collections.ServiceInfo{Name: "foo", Namespace: "ns1", TrafficDistribution: collections.TrafficDistributionPreferSameZone}
	eps := syntheticEndpoints(60)
	eps[4].Address = "fd00::4"
	eps[7] = eps[10] // the same endpoint twice (two slices listing it)
	eps[11].Meta = collections.NewEndpointMeta(collections.WorkloadMeta{TLSMode: "istio"}, collections.TopologyMeta{Locality: collections.Locality{Region: "r:9", Zone: "z/1", Subzone: "s*"}}, "", "")
	eps[12].Health = collections.Draining
	class := collections.ProxyClass{Locality: transformtest.R1z1, NodeName: "node-0"}
	plan := planCLA(fooName, svc, port, collections.AppendRefs(nil, eps), PolicyFor(svc), project(svc, PolicyFor(svc), class), nil)
	return plan, svc, port
}

// The LEDS form is the plain CLA split: one locality per group with the plain form's locality,
// weight and priority, naming a collection over ADS, and the collections' members are, in order,
// the plain form's endpoints, byte for byte; every message passes the API's validation, and every
// name is a valid member of its glob collection.
func TestLEDSFormMatchesTheCLA(t *testing.T) {
	plan, _, _ := ledsPlan()
	if len(plan.Groups) < 4 {
		t.Fatalf("the plan has %d groups; the test needs localities and priorities", len(plan.Groups))
	}
	// A PeerAuthentication disables mTLS for the workloads on node-1: the members carry tlsMode
	// where the plain form does.
	plan.TLS.Peer = policy.NewPeerAuthn("istio-system", []collections.PeerAuthentication{
		transformtest.Peer("ns1", "node-1", 1, map[string]string{collections.LabelHostname: "node-1"}, transformtest.Disable, nil)})
	var plain endpoint.ClusterLoadAssignment
	if err := proto.Unmarshal(plan.Encode(), &plain); err != nil {
		t.Fatal(err)
	}
	form, err := plan.EncodeLEDS(fooName)
	if err != nil {
		t.Fatal(err)
	}
	var cla endpoint.ClusterLoadAssignment
	if err := proto.Unmarshal(form.CLA.Body, &cla); err != nil {
		t.Fatal(err)
	}
	if err := cla.ValidateAll(); err != nil {
		t.Fatalf("the LEDS CLA is invalid: %v", err)
	}
	if cla.ClusterName != fooName || form.CLA.Name != fooName || form.CLA.TypeURL != transforms.TypeCLA {
		t.Fatalf("LEDS CLA named %q (resource %q, %s)", cla.ClusterName, form.CLA.Name, form.CLA.TypeURL)
	}
	if len(cla.Endpoints) != len(plain.Endpoints) || len(form.Collections) != len(plain.Endpoints) {
		t.Fatalf("%d LEDS localities and %d collections for %d localities", len(cla.Endpoints), len(form.Collections), len(plain.Endpoints))
	}
	names := map[string]bool{}
	for i, loc := range cla.Endpoints {
		want := plain.Endpoints[i]
		if !proto.Equal(loc.Locality, want.Locality) || loc.Priority != want.Priority || loc.LoadBalancingWeight.GetValue() != want.LoadBalancingWeight.GetValue() {
			t.Errorf("locality %d: %v p%d w%d, plain form %v p%d w%d", i, loc.Locality, loc.Priority, loc.LoadBalancingWeight.GetValue(),
				want.Locality, want.Priority, want.LoadBalancingWeight.GetValue())
		}
		leds := loc.GetLedsClusterLocalityConfig()
		if leds == nil || len(loc.LbEndpoints) != 0 {
			t.Fatalf("locality %d carries %d endpoints and LEDS config %v", i, len(loc.LbEndpoints), leds)
		}
		if leds.LedsConfig.GetAds() == nil || leds.LedsConfig.ResourceApiVersion != core.ApiVersion_V3 {
			t.Errorf("locality %d: LEDS config source %v, want ADS, v3", i, leds.LedsConfig)
		}
		col := form.Collections[i]
		if leds.LedsCollectionName != col.Name || !IsLEDSCollection(col.Name) || names[col.Name] {
			t.Fatalf("locality %d names collection %q; the form's is %q (seen before: %v)", i, leds.LedsCollectionName, col.Name, names[col.Name])
		}
		names[col.Name] = true
		prefix := strings.TrimSuffix(col.Name, "*")
		if len(col.Members) != len(want.LbEndpoints) {
			t.Fatalf("collection %d has %d members, the locality %d endpoints", i, len(col.Members), len(want.LbEndpoints))
		}
		for j, m := range col.Members {
			id, ok := strings.CutPrefix(m.Name, prefix)
			if !ok || id == "" || strings.ContainsAny(id, "%:?#[]*/") || names[m.Name] {
				t.Errorf("member %q is not a fresh, plain name in %q", m.Name, col.Name)
			}
			names[m.Name] = true
			if m.TypeURL != TypeLbEndpoint {
				t.Errorf("member %s has type %s", m.Name, m.TypeURL)
			}
			var lb endpoint.LbEndpoint
			if err := proto.Unmarshal(m.Body, &lb); err != nil {
				t.Fatal(err)
			}
			if err := lb.ValidateAll(); err != nil {
				t.Errorf("member %s is invalid: %v", m.Name, err)
			}
			wantBody, err := proto.MarshalOptions{Deterministic: true}.Marshal(want.LbEndpoints[j])
			if err != nil {
				t.Fatal(err)
			}
			if string(wantBody) != string(m.Body) {
				t.Errorf("member %s differs from the plain form's endpoint %d of locality %d", m.Name, j, i)
			}
		}
	}
	again, err := plan.EncodeLEDS(fooName)
	if err != nil {
		t.Fatal(err)
	}
	if again.CLA.Version != form.CLA.Version {
		t.Error("the LEDS form of one plan is not deterministic")
	}
	other, err := plan.EncodeLEDS(fooName + "~class")
	if err != nil {
		t.Fatal(err)
	}
	if other.Collections[0].Name == form.Collections[0].Name {
		t.Error("the CLAs of two classes share a collection name")
	}
}

// A change of one endpoint changes one member's version: the others, and the LEDS CLA when the
// localities' weights stay, keep theirs, so that a client is sent that endpoint alone.
func TestLEDSChangeOfOneEndpointChangesOneMember(t *testing.T) {
	plan, _, _ := ledsPlan()
	before, err := plan.EncodeLEDS(fooName)
	if err != nil {
		t.Fatal(err)
	}
	g := plan.Groups[1]
	eps := append([]*collections.Endpoint(nil), g.Endpoints...)
	flipped := *eps[0]
	flipped.Health = collections.UnHealthy
	eps[0] = &flipped
	plan.Groups[1].Endpoints = eps
	after, err := plan.EncodeLEDS(fooName)
	if err != nil {
		t.Fatal(err)
	}
	if after.CLA.Version != before.CLA.Version {
		t.Error("the LEDS CLA changed with an endpoint's health")
	}
	changed := 0
	for i, c := range after.Collections {
		for j, m := range c.Members {
			old := before.Collections[i].Members[j]
			if m.Name != old.Name {
				t.Fatalf("member %d of %d renamed: %s → %s", j, i, old.Name, m.Name)
			}
			if m.Version != old.Version {
				changed++
			}
		}
	}
	if changed != 1 {
		t.Fatalf("%d members changed, want 1", changed)
	}
}

// buildCLA gives a CLA its LEDS form only above the threshold, and not when the policy's
// locality load balancing rewrites the message.
func TestLEDSOnlyAboveTheThreshold(t *testing.T) {
	port := collections.ServicePort{Name: "http", Port: 80}
	svc := &collections.ServiceInfo{Name: "foo", Namespace: "ns1", Hostname: "foo.ns1.svc.cluster.local", Ports: []collections.ServicePort{port}}
	se := collections.ServiceEndpoints{Name: "foo", Namespace: "ns1", Endpoints: collections.AppendRefs(nil, syntheticEndpoints(10))}
	cp := ClusterPolicyFor(svc, nil, "istio-system", policy.RuleProxy{Namespace: "ns1"}, 80, "")
	for _, c := range []struct {
		threshold int
		leds      bool
	}{{0, false}, {10, false}, {9, true}} {
		r, problem := buildCLA(fooName, fooName, svc, port, se, cp, collections.ProxyClass{}, c.threshold)
		if problem != nil || r == nil {
			t.Fatalf("threshold %d: %v", c.threshold, problem)
		}
		if (r.LEDS != nil) != c.leds {
			t.Errorf("threshold %d, 10 endpoints: LEDS form %v, want %v", c.threshold, r.LEDS != nil, c.leds)
		}
	}
	cp.Setting = &collections.LocalitySetting{ZoneAware: true}
	if !cp.PostProcess() {
		t.Fatal("a zone-aware setting does not rewrite the CLA")
	}
	if r, _ := buildCLA(fooName, fooName, svc, port, se, cp, collections.ProxyClass{}, 1); r.LEDS != nil {
		t.Error("a CLA whose localities the policy rewrites got a LEDS form")
	}
}

// TestChangedLEDSCollections: the collections whose members differ between two versions of a
// CLA set, and every collection of a class new to the set, even one another class had with the
// same members (a proxy that moved to that class waits for it).
func TestChangedLEDSCollections(t *testing.T) {
	form := func(cols ...string) *collections.Resource {
		f := &collections.LEDSForm{}
		for _, c := range cols {
			name, v, _ := strings.Cut(c, "@")
			var ver uint64
			_, _ = fmt.Sscan(v, &ver)
			f.Collections = append(f.Collections, collections.LEDSCollection{Name: name, Version: ver})
		}
		return &collections.Resource{LEDS: f}
	}
	set := func(byClass map[string]*collections.Resource) *collections.ResourceSet {
		return &collections.ResourceSet{Key: "k", ByClass: byClass}
	}
	a := form("g1@1", "g2@1")
	for _, tc := range []struct {
		name     string
		old, cur *collections.ResourceSet
		want     []string
	}{
		{"nothing changed", set(map[string]*collections.Resource{"A": a}), set(map[string]*collections.Resource{"A": a}), nil},
		{"a member changed", set(map[string]*collections.Resource{"A": a}), set(map[string]*collections.Resource{"A": form("g1@2", "g2@1")}), []string{"g1"}},
		{"a collection gone", set(map[string]*collections.Resource{"A": a}), set(map[string]*collections.Resource{"A": form("g1@1")}), []string{"g2"}},
		{"a new set", nil, set(map[string]*collections.Resource{"A": a}), []string{"g1", "g2"}},
		{"a set removed", set(map[string]*collections.Resource{"A": a}), nil, []string{"g1", "g2"}},
		{"a class joins with the same collections", set(map[string]*collections.Resource{"A": a}), set(map[string]*collections.Resource{"A": a, "B": a}), []string{"g1", "g2"}},
		{"a class replaces another with the same collections", set(map[string]*collections.Resource{"A": a}), set(map[string]*collections.Resource{"B": a}), []string{"g1", "g2"}},
		{"a class leaves", set(map[string]*collections.Resource{"A": a, "B": a}), set(map[string]*collections.Resource{"A": a}), nil},
	} {
		var got []string
		ChangedLEDSCollections(tc.old, tc.cur, func(n string) { got = append(got, n) })
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
