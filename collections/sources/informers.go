// Package sources builds the input collections of krteds' graph: informers over a Kubernetes
// client, a folder of manifests watched on disk, or static collections written by hand (tests,
// benchmarks). Whatever the source, the graph sees the same krt collections of the same objects.
//
// The manifests folder (Files) is a loop and a lock over four parts, each a type of its own with
// its own tests: the tree (the folder, its watches and symlinks), the reader (one file's bytes to
// its objects, without state), the owners (which file defines which object: a file's new content
// to writes and deletes) and the problem set (the Problems collection).
package sources

import (
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	securityclient "istio.io/client-go/pkg/apis/security/v1"
	"istio.io/istio/pkg/config/schema/gvr"
	"istio.io/istio/pkg/kube"
	"istio.io/istio/pkg/kube/kclient"
	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/kube/kubetypes"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/krteds/krteds/collections"
)

// IstioResources are the Istio kinds krteds reads, by kind name.
var IstioResources = map[string]schema.GroupVersionResource{
	"DestinationRule": gvr.DestinationRule, "Sidecar": gvr.Sidecar, "ServiceEntry": gvr.ServiceEntry, "WorkloadEntry": gvr.WorkloadEntry,
	"PeerAuthentication": gvr.PeerAuthentication,
}

// Informers builds the input collections as krt informers over the client, with the same
// filters as istiod: Pods exclude phase Failed and are kept as collections.Pod (only the fields
// krteds reads); EndpointSlices are kept as collections.Slice; Nodes keep only
// labels and addresses. Nothing starts until the caller runs the client (client.RunAndWait).
func Informers(client kube.Client, opts krt.OptionsBuilder) collections.Inputs {
	if client.CrdWatcher() == nil {
		// The Istio kinds are read through delayed informers, which wait for their
		// CRD; a cluster client does not watch CRDs until asked to.
		kube.EnableCrdWatcher(client)
	}
	clock := new(collections.InputClock)
	// The transform runs as the informer stores an object, before any handler hears of it: the
	// clock is marked before the change reaches any collection.
	marked := func(strip func(any) (any, error)) kclient.Filter {
		return kclient.Filter{ObjectTransform: func(o any) (any, error) {
			clock.Mark()
			if strip != nil {
				return strip(o)
			}
			return o, nil
		}}
	}
	return collections.Inputs{
		Namespaces:     krt.NewFilteredInformer[*corev1.Namespace](client, marked(nil), opts.WithName(collections.NameNamespaces)...),
		Nodes:          krt.NewFilteredInformer[*corev1.Node](client, marked(kube.StripNodeUnusedFields), opts.WithName(collections.NameNodes)...),
		Pods:           podInformer(client, clock, opts),
		Services:       krt.NewFilteredInformer[*corev1.Service](client, marked(nil), opts.WithName(collections.NameServices)...),
		EndpointSlices: sliceInformer(client, clock, opts),
		// Delayed informers start when the CRD appears; until then they are empty and synced.
		DestinationRules: krt.WrapClient(kclient.NewDelayedInformer[*networkingclient.DestinationRule](client, gvr.DestinationRule,
			kubetypes.StandardInformer, marked(nil)), opts.WithName(collections.NameDestRules)...),
		Sidecars: krt.WrapClient(kclient.NewDelayedInformer[*networkingclient.Sidecar](client, gvr.Sidecar,
			kubetypes.StandardInformer, marked(nil)), opts.WithName(collections.NameSidecars)...),
		ServiceEntries: krt.WrapClient(kclient.NewDelayedInformer[*networkingclient.ServiceEntry](client, gvr.ServiceEntry,
			kubetypes.StandardInformer, marked(nil)), opts.WithName(collections.NameServiceEntries)...),
		WorkloadEntries: krt.WrapClient(kclient.NewDelayedInformer[*networkingclient.WorkloadEntry](client, gvr.WorkloadEntry,
			kubetypes.StandardInformer, marked(nil)), opts.WithName(collections.NameWorkloadEntries)...),
		PeerAuthentications: krt.WrapClient(kclient.NewDelayedInformer[*securityclient.PeerAuthentication](client, gvr.PeerAuthentication,
			kubetypes.StandardInformer, marked(nil)), opts.WithName(collections.NamePeerAuthns)...),
		Clock: clock,
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
