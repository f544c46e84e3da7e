package eds

// The ClusterLoadAssignment as a protobuf message, and istiod's locality load balancing written
// on that message as istiod writes it (pilot/pkg/networking/core/loadbalancer): the oracle the
// tests hold krteds' one renderer to. krteds plans a CLA (PlanCLA), applies the locality rules
// to the plan (applyLocalityLB) and encodes it by hand (Encode); the tests build the same CLA
// here and compare bytes.

import (
	"bytes"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// Proto renders the plan as a ClusterLoadAssignment message: endpoint weight (1 unless a
// WorkloadEntry sets one), tlsMode and
// istio.workload metadata, locality weight = sum of endpoint weights.
func (p CLAPlan) Proto() *endpoint.ClusterLoadAssignment {
	cla := &endpoint.ClusterLoadAssignment{ClusterName: p.ClusterName}
	for _, g := range p.Groups {
		lbs := make([]*endpoint.LbEndpoint, 0, len(g.Endpoints))
		for _, e := range g.Endpoints {
			lbs = append(lbs, lbEndpoint(*e, p.TLS.Value(e), oracleHashKey(p.HashKey, *e)))
		}
		loc := &core.Locality{Region: g.Locality.Region, Zone: g.Locality.Zone, SubZone: g.Locality.Subzone}
		l := localityGroup(loc, g.Priority, lbs)
		if g.Weight != 0 {
			l.LoadBalancingWeight = wrapperspb.UInt32(g.Weight)
		}
		cla.Endpoints = append(cla.Endpoints, l)
	}
	return cla
}

// compactPriorities renumbers the priorities of localities to 0..N without gaps.
func compactPriorities(l []*endpoint.LocalityLbEndpoints) {
	renumberPriorities(len(l), func(i int) *uint32 { return &l[i].Priority })
}

func localityGroup(loc *core.Locality, priority uint32, lbs []*endpoint.LbEndpoint) *endpoint.LocalityLbEndpoints {
	var weight uint64
	for _, lb := range lbs {
		weight += uint64(lb.GetLoadBalancingWeight().GetValue())
	}
	if weight > math.MaxUint32 {
		weight = math.MaxUint32
	}
	return &endpoint.LocalityLbEndpoints{
		Locality:            loc,
		LbEndpoints:         lbs,
		LoadBalancingWeight: wrapperspb.UInt32(uint32(weight)),
		Priority:            priority,
	}
}

// oracleHashKey is the endpoint's hash key under a service's krteds.io/endpoint-hash-key value:
// the Pod's name, or the named Pod annotation's value, else none.
func oracleHashKey(setting string, e collections.Endpoint) string {
	if setting == "pod-name" {
		_, name, _ := strings.Cut(e.Pod, "/")
		return name
	}
	if setting == "" || e.Meta == nil {
		return ""
	}
	return e.Meta.Annotations.Map()[setting]
}

// lbEndpoint renders one endpoint; tlsMode is its tlsMode metadata value ("" for none), hashKey
// its envoy.lb hash_key ("" for none).
func lbEndpoint(e collections.Endpoint, tlsMode, hashKey string) *endpoint.LbEndpoint {
	m := e.Meta
	fm := map[string]*structpb.Struct{
		"istio": {Fields: map[string]*structpb.Value{
			"workload": structpb.NewStringValue(m.WorkloadName + ";" + m.Namespace + ";" + m.CanonicalName + ";" + m.CanonicalRevision + ";" + m.ClusterID),
		}},
	}
	if hashKey != "" {
		fm["envoy.lb"] = &structpb.Struct{Fields: map[string]*structpb.Value{"hash_key": structpb.NewStringValue(hashKey)}}
	}
	if tlsMode != "" {
		fm["envoy.transport_socket_match"] = &structpb.Struct{Fields: map[string]*structpb.Value{
			"tlsMode": structpb.NewStringValue(tlsMode),
		}}
	}
	health := core.HealthStatus(e.Health)
	if v, _ := m.Label("istio.io/draining"); v != "" {
		health = core.HealthStatus_DRAINING
	}
	return &endpoint.LbEndpoint{
		HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Address:       e.Address,
				PortSpecifier: &core.SocketAddress_PortValue{PortValue: e.Port},
			}}},
		}},
		HealthStatus:        health, // istiod's buildEnvoyLbEndpoint: the number as it is, but draining by label
		LoadBalancingWeight: wrapperspb.UInt32(m.LBWeight()),
		Metadata:            &core.Metadata{FilterMetadata: fm},
	}
}

// ApplyLocalityLoadBalancer is istiod's LBSettings.ApplyToLoadAssignment for a setting and
// enableFailover from LBSettingFor. cla is modified in place; it must come from PlanCLA, with
// its localities sorted and every priority 0 when endpointLabels are given.
//
// endpointLabels[i][j] are the labels of cla.Endpoints[i].LbEndpoints[j]; with nil labels (or
// nil proxyLabels) the failoverPriority split is skipped, as istiod skips it, which is what a
// CLA already split by PlanCLA under LocalityLBPolicy needs.
//
//   - distribute set → ApplyDistribute;
//   - else, with failover enabled: failoverPriority → ApplyFailoverPriority, then ApplyFailover
//     only if failover rules are set; without failoverPriority → ApplyFailover;
//   - zone-aware and enabled: ApplyFailoverPriority, then ApplyZoneAwareFailover;
//   - nil or disabled setting: nothing.
func ApplyLocalityLoadBalancer(cla *endpoint.ClusterLoadAssignment, setting *collections.LocalitySetting, enableFailover bool,
	proxyLocality collections.Locality, proxyLabels map[string]string, endpointLabels [][]map[string]string,
) {
	if cla == nil || !setting.IsEnabled() {
		return
	}
	if setting.ZoneAware {
		if len(setting.FailoverPriority) > 0 {
			ApplyFailoverPriority(cla, proxyLabels, endpointLabels, setting.FailoverPriority)
		}
		ApplyZoneAwareFailover(cla, proxyLocality, setting.Failover)
		return
	}
	switch {
	case len(setting.Distribute) > 0:
		ApplyDistribute(cla, proxyLocality, setting.Distribute)
	case !enableFailover:
	case len(setting.FailoverPriority) > 0:
		ApplyFailoverPriority(cla, proxyLabels, endpointLabels, setting.FailoverPriority)
		if len(setting.Failover) > 0 {
			ApplyFailover(cla, proxyLocality, setting.Failover)
		}
	default:
		ApplyFailover(cla, proxyLocality, setting.Failover)
	}
}

// ApplyFailoverPriority is istiod's applyFailoverPriorities: each LocalityLbEndpoints is split
// into one entry per priority (FailoverPriority of each endpoint's labels against the proxy's),
// in priority order, each weighted by the sum of its endpoints' weights; entries without
// endpoints disappear; priorities are then compacted to 0..N. Nothing happens without proxy
// labels or endpoint labels.
func ApplyFailoverPriority(cla *endpoint.ClusterLoadAssignment, proxyLabels map[string]string, endpointLabels [][]map[string]string, priorities []string) {
	if cla == nil || len(proxyLabels) == 0 || len(endpointLabels) == 0 {
		return
	}
	var out []*endpoint.LocalityLbEndpoints
	for i, l := range cla.Endpoints {
		var labels []map[string]string
		if i < len(endpointLabels) {
			labels = endpointLabels[i]
		}
		byPriority := map[int][]*endpoint.LbEndpoint{}
		for j, lb := range l.LbEndpoints {
			var epLabels map[string]string
			if j < len(labels) {
				epLabels = labels[j]
			}
			p := FailoverPriority(proxyLabels, func(k string) string { return epLabels[k] }, priorities)
			byPriority[p] = append(byPriority[p], lb)
		}
		for _, p := range slices.Sorted(maps.Keys(byPriority)) {
			out = append(out, localityGroup(l.Locality, uint32(p), byPriority[p]))
		}
	}
	compactPriorities(out)
	cla.Endpoints = out
}

// ApplyDistribute is istiod's applyLocalityWeights. The first rule whose From matches the proxy
// locality applies: each To pattern takes the localities it matches that no earlier pattern took
// and gives each ceil(weight × its weight / their total weight) when that is > 0; localities no
// pattern takes keep their entry with no endpoints. A missing locality weight counts as 1.
//
// istiod walks the To patterns in map order; here the more specific patterns (more non-wildcard
// segments) go first, then alphabetical, which only matters for overlapping patterns (which
// validation rejects). Weights are computed in integers, without istiod's uint32 overflow.
func ApplyDistribute(cla *endpoint.ClusterLoadAssignment, proxyLocality collections.Locality, distribute []collections.Distribute) {
	if cla == nil {
		return
	}
	for _, d := range distribute {
		if !LocalityMatch(proxyLocality, d.From) {
			continue
		}
		taken := make([]bool, len(cla.Endpoints))
		for _, pattern := range distributeOrder(d.To) {
			weight := uint64(d.To[pattern])
			var matched []int
			var total uint64
			for i, l := range cla.Endpoints {
				if taken[i] || !LocalityMatch(localityOf(l.Locality), pattern) {
					continue
				}
				taken[i] = true
				matched = append(matched, i)
				total += localityWeight(l)
			}
			if total == 0 {
				continue
			}
			for _, i := range matched {
				w := (localityWeight(cla.Endpoints[i])*weight + total - 1) / total
				if w > 0 {
					cla.Endpoints[i].LoadBalancingWeight = wrapperspb.UInt32(uint32(min(w, math.MaxUint32)))
				}
			}
		}
		for i, t := range taken {
			if !t {
				cla.Endpoints[i].LbEndpoints = nil
			}
		}
		return
	}
}

func localityWeight(l *endpoint.LocalityLbEndpoints) uint64 {
	if l.LoadBalancingWeight == nil {
		return 1
	}
	return uint64(l.LoadBalancingWeight.GetValue())
}

// ApplyFailover is istiod's applyLocalityFailover: each LocalityLbEndpoints gets priority 0 for
// the proxy's region/zone/subzone, 1 for its region/zone, 2 for its region, 3 for other regions,
// and 4 instead of 3 when a failover rule from the proxy's region exists (the first one) and
// names another region; combined with the existing priority as prev×5+p, then compacted to
// 0..N.
func ApplyFailover(cla *endpoint.ClusterLoadAssignment, proxyLocality collections.Locality, failover []collections.Failover) {
	if cla == nil {
		return
	}
	for _, l := range cla.Endpoints {
		epLoc := localityOf(l.Locality)
		p := lbPriority(proxyLocality, epLoc)
		if p == 3 {
			for _, f := range failover {
				if f.From == proxyLocality.Region {
					if l.Locality == nil || epLoc.Region != f.To {
						p = 4
					}
					break
				}
			}
		}
		l.Priority = l.Priority*5 + uint32(p)
	}
	compactPriorities(cla.Endpoints)
}

// ApplyZoneAwareFailover is istiod's applyZoneAwareRegionalFailover: priority 0 for the proxy's
// region, 1 for the region the first failover rule from the proxy's region names, 2 otherwise;
// combined with the existing priority as prev×3+p, then compacted to 0..N.
func ApplyZoneAwareFailover(cla *endpoint.ClusterLoadAssignment, proxyLocality collections.Locality, failover []collections.Failover) {
	if cla == nil {
		return
	}
	for _, l := range cla.Endpoints {
		region := l.GetLocality().GetRegion()
		p := uint32(2)
		if region == proxyLocality.Region {
			p = 0
		} else {
			for _, f := range failover {
				if f.From == proxyLocality.Region {
					if region == f.To {
						p = 1
					}
					break
				}
			}
		}
		l.Priority = l.Priority*3 + p
	}
	compactPriorities(cla.Endpoints)
}

func localityOf(l *core.Locality) collections.Locality {
	return collections.Locality{Region: l.GetRegion(), Zone: l.GetZone(), Subzone: l.GetSubZone()}
}

// TestLocalityLBOnThePlanMatchesTheOracle holds the plan's locality load balancing to istiod's
// rules as the oracle writes them on the message: for every setting and proxy of the locality
// tables, over endpoints of many localities (weighted ones among them), the plan's encoding
// equals the oracle's CLA marshalled.
func TestLocalityLBOnThePlanMatchesTheOracle(t *testing.T) {
	svc := &collections.ServiceInfo{Name: "foo", Namespace: "ns1", Hostname: "foo.ns1.svc.cluster.local"}
	port := collections.ServicePort{Name: "http", Port: 80, Protocol: "TCP"}
	name := transforms.ClusterName(80, "", svc.Hostname)
	eps := slices.Clone(lbtEndpoints)
	heavy := collections.NewEndpointMeta(collections.WorkloadMeta{Namespace: "ns1", WorkloadName: "vm", Weight: 7}, collections.TopologyMeta{Locality: lbtLoc("r2/z4")}, "", "")
	eps = append(eps, collections.Endpoint{Address: "10.0.0.9", Port: 80, PortName: "http", Health: collections.Healthy, Meta: heavy})
	settings := lbtSettings()
	on := true
	settings["distribute, weighted"] = struct {
		setting  *collections.LocalitySetting
		failover bool
	}{&collections.LocalitySetting{Enabled: &on, Distribute: []collections.Distribute{{From: "*", To: map[string]uint32{"r2/*": 60, "r1/z1/*": 40}}}}, false}
	checked := 0
	for sname, s := range settings {
		for _, class := range lbtProxies {
			cp := ClusterPolicy{LB: LocalityLBPolicy(s.setting, s.failover, nil, svc), Setting: s.setting, EnableFailover: s.failover}
			plan := planCLA(name, svc, port, collections.AppendRefs(nil, eps), cp.LB, class, nil)
			oracle := plan.Proto()
			ApplyLocalityLoadBalancer(oracle, s.setting, s.failover, class.Locality, nil, nil)
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(oracle)
			if err != nil {
				t.Fatal(err)
			}
			if cp.PostProcess() {
				plan.applyLocalityLB(cp.Setting, cp.EnableFailover, class.Locality, nil)
			}
			if got := plan.Encode(); !bytes.Equal(got, want) {
				var g endpoint.ClusterLoadAssignment
				_ = proto.Unmarshal(got, &g)
				t.Errorf("%s/%s: the plan's CLA differs from the oracle's (-oracle +plan):\n%s", sname, class.Key(), cmp.Diff(oracle, &g, protocmp.Transform()))
			}
			checked++
		}
	}
	if checked < 40 {
		t.Fatalf("only %d cases", checked)
	}
}
