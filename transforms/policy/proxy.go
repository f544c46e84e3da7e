package policy

import (
	"slices"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"

	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/registry"
)

// ProxyInputs are what proxy enrichment reads.
type ProxyInputs struct {
	Workloads registry.WorkloadInputs
	// Sidecars scope what each proxy sees; they are read by namespace.
	Sidecars            krt.Collection[collections.Sidecar]
	SidecarsByNamespace krt.Index[string, collections.Sidecar]
	// FailoverLabels names the labels a proxy class keeps (FailoverLabelNames). Without it a
	// class keeps every label of the proxy: correct, but proxies that differ in any label then
	// have CLAs of their own wherever a CLA depends on the proxy.
	FailoverLabels krt.Singleton[collections.FailoverLabels]
	// SelectorRules are the DestinationRules with a workloadSelector by namespace
	// (SelectorRuleNamespace), an index of Rules: those of its namespace selecting a proxy are
	// part of its class.
	Rules         krt.Collection[collections.DestinationRule]
	SelectorRules krt.Index[string, collections.DestinationRule]
}

func (in ProxyInputs) reads() []any {
	r := append(in.Workloads.Reads(), in.Sidecars)
	if in.FailoverLabels != nil {
		r = append(r, in.FailoverLabels)
	}
	if in.Rules != nil {
		r = append(r, in.Rules)
	}
	return r
}

// SidecarNamespace is the extractor of the index of Sidecars by namespace.
func SidecarNamespace(s collections.Sidecar) []string { return []string{s.Namespace} }

// Proxies enriches a connected proxy from the registry, as istiod's SetWorkloadLabels and
// setTopologyLabels do (pilot/pkg/model/context.go, pilot/pkg/xds/ads.go): the Pod named by the
// node id (if its IPs include the proxy IP), else the Ready Pod with the proxy IP in the proxy's
// namespace, supplies labels, locality and node; without one, the labels the proxy declared
// (metadata LABELS) are its labels. The locality is then read back from the labels
// (localityFromProxyLabels: the region, zone and subzone labels if any is set, else the locality
// label), else node.locality; and the labels are augmented with the topology labels. The class
// keeps the proxy's own labels that a failoverPriority may compare (in.FailoverLabels).
func Proxies(cfg collections.Config, in ProxyInputs) transforms.Single[collections.ConnectedProxy, collections.Proxy] {
	return transforms.Single[collections.ConnectedProxy, collections.Proxy]{Reads: in.reads(), Fn: func(ctx krt.HandlerContext, cp collections.ConnectedProxy) *collections.Proxy {
		var w *collections.Workload
		if cp.PodName != "" {
			key := cp.Namespace + "/" + cp.PodName
			w = registry.FetchWorkloads(ctx, cfg, in.Workloads, []string{key}).Get(key)
			if w != nil && !slices.Contains(w.IPs, cp.IP) {
				w = nil
			}
		}
		if w == nil {
			w = registry.ReadyWorkloadWithIP(ctx, cfg, in.Workloads, cp.Namespace, cp.IP)
		}
		clusterID := cp.ClusterID
		if clusterID == "" {
			clusterID = cfg.ClusterID
		}
		p := &collections.Proxy{ConnectedProxy: cp}
		var locality collections.Locality
		nodeName := cp.NodeName
		network := cp.Network
		own := cp.Labels
		if w != nil {
			p.Pod = w.ResourceName()
			own = w.Meta.PodLabels.Map()
			if nodeName == "" {
				nodeName = w.Meta.NodeName
			}
			if network == "" {
				network = w.Meta.Network
			}
			// The registry's labels carry the Pod's locality (GetProxyWorkloadLabels).
			locality = ProxyLocality(registry.AugmentLabels(own, "", w.Meta.Locality, "", ""), cp.Locality)
		} else {
			locality = ProxyLocality(own, cp.Locality)
		}
		p.EffectiveLabels = registry.AugmentLabels(own, clusterID, locality, nodeName, network)
		if in.SidecarsByNamespace != nil {
			candidates := in.SidecarsByNamespace.Fetch(ctx, cp.Namespace)
			if cp.Namespace != cfg.SystemNamespace {
				candidates = append(candidates, in.SidecarsByNamespace.Fetch(ctx, cfg.SystemNamespace)...)
			}
			if sc := SidecarFor(candidates, cp.Namespace, p.EffectiveLabels, cfg.SystemNamespace); sc != nil {
				p.Sidecar = sc.ResourceName()
				p.SidecarEgress = sc.Egress
				if len(p.SidecarEgress) == 0 {
					p.SidecarEgress = []collections.EgressListener{{Hosts: []string{"*/*"}}}
				}
			}
		}
		p.Class = collections.ProxyClass{
			Namespace: cp.Namespace,
			ClusterID: clusterID,
			Network:   network,
			Locality:  locality,
			NodeName:  nodeName,
			Labels:    classLabels(ctx, in.FailoverLabels, own),
		}
		if in.SelectorRules != nil {
			p.Class.Rules = selectedRules(in.SelectorRules.Fetch(ctx, cp.Namespace), p.EffectiveLabels)
		}
		p.View = ViewOf(p)
		return p
	}}
}

// ProxyLocality is istiod's localityFromProxyLabels over a proxy's labels, with node.locality
// (declared) as the fallback: the topology.kubernetes.io/region, topology.kubernetes.io/zone and
// topology.istio.io/subzone labels when any of them is set; else the locality label
// (topology.istio.io/locality, then istio-locality; dots read as slashes, as the Istio agent
// writes it); else declared.
func ProxyLocality(labels map[string]string, declared collections.Locality) collections.Locality {
	region, f1 := labels[collections.LabelTopologyRegion]
	zone, f2 := labels[collections.LabelTopologyZone]
	subzone, f3 := labels[collections.LabelTopologySubzone]
	if f1 || f2 || f3 {
		return collections.Locality{Region: region, Zone: zone, Subzone: subzone}
	}
	if _, l := registry.PodLocality(func(k string) string { return labels[k] }); !l.IsEmpty() {
		return l
	}
	return declared
}

// classLabels renders the labels of own a class keeps: those failover names, or all of them
// without a failover label set.
func classLabels(ctx krt.HandlerContext, failover krt.Singleton[collections.FailoverLabels], own map[string]string) string {
	if len(own) == 0 {
		return ""
	}
	if failover == nil {
		return collections.CanonicalLabels(own)
	}
	var names []string
	if f := krt.FetchOne(ctx, failover.AsCollection()); f != nil {
		names = f.Names
	}
	kept := map[string]string{}
	for _, n := range names {
		if v, ok := own[n]; ok {
			kept[n] = v
		}
	}
	return collections.CanonicalLabels(kept)
}

// SelectorRuleNamespace is the extractor of the index of DestinationRules with a
// workloadSelector by namespace (the others are not in it).
func SelectorRuleNamespace(r collections.DestinationRule) []string {
	if r.WorkloadSelector == nil {
		return nil
	}
	return []string{r.Namespace}
}

// selectedRules names the rules whose workloadSelector matches labels (istiod matches the
// proxy's labels, topology labels included), in istiod's order (ruleCandidates), joined by ",".
func selectedRules(rules []collections.DestinationRule, labels map[string]string) string {
	rules = slices.DeleteFunc(slices.Clone(rules), func(r collections.DestinationRule) bool {
		return r.WorkloadSelector == nil || !labelsSubset(r.WorkloadSelector, labels)
	})
	slices.SortFunc(rules, func(a, b collections.DestinationRule) int {
		return transforms.CompareCreation(a.CreationTime, b.CreationTime, a.Name, b.Name, a.Namespace, b.Namespace)
	})
	names := make([]string, len(rules))
	for i, r := range rules {
		names[i] = r.Name
	}
	return strings.Join(names, ",")
}

// ViewOf is what resolving names for the proxy depends on (see collections.View).
func ViewOf(p *collections.Proxy) collections.View {
	v := collections.View{ClassKey: p.Class.Key(), Namespace: p.Namespace, Egress: p.SidecarEgress, GRPC: p.Generator == collections.GeneratorGRPC,
		Rules: p.Class.SelectedRules()}
	v.Key = v.ClassKey + "|" + p.Sidecar
	if v.GRPC {
		v.Key += "|grpc"
	}
	return v
}

// ProxyGroupKeysOf projects a proxy on the keys of its class and view: the groups of proxies
// by class and by view are indexes over these, because krt rebuilds a group's index entry with
// every member on each change of the group, and a whole Proxy per member made each proxy
// connecting cost as much as its class's other members.
func ProxyGroupKeysOf() transforms.Single[collections.Proxy, collections.ProxyGroupKeys] {
	return transforms.Single[collections.Proxy, collections.ProxyGroupKeys]{Fn: func(_ krt.HandlerContext, p collections.Proxy) *collections.ProxyGroupKeys {
		return &collections.ProxyGroupKeys{ConnID: p.ConnID, Class: p.Class.Key(), View: p.View.Key}
	}}
}

// Proxies are grouped by class and by view in two steps: into shards of a group (an index entry
// per shard, GroupShards), then the shards into the group (an index entry per group,
// GroupOfShards). krt rebuilds an index entry with every member at each change of one, so a
// single step made each proxy connecting cost as much as every other proxy of its class: a herd
// of ten thousand proxies of one class took a minute of CPU to group. In two steps a proxy costs
// its shard's members, a shard appearing or going its group's shards.
const groupShards = 64

// shardKey is the key of the shard of group a connection belongs to.
func shardKey(group, connID string) string {
	return group + "#" + strconv.FormatUint(xxhash.Sum64String(connID)%groupShards, 10)
}

// ProxyViewShardKey is the index extractor that groups proxies by shard of their view.
func ProxyViewShardKey(k collections.ProxyGroupKeys) []string {
	return []string{shardKey(k.View, k.ConnID)}
}

// ProxyClassShardKey is the index extractor that groups proxies by shard of their class.
func ProxyClassShardKey(k collections.ProxyGroupKeys) []string {
	return []string{shardKey(k.Class, k.ConnID)}
}

// ShardGroupKey is the index extractor that groups shards by their group.
func ShardGroupKey[T interface{ Equals(T) bool }](s collections.GroupShard[T]) []string {
	return []string{s.Group}
}

// groupMember finds, among a shard's members (by connection), a proxy whose shard is still the
// entry's (a proxy moving to another group may be seen there before its keys follow): the
// lowest connection id that does.
func groupMember(ctx krt.HandlerContext, proxies krt.Collection[collections.Proxy], o krt.IndexObject[string, collections.ProxyGroupKeys], group func(*collections.Proxy) string) *collections.Proxy {
	ids := make([]string, 0, len(o.Objects))
	for _, k := range o.Objects {
		ids = append(ids, k.ConnID)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if p := krt.FetchOne(ctx, proxies, krt.FilterKey(id)); p != nil && shardKey(group(p), p.ConnID) == o.Key {
			return p
		}
	}
	return nil
}

// GroupShards gives a shard of a group of proxies (one index entry per shard): the group's value
// (value) as the shard's lowest member has it, a proxy joining or leaving a shard that stays
// populated changing nothing downstream.
func GroupShards[T interface{ Equals(T) bool }](proxies krt.Collection[collections.Proxy], group func(*collections.Proxy) string, value func(*collections.Proxy) T) transforms.Single[krt.IndexObject[string, collections.ProxyGroupKeys], collections.GroupShard[T]] {
	return transforms.Single[krt.IndexObject[string, collections.ProxyGroupKeys], collections.GroupShard[T]]{Reads: []any{proxies}, Fn: func(ctx krt.HandlerContext, o krt.IndexObject[string, collections.ProxyGroupKeys]) *collections.GroupShard[T] {
		p := groupMember(ctx, proxies, o, group)
		if p == nil {
			return nil
		}
		return &collections.GroupShard[T]{Key: o.Key, Group: group(p), Value: value(p)}
	}}
}

// GroupOfShards gives a group of proxies (one index entry per group, over its shards): the value
// its lowest shard holds. A shard's key names its group, so the entry's shards are the group's.
func GroupOfShards[T interface{ Equals(T) bool }]() transforms.Single[krt.IndexObject[string, collections.GroupShard[T]], T] {
	return transforms.Single[krt.IndexObject[string, collections.GroupShard[T]], T]{Fn: func(_ krt.HandlerContext, o krt.IndexObject[string, collections.GroupShard[T]]) *T {
		var lowest *collections.GroupShard[T]
		for i, s := range o.Objects {
			if lowest == nil || s.Key < lowest.Key {
				lowest = &o.Objects[i]
			}
		}
		if lowest == nil {
			return nil
		}
		v := lowest.Value
		return &v
	}}
}

// ClassOf is a proxy's class: what the group by class holds.
func ClassOf(p *collections.Proxy) collections.ProxyClass { return p.Class }

// ClassKeyOf is the key of a proxy's class: what proxies are grouped by class by.
func ClassKeyOf(p *collections.Proxy) string { return p.Class.Key() }

// ViewOfProxy is a proxy's view: what the group by view holds.
func ViewOfProxy(p *collections.Proxy) collections.View { return p.View }

// ViewKeyOf is the key of a proxy's view: what proxies are grouped by view by.
func ViewKeyOf(p *collections.Proxy) string { return p.View.Key }
