package transforms

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	xdstype "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
)

// CDS: the clusters of a service as istiod builds them for the DestinationRule that applies to
// the proxy, one form for Envoy (istiod's ClusterBuilder, pilot/pkg/networking/core) and one for
// proxyless gRPC clients (istiod's grpcgen). Only what decides which endpoint gets a request is
// carried: the load-balancing policy, locality and zone-aware configuration, outlier detection
// and the panic threshold; no TLS, connection pool, metadata or stats names.
//
// Which rule applies depends on the proxy's namespace, and only on whether the namespace is one
// the rules name (a rule's own namespace, an exportTo entry, the root namespace): every other
// namespace resolves to the same rule. So a service's clusters come in a few variants, each a
// resource set of its own, keyed by ClusterKey:
//
//	<name>                  Envoy, proxies of any namespace without a variant of its own
//	<ns>/<name>             Envoy, proxies of namespace ns (only where it differs)
//	grpc~<name>             gRPC, any namespace (only where it differs from <name>)
//	grpc~<ns>/<name>        gRPC, namespace ns (only where it differs from what grpc~<name> resolves to)
//
// ResolveClusterSet and ClusterVariantRank pick a proxy's variant. No variant depends on anything
// but the service and its rules, so the clusters never wait for the connected proxies.

// meshConnectTimeout is the mesh default connectTimeout istiod gives every cluster.
const meshConnectTimeout = 10 * time.Second

// meshDNSRefreshRate is the mesh default dnsRefreshRate of DNS clusters.
const meshDNSRefreshRate = 60 * time.Second

// grpcClusterPrefix starts the keys of the gRPC variants ('~' is in no namespace or cluster name).
const grpcClusterPrefix = "grpc~"

// ClusterKey is the key of a cluster's variant for proxies of a namespace ("" for every namespace
// without its own) and kind (gRPC or Envoy).
func ClusterKey(namespace, name string, grpc bool) string {
	k := name
	if namespace != "" {
		k = namespace + "/" + name
	}
	if grpc {
		k = grpcClusterPrefix + k
	}
	return k
}

// ResolveClusterSet finds the variant of cluster name for a proxy of a namespace and kind: the
// most specific of ClusterKey(namespace, name, grpc), then (gRPC) ClusterKey("", name, true),
// then the Envoy default, name.
func ResolveClusterSet(get func(key string) *collections.ResourceSet, namespace, name string, grpc bool) *collections.ResourceSet {
	if s := get(ClusterKey(namespace, name, grpc)); s != nil {
		return s
	}
	if grpc {
		if s := get(ClusterKey("", name, true)); s != nil {
			return s
		}
	}
	return get(name)
}

// ClusterVariantRank says how a cluster set serves a proxy of a namespace and kind: 0 not at all,
// 1 as the default for its name, higher as a more specific variant (the highest wins), following
// ResolveClusterSet's order.
func ClusterVariantRank(key, name, namespace string, grpc bool) int {
	if key == name {
		return 1
	}
	rest, isGRPC := strings.CutPrefix(key, grpcClusterPrefix)
	if isGRPC && !grpc {
		return 0
	}
	if rest == name {
		return 2 // grpc~<name>
	}
	ns, n, ok := strings.Cut(rest, "/")
	switch {
	case !ok || ns != namespace || n != name:
		return 0
	case isGRPC:
		return 3
	case grpc:
		return 0 // an Envoy namespace variant is not in a gRPC client's order
	}
	return 2
}

// ClusterInputs are what the CDS transform reads.
type ClusterInputs struct {
	// RootNamespace is istiod's root namespace (mesh-wide DestinationRules).
	RootNamespace string
	Policies      krt.Collection[collections.ServicePolicy]
	// Endpoints give a DNS service's clusters their endpoints (read for those services only).
	Endpoints krt.Collection[collections.ServiceEndpoints]
	// LRS points EDS clusters' lrs_server at the management server itself.
	LRS bool
}

// ClustersFor builds the CDS resources of a service: per cluster port, the cluster
// outbound|<port>||<hostname> and one per subset of the DestinationRules that may apply
// (outbound|<port>|<subset>|<hostname>), EDS over ADS, each in the variants the rules call for
// (see ClusterKey). A variant carries the policy of the rule its proxies get (ResolveDestinationRule),
// merged for the port and subset (EffectiveTrafficPolicy); a subset the proxies' rule does not
// define gets the rule's policy for the port.
//
// A DNS service (a ServiceEntry with resolution DNS or DNS_ROUND_ROBIN) gets STRICT_DNS or
// LOGICAL_DNS clusters carrying their endpoints (filtered by subset), as istiod's buildCluster;
// a cluster left without endpoints is not sent, as istiod does not send it.
func ClustersFor(in ClusterInputs) Many[*collections.ServiceInfo, collections.ResourceSet] {
	return Many[*collections.ServiceInfo, collections.ResourceSet]{Reads: []any{in.Policies, in.Endpoints}, Fn: func(ctx krt.HandlerContext, svc *collections.ServiceInfo) []collections.ResourceSet {
		ports := ClusterPorts(svc)
		if len(ports) == 0 {
			return nil
		}
		sp := krt.FetchOne(ctx, in.Policies, krt.FilterKey(svc.ResourceName()))
		subsets := append([]string{""}, sp.Subsets()...)
		variants := clusterVariants(svc, sp, in.RootNamespace)
		var dns func(port collections.ServicePort, subset, namespace string) *endpoint.ClusterLoadAssignment
		if svc.Resolution.IsDNS() {
			var eps []*collections.Endpoint
			if se := krt.FetchOne(ctx, in.Endpoints, krt.FilterKey(svc.ResourceName())); se != nil {
				eps = se.Endpoints
			}
			dns = func(port collections.ServicePort, subset, namespace string) *endpoint.ClusterLoadAssignment {
				name := ClusterName(port.Port, subset, svc.Hostname)
				cp := ClusterPolicyFor(svc, sp, in.RootNamespace, namespace, port.Port, subset)
				plan := PlanCLA(name, svc, port, eps, cp, collections.ProxyClass{})
				if len(plan.Groups) == 0 {
					return nil
				}
				// The cluster carries its endpoints as a message: the one rendering, read back.
				la := &endpoint.ClusterLoadAssignment{}
				if err := proto.Unmarshal(plan.Encode(), la); err != nil {
					return nil // cannot happen: Encode's bytes are a valid message (TestEncodeEqualsProtoMarshal)
				}
				return la
			}
		}
		var out []collections.ResourceSet
		for _, port := range ports {
			for _, subset := range subsets {
				out = appendClusterVariants(out, svc, port, subset, variants, dns, in.LRS)
			}
		}
		return out
	}}
}

// clusterVariant is the rule proxies of a namespace get ("": every namespace the rules do not name).
type clusterVariant struct {
	namespace string
	rule      *collections.DestinationRule
}

// clusterVariants resolves the rule of every namespace whose proxies may get a different one:
// only needed when some rule sets something a cluster carries.
func clusterVariants(svc *collections.ServiceInfo, sp *collections.ServicePolicy, rootNamespace string) []clusterVariant {
	if sp == nil || !slices.ContainsFunc(sp.Rules, ruleHasClusterSettings) {
		return []clusterVariant{{}}
	}
	// "" is no rule's namespace nor in any exportTo: it stands for every namespace that is not.
	out := []clusterVariant{{rule: ResolveDestinationRule(sp.Rules, "", svc, rootNamespace)}}
	for _, ns := range ruleNamespaces(sp.Rules, rootNamespace) {
		out = append(out, clusterVariant{namespace: ns, rule: ResolveDestinationRule(sp.Rules, ns, svc, rootNamespace)})
	}
	return out
}

// ruleNamespaces are the namespaces whose proxies ResolveDestinationRule may treat apart: the
// rules' own, those their exportTo names, and the root namespace.
func ruleNamespaces(rules []collections.DestinationRule, rootNamespace string) []string {
	var out []string
	if rootNamespace != "" {
		out = append(out, rootNamespace)
	}
	for _, r := range rules {
		out = append(out, r.Namespace)
		for _, e := range r.ExportTo {
			if e != "." && e != "*" && e != "~" {
				out = append(out, e)
			}
		}
	}
	slices.Sort(out)
	return slices.DeleteFunc(slices.Compact(out), func(ns string) bool { return ns == "" })
}

// ruleHasClusterSettings reports whether any policy of a rule (top level, port level, subsets)
// sets something a cluster carries.
func ruleHasClusterSettings(r collections.DestinationRule) bool {
	if r.WorkloadSelector != nil {
		return false
	}
	has := func(p *collections.TrafficPolicy, ports map[uint32]*collections.TrafficPolicy) bool {
		if p.HasClusterSettings() {
			return true
		}
		for _, pp := range ports {
			if pp.HasClusterSettings() {
				return true
			}
		}
		return false
	}
	if has(r.Policy, r.PortPolicies) {
		return true
	}
	return slices.ContainsFunc(r.Subsets, func(s collections.Subset) bool { return has(s.Policy, s.PortPolicies) })
}

// appendClusterVariants appends the sets of one cluster: the Envoy default, and every other
// variant that differs (in bytes or problems) from what its proxies would otherwise resolve to.
func appendClusterVariants(out []collections.ResourceSet, svc *collections.ServiceInfo, servicePort collections.ServicePort, subset string,
	variants []clusterVariant, dns func(port collections.ServicePort, subset, namespace string) *endpoint.ClusterLoadAssignment, lrs bool,
) []collections.ResourceSet {
	port := servicePort.Port
	name := ClusterName(port, subset, svc.Hostname)
	type built struct {
		r        *collections.Resource
		problems []collections.Problem
	}
	// add appends the set of key unless it is what inherit (nil: nothing) already serves.
	add := func(key string, m proto.Message, problems []collections.Problem, inherit *built) *built {
		r, err := Marshal(name, TypeCluster, m)
		if err != nil {
			set := failedResource(svc, key, name, TypeCluster, err)
			set.Problems = append(set.Problems, problems...)
			out = append(out, set)
			return &built{problems: set.Problems}
		}
		if inherit != nil && inherit.r != nil && bytes.Equal(r.Body, inherit.r.Body) && slices.Equal(problems, inherit.problems) {
			return inherit
		}
		out = append(out, collections.ResourceSet{Key: key, Name: name, TypeURL: TypeCluster, Service: svc.ResourceName(),
			Visibility: svc.Visibility(), Shared: r, Problems: problems})
		return &built{r, problems}
	}
	var envoyDefault, grpcDefault *built
	for i, v := range variants {
		cs := ClusterSettingsFor(svc, v.rule, port, subset)
		cs.LRS = lrs
		if dns != nil {
			if cs.LoadAssignment = dns(servicePort, subset, v.namespace); cs.LoadAssignment == nil {
				if i == 0 {
					// No endpoints: istiod sends no DNS cluster.
					return out
				}
				continue
			}
		}
		envoy, envoyProblems := CheckedCluster(name, cs, EnvoyCluster)
		grpc, grpcProblems := CheckedCluster(name, cs, GRPCCluster)
		if i == 0 {
			envoyDefault = add(name, envoy, envoyProblems, nil)
			grpcDefault = add(ClusterKey("", name, true), grpc, grpcProblems, envoyDefault)
			continue
		}
		add(ClusterKey(v.namespace, name, false), envoy, envoyProblems, envoyDefault)
		add(ClusterKey(v.namespace, name, true), grpc, grpcProblems, grpcDefault)
	}
	return out
}

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
	cs.Policy, _, _ = EffectiveTrafficPolicy(rule, port, subset)
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
	problem := collections.Problem{Kind: KindDestinationRule, Object: cs.Rule, Reason: collections.ReasonRejectedClusterSetting}
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
	src := adsConfigSource()
	src.InitialFetchTimeout = durationpb.New(0)
	return &cluster.Cluster_EdsClusterConfig{ServiceName: name, EdsConfig: src}
}

// adsConfigSource is a source of resources over the ADS stream itself (the v3 API): where every
// cluster's endpoints, a listener's routes and a LEDS collection come from.
func adsConfigSource() *core.ConfigSource {
	return &core.ConfigSource{ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}}, ResourceApiVersion: core.ApiVersion_V3}
}

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
	setting, enableFailover := LBSettingFor(DefaultMeshLocalitySetting(), tp, svc)
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
