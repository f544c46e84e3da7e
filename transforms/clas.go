package transforms

import (
	"fmt"

	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
)

// CLAInputs are what the per-service CLA transform reads.
type CLAInputs struct {
	Services krt.Collection[collections.ServiceInfo]
	Classes  krt.Collection[collections.ProxyClass]
}

// DependsOnProxy reports whether a service's CLAs differ between proxies.
func DependsOnProxy(svc *collections.ServiceInfo, policy LBPolicy) bool {
	return svc.NodeLocal || (policy.Failover && len(policy.FailoverPriority) > 0)
}

// CLAKey is the key of the CLA of clusterName for a projected class.
func CLAKey(clusterName string, projected collections.ProxyClass) string {
	if k := ProjectionKey(projected); k != "" {
		return clusterName + "~" + k
	}
	return clusterName
}

// ServiceCLAs builds every ClusterLoadAssignment of one service, marshalled once: one per
// non-UDP port and per distinct projection of the connected proxy classes. A service whose CLAs
// do not depend on the proxy gets one CLA per port and does not read the classes at all, so
// proxies connecting and leaving never recompute it.
func ServiceCLAs(in CLAInputs, report collections.Reporter) krt.TransformationMulti[collections.ServiceEndpoints, collections.Resource] {
	return func(ctx krt.HandlerContext, se collections.ServiceEndpoints) []collections.Resource {
		svc := krt.FetchOne(ctx, in.Services, krt.FilterKey(se.ResourceName()))
		if svc == nil {
			return nil
		}
		policy := PolicyFor(svc)
		projections := []collections.ProxyClass{{}}
		if DependsOnProxy(svc, policy) {
			seen := map[string]bool{}
			projections = projections[:0]
			for _, c := range krt.Fetch(ctx, in.Classes) {
				p := Project(svc, policy, c)
				if k := p.Key(); !seen[k] {
					seen[k] = true
					projections = append(projections, p)
				}
			}
		}
		var out []collections.Resource
		for _, port := range ClusterPorts(svc) {
			name := ClusterName(port.Port, "", svc.Hostname)
			for _, p := range projections {
				plan := PlanCLA(name, svc, port, se.Endpoints, policy, p)
				r := Versioned(CLAKey(name, p), name, TypeCLA, plan.Encode())
				r.Service = se.ResourceName()
				for _, g := range plan.Groups {
					r.Endpoints += len(g.Endpoints)
				}
				if len(r.Body) > MaxResourceBytes {
					report.Report(collections.Problem{Kind: "Service", Object: se.ResourceName(), Reason: collections.ReasonResourceTooLarge,
						Detail: fmt.Sprintf("ClusterLoadAssignment %s is %d bytes, over the 4 MiB default gRPC message limit of xDS clients", name, len(r.Body))})
				}
				out = append(out, r)
			}
		}
		return out
	}
}
