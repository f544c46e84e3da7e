package registry

import (
	meshconfig "istio.io/api/mesh/v1alpha1"

	"github.com/krteds/krteds/collections"
)

// MeshClusterLocalSettings reads what decides the cluster-local hosts from a mesh config (as
// istiod's mesh.ApplyMeshConfigDefaults leaves it, defaults applied): the discovery address
// (defaultConfig.discoveryAddress) and serviceSettings, each entry's hosts with its
// clusterLocal setting.
func MeshClusterLocalSettings(mc *meshconfig.MeshConfig) (discoveryAddress string, settings []collections.ServiceSetting) {
	for _, s := range mc.GetServiceSettings() {
		if len(s.GetHosts()) == 0 {
			continue
		}
		settings = append(settings, collections.ServiceSetting{Hosts: s.GetHosts(), ClusterLocal: s.GetSettings().GetClusterLocal()})
	}
	return mc.GetDefaultConfig().GetDiscoveryAddress(), settings
}
