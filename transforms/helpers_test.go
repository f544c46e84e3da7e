package transforms

import (
	"testing"

	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"
	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
)

// networkOf is the default-network singleton the namespaces give (the system namespace's label).
func networkOf(t testing.TB, nss ...*corev1.Namespace) krt.Singleton[string] {
	t.Helper()
	v := ""
	for _, ns := range nss {
		if ns.Name == collections.DefaultSystemNamespace {
			v = ns.Labels[collections.LabelTopologyNetwork]
		}
	}
	return krt.NewStatic(&v, true, krt.WithStop(test.NewStop(t)))
}

// problemsOf lists the problems of a checked transform's result.
func problemsOf(p *collections.ObjectProblems) []collections.Problem {
	if p == nil {
		return nil
	}
	return p.Problems
}

// workloadInputs builds what workloads are derived from: the Pods among objs (reduced as every
// source reduces them, Failed ones left out), the Nodes' localities, and the default network from
// the Namespaces. Other objects are ignored.
func workloadInputs(t testing.TB, objs ...any) WorkloadInputs {
	t.Helper()
	stop := test.NewStop(t)
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
	network := networkOf(t, nss...)
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

// workloadFn derives a Kubernetes Pod's workload against the inputs (the Pod is reduced as every
// source reduces it; a Failed Pod has none).
func workloadFn(cfg collections.Config, in WorkloadInputs) func(*corev1.Pod) *collections.Workload {
	return func(k *corev1.Pod) *collections.Workload {
		p := collections.NewPod(k)
		if p == nil {
			return nil
		}
		return workloadsOf(krt.TestingDummyContext{}, cfg, in, []*collections.Pod{p}).Get(p.Key)
	}
}
