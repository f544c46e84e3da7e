package policy

import (
	"maps"
	"net/netip"
	"slices"
	"strings"

	"istio.io/istio/pkg/config/host"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// ResolveDestinationRule returns the DestinationRule istiod's sidecar scope gives a proxy in
// proxyNamespace for svc (push_context.go destinationRule + SidecarScope.DestinationRule), or nil.
//
// Hosts: a short host ("reviews") means reviews.<rule namespace>.svc.<domain>, with the domain
// taken from svc.Hostname; "*" and IP addresses are kept as written. Within one pool of rules,
// an exact host wins over wildcards, and among wildcards the longest (then the alphabetically
// first) wins.
//
// Pools, in order:
//  1. the proxy's namespace: rules there with no exportTo, or exportTo containing "*", "." or
//     that namespace. For a proxy in the root namespace, only the root namespace's rules
//     exported to "." (or to the root namespace) alone;
//  2. the service's namespace: rules not exported to "." (or their own namespace) alone, kept
//     only if exported to the proxy's namespace (no exportTo, "*", or the namespace by name);
//  3. the root namespace, the same way.
//
// The first pool with a visible rule decides. Several rules of one pool for the same host are
// consolidated as istiod's mergeDestinationRule does with ENABLE_ENHANCED_DESTINATIONRULE_MERGE
// (the default): rules are taken oldest first (CreationTime, then name, then namespace, which is
// istiod's order; with equal creation times the order is by name); a rule merges into every
// earlier entry whose exportTo equals its own or is a non-empty subset of its own, and starts an
// entry of its own when the last entry did not take it (istiod's loop). Merging appends the
// subsets whose names are new and adopts the incoming top-level traffic policy (with its
// port-level settings) only when the entry has none, so the oldest policy wins. When several
// entries remain visible, the last one is used, as SidecarScope.DestinationRule does (the last
// without a selector, see below).
//
// Rules with a workloadSelector (istiod's setDestinationRules, mergeDestinationRule and
// SidecarScope.DestinationRule) are exported to their own namespace only, whatever their
// exportTo, and come before every rule without one (then oldest first). Merging keeps rules with
// different selectors apart; a rule without a selector merges into an entry with one as its
// exportTo allows (so a catch-all exported to "." alone is folded into the selector entries and
// has no entry of its own, as in istiod). In the pool that decides, a proxy gets the first entry
// with a selector of its own namespace that selects it (proxy.Selected), else the last entry
// without a selector, else no rule: a namespace whose rules for the host all have selectors
// gives its other proxies none, and the service's and root namespace's rules are not consulted.
//
// The result is a new value whose Host is the resolved host; its policies are shared with the
// input and must not be modified. The mesh's defaultDestinationRuleExportTo is taken to be "*"
// (istiod's default).
func ResolveDestinationRule(drs []collections.DestinationRule, proxy RuleProxy, svc *collections.ServiceInfo, rootNamespace string) *collections.DestinationRule {
	if e := resolveEntry(drs, proxy, svc, rootNamespace); e != nil {
		return &e.rule
	}
	return nil
}

// RuleProxy is what choosing a DestinationRule reads of a proxy: its namespace and the rules with
// a workloadSelector that select it (collections.ProxyClass.Rules).
type RuleProxy struct {
	Namespace string
	// Selected are the names of the rules of Namespace whose workloadSelector matches the
	// proxy's labels; nil for a proxy no such rule selects.
	Selected []string
}

// ClassRuleProxy is the RuleProxy of a class.
func ClassRuleProxy(c collections.ProxyClass) RuleProxy {
	return RuleProxy{Namespace: c.Namespace, Selected: c.SelectedRules()}
}

// resolveEntry is ResolveDestinationRule's entry: the consolidated rule the proxy gets.
func resolveEntry(drs []collections.DestinationRule, proxy RuleProxy, svc *collections.ServiceInfo, rootNamespace string) *drEntry {
	if svc == nil || len(drs) == 0 {
		return nil
	}
	cands := ruleCandidates(drs, svc)
	if len(cands) == 0 {
		return nil
	}
	if local := localPool(cands, svc.Hostname, proxy.Namespace, rootNamespace); len(local) > 0 {
		return pickEntry(local, proxy)
	}
	for _, ns := range []string{svc.Namespace, rootNamespace} {
		if ns == "" {
			continue
		}
		entries := lookupPool(cands, svc.Hostname, ns, func(c drCandidate) bool { return !c.privateOnly() })
		entries = slices.DeleteFunc(entries, func(e *drEntry) bool { return !exportedTo(e.exportTo, proxy.Namespace) })
		if len(entries) > 0 {
			return pickEntry(entries, proxy)
		}
	}
	return nil
}

// ruleCandidates are the rules whose host covers the service, in istiod's order: rules with a
// workloadSelector first, then oldest first (sortConfigBySelectorAndCreationTime).
func ruleCandidates(drs []collections.DestinationRule, svc *collections.ServiceInfo) []drCandidate {
	domain := serviceDomain(svc)
	var cands []drCandidate
	for i := range drs {
		dr := &drs[i]
		h := resolveRuleHost(dr.Host, dr.Namespace, domain)
		if !ruleHostMatches(svc.Hostname, h) {
			continue
		}
		exportTo := exportSet(dr.ExportTo)
		if dr.WorkloadSelector != nil {
			exportTo = []string{"."} // never exported
		}
		cands = append(cands, drCandidate{dr: dr, host: h, exportTo: exportTo})
	}
	slices.SortStableFunc(cands, func(a, b drCandidate) int {
		if sa, sb := a.dr.WorkloadSelector != nil, b.dr.WorkloadSelector != nil; sa != sb {
			if sa {
				return -1
			}
			return 1
		}
		return transforms.CompareCreation(a.dr.CreationTime, b.dr.CreationTime, a.dr.Name, b.dr.Name, a.dr.Namespace, b.dr.Namespace)
	})
	return cands
}

// localPool is the pool of the proxy's own namespace: for a proxy in the root namespace, only
// the root namespace's rules exported to it alone.
func localPool(cands []drCandidate, hostname, proxyNamespace, rootNamespace string) []*drEntry {
	if proxyNamespace != rootNamespace {
		return lookupPool(cands, hostname, proxyNamespace, drCandidate.inLocalPool)
	}
	return lookupPool(cands, hostname, rootNamespace, drCandidate.privateOnly)
}

// pickEntry is SidecarScope.DestinationRule over the entries of the deciding pool.
func pickEntry(entries []*drEntry, proxy RuleProxy) *drEntry {
	var catchAll *drEntry
	for _, e := range entries {
		if e.rule.WorkloadSelector == nil {
			catchAll = e
			continue
		}
		if e.rule.Namespace == proxy.Namespace && slices.Contains(proxy.Selected, e.rule.Name) {
			return e
		}
	}
	return catchAll
}

// SelectorVariants are the rules of namespace ns with a workloadSelector that are an entry of
// their own in the pool deciding the rule of ns's proxies for svc: a proxy selected by one of them
// (the first, in Selected's order, that is one) gets that entry.
func SelectorVariants(drs []collections.DestinationRule, ns string, svc *collections.ServiceInfo, rootNamespace string) []*collections.DestinationRule {
	if svc == nil || !slices.ContainsFunc(drs, func(r collections.DestinationRule) bool { return r.WorkloadSelector != nil && r.Namespace == ns }) {
		return nil
	}
	var out []*collections.DestinationRule
	for _, e := range localPool(ruleCandidates(drs, svc), svc.Hostname, ns, rootNamespace) {
		if e.rule.WorkloadSelector != nil && e.rule.Namespace == ns {
			out = append(out, &e.rule)
		}
	}
	return out
}

type drCandidate struct {
	dr *collections.DestinationRule
	// host is the resolved host.
	host string
	// exportTo is the rule's exportTo as a sorted set.
	exportTo []string
}

// inLocalPool: istiod indexes the rule for proxies of its own namespace.
func (c drCandidate) inLocalPool() bool {
	return len(c.exportTo) == 0 || slices.Contains(c.exportTo, "*") || slices.Contains(c.exportTo, ".") ||
		slices.Contains(c.exportTo, c.dr.Namespace)
}

// privateOnly: the rule is exported to its own namespace only.
func (c drCandidate) privateOnly() bool {
	return len(c.exportTo) == 1 && (c.exportTo[0] == "." || c.exportTo[0] == c.dr.Namespace)
}

// exportedTo reports whether an exported rule is visible in namespace ns.
func exportedTo(exportTo []string, ns string) bool {
	return len(exportTo) == 0 || slices.Contains(exportTo, "*") || slices.Contains(exportTo, ns)
}

func exportSet(e []string) []string {
	if len(e) == 0 {
		return nil
	}
	return slices.Compact(slices.Sorted(slices.Values(e)))
}

// drEntry is one consolidated rule of a pool.
type drEntry struct {
	exportTo []string
	rule     collections.DestinationRule
}

// lookupPool returns the consolidated rules of namespace ns (restricted to those in the pool)
// for the most specific host matching hostname.
func lookupPool(cands []drCandidate, hostname, ns string, inPool func(drCandidate) bool) []*drEntry {
	var pool []drCandidate
	best := ""
	for _, c := range cands {
		if c.dr.Namespace != ns || !inPool(c) {
			continue
		}
		pool = append(pool, c)
		if best == "" || moreSpecificHost(c.host, best) {
			best = c.host
		}
	}
	var entries []*drEntry
	for _, c := range pool {
		if c.host != best {
			continue
		}
		appendSeparately := true
		for _, e := range entries {
			switch {
			case slices.Equal(c.exportTo, e.exportTo):
				appendSeparately = false
			case len(e.exportTo) > 0 && isSuperset(c.exportTo, e.exportTo):
				appendSeparately = true
			default:
				appendSeparately = true
				continue
			}
			with, existingWith := c.dr.WorkloadSelector != nil, e.rule.WorkloadSelector != nil
			switch {
			case with && existingWith && !maps.Equal(c.dr.WorkloadSelector, e.rule.WorkloadSelector):
				appendSeparately = true
				continue
			case with == existingWith:
				appendSeparately = false
			}
			mergeDestinationRule(&e.rule, c.dr)
		}
		if len(entries) == 0 || appendSeparately {
			rule := *c.dr
			rule.Host = c.host
			rule.Subsets = slices.Clip(rule.Subsets)
			entries = append(entries, &drEntry{exportTo: c.exportTo, rule: rule})
		}
	}
	return entries
}

func isSuperset(a, b []string) bool {
	for _, x := range b {
		if !slices.Contains(a, x) {
			return false
		}
	}
	return true
}

// mergeDestinationRule adds to merged the subsets of in whose names are new, and in's traffic
// policy if merged has none.
func mergeDestinationRule(merged, in *collections.DestinationRule) {
	for _, s := range in.Subsets {
		if !slices.ContainsFunc(merged.Subsets, func(m collections.Subset) bool { return m.Name == s.Name }) {
			merged.Subsets = append(merged.Subsets, s)
		}
	}
	if merged.Policy == nil && in.Policy != nil {
		merged.Policy, merged.PortPolicies = in.Policy, in.PortPolicies
	}
}

// serviceDomain is the cluster domain of a service's hostname <name>.<namespace>.svc.<domain>.
func serviceDomain(svc *collections.ServiceInfo) string {
	if d, ok := strings.CutPrefix(svc.Hostname, svc.Name+"."+svc.Namespace+".svc."); ok && d != "" {
		return d
	}
	if _, d, ok := strings.Cut(svc.Hostname, ".svc."); ok && d != "" {
		return d
	}
	return collections.DefaultDomain
}

// resolveRuleHost is istiod's ResolveShortnameToFQDN: a host without a dot (other than "*" or an
// IP address) is <host>.<namespace>.svc.<domain>.
func resolveRuleHost(host, namespace, domain string) string {
	if host == "" || host == "*" || strings.Contains(host, ".") {
		return host
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return host
	}
	return host + "." + namespace + ".svc." + domain
}

// ruleHostMatches reports whether a rule host (exact, "*" or "*suffix") covers a service hostname.
func ruleHostMatches(hostname, ruleHost string) bool {
	return host.Name(hostname).SubsetOf(host.Name(ruleHost))
}

// moreSpecificHost is istiod's host.MoreSpecific: exact hosts before wildcards, then longer
// first, then alphabetical.
func moreSpecificHost(a, b string) bool {
	return host.MoreSpecific(host.Name(a), host.Name(b))
}
