package cds

import (
	"fmt"
	"slices"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/policy"
)

// ClusterSettings is what one cluster is built from besides its name.
type ClusterSettings struct {
	Service *collections.ServiceInfo
	// Subset is "" for a port's default cluster.
	Subset string
	// Policy is the traffic policy of the applying rule merged for the port and subset
	// (EffectiveTrafficPolicy); nil without a rule.
	Policy *collections.TrafficPolicy
	// SubsetPassthrough: the subset's own top-level policy has loadBalancer.simple PASSTHROUGH,
	// which makes istiod's buildSubsetCluster build an ORIGINAL_DST cluster whatever the merged
	// policy says.
	SubsetPassthrough bool
	// Rule is "<ns>/<name>" of the applying rule, "" without one.
	Rule string
	// LoadAssignment holds the endpoints of a DNS service's cluster (nil for EDS clusters).
	LoadAssignment *endpoint.ClusterLoadAssignment
	// LRS sets an EDS cluster's lrs_server to self: clients report its load to krteds.
	LRS bool
}

// ClusterSettingsFor resolves the settings of one cluster under a rule (nil: none applies).
func ClusterSettingsFor(svc *collections.ServiceInfo, rule *collections.DestinationRule, port int32, subset string) ClusterSettings {
	cs := ClusterSettings{Service: svc, Subset: subset}
	if rule == nil {
		return cs
	}
	cs.Rule = rule.ResourceName()
	cs.Policy, _, _ = policy.EffectiveTrafficPolicy(rule, port, subset)
	if subset != "" {
		if i := slices.IndexFunc(rule.Subsets, func(s collections.Subset) bool { return s.Name == subset }); i >= 0 {
			p := rule.Subsets[i].Policy
			cs.SubsetPassthrough = p != nil && p.Algorithm != nil && p.Algorithm.Simple == lbPassthrough
		}
	}
	return cs
}

// CheckedCluster builds a cluster and holds it to go-control-plane's validation (the
// protoc-gen-validate rules Envoy applies): a DestinationRule can set values istiod accepts and
// Envoy rejects (a ring of more than 8M entries, a negative warmup minimumPercent), and one
// rejected cluster makes Envoy reject the whole CDS update. Such a cluster is built again without
// the rule's load-balancing algorithm (then, should that still fail, without its policy), and the
// problem is reported.
func CheckedCluster(name string, cs ClusterSettings, build func(string, ClusterSettings) *cluster.Cluster) (*cluster.Cluster, []collections.Problem) {
	c := build(name, cs)
	if !cs.Policy.HasClusterSettings() {
		return c, nil
	}
	err := c.ValidateAll()
	if err == nil {
		return c, nil
	}
	problem := collections.Problem{Kind: policy.KindDestinationRule, Object: cs.Rule, Reason: collections.ReasonRejectedClusterSetting}
	if cs.Policy.Algorithm != nil {
		p := *cs.Policy
		p.Algorithm = nil
		retry := cs
		retry.Policy, retry.SubsetPassthrough = &p, false
		if c2 := build(name, retry); c2.ValidateAll() == nil {
			problem.Detail = fmt.Sprintf("cluster %s fails Envoy's validation (%v); it is served without the rule's load-balancing algorithm", name, err)
			return c2, []collections.Problem{problem}
		}
	}
	retry := cs
	retry.Policy, retry.SubsetPassthrough = nil, false
	problem.Detail = fmt.Sprintf("cluster %s fails Envoy's validation (%v); it is served without the rule's traffic policy", name, err)
	return build(name, retry), []collections.Problem{problem}
}

// Load-balancer names of istio's LoadBalancerSettings.SimpleLB.
const (
	lbRoundRobin   = "ROUND_ROBIN"
	lbLeastRequest = "LEAST_REQUEST"
	lbLeastConn    = "LEAST_CONN"
	lbRandom       = "RANDOM"
	lbPassthrough  = "PASSTHROUGH"
)

// EnvoyCluster is the cluster istiod's ClusterBuilder gives an Envoy sidecar for a Kubernetes
// service port (buildOutboundClusters → buildCluster, applyDestinationRule or
// buildSubsetCluster → applyTrafficPolicy → maybeApplyEdsConfig), under istiod's default mesh
// config and feature flags, reduced to the fields that decide endpoint choice.
func EnvoyCluster(name string, cs ClusterSettings) *cluster.Cluster {
	typ := cluster.Cluster_EDS
	switch {
	case cs.SubsetPassthrough:
		typ = cluster.Cluster_ORIGINAL_DST
	case cs.LoadAssignment != nil && cs.Service.Resolution == collections.DNSRoundRobinLB:
		typ = cluster.Cluster_LOGICAL_DNS
	case cs.LoadAssignment != nil:
		typ = cluster.Cluster_STRICT_DNS
	}
	c := &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: typ},
		// applyDefaultConnectionPool: the mesh connectTimeout.
		ConnectTimeout: durationpb.New(meshConnectTimeout),
		CommonLbConfig: &cluster.Cluster_CommonLbConfig{},
	}
	if typ == cluster.Cluster_STRICT_DNS || typ == cluster.Cluster_LOGICAL_DNS {
		// buildCluster: Envoy resolves the endpoints; IPv4 lookups (an IPv4 proxy's family),
		// the mesh refresh rate, the records' TTL respected.
		c.DnsLookupFamily = cluster.Cluster_V4_ONLY
		c.DnsRefreshRate = durationpb.New(meshDNSRefreshRate) //nolint:staticcheck // what istiod sets
		c.RespectDnsTtl = true                                //nolint:staticcheck // what istiod sets
		c.LoadAssignment = cs.LoadAssignment
	}
	if cs.Subset == "" && cs.Service.SupportsDrainingEndpoints() {
		// buildOutboundClusters, on the default cluster of a persistent-session service.
		c.CommonLbConfig.OverrideHostStatus = drainingOverride()
	}
	if cs.Policy != nil && cs.Policy.OutlierDetection {
		applyOutlierDetection(cs.Service, c, cs.Policy)
	}
	applyLoadBalancer(cs.Service, c, cs.Policy)
	if c.GetType() == cluster.Cluster_ORIGINAL_DST {
		// applyTrafficPolicy.
		c.LbPolicy = cluster.Cluster_CLUSTER_PROVIDED
	}
	if c.GetType() == cluster.Cluster_EDS {
		// maybeApplyEdsConfig.
		c.EdsClusterConfig = adsEDSConfig(name)
		applyLRS(c, cs)
	}
	return c
}

// applyLRS points an EDS cluster's load reports at the management server itself (self is the
// one LRS server gRPC accepts).
func applyLRS(c *cluster.Cluster, cs ClusterSettings) {
	if cs.LRS {
		c.LrsServer = &core.ConfigSource{ConfigSourceSpecifier: &core.ConfigSource_Self{Self: &core.SelfConfigSource{}}, ResourceApiVersion: core.ApiVersion_V3}
	}
}

// drainingOverride keeps DRAINING endpoints for persistent sessions (buildOutboundClusters).
func drainingOverride() *core.HealthStatusSet {
	return &core.HealthStatusSet{Statuses: []core.HealthStatus{
		core.HealthStatus_HEALTHY, core.HealthStatus_DRAINING, core.HealthStatus_UNKNOWN, core.HealthStatus_DEGRADED,
	}}
}

// EDSCluster is a bare EDS cluster fed over ADS, round robin: what a proxyless gRPC client gets
// without a DestinationRule (GRPCCluster). Envoy's clusters are EnvoyCluster.
func EDSCluster(name string) *cluster.Cluster {
	return &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
		EdsClusterConfig:     adsEDSConfig(name),
		ConnectTimeout:       durationpb.New(meshConnectTimeout),
		LbPolicy:             cluster.Cluster_ROUND_ROBIN,
	}
}

// adsEDSConfig is istiod's maybeApplyEdsConfig: endpoints over ADS, no initial fetch timeout.
func adsEDSConfig(name string) *cluster.Cluster_EdsClusterConfig {
	src := transforms.ADSConfigSource()
	src.InitialFetchTimeout = durationpb.New(0)
	return &cluster.Cluster_EdsClusterConfig{ServiceName: name, EdsConfig: src}
}

// GRPCCluster is the cluster istiod's grpcgen gives a proxyless gRPC client (clusterBuilder.build,
// edsCluster, applyLoadBalancing), on krteds' EDSCluster: gRPC takes LEAST_REQUEST and ring hash
// from the rule and keeps its default round robin for every other policy. One deliberate
// difference: istiod sends a maglev consistent hash as MAGLEV, which gRPC rejects; krteds keeps
// round robin, as istiod does for the other policies gRPC cannot apply.
func GRPCCluster(name string, cs ClusterSettings) *cluster.Cluster {
	c := EDSCluster(name)
	applyLRS(c, cs)
	if cs.Subset == "" && cs.Service.SupportsDrainingEndpoints() {
		c.CommonLbConfig = &cluster.Cluster_CommonLbConfig{OverrideHostStatus: drainingOverride()}
	}
	if cs.Policy == nil || !cs.Policy.LoadBalancer {
		return c
	}
	alg := cs.Policy.Algorithm
	if alg != nil && alg.ConsistentHash != "" {
		if alg.ConsistentHash != collections.HashMaglev {
			applyRingHash(c, alg)
		}
		return c
	}
	if simpleLB(alg) == lbLeastRequest {
		c.LbPolicy = cluster.Cluster_LEAST_REQUEST
	}
	return c
}

// durationProto renders a copied duration; nil when unset.
func durationProto(d collections.Duration) *durationpb.Duration {
	if !d.Set {
		return nil
	}
	return &durationpb.Duration{Seconds: d.Seconds, Nanos: d.Nanos}
}

// meshConnectTimeout is the mesh default connectTimeout istiod gives every cluster.
const meshConnectTimeout = 10 * time.Second

// meshDNSRefreshRate is the mesh default dnsRefreshRate of DNS clusters.
const meshDNSRefreshRate = 60 * time.Second
