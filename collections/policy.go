package collections

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Reasons for skipping or partly ignoring Istio configuration.
const (
	// ReasonInvalidDestinationRule: istiod's validation would reject the DestinationRule at
	// admission, so krteds ignores all of it.
	ReasonInvalidDestinationRule = "invalid_destination_rule"
	// ReasonInvalidSidecar: istiod's validation would reject the Sidecar at admission, so krteds
	// ignores all of it.
	ReasonInvalidSidecar = "invalid_sidecar"
	// ReasonRejectedClusterSetting: the CDS cluster a DestinationRule's load balancer gives would
	// fail Envoy's validation (istiod would send it, and Envoy would reject the whole CDS
	// update); krteds serves the cluster without the rule's load-balancing algorithm.
	ReasonRejectedClusterSetting = "cluster_setting_rejected"
)

// Client TLS modes of a DestinationRule traffic policy (ClientTLSSettings.mode).
const (
	ClientTLSDisable     = "DISABLE"
	ClientTLSSimple      = "SIMPLE"
	ClientTLSMutual      = "MUTUAL"
	ClientTLSIstioMutual = "ISTIO_MUTUAL"
)

// DestinationRule is the part of an Istio DestinationRule that krteds honours, copied out of the
// proto so that comparing two versions is cheap.
type DestinationRule struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// CreationTime orders rules the way istiod does when several rules for one host are merged:
	// oldest first, then by name.
	CreationTime time.Time `json:"creationTime"`
	// Host is spec.host as written. A short name ("reviews") is relative to the rule's
	// namespace; it is resolved against the cluster domain at lookup time.
	Host string `json:"host"`
	// ExportTo is spec.exportTo, sorted: "." (own namespace), "*" (everywhere), "~" (nowhere) or
	// namespaces. Empty means everywhere.
	ExportTo []string `json:"exportTo,omitempty"`
	// WorkloadSelector is spec.workloadSelector.matchLabels; non-nil (possibly empty) exactly when
	// the rule has a workload selector.
	WorkloadSelector map[string]string `json:"workloadSelector,omitempty"`
	Subsets          []Subset          `json:"subsets,omitempty"`
	// Policy is spec.trafficPolicy; nil when the rule has none. A rule whose traffic policy sets
	// only fields krteds does not model still has a non-nil (zero) Policy.
	Policy *TrafficPolicy `json:"policy,omitempty"`
	// PortPolicies are spec.trafficPolicy.portLevelSettings by port number (the first entry of a
	// port wins). A port-level policy replaces the top-level one as a whole for that port.
	PortPolicies map[uint32]*TrafficPolicy `json:"portPolicies,omitempty"`
}

// ResourceName is "<namespace>/<name>".
func (d DestinationRule) ResourceName() string { return d.Namespace + "/" + d.Name }

// Equals compares every field.
func (d DestinationRule) Equals(o DestinationRule) bool {
	return d.Name == o.Name &&
		d.Namespace == o.Namespace &&
		d.CreationTime.Equal(o.CreationTime) &&
		d.Host == o.Host &&
		slices.Equal(d.ExportTo, o.ExportTo) &&
		(d.WorkloadSelector == nil) == (o.WorkloadSelector == nil) &&
		maps.Equal(d.WorkloadSelector, o.WorkloadSelector) &&
		slices.EqualFunc(d.Subsets, o.Subsets, Subset.Equals) &&
		d.Policy.Equals(o.Policy) &&
		portPoliciesEqual(d.PortPolicies, o.PortPolicies)
}

// Subset is one named subset of a DestinationRule.
type Subset struct {
	Name string `json:"name"`
	// Labels select the endpoints of the subset: they must all be present on an endpoint.
	Labels map[string]string `json:"labels,omitempty"`
	// Policy is the subset's trafficPolicy; its fields override the rule's.
	Policy *TrafficPolicy `json:"policy,omitempty"`
	// PortPolicies are the subset's portLevelSettings by port number.
	PortPolicies map[uint32]*TrafficPolicy `json:"portPolicies,omitempty"`
}

// Equals compares every field.
func (s Subset) Equals(o Subset) bool {
	return s.Name == o.Name &&
		maps.Equal(s.Labels, o.Labels) &&
		s.Policy.Equals(o.Policy) &&
		portPoliciesEqual(s.PortPolicies, o.PortPolicies)
}

func portPoliciesEqual(a, b map[uint32]*TrafficPolicy) bool {
	return maps.EqualFunc(a, b, (*TrafficPolicy).Equals)
}

// TrafficPolicy is the part of a DestinationRule traffic policy that changes EDS output. Each
// field mirrors one proto field being set, so that policies merge the way istiod merges them
// (a subset policy overrides the fields it sets).
type TrafficPolicy struct {
	// OutlierDetection is set when outlierDetection is: it turns locality failover on.
	OutlierDetection bool `json:"outlierDetection,omitempty"`
	// MinHealthPercent is outlierDetection.minHealthPercent; > 0 stops UNHEALTHY endpoints
	// from being sent.
	MinHealthPercent int32 `json:"minHealthPercent,omitempty"`
	// Outlier is the rest of outlierDetection, which only the CDS cluster reads; nil when
	// outlierDetection is unset or sets none of these fields.
	Outlier *OutlierSettings `json:"outlier,omitempty"`
	// LoadBalancer is set when loadBalancer is, even without a locality setting: a subset's
	// loadBalancer replaces the rule's, locality setting included.
	LoadBalancer bool `json:"loadBalancer,omitempty"`
	// Locality is loadBalancer.localityLbSetting or loadBalancer.zoneAwareLbSetting.
	Locality *LocalitySetting `json:"locality,omitempty"`
	// Algorithm is the rest of loadBalancer (simple or consistentHash, warmup), which only the
	// CDS cluster reads; nil when loadBalancer is unset or sets none of these fields.
	Algorithm *LBAlgorithm `json:"algorithm,omitempty"`
	// TLSMode is tls.mode ("" = tls unset, else one of the ClientTLS* constants).
	TLSMode string `json:"tlsMode,omitempty"`
}

// Equals compares every field; nil equals only nil.
func (t *TrafficPolicy) Equals(o *TrafficPolicy) bool {
	if t == o {
		return true
	}
	if t == nil || o == nil {
		return false
	}
	return t.OutlierDetection == o.OutlierDetection &&
		t.MinHealthPercent == o.MinHealthPercent &&
		t.LoadBalancer == o.LoadBalancer &&
		t.TLSMode == o.TLSMode &&
		t.Locality.Equals(o.Locality) &&
		sameValue(t.Outlier, o.Outlier) &&
		t.Algorithm.Equals(o.Algorithm)
}

// HasClusterSettings reports whether the policy sets anything the CDS cluster carries
// (outlierDetection or loadBalancer): without, its cluster is the one of a service without a
// DestinationRule.
func (t *TrafficPolicy) HasClusterSettings() bool {
	return t != nil && (t.OutlierDetection || t.LoadBalancer)
}

// OptionalUint32 is a protobuf UInt32Value copied out of its message: Set tells an explicit
// zero from unset.
type OptionalUint32 struct {
	Value uint32 `json:"value"`
	Set   bool   `json:"set"`
}

// OptionalFloat64 is a protobuf DoubleValue copied out of its message.
type OptionalFloat64 struct {
	Value float64 `json:"value"`
	Set   bool    `json:"set"`
}

// Equals compares the bits of the values, so that NaN equals NaN.
func (f OptionalFloat64) Equals(o OptionalFloat64) bool {
	return f.Set == o.Set && math.Float64bits(f.Value) == math.Float64bits(o.Value)
}

// Duration is a protobuf Duration copied out of its message, exactly.
type Duration struct {
	Seconds int64 `json:"seconds"`
	Nanos   int32 `json:"nanos"`
	Set     bool  `json:"set"`
}

// OutlierSettings are the outlierDetection fields that only the CDS cluster reads
// (minHealthPercent, which EDS reads too, is TrafficPolicy.MinHealthPercent).
type OutlierSettings struct {
	Consecutive5xxErrors           OptionalUint32 `json:"consecutive5xxErrors,omitzero"`
	ConsecutiveGatewayErrors       OptionalUint32 `json:"consecutiveGatewayErrors,omitzero"`
	Interval                       Duration       `json:"interval,omitzero"`
	BaseEjectionTime               Duration       `json:"baseEjectionTime,omitzero"`
	MaxEjectionPercent             int32          `json:"maxEjectionPercent,omitempty"`
	SplitExternalLocalOriginErrors bool           `json:"splitExternalLocalOriginErrors,omitempty"`
	ConsecutiveLocalOriginFailures OptionalUint32 `json:"consecutiveLocalOriginFailures,omitzero"`
}

// Consistent hash algorithms (LBAlgorithm.ConsistentHash).
const (
	// HashRingDefault: consistentHash without hashAlgorithm, a ring hash of the deprecated
	// minimumRingSize (1024 when 0).
	HashRingDefault = "default"
	HashRing        = "ringHash"
	HashMaglev      = "maglev"
)

// LBAlgorithm is the load-balancing algorithm a loadBalancer sets, which only the CDS cluster
// reads.
type LBAlgorithm struct {
	// Simple is loadBalancer.simple by its name (ROUND_ROBIN, LEAST_REQUEST, LEAST_CONN, RANDOM,
	// PASSTHROUGH); "" when unset or UNSPECIFIED.
	Simple string `json:"simple,omitempty"`
	// ConsistentHash is one of the Hash* constants when loadBalancer.consistentHash is set.
	// The hash key goes into routes, which krteds builds for gRPC clients only: HashHeader.
	ConsistentHash string `json:"consistentHash,omitempty"`
	// HashHeader is consistentHash.httpHeaderName: the route hashes the request by that header.
	HashHeader string `json:"hashHeader,omitempty"`
	// MinimumRingSize is ringHash.minimumRingSize, or the deprecated
	// consistentHash.minimumRingSize for HashRingDefault.
	MinimumRingSize uint64 `json:"minimumRingSize,omitempty"`
	// MaglevTableSize is maglev.tableSize.
	MaglevTableSize uint64 `json:"maglevTableSize,omitempty"`
	// Warmup is set when loadBalancer.warmup is.
	Warmup               bool            `json:"warmup,omitempty"`
	WarmupDuration       Duration        `json:"warmupDuration,omitzero"`
	WarmupMinimumPercent OptionalFloat64 `json:"warmupMinimumPercent,omitzero"`
	WarmupAggression     OptionalFloat64 `json:"warmupAggression,omitzero"`
	// WarmupDurationSecs is the deprecated loadBalancer.warmupDurationSecs.
	WarmupDurationSecs Duration `json:"warmupDurationSecs,omitzero"`
}

// Equals compares every field; nil equals only nil.
func (a *LBAlgorithm) Equals(o *LBAlgorithm) bool {
	if a == o {
		return true
	}
	if a == nil || o == nil {
		return false
	}
	return a.Simple == o.Simple && a.ConsistentHash == o.ConsistentHash && a.HashHeader == o.HashHeader && a.MinimumRingSize == o.MinimumRingSize &&
		a.MaglevTableSize == o.MaglevTableSize && a.Warmup == o.Warmup && a.WarmupDuration == o.WarmupDuration &&
		a.WarmupMinimumPercent.Equals(o.WarmupMinimumPercent) && a.WarmupAggression.Equals(o.WarmupAggression) &&
		a.WarmupDurationSecs == o.WarmupDurationSecs
}

// LocalitySetting is a locality load-balancing setting (istio LocalityLoadBalancerSetting), or,
// with ZoneAware, a zone-aware one (ZoneAwareLoadBalancerSetting, which has no distribute).
type LocalitySetting struct {
	// Enabled is nil when unset (which means enabled).
	Enabled          *bool        `json:"enabled,omitempty"`
	Distribute       []Distribute `json:"distribute,omitempty"`
	Failover         []Failover   `json:"failover,omitempty"`
	FailoverPriority []string     `json:"failoverPriority,omitempty"`
	// ZoneAware marks a zoneAwareLbSetting: endpoints are bucketed by region only, and failover
	// is always on while enabled.
	ZoneAware bool `json:"zoneAware,omitempty"`
	// MinClusterSize is a zoneAwareLbSetting's minClusterSize (CDS only).
	MinClusterSize OptionalUint32 `json:"minClusterSize,omitzero"`
}

// IsEnabled reports whether the setting is enabled (unset means enabled).
func (l *LocalitySetting) IsEnabled() bool {
	return l != nil && (l.Enabled == nil || *l.Enabled)
}

// Equals compares every field; nil equals only nil.
func (l *LocalitySetting) Equals(o *LocalitySetting) bool {
	if l == o {
		return true
	}
	if l == nil || o == nil {
		return false
	}
	return (l.Enabled == nil) == (o.Enabled == nil) &&
		(l.Enabled == nil || *l.Enabled == *o.Enabled) &&
		l.ZoneAware == o.ZoneAware &&
		l.MinClusterSize == o.MinClusterSize &&
		slices.EqualFunc(l.Distribute, o.Distribute, Distribute.Equals) &&
		slices.Equal(l.Failover, o.Failover) &&
		slices.Equal(l.FailoverPriority, o.FailoverPriority)
}

// Distribute is one localityLbSetting.distribute rule: proxies in From send traffic to the
// localities matching the keys of To, with the given weights (percent).
type Distribute struct {
	From string            `json:"from"`
	To   map[string]uint32 `json:"to"`
}

// Equals compares both fields.
func (d Distribute) Equals(o Distribute) bool { return d.From == o.From && maps.Equal(d.To, o.To) }

// Failover is one localityLbSetting.failover rule: proxies in region From fail over to region To
// before any other region.
type Failover struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Sidecar is the part of an Istio Sidecar that decides which services a proxy can see.
type Sidecar struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// CreationTime orders several Sidecars of one namespace the way istiod does: oldest first,
	// then by name.
	CreationTime time.Time `json:"creationTime"`
	// WorkloadSelector is spec.workloadSelector.labels; non-nil (possibly empty, which selects
	// every workload) exactly when the Sidecar has a workload selector.
	WorkloadSelector map[string]string `json:"workloadSelector,omitempty"`
	// Egress are its egress listeners. None means one of "*/*" (a Sidecar without egress
	// listeners imports everything).
	Egress []EgressListener `json:"egress,omitempty"`
}

// EgressListener is what a Sidecar's egress listener imports: its hosts, "<namespace>/<host>",
// of the services that have its port (0: every service, as a listener without a port, or of
// the HTTP_PROXY protocol, imports them).
type EgressListener struct {
	Port  uint32   `json:"port,omitempty"`
	Hosts []string `json:"hosts"`
}

// Equals compares every field.
func (l EgressListener) Equals(o EgressListener) bool {
	return l.Port == o.Port && slices.Equal(l.Hosts, o.Hosts)
}

// String is "<hosts>" or "port <port>: <hosts>".
func (l EgressListener) String() string {
	hosts := strings.Join(l.Hosts, ",")
	if l.Port == 0 {
		return hosts
	}
	return fmt.Sprintf("port %d: %s", l.Port, hosts)
}

// ResourceName is "<namespace>/<name>".
func (s Sidecar) ResourceName() string { return s.Namespace + "/" + s.Name }

// Equals compares every field.
func (s Sidecar) Equals(o Sidecar) bool {
	return s.Name == o.Name &&
		s.Namespace == o.Namespace &&
		s.CreationTime.Equal(o.CreationTime) &&
		(s.WorkloadSelector == nil) == (o.WorkloadSelector == nil) &&
		maps.Equal(s.WorkloadSelector, o.WorkloadSelector) &&
		slices.EqualFunc(s.Egress, o.Egress, EgressListener.Equals)
}

// ServicePolicy lists the DestinationRules whose host matches one service, in every namespace:
// which of them applies depends on the proxy's namespace.
type ServicePolicy struct {
	// Service is "<namespace>/<name>".
	Service string            `json:"service"`
	Rules   []DestinationRule `json:"rules,omitempty"`
}

// ResourceName is the service key.
func (p ServicePolicy) ResourceName() string { return p.Service }

// Equals compares the service and every rule.
func (p ServicePolicy) Equals(o ServicePolicy) bool {
	return p.Service == o.Service && slices.EqualFunc(p.Rules, o.Rules, DestinationRule.Equals)
}

// Subsets lists the subset names the rules define, sorted, without duplicates.
func (p *ServicePolicy) Subsets() []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, r := range p.Rules {
		for _, s := range r.Subsets {
			out = append(out, s.Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
