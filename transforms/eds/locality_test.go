package eds

import (
	"fmt"
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/policy"
	"github.com/krteds/krteds/transforms/transformtest"
)

// lbtG describes one LocalityLbEndpoints: locality "r/z/s" ("nil" for no locality), priority,
// locality weight (0 = unset) and endpoint addresses (each of weight 1).
type lbtG struct {
	loc  string
	prio uint32
	w    uint32
	ips  []string
}

func lbtLbEndpoint(ip string) *endpoint.LbEndpoint {
	return &endpoint.LbEndpoint{
		HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{Address: &core.Address{
			Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{Address: ip, PortSpecifier: &core.SocketAddress_PortValue{PortValue: 8080}}},
		}}},
		LoadBalancingWeight: wrapperspb.UInt32(1),
	}
}

func lbtCLA(groups ...lbtG) *endpoint.ClusterLoadAssignment {
	cla := &endpoint.ClusterLoadAssignment{ClusterName: "outbound|80||foo.ns1.svc.cluster.local"}
	for _, g := range groups {
		l := &endpoint.LocalityLbEndpoints{Priority: g.prio}
		if g.loc != "nil" {
			loc := collections.ParseLocality(g.loc)
			l.Locality = &core.Locality{Region: loc.Region, Zone: loc.Zone, SubZone: loc.Subzone}
		}
		if g.w > 0 {
			l.LoadBalancingWeight = wrapperspb.UInt32(g.w)
		}
		for _, ip := range g.ips {
			l.LbEndpoints = append(l.LbEndpoints, lbtLbEndpoint(ip))
		}
		cla.Endpoints = append(cla.Endpoints, l)
	}
	return cla
}

func lbtLoc(s string) collections.Locality { return collections.ParseLocality(s) }

func lbtDiff(t *testing.T, want, got *endpoint.ClusterLoadAssignment) {
	t.Helper()
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("ClusterLoadAssignment (-want +got):\n%s", diff)
	}
}

func TestLocalityLBSettingFor(t *testing.T) {
	on, off := true, false
	mesh := DefaultMeshLocalitySetting()
	meshOff := &collections.LocalitySetting{Enabled: &off}
	drLoc := &collections.LocalitySetting{Failover: []collections.Failover{{From: "r1", To: "r2"}}}
	drOff := &collections.LocalitySetting{Enabled: &off, Failover: []collections.Failover{{From: "r1", To: "r2"}}}
	drZone := &collections.LocalitySetting{ZoneAware: true}
	drZoneOff := &collections.LocalitySetting{ZoneAware: true, Enabled: &off}
	meshZone := &collections.LocalitySetting{ZoneAware: true, Enabled: &on}
	sameZone := &collections.ServiceInfo{TrafficDistribution: collections.TrafficDistributionPreferSameZone}
	sameNode := &collections.ServiceInfo{TrafficDistribution: collections.TrafficDistributionPreferSameNode}
	anySvc := &collections.ServiceInfo{}
	forcedZone := &collections.LocalitySetting{Enabled: &on, FailoverPriority: policy.PreferSameZoneLabels}
	forcedNode := &collections.LocalitySetting{Enabled: &on, FailoverPriority: policy.PreferSameNodeLabels}
	cases := []struct {
		name         string
		mesh         *collections.LocalitySetting
		tp           *collections.TrafficPolicy
		svc          *collections.ServiceInfo
		want         *collections.LocalitySetting
		wantFailover bool
	}{
		{name: "all disabled", mesh: meshOff, svc: anySvc},
		{name: "no mesh setting", svc: anySvc},
		{name: "mesh locality only", mesh: mesh, svc: anySvc, want: mesh},
		{name: "mesh locality with outlier detection", mesh: mesh, svc: anySvc,
			tp: &collections.TrafficPolicy{OutlierDetection: true}, want: mesh, wantFailover: true},
		{name: "dr locality only", tp: &collections.TrafficPolicy{LoadBalancer: true, Locality: drLoc}, svc: anySvc, want: drLoc},
		{name: "dr locality wins over mesh", mesh: mesh, svc: anySvc,
			tp: &collections.TrafficPolicy{OutlierDetection: true, LoadBalancer: true, Locality: drLoc}, want: drLoc, wantFailover: true},
		{name: "dr locality disabled overrides mesh enabled", mesh: mesh, svc: anySvc,
			tp: &collections.TrafficPolicy{OutlierDetection: true, LoadBalancer: true, Locality: drOff}},
		{name: "dr locality enabled overrides mesh disabled", mesh: meshOff, svc: anySvc,
			tp: &collections.TrafficPolicy{LoadBalancer: true, Locality: drLoc}, want: drLoc},
		{name: "a loadBalancer without locality falls through to the mesh", mesh: mesh, svc: anySvc,
			tp: &collections.TrafficPolicy{LoadBalancer: true}, want: mesh},
		{name: "prefer same zone over mesh", mesh: mesh, svc: sameZone, want: forcedZone, wantFailover: true},
		{name: "prefer same node over mesh", mesh: meshOff, svc: sameNode, want: forcedNode, wantFailover: true},
		{name: "dr locality wins over traffic distribution", mesh: mesh, svc: sameZone,
			tp: &collections.TrafficPolicy{LoadBalancer: true, Locality: drLoc}, want: drLoc},
		{name: "dr locality disabled wins over traffic distribution", mesh: mesh, svc: sameZone,
			tp: &collections.TrafficPolicy{LoadBalancer: true, Locality: drOff}},
		{name: "dr zone-aware", mesh: mesh, svc: anySvc, tp: &collections.TrafficPolicy{LoadBalancer: true, Locality: drZone},
			want: drZone, wantFailover: true},
		{name: "dr zone-aware disabled is kept, without failover", mesh: mesh, svc: sameZone,
			tp: &collections.TrafficPolicy{LoadBalancer: true, Locality: drZoneOff}, want: drZoneOff},
		{name: "dr zone-aware wins over traffic distribution", mesh: mesh, svc: sameNode,
			tp: &collections.TrafficPolicy{LoadBalancer: true, Locality: drZone}, want: drZone, wantFailover: true},
		{name: "traffic distribution wins over mesh zone-aware", mesh: meshZone, svc: sameZone, want: forcedZone, wantFailover: true},
		{name: "mesh zone-aware", mesh: meshZone, svc: anySvc, want: meshZone, wantFailover: true},
		{name: "nil service", mesh: mesh, want: mesh},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, failover := LBSettingFor(c.mesh, c.tp, c.svc)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("setting (-want +got):\n%s", diff)
			}
			if failover != c.wantFailover {
				t.Errorf("enableFailover %v, want %v", failover, c.wantFailover)
			}
		})
	}
	// The forced settings are copies: changing one does not change the package's label lists.
	got, _ := LBSettingFor(nil, nil, sameZone)
	got.FailoverPriority[0] = "x"
	if policy.PreferSameZoneLabels[0] != collections.LabelTopologyNetwork {
		t.Error("LBSettingFor returned the shared policy.PreferSameZoneLabels slice")
	}
}

func TestLocalityMatch(t *testing.T) {
	l := lbtLoc("r1/z1/s1")
	cases := map[string]bool{
		"*": true, "r1": true, "r1/*": true, "r1/z1": true, "r1/z1/*": true, "r1/z1/s1": true,
		"r2": false, "r1/z2": false, "r1/z1/s2": false, "r1/*/s2": false, "*/z1": true, "": false,
	}
	for rule, want := range cases {
		if got := LocalityMatch(l, rule); got != want {
			t.Errorf("LocalityMatch(r1/z1/s1, %q) = %v, want %v", rule, got, want)
		}
	}
	if !LocalityMatch(collections.Locality{}, "*") || LocalityMatch(collections.Locality{}, "r1") || !LocalityMatch(collections.Locality{}, "") {
		t.Error("empty locality: want a match for * and \"\" only")
	}
}

func TestLocalityFailover(t *testing.T) {
	cases := []struct {
		name     string
		proxy    string
		failover []collections.Failover
		in, want *endpoint.ClusterLoadAssignment
	}{
		{
			name:  "same zone 0, same region 1, other region 2",
			proxy: "r1/z1",
			in:    lbtCLA(lbtG{"r1/z1", 0, 1, []string{"10.0.0.1"}}, lbtG{"r1/z2", 0, 1, []string{"10.0.0.2"}}, lbtG{"r2/z3", 0, 1, []string{"10.0.0.3"}}),
			want:  lbtCLA(lbtG{"r1/z1", 0, 1, []string{"10.0.0.1"}}, lbtG{"r1/z2", 1, 1, []string{"10.0.0.2"}}, lbtG{"r2/z3", 2, 1, []string{"10.0.0.3"}}),
		},
		{
			name:     "istiod: all priorities",
			proxy:    "region1/zone1/subzone1",
			failover: []collections.Failover{{From: "region1", To: "region2"}},
			in: lbtCLA(lbtG{"region1/zone1/subzone1", 0, 0, nil}, lbtG{"region1/zone1/subzone1", 0, 0, nil},
				lbtG{"region1/zone1/subzone2", 0, 0, nil}, lbtG{"region1/zone1/subzone3", 0, 0, nil},
				lbtG{"region1/zone2", 0, 0, nil}, lbtG{"region2", 0, 0, nil}, lbtG{"region3", 0, 0, nil}),
			want: lbtCLA(lbtG{"region1/zone1/subzone1", 0, 0, nil}, lbtG{"region1/zone1/subzone1", 0, 0, nil},
				lbtG{"region1/zone1/subzone2", 1, 0, nil}, lbtG{"region1/zone1/subzone3", 1, 0, nil},
				lbtG{"region1/zone2", 2, 0, nil}, lbtG{"region2", 3, 0, nil}, lbtG{"region3", 4, 0, nil}),
		},
		{
			name:     "istiod: priorities with gaps are compacted",
			proxy:    "region1/zone1/subzone1",
			failover: []collections.Failover{{From: "region1", To: "region2"}},
			in:       lbtCLA(lbtG{"region1/zone1/subzone2", 0, 1, []string{"1.1.1.1"}}, lbtG{"region2/zone1/subzone2", 0, 1, []string{"2.2.2.2"}}),
			want:     lbtCLA(lbtG{"region1/zone1/subzone2", 0, 1, []string{"1.1.1.1"}}, lbtG{"region2/zone1/subzone2", 1, 1, []string{"2.2.2.2"}}),
		},
		{
			name:     "istiod: a nil locality is another region and not the failover target",
			proxy:    "region1/zone1/subzone1",
			failover: []collections.Failover{{From: "region1", To: "region2"}},
			in:       lbtCLA(lbtG{"region1/zone1/subzone2", 0, 0, nil}, lbtG{"nil", 0, 0, nil}, lbtG{"region2/zone1/subzone2", 0, 0, nil}),
			want:     lbtCLA(lbtG{"region1/zone1/subzone2", 0, 0, nil}, lbtG{"nil", 2, 0, nil}, lbtG{"region2/zone1/subzone2", 1, 0, nil}),
		},
		{
			name:     "a failover region rule sends other regions to 4, then compacted",
			proxy:    "r1/z1",
			failover: []collections.Failover{{From: "r1", To: "r3"}},
			in:       lbtCLA(lbtG{"r1/z1", 0, 1, []string{"a"}}, lbtG{"r2/z1", 0, 1, []string{"b"}}, lbtG{"r3/z1", 0, 1, []string{"c"}}),
			want:     lbtCLA(lbtG{"r1/z1", 0, 1, []string{"a"}}, lbtG{"r2/z1", 2, 1, []string{"b"}}, lbtG{"r3/z1", 1, 1, []string{"c"}}),
		},
		{
			name:     "only the first rule from the proxy's region counts",
			proxy:    "r1/z1",
			failover: []collections.Failover{{From: "r9", To: "r2"}, {From: "r1", To: "r3"}, {From: "r1", To: "r2"}},
			in:       lbtCLA(lbtG{"r2/z1", 0, 1, []string{"b"}}, lbtG{"r3/z1", 0, 1, []string{"c"}}),
			want:     lbtCLA(lbtG{"r2/z1", 1, 1, []string{"b"}}, lbtG{"r3/z1", 0, 1, []string{"c"}}),
		},
		{
			name:     "rules from other regions do not apply",
			proxy:    "r1/z1",
			failover: []collections.Failover{{From: "r9", To: "r2"}},
			in:       lbtCLA(lbtG{"r2/z1", 0, 1, []string{"b"}}, lbtG{"r3/z1", 0, 1, []string{"c"}}),
			want:     lbtCLA(lbtG{"r2/z1", 0, 1, []string{"b"}}, lbtG{"r3/z1", 0, 1, []string{"c"}}),
		},
		{
			name:  "combined with existing priorities as prev*5+p",
			proxy: "r1/z1",
			in: lbtCLA(lbtG{"r1/z1", 0, 1, []string{"a"}}, lbtG{"r1/z1", 1, 1, []string{"b"}},
				lbtG{"r2/z1", 0, 1, []string{"c"}}, lbtG{"r2/z1", 1, 1, []string{"d"}}),
			want: lbtCLA(lbtG{"r1/z1", 0, 1, []string{"a"}}, lbtG{"r1/z1", 2, 1, []string{"b"}},
				lbtG{"r2/z1", 1, 1, []string{"c"}}, lbtG{"r2/z1", 3, 1, []string{"d"}}),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ApplyFailover(c.in, lbtLoc(c.proxy), c.failover)
			lbtDiff(t, c.want, c.in)
		})
	}
}

func TestLocalityDistribute(t *testing.T) {
	empty := []string(nil)
	cases := []struct {
		name       string
		proxy      string
		distribute []collections.Distribute
		in, want   *endpoint.ClusterLoadAssignment
	}{
		{
			// istiod's TestApplyLocalitySetting/Distribute: expected weights [40 40 15 5 0 0 0].
			name:  "istiod: distribution between subzones",
			proxy: "region1/zone1/subzone1",
			distribute: []collections.Distribute{{From: "region1/zone1/subzone1", To: map[string]uint32{
				"region1/zone1/subzone1": 80, "region1/zone1/subzone2": 15, "region1/zone1/subzone3": 5,
			}}},
			in: lbtCLA(lbtG{"region1/zone1/subzone1", 0, 0, nil}, lbtG{"region1/zone1/subzone1", 0, 0, nil},
				lbtG{"region1/zone1/subzone2", 0, 0, nil}, lbtG{"region1/zone1/subzone3", 0, 0, nil},
				lbtG{"region1/zone2", 0, 0, nil}, lbtG{"region2", 0, 0, nil}, lbtG{"region3", 0, 0, nil}),
			want: lbtCLA(lbtG{"region1/zone1/subzone1", 0, 40, nil}, lbtG{"region1/zone1/subzone1", 0, 40, nil},
				lbtG{"region1/zone1/subzone2", 0, 15, nil}, lbtG{"region1/zone1/subzone3", 0, 5, nil},
				lbtG{"region1/zone2", 0, 0, nil}, lbtG{"region2", 0, 0, nil}, lbtG{"region3", 0, 0, nil}),
		},
		{
			name:  "weights follow the original locality weights; unmatched localities lose their endpoints",
			proxy: "r1/z1/s1",
			distribute: []collections.Distribute{{From: "r1", To: map[string]uint32{
				"r1/z1": 60, "r2/*": 40,
			}}},
			in: lbtCLA(lbtG{"r1/z1/", 0, 2, []string{"a", "b"}}, lbtG{"r1/z2/", 0, 1, []string{"c"}},
				lbtG{"r2/z3/", 0, 1, []string{"d"}}, lbtG{"r2/z4/", 0, 3, []string{"e", "f", "g"}}),
			want: lbtCLA(lbtG{"r1/z1/", 0, 60, []string{"a", "b"}}, lbtG{"r1/z2/", 0, 1, empty},
				lbtG{"r2/z3/", 0, 10, []string{"d"}}, lbtG{"r2/z4/", 0, 30, []string{"e", "f", "g"}}),
		},
		{
			name:       "weights are rounded up",
			proxy:      "r1/z1",
			distribute: []collections.Distribute{{From: "*", To: map[string]uint32{"*": 100}}},
			in:         lbtCLA(lbtG{"r1/z1", 0, 1, []string{"a"}}, lbtG{"r1/z2", 0, 1, []string{"b"}}, lbtG{"r2/z1", 0, 1, []string{"c"}}),
			want:       lbtCLA(lbtG{"r1/z1", 0, 34, []string{"a"}}, lbtG{"r1/z2", 0, 34, []string{"b"}}, lbtG{"r2/z1", 0, 34, []string{"c"}}),
		},
		{
			name:  "the first rule matching the proxy applies",
			proxy: "r1/z1",
			distribute: []collections.Distribute{
				{From: "r2", To: map[string]uint32{"r2": 100}},
				{From: "r1/z1", To: map[string]uint32{"r1/z2": 100}},
				{From: "*", To: map[string]uint32{"r1/z1": 100}},
			},
			in:   lbtCLA(lbtG{"r1/z1", 0, 1, []string{"a"}}, lbtG{"r1/z2", 0, 1, []string{"b"}}),
			want: lbtCLA(lbtG{"r1/z1", 0, 1, empty}, lbtG{"r1/z2", 0, 100, []string{"b"}}),
		},
		{
			name:       "no rule matches the proxy: unchanged",
			proxy:      "r3/z1",
			distribute: []collections.Distribute{{From: "r1", To: map[string]uint32{"r1": 100}}},
			in:         lbtCLA(lbtG{"r1/z1", 0, 1, []string{"a"}}, lbtG{"r2/z1", 0, 1, []string{"b"}}),
			want:       lbtCLA(lbtG{"r1/z1", 0, 1, []string{"a"}}, lbtG{"r2/z1", 0, 1, []string{"b"}}),
		},
		{
			name:       "overlapping targets: the more specific takes its localities first",
			proxy:      "r1/z1",
			distribute: []collections.Distribute{{From: "r1", To: map[string]uint32{"r1/*": 30, "r1/z1": 70}}},
			in:         lbtCLA(lbtG{"r1/z1", 0, 1, []string{"a"}}, lbtG{"r1/z2", 0, 1, []string{"b"}}),
			want:       lbtCLA(lbtG{"r1/z1", 0, 70, []string{"a"}}, lbtG{"r1/z2", 0, 30, []string{"b"}}),
		},
		{
			name:       "endpoints without locality match only wildcards",
			proxy:      "r1/z1",
			distribute: []collections.Distribute{{From: "r1", To: map[string]uint32{"r1": 50, "*": 50}}},
			in:         lbtCLA(lbtG{"", 0, 1, []string{"a"}}, lbtG{"r1/z1", 0, 1, []string{"b"}}),
			want:       lbtCLA(lbtG{"", 0, 50, []string{"a"}}, lbtG{"r1/z1", 0, 50, []string{"b"}}),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ApplyDistribute(c.in, lbtLoc(c.proxy), c.distribute)
			lbtDiff(t, c.want, c.in)
		})
	}
}

func TestLocalityFailoverPriority(t *testing.T) {
	const network, cluster = collections.LabelTopologyNetwork, collections.LabelTopologyCluster
	l := func(n, c string) map[string]string { return map[string]string{network: n, cluster: c, "key": "value"} }
	in := func() *endpoint.ClusterLoadAssignment {
		return lbtCLA(lbtG{"region1/zone1/subzone1", 0, 2, []string{"1.1.1.1", "2.2.2.2"}},
			lbtG{"region2/zone2/subzone2", 0, 2, []string{"3.3.3.3", "4.4.4.4"}},
			lbtG{"region3/zone3/subzone3", 0, 2, []string{"1.2.3.4", "2.3.4.5"}})
	}
	labels := [][]map[string]string{
		{l("n1", "c1"), l("n2", "c2")},
		{l("n1", "c3"), l("n2", "c4")},
		{l("n1", "c1"), l("n2", "c2")},
	}
	cases := []struct {
		name        string
		priorities  []string
		proxyLabels map[string]string
		labels      [][]map[string]string
		want        *endpoint.ClusterLoadAssignment
	}{
		{
			// istiod's "match network label": same network, other cluster → 1; other network and
			// cluster → 1+2; compacted to 0 and 1.
			name:        "istiod: match network label",
			priorities:  []string{network, cluster},
			proxyLabels: map[string]string{network: "n1", cluster: "test"},
			labels:      labels,
			want: lbtCLA(lbtG{"region1/zone1/subzone1", 0, 1, []string{"1.1.1.1"}}, lbtG{"region1/zone1/subzone1", 1, 1, []string{"2.2.2.2"}},
				lbtG{"region2/zone2/subzone2", 0, 1, []string{"3.3.3.3"}}, lbtG{"region2/zone2/subzone2", 1, 1, []string{"4.4.4.4"}},
				lbtG{"region3/zone3/subzone3", 0, 1, []string{"1.2.3.4"}}, lbtG{"region3/zone3/subzone3", 1, 1, []string{"2.3.4.5"}}),
		},
		{
			name:        "all labels match: one priority",
			priorities:  []string{"key"},
			proxyLabels: map[string]string{"key": "value"},
			labels:      labels,
			want: lbtCLA(lbtG{"region1/zone1/subzone1", 0, 2, []string{"1.1.1.1", "2.2.2.2"}},
				lbtG{"region2/zone2/subzone2", 0, 2, []string{"3.3.3.3", "4.4.4.4"}},
				lbtG{"region3/zone3/subzone3", 0, 2, []string{"1.2.3.4", "2.3.4.5"}}),
		},
		{
			name:        "label=value overrides the proxy's value",
			priorities:  []string{cluster + "=c3"},
			proxyLabels: map[string]string{cluster: "c1"},
			labels:      labels,
			want: lbtCLA(lbtG{"region1/zone1/subzone1", 1, 2, []string{"1.1.1.1", "2.2.2.2"}},
				lbtG{"region2/zone2/subzone2", 0, 1, []string{"3.3.3.3"}}, lbtG{"region2/zone2/subzone2", 1, 1, []string{"4.4.4.4"}},
				lbtG{"region3/zone3/subzone3", 1, 2, []string{"1.2.3.4", "2.3.4.5"}}),
		},
		{
			name:        "no proxy labels: unchanged",
			priorities:  []string{network},
			proxyLabels: nil,
			labels:      labels,
			want:        in(),
		},
		{
			name:        "no endpoint labels: unchanged",
			priorities:  []string{network},
			proxyLabels: map[string]string{network: "n1"},
			labels:      nil,
			want:        in(),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := in()
			ApplyFailoverPriority(got, c.proxyLabels, c.labels, c.priorities)
			lbtDiff(t, c.want, got)
		})
	}
}

func TestLocalityZoneAware(t *testing.T) {
	// istiod's TestApplyZoneAwareLoadBalancer on its fake cluster.
	fake := func() *endpoint.ClusterLoadAssignment {
		return lbtCLA(lbtG{"region1/zone1/subzone1", 0, 0, nil}, lbtG{"region1/zone1/subzone2", 0, 0, nil},
			lbtG{"region1/zone1/subzone3", 0, 0, nil}, lbtG{"region1/zone2", 0, 0, nil},
			lbtG{"region2", 0, 0, nil}, lbtG{"region3", 0, 0, nil})
	}
	proxy := lbtLoc("region1/zone1/subzone1")
	cases := []struct {
		name     string
		failover []collections.Failover
		want     []uint32
	}{
		{"without failover, region buckets", nil, []uint32{0, 0, 0, 0, 1, 1}},
		{"failover target region next", []collections.Failover{{From: "region1", To: "region2"}}, []uint32{0, 0, 0, 0, 1, 2}},
		{"no rule for the proxy's region", []collections.Failover{{From: "region9", To: "region2"}}, []uint32{0, 0, 0, 0, 1, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cla := fake()
			ApplyLocalityLoadBalancer(cla, &collections.LocalitySetting{ZoneAware: true, Failover: c.failover}, true, proxy, nil, nil)
			var got []uint32
			for _, l := range cla.Endpoints {
				got = append(got, l.Priority)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("priorities (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("disabled: unchanged", func(t *testing.T) {
		off := false
		cla := fake()
		ApplyLocalityLoadBalancer(cla, &collections.LocalitySetting{ZoneAware: true, Enabled: &off}, false, proxy, nil, nil)
		lbtDiff(t, fake(), cla)
	})
	t.Run("combined with existing priorities as prev*3+p", func(t *testing.T) {
		cla := lbtCLA(lbtG{"r1/z1", 0, 1, []string{"a"}}, lbtG{"r1/z2", 1, 1, []string{"b"}}, lbtG{"r2/z1", 0, 1, []string{"c"}})
		ApplyZoneAwareFailover(cla, lbtLoc("r1/z1"), nil)
		lbtDiff(t, lbtCLA(lbtG{"r1/z1", 0, 1, []string{"a"}}, lbtG{"r1/z2", 2, 1, []string{"b"}}, lbtG{"r2/z1", 1, 1, []string{"c"}}), cla)
	})
}

// lbtEndpoint is a pod endpoint in a locality on a node, with topology labels.
func lbtEndpoint(ip string, loc collections.Locality, node, network string) collections.Endpoint {
	return transformtest.Ep(ip, collections.Healthy, loc, node, func(m *collections.EndpointMeta) { m.Network = network })
}

// lbtEndpointLabels returns the labels parallel to a CLA's endpoints, by address.
func lbtEndpointLabels(cla *endpoint.ClusterLoadAssignment, eps []collections.Endpoint) [][]map[string]string {
	byIP := map[string]map[string]string{}
	for _, e := range eps {
		byIP[e.Address] = e.Meta.AugmentedLabels()
	}
	var out [][]map[string]string
	for _, l := range cla.Endpoints {
		var ls []map[string]string
		for _, lb := range l.LbEndpoints {
			ls = append(ls, byIP[lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()])
		}
		out = append(out, ls)
	}
	return out
}

var lbtEndpoints = []collections.Endpoint{
	lbtEndpoint("10.0.0.1", lbtLoc("r1/z1/s1"), "n1", ""),
	lbtEndpoint("10.0.0.2", lbtLoc("r1/z1/s1"), "n2", ""),
	lbtEndpoint("10.0.0.3", lbtLoc("r1/z1/s2"), "n3", ""),
	lbtEndpoint("10.0.0.4", lbtLoc("r1/z2"), "n4", ""),
	lbtEndpoint("10.0.0.5", lbtLoc("r2/z3"), "n5", ""),
	lbtEndpoint("10.0.0.6", lbtLoc("r2/z3"), "n6", "net2"),
	lbtEndpoint("10.0.0.7", lbtLoc("r3/z9"), "n7", ""),
	lbtEndpoint("10.0.0.8", collections.Locality{}, "", ""),
}

var lbtProxies = []collections.ProxyClass{
	{Locality: lbtLoc("r1/z1/s1"), NodeName: "n1", ClusterID: "Kubernetes"},
	{Locality: lbtLoc("r1/z2"), NodeName: "n4", ClusterID: "Kubernetes"},
	{Locality: lbtLoc("r2/z3"), NodeName: "n6", ClusterID: "Kubernetes", Network: "net2"},
	{Locality: lbtLoc("r9/z9"), NodeName: "n9", ClusterID: "Kubernetes"},
	{ClusterID: "Kubernetes"},
}

func lbtSettings() map[string]struct {
	setting  *collections.LocalitySetting
	failover bool
} {
	on := true
	return map[string]struct {
		setting  *collections.LocalitySetting
		failover bool
	}{
		"mesh default":           {DefaultMeshLocalitySetting(), false},
		"mesh default + outlier": {DefaultMeshLocalitySetting(), true},
		"failover rule":          {&collections.LocalitySetting{Failover: []collections.Failover{{From: "r1", To: "r3"}}}, true},
		"prefer same zone":       {&collections.LocalitySetting{Enabled: &on, FailoverPriority: policy.PreferSameZoneLabels}, true},
		"prefer same node":       {&collections.LocalitySetting{Enabled: &on, FailoverPriority: policy.PreferSameNodeLabels}, true},
		"priority + failover": {&collections.LocalitySetting{FailoverPriority: []string{collections.LabelTopologyNetwork},
			Failover: []collections.Failover{{From: "r1", To: "r2"}}}, true},
		"distribute": {&collections.LocalitySetting{Distribute: []collections.Distribute{
			{From: "r1/z1/*", To: map[string]uint32{"r1/z1/*": 70, "r2/*": 30}},
			{From: "*", To: map[string]uint32{"*": 100}},
		}}, true},
		"zone-aware":            {&collections.LocalitySetting{ZoneAware: true, Failover: []collections.Failover{{From: "r1", To: "r2"}}}, true},
		"zone-aware + priority": {&collections.LocalitySetting{ZoneAware: true, FailoverPriority: []string{collections.LabelTopologyNetwork}}, true},
	}
}

// TestLocalityLoadBalancerPaths checks that applying a whole setting to a CLA built without
// priorities (with endpoint labels) gives the same CLA as building under LocalityLBPolicy and
// applying the rest; and that every result keeps Envoy's invariants.
func TestLocalityLoadBalancerPaths(t *testing.T) {
	svc := &collections.ServiceInfo{Name: "foo", Namespace: "ns1", Hostname: "foo.ns1.svc.cluster.local"}
	port := collections.ServicePort{Name: "http", Port: 80, Protocol: "TCP"}
	name := transforms.ClusterName(80, "", svc.Hostname)
	for sname, s := range lbtSettings() {
		for _, class := range lbtProxies {
			t.Run(fmt.Sprintf("%s/%s", sname, class.Key()), func(t *testing.T) {
				plain := planCLA(name, svc, port, collections.AppendRefs(nil, lbtEndpoints), LBPolicy{SupportsUnhealthy: true}, class, nil).Proto()
				whole := proto.Clone(plain).(*endpoint.ClusterLoadAssignment)
				ApplyLocalityLoadBalancer(whole, s.setting, s.failover, class.Locality, ClassLabels(class), lbtEndpointLabels(plain, lbtEndpoints))

				split := planCLA(name, svc, port, collections.AppendRefs(nil, lbtEndpoints), LocalityLBPolicy(s.setting, s.failover, nil, svc), class, nil).Proto()
				ApplyLocalityLoadBalancer(split, s.setting, s.failover, class.Locality, nil, nil)
				lbtDiff(t, whole, split)
				lbtCheckInvariants(t, whole)

				// Only the projected part of the proxy's locality matters.
				projected := class
				projected.Locality = ProxyLocalityDependence(s.setting, s.failover, class.Locality)
				other := planCLA(name, svc, port, collections.AppendRefs(nil, lbtEndpoints), LocalityLBPolicy(s.setting, s.failover, nil, svc), class, nil).Proto()
				ApplyLocalityLoadBalancer(other, s.setting, s.failover, projected.Locality, nil, nil)
				lbtDiff(t, whole, other)
			})
		}
	}
}

func lbtCheckInvariants(t *testing.T, cla *endpoint.ClusterLoadAssignment) {
	t.Helper()
	var prios []uint32
	type key struct {
		loc  string
		prio uint32
	}
	seen := map[key]bool{}
	for _, l := range cla.Endpoints {
		if len(l.LbEndpoints) > 0 && l.GetLoadBalancingWeight().GetValue() == 0 {
			t.Errorf("locality %v has endpoints and weight 0", l.Locality)
		}
		if !slices.Contains(prios, l.Priority) {
			prios = append(prios, l.Priority)
		}
		k := key{localityOf(l.Locality).String(), l.Priority}
		if seen[k] {
			t.Errorf("locality %v twice at priority %d", l.Locality, l.Priority)
		}
		seen[k] = true
	}
	slices.Sort(prios)
	for i, p := range prios {
		if p != uint32(i) {
			t.Errorf("priorities %v have a gap", prios)
			break
		}
	}
}

// TestLocalityPreferClose is the reference's TrafficDistribution check (PreferClose, proxy in
// r1/z1): {r1,z1} → 0, {r1,z2} → 1, {r2,z3} → 2.
func TestLocalityPreferClose(t *testing.T) {
	svc := &collections.ServiceInfo{Name: "foo", Namespace: "ns1", Hostname: "foo.ns1.svc.cluster.local",
		TrafficDistribution: collections.TrafficDistributionPreferSameZone}
	port := collections.ServicePort{Name: "http", Port: 80, Protocol: "TCP"}
	eps := []collections.Endpoint{
		lbtEndpoint("10.1.0.1", lbtLoc("r1/z1"), "n1", ""),
		lbtEndpoint("10.1.0.2", lbtLoc("r1/z2"), "n2", ""),
		lbtEndpoint("10.1.0.3", lbtLoc("r2/z3"), "n3", ""),
	}
	class := collections.ProxyClass{Locality: lbtLoc("r1/z1"), NodeName: "n1", ClusterID: "Kubernetes"}
	setting, failover := LBSettingFor(DefaultMeshLocalitySetting(), nil, svc)
	name := transforms.ClusterName(80, "", svc.Hostname)
	cla := planCLA(name, svc, port, collections.AppendRefs(nil, eps), LBPolicy{SupportsUnhealthy: true}, class, nil).Proto()
	ApplyLocalityLoadBalancer(cla, setting, failover, class.Locality, ClassLabels(class), lbtEndpointLabels(cla, eps))
	got := map[string]uint32{}
	for _, l := range cla.Endpoints {
		got[localityOf(l.Locality).String()] = l.Priority
	}
	want := map[string]uint32{"r1/z1/": 0, "r1/z2/": 1, "r2/z3/": 2}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("priorities (-want +got):\n%s", diff)
	}
}

func TestLocalityApplyDispatch(t *testing.T) {
	three := func() *endpoint.ClusterLoadAssignment {
		return lbtCLA(lbtG{"r1/z1", 0, 1, []string{"a"}}, lbtG{"r1/z2", 0, 1, []string{"b"}}, lbtG{"r2/z1", 0, 1, []string{"c"}})
	}
	off := false
	proxy := lbtLoc("r1/z1")
	cases := []struct {
		name     string
		setting  *collections.LocalitySetting
		failover bool
		want     *endpoint.ClusterLoadAssignment
	}{
		{"nil setting", nil, true, three()},
		{"disabled", &collections.LocalitySetting{Enabled: &off}, true, three()},
		{"mesh default without outlier detection: nothing", DefaultMeshLocalitySetting(), false, three()},
		{"mesh default with outlier detection: failover", DefaultMeshLocalitySetting(), true,
			lbtCLA(lbtG{"r1/z1", 0, 1, []string{"a"}}, lbtG{"r1/z2", 1, 1, []string{"b"}}, lbtG{"r2/z1", 2, 1, []string{"c"}})},
		{"distribute wins over failover", &collections.LocalitySetting{Distribute: []collections.Distribute{
			{From: "r1", To: map[string]uint32{"r1/z2": 100}},
		}}, true,
			lbtCLA(lbtG{"r1/z1", 0, 1, nil}, lbtG{"r1/z2", 0, 100, []string{"b"}}, lbtG{"r2/z1", 0, 1, nil})},
		{"distribute applies without outlier detection", &collections.LocalitySetting{Distribute: []collections.Distribute{
			{From: "r1", To: map[string]uint32{"r1/z2": 100}},
		}}, false,
			lbtCLA(lbtG{"r1/z1", 0, 1, nil}, lbtG{"r1/z2", 0, 100, []string{"b"}}, lbtG{"r2/z1", 0, 1, nil})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cla := three()
			ApplyLocalityLoadBalancer(cla, c.setting, c.failover, proxy, nil, nil)
			lbtDiff(t, c.want, cla)
		})
	}
}

func TestLocalitySupportsUnhealthyAndPolicy(t *testing.T) {
	anySvc := &collections.ServiceInfo{}
	td := &collections.ServiceInfo{TrafficDistribution: collections.TrafficDistributionPreferSameZone}
	minHealth := &collections.TrafficPolicy{OutlierDetection: true, MinHealthPercent: 10}
	if !SupportsUnhealthyEndpoints(anySvc, nil) || !SupportsUnhealthyEndpoints(anySvc, &collections.TrafficPolicy{OutlierDetection: true}) {
		t.Error("unhealthy endpoints are sent by default")
	}
	if SupportsUnhealthyEndpoints(anySvc, minHealth) {
		t.Error("minHealthPercent > 0 stops unhealthy endpoints")
	}
	if !SupportsUnhealthyEndpoints(td, minHealth) {
		t.Error("trafficDistribution forces unhealthy endpoints")
	}
	dist := &collections.LocalitySetting{Distribute: []collections.Distribute{{From: "*", To: map[string]uint32{"*": 100}}},
		FailoverPriority: []string{"x"}}
	if p := LocalityLBPolicy(dist, true, minHealth, anySvc); p.Failover || p.FailoverPriority != nil || p.SupportsUnhealthy {
		t.Errorf("distribute: no failoverPriority split; got %+v", p)
	}
	prio := &collections.LocalitySetting{FailoverPriority: []string{"x"}}
	if p := LocalityLBPolicy(prio, false, nil, anySvc); p.Failover || p.FailoverPriority != nil {
		t.Errorf("without failover: no split; got %+v", p)
	}
	if p := LocalityLBPolicy(prio, true, nil, anySvc); !p.Failover || !slices.Equal(p.FailoverPriority, []string{"x"}) || !p.SupportsUnhealthy {
		t.Errorf("with failover: split; got %+v", p)
	}
}
