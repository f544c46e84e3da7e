package transforms

import (
	"slices"
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
	return dr.WorkloadSelector == nil && ruleHostMatches(svc.Hostname, resolveRuleHost(dr.Host, dr.Namespace, serviceDomain(svc)))
}

// RuleHostKeys is the extractor of the index of DestinationRules by host: the rule's host
// resolved against its namespace ("reviews" → reviews.<ns>.svc.<domain>; wildcards as written).
func RuleHostKeys(cfg collections.Config) func(collections.DestinationRule) []string {
	return func(dr collections.DestinationRule) []string {
		return []string{resolveRuleHost(dr.Host, dr.Namespace, cfg.Domain)}
	}
}

// HostKeys are the index keys of the rule hosts that may match a hostname: the hostname itself,
// and the wildcards of each of its parent domains ("*.ns.svc.cluster.local", ..., "*").
func HostKeys(hostname string) []string {
	keys := []string{hostname, "*"}
	for rest := hostname; ; {
		_, after, ok := strings.Cut(rest, ".")
		if !ok {
			break
		}
		keys = append(keys, "*."+after)
		rest = after
	}
	return keys
}

// ServicePolicies gathers, per service, the DestinationRules that may apply to it. It Fetches
// rules through their host index, so a rule change recomputes only the services its host can
// match.
func ServicePolicies(rules krt.Collection[collections.DestinationRule], byHost krt.Index[string, collections.DestinationRule]) Single[collections.ServiceInfo, collections.ServicePolicy] {
	return Single[collections.ServiceInfo, collections.ServicePolicy]{Reads: []any{rules}, Fn: func(ctx krt.HandlerContext, svc collections.ServiceInfo) *collections.ServicePolicy {
		sp := &collections.ServicePolicy{Service: svc.ResourceName()}
		for _, key := range HostKeys(svc.Hostname) {
			for _, r := range byHost.Fetch(ctx, key) {
				if DestinationRuleMatches(&r, &svc) {
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
	// NoTLSMetadata drops the tlsMode metadata: the rule sets a TLS mode other than ISTIO_MUTUAL.
	NoTLSMetadata bool
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

// ClusterPolicyFor resolves the policy of one cluster for proxies of a namespace.
func ClusterPolicyFor(svc *collections.ServiceInfo, sp *collections.ServicePolicy, rootNamespace, proxyNamespace string, port int32, subset string) ClusterPolicy {
	var dr *collections.DestinationRule
	if sp != nil && len(sp.Rules) > 0 {
		dr = ResolveDestinationRule(sp.Rules, proxyNamespace, svc, rootNamespace)
	}
	if dr == nil {
		cp := ClusterPolicy{LB: PolicyFor(svc)}
		cp.Setting, cp.EnableFailover = LBSettingFor(DefaultMeshLocalitySetting(), nil, svc)
		return cp
	}
	tp, labels, _ := EffectiveTrafficPolicy(dr, port, subset)
	cp := ClusterPolicy{Rule: dr.ResourceName(), SubsetLabels: labels}
	cp.Setting, cp.EnableFailover = LBSettingFor(DefaultMeshLocalitySetting(), tp, svc)
	cp.LB = LocalityLBPolicy(cp.Setting, cp.EnableFailover, tp, svc)
	if tp != nil && tp.TLSMode != "" && tp.TLSMode != collections.ClientTLSIstioMutual {
		cp.NoTLSMetadata = true
	}
	return cp
}

// ProjectFor keeps the class dimensions the cluster's CLA depends on.
func ProjectFor(svc *collections.ServiceInfo, cp ClusterPolicy, c collections.ProxyClass) collections.ProxyClass {
	p := Project(svc, cp.LB, c)
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

// CLAKeyFor is the key of one CLA: the cluster name, the effective rule, the projected class.
func CLAKeyFor(clusterName string, cp ClusterPolicy, projected collections.ProxyClass) string {
	k := CLAKey(clusterName, projected)
	if cp.Rule != "" {
		k += "~dr:" + cp.Rule
	}
	return k
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
