package transforms

import (
	"regexp"
	"strings"

	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/spiffe"
	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
)

// Workloads derives a Workload from each Pod that is not Failed. It Fetches the Pod's Node for
// its locality (unless the Pod carries a locality label) and the default network (the system
// namespace's topology.istio.io/network label, which the node carries; a pod without a known node
// reads it directly).
func Workloads(cfg collections.Config, nodes krt.Collection[collections.NodeLocality], systemNetwork krt.Singleton[string]) Single[*collections.Pod, collections.Workload] {
	return Single[*collections.Pod, collections.Workload]{Reads: []any{nodes, systemNetwork}, Fn: func(ctx krt.HandlerContext, pod *collections.Pod) *collections.Workload {
		if pod.Phase == corev1.PodFailed {
			return nil
		}
		localityLabel, locality := podLocality(pod.Labels.Value)
		network := pod.Labels.Value(collections.LabelTopologyNetwork)
		// The node gives the locality and the default network in one fetch (one dependency per
		// pod); only a pod without a known node reads the default network itself.
		var node *collections.NodeLocality
		if pod.NodeName != "" && (localityLabel == "" || network == "") {
			node = krt.FetchOne(ctx, nodes, krt.FilterKey(pod.NodeName))
		}
		if localityLabel == "" && node != nil {
			locality, localityLabel = node.Locality, node.LocalityLabel
		}
		if network == "" {
			if node != nil {
				network = node.Network
			} else {
				network = FetchSystemNetwork(ctx, systemNetwork)
			}
		}
		ips := pod.IPs
		return &collections.Workload{
			Name:        pod.Name,
			Namespace:   pod.Namespace,
			IPs:         ips,
			Ready:       len(ips) > 0 && podReadyForIPLookup(pod),
			HostNetwork: pod.HostNetwork,
			Meta:        workloadMeta(cfg, pod, localityLabel, locality, network),
		}
	}}
}

// SystemNetwork derives the default network: the topology.istio.io/network label of the system
// namespace ("" without one). As a singleton, only a change of that label reaches its readers.
func SystemNetwork(cfg collections.Config, namespaces krt.Collection[*corev1.Namespace]) (krt.TransformationEmpty[string], []any) {
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

// podLocality reads the pod's own locality label (topology.istio.io/locality, then the legacy
// istio-locality), with dots turned into slashes. The label is kept as given (it may have fewer
// than three segments).
func podLocality(label func(string) string) (string, collections.Locality) {
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

func workloadMeta(cfg collections.Config, pod *collections.Pod, localityLabel string, locality collections.Locality, network string) *collections.EndpointMeta {
	workloadName := WorkloadName(pod)
	tlsMode := collections.TLSModeDisabled
	if v, ok := pod.Labels.Get(collections.LabelTLSMode); ok {
		tlsMode = v
	}
	m := &collections.EndpointMeta{
		PodLabels:         pod.Labels,
		ServiceAccount:    collections.Intern(SpiffeIdentity(cfg.TrustDomain, pod.Namespace, pod.ServiceAccount)),
		TLSMode:           tlsMode,
		Namespace:         pod.Namespace,
		WorkloadName:      workloadName,
		CanonicalName:     CanonicalName(pod.Labels.Value, workloadName),
		CanonicalRevision: CanonicalRevision(pod.Labels.Value),
		LocalityLabel:     localityLabel,
		Locality:          locality,
		ClusterID:         cfg.ClusterID,
		Network:           network,
		NodeName:          pod.NodeName,
	}
	if pod.Subdomain != "" {
		m.SubDomain = pod.Subdomain
		m.HostName = pod.Hostname
		if m.HostName == "" {
			m.HostName = pod.Name
		}
	}
	return m
}

// RegistryOnlyMeta is the metadata of an endpoint without a known Pod: only the cluster and
// network labels, tlsMode disabled, no identity.
func RegistryOnlyMeta(cfg collections.Config, network string) *collections.EndpointMeta {
	return &collections.EndpointMeta{
		TLSMode:   collections.TLSModeDisabled,
		ClusterID: cfg.ClusterID,
		Network:   network,
	}
}

// SpiffeIdentity is spiffe://<trust-domain>/ns/<ns>/sa/<sa>; "" without a service account.
func SpiffeIdentity(trustDomain, namespace, serviceAccount string) string {
	if serviceAccount == "" {
		serviceAccount = "default"
	}
	return spiffe.MustGenSpiffeURIForTrustDomain(trustDomain, namespace, serviceAccount)
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

var cronJobName = regexp.MustCompile(`(.+)-\d{8,10}$`)

// WorkloadName follows istiod's GetWorkloadMetaFromPod: the service.istio.io/workload-name label;
// else, for a pod with a generateName and a controller owner, the owner's name with the
// Deployment (pod-template-hash) or Argo Rollout suffix removed, the OpenShift deploymentconfig
// label, or the CronJob name of a "<cronjob>-<8..10 digits>" Job; else the pod name.
func WorkloadName(pod *collections.Pod) string {
	if v, ok := pod.Labels.Get(collections.LabelWorkloadName); ok {
		return v
	}
	ref := pod.Controller
	if !pod.Generated || ref.Kind == "" {
		return pod.Name
	}
	hash := pod.Labels.Value(collections.LabelPodTemplateHash)
	rollouts := pod.Labels.Value(collections.LabelRolloutsHash)
	switch {
	case ref.Kind == "ReplicaSet" && hash != "" && strings.HasSuffix(ref.Name, hash):
		return strings.TrimSuffix(ref.Name, "-"+hash)
	case ref.Kind == "ReplicaSet" && rollouts != "" && strings.HasSuffix(ref.Name, rollouts):
		return strings.TrimSuffix(ref.Name, "-"+rollouts)
	case ref.Kind == "ReplicationController" && pod.Labels.Value(collections.LabelDeploymentConfig) != "":
		return pod.Labels.Value(collections.LabelDeploymentConfig)
	case ref.Kind == "Job":
		if m := cronJobName.FindStringSubmatch(ref.Name); len(m) == 2 {
			return m[1]
		}
	}
	return ref.Name
}

// CanonicalName is the first of service.istio.io/canonical-name, app.kubernetes.io/name, app,
// else the workload name.
func CanonicalName(label func(string) string, workloadName string) string {
	for _, k := range []string{collections.LabelCanonicalName, collections.LabelAppName, collections.LabelApp} {
		if v := label(k); v != "" {
			return v
		}
	}
	return workloadName
}

// CanonicalRevision is the first of service.istio.io/canonical-revision, app.kubernetes.io/version,
// version; istiod's default "latest" is written as "".
func CanonicalRevision(label func(string) string) string {
	for _, k := range []string{collections.LabelCanonicalRevision, collections.LabelAppVersion, collections.LabelVersion} {
		if v := label(k); v != "" {
			if v == "latest" {
				return ""
			}
			return v
		}
	}
	return ""
}
