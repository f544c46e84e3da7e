package cds

import (
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	xdstype "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms/eds"
)

// applyOutlierDetection is istiod's applyOutlierDetection (cluster_traffic_policy.go).
func applyOutlierDetection(svc *collections.ServiceInfo, c *cluster.Cluster, tp *collections.TrafficPolicy) {
	var o collections.OutlierSettings
	if tp.Outlier != nil {
		o = *tp.Outlier
	}
	// Success-rate ejection is off.
	out := &cluster.OutlierDetection{EnforcingSuccessRate: wrapperspb.UInt32(0)}
	if e := o.Consecutive5xxErrors; e.Set {
		out.Consecutive_5Xx = wrapperspb.UInt32(e.Value)
		out.EnforcingConsecutive_5Xx = wrapperspb.UInt32(enforcing(e.Value))
	}
	if e := o.ConsecutiveGatewayErrors; e.Set {
		out.ConsecutiveGatewayFailure = wrapperspb.UInt32(e.Value)
		out.EnforcingConsecutiveGatewayFailure = wrapperspb.UInt32(enforcing(e.Value))
	}
	out.Interval = durationProto(o.Interval)
	out.BaseEjectionTime = durationProto(o.BaseEjectionTime)
	if o.MaxEjectionPercent > 0 {
		out.MaxEjectionPercent = wrapperspb.UInt32(uint32(o.MaxEjectionPercent))
	}
	if o.SplitExternalLocalOriginErrors {
		out.SplitExternalLocalOriginErrors = true
		if v := o.ConsecutiveLocalOriginFailures.Value; v > 0 {
			out.ConsecutiveLocalOriginFailure = wrapperspb.UInt32(v)
			out.EnforcingConsecutiveLocalOriginFailure = wrapperspb.UInt32(100)
		}
		out.EnforcingLocalOriginSuccessRate = wrapperspb.UInt32(0)
	}
	c.OutlierDetection = out
	// The panic threshold is minHealthPercent (0 disables it), and always 0 for a service that
	// must be sent unhealthy endpoints (ForcesSupportUnhealthyEndpoints: a trafficDistribution).
	if m := tp.MinHealthPercent; m >= 0 {
		if svc != nil && svc.TrafficDistribution != collections.TrafficDistributionAny {
			m = 0
		}
		c.CommonLbConfig.HealthyPanicThreshold = &xdstype.Percent{Value: float64(m)}
	}
}

func enforcing(v uint32) uint32 {
	if v > 0 {
		return 100
	}
	return 0
}

// applyLoadBalancer is istiod's applyLoadBalancer (cluster_traffic_policy.go) for a Kubernetes
// service under the default mesh config (localityLbSetting {enabled: true}, no zoneAwareLbSetting)
// and flags (no Redis filter, ENABLE_LOCALITY_WEIGHTED_LB_CONFIG off).
func applyLoadBalancer(svc *collections.ServiceInfo, c *cluster.Cluster, tp *collections.TrafficPolicy) {
	// Every service supports unhealthy endpoints under PILOT_AUTO_SEND_UNHEALTHY_ENDPOINTS (on by
	// default): EDS carries UNHEALTHY endpoints, and panic routing to them is off.
	if c.CommonLbConfig.HealthyPanicThreshold == nil {
		c.CommonLbConfig.HealthyPanicThreshold = &xdstype.Percent{Value: 0}
	}
	setting, enableFailover := eds.LBSettingFor(eds.DefaultMeshLocalitySetting(), tp, svc)
	applyLocalityLBConfig(c, setting, enableFailover)
	if c.GetType() == cluster.Cluster_ORIGINAL_DST {
		c.LbPolicy = cluster.Cluster_CLUSTER_PROVIDED
		return
	}
	var alg *collections.LBAlgorithm
	if tp != nil {
		alg = tp.Algorithm
	}
	switch simpleLB(alg) {
	case lbLeastConn, lbLeastRequest:
		c.LbPolicy = cluster.Cluster_LEAST_REQUEST
		applySlowStart(c, alg)
	case lbRandom:
		c.LbPolicy = cluster.Cluster_RANDOM
	case lbRoundRobin:
		c.LbPolicy = cluster.Cluster_ROUND_ROBIN
		applySlowStart(c, alg)
	case lbPassthrough:
		c.LbPolicy = cluster.Cluster_CLUSTER_PROVIDED
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST}
	default:
		// applySimpleDefaultLoadBalancer: defaultLBAlgorithm is LEAST_REQUEST.
		c.LbPolicy = cluster.Cluster_LEAST_REQUEST
		applySlowStart(c, alg)
	}
	applyRingHash(c, alg)
}

func simpleLB(alg *collections.LBAlgorithm) string {
	if alg == nil {
		return ""
	}
	return alg.Simple
}

// applyLocalityLBConfig is the CommonLbConfig part of istiod's LBSettings.ApplyToCluster
// (loadbalancer.go) for the setting and enableFailover of LBSettingFor (istiod's
// GetEffectiveLbSetting; enableFailover is its Force || outlier detection).
func applyLocalityLBConfig(c *cluster.Cluster, setting *collections.LocalitySetting, enableFailover bool) {
	switch {
	case setting == nil:
		// LocalityLBSettings{}: nothing.
	case setting.ZoneAware:
		// ZoneAwareLBSettings.ApplyToCluster (not a waypoint).
		z := &cluster.Cluster_CommonLbConfig_ZoneAwareLbConfig{}
		if m := setting.MinClusterSize; m.Set {
			z.MinClusterSize = wrapperspb.UInt64(uint64(m.Value))
		}
		if !setting.IsEnabled() {
			z.RoutingEnabled = &xdstype.Percent{Value: 0}
		}
		c.CommonLbConfig.LocalityConfigSpecifier = &cluster.Cluster_CommonLbConfig_ZoneAwareLbConfig_{ZoneAwareLbConfig: z}
	case (enableFailover && (len(setting.Failover) > 0 || len(setting.FailoverPriority) > 0)) || len(setting.Distribute) > 0:
		// LocalityLBSettings.ApplyToCluster: locality weights only mean something (and are only
		// set) when the setting distributes, or fails over.
		c.CommonLbConfig.LocalityConfigSpecifier = &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
			LocalityWeightedLbConfig: &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig{},
		}
	}
}

// applySlowStart is the warmup part of istiod's applyRoundRobinLoadBalancer and
// applyLeastRequestLoadBalancer (setWarmup, setSlowStartConfig).
func applySlowStart(c *cluster.Cluster, alg *collections.LBAlgorithm) {
	var ss *cluster.Cluster_SlowStartConfig
	switch {
	case alg == nil:
		return
	case alg.Warmup:
		aggression, minPercent := 1.0, 10.0
		if a := alg.WarmupAggression; a.Set {
			aggression = a.Value
		}
		if m := alg.WarmupMinimumPercent; m.Set {
			minPercent = m.Value
		}
		ss = &cluster.Cluster_SlowStartConfig{
			SlowStartWindow:  durationProto(alg.WarmupDuration),
			Aggression:       &core.RuntimeDouble{DefaultValue: aggression, RuntimeKey: "("},
			MinWeightPercent: &xdstype.Percent{Value: minPercent},
		}
	case alg.WarmupDurationSecs.Set:
		ss = &cluster.Cluster_SlowStartConfig{SlowStartWindow: durationProto(alg.WarmupDurationSecs)}
	default:
		return
	}
	if c.LbPolicy == cluster.Cluster_ROUND_ROBIN {
		c.LbConfig = &cluster.Cluster_RoundRobinLbConfig_{RoundRobinLbConfig: &cluster.Cluster_RoundRobinLbConfig{SlowStartConfig: ss}}
	} else {
		c.LbConfig = &cluster.Cluster_LeastRequestLbConfig_{LeastRequestLbConfig: &cluster.Cluster_LeastRequestLbConfig{SlowStartConfig: ss}}
	}
}

// applyRingHash is istiod's ApplyRingHashLoadBalancer. The hash key of consistentHash goes into
// route hash policies, which krteds does not build for Envoy.
func applyRingHash(c *cluster.Cluster, alg *collections.LBAlgorithm) {
	if alg == nil {
		return
	}
	switch alg.ConsistentHash {
	case collections.HashMaglev:
		c.LbPolicy = cluster.Cluster_MAGLEV
		if alg.MaglevTableSize != 0 {
			c.LbConfig = &cluster.Cluster_MaglevLbConfig_{MaglevLbConfig: &cluster.Cluster_MaglevLbConfig{
				TableSize: wrapperspb.UInt64(alg.MaglevTableSize),
			}}
		}
	case collections.HashRing:
		c.LbPolicy = cluster.Cluster_RING_HASH
		if alg.MinimumRingSize != 0 {
			c.LbConfig = &cluster.Cluster_RingHashLbConfig_{RingHashLbConfig: &cluster.Cluster_RingHashLbConfig{
				MinimumRingSize: wrapperspb.UInt64(alg.MinimumRingSize),
			}}
		}
	case collections.HashRingDefault:
		size := uint64(1024) // Envoy's default
		if alg.MinimumRingSize != 0 {
			size = alg.MinimumRingSize
		}
		c.LbPolicy = cluster.Cluster_RING_HASH
		c.LbConfig = &cluster.Cluster_RingHashLbConfig_{RingHashLbConfig: &cluster.Cluster_RingHashLbConfig{
			MinimumRingSize: wrapperspb.UInt64(size),
		}}
	}
}
