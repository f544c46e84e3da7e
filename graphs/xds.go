package graphs

import (
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// Names of the xDS collections.
const (
	NameConnectedProxies = "ConnectedProxies"
	NameProxies          = "Proxies"
	NameProxyClasses     = "ProxyClasses"
	NameProxiesByClass   = "ProxiesByClass"
	NameProxiesByView    = "ProxiesByView"
	NameViews            = "Views"
	NameCLAs             = "ClusterLoadAssignments"
	NameClusters         = "Clusters"
	NameListeners        = "Listeners"
	NameRoutes           = "Routes"
	NameDestRules        = "DestinationRules"
	NameSidecars         = "Sidecars"
	NamePolicies         = "ServicePolicies"
)

// Graph is krteds' whole dataflow: the EDS graph, the connected proxies and their classes, and
// the marshalled xDS resources.
type Graph struct {
	*EDSGraph

	DestinationRules krt.Collection[collections.DestinationRule]
	Sidecars         krt.Collection[collections.Sidecar]
	// ServicePolicies lists per service the DestinationRules that may apply to it.
	ServicePolicies krt.Collection[collections.ServicePolicy]

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

	empty emptyCLAs
}

// Build wires the whole graph over the inputs.
func Build(cfg collections.Config, in collections.Inputs, opts krt.OptionsBuilder, report collections.Reporter) *Graph {
	cfg = cfg.WithDefaults()
	if report == nil {
		report = collections.NopReporter{}
	}
	g := &Graph{EDSGraph: BuildEDS(cfg, in, opts, report)}
	d := g.Graph

	if in.DestinationRules == nil {
		in.DestinationRules = krt.NewStaticCollection[*networkingclient.DestinationRule](nil, nil, opts.WithName(collections.NameDestRules)...)
	}
	if in.Sidecars == nil {
		in.Sidecars = krt.NewStaticCollection[*networkingclient.Sidecar](nil, nil, opts.WithName(collections.NameSidecars)...)
	}
	AddInput(d, collections.NameDestRules, in.DestinationRules)
	AddInput(d, collections.NameSidecars, in.Sidecars)
	g.DestinationRules = Derive(d, opts, NameDestRules, collections.NameDestRules, in.DestinationRules, nil,
		transforms.DestinationRules(report))
	g.Sidecars = Derive(d, opts, NameSidecars, collections.NameSidecars, in.Sidecars, nil, transforms.Sidecars(report))
	g.ServicePolicies = Derive(d, opts, NamePolicies, NameServiceInfos, g.ServiceInfos, []string{NameDestRules},
		transforms.ServicePolicies(g.DestinationRules))

	g.ConnectedProxies = krt.NewStaticCollection[collections.ConnectedProxy](nil, nil, opts.WithName(NameConnectedProxies)...)
	AddInput(d, NameConnectedProxies, krt.Collection[collections.ConnectedProxy](g.ConnectedProxies))
	g.Proxies = Derive(d, opts, NameProxies, NameConnectedProxies, g.ConnectedProxies,
		[]string{NameWorkloads, NameSidecars},
		transforms.Proxies(cfg, transforms.ProxyInputs{Workloads: g.Workloads, ReadyWorkloadsByIP: g.readyByIP, Sidecars: g.Sidecars}))
	byClass := krt.NewIndex(g.Proxies, "byClass", transforms.ProxyClassKey).AsCollection(opts.WithName(NameProxiesByClass)...)
	AddIndex(d, NameProxiesByClass, NameProxies, byClass)
	g.ProxyClasses = Derive(d, opts, NameProxyClasses, NameProxiesByClass, byClass, nil, transforms.ProxyClassOf())
	byView := krt.NewIndex(g.Proxies, "byView", transforms.ProxyViewKey).AsCollection(opts.WithName(NameProxiesByView)...)
	AddIndex(d, NameProxiesByView, NameProxies, byView)
	g.Views = Derive(d, opts, NameViews, NameProxiesByView, byView, nil, transforms.ViewOfGroup())

	g.CLAs = DeriveMany(d, opts, NameCLAs, NameServiceEndpoints, g.ServiceEndpoints,
		[]string{NameServiceInfos, NamePolicies, NameProxyClasses},
		transforms.ServiceCLAs(transforms.CLAInputs{Services: g.ServiceInfos, Policies: g.ServicePolicies, Classes: g.ProxyClasses}, report))
	g.Clusters = DeriveMany(d, opts, NameClusters, NameServiceInfos, g.ServiceInfos, []string{NamePolicies},
		transforms.Clusters(g.ServicePolicies, report))
	g.Listeners = DeriveMany(d, opts, NameListeners, NameServiceInfos, g.ServiceInfos, nil, transforms.Listeners(report))
	g.Routes = DeriveMany(d, opts, NameRoutes, NameServiceInfos, g.ServiceInfos, nil, transforms.Routes(report))
	return g
}
