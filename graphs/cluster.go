package graphs

import (
	"cmp"
	"slices"

	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/eds"
	"github.com/krteds/krteds/transforms/registry"
)

// Names of the collections of remote clusters.
const (
	NameRemoteGraphs   = "RemoteClusterGraphs"
	NameRemoteServices = "RemoteServices"
	NameRemoteShards   = "RemoteShards"
	NameRemoteProblems = "RemoteProblems"
	NameRemoteGateways = "RemoteGateways"
	// NameShards is, under a remote cluster's name, its endpoint shard per service.
	NameShards = "Shards"
)

// remoteGraph is what the graph derives for one remote cluster, under "<cluster>/" names: its
// services, its endpoint shard per service and the problems of its objects, each keyed as the
// local cluster's are, so that the clusters merge by key.
type remoteGraph struct {
	id       string
	gateways krt.Collection[collections.ClusterGateways]
	services krt.Collection[*collections.ServiceInfo]
	shards   krt.Collection[collections.ServiceEndpoints]
	problems krt.Collection[collections.ObjectProblems]
}

func (r remoteGraph) ResourceName() string { return r.id }

// Equals: the collections of one cluster are built once.
func (r remoteGraph) Equals(o remoteGraph) bool {
	return r.id == o.id && r.gateways == o.gateways && r.services == o.services && r.shards == o.shards && r.problems == o.problems
}

// clusterRegistry is what every cluster, local or remote, derives alike from its Kubernetes inputs:
// the default network, node localities, its Services, what a Pod's workload is derived from,
// and its network gateways.
type clusterRegistry struct {
	systemNetwork   krt.Singleton[string]
	nodes           krt.Collection[*collections.NodeLocality]
	services        krt.Collection[*collections.ServiceInfo]
	serviceProblems krt.Collection[collections.ObjectProblems]
	workloads       registry.WorkloadInputs
	gateways        krt.Collection[collections.ClusterGateways]
}

// buildRegistry registers a cluster's Kubernetes inputs and derives its registry.
func buildRegistry(cfg collections.Config, d *Description, in collections.Inputs, ids *registry.Identities) clusterRegistry {
	Input(d, collections.NameNamespaces, in.Namespaces)
	Input(d, collections.NameNodes, in.Nodes)
	Input(d, collections.NameServices, in.Services)
	Input(d, collections.NamePods, in.Pods)
	Input(d, collections.NameEndpointSlices, in.EndpointSlices)
	var r clusterRegistry
	network, reads := registry.SystemNetwork(cfg, in.Namespaces)
	r.systemNetwork = Singleton(d, NameSystemNetwork, network, reads)
	r.nodes = Derive(d, NameNodeLocalities, in.Nodes, registry.NodeLocalities(r.systemNetwork))
	r.services, r.serviceProblems = DeriveChecked(d, NameKubeServices, in.Services, registry.ServiceInfos(cfg, in.Namespaces))
	r.workloads = registry.WorkloadInputs{Pods: in.Pods, Nodes: r.nodes, SystemNetwork: r.systemNetwork,
		ReadyPodsByIP: krt.NewIndex(in.Pods, "readyByIP", registry.ReadyPodIPs), Identities: ids}
	r.gateways = DeriveFromNothing(d, NameServiceGateways, eds.ServiceGateways(cfg, in.Services))
	return r
}

// buildRemote derives a remote cluster's collections from its inputs, as the local cluster's
// are, with the cluster's ID: its registry, slice endpoints and one shard per service. They
// stop when the cluster leaves.
func buildRemote(cfg collections.Config, d *Description, c *collections.Cluster, ids *registry.Identities) remoteGraph {
	cfg.ClusterID = c.ID
	sd := d.scoped(c.ID, krt.NewOptionsBuilder(c.Stop, c.ID, d.opts.Debugger()))
	in := c.Inputs
	reg := buildRegistry(cfg, sd, in, ids)
	services, p1 := reg.services, reg.serviceProblems
	sliceEndpoints, p2 := DeriveChecked(sd, NameSliceEndpoints, in.EndpointSlices, registry.SliceEndpointsOf(cfg, registry.SliceInputs{
		Services: services, Workloads: reg.workloads,
	}))
	shards := Derive(sd, NameShards, services, registry.ClusterShard(cfg, sliceEndpoints,
		krt.NewIndex(sliceEndpoints, "byService", registry.SliceService)))
	// Problems name their cluster: "<cluster>/<namespace>/<name>".
	problems := Derive(sd, NameProblems, krt.JoinCollection([]krt.Collection[collections.ObjectProblems]{p1, p2}, sd.opts.WithName("problems/joined")...),
		transforms.Single[collections.ObjectProblems, collections.ObjectProblems]{Fn: func(_ krt.HandlerContext, p collections.ObjectProblems) *collections.ObjectProblems {
			out := collections.ObjectProblems{Kind: p.Kind, Object: c.ID + "/" + p.Object}
			for _, pr := range p.Problems {
				pr.Object = out.Object
				out.Problems = append(out.Problems, pr)
			}
			return &out
		}})
	return remoteGraph{id: c.ID, gateways: reg.gateways, services: services, shards: shards, problems: problems}
}

// remoteClusters derives the remote clusters' collections and merges them by key: a service
// several clusters have is the one of the lowest cluster ID; its shards are concatenated in
// cluster order; problems are kept per cluster (their objects name it).
func remoteClusters(cfg collections.Config, d *Description, clusters krt.Collection[*collections.Cluster], ids *registry.Identities) (
	krt.Collection[*collections.ServiceInfo], krt.Collection[collections.ServiceEndpoints], krt.Collection[collections.ObjectProblems],
	krt.Collection[collections.ClusterGateways],
) {
	graphs := Derive(d, NameRemoteGraphs, clusters, transforms.Single[*collections.Cluster, remoteGraph]{Fn: func(_ krt.HandlerContext, c *collections.Cluster) *remoteGraph {
		rg := c.Derived(func() any { return buildRemote(cfg, d, c, ids) }).(remoteGraph)
		return &rg
	}})
	services := nestedMerge(d, NameRemoteServices, graphs, func(r remoteGraph) krt.Collection[*collections.ServiceInfo] { return r.services },
		func(ts []*collections.ServiceInfo) **collections.ServiceInfo {
			s := slices.MinFunc(ts, func(a, b *collections.ServiceInfo) int { return cmp.Compare(a.Cluster, b.Cluster) })
			return &s
		})
	shards := nestedMerge(d, NameRemoteShards, graphs, func(r remoteGraph) krt.Collection[collections.ServiceEndpoints] { return r.shards },
		func(ts []collections.ServiceEndpoints) *collections.ServiceEndpoints {
			slices.SortFunc(ts, func(a, b collections.ServiceEndpoints) int { return cmp.Compare(a.ClusterID, b.ClusterID) })
			out := ts[0]
			out.ClusterID = ""
			out.Endpoints = nil
			for _, t := range ts {
				out.Endpoints = append(out.Endpoints, t.Endpoints...)
			}
			return &out
		})
	problems := nestedMerge(d, NameRemoteProblems, graphs, func(r remoteGraph) krt.Collection[collections.ObjectProblems] { return r.problems },
		func(ts []collections.ObjectProblems) *collections.ObjectProblems { return &ts[0] })
	gateways := nestedMerge(d, NameRemoteGateways, graphs, func(r remoteGraph) krt.Collection[collections.ClusterGateways] { return r.gateways },
		func(ts []collections.ClusterGateways) *collections.ClusterGateways { return &ts[0] })
	return services, shards, problems, gateways
}

// nestedMerge is the union of one collection of each remote cluster, items of one key merged.
func nestedMerge[T any](d *Description, name string, graphs krt.Collection[remoteGraph], of func(remoteGraph) krt.Collection[T], merge func([]T) *T) krt.Collection[T] {
	cols := krt.NewCollection(graphs, func(_ krt.HandlerContext, r remoteGraph) *krt.Collection[T] {
		c := of(r)
		return &c
	}, d.options(name+"/collections")...)
	n := &node{name: d.prefix + name, kind: KindDerived, input: d.nameOf(graphs)}
	return register(d, n, krt.NestedJoinWithMergeCollection(cols, merge, d.options(name)...))
}
