package eds

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms/policy"
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
			return &collections.LocalitySetting{Enabled: &enabled, FailoverPriority: slices.Clone(policy.PreferSameZoneLabels)}, true
		case collections.TrafficDistributionPreferSameNode:
			return &collections.LocalitySetting{Enabled: &enabled, FailoverPriority: slices.Clone(policy.PreferSameNodeLabels)}, true
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

// EffectiveFailoverPriority is the failoverPriority list applyLocalityLB applies for
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

// LocalityLBPolicy is the LBPolicy under which planCLA performs the failoverPriority part of a
// locality setting. The rest (distribute, failover, zone-aware region buckets) is then applied
// by applyLocalityLB on the plan.
func LocalityLBPolicy(setting *collections.LocalitySetting, enableFailover bool, tp *collections.TrafficPolicy, svc *collections.ServiceInfo) LBPolicy {
	p := LBPolicy{SupportsUnhealthy: SupportsUnhealthyEndpoints(svc, tp)}
	if prios := EffectiveFailoverPriority(setting, enableFailover); len(prios) > 0 {
		p.FailoverPriority, p.Failover = prios, true
	}
	return p
}

// ProxyLocalityDependence is the part of the proxy's locality that applyLocalityLB
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

// applyLocalityLB is istiod's LBSettings.ApplyToLoadAssignment, on a plan made under
// LocalityLBPolicy (whose failoverPriority split PlanCLA has done), for a setting and
// enableFailover from LBSettingFor; the plan's groups are changed in place:
//   - distribute set → distribute;
//   - else, with failover enabled: failover, unless failoverPriority is set without failover
//     rules;
//   - zone-aware and enabled: zoneAwareFailover;
//   - nil or disabled setting: nothing.
func (p *CLAPlan) applyLocalityLB(setting *collections.LocalitySetting, enableFailover bool, proxy collections.Locality, tr *Trace) {
	if !setting.IsEnabled() {
		return
	}
	if setting.ZoneAware {
		p.zoneAwareFailover(proxy, setting.Failover)
		return
	}
	switch {
	case len(setting.Distribute) > 0:
		p.distribute(proxy, setting.Distribute, tr)
	case !enableFailover:
	case len(setting.FailoverPriority) > 0:
		if len(setting.Failover) > 0 {
			p.failover(proxy, setting.Failover)
		}
	default:
		p.failover(proxy, setting.Failover)
	}
}

// distribute is istiod's applyLocalityWeights. The first rule whose From matches the proxy
// locality applies: each To pattern takes the localities it matches that no earlier pattern took
// and gives each ceil(weight × its weight / their total weight) when that is > 0; localities no
// pattern takes keep their entry (and weight) with no endpoints.
//
// istiod walks the To patterns in map order; here the more specific patterns (more non-wildcard
// segments) go first, then alphabetical, which only matters for overlapping patterns (which
// validation rejects). Weights are computed in integers, without istiod's uint32 overflow.
func (p *CLAPlan) distribute(proxy collections.Locality, rules []collections.Distribute, tr *Trace) {
	for _, d := range rules {
		if !LocalityMatch(proxy, d.From) {
			continue
		}
		if tr != nil {
			tr.Distribute = d.From
		}
		taken := make([]bool, len(p.Groups))
		for _, pattern := range distributeOrder(d.To) {
			weight := uint64(d.To[pattern])
			var matched []int
			var total uint64
			for i, g := range p.Groups {
				if taken[i] || !LocalityMatch(g.Locality, pattern) {
					continue
				}
				taken[i] = true
				matched = append(matched, i)
				total += g.weight()
			}
			if total == 0 {
				continue
			}
			for _, i := range matched {
				g := &p.Groups[i]
				if w := (g.weight()*weight + total - 1) / total; w > 0 {
					g.Weight = uint32(min(w, math.MaxUint32))
				}
			}
		}
		for i, t := range taken {
			if !t {
				g := &p.Groups[i]
				for _, e := range g.Endpoints {
					tr.leave(e, ExcludedDistribute)
				}
				g.Weight, g.Endpoints = uint32(g.weight()), nil
			}
		}
		return
	}
}

// failover is istiod's applyLocalityFailover: each locality gets priority 0 for the proxy's
// region/zone/subzone, 1 for its region/zone, 2 for its region, 3 for other regions, and 4
// instead of 3 when a failover rule from the proxy's region exists (the first one) and names
// another region; combined with the existing priority as prev×5+p, then compacted to 0..N.
func (p *CLAPlan) failover(proxy collections.Locality, rules []collections.Failover) {
	for i := range p.Groups {
		g := &p.Groups[i]
		pr := lbPriority(proxy, g.Locality)
		if pr == 3 {
			for _, f := range rules {
				if f.From == proxy.Region {
					if g.Locality.Region != f.To {
						pr = 4
					}
					break
				}
			}
		}
		g.Priority = g.Priority*5 + uint32(pr)
	}
	p.compactPriorities()
}

// zoneAwareFailover is istiod's applyZoneAwareRegionalFailover: priority 0 for the proxy's
// region, 1 for the region the first failover rule from the proxy's region names, 2 otherwise;
// combined with the existing priority as prev×3+p, then compacted to 0..N.
func (p *CLAPlan) zoneAwareFailover(proxy collections.Locality, rules []collections.Failover) {
	for i := range p.Groups {
		g := &p.Groups[i]
		pr := uint32(2)
		if g.Locality.Region == proxy.Region {
			pr = 0
		} else {
			for _, f := range rules {
				if f.From == proxy.Region {
					if g.Locality.Region == f.To {
						pr = 1
					}
					break
				}
			}
		}
		g.Priority = g.Priority*3 + pr
	}
	p.compactPriorities()
}

// compactPriorities renumbers the plan's priorities to 0..N without gaps.
func (p *CLAPlan) compactPriorities() {
	renumberPriorities(len(p.Groups), func(i int) *uint32 { return &p.Groups[i].Priority })
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
