package cds

import (
	"strconv"
	"strings"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/policy"
	"github.com/krteds/krteds/transforms/registry"
)

// Listeners builds the LDS resources of a service for proxyless gRPC clients: an api_listener per
// cluster port, named <fqdn>:<port>, routing through RDS to the port's cluster. The names a
// client may also dial a Kubernetes service by (<name>.<ns>:<port>, and <name>:<port> from the
// service's namespace) are resolved to it per request (ListenerAliasTarget, ListenerAlias), so
// the collection holds one listener per port.
func Listeners() transforms.Many[*collections.ServiceInfo, collections.ResourceSet] {
	return transforms.Many[*collections.ServiceInfo, collections.ResourceSet]{Fn: func(_ krt.HandlerContext, svc *collections.ServiceInfo) []collections.ResourceSet {
		var out []collections.ResourceSet
		for _, p := range registry.ClusterPorts(svc) {
			name := svc.Hostname + ":" + strconv.Itoa(int(p.Port))
			l, err := APIListener(name, transforms.ClusterName(p.Port, "", svc.Hostname))
			if err != nil {
				out = append(out, failedResource(svc, p.Port, name, name, transforms.TypeListener, err))
				continue
			}
			out = appendResource(out, svc, p.Port, name, name, transforms.TypeListener, l)
		}
		return out
	}}
}

// ListenerAliasTarget is, for a listener name a client in namespace may dial a Kubernetes
// service by, the name of the service's listener and the service's key: "<name>.<ns>:<port>"
// and "<name>:<port>" (the client's namespace) stand for "<name>.<ns>.svc.<domain>:<port>". ok
// is false for any other name.
func ListenerAliasTarget(alias, namespace, domain string) (target, service string, ok bool) {
	i := strings.LastIndexByte(alias, ':')
	if i <= 0 {
		return "", "", false
	}
	host, port := alias[:i], alias[i+1:]
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || strconv.Itoa(p) != port {
		return "", "", false
	}
	name, ns, qualified := strings.Cut(host, ".")
	switch {
	case !qualified:
		ns = namespace
	case strings.Contains(ns, "."):
		return "", "", false
	}
	if name == "" || ns == "" {
		return "", "", false
	}
	return registry.ServiceHostname(name, ns, domain) + ":" + port, ns + "/" + name, true
}

// ListenerAliases are the alias names of a Kubernetes service port's listener set (none for a
// ServiceEntry host's): the names whose resolution changes with it.
func ListenerAliases(set *collections.ResourceSet) []string {
	ns, name, _ := strings.Cut(set.Service, "/")
	// A Kubernetes Service's name has no dot; a ServiceEntry host always has one.
	kube := ns != "" && name != "" && !strings.Contains(name, ".")
	i := strings.LastIndexByte(set.Name, ':')
	if !kube || i <= 0 {
		return nil
	}
	port := set.Name[i:]
	return []string{name + "." + ns + port, name + port}
}

// ListenerAlias is a service port's listener (r, named "<fqdn>:<port>") under another name a
// client dialed it by: the same listener, named (and stat-prefixed) alias; nil if r is not such
// a listener.
func ListenerAlias(r *collections.Resource, alias string) *collections.Resource {
	i := strings.LastIndexByte(r.Name, ':')
	if i <= 0 {
		return nil
	}
	port, err := strconv.Atoi(r.Name[i+1:])
	if err != nil || port < 1 || port > 65535 {
		return nil
	}
	l, err := APIListener(alias, transforms.ClusterName(int32(port), "", r.Name[:i]))
	if err != nil {
		return nil
	}
	out, err := transforms.Marshal(alias, transforms.TypeListener, l)
	if err != nil {
		return nil
	}
	return out
}

// APIListener is a gRPC client listener: an HTTP connection manager whose routes come over ADS
// and whose last (only) filter is the router.
func APIListener(name, routeName string) (*listener.Listener, error) {
	routerAny, err := anypb.New(&router.Router{})
	if err != nil {
		return nil, err
	}
	m, err := anypb.New(&hcm.HttpConnectionManager{
		StatPrefix: name,
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			ConfigSource:    transforms.ADSConfigSource(),
			RouteConfigName: routeName,
		}},
		HttpFilters: []*hcm.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: routerAny},
		}},
	})
	if err != nil {
		return nil, err
	}
	return &listener.Listener{Name: name, ApiListener: &listener.ApiListener{ApiListener: m}}, nil
}

// Routes builds the RDS resources of a service: per cluster port, a route configuration named
// like the cluster that sends everything to it, hashing requests by the header the
// DestinationRule's consistentHash names (httpHeaderName), as istiod's default route does. Which
// rule applies depends on the proxy, as for clusters: the variants are keyed as the gRPC
// clusters' (ClusterKey, SelectorClusterKey), a namespace's only where it differs.
func Routes(rootNamespace string, policies krt.Collection[collections.ServicePolicy]) transforms.Many[*collections.ServiceInfo, collections.ResourceSet] {
	return transforms.Many[*collections.ServiceInfo, collections.ResourceSet]{Reads: []any{policies}, Fn: func(ctx krt.HandlerContext, svc *collections.ServiceInfo) []collections.ResourceSet {
		var out []collections.ResourceSet
		sp := krt.FetchOne(ctx, policies, krt.FilterKey(svc.ResourceName()))
		variants := clusterVariants(svc, sp, rootNamespace)
		for _, p := range registry.ClusterPorts(svc) {
			name := transforms.ClusterName(p.Port, "", svc.Hostname)
			vhost := svc.Hostname + ":" + strconv.Itoa(int(p.Port))
			header := hashHeader(variants[0].rule, p.Port)
			out = appendResource(out, svc, p.Port, name, name, transforms.TypeRoute, RouteTo(name, vhost, header))
			for _, v := range variants[1:] {
				h := hashHeader(v.rule, p.Port)
				switch {
				case v.selector != "":
					out = appendResource(out, svc, p.Port, SelectorClusterKey(v.namespace, v.selector, name, true), name, transforms.TypeRoute, RouteTo(name, vhost, h))
				case h != header:
					out = appendResource(out, svc, p.Port, ClusterKey(v.namespace, name, true), name, transforms.TypeRoute, RouteTo(name, vhost, h))
				}
			}
		}
		return out
	}}
}

// hashHeader is the request header a rule's consistent hash reads for a port's cluster ("" for
// none).
func hashHeader(rule *collections.DestinationRule, port int32) string {
	tp, _, _ := policy.EffectiveTrafficPolicy(rule, port, "")
	if tp == nil || tp.Algorithm == nil || tp.Algorithm.ConsistentHash == "" {
		return ""
	}
	return tp.Algorithm.HashHeader
}

// RouteTo is a route configuration with one catch-all virtual host routing to cluster, hashing
// requests by header when it is not "".
func RouteTo(clusterName, vhost, header string) *route.RouteConfiguration {
	action := &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: clusterName}}
	if header != "" {
		action.HashPolicy = []*route.RouteAction_HashPolicy{{
			PolicySpecifier: &route.RouteAction_HashPolicy_Header_{Header: &route.RouteAction_HashPolicy_Header{HeaderName: header}},
		}}
	}
	return &route.RouteConfiguration{
		Name: clusterName,
		VirtualHosts: []*route.VirtualHost{{
			Name:    vhost,
			Domains: []string{"*"},
			Routes: []*route.Route{{
				Match:  &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
				Action: &route.Route_Route{Route: action},
			}},
		}},
	}
}

// appendResource marshals a resource of a port of svc shared by every proxy that sees it.
func appendResource(out []collections.ResourceSet, svc *collections.ServiceInfo, port int32, key, name, typeURL string, m proto.Message) []collections.ResourceSet {
	r, err := transforms.Marshal(name, typeURL, m)
	if err != nil {
		return append(out, failedResource(svc, port, key, name, typeURL, err))
	}
	return append(out, collections.ResourceSet{Key: policy.SetKey(svc, key), Name: name, TypeURL: typeURL, Service: svc.ResourceName(),
		Visibility: svc.PortVisibility(port), Shared: r})
}

// failedResource is the set of a resource of a port of svc that could not be built: no
// resource, and why.
func failedResource(svc *collections.ServiceInfo, port int32, key, name, typeURL string, err error) collections.ResourceSet {
	return collections.ResourceSet{Key: policy.SetKey(svc, key), Name: name, TypeURL: typeURL, Service: svc.ResourceName(), Visibility: svc.PortVisibility(port),
		Problems: []collections.Problem{{Kind: "Service", Object: svc.ResourceName(), Reason: collections.ReasonMarshalFailed, Detail: err.Error()}}}
}

// problemKey is the one key of the index of resource sets with problems.
const problemKey = "problems"

// withProblems is the extractor of an index of resource sets by problemKey: only sets that kept
// a resource out are indexed, so the index costs nothing for the others.
func withProblems(s collections.ResourceSet) []string {
	if len(s.Problems) == 0 {
		return nil
	}
	return []string{problemKey}
}

// ResourceProblems lists what kept resources out of the sets, keyed by the set. It reads each
// collection through an index of its sets with problems: it is recomputed only when a set gains
// or loses a problem, and holds nothing for the sets without one.
func ResourceProblems(sets ...krt.Collection[collections.ResourceSet]) transforms.Many[struct{}, collections.ObjectProblems] {
	reads := make([]any, len(sets))
	indexes := make([]krt.Index[string, collections.ResourceSet], len(sets))
	for i, s := range sets {
		reads[i] = s
		indexes[i] = krt.NewIndex(s, "problems", withProblems)
	}
	return transforms.Many[struct{}, collections.ObjectProblems]{Reads: reads, Fn: func(ctx krt.HandlerContext, _ struct{}) []collections.ObjectProblems {
		var out []collections.ObjectProblems
		for _, idx := range indexes {
			for _, s := range idx.Fetch(ctx, problemKey) {
				out = append(out, collections.ObjectProblems{Kind: s.TypeURL, Object: s.Key, Problems: s.Problems})
			}
		}
		return out
	}}
}
