package registry

import (
	"istio.io/istio/pkg/kube/krt"
	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
)

// StaticNetwork is the default-network singleton the namespaces give (the system namespace's
// label), for transforms run on fixed objects (tests, fakes).
func StaticNetwork(stop <-chan struct{}, nss ...*corev1.Namespace) krt.Singleton[string] {
	v := ""
	for _, ns := range nss {
		if ns.Name == collections.DefaultSystemNamespace {
			v = ns.Labels[collections.LabelTopologyNetwork]
		}
	}
	return krt.NewStatic(&v, true, krt.WithStop(stop))
}

// StaticWorkloadInputs builds what workloads are derived from, for transforms run on fixed
// objects (tests, fakes): the Pods among objs (reduced as every source reduces them, Failed ones
// left out), the Nodes' localities, and the default network from the Namespaces. Other objects
// are ignored. The collections stop with stop.
func StaticWorkloadInputs(stop <-chan struct{}, objs ...any) WorkloadInputs {
	var (
		pods []*collections.Pod
		raw  []*corev1.Node
		nss  []*corev1.Namespace
	)
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Pod:
			if p := collections.NewPod(o); p != nil {
				pods = append(pods, p)
			}
		case *corev1.Node:
			raw = append(raw, o)
		case *corev1.Namespace:
			nss = append(nss, o)
		}
	}
	network := StaticNetwork(stop, nss...)
	var nodes []*collections.NodeLocality
	for _, n := range raw {
		nodes = append(nodes, *NodeLocalities(network).Fn(krt.TestingDummyContext{}, n))
	}
	pc := krt.NewStaticCollection(nil, pods, krt.WithStop(stop))
	return WorkloadInputs{
		Pods:          pc,
		Nodes:         krt.NewStaticCollection(nil, nodes, krt.WithStop(stop)),
		SystemNetwork: network,
		ReadyPodsByIP: krt.NewIndex(pc, "readyByIP", ReadyPodIPs),
	}
}
