package collections

import (
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/istio/pkg/kube"
	"istio.io/istio/pkg/kube/kclient"
	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/kube/kubetypes"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Inputs are the Kubernetes collections the EDS graph reads. They come from informers over a
// kube.Client (a real cluster, or a fake client seeded from manifests) or, in tests, from static
// collections.
type Inputs struct {
	Namespaces     krt.Collection[*corev1.Namespace]
	Nodes          krt.Collection[*corev1.Node]
	Pods           krt.Collection[*corev1.Pod]
	Services       krt.Collection[*corev1.Service]
	EndpointSlices krt.Collection[*discovery.EndpointSlice]
	// DestinationRules and Sidecars (networking.istio.io) stay empty where their CRDs are not
	// installed.
	DestinationRules krt.Collection[*networkingclient.DestinationRule]
	Sidecars         krt.Collection[*networkingclient.Sidecar]
}

// Istio resources krteds reads.
var (
	GVRDestinationRule = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "destinationrules"}
	GVRSidecar         = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "sidecars"}
)

// Input collection names, as they appear in /debug/krt and /debug/krtz.
const (
	NameNamespaces     = "informer/Namespaces"
	NameNodes          = "informer/Nodes"
	NamePods           = "informer/Pods"
	NameServices       = "informer/Services"
	NameEndpointSlices = "informer/EndpointSlices"
	NameDestRules      = "informer/DestinationRules"
	NameSidecars       = "informer/Sidecars"
)

// InformerInputs builds the input collections as krt informers over the client, with the same
// filters and memory-saving transforms as istiod: Pods exclude phase Failed and keep only the
// fields krteds reads; Nodes keep only labels and addresses. Nothing starts until the caller runs
// the client (client.RunAndWait).
func InformerInputs(client kube.Client, opts krt.OptionsBuilder) Inputs {
	if client.CrdWatcher() == nil {
		// DestinationRules and Sidecars are read through delayed informers, which wait for their
		// CRD; a cluster client does not watch CRDs until asked to.
		kube.EnableCrdWatcher(client)
	}
	return Inputs{
		Namespaces: krt.NewInformer[*corev1.Namespace](client, opts.WithName(NameNamespaces)...),
		Nodes: krt.NewFilteredInformer[*corev1.Node](client, kclient.Filter{
			ObjectTransform: kube.StripNodeUnusedFields,
		}, opts.WithName(NameNodes)...),
		Pods: krt.NewFilteredInformer[*corev1.Pod](client, kclient.Filter{
			ObjectTransform: kube.StripPodUnusedFields,
			FieldSelector:   "status.phase!=Failed",
		}, opts.WithName(NamePods)...),
		Services:       krt.NewInformer[*corev1.Service](client, opts.WithName(NameServices)...),
		EndpointSlices: krt.NewInformer[*discovery.EndpointSlice](client, opts.WithName(NameEndpointSlices)...),
		// Delayed informers start when the CRD appears; until then they are empty and synced.
		DestinationRules: krt.WrapClient(kclient.NewDelayedInformer[*networkingclient.DestinationRule](client, GVRDestinationRule,
			kubetypes.StandardInformer, kclient.Filter{}), opts.WithName(NameDestRules)...),
		Sidecars: krt.WrapClient(kclient.NewDelayedInformer[*networkingclient.Sidecar](client, GVRSidecar,
			kubetypes.StandardInformer, kclient.Filter{}), opts.WithName(NameSidecars)...),
	}
}

// CRDInstalled reports whether the client knows the resource's CRD now, and calls onInstalled
// once it appears if not.
func CRDInstalled(client kube.Client, gvr schema.GroupVersionResource, onInstalled func()) bool {
	w := client.CrdWatcher()
	if w == nil {
		return false
	}
	return w.KnownOrCallback(gvr, func(stop <-chan struct{}) { onInstalled() })
}

// StaticInputs builds empty, synced, mutable input collections (for tests and for feeding the
// graph by hand). Write to them with UpdateObject / DeleteObject.
type StaticInputs struct {
	Namespaces     krt.StaticCollection[*corev1.Namespace]
	Nodes          krt.StaticCollection[*corev1.Node]
	Pods           krt.StaticCollection[*corev1.Pod]
	Services       krt.StaticCollection[*corev1.Service]
	EndpointSlices krt.StaticCollection[*discovery.EndpointSlice]
	DestRules      krt.StaticCollection[*networkingclient.DestinationRule]
	Sidecars       krt.StaticCollection[*networkingclient.Sidecar]
}

// NewStaticInputs makes StaticInputs seeded with objs (Namespaces, Nodes, Pods, Services and
// EndpointSlices; other types are ignored).
func NewStaticInputs(opts krt.OptionsBuilder, objs ...any) StaticInputs {
	var (
		ns    []*corev1.Namespace
		nodes []*corev1.Node
		pods  []*corev1.Pod
		svcs  []*corev1.Service
		eps   []*discovery.EndpointSlice
		drs   []*networkingclient.DestinationRule
		scs   []*networkingclient.Sidecar
	)
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Namespace:
			ns = append(ns, o)
		case *corev1.Node:
			nodes = append(nodes, o)
		case *corev1.Pod:
			pods = append(pods, o)
		case *corev1.Service:
			svcs = append(svcs, o)
		case *discovery.EndpointSlice:
			eps = append(eps, o)
		case *networkingclient.DestinationRule:
			drs = append(drs, o)
		case *networkingclient.Sidecar:
			scs = append(scs, o)
		}
	}
	return StaticInputs{
		Namespaces:     krt.NewStaticCollection(nil, ns, opts.WithName(NameNamespaces)...),
		Nodes:          krt.NewStaticCollection(nil, nodes, opts.WithName(NameNodes)...),
		Pods:           krt.NewStaticCollection(nil, pods, opts.WithName(NamePods)...),
		Services:       krt.NewStaticCollection(nil, svcs, opts.WithName(NameServices)...),
		EndpointSlices: krt.NewStaticCollection(nil, eps, opts.WithName(NameEndpointSlices)...),
		DestRules:      krt.NewStaticCollection(nil, drs, opts.WithName(NameDestRules)...),
		Sidecars:       krt.NewStaticCollection(nil, scs, opts.WithName(NameSidecars)...),
	}
}

// Inputs returns the collections as graph Inputs.
func (s StaticInputs) Inputs() Inputs {
	return Inputs{
		Namespaces:       s.Namespaces,
		Nodes:            s.Nodes,
		Pods:             s.Pods,
		Services:         s.Services,
		EndpointSlices:   s.EndpointSlices,
		DestinationRules: s.DestRules,
		Sidecars:         s.Sidecars,
	}
}

// Apply writes (upsert) or, with del, removes obj in the matching collection.
func (s StaticInputs) Apply(obj any, del bool) {
	switch o := obj.(type) {
	case *corev1.Namespace:
		applyStatic(s.Namespaces, o, del)
	case *corev1.Node:
		applyStatic(s.Nodes, o, del)
	case *corev1.Pod:
		applyStatic(s.Pods, o, del)
	case *corev1.Service:
		applyStatic(s.Services, o, del)
	case *discovery.EndpointSlice:
		applyStatic(s.EndpointSlices, o, del)
	case *networkingclient.DestinationRule:
		applyStatic(s.DestRules, o, del)
	case *networkingclient.Sidecar:
		applyStatic(s.Sidecars, o, del)
	}
}

func applyStatic[T interface {
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
