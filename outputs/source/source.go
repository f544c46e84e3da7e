// Package source is the graph as the xDS server sees it, its xds.Source: proxies go in
// (Connect, Disconnect), and every answer is a lookup in the collections that computed it. Which
// bytes a proxy gets for a name is decided by the same transform that built them (a ResourceSet
// holds the resource per proxy class), and which names a proxy sees by its View; nothing is
// recomputed per request. Package graphs wires the collections; this package only reads them.
package source

import (
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/outputs/xds"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/cds"
	"github.com/krteds/krteds/transforms/eds"
	"github.com/krteds/krteds/transforms/policy"
)

// Source is a graph as the xDS server's Source (and its CollectionSource, for LEDS): it holds
// nothing of its own but the resources it makes per request (emptyCLAs).
type Source struct {
	g     *graphs.Graph
	empty *emptyCLAs
	// domain is the cluster DNS domain the graph was built with (short listener names).
	domain string
}

var (
	_ xds.Source           = (*Source)(nil)
	_ xds.CollectionSource = (*Source)(nil)
)

// New serves g: the xDS server reads it through the Source returned.
func New(g *graphs.Graph) *Source {
	return &Source{g: g, empty: newEmptyCLAs(), domain: g.Config().Domain}
}

// Graph is the graph served.
func (s *Source) Graph() *graphs.Graph { return s.g }

// WaitUntilSynced blocks until every collection of the graph has synced or stop is closed.
func (s *Source) WaitUntilSynced(stop <-chan struct{}) bool { return s.g.WaitUntilSynced(stop) }

// Connect makes a connected proxy an input of the graph.
func (s *Source) Connect(p collections.ConnectedProxy) { s.g.ConnectedProxies.UpdateObject(p) }

// Disconnect removes a proxy from the graph.
func (s *Source) Disconnect(connID string) { s.g.ConnectedProxies.DeleteObject(connID) }

// View is the view of a connected proxy; nil until the graph has computed it.
func (s *Source) View(connID string) *collections.View {
	p := s.g.Proxies.GetKey(connID)
	if p == nil {
		return nil
	}
	return &p.View
}

// resourcesOf is the collection of resource sets of a type.
func (s *Source) resourcesOf(typeURL string) krt.Collection[collections.ResourceSet] {
	switch typeURL {
	case transforms.TypeCLA:
		return s.g.CLAs
	case transforms.TypeCluster:
		return s.g.Clusters
	case transforms.TypeListener:
		return s.g.Listeners
	case transforms.TypeRoute:
		return s.g.Routes
	}
	return nil
}

// Resolve returns the resource a proxy of view v is sent for name. A ClusterLoadAssignment always
// resolves, as istiod's: an unknown cluster, or one the proxy cannot see, gets an empty one; the
// cluster of a subset no DestinationRule defines gets the port's CLA for that case
// (eds.UnknownSubset), named for the cluster asked for;
// pending is true while the CLA of the proxy's class is being computed. Other types resolve to nil
// when the proxy has no such resource. Listeners are served to proxyless gRPC clients only, by
// their fully qualified name or, for a Kubernetes service, by "<name>.<ns>:<port>" and, in the
// client's namespace, "<name>:<port>" (built for the name asked for). A cluster is the
// variant for the proxy's namespace and kind (cds.ResolveClusterSet).
func (s *Source) Resolve(v *collections.View, typeURL, name string) (r *collections.Resource, pending bool) {
	c := s.resourcesOf(typeURL)
	if c == nil || (typeURL == transforms.TypeListener && !v.GRPC) {
		return nil, false
	}
	set, alias := s.lookup(c, v, typeURL, name)
	if set == nil || !policy.Visible(set.Visibility, v.Namespace, v.Egress) {
		if typeURL == transforms.TypeCLA {
			return s.empty.get(name), false
		}
		return nil, false
	}
	r = set.For(v.ClassKey)
	if r == nil {
		return nil, true
	}
	if typeURL == transforms.TypeCLA && r.Name != name {
		// An unknown subset's CLA, built under the port cluster's name.
		return s.empty.relabel(r, name, eds.RelabelCLA), false
	}
	if alias {
		// nil (no such listener) if r is not a service port's listener, which it always is.
		return s.empty.relabel(r, name, cds.ListenerAlias), false
	}
	return r, false
}

// lookup finds the set serving name to a proxy of view v (Resolve). A name of a hostname that
// ServiceEntries of several namespaces define is looked up among the sets of the namespace
// policy.PickHostNamespace picks for the view; the rest by name as they are. alias says the
// set was found for a short listener name.
func (s *Source) lookup(c krt.Collection[collections.ResourceSet], v *collections.View, typeURL, name string) (set *collections.ResourceSet, alias bool) {
	owner, picked := "", false
	get := func(key string) *collections.ResourceSet {
		if s := c.GetKey(key); s != nil {
			return s
		}
		if !picked {
			owner, picked = s.hostOwner(v, typeURL, name), true
		}
		if owner == "" {
			return nil
		}
		return c.GetKey(policy.OwnedKey(owner, key))
	}
	switch typeURL {
	case transforms.TypeCluster:
		set = cds.ResolveClusterSet(get, v.Namespace, v.Rules, name, v.GRPC)
	case transforms.TypeRoute:
		// Routes are served to gRPC clients, in their rule's variant (cds.Routes).
		set = cds.ResolveClusterSet(get, v.Namespace, v.Rules, name, true)
	case transforms.TypeListener:
		if set = get(name); set == nil {
			// A short name of a Kubernetes service: its listener, named as asked.
			if target, svc, ok := cds.ListenerAliasTarget(name, v.Namespace, s.domain); ok {
				if set = c.GetKey(target); set != nil && set.Service != svc {
					set = nil
				}
				alias = true
			}
		}
	default:
		set = get(name)
		if set == nil && typeURL == transforms.TypeCLA {
			// A subset no DestinationRule defines: istiod sends the port's endpoints unfiltered.
			if key := eds.UnknownSubsetKey(name); key != "" {
				set = get(key)
			}
		}
	}
	return set, alias
}

// Holds reports whether some view is sent this version of the resource of a type and name now:
// the version of the name's set (any class's). The empty CLA of a name nothing serves is held
// by nobody: a client saying it holds one is not resuming anything the server computed.
func (s *Source) Holds(typeURL, name string, version uint64) bool {
	c := s.resourcesOf(typeURL)
	if c == nil {
		return false
	}
	holds := func(set *collections.ResourceSet) bool {
		if set.Shared != nil {
			return set.Shared.Version == version
		}
		for _, r := range set.ByClass {
			if r.Version == version {
				return true
			}
		}
		return false
	}
	if set := c.GetKey(name); set != nil {
		return holds(set)
	}
	// A shared host: any namespace's set of the name.
	for _, svc := range s.g.SharedHost(policy.HostOfName(typeURL, name)) {
		if set := c.GetKey(policy.OwnedKey(svc.Namespace, name)); set != nil && holds(set) {
			return true
		}
	}
	return false
}

// Follows is the name whose changes may change the resource of a name: for the cluster of a
// subset, the set of the subsets no DestinationRule defines, which serves it while none does.
func (s *Source) Follows(typeURL, name string) string {
	if typeURL != transforms.TypeCLA {
		return ""
	}
	return eds.UnknownSubsetKey(name)
}
