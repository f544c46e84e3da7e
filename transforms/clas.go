package transforms

import (
	"fmt"

	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
)

// CLAInputs are what the per-service CLA transform reads.
type CLAInputs struct {
	Services krt.Collection[collections.ServiceInfo]
	Policies krt.Collection[collections.ServicePolicy]
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

// NeedsClasses reports whether a service's CLAs may differ between proxies: a DestinationRule
// may apply (which one depends on the proxy's namespace), or its own settings read the proxy.
func NeedsClasses(svc *collections.ServiceInfo, sp *collections.ServicePolicy) bool {
	return DependsOnNamespace(sp) || DependsOnProxy(svc, PolicyFor(svc))
}

// ServiceCLAs builds every ClusterLoadAssignment of one service, marshalled once: one per cluster
// (non-UDP port, and each subset of the DestinationRules that may apply) and per distinct
// projection of the connected proxy classes. A service whose CLAs do not depend on the proxy gets
// one CLA per cluster and does not read the classes at all, so proxies connecting and leaving
// never recompute it.
func ServiceCLAs(in CLAInputs, report collections.Reporter) krt.TransformationMulti[collections.ServiceEndpoints, collections.Resource] {
	return func(ctx krt.HandlerContext, se collections.ServiceEndpoints) []collections.Resource {
		svc := krt.FetchOne(ctx, in.Services, krt.FilterKey(se.ResourceName()))
		if svc == nil {
			return nil
		}
		sp := krt.FetchOne(ctx, in.Policies, krt.FilterKey(se.ResourceName()))
		classes := []collections.ProxyClass{{}}
		if NeedsClasses(svc, sp) {
			classes = krt.Fetch(ctx, in.Classes)
		}
		subsets := append([]string{""}, sp.Subsets()...)
		var out []collections.Resource
		seen := map[string]bool{}
		for _, port := range ClusterPorts(svc) {
			for _, subset := range subsets {
				name := ClusterName(port.Port, subset, svc.Hostname)
				for _, c := range classes {
					cp := ClusterPolicyFor(svc, sp, c.Namespace, port.Port, subset)
					projected := ProjectFor(svc, cp, c)
					key := CLAKeyFor(name, cp, projected)
					if seen[key] {
						continue
					}
					seen[key] = true
					plan := PlanClusterCLA(name, svc, port, se.Endpoints, cp, projected)
					body, err := EncodeClusterCLA(plan, cp, projected)
					if err != nil {
						report.Report(collections.Problem{Kind: "Service", Object: se.ResourceName(), Reason: "marshal_failed", Detail: err.Error()})
						continue
					}
					r := Versioned(key, name, TypeCLA, body)
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
		}
		return out
	}
}
