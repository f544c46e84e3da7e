package registry

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// A ServiceEntry host is a service per namespace, as istiod's serviceentry registry keys its
// services by host and namespace: the entries of one namespace defining a host are one service
// (their endpoints merged, its settings the oldest entry's), and entries of several namespaces
// defining a host are several services, of which each proxy sees one (PickHostNamespace).

// EntryNamespaceHosts is the extractor of the converted ServiceEntries by "<namespace>/<host>".
func EntryNamespaceHosts(se collections.ServiceEntry) []string {
	out := make([]string, len(se.Hosts))
	for i, h := range se.Hosts {
		out[i] = se.Namespace + "/" + h
	}
	return out
}

// compareEntries orders the entries of one namespace as istiod's sortServicesByCreationTime:
// by creation time, then name.
func compareEntries(a, b collections.ServiceEntry) int {
	return transforms.CompareCreation(a.Created, b.Created, a.Name, b.Name, a.Namespace, b.Namespace)
}

// EntryHostServices builds the service of each host in each namespace whose ServiceEntries
// define it (the index object's key is "<namespace>/<host>", its objects those entries): the
// oldest entry's settings (istiod's ServiceIndex.HostnameAndNamespace keeps the oldest), with the
// ports of the other entries added where istiod's sidecar scope merges them (appendSidecarServices:
// an entry of another resolution, labels, workloadSelector or exportTo adds none; a port number
// already there is not added again). SharedHost says entries of other namespaces define the host
// too (entriesByHost indexes entries by host).
func EntryHostServices(cfg collections.Config, entries krt.Collection[collections.ServiceEntry], entriesByHost krt.Index[string, collections.ServiceEntry]) transforms.Single[krt.IndexObject[string, collections.ServiceEntry], *collections.ServiceInfo] {
	return transforms.Single[krt.IndexObject[string, collections.ServiceEntry], *collections.ServiceInfo]{Reads: []any{entries}, Fn: func(ctx krt.HandlerContext, byNsHost krt.IndexObject[string, collections.ServiceEntry]) **collections.ServiceInfo {
		if len(byNsHost.Objects) == 0 {
			return nil
		}
		ns, h, _ := strings.Cut(byNsHost.Key, "/")
		sorted := slices.SortedFunc(slices.Values(byNsHost.Objects), compareEntries)
		base := sorted[0]
		ports := base.Ports
		for _, e := range sorted[1:] {
			if canMergeEntries(base, e) == "" {
				ports = mergePorts(ports, e.Ports)
			}
		}
		shared := slices.ContainsFunc(entriesByHost.Fetch(ctx, h), func(o collections.ServiceEntry) bool { return o.Namespace != ns })
		si := &collections.ServiceInfo{
			Name:                h,
			Namespace:           ns,
			Hostname:            h,
			Registry:            collections.RegistryServiceEntry,
			ServiceEntry:        base.Name,
			Created:             base.Created,
			SharedHost:          shared,
			MeshExternal:        base.MeshExternal,
			Ports:               ports,
			Resolution:          base.Resolution,
			Labels:              base.Labels,
			Selector:            base.Selector,
			ExportTo:            base.ExportTo,
			TrafficDistribution: base.TrafficDistribution,
			Type:                "ServiceEntry",
			// istiod's cluster-local rule reads the hostname, whatever registry defines it.
			ClusterLocal: cfg.MultiCluster && cfg.IsClusterLocal(h),
		}
		return &si
	}}
}

// canMergeEntries is istiod's canMergeServices for two entries of one namespace and host: ""
// when the later one's ports may join the older one's service, else the setting that differs.
func canMergeEntries(older, e collections.ServiceEntry) string {
	switch {
	case older.Resolution != e.Resolution:
		return "resolution"
	case !maps.Equal(older.Labels, e.Labels):
		return "labels"
	case !maps.Equal(older.Selector, e.Selector) || (older.Selector == nil) != (e.Selector == nil):
		return "workloadSelector"
	case !slices.Equal(older.ExportTo, e.ExportTo):
		return "exportTo"
	}
	return ""
}

// mergePorts adds to ports those of more whose numbers it lacks, in more's order (a new list).
func mergePorts(ports, more []collections.ServicePort) []collections.ServicePort {
	var out []collections.ServicePort
	for _, p := range more {
		if !slices.ContainsFunc(ports, func(o collections.ServicePort) bool { return o.Port == p.Port }) {
			if out == nil {
				out = slices.Clone(ports)
			}
			out = append(out, p)
		}
	}
	if out == nil {
		return ports
	}
	return out
}

// unmergeable names the oldest other entry of se's namespace defining host h when se's ports
// cannot all join its service (istiod's canMergeServices fails, and se has a port number the
// older entry lacks), with the setting that differs; "" when nothing of se is lost.
func unmergeable(ctx krt.HandlerContext, in ServiceEntryInputs, se *networkingclient.ServiceEntry, out *collections.ServiceEntry, h string) (base, unlike string) {
	var oldest *networkingclient.ServiceEntry
	for _, o := range in.EntriesByHost.Fetch(ctx, h) {
		if o.Namespace != se.Namespace || o.Name == se.Name || resolutionOf(o.Spec.Resolution) < 0 ||
			transforms.CompareCreation(o.CreationTimestamp.Time, se.CreationTimestamp.Time, o.Name, se.Name, "", "") > 0 {
			continue
		}
		if oldest == nil || transforms.CompareCreation(o.CreationTimestamp.Time, oldest.CreationTimestamp.Time, o.Name, oldest.Name, "", "") < 0 {
			oldest = o
		}
	}
	if oldest == nil {
		return "", ""
	}
	older := collections.ServiceEntry{Resolution: collections.Resolution(resolutionOf(oldest.Spec.Resolution)), Labels: oldest.Labels}
	if sel := oldest.Spec.WorkloadSelector; sel != nil {
		older.Selector = sel.Labels
		if older.Selector == nil {
			older.Selector = map[string]string{}
		}
	}
	if len(oldest.Spec.ExportTo) > 0 {
		older.ExportTo = slices.Compact(slices.Sorted(slices.Values(oldest.Spec.ExportTo)))
	}
	unlike = canMergeEntries(older, *out)
	if unlike == "" {
		return "", ""
	}
	for _, p := range out.Ports {
		if !slices.ContainsFunc(oldest.Spec.Ports, func(o *networking.ServicePort) bool { return o != nil && int32(o.Number) == p.Port }) {
			return oldest.Namespace + "/" + oldest.Name, unlike
		}
	}
	return "", ""
}

// resolutionOf is the resolution of a ServiceEntry's spec, -1 for one krteds does not serve.
func resolutionOf(r networking.ServiceEntry_Resolution) int {
	switch r {
	case networking.ServiceEntry_NONE:
		return int(collections.Passthrough)
	case networking.ServiceEntry_STATIC:
		return int(collections.ClientSideLB)
	case networking.ServiceEntry_DNS:
		return int(collections.DNSLB)
	case networking.ServiceEntry_DNS_ROUND_ROBIN:
		return int(collections.DNSRoundRobinLB)
	}
	return -1
}

// serviceEntryEndpoints gives the endpoints of a ServiceEntry host in a namespace: those of every
// entry of the namespace defining it, oldest first, as istiod's
// mergeServicesInstancesByNamespaceHost merges them. Each entry's endpoints are on each of its own
// ports (named as it names them), as convertWorkloadInstanceToServiceInstance maps them: the
// port the workload maps the port's name to, else the port's targetPort, else its number. A
// DNS_ROUND_ROBIN entry adds no endpoint on a port number an earlier endpoint has (Envoy's
// LOGICAL_DNS cluster takes one). A host name is an endpoint of a DNS service only (istiod's
// endpoint builder drops it from EDS).
func serviceEntryEndpoints(ctx krt.HandlerContext, cfg collections.Config, in ServiceEndpointInputs, svc *collections.ServiceInfo) []collections.Endpoint {
	entries := in.EntriesByNamespaceHost.Fetch(ctx, svc.Namespace+"/"+svc.Hostname)
	slices.SortFunc(entries, compareEntries)
	dnsService := svc.Resolution.IsDNS()
	var out []collections.Endpoint
	seen := map[int32]bool{} // port numbers with an endpoint
	for _, se := range entries {
		roundRobin := se.Resolution == collections.DNSRoundRobinLB
		// A selected Pod is Healthy, as istiod's pod cache builds its workload instance; an
		// inline endpoint, a WorkloadEntry and the host itself carry no health (UNKNOWN), as
		// convertWorkloadEntryToWorkloadInstance and convertServiceEntryToInstances leave it.
		add := func(addr string, ports func(string) uint32, pod string, health collections.HealthStatus, meta *collections.EndpointMeta) {
			if !dnsService {
				if _, err := netip.ParseAddr(addr); err != nil {
					return
				}
			}
			for _, p := range se.Ports {
				if roundRobin && seen[p.Port] {
					continue
				}
				seen[p.Port] = true
				num := ports(p.Name)
				if num == 0 {
					num = targetPortOf(p)
				}
				out = append(out, collections.Endpoint{Address: addr, Port: num, PortName: p.Name, Health: health, Pod: pod, Meta: meta})
			}
		}
		addEntryEndpoints(ctx, cfg, in, se, svc.Hostname, add)
	}
	return out
}

// addEntryEndpoints adds one entry's workloads: its inline endpoints, or the host itself
// (hostname) for a DNS entry without any (istiod's hostnameToServiceInstance: Envoy resolves it), or, with a
// workloadSelector, the ready Pods and WorkloadEntries of its namespace it selects (a host-name
// WorkloadEntry for a DNS entry only), Pods first, each by name.
func addEntryEndpoints(ctx krt.HandlerContext, cfg collections.Config, in ServiceEndpointInputs, se collections.ServiceEntry, hostname string,
	add func(addr string, ports func(string) uint32, pod string, health collections.HealthStatus, meta *collections.EndpointMeta),
) {
	dns := se.Resolution.IsDNS()
	if se.Selector == nil {
		for _, we := range se.Endpoints {
			add(we.Address, func(n string) uint32 { return we.Ports[n] }, "", collections.Unknown, we.Meta)
		}
		if len(se.Endpoints) == 0 && dns {
			meta := collections.NewEndpointMeta(
				collections.WorkloadMeta{TLSMode: collections.TLSModeDisabled, Namespace: se.Namespace, WorkloadName: se.Name, CanonicalName: se.Name},
				collections.TopologyMeta{ClusterID: cfg.ClusterID}, "", "")
			add(hostname, func(string) uint32 { return 0 }, "", collections.Unknown, meta)
		}
		return
	}
	// The ready Pods of the namespace that may match: a filtered Fetch, so that only a change
	// of such a Pod recomputes the entry, and no index over every Pod is kept for the few
	// entries that select Pods.
	pods := krt.Fetch(ctx, in.Workloads.Pods, krt.FilterGeneric(func(o any) bool {
		p := o.(*collections.Pod)
		return p.Namespace() == se.Namespace && len(p.IPs) > 0 && podReadyForIPLookup(p) && mayMatchAugmented(p.Labels, se.Selector)
	}))
	if len(pods) > 0 {
		workloads := workloadsOf(ctx, cfg, in.Workloads, pods)
		slices.SortFunc(pods, func(a, b *collections.Pod) int { return cmp.Compare(a.Name(), b.Name()) })
		for _, p := range pods {
			// The selector is matched again on the augmented labels, as istiod matches them.
			if w := workloads.Get(p.Key); w != nil && transforms.SubsetMatch(w.Meta.Label, se.Selector) {
				add(p.IPs[0], p.Port, p.Key, collections.Healthy, w.Meta)
			}
		}
	}
	for _, we := range selectedEntries(ctx, in, se.Namespace, se.Selector) {
		if we.DNSOnly && !dns {
			continue
		}
		add(we.Address, func(n string) uint32 { return we.Ports[n] }, "", collections.Unknown, we.Meta)
	}
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
