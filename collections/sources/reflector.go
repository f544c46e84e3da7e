package sources

import (
	"context"
	"fmt"
	"sync"
	"time"

	"istio.io/istio/pkg/kube"
	"istio.io/istio/pkg/kube/krt"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/krteds/krteds/collections"
)

// podsFieldSelector leaves Failed Pods on the API server, as istiod's informer does.
const podsFieldSelector = "status.phase!=Failed"

// podInformer lists and watches Pods and keeps each as a collections.Pod: the decoded object is
// dropped as soon as it is reduced, so the only copy krteds holds is the few hundred bytes the
// graph reads.
func podInformer(client kube.Client, clock *collections.InputClock, opts krt.OptionsBuilder) krt.Collection[*collections.Pod] {
	pods := client.Kube().CoreV1().Pods(metav1.NamespaceAll)
	return reducedInformer(client, clock, opts, collections.NamePods, &corev1.Pod{}, collections.NewPod,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = podsFieldSelector
			return pods.List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = podsFieldSelector
			return pods.Watch(ctx, o)
		})
}

// sliceInformer lists and watches EndpointSlices and keeps each as a collections.Slice.
func sliceInformer(client kube.Client, clock *collections.InputClock, opts krt.OptionsBuilder) krt.Collection[*collections.Slice] {
	slices := client.Kube().DiscoveryV1().EndpointSlices(metav1.NamespaceAll)
	return reducedInformer(client, clock, opts, collections.NameEndpointSlices, &discovery.EndpointSlice{}, collections.NewSlice,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return slices.List(ctx, o) },
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return slices.Watch(ctx, o) })
}

// reducedInformer is a client-go Reflector over one kind writing into a krt static collection of
// the kind's reduced form (reduce; nil: not kept). That gives the collection the informer's
// semantics (a relist replaces the contents and emits only what changed; an unchanged object
// emits nothing) while krteds holds no decoded object. As client-go's own informers, a client
// that cannot stream the initial list (a fake) is listed, then watched.
func reducedInformer[K interface {
	runtime.Object
	metav1.Object
}, E any](client kube.Client, clock *collections.InputClock, opts krt.OptionsBuilder, name string, example K, reduce func(K) *E,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error), watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
) krt.Collection[*E] {
	synced := make(chan struct{})
	store := &reducedStore[K, E]{
		name:   name,
		out:    krt.NewStaticCollection[*E](syncedChan(synced), nil, opts.WithName(name)...),
		reduce: reduce,
		clock:  clock,
		synced: synced,
	}
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{ListWithContextFunc: list, WatchFuncWithContext: watchFn}, client.Kube())
	r := cache.NewReflectorWithOptions(lw, example, store, cache.ReflectorOptions{Name: "krteds/" + name})
	go r.Run(opts.Stop())
	return store.out
}

// reducedStore is the Reflector's store: every object is reduced on arrival.
type reducedStore[K metav1.Object, E any] struct {
	name   string
	out    krt.StaticCollection[*E]
	reduce func(K) *E
	clock  *collections.InputClock
	synced chan struct{}
	once   sync.Once
}

func (s *reducedStore[K, E]) Add(obj any) error    { return s.Update(obj) }
func (s *reducedStore[K, E]) Resync() error        { return nil }
func (s *reducedStore[K, E]) Delete(obj any) error { return s.delete(obj) }

func (s *reducedStore[K, E]) Update(obj any) error {
	k, ok := obj.(K)
	if !ok {
		return fmt.Errorf("%s store: unexpected %T", s.name, obj)
	}
	s.clock.Mark()
	if v := s.reduce(k); v != nil {
		s.stamp(v, time.Now())
		s.out.ConditionalUpdateObject(v)
	} else {
		s.out.DeleteObject(k.GetNamespace() + "/" + k.GetName())
	}
	return nil
}

func (s *reducedStore[K, E]) delete(obj any) error {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	k, ok := obj.(K)
	if !ok {
		return fmt.Errorf("%s store: unexpected %T", s.name, obj)
	}
	s.clock.Mark()
	s.out.DeleteObject(k.GetNamespace() + "/" + k.GetName())
	return nil
}

// Replace is a (re)list: the collection becomes exactly the listed objects, and is synced from
// the first one on.
func (s *reducedStore[K, E]) Replace(list []any, _ string) error {
	out := make([]*E, 0, len(list))
	for _, o := range list {
		k, ok := o.(K)
		if !ok {
			return fmt.Errorf("%s store: unexpected %T in list", s.name, o)
		}
		if v := s.reduce(k); v != nil {
			out = append(out, v)
		}
	}
	now := time.Now()
	for _, v := range out {
		s.stamp(v, now)
	}
	s.clock.Mark()
	s.out.Reset(out)
	s.once.Do(func() { close(s.synced) })
	return nil
}

// stamp records on a kept object when the source took it (a Slice, a Pod), and whether its
// trigger time (a slice's stamp, a Pod's Ready transition) is its own or its previous version's.
func (s *reducedStore[K, E]) stamp(v *E, at time.Time) {
	switch o := any(v).(type) {
	case *collections.Slice:
		o.Seen = at.UnixNano()
		if prev := s.out.GetKey(o.Key); prev != nil {
			o.Follows(any(*prev).(*collections.Slice))
		}
	case *collections.Pod:
		o.Seen = at.UnixNano()
		if prev := s.out.GetKey(o.Key); prev != nil {
			o.Follows(any(*prev).(*collections.Pod))
		}
	}
}

// syncedChan is a krt.Syncer that is synced once its channel is closed.
type syncedChan <-chan struct{}

func (c syncedChan) HasSynced() bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (c syncedChan) WaitUntilSynced(stop <-chan struct{}) bool {
	select {
	case <-c:
		return true
	case <-stop:
		return false
	}
}
