// Package collections holds the element types of krteds' krt collections (the nouns of the
// dataflow: ServiceInfo, Workload, Endpoint, ...) and the constructors of its input collections.
package collections

import "slices"

// Config carries the mesh-wide settings that transforms read. It is immutable once the graph is
// built; changing it means building a new graph.
type Config struct {
	// Domain is the cluster DNS suffix (istiod: domainSuffix), default "cluster.local".
	Domain string
	// ClusterID names this registry's cluster (istiod: CLUSTER_ID), default "Kubernetes".
	ClusterID string
	// TrustDomain is the SPIFFE trust domain used for workload identities, default "cluster.local".
	TrustDomain string
	// SystemNamespace is the namespace whose topology.istio.io/network label gives the default
	// network, default "istio-system".
	SystemNamespace string
	// DiscoveryAddress is mesh config's defaultConfig.discoveryAddress ("host:port"), whose host
	// is cluster-local; "" is DefaultDiscoveryAddress(SystemNamespace).
	DiscoveryAddress string
	// ServiceSettings are mesh config's serviceSettings: hosts made cluster-local, or not (which
	// removes a default), over istiod's defaults (NewClusterLocalHosts).
	ServiceSettings []ServiceSetting
	// ClusterLocalHosts are more hostnames (a leading "*" is a wildcard) whose endpoints a proxy
	// sees only from its own cluster, as one more serviceSettings entry with clusterLocal true.
	// Cluster-local hosts matter only when the mesh has remote clusters.
	ClusterLocalHosts []string
	// clusterLocal is what the settings above give, built by WithDefaults.
	clusterLocal *ClusterLocalHosts
	// MultiCluster is set by the graph when the mesh has (or may get) remote clusters.
	MultiCluster bool
	// RegistryNetworks are meshNetworks' fromRegistry entries: the network of each cluster's
	// endpoints that carry no network label (before the system namespace's label).
	RegistryNetworks map[string]string
	// MeshGateways are meshNetworks' gateways given by address.
	MeshGateways []NetworkGateway
	// LRS points every EDS cluster's lrs_server at krteds itself (self), so that clients report
	// their load to it.
	LRS bool
	// LEDSThreshold, when positive, gives every ClusterLoadAssignment with more endpoints than
	// this a second form whose endpoints are LEDS collections (one per locality and priority),
	// served to Envoy clients on delta ADS: a one-endpoint change then sends one endpoint.
	LEDSThreshold int
}

// IsClusterLocal reports whether a hostname is cluster-local: istiod's defaults and the
// discovery address's host, changed by ServiceSettings and ClusterLocalHosts.
func (c Config) IsClusterLocal(hostname string) bool {
	if c.clusterLocal == nil {
		cl, _ := c.ClusterLocal()
		return cl.IsClusterLocal(hostname)
	}
	return c.clusterLocal.IsClusterLocal(hostname)
}

// ClusterLocal builds the cluster-local hosts of the configuration; the error says why the
// discovery address gave no host (the rest is built without it, as istiod does).
func (c Config) ClusterLocal() (ClusterLocalHosts, error) {
	addr := c.DiscoveryAddress
	if addr == "" {
		ns := c.SystemNamespace
		if ns == "" {
			ns = DefaultSystemNamespace
		}
		addr = DefaultDiscoveryAddress(ns)
	}
	domain := c.Domain
	if domain == "" {
		domain = DefaultDomain
	}
	settings := c.ServiceSettings
	if len(c.ClusterLocalHosts) > 0 {
		settings = append(slices.Clip(settings), ServiceSetting{Hosts: c.ClusterLocalHosts, ClusterLocal: true})
	}
	return NewClusterLocalHosts(domain, addr, settings)
}

// Defaults used by istiod and by krteds.
const (
	DefaultDomain          = "cluster.local"
	DefaultClusterID       = "Kubernetes"
	DefaultTrustDomain     = "cluster.local"
	DefaultSystemNamespace = "istio-system"
)

// DefaultConfig returns the istiod defaults.
func DefaultConfig() Config {
	return Config{
		Domain:          DefaultDomain,
		ClusterID:       DefaultClusterID,
		TrustDomain:     DefaultTrustDomain,
		SystemNamespace: DefaultSystemNamespace,
	}
}

// WithDefaults fills unset fields with the istiod defaults.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	if c.Domain == "" {
		c.Domain = d.Domain
	}
	if c.ClusterID == "" {
		c.ClusterID = d.ClusterID
	}
	if c.TrustDomain == "" {
		c.TrustDomain = d.TrustDomain
	}
	if c.SystemNamespace == "" {
		c.SystemNamespace = d.SystemNamespace
	}
	if c.DiscoveryAddress == "" {
		c.DiscoveryAddress = DefaultDiscoveryAddress(c.SystemNamespace)
	}
	cl, _ := c.ClusterLocal() // an unusable discovery address is left out, as istiod leaves it
	c.clusterLocal = &cl
	return c
}

// Well-known label and annotation names read by the transforms.
const (
	LabelServiceName         = "kubernetes.io/service-name"
	LabelMCSServiceName      = "multicluster.kubernetes.io/service-name"
	LabelTopologyRegion      = "topology.kubernetes.io/region"
	LabelTopologyZone        = "topology.kubernetes.io/zone"
	LabelBetaRegion          = "failure-domain.beta.kubernetes.io/region"
	LabelBetaZone            = "failure-domain.beta.kubernetes.io/zone"
	LabelTopologySubzone     = "topology.istio.io/subzone"
	LabelTopologyCluster     = "topology.istio.io/cluster"
	LabelTopologyNetwork     = "topology.istio.io/network"
	LabelHostname            = "kubernetes.io/hostname"
	LabelLocality            = "topology.istio.io/locality"
	LabelLegacyLocality      = "istio-locality"
	LabelTLSMode             = "security.istio.io/tlsMode"
	LabelWorkloadName        = "service.istio.io/workload-name"
	LabelCanonicalName       = "service.istio.io/canonical-name"
	LabelCanonicalRevision   = "service.istio.io/canonical-revision"
	LabelAppName             = "app.kubernetes.io/name"
	LabelApp                 = "app"
	LabelAppVersion          = "app.kubernetes.io/version"
	LabelVersion             = "version"
	LabelPodTemplateHash     = "pod-template-hash"
	LabelRolloutsHash        = "rollouts-pod-template-hash"
	LabelDeploymentConfig    = "deploymentconfig"
	LabelPersistentSession   = "istio.io/persistent-session"
	LabelPersistentSessionHd = "istio.io/persistent-session-header"

	AnnotationExportTo            = "networking.istio.io/exportTo"
	AnnotationTrafficDistribution = "networking.istio.io/traffic-distribution"
	// AnnotationEndpointHashKey on a Service names what its endpoints' ring-hash key is
	// (gRFC A76, envoy.lb hash_key): HashKeyPodName, or a Pod annotation's key.
	AnnotationEndpointHashKey = "krteds.io/endpoint-hash-key"
	// HashKeyPodName keys each endpoint by its Pod's name.
	HashKeyPodName = "pod-name"
	// MaxAnnotationValueBytes bounds the Pod annotation values krteds keeps (a hash key is a
	// short name): longer values, such as serialized configuration, are not kept.
	MaxAnnotationValueBytes = 256
	// MaxAnnotationBytes bounds all the annotations krteds keeps of one Pod (keys and values, the
	// API server's own limit): a Pod past it, which only a manifests file can hold, keeps none.
	MaxAnnotationBytes = 256 << 10

	TLSModeDisabled = "disabled"
	TLSModeIstio    = "istio"
)
