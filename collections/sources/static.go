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
}

// NewStatic makes static input collections holding objs (objects of other types are ignored;
// Kubernetes Pods are reduced to collections.Pod, Failed ones left out, and EndpointSlices to
// collections.Slice, as every source does).
// They report synced once synced does (nil: at once).
func NewStatic(opts krt.OptionsBuilder, synced krt.Syncer, objs ...any) Static {
	byKind := [numKinds][]any{}
	for _, o := range objs {
		if kind, kept, ok := kindOf(o); ok && kept != nil {
			byKind[kind] = append(byKind[kind], kept)
		}
	}
	return Static{
		Namespaces:          newStatic[*corev1.Namespace](opts, synced, collections.NameNamespaces, byKind[KindNamespace]),
		Nodes:               newStatic[*corev1.Node](opts, synced, collections.NameNodes, byKind[KindNode]),
		Pods:                newStatic[*collections.Pod](opts, synced, collections.NamePods, byKind[KindPod]),
		Services:            newStatic[*corev1.Service](opts, synced, collections.NameServices, byKind[KindService]),
		EndpointSlices:      newStatic[*collections.Slice](opts, synced, collections.NameEndpointSlices, byKind[KindEndpointSlice]),
		DestinationRules:    newStatic[*networkingclient.DestinationRule](opts, synced, collections.NameDestRules, byKind[KindDestinationRule]),
		Sidecars:            newStatic[*networkingclient.Sidecar](opts, synced, collections.NameSidecars, byKind[KindSidecar]),
		ServiceEntries:      newStatic[*networkingclient.ServiceEntry](opts, synced, collections.NameServiceEntries, byKind[KindServiceEntry]),
		WorkloadEntries:     newStatic[*networkingclient.WorkloadEntry](opts, synced, collections.NameWorkloadEntries, byKind[KindWorkloadEntry]),
		PeerAuthentications: newStatic[*securityclient.PeerAuthentication](opts, synced, collections.NamePeerAuthns, byKind[KindPeerAuthentication]),
		Clock:               new(collections.InputClock),
	}
}

// newStatic is a static collection named name holding objs (of its element type).
func newStatic[T any](opts krt.OptionsBuilder, synced krt.Syncer, name string, objs []any) krt.StaticCollection[T] {
	typed := make([]T, 0, len(objs))
	for _, o := range objs {
		typed = append(typed, o.(T))
	}
	return krt.NewStaticCollection(synced, typed, opts.WithName(name)...)
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
	ops := s.of(kind)
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
	if o := s.of(kind); o.del != nil {
		o.del(key)
	}
}

// Batch writes many objects of one kind, ups (upserts, of the collection's element type) and
// dels (krt keys), as a single batch of events: the collections downstream see the lot at once
// and recompute each dependent item once, where one write per object would recompute an item
// once per object it depends on (a rollout's slice once per pod).
func (s Static) Batch(kind Kind, ups []any, dels []string) {
	s.Clock.Mark()
	if o := s.of(kind); o.batch != nil {
		o.batch(ups, dels)
	}
}

// kindOps are the writes of the collection of one kind.
type kindOps struct {
	put   func(obj any)
	del   func(key string)
	batch func(ups []any, dels []string)
}

func opsOf[T any](c krt.StaticCollection[T]) kindOps {
	return kindOps{put: func(o any) { c.UpdateObject(o.(T)) }, del: c.DeleteObject, batch: func(ups []any, dels []string) { batch(c, ups, dels) }}
}

// of is the collection of a kind.
func (s Static) of(kind Kind) kindOps {
	switch kind {
	case KindNamespace:
		return opsOf(s.Namespaces)
	case KindNode:
		return opsOf(s.Nodes)
	case KindPod:
		return opsOf(s.Pods)
	case KindService:
		return opsOf(s.Services)
	case KindEndpointSlice:
		return opsOf(s.EndpointSlices)
	case KindDestinationRule:
		return opsOf(s.DestinationRules)
	case KindSidecar:
		return opsOf(s.Sidecars)
	case KindServiceEntry:
		return opsOf(s.ServiceEntries)
	case KindWorkloadEntry:
		return opsOf(s.WorkloadEntries)
	case KindPeerAuthentication:
		return opsOf(s.PeerAuthentications)
	}
	return kindOps{}
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
