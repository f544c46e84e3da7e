// Package graphs wires krteds' transforms into one krt graph (Build, the whole dataflow in order)
// and describes it. The xDS server reads the graph through package outputs/source; krteds explain
// through package outputs/explain.
package graphs

import (
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	securityclient "istio.io/client-go/pkg/apis/security/v1"
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms/cds"
	"github.com/krteds/krteds/transforms/eds"
	"github.com/krteds/krteds/transforms/policy"
	"github.com/krteds/krteds/transforms/registry"
)

// Names of the derived collections, as /debug/krt and /debug/krtz show them.
const (
	NameSystemNetwork       = "SystemNetwork"
	NameNodeLocalities      = "NodeLocalities"
	NameKubeServices        = "KubernetesServices"
	NameAllKubeServices     = "AllKubernetesServices"
	NameServiceGateways     = "ServiceGateways"
	NameMeshGateways        = "input/MeshNetworksGateways"
	NameGatewaySources      = "GatewaySources"
	NameNetworkGateways     = "NetworkGateways"
	NameServiceEntries      = "ServiceEntries"
	NameEntriesByNsHost     = "ServiceEntriesByNamespaceHost"
	NameEntryServices       = "ServiceEntryServices"
	NameWorkloadEntries     = "WorkloadEntries"
	NameServiceInfos        = "ServiceInfos"
	NameSharedHosts         = "ServiceInfosBySharedHost"
	NameSliceEndpoints      = "SliceEndpoints"
	NameServiceEndpoints    = "ServiceEndpoints"
	NameDestRules           = "DestinationRules"
	NameSidecars            = "Sidecars"
	NamePolicies            = "ServicePolicies"
	NamePeerAuthns          = "PeerAuthentications"
	NamePeerAuthnsByNS      = "PeerAuthenticationsByNamespace"
	NameConnectedProxies    = "ConnectedProxies"
	NameFailoverLabels      = "FailoverLabels"
	NameProxies             = "Proxies"
	NameProxyGroupKeys      = "ProxyGroupKeys"
	NameProxiesByClassShard = "ProxiesByClassShard"
	NameClassShards         = "ClassShards"
	NameProxiesByViewShard  = "ProxiesByViewShard"
	NameViewShards          = "ViewShards"
	NameProxiesByClass      = "ProxiesByClass"
	NameProxyClasses        = "ProxyClasses"
	NameProxiesByView       = "ProxiesByView"
	NameViews               = "Views"
	NameCLAs                = "ClusterLoadAssignments"
	NameCLAsByLEDS          = "ClusterLoadAssignmentsByLEDSCollection"
	NameClusters            = "Clusters"
	NameListeners           = "Listeners"
	NameRoutes              = "Routes"
	NameProblems            = "Problems"
	NameResourceProblems    = "Resources/problems"
)

// Graph is krteds' whole dataflow: Kubernetes and Istio objects in; per-service endpoint shards,
// the connected proxies, their classes and views, and the marshalled xDS resources out.
type Graph struct {
	Inputs collections.Inputs

	SystemNetwork  krt.Singleton[string]
	NodeLocalities krt.Collection[*collections.NodeLocality]
	// ServiceEntries and WorkloadEntries are the converted Istio objects.
	ServiceEntries  krt.Collection[collections.ServiceEntry]
	WorkloadEntries krt.Collection[collections.WorkloadEntry]
	// ServiceInfos are every service: the Kubernetes Services and the ServiceEntry hosts.
	ServiceInfos krt.Collection[*collections.ServiceInfo]
	// NetworkGateways are the mesh's east-west gateways by network (empty: one network).
	NetworkGateways krt.Singleton[collections.NetworkGateways]
	SliceEndpoints  krt.Collection[collections.SliceEndpoints]
	// ServiceEndpoints holds one shard per Service ("<ns>/<name>"), empty when it has no endpoints.
	ServiceEndpoints krt.Collection[collections.ServiceEndpoints]

	DestinationRules krt.Collection[collections.DestinationRule]
	Sidecars         krt.Collection[collections.Sidecar]
	// ServicePolicies lists per service the DestinationRules that may apply to it.
	ServicePolicies krt.Collection[collections.ServicePolicy]
	// PeerAuthentications decide which endpoints accept mTLS (read by namespace).
	PeerAuthentications krt.Collection[collections.PeerAuthentication]

	// ConnectedProxies is written by the xDS server as clients connect and leave.
	ConnectedProxies krt.StaticCollection[collections.ConnectedProxy]
	Proxies          krt.Collection[collections.Proxy]
	ProxyClasses     krt.Collection[collections.ProxyClass]
	// Views are the distinct views of the connected proxies: what resolving a name depends on.
	Views krt.Collection[collections.View]

	// CLAs, Clusters, Listeners and Routes hold the xDS resources by name; a CLA set holds one
	// ClusterLoadAssignment per proxy class when its endpoints depend on the proxy.
	CLAs      krt.Collection[collections.ResourceSet]
	Clusters  krt.Collection[collections.ResourceSet]
	Listeners krt.Collection[collections.ResourceSet]
	Routes    krt.Collection[collections.ResourceSet]
	// LEDSCollections finds the CLA sets naming a LEDS collection (nil without
	// Config.LEDSThreshold).
	LEDSCollections krt.Index[string, collections.ResourceSet]
	// sharedHosts finds, by hostname, the services of a hostname ServiceEntries of several
	// namespaces define: resolving its names depends on the proxy's namespace and Sidecar.
	sharedHosts krt.Index[string, *collections.ServiceInfo]

	// Problems are what the transforms found wrong in their inputs, by object.
	Problems krt.Collection[collections.ObjectProblems]

	// Description describes every collection above and how they depend on each other.
	Description *Description

	// identities are the workload identities the transforms have derived (registry.Identities).
	identities *registry.Identities
	// config is the configuration the graph was built with.
	config collections.Config
}

// Config is the configuration the graph was built with.
func (g *Graph) Config() collections.Config { return g.config }

// SharedHost lists the services of a hostname ServiceEntries of several namespaces define (nil
// for any other hostname).
func (g *Graph) SharedHost(host string) []*collections.ServiceInfo {
	if host == "" {
		return nil
	}
	return g.sharedHosts.Lookup(host)
}

// Memos are the graph's bounded caches: of the workload identities its transforms derive.
func (g *Graph) Memos() []collections.MemoStats {
	return []collections.MemoStats{g.identities.Stats()}
}

// Build wires the graph over the inputs, in dataflow order. Every collection is named, registered
// with the options' debug handler, and stops with the options' stop channel. Nothing is computed
// until the inputs produce events. Adding a transform is one line here.
func Build(cfg collections.Config, in collections.Inputs, opts krt.OptionsBuilder) *Graph {
	cfg = cfg.WithDefaults()
	cfg.MultiCluster = in.RemoteClusters != nil
	if in.DestinationRules == nil {
		in.DestinationRules = krt.NewStaticCollection[*networkingclient.DestinationRule](nil, nil, opts.WithName(collections.NameDestRules)...)
	}
	if in.Sidecars == nil {
		in.Sidecars = krt.NewStaticCollection[*networkingclient.Sidecar](nil, nil, opts.WithName(collections.NameSidecars)...)
	}
	if in.ServiceEntries == nil {
		in.ServiceEntries = krt.NewStaticCollection[*networkingclient.ServiceEntry](nil, nil, opts.WithName(collections.NameServiceEntries)...)
	}
	if in.WorkloadEntries == nil {
		in.WorkloadEntries = krt.NewStaticCollection[*networkingclient.WorkloadEntry](nil, nil, opts.WithName(collections.NameWorkloadEntries)...)
	}
	if in.PeerAuthentications == nil {
		in.PeerAuthentications = krt.NewStaticCollection[*securityclient.PeerAuthentication](nil, nil, opts.WithName(collections.NamePeerAuthns)...)
	}
	d := newDescription(opts)
	g := &Graph{Inputs: in, Description: d, config: cfg, identities: registry.NewIdentities()}
	var problems []krt.Collection[collections.ObjectProblems]
	checked := func(p krt.Collection[collections.ObjectProblems]) { problems = append(problems, p) }

	// Inputs, and the registry every cluster derives alike: services and their endpoints. A
	// Pod's workload (identity, topology) is derived where it is used, from the Pods fetched there.
	reg := buildRegistry(cfg, d, in, g.identities)
	Input(d, collections.NameDestRules, in.DestinationRules)
	Input(d, collections.NameSidecars, in.Sidecars)
	Input(d, collections.NameServiceEntries, in.ServiceEntries)
	Input(d, collections.NameWorkloadEntries, in.WorkloadEntries)
	Input(d, collections.NamePeerAuthns, in.PeerAuthentications)

	g.SystemNetwork, g.NodeLocalities = reg.systemNetwork, reg.nodes
	kubeServices, p := reg.services, reg.serviceProblems
	checked(p)
	g.ServiceEntries, p = DeriveChecked(d, NameServiceEntries, in.ServiceEntries, registry.ServiceEntries(cfg, registry.ServiceEntryInputs{
		Namespaces: in.Namespaces, SystemNetwork: g.SystemNetwork,
		Entries: in.ServiceEntries, EntriesByHost: krt.NewIndex(in.ServiceEntries, "byHost", registry.ServiceEntryHosts),
	}))
	checked(p)
	g.WorkloadEntries, p = DeriveChecked(d, NameWorkloadEntries, in.WorkloadEntries, registry.WorkloadEntries(cfg, g.SystemNetwork))
	checked(p)
	// A ServiceEntry host is a service per namespace defining it.
	entriesByNsHost := krt.NewIndex(g.ServiceEntries, "byNamespaceHost", registry.EntryNamespaceHosts)
	entryServices := Derive(d, NameEntryServices, Index(d, NameEntriesByNsHost, NameServiceEntries, entriesByNsHost),
		registry.EntryHostServices(cfg, g.ServiceEntries, krt.NewIndex(g.ServiceEntries, "byHost", registry.EntryHosts)))
	// Remote clusters: each its own services and endpoint shards, merged by service; the local
	// cluster's Service wins over a remote one.
	var remoteShards krt.Collection[collections.ServiceEndpoints]
	// Network gateways: the gateway Services of every cluster, and meshNetworks'.
	gatewaySources := []krt.Collection[collections.ClusterGateways]{reg.gateways}
	if len(cfg.MeshGateways) > 0 {
		mesh := krt.NewStaticCollection(nil, []collections.ClusterGateways{{Source: "meshNetworks", Gateways: cfg.MeshGateways}},
			opts.WithName(NameMeshGateways)...)
		gatewaySources = append(gatewaySources, Input(d, NameMeshGateways, krt.Collection[collections.ClusterGateways](mesh)))
	}
	if in.RemoteClusters != nil {
		Input(d, collections.NameRemoteClusters, in.RemoteClusters)
		var remoteServices krt.Collection[*collections.ServiceInfo]
		var remoteGateways krt.Collection[collections.ClusterGateways]
		remoteServices, remoteShards, p, remoteGateways = remoteClusters(cfg, d, in.RemoteClusters, g.identities)
		checked(p)
		kubeServices = JoinFirst(d, NameAllKubeServices, kubeServices, remoteServices)
		gatewaySources = append(gatewaySources, remoteGateways)
	}
	gatewayIndex, reads := eds.GatewayIndex(Join(d, NameGatewaySources, gatewaySources...))
	g.NetworkGateways = Singleton(d, NameNetworkGateways, gatewayIndex, reads)
	g.ServiceInfos = Join(d, NameServiceInfos, kubeServices, entryServices)
	g.sharedHosts = krt.NewIndex(g.ServiceInfos, "sharedHost", policy.SharedHostKey)
	Index(d, NameSharedHosts, NameServiceInfos, g.sharedHosts)
	workloads := reg.workloads
	g.SliceEndpoints, p = DeriveChecked(d, NameSliceEndpoints, in.EndpointSlices, registry.SliceEndpointsOf(cfg, registry.SliceInputs{
		Services: g.ServiceInfos, Workloads: workloads,
	}))
	checked(p)
	g.ServiceEndpoints = Derive(d, NameServiceEndpoints, g.ServiceInfos, registry.ServiceEndpointsOf(cfg, registry.ServiceEndpointInputs{
		Slices: g.SliceEndpoints, SlicesByService: krt.NewIndex(g.SliceEndpoints, "byService", registry.SliceService),
		ServiceEntries: g.ServiceEntries, EntriesByNamespaceHost: entriesByNsHost,
		WorkloadEntries: g.WorkloadEntries, WorkloadEntriesByNamespace: krt.NewIndex(g.WorkloadEntries, "byNamespace", registry.ByNamespace),
		Workloads: workloads, RemoteShards: remoteShards,
	}))

	// Traffic policy.
	g.DestinationRules, p = DeriveChecked(d, NameDestRules, in.DestinationRules, policy.DestinationRules())
	checked(p)
	g.Sidecars, p = DeriveChecked(d, NameSidecars, in.Sidecars, policy.Sidecars())
	checked(p)
	g.ServicePolicies = Derive(d, NamePolicies, g.ServiceInfos, policy.ServicePolicies(g.DestinationRules,
		krt.NewIndex(g.DestinationRules, "byHost", policy.RuleHostKeys(cfg))))
	g.PeerAuthentications, p = DeriveChecked(d, NamePeerAuthns, in.PeerAuthentications, policy.PeerAuthentications())
	checked(p)
	peerAuthn := policy.PeerAuthnInputs{RootNamespace: cfg.SystemNamespace, ByNamespace: Index(d, NamePeerAuthnsByNS, NamePeerAuthns,
		krt.NewIndex(g.PeerAuthentications, "byNamespace", policy.PeerAuthnNamespace))}

	// The connected proxies, their classes and views.
	g.ConnectedProxies = krt.NewStaticCollection[collections.ConnectedProxy](nil, nil, opts.WithName(NameConnectedProxies)...)
	Input(d, NameConnectedProxies, krt.Collection[collections.ConnectedProxy](g.ConnectedProxies))
	failoverNames, failoverReads := policy.FailoverLabelNames(g.DestinationRules)
	failoverLabels := Singleton(d, NameFailoverLabels, failoverNames, failoverReads)
	g.Proxies = Derive(d, NameProxies, krt.Collection[collections.ConnectedProxy](g.ConnectedProxies), policy.Proxies(cfg, policy.ProxyInputs{
		Workloads: workloads, FailoverLabels: failoverLabels,
		Sidecars: g.Sidecars, SidecarsByNamespace: krt.NewIndex(g.Sidecars, "byNamespace", policy.SidecarNamespace),
		Rules: g.DestinationRules, SelectorRules: krt.NewIndex(g.DestinationRules, "selectorByNamespace", policy.SelectorRuleNamespace),
	}))
	// Grouped by class and by view in two steps, shards then groups (policy.GroupShards).
	groupKeys := Derive(d, NameProxyGroupKeys, g.Proxies, policy.ProxyGroupKeysOf())
	classShards := Derive(d, NameClassShards,
		Index(d, NameProxiesByClassShard, NameProxyGroupKeys, krt.NewIndex(groupKeys, "byClassShard", policy.ProxyClassShardKey)),
		policy.GroupShards(g.Proxies, policy.ClassKeyOf, policy.ClassOf))
	g.ProxyClasses = Derive(d, NameProxyClasses,
		Index(d, NameProxiesByClass, NameClassShards, krt.NewIndex(classShards, "byClass", policy.ShardGroupKey[collections.ProxyClass])),
		policy.GroupOfShards[collections.ProxyClass]())
	viewShards := Derive(d, NameViewShards,
		Index(d, NameProxiesByViewShard, NameProxyGroupKeys, krt.NewIndex(groupKeys, "byViewShard", policy.ProxyViewShardKey)),
		policy.GroupShards(g.Proxies, policy.ViewKeyOf, policy.ViewOfProxy))
	g.Views = Derive(d, NameViews,
		Index(d, NameProxiesByView, NameViewShards, krt.NewIndex(viewShards, "byView", policy.ShardGroupKey[collections.View])),
		policy.GroupOfShards[collections.View]())

	// The xDS resources.
	g.CLAs = DeriveMany(d, NameCLAs, g.ServiceEndpoints, eds.ServiceCLAs(eds.CLAInputs{
		RootNamespace: cfg.SystemNamespace, Services: g.ServiceInfos, Policies: g.ServicePolicies, Classes: g.ProxyClasses,
		Gateways: g.NetworkGateways, LEDSThreshold: cfg.LEDSThreshold, PeerAuthn: peerAuthn,
	}))
	if cfg.LEDSThreshold > 0 {
		g.LEDSCollections = krt.NewIndex(g.CLAs, "byLEDSCollection", eds.LEDSCollectionsOf)
		Index(d, NameCLAsByLEDS, NameCLAs, g.LEDSCollections)
	}
	g.Clusters = DeriveMany(d, NameClusters, g.ServiceInfos, cds.ClustersFor(cds.ClusterInputs{
		RootNamespace: cfg.SystemNamespace, Policies: g.ServicePolicies, Endpoints: g.ServiceEndpoints, LRS: cfg.LRS, PeerAuthn: peerAuthn,
	}))
	g.Listeners = DeriveMany(d, NameListeners, g.ServiceInfos, cds.Listeners())
	g.Routes = DeriveMany(d, NameRoutes, g.ServiceInfos, cds.Routes(cfg.SystemNamespace, g.ServicePolicies))
	checked(DeriveFromNothing(d, NameResourceProblems, cds.ResourceProblems(g.CLAs, g.Clusters, g.Listeners, g.Routes)))

	g.Problems = krt.JoinCollection(problems, opts.WithName(NameProblems)...)
	return g
}

// HasSynced reports whether every collection of the graph has synced.
func (g *Graph) HasSynced() bool { return g.Description.HasSynced() }

// WaitUntilSynced blocks until every collection has synced or stop is closed.
func (g *Graph) WaitUntilSynced(stop <-chan struct{}) bool {
	return g.Description.WaitUntilSynced(stop)
}
