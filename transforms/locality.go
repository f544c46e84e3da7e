package transforms

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/krteds/krteds/collections"
)

// DefaultMeshLocalitySetting is istiod's default mesh localityLbSetting: {enabled: true}.
func DefaultMeshLocalitySetting() *collections.LocalitySetting {
	enabled := true
	return &collections.LocalitySetting{Enabled: &enabled}
}

// LBSettingFor resolves the locality load-balancing setting of one cluster as istiod's
// GetEffectiveLbSetting, given the mesh setting (DefaultMeshLocalitySetting unless configured;
// a mesh zoneAwareLbSetting is passed here too, as it wins over the mesh localityLbSetting) and
// the cluster's merged traffic policy (EffectiveTrafficPolicy), in this order:
//   - the rule's locality setting: a zone-aware one as is; a locality one, or nil when it has
//     enabled: false;
//   - the Service's trafficDistribution: PreferClose/PreferSameZone → failoverPriority
//     [network, region, zone], PreferSameNode → the same plus [subzone, hostname];
//   - the mesh setting (nil when it has enabled: false).
//
// enableFailover is true when the policy has outlierDetection, or when trafficDistribution
// forces it; for a zone-aware setting it is true exactly when the setting is enabled.
func LBSettingFor(mesh *collections.LocalitySetting, tp *collections.TrafficPolicy, svc *collections.ServiceInfo) (*collections.LocalitySetting, bool) {
	outlier := tp != nil && tp.OutlierDetection
	if tp != nil && tp.Locality != nil {
		l := tp.Locality
		if l.ZoneAware {
			return l, l.IsEnabled()
		}
		if !l.IsEnabled() {
			return nil, false
		}
		return l, outlier
	}
	if svc != nil {
		enabled := true
		switch svc.TrafficDistribution {
		case collections.TrafficDistributionPreferSameZone:
			return &collections.LocalitySetting{Enabled: &enabled, FailoverPriority: slices.Clone(PreferSameZoneLabels)}, true
		case collections.TrafficDistributionPreferSameNode:
			return &collections.LocalitySetting{Enabled: &enabled, FailoverPriority: slices.Clone(PreferSameNodeLabels)}, true
		}
	}
	if mesh == nil {
		return nil, false
	}
	if mesh.ZoneAware {
		return mesh, mesh.IsEnabled()
	}
	if !mesh.IsEnabled() {
		return nil, false
	}
	return mesh, outlier
}

// SupportsUnhealthyEndpoints is istiod's supportsUnhealthyEndpoints with its default flags:
// UNHEALTHY endpoints are sent unless the cluster's policy sets outlierDetection.minHealthPercent
// > 0; a Service with a trafficDistribution always gets them.
func SupportsUnhealthyEndpoints(svc *collections.ServiceInfo, tp *collections.TrafficPolicy) bool {
	if svc != nil && svc.TrafficDistribution != collections.TrafficDistributionAny {
		return true
	}
	return tp == nil || !tp.OutlierDetection || tp.MinHealthPercent <= 0
}

// EffectiveFailoverPriority is the failoverPriority list ApplyLocalityLoadBalancer applies for
// a setting, or nil: only without distribute and with failover enabled (for a zone-aware
// setting: while it is enabled).
func EffectiveFailoverPriority(setting *collections.LocalitySetting, enableFailover bool) []string {
	if setting == nil || !setting.IsEnabled() || !enableFailover {
		return nil
	}
	if !setting.ZoneAware && len(setting.Distribute) > 0 {
		return nil
	}
	return setting.FailoverPriority
}

// LocalityLBPolicy is the LBPolicy under which PlanCLA performs the failoverPriority part of a
// locality setting. The rest (distribute, failover, zone-aware region buckets) is then applied
// by ApplyLocalityLoadBalancer on the CLA with nil endpoint labels.
func LocalityLBPolicy(setting *collections.LocalitySetting, enableFailover bool, tp *collections.TrafficPolicy, svc *collections.ServiceInfo) LBPolicy {
	p := LBPolicy{SupportsUnhealthy: SupportsUnhealthyEndpoints(svc, tp)}
	if prios := EffectiveFailoverPriority(setting, enableFailover); len(prios) > 0 {
		p.FailoverPriority, p.Failover = prios, true
	}
	return p
}

// ProxyLocalityDependence is the part of the proxy's locality that ApplyLocalityLoadBalancer
// reads for a setting (the rest of the locality may be zeroed when projecting proxy classes):
// all of it for distribute and for region/zone/subzone failover, the region for zone-aware
// buckets, nothing otherwise. failoverPriority labels are not included.
func ProxyLocalityDependence(setting *collections.LocalitySetting, enableFailover bool, proxyLocality collections.Locality) collections.Locality {
	switch {
	case setting == nil || !setting.IsEnabled():
		return collections.Locality{}
	case setting.ZoneAware:
		return collections.Locality{Region: proxyLocality.Region}
	case len(setting.Distribute) > 0:
		return proxyLocality
	case !enableFailover:
		return collections.Locality{}
	case len(setting.FailoverPriority) > 0 && len(setting.Failover) == 0:
		return collections.Locality{}
	}
	return proxyLocality
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

// distributeOrder sorts the To patterns of a distribute rule, most specific first.
func distributeOrder(to map[string]uint32) []string {
	keys := slices.Collect(maps.Keys(to))
	specificity := func(p string) int {
		n := 0
		for _, s := range strings.Split(p, "/") {
			if s != "*" && s != "" {
				n++
			}
		}
		return n
	}
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(cmp.Compare(specificity(b), specificity(a)), strings.Compare(a, b))
	})
	return keys
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

// LocalityMatch is istiod's LocalityMatch: a rule "region/zone/subzone" matches a locality when
// each part is "*" or equal; a missing zone or subzone matches anything.
func LocalityMatch(l collections.Locality, rule string) bool {
	parts := strings.Split(rule, "/")
	region, zone, subzone := parts[0], "", ""
	if len(parts) > 1 {
		zone = parts[1]
	}
	if len(parts) > 2 {
		subzone = parts[2]
	}
	return (region == "*" || l.Region == region) &&
		(zone == "*" || zone == "" || l.Zone == zone) &&
		(subzone == "*" || subzone == "" || l.Subzone == subzone)
}

// lbPriority is istiod's LbPriority.
func lbPriority(proxy, ep collections.Locality) int {
	switch {
	case proxy.Region != ep.Region:
		return 3
	case proxy.Zone != ep.Zone:
		return 2
	case proxy.Subzone != ep.Subzone:
		return 1
	}
	return 0
}

func localityOf(l *core.Locality) collections.Locality {
	return collections.Locality{Region: l.GetRegion(), Zone: l.GetZone(), Subzone: l.GetSubZone()}
}
