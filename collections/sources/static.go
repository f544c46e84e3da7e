package sources

import (
	"maps"
	"slices"

	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	securityclient "istio.io/client-go/pkg/apis/security/v1"
	"istio.io/istio/pkg/kube/krt"
	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
)

// Static holds mutable input collections: the manifests source writes to them, and tests and
// benchmarks feed the graph through them by hand.
type Static struct {
	Namespaces       krt.StaticCollection[*corev1.Namespace]
	Nodes            krt.StaticCollection[*corev1.Node]
	Pods             krt.StaticCollection[*collections.Pod]
	Services         krt.StaticCollection[*corev1.Service]
	EndpointSlices   krt.StaticCollection[*collections.Slice]
	DestinationRules krt.StaticCollection[*networkingclient.DestinationRule]
	Sidecars         krt.StaticCollection[*networkingclient.Sidecar]
	ServiceEntries   krt.StaticCollection[*networkingclient.ServiceEntry]
	WorkloadEntries  krt.StaticCollection[*networkingclient.WorkloadEntry]
	// PeerAuthentications are security.istio.io/v1 PeerAuthentications.
	PeerAuthentications krt.StaticCollection[*securityclient.PeerAuthentication]
	// Clock is marked by Apply and Delete.
	Clock *collections.InputClock
	// ops are the writes of each kind's collection.
	ops *[numKinds]kindOps
}

// NewStatic makes static input collections holding objs (objects of other types are ignored;
// Kubernetes Pods are reduced to collections.Pod, Failed ones left out, and EndpointSlices to
// collections.Slice, as every source does).
// They report synced once synced does (nil: at once).
func NewStatic(opts krt.OptionsBuilder, synced krt.Syncer, objs ...any) Static {
	var byKind [numKinds][]any
	for _, o := range objs {
		if kind, kept, ok := kindOf(o); ok && kept != nil {
			byKind[kind] = append(byKind[kind], kept)
		}
	}
	s := Static{Clock: new(collections.InputClock), ops: new([numKinds]kindOps)}
	s.Namespaces = newStatic[*corev1.Namespace](opts, synced, collections.NameNamespaces, byKind[KindNamespace], &s.ops[KindNamespace])
	s.Nodes = newStatic[*corev1.Node](opts, synced, collections.NameNodes, byKind[KindNode], &s.ops[KindNode])
	s.Pods = newStatic[*collections.Pod](opts, synced, collections.NamePods, byKind[KindPod], &s.ops[KindPod])
	s.Services = newStatic[*corev1.Service](opts, synced, collections.NameServices, byKind[KindService], &s.ops[KindService])
	s.EndpointSlices = newStatic[*collections.Slice](opts, synced, collections.NameEndpointSlices, byKind[KindEndpointSlice], &s.ops[KindEndpointSlice])
	s.DestinationRules = newStatic[*networkingclient.DestinationRule](opts, synced, collections.NameDestRules, byKind[KindDestinationRule], &s.ops[KindDestinationRule])
	s.Sidecars = newStatic[*networkingclient.Sidecar](opts, synced, collections.NameSidecars, byKind[KindSidecar], &s.ops[KindSidecar])
	s.ServiceEntries = newStatic[*networkingclient.ServiceEntry](opts, synced, collections.NameServiceEntries, byKind[KindServiceEntry], &s.ops[KindServiceEntry])
	s.WorkloadEntries = newStatic[*networkingclient.WorkloadEntry](opts, synced, collections.NameWorkloadEntries, byKind[KindWorkloadEntry], &s.ops[KindWorkloadEntry])
	s.PeerAuthentications = newStatic[*securityclient.PeerAuthentication](opts, synced, collections.NamePeerAuthns, byKind[KindPeerAuthentication], &s.ops[KindPeerAuthentication])
	return s
}

// newStatic makes a static collection named name holding objs (of its element type), and
// records its writes in ops.
func newStatic[T any](opts krt.OptionsBuilder, synced krt.Syncer, name string, objs []any, ops *kindOps) krt.StaticCollection[T] {
	typed := make([]T, 0, len(objs))
	for _, o := range objs {
		typed = append(typed, o.(T))
	}
	c := krt.NewStaticCollection(synced, typed, opts.WithName(name)...)
	*ops = kindOps{put: func(o any) { c.UpdateObject(o.(T)) }, del: c.DeleteObject, batch: func(ups []any, dels []string) { batch(c, ups, dels) }}
	return c
}

// Inputs returns the collections as graph inputs.
func (s Static) Inputs() collections.Inputs {
	return collections.Inputs{
		Namespaces:          s.Namespaces,
		Nodes:               s.Nodes,
		Pods:                s.Pods,
		Services:            s.Services,
		EndpointSlices:      s.EndpointSlices,
		DestinationRules:    s.DestinationRules,
		Sidecars:            s.Sidecars,
		ServiceEntries:      s.ServiceEntries,
		WorkloadEntries:     s.WorkloadEntries,
		PeerAuthentications: s.PeerAuthentications,
		Clock:               s.Clock,
	}
}

// Apply writes obj (upsert) or, with del, removes it, in the collection of its kind (objects of
// other types are ignored). A Failed Pod is removed.
func (s Static) Apply(obj any, del bool) {
	s.Clock.Mark()
	kind, kept, ok := kindOf(obj)
	if !ok {
		return
	}
	ops := s.ops[kind]
	switch {
	case kept == nil: // a Failed Pod
		p := obj.(*corev1.Pod)
		ops.del(p.Namespace + "/" + p.Name)
	case del:
		ops.del(krt.GetKey(kept))
	default:
		ops.put(kept)
	}
}

// Delete removes the object of that kind and krt key ("<namespace>/<name>" or "<name>").
func (s Static) Delete(kind Kind, key string) {
	s.Clock.Mark()
	if o := s.ops[kind]; o.del != nil {
		o.del(key)
	}
}

// Batch writes many objects of one kind, ups (upserts, of the collection's element type) and
// dels (krt keys), as a single batch of events: the collections downstream see the lot at once
// and recompute each dependent item once, where one write per object would recompute an item
// once per object it depends on (a rollout's slice once per pod).
func (s Static) Batch(kind Kind, ups []any, dels []string) {
	s.Clock.Mark()
	if o := s.ops[kind]; o.batch != nil {
		o.batch(ups, dels)
	}
}

// kindOps are the writes of the collection of one kind.
type kindOps struct {
	put   func(obj any)
	del   func(key string)
	batch func(ups []any, dels []string)
}

// batch replaces the collection's contents by its current contents with the changes applied:
// krt's Reset emits one event batch holding only what differs.
func batch[T any](c krt.StaticCollection[T], ups []any, dels []string) {
	cur := c.List()
	next := make(map[string]T, len(cur)+len(ups))
	for _, v := range cur {
		next[krt.GetKey(v)] = v
	}
	for _, u := range ups {
		if v, ok := u.(T); ok {
			next[krt.GetKey(v)] = v
		}
	}
	for _, k := range dels {
		delete(next, k)
	}
	c.Reset(slices.Collect(maps.Values(next)))
}
