package transforms

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/istio/pkg/config/protocol"
	"istio.io/istio/pkg/kube/krt"
	kubelabels "istio.io/istio/pkg/kube/labels"
	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
)

// WorkloadEntries converts WorkloadEntries as istiod's serviceentry registry does: labels are the
// spec's with the object's own on top; an entry whose health checks are enabled
// (proxy.istio.io/health-checks-enabled: "true") is left out until its Healthy condition is True.
// An entry without a usable address is reported and left out.
func WorkloadEntries(cfg collections.Config, systemNetwork krt.Singleton[string]) Checked[*networkingclient.WorkloadEntry, collections.WorkloadEntry] {
	return Checked[*networkingclient.WorkloadEntry, collections.WorkloadEntry]{Reads: []any{systemNetwork}, Fn: func(ctx krt.HandlerContext, we *networkingclient.WorkloadEntry) (*collections.ObjectProblems, *collections.WorkloadEntry) {
		if !workloadEntryHealthy(we) {
			return nil, nil
		}
		pr := &problems{kind: "WorkloadEntry", object: we.Namespace + "/" + we.Name}
		labels := maps.Clone(we.Spec.Labels)
		if len(we.Labels) > 0 {
			if labels == nil {
				labels = map[string]string{}
			}
			maps.Copy(labels, we.Labels)
		}
		// istiod names it from the entry's own metadata labels, not its spec's.
		workloadName := kubelabels.WorkloadNameFromWorkloadEntry(we.Name, we.Annotations, we.Labels)
		out, issues := ConvertWorkloadEntry(cfg, we.Name, we.Namespace, workloadName, &we.Spec, labels, func() string {
			return FetchSystemNetwork(ctx, systemNetwork)
		})
		for _, i := range issues {
			pr.add(i.reason, i.detail)
		}
		return pr.result(), out
	}}
}

// workloadEntryHealthy is istiod's isHealthy: without health checks an entry is healthy; with
// them, only when its Healthy condition is True.
func workloadEntryHealthy(we *networkingclient.WorkloadEntry) bool {
	if on, err := strconv.ParseBool(we.Annotations[collections.AnnotationHealthChecksEnabled]); err != nil || !on {
		return true
	}
	for _, c := range we.Status.Conditions {
		if c != nil && c.Type == collections.ConditionHealthy {
			return c.Status == "True"
		}
	}
	return false
}

// ConvertWorkloadEntry builds a WorkloadEntry (or a ServiceEntry's inline endpoint) as istiod's
// convertWorkloadEntryToWorkloadInstance: the network is the entry's, else its
// topology.istio.io/network label, else the default network (read only then); the locality is
// the entry's, else its locality label; the identity comes from its service account, and the
// tlsMode is its security.istio.io/tlsMode label, else "istio" with a service account, else
// "disabled". The entry is nil when its address cannot be served; a port number out of range is
// left out of its ports. Either is one issue.
func ConvertWorkloadEntry(cfg collections.Config, name, namespace, workloadName string, spec *networking.WorkloadEntry,
	labels map[string]string, systemNetwork func() string,
) (*collections.WorkloadEntry, []issue) {
	out := &collections.WorkloadEntry{Name: name, Namespace: namespace, Ports: spec.Ports}
	var issues []issue
	for n, p := range spec.Ports {
		if p < 1 || p > 65535 {
			issues = append(issues, issue{collections.ReasonInvalidPort, fmt.Sprintf("port %q number %d is out of range; left out", n, p)})
			if len(out.Ports) == len(spec.Ports) {
				out.Ports = maps.Clone(spec.Ports)
			}
			delete(out.Ports, n)
		}
	}
	addr := spec.Address
	switch {
	case addr == "":
		return nil, append(issues, issue{collections.ReasonInvalidAddress, "no address; entry ignored"})
	case strings.HasPrefix(addr, "unix://"):
		return nil, append(issues, issue{collections.ReasonInvalidAddress, fmt.Sprintf("address %q is a unix socket, which krteds does not serve; entry ignored", addr)})
	}
	if ip, err := netip.ParseAddr(addr); err == nil {
		if ip.Zone() != "" {
			return nil, append(issues, issue{collections.ReasonInvalidAddress, fmt.Sprintf("address %q has a zone; entry ignored", addr)})
		}
		out.Address = ip.String()
	} else {
		// A hostname: only DNS-resolved ServiceEntries use it.
		out.Address, out.DNSOnly = addr, true
	}
	label := func(k string) string { return labels[k] }
	localityLabel, locality := spec.Locality, collections.ParseLocality(spec.Locality)
	if localityLabel == "" {
		localityLabel, locality = podLocality(label)
	}
	network := spec.Network
	if network == "" {
		network = labels[collections.LabelTopologyNetwork]
	}
	if network == "" {
		network = systemNetwork()
	}
	tlsMode := collections.TLSModeDisabled
	if v, ok := labels[collections.LabelTLSMode]; ok {
		tlsMode = v
	} else if spec.ServiceAccount != "" {
		tlsMode = collections.TLSModeIstio
	}
	identity := ""
	if spec.ServiceAccount != "" {
		identity = internedIdentity(cfg.TrustDomain, namespace, spec.ServiceAccount)
	}
	canonicalName, canonicalRevision := canonicalService(func(k string) (string, bool) { v, ok := labels[k]; return v, ok }, workloadName)
	out.Meta = collections.NewEndpointMeta(
		collections.WorkloadMeta{
			PodLabels:         collections.InternLabels(labels),
			ServiceAccount:    identity,
			TLSMode:           tlsMode,
			Namespace:         namespace,
			WorkloadName:      workloadName,
			CanonicalName:     canonicalName,
			CanonicalRevision: canonicalRevision,
			Weight:            spec.Weight,
		},
		collections.TopologyMeta{
			LocalityLabel: localityLabel,
			Locality:      locality,
			ClusterID:     cfg.ClusterID,
			Network:       network,
		},
		"", "")
	return out, issues
}

// issue is one problem found in an object, with its reason.
type issue struct{ reason, detail string }

// ServiceEntryInputs are what the ServiceEntry conversion reads.
type ServiceEntryInputs struct {
	// Namespaces give the traffic-distribution annotation fallback.
	Namespaces    krt.Collection[*corev1.Namespace]
	SystemNetwork krt.Singleton[string]
	// Entries and EntriesByHost are the ServiceEntries, and an index of them by host: a host
	// several entries define is reported on the entries that do not define it.
	Entries       krt.Collection[*networkingclient.ServiceEntry]
	EntriesByHost krt.Index[string, *networkingclient.ServiceEntry]
}

// ServiceEntryHosts is the extractor of the ServiceEntries-by-host index.
func ServiceEntryHosts(se *networkingclient.ServiceEntry) []string { return se.Spec.Hosts }

// EntryHosts is the extractor of the converted ServiceEntries by host.
func EntryHosts(se collections.ServiceEntry) []string { return se.Hosts }

// ServiceEntries converts ServiceEntries as istiod's convertServices and
// convertServiceEntryToInstances do, with what krteds cannot serve reported and left out: a
// wildcard or single-label host, a host under the cluster's service domain, a port without a
// valid number or with a number already used, resolution DYNAMIC_DNS, and an inline endpoint
// that cannot be served (a hostname under STATIC). A host an older entry defines too is
// reported (ServiceEntryServices gives it to the oldest).
func ServiceEntries(cfg collections.Config, in ServiceEntryInputs) Checked[*networkingclient.ServiceEntry, collections.ServiceEntry] {
	return Checked[*networkingclient.ServiceEntry, collections.ServiceEntry]{Reads: []any{in.Namespaces, in.SystemNetwork, in.Entries}, Fn: func(ctx krt.HandlerContext, se *networkingclient.ServiceEntry) (*collections.ObjectProblems, *collections.ServiceEntry) {
		pr := &problems{kind: "ServiceEntry", object: se.Namespace + "/" + se.Name}
		spec := &se.Spec
		out := &collections.ServiceEntry{Name: se.Name, Namespace: se.Namespace, Created: se.CreationTimestamp.Time, Labels: se.Labels,
			MeshExternal: spec.Location == networking.ServiceEntry_MESH_EXTERNAL}
		switch spec.Resolution {
		case networking.ServiceEntry_NONE:
			out.Resolution = collections.Passthrough
		case networking.ServiceEntry_STATIC:
			out.Resolution = collections.ClientSideLB
		case networking.ServiceEntry_DNS:
			out.Resolution = collections.DNSLB
		case networking.ServiceEntry_DNS_ROUND_ROBIN:
			out.Resolution = collections.DNSRoundRobinLB
		default:
			pr.add(collections.ReasonUnsupported, fmt.Sprintf("resolution %s is not served; entry ignored", spec.Resolution))
			return pr.result(), nil
		}
		for _, h := range spec.Hosts {
			if reason := hostProblem(cfg, h); reason != "" {
				pr.add(collections.ReasonInvalidHost, fmt.Sprintf("host %q: %s; host ignored", h, reason))
				continue
			}
			if owner := olderEntry(ctx, in, se, h); owner != "" {
				pr.add(collections.ReasonInvalidHost, fmt.Sprintf("host %q: ServiceEntry %s defines it first; host ignored", h, owner))
			}
			if !slices.Contains(out.Hosts, h) {
				out.Hosts = append(out.Hosts, h)
			}
		}
		for i, p := range spec.Ports {
			if p == nil {
				continue
			}
			switch {
			case p.Number < 1 || p.Number > 65535:
				pr.add(collections.ReasonInvalidPort, fmt.Sprintf("port %d (%q) number %d is out of range; skipped", i, p.Name, p.Number))
				continue
			case slices.ContainsFunc(out.Ports, func(o collections.ServicePort) bool { return o.Port == int32(p.Number) }):
				pr.add(collections.ReasonInvalidPort, fmt.Sprintf("port %d (%q) number %d is used twice; skipped", i, p.Name, p.Number))
				continue
			}
			sp := collections.ServicePort{Name: p.Name, Port: int32(p.Number), Protocol: string(corev1.ProtocolTCP), AppProtocol: p.Protocol}
			if protocol.Parse(p.Protocol) == protocol.UDP {
				sp.Protocol = string(corev1.ProtocolUDP)
			}
			if p.TargetPort > 0 && p.TargetPort <= 65535 {
				sp.TargetPort = strconv.Itoa(int(p.TargetPort))
			}
			out.Ports = append(out.Ports, sp)
		}
		if len(spec.ExportTo) > 0 {
			out.ExportTo = slices.Compact(slices.Sorted(slices.Values(spec.ExportTo)))
		}
		var nsAnnotations map[string]string
		if ns := krt.FetchOne(ctx, in.Namespaces, krt.FilterKey(se.Namespace)); ns != nil {
			nsAnnotations = (*ns).Annotations
		}
		out.TrafficDistribution = TrafficDistributionOf(nil, se.Annotations, nsAnnotations)
		if spec.WorkloadSelector != nil {
			out.Selector = maps.Clone(spec.WorkloadSelector.Labels)
			if out.Selector == nil {
				out.Selector = map[string]string{}
			}
			if len(spec.Endpoints) > 0 {
				pr.add(collections.ReasonUnsupported, "endpoints and workloadSelector are both set; the endpoints are ignored")
			}
			return pr.result(), out
		}
		network, fetched := "", false
		systemNetwork := func() string {
			if !fetched {
				network, fetched = FetchSystemNetwork(ctx, in.SystemNetwork), true
			}
			return network
		}
		for i, e := range spec.Endpoints {
			if e == nil {
				continue
			}
			name := se.Name + "-" + strconv.Itoa(i)
			we, issues := ConvertWorkloadEntry(cfg, name, se.Namespace, name, e, e.Labels, systemNetwork)
			if we != nil && we.DNSOnly && !out.Resolution.IsDNS() {
				issues = append(issues, issue{collections.ReasonInvalidAddress,
					fmt.Sprintf("address %q is not an IP address, which resolution %s needs; endpoint ignored", e.Address, spec.Resolution)})
				we = nil
			}
			for _, is := range issues {
				pr.add(is.reason, fmt.Sprintf("endpoint %d: %s", i, is.detail))
			}
			if we != nil {
				out.Endpoints = append(out.Endpoints, *we)
			}
		}
		return pr.result(), out
	}}
}

// hostProblem says why an entry cannot define host ("" when it can). A host under the cluster's
// service domain would share its clusters' names with a Kubernetes Service's.
func hostProblem(cfg collections.Config, host string) string {
	switch {
	case host == "":
		return "empty"
	case strings.Contains(host, "*"):
		return "wildcard hosts get no EDS cluster"
	case !strings.Contains(host, "."):
		return "not a fully qualified domain name"
	case strings.HasSuffix(host, ".svc."+cfg.Domain):
		return "a Kubernetes Service hostname (under .svc." + cfg.Domain + ")"
	}
	return ""
}

// olderEntry names the oldest other entry defining host before se ("" when se is the oldest).
func olderEntry(ctx krt.HandlerContext, in ServiceEntryInputs, se *networkingclient.ServiceEntry, host string) string {
	for _, o := range in.EntriesByHost.Fetch(ctx, host) {
		if o.Namespace == se.Namespace && o.Name == se.Name {
			continue
		}
		if compareCreation(o.CreationTimestamp.Time, se.CreationTimestamp.Time, o.Name, se.Name, o.Namespace, se.Namespace) < 0 {
			return o.Namespace + "/" + o.Name
		}
	}
	return ""
}

// ServiceEntryServices gives each host the ServiceEntries define one service, from the oldest
// entry defining it (creation time, then name, then namespace), as istiod's convertServices
// builds it. Keyed by host, a host changing hands is one update, never two services at once.
func ServiceEntryServices() Single[krt.IndexObject[string, collections.ServiceEntry], *collections.ServiceInfo] {
	return Single[krt.IndexObject[string, collections.ServiceEntry], *collections.ServiceInfo]{Fn: func(_ krt.HandlerContext, byHost krt.IndexObject[string, collections.ServiceEntry]) **collections.ServiceInfo {
		if len(byHost.Objects) == 0 {
			return nil
		}
		se := slices.MinFunc(byHost.Objects, func(a, b collections.ServiceEntry) int {
			return compareCreation(a.Created, b.Created, a.Name, b.Name, a.Namespace, b.Namespace)
		})
		h := byHost.Key
		si := &collections.ServiceInfo{
			Name:                h,
			Namespace:           se.Namespace,
			Hostname:            h,
			Registry:            collections.RegistryServiceEntry,
			ServiceEntry:        se.Name,
			MeshExternal:        se.MeshExternal,
			Ports:               se.Ports,
			Resolution:          se.Resolution,
			Labels:              se.Labels,
			Selector:            se.Selector,
			ExportTo:            se.ExportTo,
			TrafficDistribution: se.TrafficDistribution,
			Type:                "ServiceEntry",
		}
		return &si
	}}
}

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
			out = append(out, collections.Endpoint{Address: we.Address, Port: num, PortName: p.Name, Health: collections.Healthy, Meta: we.Meta})
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
	add := func(addr string, ports func(string) uint32, pod string, meta *collections.EndpointMeta) {
		for _, p := range svc.Ports {
			num := ports(p.Name)
			if num == 0 {
				num = targetPortOf(p)
			}
			out = append(out, collections.Endpoint{Address: addr, Port: num, PortName: p.Name, Health: collections.Healthy, Pod: pod, Meta: meta})
		}
	}
	if se.Selector == nil {
		for _, we := range se.Endpoints {
			add(we.Address, func(n string) uint32 { return we.Ports[n] }, "", we.Meta)
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
			add(svc.Hostname, func(string) uint32 { return 0 }, "", meta)
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
				add(p.IPs[0], p.Port, p.Key, w.Meta)
			}
		}
	}
	for _, we := range selectedEntries(ctx, in, svc.Namespace, se.Selector) {
		if we.DNSOnly && !dns {
			continue
		}
		add(we.Address, func(n string) uint32 { return we.Ports[n] }, "", we.Meta)
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
