// Package explain says why each endpoint of a service is, or is not, in the ClusterLoadAssignment
// a proxy is sent for a cluster. It decides nothing: it joins what the transforms recorded as they
// built the CLA (the addresses and ports a slice left out, the copies a merge dropped, and the
// plan's trace of every endpoint left out, reached through a gateway, or placed) and words it.
package explain

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/outputs/source"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/eds"
	"github.com/krteds/krteds/transforms/policy"
	"github.com/krteds/krteds/transforms/registry"
)

// Explanation says why each endpoint a service has is, or is not, in the ClusterLoadAssignment
// a proxy is sent for a cluster: the facts read along the way, each naming the object that
// decided it, and a verdict per endpoint.
type Explanation struct {
	Proxy   string `json:"proxy"`
	Cluster string `json:"cluster"`
	// Service is the key ("<namespace>/<name>") of the cluster's service ("": none found).
	Service string `json:"service,omitempty"`
	// Facts are the steps from the cluster name to the service and the proxy's view of it.
	Facts []string `json:"facts"`
	// Verdict is for the whole cluster when no endpoint can be sent (e.g. no such service).
	Verdict   string            `json:"verdict,omitempty"`
	Endpoints []EndpointVerdict `json:"endpoints"`
}

// EndpointVerdict is one endpoint address: whether it is sent, and the facts behind it.
type EndpointVerdict struct {
	Address string `json:"address"`
	Sent    bool   `json:"sent"`
	// For a sent endpoint: as the CLA has it.
	Port     uint32 `json:"port,omitempty"`
	Health   string `json:"health,omitempty"`
	Locality string `json:"locality,omitempty"`
	Priority uint32 `json:"priority,omitempty"`
	Weight   uint32 `json:"weight,omitempty"`
	// TLSMode is the endpoint's tlsMode metadata ("" for none: clients send it plaintext).
	TLSMode string `json:"tlsMode,omitempty"`
	// HashKey is the endpoint's ring-hash key (envoy.lb hash_key; "" for none: clients hash its
	// address).
	HashKey string `json:"hashKey,omitempty"`
	// Reason is, for an endpoint not sent, the first step that excluded it.
	Reason string   `json:"reason,omitempty"`
	Facts  []string `json:"facts"`
}

// cluster is what explaining one cluster for one proxy reads: the service and port, the policy
// the CLA was planned under, and the records of its making.
type cluster struct {
	g *graphs.Graph
	// served is the graph as the xDS server serves it: what the proxy is sent (checkServed).
	served  *source.Source
	p       *collections.Proxy
	svc     *collections.ServiceInfo
	port    collections.ServicePort
	cp      eds.ClusterPolicy
	class   collections.ProxyClass
	shard   *collections.ServiceEndpoints
	trace   *eds.Trace
	address string
	ex      *Explanation
	seen    map[string]int // address → index in ex.Endpoints
}

// Explain explains, for the connected proxy p of the graph s serves, the endpoints of the
// cluster (all of them, or only address when it is not empty).
func Explain(s *source.Source, p *collections.Proxy, clusterName, address string) (Explanation, error) {
	ex := Explanation{Proxy: p.ID, Cluster: clusterName, Endpoints: []EndpointVerdict{}}
	portNum, subset, host, ok := transforms.ParseClusterName(clusterName)
	if !ok {
		return ex, fmt.Errorf("%q is not an EDS cluster name (outbound|<port>|<subset>|<hostname>)", clusterName)
	}
	if address != "" {
		if _, err := netip.ParseAddr(address); err != nil {
			return ex, fmt.Errorf("endpoint %q is not an IP address", address)
		}
	}
	c := &cluster{g: s.Graph(), served: s, p: p, address: address, ex: &ex, seen: map[string]int{}}
	c.fact("proxy %s: namespace %s, cluster %s, network %q, node %q, locality %q", p.ID, p.View.Namespace, orNone(p.Class.ClusterID),
		p.Class.Network, p.Class.NodeName, p.Class.Locality.String())
	if c.svc = c.service(host); c.svc == nil {
		return ex, nil
	}
	ex.Service = c.svc.ResourceName()
	set, ok := c.clusterSet(clusterName, portNum, subset)
	if !ok {
		return ex, nil
	}
	if err := c.plan(clusterName, subset, set); err != nil {
		return ex, err
	}
	c.endpoints()
	if err := c.checkServed(clusterName); err != nil {
		return ex, err
	}
	slices.SortStableFunc(ex.Endpoints, func(a, b EndpointVerdict) int { return strings.Compare(a.Address, b.Address) })
	return ex, nil
}

func (c *cluster) fact(f string, args ...any) {
	c.ex.Facts = append(c.ex.Facts, fmt.Sprintf(f, args...))
}

// service finds the service of a hostname the proxy sees: a shared host's namespace as the
// proxy's view picks it, else the local cluster's service of the hostname.
func (c *cluster) service(host string) *collections.ServiceInfo {
	var svc *collections.ServiceInfo
	if shared := c.g.SharedHost(host); len(shared) > 0 {
		namespaces := make([]string, len(shared))
		for i, s := range shared {
			namespaces[i] = s.Namespace
		}
		slices.Sort(namespaces)
		owner := policy.PickHostNamespace(shared, &c.p.View)
		if owner == "" {
			c.ex.Verdict = fmt.Sprintf("not sent: ServiceEntries of namespaces %v define %s, and none is visible from namespace %s (their exportTo, or the proxy's Sidecar egress listeners %v); the proxy gets an empty CLA",
				namespaces, host, c.p.View.Namespace, c.p.View.Egress)
			return nil
		}
		c.fact("hostname %s: ServiceEntries of namespaces %v define it; the proxy sees namespace %s's (its own namespace's first, else the oldest exported to it by name, else the oldest exported everywhere)",
			host, namespaces, owner)
		svc = deref(c.g.ServiceInfos.GetKey(owner + "/" + host))
	} else {
		for _, s := range c.g.ServiceInfos.List() {
			// In a multi-cluster mesh, this cluster's Service describes the hostname.
			if s.Hostname == host && (svc == nil || s.Cluster == "" || s.Cluster == c.g.Config().ClusterID) {
				svc = s
			}
		}
	}
	if svc == nil {
		c.ex.Verdict = fmt.Sprintf("not sent: no Service or ServiceEntry has the hostname %s (the proxy gets an empty CLA)", host)
		return nil
	}
	c.fact("hostname %s: %s %s", host, registryKind(svc), svc.ResourceName())
	return svc
}

// clusterSet finds the port and the set of CLAs of the cluster, and checks the proxy sees it.
func (c *cluster) clusterSet(name string, portNum int32, subset string) (*collections.ResourceSet, bool) {
	found := false
	for _, sp := range registry.ClusterPorts(c.svc) {
		if sp.Port == portNum {
			c.port, found = sp, true
		}
	}
	if !found {
		c.ex.Verdict = fmt.Sprintf("not sent: %s has no port %d with an EDS cluster (UDP ports and DNS resolution have none)", c.svc.ResourceName(), portNum)
		return nil, false
	}
	c.fact("port %d: named %q", c.port.Port, c.port.Name)
	set := c.g.CLAs.GetKey(policy.SetKey(c.svc, name))
	if set == nil && subset != "" {
		c.fact("subset %q: no DestinationRule that may apply defines it; the proxy is sent every endpoint of the port, as from istiod", subset)
		set = c.g.CLAs.GetKey(policy.SetKey(c.svc, eds.UnknownSubsetKey(name)))
	}
	if set == nil {
		c.ex.Verdict = "not sent: the CLA of this cluster is not built yet"
		return nil, false
	}
	if !policy.Visible(set.Visibility, c.p.View.Namespace, c.p.View.Egress) {
		c.ex.Verdict = fmt.Sprintf("not sent: %s is not visible from namespace %s (its exportTo %v, or the proxy's Sidecar egress listeners %v); the proxy gets an empty CLA",
			c.svc.ResourceName(), c.p.View.Namespace, set.Visibility, c.p.View.Egress)
		return nil, false
	}
	return set, true
}

// plan plans the cluster's CLA for the proxy as ServiceCLAs planned the one it is served, under
// the same policy (eds.CLAPolicy), with a trace of every decision.
func (c *cluster) plan(name, subset string, set *collections.ResourceSet) error {
	root := c.g.Config().SystemNamespace
	if c.g.CLAs.GetKey(policy.SetKey(c.svc, name)) == nil && subset != "" {
		subset = eds.UnknownSubset // the set of the subsets no rule defines
	}
	c.shard = c.g.ServiceEndpoints.GetKey(c.svc.ResourceName())
	var eps []*collections.Endpoint
	if c.shard != nil {
		eps = c.shard.Endpoints
	}
	// The CLA of a service whose CLAs do not depend on the proxy was planned for no class.
	if set.Shared == nil {
		c.class = c.p.Class
	}
	peer := policy.NewPeerAuthn(root, c.g.PeerAuthentications.List())
	horizon := eds.NewSplitHorizon(c.g.NetworkGateways.Get(), eps)
	c.cp = eds.CLAPolicy(c.svc, c.g.ServicePolicies.GetKey(c.svc.ResourceName()), root, c.class, c.port.Port, subset, peer, horizon)
	if len(c.cp.SubsetLabels) > 0 {
		c.fact("subset %q: labels %v", subset, c.cp.SubsetLabels)
	}
	c.trace = eds.NewTrace()
	eds.PlanCLA(name, c.svc, c.port, eps, c.cp, eds.Project(c.svc, c.cp, c.class), c.trace)
	return nil
}

// verdict is the verdict of an address, added when first asked for.
func (c *cluster) verdict(addr string) *EndpointVerdict {
	if i, ok := c.seen[addr]; ok {
		return &c.ex.Endpoints[i]
	}
	c.seen[addr] = len(c.ex.Endpoints)
	c.ex.Endpoints = append(c.ex.Endpoints, EndpointVerdict{Address: addr})
	return &c.ex.Endpoints[len(c.ex.Endpoints)-1]
}

func (c *cluster) want(addr string) bool { return c.address == "" || addr == c.address }

func (v *EndpointVerdict) fact(f string, args ...any) {
	v.Facts = append(v.Facts, fmt.Sprintf(f, args...))
}

// exclude records the first reason that leaves the endpoint out; of an address sent through
// another copy, it is a fact of that copy.
func (v *EndpointVerdict) exclude(reason string) {
	switch {
	case reason == "":
	case v.Sent:
		v.fact("another copy of it: %s", reason)
	case v.Reason == "":
		v.Reason = reason
	}
}

// endpoints gives every endpoint known for the service its verdict: the slices of a Kubernetes
// Service, then what its shard holds besides (WorkloadEntries, a ServiceEntry's endpoints), then
// the gateways the split horizon sends.
func (c *cluster) endpoints() {
	if c.svc.Registry == collections.RegistryKubernetes {
		for _, slice := range c.slicesOf() {
			c.slice(slice)
		}
	}
	if c.shard != nil {
		for _, e := range c.shard.Endpoints {
			if _, ok := c.seen[e.Address]; ok || !c.want(e.Address) {
				continue
			}
			v := c.verdict(e.Address)
			v.fact("%s endpoint %s (%s, cluster %s, network %q)", sourceOf(*e), e.Address, e.Health, orNone(e.Meta.ClusterID), e.Meta.Network)
			c.judge(v, e)
		}
	}
	// What the plan placed and no endpoint of the service is: the gateways the split horizon
	// sends.
	for addr, pl := range c.trace.Placed {
		if !c.want(addr) {
			continue
		}
		if v := c.verdict(addr); !v.Sent {
			c.place(v, pl)
		}
	}
	if c.address != "" && len(c.ex.Endpoints) == 0 {
		c.verdict(c.address).exclude("no EndpointSlice, WorkloadEntry or ServiceEntry of " + c.svc.ResourceName() + " has this address")
	}
	for i := range c.ex.Endpoints {
		if v := &c.ex.Endpoints[i]; !v.Sent && v.Reason == "" {
			v.Reason = "not in the CLA, and no rule recorded why"
		}
	}
}

// judge words what the plan decided about one endpoint of the shard: left out and by which rule,
// reached through gateways, or placed.
func (c *cluster) judge(v *EndpointVerdict, e *collections.Endpoint) {
	if v.Reason != "" {
		return
	}
	key := e.Key()
	if x, left := c.trace.Left[key]; left {
		if gws := c.trace.Via[key]; len(gws) > 0 {
			var addrs []string
			for _, gw := range gws {
				addrs = append(addrs, fmt.Sprintf("%s:%d", gw.Addr, gw.Port))
				c.verdict(gw.Addr).fact("the gateway of network %q (cluster %s) for %s", gw.Network, orNone(gw.Cluster), e.Address)
			}
			v.exclude(fmt.Sprintf("left out by the network split horizon: on network %q, the proxy on %q; reached through the gateway %s instead",
				e.Meta.Network, c.class.Network, strings.Join(addrs, ", ")))
			return
		}
		v.exclude(c.exclusion(x, e))
		return
	}
	if pl, ok := c.trace.Placed[e.Address]; ok {
		c.place(v, pl)
		if eds.DrainingByLabel(e) {
			v.fact("DRAINING by its label %s=%q (istiod's PILOT_DRAINING_LABEL), whatever its conditions say", eds.DrainingLabel,
				e.Meta.LabelValue(eds.DrainingLabel))
		}
		v.fact("%s", c.tlsFact(e, pl.TLSMode))
		if setting := c.svc.HashKey; setting != "" {
			v.fact("%s", hashKeyFact(setting, pl.HashKey))
		}
	}
}

// place records that an address is sent as the plan placed it (a copy of it left out before is
// a fact).
func (c *cluster) place(v *EndpointVerdict, pl eds.Placement) {
	if v.Reason != "" {
		v.fact("another copy of it: %s", v.Reason)
		v.Reason = ""
	}
	v.Sent, v.Port, v.Health, v.Priority, v.Weight, v.TLSMode, v.HashKey = true, pl.Port, healthName(pl.Health), pl.Priority, pl.Weight, pl.TLSMode, pl.HashKey
	v.Locality = pl.Locality.String()
	switch pl.Health {
	case collections.UnHealthy:
		v.fact("sent as UNHEALTHY, as by istiod: clients keep it and send it no requests (no outlierDetection minHealthPercent asks otherwise)")
	case collections.Unknown:
		v.fact("sent with no health status (UNKNOWN), as istiod sends ServiceEntry and WorkloadEntry endpoints and network gateways: clients use it as healthy unless they check its health themselves")
	case collections.Draining:
		v.fact("sent as DRAINING: a persistent-session service keeps its terminating sessions reachable")
	}
	v.fact("locality %q, priority %d, locality weight %d, weight %d", v.Locality, pl.Priority, pl.LocalityWeight, pl.Weight)
}

// deref is what GetKey found in a collection of pointers (nil when it found nothing).
func deref[T any](p **T) *T {
	if p == nil {
		return nil
	}
	return *p
}
