package graphs

import (
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"

	"github.com/krteds/krteds/transforms/cds"
	"github.com/krteds/krteds/transforms/eds"
	"github.com/krteds/krteds/transforms/policy"
)

// The graph as the xDS server sees it: proxies go in (Connect, Disconnect), and every answer
// is a lookup in the collections that computed it. Which bytes a proxy gets for a name is decided
// by the same transform that built them (a ResourceSet holds the resource per proxy class), and
// which names a proxy sees by its View; nothing is recomputed per request.

// Connect makes a connected proxy an input of the graph.
func (g *Graph) Connect(p collections.ConnectedProxy) { g.ConnectedProxies.UpdateObject(p) }

// Disconnect removes a proxy from the graph.
func (g *Graph) Disconnect(connID string) { g.ConnectedProxies.DeleteObject(connID) }

// View is the view of a connected proxy; nil until the graph has computed it.
func (g *Graph) View(connID string) *collections.View {
	p := g.Proxies.GetKey(connID)
	if p == nil {
		return nil
	}
	return &p.View
}

// resourcesOf is the collection of resource sets of a type.
func (g *Graph) resourcesOf(typeURL string) krt.Collection[collections.ResourceSet] {
	switch typeURL {
	case transforms.TypeCLA:
		return g.CLAs
	case transforms.TypeCluster:
		return g.Clusters
	case transforms.TypeListener:
		return g.Listeners
	case transforms.TypeRoute:
		return g.Routes
	}
	return nil
}

// Resolve returns the resource a proxy of view v is sent for name. A ClusterLoadAssignment always
// resolves, as istiod's: an unknown cluster, or one the proxy cannot see, gets an empty one; the
// cluster of a subset no DestinationRule defines gets the port's CLA for that case
// (transforms.UnknownSubset), named for the cluster asked for;
// pending is true while the CLA of the proxy's class is being computed. Other types resolve to nil
// when the proxy has no such resource. Listeners are served to proxyless gRPC clients only, by
// their fully qualified name or, for a Kubernetes service, by "<name>.<ns>:<port>" and, in the
// client's namespace, "<name>:<port>" (built for the name asked for). A cluster is the
// variant for the proxy's namespace and kind (transforms.ResolveClusterSet).
func (g *Graph) Resolve(v *collections.View, typeURL, name string) (r *collections.Resource, pending bool) {
	c := g.resourcesOf(typeURL)
	if c == nil || (typeURL == transforms.TypeListener && !v.GRPC) {
		return nil, false
	}
	set, alias := g.lookup(c, v, typeURL, name)
	if set == nil || !policy.Visible(set.Visibility, v.Namespace, v.Egress) {
		if typeURL == transforms.TypeCLA {
			return g.empty.get(name), false
		}
		return nil, false
	}
	r = set.For(v.ClassKey)
	if r == nil {
		return nil, true
	}
	if typeURL == transforms.TypeCLA && r.Name != name {
		// An unknown subset's CLA, built under the port cluster's name.
		return g.empty.relabel(r, name, eds.RelabelCLA), false
	}
	if alias {
		// nil (no such listener) if r is not a service port's listener, which it always is.
		return g.empty.relabel(r, name, cds.ListenerAlias), false
	}
	return r, false
}

// lookup finds the set serving name to a proxy of view v (Resolve). A name of a hostname that
// ServiceEntries of several namespaces define is looked up among the sets of the namespace
// transforms.PickHostNamespace picks for the view; the rest by name as they are. alias says the
// set was found for a short listener name.
func (g *Graph) lookup(c krt.Collection[collections.ResourceSet], v *collections.View, typeURL, name string) (set *collections.ResourceSet, alias bool) {
	owner, picked := "", false
	get := func(key string) *collections.ResourceSet {
		if s := c.GetKey(key); s != nil {
			return s
		}
		if !picked {
			owner, picked = g.hostOwner(v, typeURL, name), true
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
		// Routes are served to gRPC clients, in their rule's variant (transforms.Routes).
		set = cds.ResolveClusterSet(get, v.Namespace, v.Rules, name, true)
	case transforms.TypeListener:
		if set = get(name); set == nil {
			// A short name of a Kubernetes service: its listener, named as asked.
			if target, svc, ok := cds.ListenerAliasTarget(name, v.Namespace, g.config.Domain); ok {
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
func (g *Graph) Holds(typeURL, name string, version uint64) bool {
	c := g.resourcesOf(typeURL)
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
	for _, svc := range g.sharedHost(policy.HostOfName(typeURL, name)) {
		if set := c.GetKey(policy.OwnedKey(svc.Namespace, name)); set != nil && holds(set) {
			return true
		}
	}
	return false
}

// Follows is the name whose changes may change the resource of a name: for the cluster of a
// subset, the set of the subsets no DestinationRule defines, which serves it while none does.
func (g *Graph) Follows(typeURL, name string) string {
	if typeURL != transforms.TypeCLA {
		return ""
	}
	return eds.UnknownSubsetKey(name)
}

// List returns every resource of a type a proxy of view v sees, for wildcard subscriptions:
// the clusters, each in the variant for the proxy's namespace and kind; the listeners, by fully
// qualified name, for gRPC clients.
func (g *Graph) List(v *collections.View, typeURL string) []*collections.Resource {
	switch {
	case typeURL == transforms.TypeCluster:
		return g.listClusters(v)
	case typeURL != transforms.TypeListener || !v.GRPC:
		return nil
	}
	var out []*collections.Resource
	picks := map[string]string{}
	for _, set := range g.Listeners.List() {
		if _, key := policy.SplitSetKey(set.Key); key != set.Name || !policy.Visible(set.Visibility, v.Namespace, v.Egress) ||
			!g.servesView(&set, v, picks) {
			continue
		}
		if r := set.For(v.ClassKey); r != nil {
			out = append(out, r)
		}
	}
	return out
}

// listClusters lists one variant per cluster name: the most specific for the view
// (transforms.ClusterVariantRank). Variants are rare, so they are only remembered once seen.
func (g *Graph) listClusters(v *collections.View) []*collections.Resource {
	type pick struct {
		rank int
		r    *collections.Resource
	}
	var (
		out    []*collections.Resource
		better map[string]pick
	)
	picks := map[string]string{}
	for _, set := range g.Clusters.List() {
		_, key := policy.SplitSetKey(set.Key)
		rank := cds.ClusterVariantRank(key, set.Name, v.Namespace, v.Rules, v.GRPC)
		if rank == 0 || !policy.Visible(set.Visibility, v.Namespace, v.Egress) || !g.servesView(&set, v, picks) {
			continue
		}
		r := set.For(v.ClassKey)
		if r == nil {
			continue
		}
		if rank == 1 {
			out = append(out, r)
			continue
		}
		if better == nil {
			better = map[string]pick{}
		}
		if p, ok := better[set.Name]; !ok || rank > p.rank {
			better[set.Name] = pick{rank, r}
		}
	}
	if better == nil {
		return out
	}
	for i, r := range out {
		if p, ok := better[r.Name]; ok {
			out[i] = p.r
			delete(better, r.Name)
		}
	}
	for _, p := range better {
		out = append(out, p.r)
	}
	return out
}

// ResolveCollection lists the members of a LEDS collection for proxies of view v: the endpoints
// of one locality group of the CLA the view is sent, when that CLA names the collection; nothing
// otherwise (a collection of an older CLA, of another class, or of a service the view cannot
// see). pending says the view's CLA of a service naming the collection is being computed (the
// proxy's class changed): its answer follows with a Change naming the collection.
func (g *Graph) ResolveCollection(v *collections.View, typeURL, glob string) (c *collections.LEDSCollection, pending bool) {
	if typeURL != eds.TypeLbEndpoint || g.ledsCollections == nil || !eds.IsLEDSCollection(glob) {
		return nil, false
	}
	picks := map[string]string{}
	for _, set := range g.ledsCollections.Lookup(glob) {
		if !policy.Visible(set.Visibility, v.Namespace, v.Egress) || !g.servesView(&set, v, picks) {
			continue
		}
		r := set.For(v.ClassKey)
		if r == nil {
			pending = true
			continue
		}
		if r.LEDS != nil {
			if c := r.LEDS.Collection(glob); c != nil {
				return c, false
			}
		}
	}
	return nil, pending
}

// Subscribe calls f with the names whose resources changed, and with the connections whose view
// changed. Calls for one collection come in order. With LEDS, a change of a CLA set is also a
// change of the collections whose members differ between its old and new CLAs.
func (g *Graph) Subscribe(f func(collections.Change)) {
	if g.ledsCollections != nil {
		g.CLAs.RegisterBatch(func(evs []krt.Event[collections.ResourceSet]) {
			var globs []string
			seen := map[string]struct{}{}
			for _, e := range evs {
				eds.ChangedLEDSCollections(e.Old, e.New, func(name string) {
					if _, dup := seen[name]; !dup {
						seen[name] = struct{}{}
						globs = append(globs, name)
					}
				})
			}
			if len(globs) > 0 {
				f(collections.Change{TypeURL: eds.TypeLbEndpoint, Names: globs, At: g.Inputs.Clock.Last()})
			}
		}, false)
	}
	for _, typeURL := range []string{transforms.TypeCluster, transforms.TypeCLA, transforms.TypeListener, transforms.TypeRoute} {
		g.resourcesOf(typeURL).RegisterBatch(func(evs []krt.Event[collections.ResourceSet]) {
			at := g.Inputs.Clock.Last()
			names := make([]string, 0, len(evs))
			var causes []collections.Cause
			if typeURL == transforms.TypeCLA {
				causes = make([]collections.Cause, 0, len(evs))
			}
			for _, e := range evs {
				latest := e.Latest()
				names = append(names, latest.Name)
				if causes != nil {
					var c collections.Cause
					if e.New != nil {
						c = e.New.Cause()
					}
					causes = append(causes, c)
				}
				if typeURL == transforms.TypeListener {
					// The short names resolving to it (in any namespace: a stream of another
					// namespace holding the same short name is looked at again for nothing).
					names = append(names, cds.ListenerAliases(&latest)...)
				}
			}
			f(collections.Change{TypeURL: typeURL, Names: names, Causes: causes, At: at})
		}, false)
	}
	g.Proxies.RegisterBatch(func(evs []krt.Event[collections.Proxy]) {
		at := g.Inputs.Clock.Last()
		conns := make([]string, 0, len(evs))
		for _, e := range evs {
			if e.New != nil {
				conns = append(conns, e.New.ConnID)
			}
		}
		if len(conns) > 0 {
			f(collections.Change{Conns: conns, At: at})
		}
	}, false)
}

// emptyCLAs caches the resources made per request for names a client may choose: the empty
// ClusterLoadAssignments of names no proxy may have, the unknown-subset CLAs named for the
// cluster asked for, and the listeners of Kubernetes services under their short names (by source
// resource and name). A relabelled entry of an outdated source is never hit again and goes with
// the next reset.
type emptyCLAs struct {
	empty      *collections.Memo[string, *collections.Resource]
	relabelled *collections.Memo[relabelKey, *collections.Resource]
}

type relabelKey struct {
	src  *collections.Resource
	name string
}

func newEmptyCLAs() *emptyCLAs {
	size := func(r *collections.Resource) int { return len(r.Body) }
	return &emptyCLAs{
		empty:      collections.NewMemo[string, *collections.Resource]("empty CLAs of unknown names", 10000, 0, nil),
		relabelled: collections.NewMemo[relabelKey]("relabelled CLAs and listener aliases", 4096, 64<<20, size),
	}
}

// relabel is src under another name (relabel makes it: an unknown subset's CLA with its
// cluster_name set to name, a listener under an alias); nil if relabel cannot.
func (e *emptyCLAs) relabel(src *collections.Resource, name string, relabel func(*collections.Resource, string) *collections.Resource) *collections.Resource {
	r, _ := e.relabelled.Get(relabelKey{src, name}, func() (*collections.Resource, bool) {
		r := relabel(src, name)
		return r, r != nil
	})
	return r
}

// get is the empty CLA of a name no proxy may have.
func (e *emptyCLAs) get(name string) *collections.Resource {
	r, _ := e.empty.Get(name, func() (*collections.Resource, bool) {
		r := eds.EmptyCLA(name)
		r.Absent = true
		return r, true
	})
	return r
}

// Memos are the graph's bounded caches: of resources made per request, and of the workload
// identities its transforms derive.
func (g *Graph) Memos() []collections.MemoStats {
	return []collections.MemoStats{g.empty.empty.Stats(), g.empty.relabelled.Stats(), g.identities.Stats()}
}
