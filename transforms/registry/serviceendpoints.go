package registry

import (
	"cmp"
	"slices"
	"strconv"

	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// ServiceEndpointInputs are what a service's endpoint shard is built from.
type ServiceEndpointInputs struct {
	Slices          krt.Collection[collections.SliceEndpoints]
	SlicesByService krt.Index[string, collections.SliceEndpoints]
	// ServiceEntries, indexed by "<namespace>/<host>", give a ServiceEntry host its endpoints.
	ServiceEntries         krt.Collection[collections.ServiceEntry]
	EntriesByNamespaceHost krt.Index[string, collections.ServiceEntry]
	// WorkloadEntries are selected by Services and ServiceEntries of their namespace.
	WorkloadEntries            krt.Collection[collections.WorkloadEntry]
	WorkloadEntriesByNamespace krt.Index[string, collections.WorkloadEntry]
	// Workloads give the Pods a ServiceEntry's workloadSelector may select.
	Workloads WorkloadInputs
	// RemoteShards (nil in a single-cluster mesh) hold, by service key, the endpoints the remote
	// clusters have for it, in cluster order.
	RemoteShards krt.Collection[collections.ServiceEndpoints]
}

// ByNamespace is the extractor of a by-namespace index of WorkloadEntries.
func ByNamespace(w collections.WorkloadEntry) []string { return []string{w.Namespace} }

// ServiceEndpointsOf builds one service's endpoint shard, de-duplicated by (address, port name),
// healthiest copy first, in a stable order:
//   - a Kubernetes Service: the endpoints of its EndpointSlices and, when it has a selector and
//     is not headless, the WorkloadEntries of its namespace it selects (istiod's
//     serviceInstancesFromWorkloadInstances);
//   - a ServiceEntry host in a namespace: those of each entry of the namespace defining it
//     (serviceEntryEndpoints): its inline endpoints, or, with a workloadSelector, the ready Pods
//     and the WorkloadEntries of its namespace it selects; a DNS entry without either resolves
//     its host.
func ServiceEndpointsOf(cfg collections.Config, in ServiceEndpointInputs) transforms.Single[*collections.ServiceInfo, collections.ServiceEndpoints] {
	reads := append([]any{in.Slices, in.ServiceEntries, in.WorkloadEntries}, in.Workloads.Reads()...)
	if in.RemoteShards != nil {
		reads = append(reads, in.RemoteShards)
	}
	return transforms.Single[*collections.ServiceInfo, collections.ServiceEndpoints]{Reads: reads, Fn: func(ctx krt.HandlerContext, svc *collections.ServiceInfo) *collections.ServiceEndpoints {
		var all []*collections.Endpoint
		var cause collections.Cause
		if svc.Registry == collections.RegistryServiceEntry {
			all = collections.AppendRefs(nil, serviceEntryEndpoints(ctx, cfg, in, svc))
		} else {
			all, cause = serviceSliceEndpoints(ctx, in.SlicesByService, svc)
			if svc.Selector != nil && svc.Resolution == collections.ClientSideLB {
				all = collections.AppendRefs(all, selectedByService(ctx, in, svc))
			}
		}
		eps, dropped := collections.MergeRecorded(all) // all is this call's own
		out := &collections.ServiceEndpoints{
			Hostname:  svc.Hostname,
			Namespace: svc.Namespace,
			Name:      svc.Name,
			Registry:  svc.Registry,
			ClusterID: cfg.ClusterID,
			Endpoints: eps,
			Dropped:   dropped,
			Cause:     cause,
		}
		if in.RemoteShards != nil && svc.Registry == collections.RegistryKubernetes {
			if r := krt.FetchOne(ctx, in.RemoteShards, krt.FilterKey(svc.ResourceName())); r != nil && len(r.Endpoints) > 0 {
				// One shard per cluster, in cluster order (istiod's shard order); each remote
				// shard is de-duplicated within its cluster only.
				out.Endpoints = append(out.Endpoints, r.Endpoints...)
				out.Cause = out.Cause.Later(r.Cause)
				slices.SortStableFunc(out.Endpoints, func(a, b *collections.Endpoint) int { return cmp.Compare(a.Meta.ClusterID, b.Meta.ClusterID) })
			}
		}
		return out
	}}
}

// selectedEntries fetches the WorkloadEntries of the namespace carrying every selector label, by
// name.
func selectedEntries(ctx krt.HandlerContext, in ServiceEndpointInputs, namespace string, selector map[string]string) []collections.WorkloadEntry {
	wes := in.WorkloadEntriesByNamespace.Fetch(ctx, namespace)
	wes = slices.DeleteFunc(wes, func(w collections.WorkloadEntry) bool { return !transforms.SubsetMatch(w.Meta.Label, selector) })
	slices.SortFunc(wes, func(a, b collections.WorkloadEntry) int { return cmp.Compare(a.Name, b.Name) })
	return wes
}

// selectedByService gives the endpoints of the WorkloadEntries a Kubernetes Service selects, on
// each of its cluster ports, mapped as istiod's serviceInstanceFromWorkloadInstance: a numeric
// target port is used unless the entry maps the service port's name; a named target port must
// be mapped by the entry, or the entry is left out of that port.
func selectedByService(ctx krt.HandlerContext, in ServiceEndpointInputs, svc *collections.ServiceInfo) []collections.Endpoint {
	var out []collections.Endpoint
	for _, we := range selectedEntries(ctx, in, svc.Namespace, svc.Selector) {
		if we.DNSOnly {
			continue
		}
		for _, p := range ClusterPorts(svc) {
			num, name, explicit := uint32(p.Port), p.Name, false
			if n, err := strconv.Atoi(p.TargetPort); err == nil && n > 0 {
				num = uint32(n)
			} else if p.TargetPort != "" && p.TargetPort != "0" {
				name, explicit = p.TargetPort, true
			}
			if m := we.Ports[name]; m != 0 {
				num = m
			} else if explicit {
				continue
			}
			// istiod sets no health on a WorkloadEntry's endpoint (UNKNOWN on the wire).
			out = append(out, collections.Endpoint{Address: we.Address, Port: num, PortName: p.Name, Health: collections.Unknown, Meta: we.Meta})
		}
	}
	return out
}

// targetPortOf is a ServiceEntry port's targetPort, else its number.
func targetPortOf(p collections.ServicePort) uint32 {
	if n, err := strconv.Atoi(p.TargetPort); err == nil && n > 0 {
		return uint32(n)
	}
	return uint32(p.Port)
}
