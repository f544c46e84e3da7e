// Package policy derives what applies to whom: the DestinationRules, Sidecars and
// PeerAuthentications as krteds keeps them, which rule a proxy gets for a service (as istiod's
// sidecar scope resolves it), what a rule sets for a port and subset, the mTLS metadata rule, and
// the proxies themselves: their classes (what their CLAs depend on) and views (what they see).
package policy

import (
	"slices"
	"strings"

	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// DestinationRules converts Kubernetes DestinationRules; invalid ones are reported and ignored.
func DestinationRules() transforms.Checked[*networkingclient.DestinationRule, collections.DestinationRule] {
	return transforms.Checked[*networkingclient.DestinationRule, collections.DestinationRule]{Fn: func(_ krt.HandlerContext, dr *networkingclient.DestinationRule) (*collections.ObjectProblems, *collections.DestinationRule) {
		return ConvertDestinationRule(dr)
	}}
}

// Sidecars converts Kubernetes Sidecars; invalid ones are reported and ignored.
func Sidecars() transforms.Checked[*networkingclient.Sidecar, collections.Sidecar] {
	return transforms.Checked[*networkingclient.Sidecar, collections.Sidecar]{Fn: func(_ krt.HandlerContext, sc *networkingclient.Sidecar) (*collections.ObjectProblems, *collections.Sidecar) {
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
func ServicePolicies(rules krt.Collection[collections.DestinationRule], byHost krt.Index[string, collections.DestinationRule]) transforms.Single[*collections.ServiceInfo, collections.ServicePolicy] {
	return transforms.Single[*collections.ServiceInfo, collections.ServicePolicy]{Reads: []any{rules}, Fn: func(ctx krt.HandlerContext, svc *collections.ServiceInfo) *collections.ServicePolicy {
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
