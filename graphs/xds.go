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

	// CLAs are keyed by cluster name, plus "~<projection>" for proxy-dependent ones.
	CLAs      krt.Collection[collections.Resource]
	Clusters  krt.Collection[collections.Resource]
	Listeners krt.Collection[collections.Resource]
	Routes    krt.Collection[collections.Resource]

	// ServicesByHostname indexes ServiceInfos by hostname.
	ServicesByHostname krt.Index[string, collections.ServiceInfo]
	// CLAsByName indexes CLAs by cluster name.
	CLAsByName krt.Index[string, collections.Resource]
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

	g.CLAs = DeriveMany(d, opts, NameCLAs, NameServiceEndpoints, g.ServiceEndpoints,
		[]string{NameServiceInfos, NamePolicies, NameProxyClasses},
		transforms.ServiceCLAs(transforms.CLAInputs{Services: g.ServiceInfos, Policies: g.ServicePolicies, Classes: g.ProxyClasses}, report))
	g.Clusters = DeriveMany(d, opts, NameClusters, NameServiceInfos, g.ServiceInfos, []string{NamePolicies},
		transforms.Clusters(g.ServicePolicies, report))
	g.Listeners = DeriveMany(d, opts, NameListeners, NameServiceInfos, g.ServiceInfos, nil, transforms.Listeners(report))
	g.Routes = DeriveMany(d, opts, NameRoutes, NameServiceInfos, g.ServiceInfos, nil, transforms.Routes(report))

	g.ServicesByHostname = krt.NewIndex(g.ServiceInfos, "byHostname", func(s collections.ServiceInfo) []string { return []string{s.Hostname} })
	g.CLAsByName = krt.NewIndex(g.CLAs, "byName", func(r collections.Resource) []string { return []string{r.Name} })
	return g
}
