package registry

import (
	"slices"
	"strings"

	"istio.io/istio/pkg/kube/krt"
	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
)

// WorkloadInputs are what a Pod's workload (its identity and topology) is derived from. The
// transforms that need workloads (endpoints, proxies) derive them from the Pods they fetch, so
// that a Pod written before the slice naming it is seen with it: no collection in between can
// lag behind and leave the slice's endpoints out for a moment.
type WorkloadInputs struct {
	Pods  krt.Collection[*collections.Pod]
	Nodes krt.Collection[*collections.NodeLocality]
	// SystemNetwork is the default network (the system namespace's network label).
	SystemNetwork krt.Singleton[string]
	// ReadyPodsByIP indexes the Pods found by address (Running or Pending, not being deleted,
	// Ready) by the IPBucket of each of their IPs.
	ReadyPodsByIP krt.Index[string, *collections.Pod]
	// Identities remembers the identities derived (nil: none is remembered).
	Identities *Identities
}

// Reads are the collections a transform over the inputs fetches.
func (in WorkloadInputs) Reads() []any { return []any{in.Pods, in.Nodes, in.SystemNetwork} }

// ReadyPodIPs is the extractor of the ReadyPodsByIP index: the buckets of a ready Pod's IPs.
func ReadyPodIPs(p *collections.Pod) []string {
	if len(p.IPs) == 0 || !podReadyForIPLookup(p) {
		return nil
	}
	out := make([]string, 0, len(p.IPs))
	for _, ip := range p.IPs {
		if b := IPBucket(ip); !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out
}

// Workloads are the workloads of some Pods, sorted by Pod key (one array, no map: a slice's
// recompute derives those of all its Pods).
type Workloads []collections.Workload

// Get is the workload of the Pod with that key, nil if there is none.
func (ws Workloads) Get(key string) *collections.Workload {
	if i, ok := slices.BinarySearchFunc(ws, key, func(w collections.Workload, k string) int { return strings.Compare(w.Key, k) }); ok {
		return &ws[i]
	}
	return nil
}

// FetchWorkloads fetches the Pods with these keys and derives their workloads: one dependency
// on the Pods, one on the Nodes they need, and the default network only when a pod has no known
// node. A missing Pod has no workload. keys is left as it is (krt's key filter sorts and
// de-duplicates the list it is given, in place, and keeps it).
func FetchWorkloads(ctx krt.HandlerContext, cfg collections.Config, in WorkloadInputs, keys []string) Workloads {
	if len(keys) == 0 {
		return nil
	}
	return workloadsOf(ctx, cfg, in, krt.Fetch(ctx, in.Pods, krt.FilterKeys(slices.Clone(keys)...)))
}

// ReadyWorkloadWithIP finds the ready Pod with that IP in the namespace and derives its workload.
// Several matches (host-network pods) resolve to the lowest name, so the result never depends on
// event order.
func ReadyWorkloadWithIP(ctx krt.HandlerContext, cfg collections.Config, in WorkloadInputs, namespace, ip string) *collections.Workload {
	var best *collections.Pod
	for _, p := range in.ReadyPodsByIP.Fetch(ctx, IPBucket(ip)) {
		if p.Namespace() != namespace || !slices.Contains(p.IPs, ip) {
			continue
		}
		if best == nil || p.Name() < best.Name() {
			best = p
		}
	}
	if best == nil {
		return nil
	}
	return workloadsOf(ctx, cfg, in, []*collections.Pod{best}).Get(best.Key)
}

// workloadsOf derives the workloads of pods, fetching the nodes they need in one go.
func workloadsOf(ctx krt.HandlerContext, cfg collections.Config, in WorkloadInputs, pods []*collections.Pod) Workloads {
	var names []string
	for _, p := range pods {
		if needsNode(p) {
			names = append(names, p.NodeName)
		}
	}
	// Sorted and unique: a slice of a thousand pods on a thousand nodes stays O(n log n).
	slices.Sort(names)
	names = slices.Compact(names)
	var nodes []*collections.NodeLocality
	if len(names) > 0 {
		nodes = krt.Fetch(ctx, in.Nodes, krt.FilterKeys(names...))
	}
	byName := func(n *collections.NodeLocality, name string) int { return strings.Compare(n.Name, name) }
	if !slices.IsSortedFunc(nodes, func(a, b *collections.NodeLocality) int { return strings.Compare(a.Name, b.Name) }) {
		slices.SortFunc(nodes, func(a, b *collections.NodeLocality) int { return strings.Compare(a.Name, b.Name) })
	}
	nodeOf := func(name string) *collections.NodeLocality {
		if i, ok := slices.BinarySearchFunc(nodes, name, byName); ok {
			return nodes[i]
		}
		return nil
	}
	network, fetched := "", false
	systemNetwork := func() string {
		if !fetched {
			network, fetched = FetchSystemNetwork(ctx, in.SystemNetwork), true
		}
		return network
	}
	out := make(Workloads, 0, len(pods))
	for _, p := range pods {
		if w, ok := workloadFrom(cfg, in.Identities, p, nodeOf(p.NodeName), systemNetwork); ok {
			out = append(out, w)
		}
	}
	if !slices.IsSortedFunc(out, compareWorkloads) {
		slices.SortFunc(out, compareWorkloads)
	}
	// A key fetched twice gives one workload.
	return slices.CompactFunc(out, func(a, b collections.Workload) bool { return a.Key == b.Key })
}

func compareWorkloads(a, b collections.Workload) int { return strings.Compare(a.Key, b.Key) }

// needsNode: the pod reads its node for its locality (unless it carries a locality label) or for
// the default network (unless it carries a network label).
func needsNode(p *collections.Pod) bool {
	if p.NodeName == "" {
		return false
	}
	label, _ := PodLocality(p.Labels.Value)
	return label == "" || p.Labels.Value(collections.LabelTopologyNetwork) == ""
}

// workloadFrom derives a Pod's workload (none for a Failed Pod) from its node (nil: unknown) and
// the default network (read only when the pod has neither a network label nor a known node).
func workloadFrom(cfg collections.Config, ids *Identities, pod *collections.Pod, node *collections.NodeLocality, systemNetwork func() string) (collections.Workload, bool) {
	if pod.Phase == corev1.PodFailed {
		return collections.Workload{}, false
	}
	localityLabel, locality := PodLocality(pod.Labels.Value)
	network := pod.Labels.Value(collections.LabelTopologyNetwork)
	if localityLabel == "" && node != nil {
		locality, localityLabel = node.Locality, node.LocalityLabel
	}
	if network == "" {
		if node != nil {
			network = node.Network
		} else {
			network = systemNetwork()
		}
	}
	ips := pod.IPs
	return collections.Workload{
		Key:         pod.Key,
		Name:        pod.Name(),
		Namespace:   pod.Namespace(),
		IPs:         ips,
		Ready:       len(ips) > 0 && podReadyForIPLookup(pod),
		Cause:       pod.Cause(),
		HostNetwork: pod.HostNetwork,
		Meta:        workloadMeta(cfg, ids, pod, localityLabel, locality, network),
	}, true
}

// SystemNetwork derives the default network of the cluster's endpoints: the network meshNetworks
// gives the cluster (fromRegistry), else the topology.istio.io/network label of the system
// namespace ("" without one). As a singleton, only a change of it reaches its readers.
func SystemNetwork(cfg collections.Config, namespaces krt.Collection[*corev1.Namespace]) (krt.TransformationEmpty[string], []any) {
	if n := cfg.RegistryNetworks[cfg.ClusterID]; n != "" {
		return func(krt.HandlerContext) *string { return &n }, nil
	}
	return func(ctx krt.HandlerContext) *string {
		network := ""
		if ns := krt.FetchOne(ctx, namespaces, krt.FilterKey(cfg.SystemNamespace)); ns != nil {
			network = (*ns).Labels[collections.LabelTopologyNetwork]
		}
		return &network
	}, []any{namespaces}
}

// FetchSystemNetwork reads the default network.
func FetchSystemNetwork(ctx krt.HandlerContext, s krt.Singleton[string]) string {
	if n := krt.FetchOne(ctx, s.AsCollection()); n != nil {
		return *n
	}
	return ""
}

// PodLocality reads the pod's own locality label (topology.istio.io/locality, then the legacy
// istio-locality), with dots turned into slashes. The label is kept as given (it may have fewer
// than three segments).
func PodLocality(label func(string) string) (string, collections.Locality) {
	v := label(collections.LabelLocality)
	if v == "" {
		v = label(collections.LabelLegacyLocality)
	}
	if v == "" {
		return "", collections.Locality{}
	}
	if !strings.Contains(v, "/") {
		v = strings.ReplaceAll(v, ".", "/")
	}
	return v, collections.ParseLocality(v)
}

// podReadyForIPLookup mirrors istiod's podsByIP admission: Running or Pending, not being deleted,
// Ready condition True.
func podReadyForIPLookup(pod *collections.Pod) bool {
	if pod.Deleting {
		return false
	}
	if pod.Phase != corev1.PodRunning && pod.Phase != corev1.PodPending {
		return false
	}
	return pod.Ready
}

func workloadMeta(cfg collections.Config, ids *Identities, pod *collections.Pod, localityLabel string, locality collections.Locality, network string) *collections.EndpointMeta {
	workloadName := WorkloadName(pod)
	tlsMode := collections.TLSModeDisabled
	if v, ok := pod.Labels.Get(collections.LabelTLSMode); ok {
		tlsMode = v
	}
	canonicalName, canonicalRevision := canonicalService(pod.Labels.Get, workloadName)
	m := collections.NewEndpointMeta(
		collections.WorkloadMeta{
			PodLabels:         pod.Labels,
			ServiceAccount:    identity(ids, cfg.TrustDomain, pod.Namespace(), pod.ServiceAccount),
			TLSMode:           tlsMode,
			Namespace:         pod.Namespace(),
			WorkloadName:      workloadName,
			CanonicalName:     canonicalName,
			CanonicalRevision: canonicalRevision,
		},
		collections.TopologyMeta{
			LocalityLabel: localityLabel,
			Locality:      locality,
			ClusterID:     cfg.ClusterID,
			Network:       network,
			NodeName:      pod.NodeName,
		},
		"", "")
	m.Annotations = pod.Annotations
	if sub := pod.Subdomain(); sub != "" {
		m.SubDomain = sub
		m.HostName = pod.Hostname()
		if m.HostName == "" {
			m.HostName = pod.Name()
		}
	}
	return m
}

// RegistryOnlyMeta is the metadata of an endpoint without a known Pod: only the cluster and
// network labels, tlsMode disabled, no identity.
func RegistryOnlyMeta(cfg collections.Config, network string) *collections.EndpointMeta {
	return collections.NewEndpointMeta(
		collections.WorkloadMeta{
			TLSMode: collections.TLSModeDisabled,
		},
		collections.TopologyMeta{
			ClusterID: cfg.ClusterID,
			Network:   network,
		},
		"", "")
}

// AugmentLabels copies the pod labels and adds the topology labels, as istiod: region, zone and
// subzone (each when set), topology.istio.io/cluster, kubernetes.io/hostname (when the node is
// known), and topology.istio.io/network, which istiod writes even when empty unless the pod set it.
func AugmentLabels(in map[string]string, clusterID string, l collections.Locality, node, network string) map[string]string {
	out := make(map[string]string, len(in)+6)
	for k, v := range in {
		out[k] = v
	}
	if l.Region != "" {
		out[collections.LabelTopologyRegion] = l.Region
	}
	if l.Zone != "" {
		out[collections.LabelTopologyZone] = l.Zone
	}
	if l.Subzone != "" {
		out[collections.LabelTopologySubzone] = l.Subzone
	}
	if clusterID != "" {
		out[collections.LabelTopologyCluster] = clusterID
	}
	if node != "" {
		out[collections.LabelHostname] = node
	}
	if out[collections.LabelTopologyNetwork] == "" {
		out[collections.LabelTopologyNetwork] = network
	}
	return out
}
