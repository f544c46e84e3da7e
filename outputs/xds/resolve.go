package xds

import (
	"slices"
	"sync"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/transforms"
)

// resolution is what one requested resource name resolves to for one proxy.
type resolution struct {
	res *collections.Resource
	// pending: the resource will exist but the graph has not computed it yet (for example the
	// CLA of a proxy class that just connected); the watch waits for it.
	pending bool
}

// resolver answers "which bytes does this proxy get for this name" from the graph's outputs.
type resolver struct {
	g *graphs.Graph
	// emptyCLAs caches the empty ClusterLoadAssignment of each unknown cluster name.
	empty *emptyCache
}

// cla resolves an EDS name, as istiod: an unknown service, port or subset, or a service the
// proxy cannot see, gives an empty CLA.
func (r *resolver) cla(p *collections.Proxy, cp collections.ConnectedProxy, name string) resolution {
	port, subset, host, ok := transforms.ParseClusterName(name)
	if !ok {
		return resolution{res: r.empty.get(name)}
	}
	svcs := r.g.ServicesByHostname.Lookup(host)
	if len(svcs) == 0 {
		return resolution{res: r.empty.get(name)}
	}
	svc := &svcs[len(svcs)-1]
	if vis, known := r.visible(p, cp, svc); !known {
		return resolution{pending: true}
	} else if !vis {
		return resolution{res: r.empty.get(name)}
	}
	sp, ok := svc.PortByNumber(port)
	if !ok || !sp.HasCluster() || svc.Resolution == collections.Alias {
		return resolution{res: r.empty.get(name)}
	}
	pol := r.g.ServicePolicies.GetKey(svc.ResourceName())
	if subset != "" && !slices.Contains(pol.Subsets(), subset) {
		return resolution{res: r.empty.get(name)}
	}
	if subset == "" && !transforms.NeedsClasses(svc, pol) {
		// The common case: one CLA per cluster, shared by every proxy, keyed by its name.
		if res := r.g.CLAs.GetKey(name); res != nil {
			return resolution{res: res}
		}
		return resolution{pending: true}
	}
	var class collections.ProxyClass
	if transforms.NeedsClasses(svc, pol) {
		if p == nil {
			return resolution{pending: true}
		}
		class = p.Class
	}
	policy := transforms.ClusterPolicyFor(svc, pol, class.Namespace, port, subset)
	res := r.g.CLAs.GetKey(transforms.CLAKeyFor(name, policy, transforms.ProjectFor(svc, policy, class)))
	if res == nil {
		return resolution{pending: true}
	}
	return resolution{res: res}
}

// visible reports whether the proxy sees the service (its exportTo and the proxy's Sidecar);
// known is false while the proxy's Sidecar is not resolved yet.
func (r *resolver) visible(p *collections.Proxy, cp collections.ConnectedProxy, svc *collections.ServiceInfo) (vis, known bool) {
	if p != nil {
		return transforms.ServiceVisible(svc, cp.Namespace, p.SidecarEgress), true
	}
	if len(r.g.Sidecars.List()) > 0 {
		return false, false
	}
	return transforms.ServiceVisible(svc, cp.Namespace, nil), true
}

// visibleKey reports whether the proxy sees the service with that key ("" is always visible).
func (r *resolver) visibleKey(p *collections.Proxy, cp collections.ConnectedProxy, key string) bool {
	if key == "" {
		return true
	}
	svc := r.g.ServiceInfos.GetKey(key)
	if svc == nil {
		return false
	}
	vis, _ := r.visible(p, cp, svc)
	return vis
}

// named resolves a CDS, LDS or RDS name.
func (r *resolver) named(p *collections.Proxy, cp collections.ConnectedProxy, typeURL, name string) *collections.Resource {
	res := r.namedAll(cp, typeURL, name)
	if res == nil || !r.visibleKey(p, cp, res.Service) {
		return nil
	}
	return res
}

func (r *resolver) namedAll(cp collections.ConnectedProxy, typeURL, name string) *collections.Resource {
	switch typeURL {
	case transforms.TypeCluster:
		return r.g.Clusters.GetKey(name)
	case transforms.TypeRoute:
		return r.g.Routes.GetKey(name)
	case transforms.TypeListener:
		if cp.Generator != collections.GeneratorGRPC {
			return nil
		}
		if l := r.g.Listeners.GetKey(name); l != nil {
			return l
		}
		return r.g.Listeners.GetKey(transforms.ShortListenerKey(cp.Namespace, name))
	}
	return nil
}

// wildcard lists every resource of a type a proxy sees when it subscribes to all.
func (r *resolver) wildcard(p *collections.Proxy, cp collections.ConnectedProxy, typeURL string) []collections.Resource {
	var out []collections.Resource
	for _, res := range r.wildcardAll(cp, typeURL) {
		if r.visibleKey(p, cp, res.Service) {
			out = append(out, res)
		}
	}
	return out
}

func (r *resolver) wildcardAll(cp collections.ConnectedProxy, typeURL string) []collections.Resource {
	switch typeURL {
	case transforms.TypeCluster:
		return r.g.Clusters.List()
	case transforms.TypeListener:
		if cp.Generator != collections.GeneratorGRPC {
			return nil
		}
		// Wildcard LDS for gRPC clients lists the fully qualified names only.
		var out []collections.Resource
		for _, l := range r.g.Listeners.List() {
			if l.Key == l.Name {
				out = append(out, l)
			}
		}
		return out
	}
	return nil
}

// fullState reports whether responses of the type must list every subscribed resource (absence
// means deletion): CDS and LDS. EDS and RDS responses may carry only what changed.
func fullState(typeURL string) bool {
	return typeURL == transforms.TypeCluster || typeURL == transforms.TypeListener
}

type emptyCache struct {
	mu sync.Mutex
	m  map[string]*collections.Resource
}

func newEmptyCache() *emptyCache {
	return &emptyCache{m: map[string]*collections.Resource{}}
}

func (c *emptyCache) get(name string) *collections.Resource {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.m[name]; ok {
		return r
	}
	r, err := transforms.Marshal(name, name, transforms.TypeCLA, &endpoint.ClusterLoadAssignment{ClusterName: name})
	if err != nil {
		return nil
	}
	if len(c.m) > 10000 {
		clear(c.m)
	}
	c.m[name] = &r
	return &r
}
