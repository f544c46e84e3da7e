package policy

import (
	"maps"
	"slices"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/istio/pkg/config/validation"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// KindDestinationRule is the Problem kind of DestinationRules.
const KindDestinationRule = "DestinationRule"

// ConvertDestinationRule copies the fields krteds honours out of a DestinationRule. A rule that
// istiod's validation (pkg/config/validation ValidateDestinationRule, used as is) rejects at
// admission is reported as ReasonInvalidDestinationRule and ignored as a whole (nil): such a
// rule cannot exist in a cluster with istiod's webhook. A rule with a workloadSelector keeps it
// (an empty selector as an empty, non-nil map): it applies to the proxies of its namespace it
// selects (ResolveDestinationRule).
func ConvertDestinationRule(dr *networkingclient.DestinationRule) (*collections.ObjectProblems, *collections.DestinationRule) {
	if dr == nil {
		return nil, nil
	}
	spec := &dr.Spec
	pr, ok := transforms.Validated(KindDestinationRule, dr.ObjectMeta, spec, validation.ValidateDestinationRule, collections.ReasonInvalidDestinationRule)
	if !ok {
		return pr.Result(), nil
	}
	out := &collections.DestinationRule{
		Name:         dr.Name,
		Namespace:    dr.Namespace,
		CreationTime: dr.CreationTimestamp.Time,
		Host:         spec.Host,
	}
	if len(spec.ExportTo) > 0 {
		out.ExportTo = slices.Sorted(slices.Values(spec.ExportTo))
	}
	if sel := spec.GetWorkloadSelector(); sel != nil {
		out.WorkloadSelector = maps.Clone(sel.GetMatchLabels())
		if out.WorkloadSelector == nil {
			out.WorkloadSelector = map[string]string{}
		}
	}
	out.Policy, out.PortPolicies = convertTrafficPolicy(spec.TrafficPolicy)
	for _, s := range spec.Subsets {
		sub := collections.Subset{Name: s.GetName(), Labels: maps.Clone(s.GetLabels())}
		sub.Policy, sub.PortPolicies = convertTrafficPolicy(s.GetTrafficPolicy())
		out.Subsets = append(out.Subsets, sub)
	}
	return pr.Result(), out
}

// convertTrafficPolicy returns the top-level policy and the port-level ones by port (the first
// entry for a port wins, as in istiod's GetPortLevelTrafficPolicy).
func convertTrafficPolicy(p *networking.TrafficPolicy) (*collections.TrafficPolicy, map[uint32]*collections.TrafficPolicy) {
	if p == nil {
		return nil, nil
	}
	top := policyOf(p.OutlierDetection, p.LoadBalancer, p.Tls)
	var ports map[uint32]*collections.TrafficPolicy
	for _, pl := range p.PortLevelSettings {
		if pl == nil || pl.Port == nil {
			continue
		}
		if _, dup := ports[pl.Port.Number]; dup {
			continue
		}
		if ports == nil {
			ports = map[uint32]*collections.TrafficPolicy{}
		}
		ports[pl.Port.Number] = policyOf(pl.OutlierDetection, pl.LoadBalancer, pl.Tls)
	}
	return top, ports
}

func policyOf(od *networking.OutlierDetection, lb *networking.LoadBalancerSettings, tls *networking.ClientTLSSettings) *collections.TrafficPolicy {
	tp := &collections.TrafficPolicy{}
	if od != nil {
		tp.OutlierDetection = true
		tp.MinHealthPercent = od.MinHealthPercent
		tp.Outlier = convertOutlier(od)
	}
	if lb != nil {
		tp.LoadBalancer = true
		if l := lb.LocalityLbSetting; l != nil {
			tp.Locality = convertLocalitySetting(l)
		} else if z := lb.ZoneAwareLbSetting; z != nil {
			tp.Locality = convertZoneAwareSetting(z)
		}
		tp.Algorithm = convertLBAlgorithm(lb)
	}
	if tls != nil {
		tp.TLSMode = tls.Mode.String()
	}
	return tp
}

// convertOutlier copies the outlierDetection fields only the CDS cluster reads; nil when none is
// set. (The deprecated consecutiveErrors is not read by istiod either.)
func convertOutlier(od *networking.OutlierDetection) *collections.OutlierSettings {
	out := collections.OutlierSettings{
		Consecutive5xxErrors:           optionalUint32(od.Consecutive_5XxErrors),
		ConsecutiveGatewayErrors:       optionalUint32(od.ConsecutiveGatewayErrors),
		Interval:                       durationOf(od.Interval),
		BaseEjectionTime:               durationOf(od.BaseEjectionTime),
		MaxEjectionPercent:             od.MaxEjectionPercent,
		SplitExternalLocalOriginErrors: od.SplitExternalLocalOriginErrors,
		ConsecutiveLocalOriginFailures: optionalUint32(od.ConsecutiveLocalOriginFailures),
	}
	if out == (collections.OutlierSettings{}) {
		return nil
	}
	return &out
}

// convertLBAlgorithm copies the load-balancer fields only the CDS cluster reads; nil when none
// is set.
func convertLBAlgorithm(lb *networking.LoadBalancerSettings) *collections.LBAlgorithm {
	out := collections.LBAlgorithm{WarmupDurationSecs: durationOf(lb.WarmupDurationSecs)}
	if s := lb.GetSimple(); s != networking.LoadBalancerSettings_UNSPECIFIED {
		out.Simple = s.String()
	}
	if ch := lb.GetConsistentHash(); ch != nil {
		out.HashHeader = ch.GetHttpHeaderName()
		switch {
		case ch.GetMaglev() != nil:
			out.ConsistentHash, out.MaglevTableSize = collections.HashMaglev, ch.GetMaglev().GetTableSize()
		case ch.GetRingHash() != nil:
			out.ConsistentHash, out.MinimumRingSize = collections.HashRing, ch.GetRingHash().GetMinimumRingSize()
		default:
			out.ConsistentHash, out.MinimumRingSize = collections.HashRingDefault, ch.GetMinimumRingSize() //nolint:staticcheck // istiod reads it
		}
	}
	if w := lb.Warmup; w != nil {
		out.Warmup = true
		out.WarmupDuration = durationOf(w.Duration)
		if w.MinimumPercent != nil {
			out.WarmupMinimumPercent = collections.OptionalFloat64{Value: w.MinimumPercent.GetValue(), Set: true}
		}
		if w.Aggression != nil {
			out.WarmupAggression = collections.OptionalFloat64{Value: w.Aggression.GetValue(), Set: true}
		}
	}
	if out.Equals(&collections.LBAlgorithm{}) {
		return nil
	}
	return &out
}

func optionalUint32(v *wrapperspb.UInt32Value) collections.OptionalUint32 {
	if v == nil {
		return collections.OptionalUint32{}
	}
	return collections.OptionalUint32{Value: v.GetValue(), Set: true}
}

func durationOf(d *durationpb.Duration) collections.Duration {
	if d == nil {
		return collections.Duration{}
	}
	return collections.Duration{Seconds: d.GetSeconds(), Nanos: d.GetNanos(), Set: true}
}

func convertLocalitySetting(l *networking.LocalityLoadBalancerSetting) *collections.LocalitySetting {
	out := &collections.LocalitySetting{FailoverPriority: slices.Clone(l.FailoverPriority)}
	if l.Enabled != nil {
		v := l.Enabled.GetValue()
		out.Enabled = &v
	}
	for _, d := range l.Distribute {
		out.Distribute = append(out.Distribute, collections.Distribute{From: d.GetFrom(), To: maps.Clone(d.GetTo())})
	}
	for _, f := range l.Failover {
		out.Failover = append(out.Failover, collections.Failover{From: f.GetFrom(), To: f.GetTo()})
	}
	return out
}

func convertZoneAwareSetting(z *networking.ZoneAwareLoadBalancerSetting) *collections.LocalitySetting {
	out := &collections.LocalitySetting{ZoneAware: true, FailoverPriority: slices.Clone(z.FailoverPriority),
		MinClusterSize: optionalUint32(z.MinClusterSize)}
	if z.Enabled != nil {
		v := z.Enabled.GetValue()
		out.Enabled = &v
	}
	for _, f := range z.Failover {
		out.Failover = append(out.Failover, collections.Failover{From: f.GetFrom(), To: f.GetTo()})
	}
	return out
}
