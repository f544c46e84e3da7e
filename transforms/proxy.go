package transforms

import (
	"slices"

	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
)

// ProxyInputs are what proxy enrichment reads.
type ProxyInputs struct {
	Workloads WorkloadInputs
	// Sidecars scope what each proxy sees; they are read by namespace.
	Sidecars            krt.Collection[collections.Sidecar]
	SidecarsByNamespace krt.Index[string, collections.Sidecar]
}

// SidecarNamespace is the extractor of the index of Sidecars by namespace.
func SidecarNamespace(s collections.Sidecar) []string { return []string{s.Namespace} }

// Proxies enriches a connected proxy from the registry, as istiod's SetWorkloadLabels and
// setTopologyLabels do: the Pod named by the node id (if its IPs include the proxy IP), else the
// Ready Pod with the proxy IP in the proxy's namespace, supplies labels, locality and node; without
// one, the proxy's declared labels and node.locality are used.
func Proxies(cfg collections.Config, in ProxyInputs) Single[collections.ConnectedProxy, collections.Proxy] {
	return Single[collections.ConnectedProxy, collections.Proxy]{Reads: append(in.Workloads.reads(), in.Sidecars), Fn: func(ctx krt.HandlerContext, cp collections.ConnectedProxy) *collections.Proxy {
		var w *collections.Workload
		if cp.PodName != "" {
			key := cp.Namespace + "/" + cp.PodName
			w = FetchWorkloads(ctx, cfg, in.Workloads, []string{key})[key]
			if w != nil && !slices.Contains(w.IPs, cp.IP) {
				w = nil
			}
		}
		if w == nil {
			w = ReadyWorkloadWithIP(ctx, cfg, in.Workloads, cp.Namespace, cp.IP)
		}
		clusterID := cp.ClusterID
		if clusterID == "" {
			clusterID = cfg.ClusterID
		}
		p := &collections.Proxy{ConnectedProxy: cp}
		var locality collections.Locality
		nodeName := cp.NodeName
		network := cp.Network
		if w != nil {
			p.Pod = w.ResourceName()
			locality = w.Meta.Locality
			if nodeName == "" {
				nodeName = w.Meta.NodeName
			}
			if network == "" {
				network = w.Meta.Network
			}
			p.EffectiveLabels = AugmentLabels(w.Meta.PodLabels.Map(), clusterID, locality, nodeName, network)
		} else {
			if _, l := podLocality(func(k string) string { return cp.Labels[k] }); !l.IsEmpty() {
				locality = l
			} else {
				locality = cp.Locality
			}
			p.EffectiveLabels = AugmentLabels(cp.Labels, clusterID, locality, nodeName, network)
		}
		if in.SidecarsByNamespace != nil {
			candidates := in.SidecarsByNamespace.Fetch(ctx, cp.Namespace)
			if cp.Namespace != cfg.SystemNamespace {
				candidates = append(candidates, in.SidecarsByNamespace.Fetch(ctx, cfg.SystemNamespace)...)
			}
			if sc := SidecarFor(candidates, cp.Namespace, p.EffectiveLabels, cfg.SystemNamespace); sc != nil {
				p.Sidecar = sc.ResourceName()
				p.SidecarEgress = sc.EgressHosts
				if len(p.SidecarEgress) == 0 {
					p.SidecarEgress = []string{"*/*"}
				}
			}
		}
		p.Class = collections.ProxyClass{
			Namespace: cp.Namespace,
			ClusterID: clusterID,
			Network:   network,
			Locality:  locality,
			NodeName:  nodeName,
		}
		p.View = ViewOf(p)
		return p
	}}
}

// ViewOf is what resolving names for the proxy depends on (see collections.View).
func ViewOf(p *collections.Proxy) collections.View {
	v := collections.View{ClassKey: p.Class.Key(), Namespace: p.Namespace, Egress: p.SidecarEgress, GRPC: p.Generator == collections.GeneratorGRPC}
	v.Key = v.ClassKey + "|" + p.Sidecar
	if v.GRPC {
		v.Key += "|grpc"
	}
	return v
}

// ProxyViewKey is the index extractor that groups proxies by view.
func ProxyViewKey(p collections.Proxy) []string { return []string{p.View.Key} }

// ViewOfGroup gives the view shared by a group of proxies (one index entry per view).
func ViewOfGroup() Single[krt.IndexObject[string, collections.Proxy], collections.View] {
	return Single[krt.IndexObject[string, collections.Proxy], collections.View]{Fn: func(_ krt.HandlerContext, o krt.IndexObject[string, collections.Proxy]) *collections.View {
		if len(o.Objects) == 0 {
			return nil
		}
		v := o.Objects[0].View
		return &v
	}}
}

// ProxyClassKey is the index extractor that groups proxies by class.
func ProxyClassKey(p collections.Proxy) []string { return []string{p.Class.Key()} }

// ProxyClassOf gives the class shared by a group of proxies (one index entry per class): a
// proxy joining or leaving a class that stays populated changes nothing downstream.
func ProxyClassOf() Single[krt.IndexObject[string, collections.Proxy], collections.ProxyClass] {
	return Single[krt.IndexObject[string, collections.Proxy], collections.ProxyClass]{Fn: func(_ krt.HandlerContext, o krt.IndexObject[string, collections.Proxy]) *collections.ProxyClass {
		if len(o.Objects) == 0 {
			return nil
		}
		c := o.Objects[0].Class
		return &c
	}}
}
