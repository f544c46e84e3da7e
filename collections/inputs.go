package collections

import (
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/istio/pkg/kube/krt"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// Inputs are the Kubernetes collections the EDS graph reads. They come from informers over a
// cluster, from a folder of manifests, or from static collections (package sources).
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
