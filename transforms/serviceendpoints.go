package transforms

import (
	"cmp"
	"slices"
	"strconv"

	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
)

// ServiceEndpointInputs are what a service's endpoint shard is built from.
type ServiceEndpointInputs struct {
	Slices          krt.Collection[collections.SliceEndpoints]
	SlicesByService krt.Index[string, collections.SliceEndpoints]
	// ServiceEntries give a ServiceEntry host its inline endpoints.
	ServiceEntries krt.Collection[collections.ServiceEntry]
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
//   - a ServiceEntry host: its inline endpoints, or, with a workloadSelector, the ready Pods and
//     the WorkloadEntries of its namespace it selects; a DNS entry without either resolves its
//     host.
func ServiceEndpointsOf(cfg collections.Config, in ServiceEndpointInputs) Single[*collections.ServiceInfo, collections.ServiceEndpoints] {
	reads := append([]any{in.Slices, in.ServiceEntries, in.WorkloadEntries}, in.Workloads.reads()...)
	if in.RemoteShards != nil {
		reads = append(reads, in.RemoteShards)
	}
	return Single[*collections.ServiceInfo, collections.ServiceEndpoints]{Reads: reads, Fn: func(ctx krt.HandlerContext, svc *collections.ServiceInfo) *collections.ServiceEndpoints {
		var all []*collections.Endpoint
		if svc.Registry == collections.RegistryServiceEntry {
			all = collections.AppendRefs(nil, serviceEntryEndpoints(ctx, cfg, in, svc))
		} else {
			all = serviceSliceEndpoints(ctx, in.SlicesByService, svc)
			if svc.Selector != nil && svc.Resolution == collections.ClientSideLB {
				all = collections.AppendRefs(all, selectedByService(ctx, in, svc))
			}
		}
		out := &collections.ServiceEndpoints{
			Hostname:  svc.Hostname,
			Namespace: svc.Namespace,
			Name:      svc.Name,
			Registry:  svc.Registry,
			ClusterID: cfg.ClusterID,
			Endpoints: collections.MergeEndpointsInPlace(all), // all is this call's own
		}
		if in.RemoteShards != nil && svc.Registry == collections.RegistryKubernetes {
			if r := krt.FetchOne(ctx, in.RemoteShards, krt.FilterKey(svc.ResourceName())); r != nil && len(r.Endpoints) > 0 {
				// One shard per cluster, in cluster order (istiod's shard order); each remote
				// shard is de-duplicated within its cluster only.
				out.Endpoints = append(out.Endpoints, r.Endpoints...)
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
	wes = slices.DeleteFunc(wes, func(w collections.WorkloadEntry) bool { return !subsetMatch(w.Meta.Label, selector) })
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

// serviceEntryEndpoints gives a ServiceEntry host's endpoints on each of its ports, as istiod's
// convertWorkloadInstanceToServiceInstance: the port the workload maps the port's name to, else
// the port's targetPort, else its number.
func serviceEntryEndpoints(ctx krt.HandlerContext, cfg collections.Config, in ServiceEndpointInputs, svc *collections.ServiceInfo) []collections.Endpoint {
	se := krt.FetchOne(ctx, in.ServiceEntries, krt.FilterKey(svc.Namespace+"/"+svc.ServiceEntry))
	if se == nil {
		return nil
	}
	dns := svc.Resolution.IsDNS()
	var out []collections.Endpoint
	// A selected Pod is Healthy, as istiod's pod cache builds its workload instance; an inline
	// endpoint, a WorkloadEntry and the host itself carry no health (UNKNOWN), as
	// convertWorkloadEntryToWorkloadInstance and convertServiceEntryToInstances leave it.
	add := func(addr string, ports func(string) uint32, pod string, health collections.HealthStatus, meta *collections.EndpointMeta) {
		for _, p := range svc.Ports {
			num := ports(p.Name)
			if num == 0 {
				num = targetPortOf(p)
			}
			out = append(out, collections.Endpoint{Address: addr, Port: num, PortName: p.Name, Health: health, Pod: pod, Meta: meta})
		}
	}
	if se.Selector == nil {
		for _, we := range se.Endpoints {
			add(we.Address, func(n string) uint32 { return we.Ports[n] }, "", collections.Unknown, we.Meta)
		}
		if len(se.Endpoints) == 0 && dns {
			// istiod's hostnameToServiceInstance: Envoy resolves the host itself.
			meta := collections.NewEndpointMeta(
				collections.WorkloadMeta{
					TLSMode:       collections.TLSModeDisabled,
					Namespace:     svc.Namespace,
					WorkloadName:  svc.ServiceEntry,
					CanonicalName: svc.ServiceEntry,
				},
				collections.TopologyMeta{
					ClusterID: cfg.ClusterID,
				},
				"", "")
			add(svc.Hostname, func(string) uint32 { return 0 }, "", collections.Unknown, meta)
		}
		return out
	}
	// The ready Pods of the namespace that may match: a filtered Fetch, so that only a change
	// of such a Pod recomputes the entry, and no index over every Pod is kept for the few
	// entries that select Pods.
	pods := krt.Fetch(ctx, in.Workloads.Pods, krt.FilterGeneric(func(o any) bool {
		p := o.(*collections.Pod)
		return p.Namespace() == svc.Namespace && len(p.IPs) > 0 && podReadyForIPLookup(p) && mayMatchAugmented(p.Labels, se.Selector)
	}))
	if len(pods) > 0 {
		workloads := workloadsOf(ctx, cfg, in.Workloads, pods)
		slices.SortFunc(pods, func(a, b *collections.Pod) int { return cmp.Compare(a.Name(), b.Name()) })
		for _, p := range pods {
			// The selector is matched again on the augmented labels, as istiod matches them.
			if w := workloads.Get(p.Key); w != nil && subsetMatch(w.Meta.Label, se.Selector) {
				add(p.IPs[0], p.Port, p.Key, collections.Healthy, w.Meta)
			}
		}
	}
	for _, we := range selectedEntries(ctx, in, svc.Namespace, se.Selector) {
		if we.DNSOnly && !dns {
			continue
		}
		add(we.Address, func(n string) uint32 { return we.Ports[n] }, "", collections.Unknown, we.Meta)
	}
	return out
}

// mayMatchAugmented reports whether a pod's labels can match the selector once augmented: every
// label matches, or is one the topology sets.
func mayMatchAugmented(labels collections.Labels, selector map[string]string) bool {
	for k, want := range selector {
		switch k {
		case collections.LabelTopologyRegion, collections.LabelTopologyZone, collections.LabelTopologySubzone,
			collections.LabelTopologyCluster, collections.LabelHostname, collections.LabelTopologyNetwork:
			continue
		}
		if v, ok := labels.Get(k); !ok || v != want {
			return false
		}
	}
	return true
}

// targetPortOf is a ServiceEntry port's targetPort, else its number.
func targetPortOf(p collections.ServicePort) uint32 {
	if n, err := strconv.Atoi(p.TargetPort); err == nil && n > 0 {
		return uint32(n)
	}
	return uint32(p.Port)
}
