// Package graphs wires krteds' transforms into one krt graph and describes it.
package graphs

import (
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// Names of the derived collections.
const (
	NameNodeLocalities   = "NodeLocalities"
	NameWorkloads        = "Workloads"
	NameServiceInfos     = "ServiceInfos"
	NameSliceEndpoints   = "SliceEndpoints"
	NameServiceEndpoints = "ServiceEndpoints"
)

// EDSGraph is the endpoint half of krteds' dataflow: Kubernetes objects in, per-service
// de-duplicated, health-classified endpoint shards out.
type EDSGraph struct {
	Inputs collections.Inputs

	NodeLocalities krt.Collection[collections.NodeLocality]
	Workloads      krt.Collection[collections.Workload]
	ServiceInfos   krt.Collection[collections.ServiceInfo]
	SliceEndpoints krt.Collection[collections.SliceEndpoints]
	// ServiceEndpoints holds one shard per Service ("<ns>/<name>"), empty when it has no endpoints.
	ServiceEndpoints krt.Collection[collections.ServiceEndpoints]

	// Graph describes every collection above and how they depend on each other.
	Graph *Description

	readyByIP krt.Index[string, collections.Workload]
}

// BuildEDS wires the EDS graph over the inputs. Every collection is named, registered with the
// options' debug handler, and stops with the options' stop channel. Nothing is computed until the
// inputs produce events (for informers: after the client is run).
func BuildEDS(cfg collections.Config, in collections.Inputs, opts krt.OptionsBuilder, report collections.Reporter) *EDSGraph {
	cfg = cfg.WithDefaults()
	if report == nil {
		report = collections.NopReporter{}
	}
	d := NewDescription(opts.Debugger())
	g := &EDSGraph{Inputs: in, Graph: d}

	AddInput(d, collections.NameNamespaces, in.Namespaces)
	AddInput(d, collections.NameNodes, in.Nodes)
	AddInput(d, collections.NameServices, in.Services)
	AddInput(d, collections.NamePods, in.Pods)
	AddInput(d, collections.NameEndpointSlices, in.EndpointSlices)

	g.NodeLocalities = Derive(d, opts, NameNodeLocalities, collections.NameNodes, in.Nodes, nil,
		transforms.NodeLocalities())
	g.ServiceInfos = Derive(d, opts, NameServiceInfos, collections.NameServices, in.Services,
		[]string{collections.NameNamespaces},
		transforms.ServiceInfos(cfg, in.Namespaces))
	g.Workloads = Derive(d, opts, NameWorkloads, collections.NamePods, in.Pods,
		[]string{NameNodeLocalities, collections.NameNamespaces},
		transforms.Workloads(cfg, g.NodeLocalities, in.Namespaces, report))

	readyByIP := krt.NewIndex(g.Workloads, "readyByIP", transforms.ReadyIPs)
	g.readyByIP = readyByIP
	g.SliceEndpoints = Derive(d, opts, NameSliceEndpoints, collections.NameEndpointSlices, in.EndpointSlices,
		[]string{NameServiceInfos, NameWorkloads, collections.NameNamespaces},
		transforms.SliceEndpointsOf(cfg, transforms.SliceInputs{
			Services:           g.ServiceInfos,
			Workloads:          g.Workloads,
			Namespaces:         in.Namespaces,
			ReadyWorkloadsByIP: readyByIP,
		}, report))

	slicesBySvc := krt.NewIndex(g.SliceEndpoints, "byService", transforms.SliceService)
	g.ServiceEndpoints = Derive(d, opts, NameServiceEndpoints, NameServiceInfos, g.ServiceInfos,
		[]string{NameSliceEndpoints},
		transforms.MergeServiceEndpoints(cfg, slicesBySvc))
	return g
}

// HasSynced reports whether every collection of the graph has synced.
func (g *EDSGraph) HasSynced() bool { return g.Graph.HasSynced() }

// WaitUntilSynced blocks until every collection has synced or stop is closed.
func (g *EDSGraph) WaitUntilSynced(stop <-chan struct{}) bool { return g.Graph.WaitUntilSynced(stop) }
