package sources

import (
	"maps"
	"slices"

	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	securityclient "istio.io/client-go/pkg/apis/security/v1"
	"istio.io/istio/pkg/kube/krt"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

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
	var (
		ns    []*corev1.Namespace
		nodes []*corev1.Node
		pods  []*collections.Pod
		svcs  []*corev1.Service
		eps   []*collections.Slice
		drs   []*networkingclient.DestinationRule
		scs   []*networkingclient.Sidecar
		ses   []*networkingclient.ServiceEntry
		wes   []*networkingclient.WorkloadEntry
		pas   []*securityclient.PeerAuthentication
	)
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Namespace:
			ns = append(ns, o)
		case *corev1.Node:
			nodes = append(nodes, o)
		case *corev1.Pod:
			if p := collections.NewPod(o); p != nil {
				pods = append(pods, p)
			}
		case *collections.Pod:
			pods = append(pods, o)
		case *corev1.Service:
			svcs = append(svcs, o)
		case *discovery.EndpointSlice:
			eps = append(eps, collections.NewSlice(o))
		case *collections.Slice:
			eps = append(eps, o)
		case *networkingclient.DestinationRule:
			drs = append(drs, o)
		case *networkingclient.Sidecar:
			scs = append(scs, o)
		case *networkingclient.ServiceEntry:
			ses = append(ses, o)
		case *networkingclient.WorkloadEntry:
			wes = append(wes, o)
		case *securityclient.PeerAuthentication:
			pas = append(pas, o)
		}
	}
	return Static{
		Namespaces:          krt.NewStaticCollection(synced, ns, opts.WithName(collections.NameNamespaces)...),
		Nodes:               krt.NewStaticCollection(synced, nodes, opts.WithName(collections.NameNodes)...),
		Pods:                krt.NewStaticCollection(synced, pods, opts.WithName(collections.NamePods)...),
		Services:            krt.NewStaticCollection(synced, svcs, opts.WithName(collections.NameServices)...),
		EndpointSlices:      krt.NewStaticCollection(synced, eps, opts.WithName(collections.NameEndpointSlices)...),
		DestinationRules:    krt.NewStaticCollection(synced, drs, opts.WithName(collections.NameDestRules)...),
		Sidecars:            krt.NewStaticCollection(synced, scs, opts.WithName(collections.NameSidecars)...),
		ServiceEntries:      krt.NewStaticCollection(synced, ses, opts.WithName(collections.NameServiceEntries)...),
		WorkloadEntries:     krt.NewStaticCollection(synced, wes, opts.WithName(collections.NameWorkloadEntries)...),
		PeerAuthentications: krt.NewStaticCollection(synced, pas, opts.WithName(collections.NamePeerAuthns)...),
		Clock:               new(collections.InputClock),
	}
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

// Apply writes obj (upsert) or, with del, removes it, in the collection of its type. A Failed
// Pod is removed.
func (s Static) Apply(obj any, del bool) {
	s.Clock.Mark()
	switch o := obj.(type) {
	case *corev1.Namespace:
		apply(s.Namespaces, o, del)
	case *corev1.Node:
		apply(s.Nodes, o, del)
	case *corev1.Pod:
		if p := collections.NewPod(o); p != nil && !del {
			s.Pods.UpdateObject(p)
		} else {
			s.Pods.DeleteObject(o.Namespace + "/" + o.Name)
		}
	case *collections.Pod:
		if del {
			s.Pods.DeleteObject(o.Key)
		} else {
			s.Pods.UpdateObject(o)
		}
	case *corev1.Service:
		apply(s.Services, o, del)
	case *discovery.EndpointSlice:
		apply(s.EndpointSlices, collections.NewSlice(o), del)
	case *collections.Slice:
		apply(s.EndpointSlices, o, del)
	case *networkingclient.DestinationRule:
		apply(s.DestinationRules, o, del)
	case *networkingclient.Sidecar:
		apply(s.Sidecars, o, del)
	case *networkingclient.ServiceEntry:
		apply(s.ServiceEntries, o, del)
	case *networkingclient.WorkloadEntry:
		apply(s.WorkloadEntries, o, del)
	case *securityclient.PeerAuthentication:
		apply(s.PeerAuthentications, o, del)
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
	del   func(key string)
	batch func(ups []any, dels []string)
}

func opsOf[T any](c krt.StaticCollection[T]) kindOps {
	return kindOps{del: c.DeleteObject, batch: func(ups []any, dels []string) { batch(c, ups, dels) }}
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

func apply[T interface {
	GetName() string
	GetNamespace() string
}](c krt.StaticCollection[T], o T, del bool) {
	if del {
		key := o.GetName()
		if ns := o.GetNamespace(); ns != "" {
			key = ns + "/" + key
		}
		c.DeleteObject(key)
		return
	}
	c.UpdateObject(o)
}
