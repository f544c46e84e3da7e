package source

import (
	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/cds"
	"github.com/krteds/krteds/transforms/eds"
	"github.com/krteds/krteds/transforms/policy"
)

// List returns every resource of a type a proxy of view v sees, for wildcard subscriptions:
// the clusters, each in the variant for the proxy's namespace and kind; the listeners, by fully
// qualified name, for gRPC clients.
func (s *Source) List(v *collections.View, typeURL string) []*collections.Resource {
	switch {
	case typeURL == transforms.TypeCluster:
		return s.listClusters(v)
	case typeURL != transforms.TypeListener || !v.GRPC:
		return nil
	}
	var out []*collections.Resource
	picks := map[string]string{}
	for _, set := range s.g.Listeners.List() {
		if _, key := policy.SplitSetKey(set.Key); key != set.Name || !policy.Visible(set.Visibility, v.Namespace, v.Egress) ||
			!s.servesView(&set, v, picks) {
			continue
		}
		if r := set.For(v.ClassKey); r != nil {
			out = append(out, r)
		}
	}
	return out
}

// listClusters lists one variant per cluster name: the most specific for the view
// (cds.ClusterVariantRank). Variants are rare, so they are only remembered once seen.
func (s *Source) listClusters(v *collections.View) []*collections.Resource {
	type pick struct {
		rank int
		r    *collections.Resource
	}
	var (
		out    []*collections.Resource
		better map[string]pick
	)
	picks := map[string]string{}
	for _, set := range s.g.Clusters.List() {
		_, key := policy.SplitSetKey(set.Key)
		rank := cds.ClusterVariantRank(key, set.Name, v.Namespace, v.Rules, v.GRPC)
		if rank == 0 || !policy.Visible(set.Visibility, v.Namespace, v.Egress) || !s.servesView(&set, v, picks) {
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
func (s *Source) ResolveCollection(v *collections.View, typeURL, glob string) (c *collections.LEDSCollection, pending bool) {
	if typeURL != eds.TypeLbEndpoint || s.g.LEDSCollections == nil || !eds.IsLEDSCollection(glob) {
		return nil, false
	}
	picks := map[string]string{}
	for _, set := range s.g.LEDSCollections.Lookup(glob) {
		if !policy.Visible(set.Visibility, v.Namespace, v.Egress) || !s.servesView(&set, v, picks) {
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
