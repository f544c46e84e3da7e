package transforms

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/krteds/krteds/collections"
)

// KindDestinationRule is the Problem kind of DestinationRules.
const KindDestinationRule = "DestinationRule"

// ConvertDestinationRule copies the fields krteds honours out of a DestinationRule. A rule that
// istiod's validation (pkg/config/validation ValidateDestinationRule) rejects at admission is
// reported as ReasonInvalidDestinationRule and ignored as a whole (nil): such a rule cannot exist
// in a cluster with istiod's webhook. Validation covers the host, subsets (names, labels,
// duplicates), exportTo, workloadSelector, empty traffic policies, tunnel/proxyProtocol
// exclusivity, outlierDetection (percentages, durations, local-origin errors),
// localityLbSetting and zoneAwareLbSetting (all of istiod's rules) and port-level settings; it
// does not re-check the contents of connectionPool, tls, consistentHash, warmup, tunnel or
// proxyProtocol, which do not change EDS.
//
// A rule with a workloadSelector is converted, but reported as ReasonUnsupportedDestinationRule:
// ResolveDestinationRule does not select rules per workload and skips it.
func ConvertDestinationRule(dr *networkingclient.DestinationRule, report collections.Reporter) *collections.DestinationRule {
	if dr == nil {
		return nil
	}
	object := dr.Namespace + "/" + dr.Name
	spec := &dr.Spec
	if errs := validateDestinationRule(dr.Namespace, spec); len(errs) > 0 {
		reportProblem(report, collections.Problem{Kind: KindDestinationRule, Object: object,
			Reason: collections.ReasonInvalidDestinationRule, Detail: strings.Join(errs, "; ")})
		return nil
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
		reportProblem(report, collections.Problem{Kind: KindDestinationRule, Object: object,
			Reason: collections.ReasonUnsupportedDestinationRule,
			Detail: "workloadSelector: istiod applies the rule only to the selected workloads of its namespace; krteds applies it to no proxy"})
	}
	out.Policy, out.PortPolicies = convertTrafficPolicy(spec.TrafficPolicy)
	for _, s := range spec.Subsets {
		sub := collections.Subset{Name: s.GetName(), Labels: maps.Clone(s.GetLabels())}
		sub.Policy, sub.PortPolicies = convertTrafficPolicy(s.GetTrafficPolicy())
		out.Subsets = append(out.Subsets, sub)
	}
	return out
}

func reportProblem(report collections.Reporter, p collections.Problem) {
	if report != nil {
		report.Report(p)
	}
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
	}
	if lb != nil {
		tp.LoadBalancer = true
		if l := lb.LocalityLbSetting; l != nil {
			tp.Locality = convertLocalitySetting(l)
		} else if z := lb.ZoneAwareLbSetting; z != nil {
			tp.Locality = convertZoneAwareSetting(z)
		}
	}
	if tls != nil {
		tp.TLSMode = tls.Mode.String()
	}
	return tp
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
	out := &collections.LocalitySetting{ZoneAware: true, FailoverPriority: slices.Clone(z.FailoverPriority)}
	if z.Enabled != nil {
		v := z.Enabled.GetValue()
		out.Enabled = &v
	}
	for _, f := range z.Failover {
		out.Failover = append(out.Failover, collections.Failover{From: f.GetFrom(), To: f.GetTo()})
	}
	return out
}

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
// entries remain visible, the last one is used, as SidecarScope.DestinationRule does.
//
// The result is a new value whose Host is the resolved host; its policies are shared with the
// input and must not be modified. Rules with a workloadSelector are skipped (see
// ConvertDestinationRule), and the mesh's defaultDestinationRuleExportTo is taken to be "*"
// (istiod's default).
func ResolveDestinationRule(drs []collections.DestinationRule, proxyNamespace string, svc *collections.ServiceInfo, rootNamespace string) *collections.DestinationRule {
	if svc == nil || len(drs) == 0 {
		return nil
	}
	domain := serviceDomain(svc)
	var cands []drCandidate
	for i := range drs {
		dr := &drs[i]
		if dr.WorkloadSelector != nil {
			continue
		}
		h := resolveRuleHost(dr.Host, dr.Namespace, domain)
		if !ruleHostMatches(svc.Hostname, h) {
			continue
		}
		cands = append(cands, drCandidate{dr: dr, host: h, exportTo: exportSet(dr.ExportTo)})
	}
	if len(cands) == 0 {
		return nil
	}
	slices.SortStableFunc(cands, func(a, b drCandidate) int {
		return compareCreation(a.dr.CreationTime, b.dr.CreationTime, a.dr.Name, b.dr.Name, a.dr.Namespace, b.dr.Namespace)
	})

	var local []*drEntry
	if proxyNamespace != rootNamespace {
		local = lookupPool(cands, svc.Hostname, proxyNamespace, drCandidate.inLocalPool)
	} else {
		local = lookupPool(cands, svc.Hostname, rootNamespace, drCandidate.privateOnly)
	}
	if len(local) > 0 {
		return &local[len(local)-1].rule
	}
	for _, ns := range []string{svc.Namespace, rootNamespace} {
		if ns == "" {
			continue
		}
		entries := lookupPool(cands, svc.Hostname, ns, func(c drCandidate) bool { return !c.privateOnly() })
		entries = slices.DeleteFunc(entries, func(e *drEntry) bool { return !exportedTo(e.exportTo, proxyNamespace) })
		if len(entries) > 0 {
			return &entries[len(entries)-1].rule
		}
	}
	return nil
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
			case len(e.exportTo) > 0 && isSuperset(c.exportTo, e.exportTo):
			default:
				appendSeparately = true
				continue
			}
			appendSeparately = false
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
	if strings.HasPrefix(ruleHost, "*") {
		return strings.HasSuffix(hostname, ruleHost[1:])
	}
	return ruleHost == hostname
}

// moreSpecificHost is istiod's host.MoreSpecific: exact hosts before wildcards, then longer
// first, then alphabetical.
func moreSpecificHost(a, b string) bool {
	aw, bw := strings.HasPrefix(a, "*"), strings.HasPrefix(b, "*")
	if aw != bw {
		return !aw
	}
	if len(a) == len(b) {
		return a < b
	}
	return len(a) > len(b)
}

// EffectiveTrafficPolicy is the traffic policy of one cluster (port, subset) of a rule, merged
// as istiod's MergeSubsetTrafficPolicy: the rule's port-level policy for the port replaces the
// top-level one as a whole (fields it leaves unset are unset, not inherited); then the subset's
// policy (or, if it has one for the port, its port-level policy) overrides the fields it sets,
// and a subset port-level policy overrides all of them. subsetLabels are the subset's labels
// (nil when it has none); subsetFound is false when subset is not "" and the rule has no subset
// of that name (istiod then applies no label filter). The result may share pointers with dr.
func EffectiveTrafficPolicy(dr *collections.DestinationRule, port int32, subset string) (*collections.TrafficPolicy, map[string]string, bool) {
	if dr == nil {
		return nil, nil, subset == ""
	}
	policy := dr.Policy
	if pp, ok := dr.PortPolicies[uint32(port)]; ok && policy != nil {
		policy = pp
	}
	if subset == "" {
		return policy, nil, true
	}
	i := slices.IndexFunc(dr.Subsets, func(s collections.Subset) bool { return s.Name == subset })
	if i < 0 {
		return policy, nil, false
	}
	s := dr.Subsets[i]
	var labels map[string]string
	if len(s.Labels) > 0 {
		labels = s.Labels
	}
	sp, portLevel := s.Policy, false
	if pp, ok := s.PortPolicies[uint32(port)]; ok && sp != nil {
		sp, portLevel = pp, true
	}
	return mergeSubsetPolicy(policy, sp, portLevel), labels, true
}

func mergeSubsetPolicy(orig, sub *collections.TrafficPolicy, portLevel bool) *collections.TrafficPolicy {
	if sub == nil {
		return orig
	}
	if orig == nil {
		return sub
	}
	m := *orig
	if sub.OutlierDetection || portLevel {
		m.OutlierDetection, m.MinHealthPercent = sub.OutlierDetection, sub.MinHealthPercent
	}
	if sub.LoadBalancer || portLevel {
		m.LoadBalancer, m.Locality = sub.LoadBalancer, sub.Locality
	}
	if sub.TLSMode != "" || portLevel {
		m.TLSMode = sub.TLSMode
	}
	return &m
}

// Validation, following istiod's pkg/config/validation and pkg/config/labels.

const (
	dns1123LabelMaxLength  = 63
	dnsNamePrefixMaxLength = 253
	dns1123LabelFmt        = "[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?"
	wildcardPrefixFmt      = `(\*|(\*|\*-)?` + dns1123LabelFmt + `)`
	qualifiedNameFmt       = "(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
	dnsNamePrefixFmt       = dns1123LabelFmt + `(?:\.` + dns1123LabelFmt + `)*/`

	labelTopologyRegion  = collections.LabelTopologyRegion
	labelTopologyZone    = collections.LabelTopologyZone
	labelTopologySubzone = collections.LabelTopologySubzone
)

var (
	tagKeyRegexp         = regexp.MustCompile("^(" + dnsNamePrefixFmt + ")?(" + qualifiedNameFmt + ")$")
	labelValueRegexp     = regexp.MustCompile("^(" + qualifiedNameFmt + ")?$")
	dns1123LabelRegexp   = regexp.MustCompile("^" + dns1123LabelFmt + "$")
	wildcardPrefixRegexp = regexp.MustCompile("^" + wildcardPrefixFmt + "$")
)

func isDNS1123Label(v string) bool {
	return len(v) <= dns1123LabelMaxLength && dns1123LabelRegexp.MatchString(v)
}

func isWildcardDNS1123Label(v string) bool {
	return len(v) <= dns1123LabelMaxLength && wildcardPrefixRegexp.MatchString(v)
}

func validateDestinationRule(namespace string, spec *networking.DestinationRule) []string {
	var errs []string
	add := func(err error) {
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	add(validateWildcardDomain(spec.Host))
	errs = append(errs, validateTrafficPolicy(spec.TrafficPolicy)...)
	seen := map[string]bool{}
	for _, s := range spec.Subsets {
		if s == nil {
			errs = append(errs, "subset may not be null")
			continue
		}
		if seen[s.Name] {
			errs = append(errs, "duplicate subset names: "+s.Name)
		}
		seen[s.Name] = true
		switch {
		case s.Name == "":
			errs = append(errs, "subset name cannot be empty")
		case !isDNS1123Label(s.Name):
			errs = append(errs, "subset name is invalid: "+s.Name)
		}
		errs = append(errs, validateLabels(s.Labels)...)
		for _, e := range validateTrafficPolicy(s.TrafficPolicy) {
			errs = append(errs, "subset "+s.Name+": "+e)
		}
	}
	errs = append(errs, validateExportTo(namespace, spec.ExportTo, spec.GetWorkloadSelector() != nil)...)
	if sel := spec.GetWorkloadSelector(); sel != nil {
		errs = append(errs, validateSelectorLabels(sel.GetMatchLabels())...)
	}
	return errs
}

// validateWildcardDomain is istiod's ValidateWildcardDomain: a DNS name whose first label may be
// a wildcard ("*", "*foo", "*-foo").
func validateWildcardDomain(domain string) error {
	if len(domain) > 255 {
		return fmt.Errorf("domain name %q too long (max 255)", domain)
	}
	if domain == "" {
		return errors.New("empty domain name not allowed")
	}
	first, rest, hasRest := strings.Cut(domain, ".")
	if !isWildcardDNS1123Label(first) {
		return fmt.Errorf("domain name %q invalid (label %q invalid)", domain, first)
	}
	if hasRest {
		return validateDNS1123Labels(rest)
	}
	return nil
}

func validateDNS1123Labels(domain string) error {
	parts := strings.Split(domain, ".")
	tld := parts[len(parts)-1]
	if _, err := strconv.Atoi(tld); err == nil {
		return fmt.Errorf("domain name %q invalid (top level domain %q cannot be all-numeric)", domain, tld)
	}
	for i, label := range parts {
		if i == len(parts)-1 && label == "" {
			return nil
		}
		if !isDNS1123Label(label) {
			return fmt.Errorf("domain name %q invalid (label %q invalid)", domain, label)
		}
	}
	return nil
}

// validateLabels is istiod's labels.Instance.Validate: Kubernetes-style keys (an optional DNS
// prefix and a qualified name) and values (a qualified name or empty; istiod sets no length limit
// on values).
func validateLabels(labels map[string]string) []string {
	var errs []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if m := tagKeyRegexp.FindStringSubmatch(k); m == nil {
			errs = append(errs, fmt.Sprintf("invalid tag key: %q", k))
		} else if len(m[1]) > 0 && len(m[1])-1 > dnsNamePrefixMaxLength {
			errs = append(errs, fmt.Sprintf("invalid tag key: %q (DNS prefix is too long)", k))
		} else if len(m[2]) > dns1123LabelMaxLength {
			errs = append(errs, fmt.Sprintf("invalid tag key: %q (name is too long)", k))
		}
		if v := labels[k]; !labelValueRegexp.MatchString(v) {
			errs = append(errs, fmt.Sprintf("invalid tag value: %q", v))
		}
	}
	return errs
}

func validateSelectorLabels(labels map[string]string) []string {
	var errs []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		v := labels[k]
		if k == "" {
			errs = append(errs, fmt.Sprintf("empty key is not supported in selector: %q", k+"="+v))
		}
		if strings.Contains(k, "*") || strings.Contains(v, "*") {
			errs = append(errs, fmt.Sprintf("wildcard is not supported in selector: %q", k+"="+v))
		}
	}
	return errs
}

// validateExportTo is istiod's validateExportTo for configuration other than ServiceEntries.
func validateExportTo(namespace string, exportTo []string, withSelector bool) []string {
	if len(exportTo) == 0 {
		return nil
	}
	var errs []string
	set := map[string]bool{}
	for _, e := range exportTo {
		key := e
		if e == "." {
			key = namespace
		}
		switch {
		case set[key] && key != e:
			errs = append(errs, "duplicate entries in exportTo: . and current namespace "+namespace)
		case set[key]:
			errs = append(errs, "duplicate entries in exportTo for entry "+e)
		case key == "~":
			errs = append(errs, "exportTo ~ (none) is not allowed for Istio configuration objects")
		case key != "." && key != "*" && !isDNS1123Label(key):
			errs = append(errs, "only .,*, or a valid DNS 1123 label is allowed as exportTo entry")
		default:
			set[key] = true
		}
	}
	if withSelector && len(set) > 0 {
		if !set[namespace] {
			errs = append(errs, "destination rule with workload selector cannot have exportTo beyond current namespace")
		} else if len(set) > 1 {
			errs = append(errs, "destination rule with workload selector cannot have multiple entries in exportTo")
		}
	}
	if set["*"] && len(exportTo) > 1 {
		errs = append(errs, "cannot have both public (*) and non-public exportTo values for a resource")
	}
	return errs
}

func validateTrafficPolicy(p *networking.TrafficPolicy) []string {
	if p == nil {
		return nil
	}
	if p.OutlierDetection == nil && p.ConnectionPool == nil && p.LoadBalancer == nil && p.Tls == nil &&
		p.PortLevelSettings == nil && p.Tunnel == nil && p.ProxyProtocol == nil && p.RetryBudget == nil {
		return []string{"traffic policy must have at least one field"}
	}
	if p.Tunnel != nil && p.ProxyProtocol != nil {
		return []string{"tunnel and proxyProtocol must not be set together"}
	}
	errs := validateOutlierDetection(p.OutlierDetection)
	errs = append(errs, validateLoadBalancer(p.LoadBalancer)...)
	for _, pl := range p.PortLevelSettings {
		if pl == nil {
			errs = append(errs, "traffic policy may not be null")
			continue
		}
		if pl.Port == nil {
			errs = append(errs, "portTrafficPolicy must have valid port")
		}
		if pl.OutlierDetection == nil && pl.ConnectionPool == nil && pl.LoadBalancer == nil && pl.Tls == nil {
			errs = append(errs, "port traffic policy must have at least one field")
			continue
		}
		errs = append(errs, validateOutlierDetection(pl.OutlierDetection)...)
		errs = append(errs, validateLoadBalancer(pl.LoadBalancer)...)
	}
	return errs
}

func validateOutlierDetection(o *networking.OutlierDetection) []string {
	if o == nil {
		return nil
	}
	var errs []string
	if o.BaseEjectionTime != nil {
		if err := validateDuration(o.BaseEjectionTime); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if !o.SplitExternalLocalOriginErrors && o.ConsecutiveLocalOriginFailures.GetValue() > 0 {
		errs = append(errs, "outlier detection consecutive local origin failures is specified, but split external local origin errors is set to false")
	}
	if o.Interval != nil {
		if err := validateDuration(o.Interval); err != nil {
			errs = append(errs, err.Error())
		}
	}
	for _, v := range []int32{o.MaxEjectionPercent, o.MinHealthPercent} {
		if v < 0 || v > 100 {
			errs = append(errs, fmt.Sprintf("percentage %v is not in range 0..100", v))
		}
	}
	return errs
}

func validateDuration(d *durationpb.Duration) error {
	dur := d.AsDuration()
	if dur < time.Millisecond {
		return errors.New("duration must be greater than 1ms")
	}
	if dur%time.Millisecond != 0 {
		return errors.New("only durations to ms precision are supported")
	}
	return nil
}

func validateLoadBalancer(lb *networking.LoadBalancerSettings) []string {
	if lb == nil {
		return nil
	}
	var errs []string
	if lb.LocalityLbSetting != nil && lb.ZoneAwareLbSetting != nil {
		errs = append(errs, "only one of localityLbSetting and zoneAwareLbSetting can be set")
	}
	errs = append(errs, validateLocalityLbSetting(lb.LocalityLbSetting)...)
	errs = append(errs, validateZoneAwareLbSetting(lb.ZoneAwareLbSetting)...)
	return errs
}

// validateLocalityLbSetting is istiod's ValidateLocalityLbSetting (without its warning about
// failover lacking outlier detection). The keys of each distribute.to are checked in sorted
// order: istiod checks them in map order, so for overlapping patterns its verdict can change
// between attempts; in sorted order, a wildcard pattern comes before the patterns it covers,
// so every overlap is rejected.
func validateLocalityLbSetting(lb *networking.LocalityLoadBalancerSetting) []string {
	if lb == nil {
		return nil
	}
	if len(lb.Distribute) > 0 && len(lb.Failover) > 0 {
		return []string{"can not simultaneously specify 'distribute' and 'failover'"}
	}
	if len(lb.Failover) > 0 && len(lb.FailoverPriority) > 0 {
		for _, l := range lb.FailoverPriority {
			switch l {
			case labelTopologyRegion, labelTopologyZone, labelTopologySubzone:
				return []string{fmt.Sprintf("can not simultaneously set 'failover' and topology label '%s' in 'failover_priority'", l)}
			}
		}
	}
	var errs []string
	src := make([]string, 0, len(lb.Distribute))
	for _, d := range lb.Distribute {
		src = append(src, d.GetFrom())
		var total uint32
		to := slices.Sorted(maps.Keys(d.GetTo()))
		for _, loc := range to {
			w := d.GetTo()[loc]
			if w == 0 || w > 100 {
				return append(errs, "locality weight must be in range [1, 100]")
			}
			total += w
		}
		if total != 100 {
			return append(errs, fmt.Sprintf("total locality weight %v != 100", total))
		}
		if err := validateLocalities(to); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if err := validateLocalities(src); err != nil {
		errs = append(errs, err.Error())
	}
	for _, f := range lb.Failover {
		if f.GetFrom() == f.GetTo() {
			errs = append(errs, "locality lb failover settings must specify different regions")
		}
		if strings.Contains(f.GetFrom(), "/") || strings.Contains(f.GetTo(), "/") {
			errs = append(errs, "locality lb failover only specify region")
		}
		if strings.Contains(f.GetTo(), "*") || strings.Contains(f.GetFrom(), "*") {
			errs = append(errs, "locality lb failover region should not contain '*' wildcard")
		}
	}
	return errs
}

// validateZoneAwareLbSetting is istiod's ValidateZoneAwareLbSetting (without its warning).
func validateZoneAwareLbSetting(lb *networking.ZoneAwareLoadBalancerSetting) []string {
	if lb == nil {
		return nil
	}
	var errs []string
	for _, l := range lb.FailoverPriority {
		switch l {
		case labelTopologyRegion, labelTopologyZone, labelTopologySubzone:
			errs = append(errs, fmt.Sprintf("'failover_priority' for zone aware lb must not use topology label '%s'; region- and zone-level routing are handled automatically", l))
		}
	}
	for _, f := range lb.Failover {
		if f.GetFrom() == f.GetTo() {
			errs = append(errs, "zone aware lb failover settings must specify different regions")
		}
		if strings.Contains(f.GetFrom(), "/") || strings.Contains(f.GetTo(), "/") {
			errs = append(errs, "zone aware lb failover only specifies region; zone and subzone failover are handled automatically")
		}
		if strings.Contains(f.GetTo(), "*") || strings.Contains(f.GetFrom(), "*") {
			errs = append(errs, "zone aware lb failover region should not contain '*' wildcard")
		}
	}
	return errs
}

// validateLocalities is istiod's validateLocalities: at most one trailing '*', no empty
// segment, and no pattern overlapping an earlier one.
func validateLocalities(localities []string) error {
	type zones = map[string]map[string]bool
	seen := map[string]zones{}
	for _, loc := range localities {
		if n := strings.Count(loc, "*"); n > 0 && (n > 1 || !strings.HasSuffix(loc, "*")) {
			return fmt.Errorf("locality %s wildcard '*' number can not exceed 1 and must be in the end", loc)
		}
		if _, ok := seen["*"]; ok {
			return fmt.Errorf("locality %s overlap with previous specified ones", loc)
		}
		items := strings.SplitN(loc, "/", 3)
		if slices.Contains(items, "") {
			return fmt.Errorf("locality %s must not contain empty region/zone/subzone info", loc)
		}
		overlap := fmt.Errorf("locality %s overlap with previous specified ones", loc)
		region := items[0]
		switch len(items) {
		case 1:
			if _, ok := seen[region]; ok {
				return overlap
			}
			seen[region] = zones{"*": {"*": true}}
		case 2:
			zone := items[1]
			r, ok := seen[region]
			if !ok {
				seen[region] = zones{zone: {"*": true}}
				continue
			}
			if _, ok := r["*"]; ok {
				return overlap
			}
			if _, ok := r[zone]; ok {
				return overlap
			}
			r[zone] = map[string]bool{"*": true}
		default:
			zone, subzone := items[1], items[2]
			r, ok := seen[region]
			if !ok {
				seen[region] = zones{zone: {subzone: true}}
				continue
			}
			if _, ok := r["*"]; ok {
				return overlap
			}
			z, ok := r[zone]
			if !ok {
				r[zone] = map[string]bool{subzone: true}
				continue
			}
			if z["*"] || z[subzone] {
				return overlap
			}
			z[subzone] = true
		}
	}
	return nil
}

// compareCreation orders objects by creation time, then name, then namespace (istiod's
// configCompareByCreationTime).
func compareCreation(at, bt time.Time, an, bn, ans, bns string) int {
	return cmp.Or(at.Compare(bt), strings.Compare(an, bn), strings.Compare(ans, bns))
}
