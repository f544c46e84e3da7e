// Package cds derives the small CDS, LDS and RDS that let a client bootstrap from krteds alone:
// each service port's clusters (EDS over ADS, in the variants the DestinationRules call for, or
// DNS clusters carrying their endpoints), and the API listeners and routes proxyless gRPC clients
// ask for.
package cds

import (
	"bytes"
	"slices"
	"strings"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/eds"
	"github.com/krteds/krteds/transforms/policy"
	"github.com/krteds/krteds/transforms/registry"
)

// CDS: the clusters of a service as istiod builds them for the DestinationRule that applies to
// the proxy, one form for Envoy (istiod's ClusterBuilder, pilot/pkg/networking/core) and one for
// proxyless gRPC clients (istiod's grpcgen). Only what decides which endpoint gets a request is
// carried: the load-balancing policy, locality and zone-aware configuration, outlier detection
// and the panic threshold; no TLS, connection pool, metadata or stats names.
//
// Which rule applies depends on the proxy's namespace, and only on whether the namespace is one
// the rules name (a rule's own namespace, an exportTo entry, the root namespace): every other
// namespace resolves to the same rule; and on the rules with a workloadSelector of its namespace
// that select it. So a service's clusters come in a few variants, each a resource set of its
// own, keyed by ClusterKey and SelectorClusterKey:
//
//	<name>                  Envoy, proxies of any namespace without a variant of its own
//	<ns>/<name>             Envoy, proxies of namespace ns (only where it differs)
//	grpc~<name>             gRPC, any namespace (only where it differs from <name>)
//	grpc~<ns>/<name>        gRPC, namespace ns (only where it differs from what grpc~<name> resolves to)
//	<ns>#<rule>/<name>      Envoy, proxies of ns that rule (with a workloadSelector) selects
//	grpc~<ns>#<rule>/<name> gRPC, the same
//
// ResolveClusterSet and ClusterVariantRank pick a proxy's variant. No variant depends on anything
// but the service and its rules, so the clusters never wait for the connected proxies.

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

// SelectorClusterKey is the key of a cluster's variant for the proxies of a namespace that the
// DestinationRule of that namespace named rule (one with a workloadSelector) selects.
func SelectorClusterKey(namespace, rule, name string, grpc bool) string {
	return ClusterKey(namespace+"#"+rule, name, grpc)
}

// ResolveClusterSet finds the variant of cluster name for a proxy of a namespace and kind, which
// the rules selected select (View.Rules, in order): the first SelectorClusterKey of a rule
// selected, then the most specific of ClusterKey(namespace, name, grpc), then (gRPC)
// ClusterKey("", name, true), then the Envoy default, name.
func ResolveClusterSet(get func(key string) *collections.ResourceSet, namespace string, selected []string, name string, grpc bool) *collections.ResourceSet {
	for _, rule := range selected {
		if s := get(SelectorClusterKey(namespace, rule, name, grpc)); s != nil {
			return s
		}
	}
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

// ClusterVariantRank says how a cluster set serves a proxy of a namespace and kind that the
// rules selected select: 0 not at all, 1 as the default for its name, higher as a more specific
// variant (the highest wins), following ResolveClusterSet's order.
func ClusterVariantRank(key, name, namespace string, selected []string, grpc bool) int {
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
	if ns, rule, sel := strings.Cut(ns, "#"); sel {
		i := slices.Index(selected, rule)
		if !ok || ns != namespace || n != name || i < 0 || isGRPC != grpc {
			return 0
		}
		return 4 + len(selected) - i // the first selected rule's variant wins
	}
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
	// PeerAuthn decide the mTLS of a DNS cluster's endpoints, as of an EDS cluster's.
	PeerAuthn policy.PeerAuthnInputs
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
func ClustersFor(in ClusterInputs) transforms.Many[*collections.ServiceInfo, collections.ResourceSet] {
	reads := []any{in.Policies, in.Endpoints}
	if in.PeerAuthn.ByNamespace != nil {
		reads = append(reads, in.PeerAuthn.ByNamespace)
	}
	return transforms.Many[*collections.ServiceInfo, collections.ResourceSet]{Reads: reads, Fn: func(ctx krt.HandlerContext, svc *collections.ServiceInfo) []collections.ResourceSet {
		ports := registry.ClusterPorts(svc)
		if len(ports) == 0 {
			return nil
		}
		sp := krt.FetchOne(ctx, in.Policies, krt.FilterKey(svc.ResourceName()))
		subsets := append([]string{""}, sp.Subsets()...)
		variants := clusterVariants(svc, sp, in.RootNamespace)
		var dns func(port collections.ServicePort, subset string, proxy policy.RuleProxy) *endpoint.ClusterLoadAssignment
		if svc.Resolution.IsDNS() {
			var eps []*collections.Endpoint
			if se := krt.FetchOne(ctx, in.Endpoints, krt.FilterKey(svc.ResourceName())); se != nil {
				eps = se.Endpoints
			}
			peer := in.PeerAuthn.Fetch(ctx, eps)
			dns = func(port collections.ServicePort, subset string, proxy policy.RuleProxy) *endpoint.ClusterLoadAssignment {
				name := transforms.ClusterName(port.Port, subset, svc.Hostname)
				cp := eds.ClusterPolicyFor(svc, sp, in.RootNamespace, proxy, port.Port, subset)
				cp.Peer = peer
				plan := eds.PlanDNSLoadAssignment(name, svc, port, eps, cp)
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

// clusterVariant is the rule proxies of a namespace get ("": every namespace the rules do not
// name), or, with selector set, the proxies of that namespace the rule of that name selects.
type clusterVariant struct {
	namespace string
	selector  string
	rule      *collections.DestinationRule
}

// proxy is the RuleProxy the variant stands for.
func (v clusterVariant) proxy() policy.RuleProxy {
	p := policy.RuleProxy{Namespace: v.namespace}
	if v.selector != "" {
		p.Selected = []string{v.selector}
	}
	return p
}

// clusterVariants resolves the rule of every namespace whose proxies may get a different one,
// and of every rule with a workloadSelector that is an entry of its own for the service: only
// needed when some rule sets something a cluster carries.
func clusterVariants(svc *collections.ServiceInfo, sp *collections.ServicePolicy, rootNamespace string) []clusterVariant {
	if sp == nil || !slices.ContainsFunc(sp.Rules, ruleHasClusterSettings) {
		return []clusterVariant{{}}
	}
	// "" is no rule's namespace nor in any exportTo: it stands for every namespace that is not.
	out := []clusterVariant{{rule: policy.ResolveDestinationRule(sp.Rules, policy.RuleProxy{}, svc, rootNamespace)}}
	for _, ns := range ruleNamespaces(sp.Rules, rootNamespace) {
		out = append(out, clusterVariant{namespace: ns, rule: policy.ResolveDestinationRule(sp.Rules, policy.RuleProxy{Namespace: ns}, svc, rootNamespace)})
		for _, r := range policy.SelectorVariants(sp.Rules, ns, svc, rootNamespace) {
			out = append(out, clusterVariant{namespace: ns, selector: r.Name, rule: r})
		}
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
	variants []clusterVariant, dns func(port collections.ServicePort, subset string, proxy policy.RuleProxy) *endpoint.ClusterLoadAssignment, lrs bool,
) []collections.ResourceSet {
	port := servicePort.Port
	name := transforms.ClusterName(port, subset, svc.Hostname)
	type built struct {
		r        *collections.Resource
		problems []collections.Problem
	}
	// add appends the set of key unless it is what inherit (nil: nothing) already serves.
	add := func(key string, m proto.Message, problems []collections.Problem, inherit *built) *built {
		r, err := transforms.Marshal(name, transforms.TypeCluster, m)
		if err != nil {
			set := failedResource(svc, port, key, name, transforms.TypeCluster, err)
			set.Problems = append(set.Problems, problems...)
			out = append(out, set)
			return &built{problems: set.Problems}
		}
		if inherit != nil && inherit.r != nil && bytes.Equal(r.Body, inherit.r.Body) && slices.Equal(problems, inherit.problems) {
			return inherit
		}
		out = append(out, collections.ResourceSet{Key: policy.SetKey(svc, key), Name: name, TypeURL: transforms.TypeCluster, Service: svc.ResourceName(),
			Visibility: svc.PortVisibility(port), Shared: r, Problems: problems})
		return &built{r, problems}
	}
	var envoyDefault, grpcDefault *built
	for i, v := range variants {
		cs := ClusterSettingsFor(svc, v.rule, port, subset)
		cs.LRS = lrs
		if dns != nil {
			if cs.LoadAssignment = dns(servicePort, subset, v.proxy()); cs.LoadAssignment == nil {
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
		if v.selector != "" {
			// Always sent: a proxy without it would fall back to its namespace's variant.
			add(SelectorClusterKey(v.namespace, v.selector, name, false), envoy, envoyProblems, nil)
			add(SelectorClusterKey(v.namespace, v.selector, name, true), grpc, grpcProblems, nil)
			continue
		}
		add(ClusterKey(v.namespace, name, false), envoy, envoyProblems, envoyDefault)
		add(ClusterKey(v.namespace, name, true), grpc, grpcProblems, grpcDefault)
	}
	return out
}
