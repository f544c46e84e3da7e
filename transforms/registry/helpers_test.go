package registry

import (
	"istio.io/istio/pkg/kube/krt"
	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
)

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
