package transforms

import (
	"slices"
	"strconv"
	"strings"

	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
)

// DestinationRules converts Kubernetes DestinationRules; invalid ones are reported and ignored.
func DestinationRules() Checked[*networkingclient.DestinationRule, collections.DestinationRule] {
	return Checked[*networkingclient.DestinationRule, collections.DestinationRule]{Fn: func(_ krt.HandlerContext, dr *networkingclient.DestinationRule) (*collections.ObjectProblems, *collections.DestinationRule) {
		return ConvertDestinationRule(dr)
	}}
}

// Sidecars converts Kubernetes Sidecars; invalid ones are reported and ignored.
func Sidecars() Checked[*networkingclient.Sidecar, collections.Sidecar] {
	return Checked[*networkingclient.Sidecar, collections.Sidecar]{Fn: func(_ krt.HandlerContext, sc *networkingclient.Sidecar) (*collections.ObjectProblems, *collections.Sidecar) {
		return ConvertSidecar(sc)
	}}
}

// DestinationRuleMatches reports whether a rule's host (relative to its namespace) matches the
// service's hostname, exactly or as a wildcard.
func DestinationRuleMatches(dr *collections.DestinationRule, svc *collections.ServiceInfo) bool {
	return ruleHostMatches(svc.Hostname, resolveRuleHost(dr.Host, dr.Namespace, serviceDomain(svc)))
}

// RuleHostKeys is the extractor of the index of DestinationRules by host: the rule's host
// resolved against its namespace ("reviews" → reviews.<ns>.svc.<domain>), or, for a wildcard
// host, the one key wildcardRules that every service reads.
func RuleHostKeys(cfg collections.Config) func(collections.DestinationRule) []string {
	return func(dr collections.DestinationRule) []string {
		h := resolveRuleHost(dr.Host, dr.Namespace, cfg.Domain)
		if strings.HasPrefix(h, "*") {
			return []string{wildcardRules}
		}
		return []string{h}
	}
}

// wildcardRules is the index key of every rule with a wildcard host. Wildcard rules are few and
// mostly mesh- or namespace-wide: one key for all of them keeps two dependencies per service
// instead of one per parent domain (about 100 bytes an endpoint at the medium size), and a
// change of one recomputes every service's rules, whose output changes only where it applies.
const wildcardRules = "*"

// HostKeys are the index keys of the rules that may apply to a hostname: the hostname itself and
// the wildcard rules.
func HostKeys(hostname string) []string { return []string{hostname, wildcardRules} }

// ServicePolicies gathers, per service, the DestinationRules that may apply to it. It Fetches
// rules through their host index, so a change of a rule for one host recomputes only that host's
// services; a change of a wildcard rule recomputes every service (wildcardRules).
func ServicePolicies(rules krt.Collection[collections.DestinationRule], byHost krt.Index[string, collections.DestinationRule]) Single[*collections.ServiceInfo, collections.ServicePolicy] {
	return Single[*collections.ServiceInfo, collections.ServicePolicy]{Reads: []any{rules}, Fn: func(ctx krt.HandlerContext, svc *collections.ServiceInfo) *collections.ServicePolicy {
		sp := &collections.ServicePolicy{Service: svc.ResourceName()}
		for _, key := range HostKeys(svc.Hostname) {
			for _, r := range byHost.Fetch(ctx, key) {
				if DestinationRuleMatches(&r, svc) {
					sp.Rules = append(sp.Rules, r)
				}
			}
		}
		slices.SortFunc(sp.Rules, func(a, b collections.DestinationRule) int {
			return strings.Compare(a.ResourceName(), b.ResourceName())
		})
		sp.Rules = slices.CompactFunc(sp.Rules, func(a, b collections.DestinationRule) bool { return a.ResourceName() == b.ResourceName() })
		return sp
	}}
}

// ClusterPolicy is everything that decides one cluster's CLA beyond the endpoints: the
// effective DestinationRule for the proxy's namespace and what it sets for the port and subset.
type ClusterPolicy struct {
	LB LBPolicy
	// Setting and EnableFailover drive the locality load balancing applied after the priorities
	// of LB (distribute weights, region failover, zone-aware buckets).
	Setting        *collections.LocalitySetting
	EnableFailover bool
	// SubsetLabels select the endpoints of a subset cluster (nil: all endpoints, which is what
	// istiod sends for a subset it does not know).
	SubsetLabels map[string]string
	// EndpointTLS decides which endpoints carry the tlsMode metadata: its Mode is the TLS mode
	// the rule sets, if any; its Peer, the PeerAuthentications of the service's endpoints, is the
	// same for every cluster of a service.
	EndpointTLS
	// Rule is "<ns>/<name>" of the effective rule, "" without one.
	Rule string
}

// PostProcess reports whether the CLA needs the message-level locality functions (anything
// beyond failover priorities).
func (cp ClusterPolicy) PostProcess() bool {
	s := cp.Setting
	if s == nil || !s.IsEnabled() {
		return false
	}
	return s.ZoneAware || len(s.Distribute) > 0 || (cp.EnableFailover && len(s.Failover) > 0) ||
		(cp.EnableFailover && len(s.FailoverPriority) == 0)
}

// ClusterPolicyFor resolves the policy of one cluster for a proxy (its namespace and the rules
// with a workloadSelector that select it).
func ClusterPolicyFor(svc *collections.ServiceInfo, sp *collections.ServicePolicy, rootNamespace string, proxy RuleProxy, port int32, subset string) ClusterPolicy {
	var dr *collections.DestinationRule
	if sp != nil && len(sp.Rules) > 0 {
		dr = ResolveDestinationRule(sp.Rules, proxy, svc, rootNamespace)
	}
	if dr == nil {
		cp := ClusterPolicy{LB: PolicyFor(svc)}
		cp.Setting, cp.EnableFailover = LBSettingFor(DefaultMeshLocalitySetting(), nil, svc)
		return cp
	}
	tp, labels, _ := EffectiveTrafficPolicy(dr, port, subset)
	cp := ClusterPolicy{Rule: dr.ResourceName(), SubsetLabels: labels, EndpointTLS: EndpointTLS{Mode: TLSMetadataFor(DestinationRuleTLSMode(dr, port, subset))}}
	cp.Setting, cp.EnableFailover = LBSettingFor(DefaultMeshLocalitySetting(), tp, svc)
	cp.LB = LocalityLBPolicy(cp.Setting, cp.EnableFailover, tp, svc)
	return cp
}

// Project keeps the class dimensions the cluster's CLA depends on.
func Project(svc *collections.ServiceInfo, cp ClusterPolicy, c collections.ProxyClass) collections.ProxyClass {
	p := project(svc, cp.LB, c)
	if cp.PostProcess() {
		loc := ProxyLocalityDependence(cp.Setting, cp.EnableFailover, c.Locality)
		if loc.Region != "" {
			p.Locality.Region = loc.Region
		}
		if loc.Zone != "" {
			p.Locality.Zone = loc.Zone
		}
		if loc.Subzone != "" {
			p.Locality.Subzone = loc.Subzone
		}
	}
	return p
}

// DependsOnNamespace reports whether the CLA may differ between proxy namespaces: some
// DestinationRule may apply to the service.
func DependsOnNamespace(sp *collections.ServicePolicy) bool { return sp != nil && len(sp.Rules) > 0 }

// CLAKey is the key of one CLA: the cluster name, the effective rule, the TLS metadata rule
// (a rule's cluster of an unknown subset differs from its port's cluster only by it), the
// projected class. The PeerAuthentications are not in it: they are the same for every CLA of a
// service.
func CLAKey(clusterName string, cp ClusterPolicy, projected collections.ProxyClass) string {
	k := clusterClassKey(clusterName, projected)
	if cp.Rule != "" {
		k += "~dr:" + cp.Rule
	}
	if cp.Mode != TLSByEndpoint {
		k += "~tls:" + strconv.Itoa(int(cp.Mode))
	}
	return k
}

// TLSMetadata says which endpoints of a cluster carry the filter metadata
// envoy.transport_socket_match {tlsMode: <value>}, as istiod's mtlsChecker.checkMtlsEnabled and
// util.AppendLbEndpointMetadata decide it (pilot/pkg/xds/endpoints/mtls_checker.go,
// pilot/pkg/networking/util/util.go): an endpoint whose mTLS is off has its TLSMode blanked, and
// the metadata is written for a TLSMode that is neither "" nor "disabled".
type TLSMetadata uint8

const (
	// TLSByEndpoint: no DestinationRule TLS mode applies to the cluster; mTLS is on for an
	// endpoint whose tlsMode is "istio" unless its PeerAuthentications DISABLE it, and it then
	// carries tlsMode: istio. Any other value carries nothing.
	TLSByEndpoint TLSMetadata = iota
	// TLSIstioMutual: the rule's mode is ISTIO_MUTUAL; mTLS is on for every endpoint, and each
	// carries its own tlsMode value unless that is "" or "disabled".
	TLSIstioMutual
	// TLSOff: the rule sets another mode (DISABLE, SIMPLE, MUTUAL); no endpoint carries it.
	TLSOff
)

// TLSMetadataFor is the TLS metadata rule for a DestinationRule TLS mode ("" = none applies).
func TLSMetadataFor(drMode string) TLSMetadata {
	switch drMode {
	case "":
		return TLSByEndpoint
	case collections.ClientTLSIstioMutual:
		return TLSIstioMutual
	}
	return TLSOff
}

// subsetMatch reports whether the endpoint carries every subset label (istiod's
// labels.Instance.SubsetOf over the augmented labels, read without building them).
func subsetMatch(label func(string) (string, bool), subset map[string]string) bool {
	for k, want := range subset {
		if v, ok := label(k); !ok || v != want {
			return false
		}
	}
	return true
}
