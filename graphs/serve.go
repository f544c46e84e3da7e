package graphs

import (
	"sync"

	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
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
// resolves, as istiod's: an unknown cluster, or one the proxy cannot see, gets an empty one;
// pending is true while the CLA of the proxy's class is being computed. Other types resolve to nil
// when the proxy has no such resource. Listeners are served to proxyless gRPC clients only, by
// their fully qualified name or, in the client's namespace, by "<name>:<port>".
func (g *Graph) Resolve(v *collections.View, typeURL, name string) (r *collections.Resource, pending bool) {
	c := g.resourcesOf(typeURL)
	if c == nil || (typeURL == transforms.TypeListener && !v.GRPC) {
		return nil, false
	}
	set := c.GetKey(name)
	if set == nil && typeURL == transforms.TypeListener {
		set = c.GetKey(transforms.ShortListenerKey(v.Namespace, name))
	}
	if set == nil || !transforms.Visible(set.Visibility, v.Namespace, v.Egress) {
		if typeURL == transforms.TypeCLA {
			return g.empty.get(name), false
		}
		return nil, false
	}
	if r := set.For(v.ClassKey); r != nil {
		return r, false
	}
	return nil, true
}

// List returns every resource of a type a proxy of view v sees, for wildcard subscriptions:
// the clusters; the listeners, by fully qualified name, for gRPC clients.
func (g *Graph) List(v *collections.View, typeURL string) []*collections.Resource {
	if typeURL != transforms.TypeCluster && !(typeURL == transforms.TypeListener && v.GRPC) {
		return nil
	}
	var out []*collections.Resource
	for _, set := range g.resourcesOf(typeURL).List() {
		if set.Key != set.Name || !transforms.Visible(set.Visibility, v.Namespace, v.Egress) {
			continue
		}
		if r := set.For(v.ClassKey); r != nil {
			out = append(out, r)
		}
	}
	return out
}

// Subscribe calls f with the names whose resources changed, and with the connections whose view
// changed. Calls for one collection come in order.
func (g *Graph) Subscribe(f func(collections.Change)) {
	for _, typeURL := range []string{transforms.TypeCluster, transforms.TypeCLA, transforms.TypeListener, transforms.TypeRoute} {
		g.resourcesOf(typeURL).RegisterBatch(func(evs []krt.Event[collections.ResourceSet]) {
			at := g.Inputs.Clock.Last()
			names := make([]string, 0, len(evs))
			for _, e := range evs {
				names = append(names, e.Latest().Name)
			}
			f(collections.Change{TypeURL: typeURL, Names: names, At: at})
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

// emptyCLAs caches the empty ClusterLoadAssignments of names no proxy may have; bounded.
type emptyCLAs struct {
	mu sync.Mutex
	m  map[string]*collections.Resource
}

const maxEmptyCLAs = 10000

func (e *emptyCLAs) get(name string) *collections.Resource {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r, ok := e.m[name]; ok {
		return r
	}
	if e.m == nil || len(e.m) >= maxEmptyCLAs {
		e.m = map[string]*collections.Resource{}
	}
	r := transforms.EmptyCLA(name)
	e.m[name] = r
	return r
}
