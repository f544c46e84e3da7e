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

// workloadFn derives workloads from Kubernetes Pods, reduced as every source reduces them (a
// Failed Pod gives none).
func workloadFn(cfg collections.Config, nodes krt.Collection[collections.NodeLocality], network krt.Singleton[string]) func(*corev1.Pod) *collections.Workload {
	fn := Workloads(cfg, nodes, network).Fn
	return func(k *corev1.Pod) *collections.Workload {
		p := collections.NewPod(k)
		if p == nil {
			return nil
		}
		return fn(krt.TestingDummyContext{}, p)
	}
}
