package sources

import (
	"context"
	"fmt"
	"sync"

	"istio.io/istio/pkg/kube"
	"istio.io/istio/pkg/kube/krt"
	corev1 "k8s.io/api/core/v1"
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
// graph reads. It is a client-go Reflector writing into a krt static collection, which gives the
// collection the informer's semantics (a relist replaces the contents and emits only what
// changed; an unchanged object emits nothing).
func podInformer(client kube.Client, clock *collections.InputClock, opts krt.OptionsBuilder) krt.Collection[*collections.Pod] {
	synced := make(chan struct{})
	store := &podStore{
		pods:   krt.NewStaticCollection[*collections.Pod](syncedChan(synced), nil, opts.WithName(collections.NamePods)...),
		clock:  clock,
		synced: synced,
	}
	kc := client.Kube()
	pods := kc.CoreV1().Pods(metav1.NamespaceAll)
	// As client-go's own informers: a client that cannot stream the initial list (a fake) is
	// listed, then watched.
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = podsFieldSelector
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = podsFieldSelector
			return pods.Watch(ctx, o)
		},
	}, kc)
	r := cache.NewReflectorWithOptions(lw, &corev1.Pod{}, store, cache.ReflectorOptions{Name: "krteds/pods"})
	go r.Run(opts.Stop())
	return store.pods
}

// podStore is the Reflector's store: every object is reduced on arrival.
type podStore struct {
	pods   krt.StaticCollection[*collections.Pod]
	clock  *collections.InputClock
	synced chan struct{}
	once   sync.Once
}

var _ cache.ReflectorStore = (*podStore)(nil)

func (s *podStore) Add(obj any) error    { return s.Update(obj) }
func (s *podStore) Resync() error        { return nil }
func (s *podStore) Delete(obj any) error { return s.delete(obj) }

func (s *podStore) Update(obj any) error {
	k, ok := obj.(*corev1.Pod)
	if !ok {
		return fmt.Errorf("pod store: unexpected %T", obj)
	}
	s.clock.Mark()
	if p := collections.NewPod(k); p != nil {
		s.pods.ConditionalUpdateObject(p)
	} else {
		s.pods.DeleteObject(k.Namespace + "/" + k.Name)
	}
	return nil
}

func (s *podStore) delete(obj any) error {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	k, ok := obj.(*corev1.Pod)
	if !ok {
		return fmt.Errorf("pod store: unexpected %T", obj)
	}
	s.clock.Mark()
	s.pods.DeleteObject(k.Namespace + "/" + k.Name)
	return nil
}

// Replace is a (re)list: the collection becomes exactly the listed Pods, and is synced from the
// first one on.
func (s *podStore) Replace(list []any, _ string) error {
	pods := make([]*collections.Pod, 0, len(list))
	for _, o := range list {
		k, ok := o.(*corev1.Pod)
		if !ok {
			return fmt.Errorf("pod store: unexpected %T in list", o)
		}
		if p := collections.NewPod(k); p != nil {
			pods = append(pods, p)
		}
	}
	s.clock.Mark()
	s.pods.Reset(pods)
	s.once.Do(func() { close(s.synced) })
	return nil
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
