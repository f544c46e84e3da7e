package cds

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	xdstype "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/policy"
	"github.com/krteds/krteds/transforms/transformtest"
)

const (
	cdsHost    = "reviews.ns1.svc.cluster.local"
	cdsDefault = "outbound|9080||reviews.ns1.svc.cluster.local"
	cdsV2      = "outbound|9080|v2|reviews.ns1.svc.cluster.local"
)

func cdsService() *collections.ServiceInfo {
	return &collections.ServiceInfo{Name: "reviews", Namespace: "ns1", Hostname: cdsHost,
		Ports: []collections.ServicePort{{Name: "http", Port: 9080, Protocol: "TCP"}}}
}

// cdsRule converts a DestinationRule for reviews.ns1 (in ns1) with a traffic policy and subsets.
func cdsRule(t *testing.T, tp *networking.TrafficPolicy, subsets ...*networking.Subset) *collections.DestinationRule {
	t.Helper()
	probs, dr := policy.ConvertDestinationRule(&networkingclient.DestinationRule{ObjectMeta: transformtest.RuleMeta("ns1", "reviews"),
		Spec: networking.DestinationRule{Host: "reviews", TrafficPolicy: tp, Subsets: subsets}})
	if dr == nil {
		t.Fatalf("rule rejected: %v", transformtest.ProblemsOf(probs))
	}
	return dr
}

func simpleLBPolicy(s networking.LoadBalancerSettings_SimpleLB) *networking.LoadBalancerSettings {
	return &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: s}}
}

func hashLBPolicy(h *networking.LoadBalancerSettings_ConsistentHashLB) *networking.LoadBalancerSettings {
	return &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_ConsistentHash{ConsistentHash: h}}
}

// wantEDS is the skeleton istiod gives every outbound EDS cluster before the traffic policy
// (buildCluster: name, type, an empty CommonLbConfig; applyDefaultConnectionPool: the mesh
// connectTimeout of 10s; maybeApplyEdsConfig: ADS, no initial fetch timeout, v3).
func wantEDS(name string) *cluster.Cluster {
	return &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
		ConnectTimeout:       durationpb.New(10 * time.Second),
		CommonLbConfig:       &cluster.Cluster_CommonLbConfig{},
		EdsClusterConfig: &cluster.Cluster_EdsClusterConfig{ServiceName: name, EdsConfig: &core.ConfigSource{
			ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
			InitialFetchTimeout:   durationpb.New(0),
			ResourceApiVersion:    core.ApiVersion_V3,
		}},
	}
}

var weighted = &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
	LocalityWeightedLbConfig: &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig{},
}

func pct(v float64) *xdstype.Percent { return &xdstype.Percent{Value: v} }

// TestEnvoyClusterMatchesIstiod holds the Envoy cluster of each DestinationRule setting to what
// istiod's ClusterBuilder (pilot/pkg/networking/core, release-1.31, default mesh config and
// flags) builds for it; each expectation names the istiod function that sets it.
func TestEnvoyClusterMatchesIstiod(t *testing.T) {
	outlier5xx := &networking.OutlierDetection{Consecutive_5XxErrors: wrapperspb.UInt32(5)}
	// applyOutlierDetection for outlier5xx.
	wantOutlier5xx := &cluster.OutlierDetection{
		EnforcingSuccessRate:     wrapperspb.UInt32(0),
		Consecutive_5Xx:          wrapperspb.UInt32(5),
		EnforcingConsecutive_5Xx: wrapperspb.UInt32(100),
	}
	cases := []struct {
		name    string
		svc     func(*collections.ServiceInfo)
		tp      *networking.TrafficPolicy
		subsets []*networking.Subset
		cluster string
		want    *cluster.Cluster
	}{
		{
			// applyLoadBalancer: HealthyPanicThreshold 0 (SupportsUnhealthyEndpoints under
			// PILOT_AUTO_SEND_UNHEALTHY_ENDPOINTS); applySimpleDefaultLoadBalancer: LEAST_REQUEST.
			name: "no rule",
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_LEAST_REQUEST
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// A rule without loadBalancer/outlierDetection: the same as none.
			name: "rule with only TLS",
			tp:   &networking.TrafficPolicy{Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_DISABLE}},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_LEAST_REQUEST
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// applyRoundRobinLoadBalancer.
			name: "simple ROUND_ROBIN",
			tp:   &networking.TrafficPolicy{LoadBalancer: simpleLBPolicy(networking.LoadBalancerSettings_ROUND_ROBIN)},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_ROUND_ROBIN
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// applyLeastRequestLoadBalancer.
			name: "simple LEAST_REQUEST",
			tp:   &networking.TrafficPolicy{LoadBalancer: simpleLBPolicy(networking.LoadBalancerSettings_LEAST_REQUEST)},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_LEAST_REQUEST
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// applyLoadBalancer: the deprecated LEAST_CONN is LEAST_REQUEST.
			name: "simple LEAST_CONN",
			tp:   &networking.TrafficPolicy{LoadBalancer: simpleLBPolicy(networking.LoadBalancerSettings_LEAST_CONN)},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_LEAST_REQUEST
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// applyLoadBalancer.
			name: "simple RANDOM",
			tp:   &networking.TrafficPolicy{LoadBalancer: simpleLBPolicy(networking.LoadBalancerSettings_RANDOM)},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_RANDOM
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// applyLoadBalancer: ORIGINAL_DST, CLUSTER_PROVIDED; maybeApplyEdsConfig skips a
			// cluster that is no longer EDS.
			name: "simple PASSTHROUGH",
			tp:   &networking.TrafficPolicy{LoadBalancer: simpleLBPolicy(networking.LoadBalancerSettings_PASSTHROUGH)},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST}
				c.EdsClusterConfig = nil
				c.LbPolicy = cluster.Cluster_CLUSTER_PROVIDED
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// ApplyRingHashLoadBalancer: ringHash with a size.
			name: "consistentHash ringHash",
			tp: &networking.TrafficPolicy{LoadBalancer: hashLBPolicy(&networking.LoadBalancerSettings_ConsistentHashLB{
				HashKey:       &networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName{HttpHeaderName: "x-user"},
				HashAlgorithm: &networking.LoadBalancerSettings_ConsistentHashLB_RingHash_{RingHash: &networking.LoadBalancerSettings_ConsistentHashLB_RingHash{MinimumRingSize: 2048}},
			})},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_RING_HASH
				c.LbConfig = &cluster.Cluster_RingHashLbConfig_{RingHashLbConfig: &cluster.Cluster_RingHashLbConfig{MinimumRingSize: wrapperspb.UInt64(2048)}}
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// ApplyRingHashLoadBalancer: ringHash without a size leaves lb_config alone.
			name: "consistentHash ringHash without size",
			tp: &networking.TrafficPolicy{LoadBalancer: hashLBPolicy(&networking.LoadBalancerSettings_ConsistentHashLB{
				HashKey:       &networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp{UseSourceIp: true},
				HashAlgorithm: &networking.LoadBalancerSettings_ConsistentHashLB_RingHash_{RingHash: &networking.LoadBalancerSettings_ConsistentHashLB_RingHash{}},
			})},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_RING_HASH
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// ApplyRingHashLoadBalancer: maglev.
			name: "consistentHash maglev",
			tp: &networking.TrafficPolicy{LoadBalancer: hashLBPolicy(&networking.LoadBalancerSettings_ConsistentHashLB{
				HashKey:       &networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp{UseSourceIp: true},
				HashAlgorithm: &networking.LoadBalancerSettings_ConsistentHashLB_Maglev{Maglev: &networking.LoadBalancerSettings_ConsistentHashLB_MagLev{TableSize: 65537}},
			})},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_MAGLEV
				c.LbConfig = &cluster.Cluster_MaglevLbConfig_{MaglevLbConfig: &cluster.Cluster_MaglevLbConfig{TableSize: wrapperspb.UInt64(65537)}}
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// ApplyRingHashLoadBalancer: no hashAlgorithm, the deprecated minimumRingSize (1024
			// when unset).
			name: "consistentHash without algorithm",
			tp: &networking.TrafficPolicy{LoadBalancer: hashLBPolicy(&networking.LoadBalancerSettings_ConsistentHashLB{
				HashKey: &networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName{HttpHeaderName: "x-user"},
			})},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_RING_HASH
				c.LbConfig = &cluster.Cluster_RingHashLbConfig_{RingHashLbConfig: &cluster.Cluster_RingHashLbConfig{MinimumRingSize: wrapperspb.UInt64(1024)}}
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// applyRoundRobinLoadBalancer → setWarmup: aggression 1 and minimum 10% by default,
			// runtime key "(".
			name: "warmup with ROUND_ROBIN",
			tp: &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
				LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_ROUND_ROBIN},
				Warmup:   &networking.WarmupConfiguration{Duration: durationpb.New(30 * time.Second)},
			}},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_ROUND_ROBIN
				c.LbConfig = &cluster.Cluster_RoundRobinLbConfig_{RoundRobinLbConfig: &cluster.Cluster_RoundRobinLbConfig{
					SlowStartConfig: &cluster.Cluster_SlowStartConfig{
						SlowStartWindow:  durationpb.New(30 * time.Second),
						Aggression:       &core.RuntimeDouble{DefaultValue: 1, RuntimeKey: "("},
						MinWeightPercent: pct(10),
					},
				}}
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// applySimpleDefaultLoadBalancer → applyLeastRequestLoadBalancer → setWarmup.
			name: "warmup with the default algorithm",
			tp: &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
				Warmup: &networking.WarmupConfiguration{Duration: durationpb.New(time.Minute),
					Aggression: wrapperspb.Double(2), MinimumPercent: wrapperspb.Double(5)},
			}},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_LEAST_REQUEST
				c.LbConfig = &cluster.Cluster_LeastRequestLbConfig_{LeastRequestLbConfig: &cluster.Cluster_LeastRequestLbConfig{
					SlowStartConfig: &cluster.Cluster_SlowStartConfig{
						SlowStartWindow:  durationpb.New(time.Minute),
						Aggression:       &core.RuntimeDouble{DefaultValue: 2, RuntimeKey: "("},
						MinWeightPercent: pct(5),
					},
				}}
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// applyLeastRequestLoadBalancer → setSlowStartConfig (deprecated warmupDurationSecs).
			name: "warmupDurationSecs",
			tp: &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
				LbPolicy:           &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_LEAST_REQUEST},
				WarmupDurationSecs: durationpb.New(45 * time.Second),
			}},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_LEAST_REQUEST
				c.LbConfig = &cluster.Cluster_LeastRequestLbConfig_{LeastRequestLbConfig: &cluster.Cluster_LeastRequestLbConfig{
					SlowStartConfig: &cluster.Cluster_SlowStartConfig{SlowStartWindow: durationpb.New(45 * time.Second)},
				}}
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// applyOutlierDetection: success rate off, each consecutive error count enforced at
			// 100% when > 0 (0 when set to 0), interval, base ejection time, max ejection
			// percent; the panic threshold is minHealthPercent (0). ApplyToCluster: outlier
			// detection turns on failover, but the mesh default setting has no failover list,
			// so no locality weights.
			name: "outlierDetection",
			tp: &networking.TrafficPolicy{OutlierDetection: &networking.OutlierDetection{
				Consecutive_5XxErrors:    wrapperspb.UInt32(7),
				ConsecutiveGatewayErrors: wrapperspb.UInt32(0),
				Interval:                 durationpb.New(10 * time.Second),
				BaseEjectionTime:         durationpb.New(30 * time.Second),
				MaxEjectionPercent:       50,
			}},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_LEAST_REQUEST
				c.OutlierDetection = &cluster.OutlierDetection{
					EnforcingSuccessRate:               wrapperspb.UInt32(0),
					Consecutive_5Xx:                    wrapperspb.UInt32(7),
					EnforcingConsecutive_5Xx:           wrapperspb.UInt32(100),
					ConsecutiveGatewayFailure:          wrapperspb.UInt32(0),
					EnforcingConsecutiveGatewayFailure: wrapperspb.UInt32(0),
					Interval:                           durationpb.New(10 * time.Second),
					BaseEjectionTime:                   durationpb.New(30 * time.Second),
					MaxEjectionPercent:                 wrapperspb.UInt32(50),
				}
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// applyOutlierDetection: healthy_panic_threshold = minHealthPercent.
			name: "outlierDetection minHealthPercent",
			tp: &networking.TrafficPolicy{OutlierDetection: &networking.OutlierDetection{
				Consecutive_5XxErrors: wrapperspb.UInt32(5), MinHealthPercent: 40,
			}},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_LEAST_REQUEST
				c.OutlierDetection = wantOutlier5xx
				c.CommonLbConfig.HealthyPanicThreshold = pct(40)
			}),
		},
		{
			// applyOutlierDetection: split local-origin errors.
			name: "outlierDetection split local origin errors",
			tp: &networking.TrafficPolicy{OutlierDetection: &networking.OutlierDetection{
				SplitExternalLocalOriginErrors: true, ConsecutiveLocalOriginFailures: wrapperspb.UInt32(3),
			}},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_LEAST_REQUEST
				c.OutlierDetection = &cluster.OutlierDetection{
					EnforcingSuccessRate:                   wrapperspb.UInt32(0),
					SplitExternalLocalOriginErrors:         true,
					ConsecutiveLocalOriginFailure:          wrapperspb.UInt32(3),
					EnforcingConsecutiveLocalOriginFailure: wrapperspb.UInt32(100),
					EnforcingLocalOriginSuccessRate:        wrapperspb.UInt32(0),
				}
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// applyOutlierDetection: a service with a trafficDistribution forces unhealthy
			// endpoints (ForcesSupportUnhealthyEndpoints), so the threshold is 0 whatever
			// minHealthPercent says. GetEffectiveLbSetting: the trafficDistribution setting
			// (failoverPriority, Force) → ApplyToCluster sets locality weights.
			name: "outlierDetection on a PreferClose service",
			svc: func(s *collections.ServiceInfo) {
				s.TrafficDistribution = collections.TrafficDistributionPreferSameZone
			},
			tp: &networking.TrafficPolicy{OutlierDetection: &networking.OutlierDetection{
				Consecutive_5XxErrors: wrapperspb.UInt32(5), MinHealthPercent: 40,
			}},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_LEAST_REQUEST
				c.OutlierDetection = wantOutlier5xx
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
				c.CommonLbConfig.LocalityConfigSpecifier = weighted
			}),
		},
		{
			// GetEffectiveLbSetting → LocalityLBSettings.ApplyToCluster: distribute sets
			// locality_weighted_lb_config.
			name: "localityLbSetting distribute",
			tp: &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{LocalityLbSetting: &networking.LocalityLoadBalancerSetting{
				Distribute: []*networking.LocalityLoadBalancerSetting_Distribute{{From: "r1/*", To: map[string]uint32{"r1/*": 80, "r2/*": 20}}},
			}}},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_LEAST_REQUEST
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
				c.CommonLbConfig.LocalityConfigSpecifier = weighted
			}),
		},
		{
			// LocalityLBSettings.ApplyToCluster: failover with outlier detection.
			name: "localityLbSetting failover with outlierDetection",
			tp: &networking.TrafficPolicy{
				OutlierDetection: outlier5xx,
				LoadBalancer: &networking.LoadBalancerSettings{LocalityLbSetting: &networking.LocalityLoadBalancerSetting{
					Failover: []*networking.LocalityLoadBalancerSetting_Failover{{From: "r1", To: "r2"}},
				}},
			},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_LEAST_REQUEST
				c.OutlierDetection = wantOutlier5xx
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
				c.CommonLbConfig.LocalityConfigSpecifier = weighted
			}),
		},
		{
			// LocalityLBSettings.ApplyToCluster: failover without outlier detection does
			// nothing (and validation only warns).
			name: "localityLbSetting failover without outlierDetection",
			tp: &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{LocalityLbSetting: &networking.LocalityLoadBalancerSetting{
				Failover: []*networking.LocalityLoadBalancerSetting_Failover{{From: "r1", To: "r2"}},
			}}},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_LEAST_REQUEST
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// LocalityLBSettings.ApplyToCluster: failoverPriority with outlier detection.
			name: "localityLbSetting failoverPriority with outlierDetection",
			tp: &networking.TrafficPolicy{
				OutlierDetection: outlier5xx,
				LoadBalancer: &networking.LoadBalancerSettings{LocalityLbSetting: &networking.LocalityLoadBalancerSetting{
					FailoverPriority: []string{"topology.kubernetes.io/zone"},
				}},
			},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_LEAST_REQUEST
				c.OutlierDetection = wantOutlier5xx
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
				c.CommonLbConfig.LocalityConfigSpecifier = weighted
			}),
		},
		{
			// GetEffectiveLbSetting: enabled: false is no setting at all.
			name: "localityLbSetting disabled",
			tp: &networking.TrafficPolicy{
				OutlierDetection: outlier5xx,
				LoadBalancer: &networking.LoadBalancerSettings{LocalityLbSetting: &networking.LocalityLoadBalancerSetting{
					Enabled: wrapperspb.Bool(false),
				}},
			},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_LEAST_REQUEST
				c.OutlierDetection = wantOutlier5xx
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// ZoneAwareLBSettings.ApplyToCluster: zone_aware_lb_config with min_cluster_size.
			name: "zoneAwareLbSetting",
			tp: &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{ZoneAwareLbSetting: &networking.ZoneAwareLoadBalancerSetting{
				MinClusterSize: wrapperspb.UInt32(3),
			}}},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_LEAST_REQUEST
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
				c.CommonLbConfig.LocalityConfigSpecifier = &cluster.Cluster_CommonLbConfig_ZoneAwareLbConfig_{
					ZoneAwareLbConfig: &cluster.Cluster_CommonLbConfig_ZoneAwareLbConfig{MinClusterSize: wrapperspb.UInt64(3)},
				}
			}),
		},
		{
			// ZoneAwareLBSettings.ApplyToCluster: disabled → routing_enabled 0%.
			name: "zoneAwareLbSetting disabled",
			tp: &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{ZoneAwareLbSetting: &networking.ZoneAwareLoadBalancerSetting{
				Enabled: wrapperspb.Bool(false),
			}}},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_LEAST_REQUEST
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
				c.CommonLbConfig.LocalityConfigSpecifier = &cluster.Cluster_CommonLbConfig_ZoneAwareLbConfig_{
					ZoneAwareLbConfig: &cluster.Cluster_CommonLbConfig_ZoneAwareLbConfig{RoutingEnabled: pct(0)},
				}
			}),
		},
		{
			// GetEffectiveLbSetting: a service's trafficDistribution, without a rule, forces
			// failover by failoverPriority → locality weights.
			name: "no rule, PreferClose service",
			svc: func(s *collections.ServiceInfo) {
				s.TrafficDistribution = collections.TrafficDistributionPreferSameZone
			},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_LEAST_REQUEST
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
				c.CommonLbConfig.LocalityConfigSpecifier = weighted
			}),
		},
		{
			// buildOutboundClusters: a persistent-session service's default cluster keeps
			// DRAINING endpoints (override_host_status).
			name: "no rule, persistent session",
			svc:  func(s *collections.ServiceInfo) { s.PersistentSession = true },
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_LEAST_REQUEST
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
				c.CommonLbConfig.OverrideHostStatus = &core.HealthStatusSet{Statuses: []core.HealthStatus{
					core.HealthStatus_HEALTHY, core.HealthStatus_DRAINING, core.HealthStatus_UNKNOWN, core.HealthStatus_DEGRADED,
				}}
			}),
		},
		{
			// buildSubsetCluster builds a fresh cluster: no override_host_status on subsets.
			name:    "persistent session subset",
			svc:     func(s *collections.ServiceInfo) { s.PersistentSession = true },
			subsets: []*networking.Subset{{Name: "v2", Labels: map[string]string{"version": "v2"}}},
			cluster: cdsV2,
			want: transformtest.With(wantEDS(cdsV2), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_LEAST_REQUEST
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// buildSubsetCluster → MergeSubsetTrafficPolicy: the subset's loadBalancer
			// replaces the rule's, the rule's outlierDetection stays.
			name: "subset merged with the rule",
			tp: &networking.TrafficPolicy{
				OutlierDetection: outlier5xx,
				LoadBalancer:     simpleLBPolicy(networking.LoadBalancerSettings_RANDOM),
			},
			subsets: []*networking.Subset{{Name: "v2", Labels: map[string]string{"version": "v2"}, TrafficPolicy: &networking.TrafficPolicy{
				LoadBalancer: simpleLBPolicy(networking.LoadBalancerSettings_ROUND_ROBIN),
			}}},
			cluster: cdsV2,
			want: transformtest.With(wantEDS(cdsV2), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_ROUND_ROBIN
				c.OutlierDetection = wantOutlier5xx
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// applyDestinationRule → GetPortLevelTrafficPolicy: the port-level policy replaces
			// the top-level one as a whole (its outlierDetection is gone).
			name: "port-level policy replaces the top level",
			tp: &networking.TrafficPolicy{
				OutlierDetection: outlier5xx,
				LoadBalancer:     simpleLBPolicy(networking.LoadBalancerSettings_RANDOM),
				PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{{
					Port:         &networking.PortSelector{Number: 9080},
					LoadBalancer: simpleLBPolicy(networking.LoadBalancerSettings_ROUND_ROBIN),
				}},
			},
			want: transformtest.With(wantEDS(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_ROUND_ROBIN
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// buildSubsetCluster: a subset whose own policy says PASSTHROUGH is ORIGINAL_DST
			// even where its port-level policy says otherwise (applyLoadBalancer then returns
			// CLUSTER_PROVIDED early).
			name: "subset PASSTHROUGH with a port-level ROUND_ROBIN",
			subsets: []*networking.Subset{{Name: "v2", Labels: map[string]string{"version": "v2"}, TrafficPolicy: &networking.TrafficPolicy{
				LoadBalancer: simpleLBPolicy(networking.LoadBalancerSettings_PASSTHROUGH),
				PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{{
					Port:         &networking.PortSelector{Number: 9080},
					LoadBalancer: simpleLBPolicy(networking.LoadBalancerSettings_ROUND_ROBIN),
				}},
			}}},
			cluster: cdsV2,
			want: transformtest.With(wantEDS(cdsV2), func(c *cluster.Cluster) {
				c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST}
				c.EdsClusterConfig = nil
				c.LbPolicy = cluster.Cluster_CLUSTER_PROVIDED
				c.CommonLbConfig.HealthyPanicThreshold = pct(0)
			}),
		},
		{
			// MergeSubsetTrafficPolicy: outlier detection set on the subset only.
			name: "subset outlierDetection",
			tp:   &networking.TrafficPolicy{LoadBalancer: simpleLBPolicy(networking.LoadBalancerSettings_ROUND_ROBIN)},
			subsets: []*networking.Subset{{Name: "v2", Labels: map[string]string{"version": "v2"}, TrafficPolicy: &networking.TrafficPolicy{
				OutlierDetection: &networking.OutlierDetection{Consecutive_5XxErrors: wrapperspb.UInt32(5), MinHealthPercent: 25},
			}}},
			cluster: cdsV2,
			want: transformtest.With(wantEDS(cdsV2), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_ROUND_ROBIN
				c.OutlierDetection = wantOutlier5xx
				c.CommonLbConfig.HealthyPanicThreshold = pct(25)
			}),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc := cdsService()
			if tc.svc != nil {
				tc.svc(svc)
			}
			var rule *collections.DestinationRule
			if tc.tp != nil || tc.subsets != nil {
				rule = cdsRule(t, tc.tp, tc.subsets...)
			}
			name := cdsDefault
			if tc.cluster != "" {
				name = tc.cluster
			}
			_, subset, _, _ := transforms.ParseClusterName(name)
			got, problems := CheckedCluster(name, ClusterSettingsFor(svc, rule, 9080, subset), EnvoyCluster)
			if len(problems) > 0 {
				t.Fatalf("problems: %v", problems)
			}
			if d := cmp.Diff(tc.want, got, protocmp.Transform()); d != "" {
				t.Errorf("Envoy cluster (-istiod +krteds):\n%s", d)
			}
			if err := got.ValidateAll(); err != nil {
				t.Errorf("ValidateAll: %v", err)
			}
			// The gRPC form of the same rule passes validation too.
			if err := GRPCCluster(name, ClusterSettingsFor(svc, rule, 9080, subset)).ValidateAll(); err != nil {
				t.Errorf("gRPC cluster ValidateAll: %v", err)
			}
		})
	}
}

// TestGRPCClusterMatchesIstiodGRPCGen holds the proxyless gRPC cluster to istiod's grpcgen
// (pilot/pkg/networking/grpcgen/cds.go) on krteds' bare EDSCluster.
func TestGRPCClusterMatchesIstiodGRPCGen(t *testing.T) {
	cases := []struct {
		name string
		svc  func(*collections.ServiceInfo)
		tp   *networking.TrafficPolicy
		want *cluster.Cluster
	}{
		{name: "no rule", want: EDSCluster(cdsDefault)},
		{
			// applyLoadBalancing: LEAST_REQUEST.
			name: "LEAST_REQUEST",
			tp:   &networking.TrafficPolicy{LoadBalancer: simpleLBPolicy(networking.LoadBalancerSettings_LEAST_REQUEST)},
			want: transformtest.With(EDSCluster(cdsDefault), func(c *cluster.Cluster) { c.LbPolicy = cluster.Cluster_LEAST_REQUEST }),
		},
		{
			// applyLoadBalancing: anything else gRPC cannot apply keeps round robin.
			name: "RANDOM", tp: &networking.TrafficPolicy{LoadBalancer: simpleLBPolicy(networking.LoadBalancerSettings_RANDOM)},
			want: EDSCluster(cdsDefault),
		},
		{name: "LEAST_CONN", tp: &networking.TrafficPolicy{LoadBalancer: simpleLBPolicy(networking.LoadBalancerSettings_LEAST_CONN)}, want: EDSCluster(cdsDefault)},
		{name: "PASSTHROUGH", tp: &networking.TrafficPolicy{LoadBalancer: simpleLBPolicy(networking.LoadBalancerSettings_PASSTHROUGH)}, want: EDSCluster(cdsDefault)},
		{
			// applyLoadBalancing → ApplyRingHashLoadBalancer.
			name: "ringHash",
			tp: &networking.TrafficPolicy{LoadBalancer: hashLBPolicy(&networking.LoadBalancerSettings_ConsistentHashLB{
				HashKey:       &networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp{UseSourceIp: true},
				HashAlgorithm: &networking.LoadBalancerSettings_ConsistentHashLB_RingHash_{RingHash: &networking.LoadBalancerSettings_ConsistentHashLB_RingHash{MinimumRingSize: 4096}},
			})},
			want: transformtest.With(EDSCluster(cdsDefault), func(c *cluster.Cluster) {
				c.LbPolicy = cluster.Cluster_RING_HASH
				c.LbConfig = &cluster.Cluster_RingHashLbConfig_{RingHashLbConfig: &cluster.Cluster_RingHashLbConfig{MinimumRingSize: wrapperspb.UInt64(4096)}}
			}),
		},
		{
			// Deliberate difference: istiod sends MAGLEV, which gRPC rejects; round robin stays.
			name: "maglev",
			tp: &networking.TrafficPolicy{LoadBalancer: hashLBPolicy(&networking.LoadBalancerSettings_ConsistentHashLB{
				HashKey:       &networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp{UseSourceIp: true},
				HashAlgorithm: &networking.LoadBalancerSettings_ConsistentHashLB_Maglev{Maglev: &networking.LoadBalancerSettings_ConsistentHashLB_MagLev{TableSize: 65537}},
			})},
			want: EDSCluster(cdsDefault),
		},
		{
			// grpcgen builds no outlier detection.
			name: "outlierDetection",
			tp:   &networking.TrafficPolicy{OutlierDetection: &networking.OutlierDetection{Consecutive_5XxErrors: wrapperspb.UInt32(5)}},
			want: EDSCluster(cdsDefault),
		},
		{
			// clusterBuilder.build: override_host_status on a persistent-session service.
			name: "persistent session",
			svc:  func(s *collections.ServiceInfo) { s.PersistentSessionHeader = true },
			want: transformtest.With(EDSCluster(cdsDefault), func(c *cluster.Cluster) {
				c.CommonLbConfig = &cluster.Cluster_CommonLbConfig{OverrideHostStatus: &core.HealthStatusSet{Statuses: []core.HealthStatus{
					core.HealthStatus_HEALTHY, core.HealthStatus_DRAINING, core.HealthStatus_UNKNOWN, core.HealthStatus_DEGRADED,
				}}}
			}),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc := cdsService()
			if tc.svc != nil {
				tc.svc(svc)
			}
			var rule *collections.DestinationRule
			if tc.tp != nil {
				rule = cdsRule(t, tc.tp)
			}
			got, problems := CheckedCluster(cdsDefault, ClusterSettingsFor(svc, rule, 9080, ""), GRPCCluster)
			if len(problems) > 0 {
				t.Fatalf("problems: %v", problems)
			}
			if d := cmp.Diff(tc.want, got, protocmp.Transform()); d != "" {
				t.Errorf("gRPC cluster (-istiod +krteds):\n%s", d)
			}
		})
	}
}

// clustersOf runs the CDS transform over one service and its rules.
func clustersOf(t *testing.T, svc *collections.ServiceInfo, rules ...collections.DestinationRule) []collections.ResourceSet {
	t.Helper()
	sp := collections.ServicePolicy{Service: svc.ResourceName(), Rules: rules}
	policies := krt.NewStaticCollection(nil, []collections.ServicePolicy{sp}, krt.WithStop(test.NewStop(t)))
	return ClustersFor(ClusterInputs{RootNamespace: collections.DefaultSystemNamespace, Policies: policies}).Fn(krt.TestingDummyContext{}, svc)
}

// decodeSet decodes the cluster a set serves.
func decodeSet(t *testing.T, s *collections.ResourceSet) *cluster.Cluster {
	t.Helper()
	if s == nil || s.Shared == nil {
		t.Fatalf("no cluster in %+v", s)
	}
	c := &cluster.Cluster{}
	if err := proto.Unmarshal(s.Shared.Body, c); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestClusterVariantsPerNamespace: which rule applies depends on the proxy's namespace, and so
// does the cluster; every namespace the rules do not name shares one variant.
func TestClusterVariantsPerNamespace(t *testing.T) {
	svc := cdsService()
	// A rule in ns1 for ns1 only, and a mesh-wide rule in the root namespace.
	private := *cdsRule(t, &networking.TrafficPolicy{LoadBalancer: simpleLBPolicy(networking.LoadBalancerSettings_RANDOM)})
	private.Name, private.ExportTo = "private", []string{"."}
	probs, mesh := policy.ConvertDestinationRule(&networkingclient.DestinationRule{ObjectMeta: transformtest.RuleMeta(collections.DefaultSystemNamespace, "mesh"),
		Spec: networking.DestinationRule{Host: "*.svc.cluster.local", TrafficPolicy: &networking.TrafficPolicy{
			LoadBalancer: simpleLBPolicy(networking.LoadBalancerSettings_ROUND_ROBIN),
		}, Subsets: []*networking.Subset{{Name: "v2", Labels: map[string]string{"version": "v2"}}}}})
	if mesh == nil {
		t.Fatal(transformtest.ProblemsOf(probs))
	}
	sets := clustersOf(t, svc, private, *mesh)
	// Envoy: the mesh rule everywhere (ROUND_ROBIN) except ns1, whose own rule says RANDOM;
	// gRPC: round robin everywhere, one variant for all (RANDOM is not a gRPC policy).
	get := setsByKey(t, sets, "grpc~"+cdsDefault, "grpc~"+cdsV2, cdsDefault, cdsV2, "ns1/"+cdsDefault, "ns1/"+cdsV2)
	for _, c := range []struct {
		ns   string
		grpc bool
		name string
		want cluster.Cluster_LbPolicy
	}{
		{"ns1", false, cdsDefault, cluster.Cluster_RANDOM},
		{"ns1", false, cdsV2, cluster.Cluster_RANDOM}, // a subset its rule lacks: the rule's policy
		{"ns2", false, cdsDefault, cluster.Cluster_ROUND_ROBIN},
		{collections.DefaultSystemNamespace, false, cdsDefault, cluster.Cluster_ROUND_ROBIN},
		{"ns1", true, cdsDefault, cluster.Cluster_ROUND_ROBIN},
		{"ns2", true, cdsV2, cluster.Cluster_ROUND_ROBIN},
	} {
		set := ResolveClusterSet(get, c.ns, nil, c.name, c.grpc)
		got := decodeSet(t, set)
		if got.Name != c.name || got.LbPolicy != c.want {
			t.Errorf("%s (grpc %v) %s: cluster %s %v, want %v", c.ns, c.grpc, c.name, got.Name, got.LbPolicy, c.want)
		}
		if c.grpc == (got.CommonLbConfig.GetHealthyPanicThreshold() != nil) {
			t.Errorf("%s (grpc %v) %s: got the other kind's cluster: %v", c.ns, c.grpc, c.name, got)
		}
		// List picks the same variant.
		if best := rankedPick(sets, c.name, c.ns, nil, c.grpc); best != set {
			t.Errorf("%s (grpc %v) %s: ranking picks %v, resolving %s", c.ns, c.grpc, c.name, best, set.Key)
		}
	}

	// Without any rule setting a cluster field, one Envoy and one gRPC set per cluster.
	tlsOnly := *cdsRule(t, &networking.TrafficPolicy{Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_DISABLE}})
	tlsOnly.ExportTo = []string{"."}
	var keys []string
	for _, s := range clustersOf(t, svc, tlsOnly) {
		keys = append(keys, s.Key)
	}
	if want := []string{cdsDefault, "grpc~" + cdsDefault}; !slices.Equal(keys, want) {
		t.Errorf("keys %q, want %q", keys, want)
	}
}

// TestClusterVariantsPerSelector: a rule with a workloadSelector gives the proxies of its
// namespace it selects a variant of their own, in both kinds, even where it equals another;
// the namespace's other proxies resolve as without it.
func TestClusterVariantsPerSelector(t *testing.T) {
	svc := cdsService()
	plain := *cdsRule(t, &networking.TrafficPolicy{LoadBalancer: simpleLBPolicy(networking.LoadBalancerSettings_RANDOM)})
	plain.Name, plain.ExportTo = "plain", []string{"ns1"} // ns1 alone, not folded into the selector entry
	selected := *cdsRule(t, &networking.TrafficPolicy{LoadBalancer: simpleLBPolicy(networking.LoadBalancerSettings_ROUND_ROBIN)},
		&networking.Subset{Name: "v9", Labels: map[string]string{"version": "v9"}})
	selected.Name, selected.WorkloadSelector = "canary", map[string]string{"app": "canary"}
	sets := clustersOf(t, svc, plain, selected)
	v9 := "outbound|9080|v9|reviews.ns1.svc.cluster.local"
	get := setsByKey(t, sets, cdsDefault, v9, "grpc~"+cdsDefault, "grpc~"+v9, "ns1/"+cdsDefault, "ns1/"+v9,
		"ns1#canary/"+cdsDefault, "ns1#canary/"+v9, "grpc~ns1#canary/"+cdsDefault, "grpc~ns1#canary/"+v9)
	for _, c := range []struct {
		ns       string
		selected []string
		grpc     bool
		name     string
		want     cluster.Cluster_LbPolicy
	}{
		{"ns1", nil, false, cdsDefault, cluster.Cluster_RANDOM},
		{"ns1", []string{"canary"}, false, cdsDefault, cluster.Cluster_ROUND_ROBIN},
		{"ns1", []string{"other", "canary"}, false, v9, cluster.Cluster_ROUND_ROBIN},
		{"ns1", []string{"canary"}, true, cdsDefault, cluster.Cluster_ROUND_ROBIN},
		{"ns2", []string{"canary"}, false, cdsDefault, cluster.Cluster_LEAST_REQUEST}, // istiod's default
		{"ns1", nil, false, v9, cluster.Cluster_RANDOM},
	} {
		set := ResolveClusterSet(get, c.ns, c.selected, c.name, c.grpc)
		got := decodeSet(t, set)
		if got.Name != c.name || got.LbPolicy != c.want {
			t.Errorf("%s %v (grpc %v) %s: cluster %s %v, want %v", c.ns, c.selected, c.grpc, c.name, got.Name, got.LbPolicy, c.want)
		}
		if best := rankedPick(sets, c.name, c.ns, c.selected, c.grpc); best != set {
			t.Errorf("%s %v (grpc %v) %s: ranking picks %v, resolving %s", c.ns, c.selected, c.grpc, c.name, best, set.Key)
		}
	}
}

// setsByKey checks that the sets are exactly those of keys, without problems, and finds them by key.
func setsByKey(t *testing.T, sets []collections.ResourceSet, keys ...string) func(string) *collections.ResourceSet {
	t.Helper()
	byKey := map[string]*collections.ResourceSet{}
	var got []string
	for i := range sets {
		byKey[sets[i].Key] = &sets[i]
		got = append(got, sets[i].Key)
		if len(sets[i].Problems) > 0 {
			t.Errorf("%s: problems %v", sets[i].Key, sets[i].Problems)
		}
	}
	slices.Sort(got)
	keys = slices.Sorted(slices.Values(keys))
	if !slices.Equal(got, keys) {
		t.Fatalf("keys %q, want %q", got, keys)
	}
	return func(k string) *collections.ResourceSet { return byKey[k] }
}

// rankedPick is the set of name that ClusterVariantRank ranks highest for a proxy (nil: none).
func rankedPick(sets []collections.ResourceSet, name, ns string, selected []string, grpc bool) *collections.ResourceSet {
	var best *collections.ResourceSet
	for i := range sets {
		if sets[i].Name != name {
			continue
		}
		if r := ClusterVariantRank(sets[i].Key, sets[i].Name, ns, selected, grpc); r > 0 &&
			(best == nil || r > ClusterVariantRank(best.Key, best.Name, ns, selected, grpc)) {
			best = &sets[i]
		}
	}
	return best
}

func TestClusterVariantRank(t *testing.T) {
	const n = "outbound|80||a.b.svc.cluster.local"
	for _, c := range []struct {
		key, ns string
		grpc    bool
		want    int
	}{
		{n, "ns1", false, 1},
		{n, "ns1", true, 1},
		{"ns1/" + n, "ns1", false, 2},
		{"ns1/" + n, "ns2", false, 0},
		{"ns1/" + n, "ns1", true, 0},
		{"grpc~" + n, "ns1", false, 0},
		{"grpc~" + n, "ns1", true, 2},
		{"grpc~ns1/" + n, "ns1", true, 3},
		{"grpc~ns1/" + n, "ns2", true, 0},
		{"grpc~ns1/" + n, "ns1", false, 0},
		{"ns1/outbound|81||a.b.svc.cluster.local", "ns1", false, 0},
	} {
		if got := ClusterVariantRank(c.key, n, c.ns, nil, c.grpc); got != c.want {
			t.Errorf("rank(%q, ns %s, grpc %v) = %d, want %d", c.key, c.ns, c.grpc, got, c.want)
		}
	}
	// Selector variants: only for the rules selected, the first selected highest, of its kind.
	for _, c := range []struct {
		key, ns  string
		selected []string
		grpc     bool
		want     int
	}{
		{"ns1#a/" + n, "ns1", []string{"a"}, false, 5},
		{"ns1#a/" + n, "ns1", []string{"a", "b"}, false, 6},
		{"ns1#b/" + n, "ns1", []string{"a", "b"}, false, 5},
		{"ns1#a/" + n, "ns1", nil, false, 0},
		{"ns1#a/" + n, "ns2", []string{"a"}, false, 0},
		{"ns1#a/" + n, "ns1", []string{"a"}, true, 0},
		{"grpc~ns1#a/" + n, "ns1", []string{"a"}, true, 5},
		{"grpc~ns1#a/" + n, "ns1", []string{"a"}, false, 0},
		{"ns1#a/outbound|81||a.b.svc.cluster.local", "ns1", []string{"a"}, false, 0},
	} {
		if got := ClusterVariantRank(c.key, n, c.ns, c.selected, c.grpc); got != c.want {
			t.Errorf("rank(%q, ns %s, selected %v, grpc %v) = %d, want %d", c.key, c.ns, c.selected, c.grpc, got, c.want)
		}
	}
}

// TestClustersPassValidation builds the clusters of several rules through the CDS transform,
// every set of every variant, and holds each to go-control-plane's ValidateAll.
func TestClustersPassValidation(t *testing.T) {
	outlier := &networking.OutlierDetection{Consecutive_5XxErrors: wrapperspb.UInt32(5), ConsecutiveGatewayErrors: wrapperspb.UInt32(3),
		Interval: durationpb.New(5 * time.Second), BaseEjectionTime: durationpb.New(time.Minute), MaxEjectionPercent: 100, MinHealthPercent: 50,
		SplitExternalLocalOriginErrors: true, ConsecutiveLocalOriginFailures: wrapperspb.UInt32(2)}
	policies := map[string]*networking.TrafficPolicy{
		"none": nil,
		"everything": {
			OutlierDetection: outlier,
			LoadBalancer: &networking.LoadBalancerSettings{
				LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_ROUND_ROBIN},
				Warmup: &networking.WarmupConfiguration{Duration: durationpb.New(time.Minute),
					Aggression: wrapperspb.Double(1.5), MinimumPercent: wrapperspb.Double(20)},
				LocalityLbSetting: &networking.LocalityLoadBalancerSetting{
					Failover:         []*networking.LocalityLoadBalancerSetting_Failover{{From: "r1", To: "r2"}},
					FailoverPriority: []string{"topology.istio.io/network", "version"},
				},
			},
			PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{{
				Port:         &networking.PortSelector{Number: 9080},
				LoadBalancer: &networking.LoadBalancerSettings{LocalityLbSetting: &networking.LocalityLoadBalancerSetting{Distribute: []*networking.LocalityLoadBalancerSetting_Distribute{{From: "*", To: map[string]uint32{"r1/*": 100}}}}},
			}},
		},
		"zone aware": {OutlierDetection: outlier, LoadBalancer: &networking.LoadBalancerSettings{
			LbPolicy:           &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_LEAST_REQUEST},
			WarmupDurationSecs: durationpb.New(10 * time.Second),
			ZoneAwareLbSetting: &networking.ZoneAwareLoadBalancerSetting{MinClusterSize: wrapperspb.UInt32(6), Failover: []*networking.ZoneAwareLoadBalancerSetting_Failover{{From: "r1", To: "r2"}}},
		}},
		"passthrough": {LoadBalancer: simpleLBPolicy(networking.LoadBalancerSettings_PASSTHROUGH)},
		"maglev": {LoadBalancer: hashLBPolicy(&networking.LoadBalancerSettings_ConsistentHashLB{
			HashKey:       &networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie{HttpCookie: &networking.LoadBalancerSettings_ConsistentHashLB_HTTPCookie{Name: "s", Ttl: durationpb.New(time.Hour)}},
			HashAlgorithm: &networking.LoadBalancerSettings_ConsistentHashLB_Maglev{Maglev: &networking.LoadBalancerSettings_ConsistentHashLB_MagLev{TableSize: 65537}},
		})},
		"ring": {LoadBalancer: hashLBPolicy(&networking.LoadBalancerSettings_ConsistentHashLB{
			HashKey:       &networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName{HttpQueryParameterName: "u"},
			HashAlgorithm: &networking.LoadBalancerSettings_ConsistentHashLB_RingHash_{RingHash: &networking.LoadBalancerSettings_ConsistentHashLB_RingHash{MinimumRingSize: 8388608}},
		})},
	}
	subsets := []*networking.Subset{
		{Name: "v1", Labels: map[string]string{"version": "v1"}},
		{Name: "v2", Labels: map[string]string{"version": "v2"}, TrafficPolicy: &networking.TrafficPolicy{
			LoadBalancer:     simpleLBPolicy(networking.LoadBalancerSettings_RANDOM),
			OutlierDetection: &networking.OutlierDetection{MinHealthPercent: 10},
		}},
		{Name: "v3", TrafficPolicy: &networking.TrafficPolicy{LoadBalancer: simpleLBPolicy(networking.LoadBalancerSettings_PASSTHROUGH)}},
	}
	for name, tp := range policies {
		for _, svcMod := range []func(*collections.ServiceInfo){
			func(*collections.ServiceInfo) {},
			func(s *collections.ServiceInfo) {
				s.TrafficDistribution, s.PersistentSession = collections.TrafficDistributionPreferSameNode, true
			},
		} {
			svc := cdsService()
			svc.Ports = append(svc.Ports, collections.ServicePort{Name: "grpc", Port: 9090, Protocol: "TCP"})
			svcMod(svc)
			rule := cdsRule(t, tp, subsets...)
			rule.ExportTo = []string{"."}
			sets := clustersOf(t, svc, *rule)
			if len(sets) < 16 { // 2 ports × 4 clusters × (Envoy, gRPC) at least
				t.Fatalf("%s: %d sets", name, len(sets))
			}
			for i := range sets {
				if len(sets[i].Problems) > 0 {
					t.Errorf("%s %s: problems %v", name, sets[i].Key, sets[i].Problems)
				}
				if err := decodeSet(t, &sets[i]).ValidateAll(); err != nil {
					t.Errorf("%s %s: %v", name, sets[i].Key, err)
				}
			}
		}
	}
}

// TestClusterEnvoyRejectsIsReported: a setting istiod's validation accepts but Envoy's rejects
// (a ring of more than 8M entries) is served without the rule's algorithm, and reported.
func TestClusterEnvoyRejectsIsReported(t *testing.T) {
	rule := cdsRule(t, &networking.TrafficPolicy{
		OutlierDetection: &networking.OutlierDetection{Consecutive_5XxErrors: wrapperspb.UInt32(5)},
		LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_ConsistentHash{ConsistentHash: &networking.LoadBalancerSettings_ConsistentHashLB{
			HashKey:       &networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp{UseSourceIp: true},
			HashAlgorithm: &networking.LoadBalancerSettings_ConsistentHashLB_RingHash_{RingHash: &networking.LoadBalancerSettings_ConsistentHashLB_RingHash{MinimumRingSize: 10_000_000}},
		}}},
	})
	if EnvoyCluster(cdsDefault, ClusterSettingsFor(cdsService(), rule, 9080, "")).ValidateAll() == nil {
		t.Fatal("the ring of 10M entries passes validation; the test needs another invalid setting")
	}
	sets := clustersOf(t, cdsService(), *rule)
	var keys []string
	for _, s := range sets {
		keys = append(keys, s.Key)
	}
	// The rule applies in every namespace alike: one Envoy and one gRPC set.
	if want := []string{cdsDefault, "grpc~" + cdsDefault}; !slices.Equal(keys, want) {
		t.Errorf("keys %q, want %q", keys, want)
	}
	for i := range sets {
		s := &sets[i]
		c := decodeSet(t, s)
		if err := c.ValidateAll(); err != nil {
			t.Errorf("%s: %v", s.Key, err)
		}
		if len(s.Problems) != 1 || s.Problems[0].Reason != collections.ReasonRejectedClusterSetting || s.Problems[0].Object != "ns1/reviews" ||
			!strings.Contains(s.Problems[0].Detail, "MinimumRingSize") {
			t.Errorf("%s: problems %v", s.Key, s.Problems)
		}
		// The rest of the rule stays: outlier detection (Envoy), the default algorithm.
		if strings.HasPrefix(s.Key, "grpc~") {
			if c.LbPolicy != cluster.Cluster_ROUND_ROBIN {
				t.Errorf("%s: %v", s.Key, c.LbPolicy)
			}
		} else if c.LbPolicy != cluster.Cluster_LEAST_REQUEST || c.OutlierDetection == nil {
			t.Errorf("%s: %v", s.Key, c)
		}
	}
}

// TestLRSPointsEDSClustersAtSelf: with LRS on, Envoy's and gRPC's EDS clusters name the
// management server itself (self, the one LRS server gRPC accepts) as their lrs_server; without
// it, none.
func TestLRSPointsEDSClustersAtSelf(t *testing.T) {
	svc := cdsService()
	for _, lrs := range []bool{false, true} {
		cs := ClusterSettings{Service: svc, LRS: lrs}
		for kind, c := range map[string]interface{ GetLrsServer() *core.ConfigSource }{
			"envoy": EnvoyCluster("outbound|80||a.ns.svc.cluster.local", cs),
			"grpc":  GRPCCluster("outbound|80||a.ns.svc.cluster.local", cs),
		} {
			if got := c.GetLrsServer().GetSelf() != nil; got != lrs {
				t.Errorf("%s cluster, LRS %t: lrs_server self %t", kind, lrs, got)
			}
		}
	}
}

// TestRoutesHashByTheRulesHeader: a gRPC route hashes by the header of the consistentHash of the
// proxy's rule: none by default, the ns1 rule's header for ns1's proxies (a variant of its own),
// the selector rule's for the proxies it selects.
func TestRoutesHashByTheRulesHeader(t *testing.T) {
	svc := cdsService()
	hashing := func(header string) *networking.TrafficPolicy {
		return &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_ConsistentHash{
			ConsistentHash: &networking.LoadBalancerSettings_ConsistentHashLB{HashKey: &networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName{HttpHeaderName: header}}}}}
	}
	private := *cdsRule(t, hashing("x-user"))
	private.Name, private.ExportTo = "private", []string{"ns1"}
	selected := *cdsRule(t, hashing("x-tenant"))
	selected.Name, selected.WorkloadSelector = "tenant", map[string]string{"app": "t"}
	sp := collections.ServicePolicy{Service: svc.ResourceName(), Rules: []collections.DestinationRule{private, selected}}
	policies := krt.NewStaticCollection(nil, []collections.ServicePolicy{sp}, krt.WithStop(test.NewStop(t)))
	sets := Routes(collections.DefaultSystemNamespace, policies).Fn(krt.TestingDummyContext{}, svc)
	byKey := map[string]*collections.ResourceSet{}
	for i := range sets {
		byKey[sets[i].Key] = &sets[i]
	}
	if len(sets) != 3 {
		t.Fatalf("%d route sets, want the default, ns1's and the selector's: %v", len(sets), slices.Collect(maps.Keys(byKey)))
	}
	get := func(k string) *collections.ResourceSet { return byKey[k] }
	for _, c := range []struct {
		ns       string
		selected []string
		want     string
	}{{"ns2", nil, ""}, {"ns1", nil, "x-user"}, {"ns1", []string{"tenant"}, "x-tenant"}} {
		set := ResolveClusterSet(get, c.ns, c.selected, cdsDefault, true)
		rc := &route.RouteConfiguration{}
		if set == nil || set.Shared == nil || proto.Unmarshal(set.Shared.Body, rc) != nil {
			t.Fatalf("%s %v: no route", c.ns, c.selected)
		}
		got := ""
		if hp := rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetHashPolicy(); len(hp) > 0 {
			got = hp[0].GetHeader().GetHeaderName()
		}
		if rc.Name != cdsDefault || got != c.want {
			t.Errorf("%s %v: route %s hashing by %q, want %q", c.ns, c.selected, rc.Name, got, c.want)
		}
	}
}
