package graphs

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	discovery "k8s.io/api/discovery/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// slicesOf lists the EndpointSlices labelled for a Service, by name.
func (g *Graph) slicesOf(svc *collections.ServiceInfo) []*collections.Slice {
	var out []*collections.Slice
	for _, s := range g.Inputs.EndpointSlices.List() {
		if s.Namespace == svc.Namespace && s.Service == svc.Name {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *collections.Slice) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// explainSlice walks one slice's endpoints the way SliceEndpointsOf, the shard and PlanCLA do.
func (g *Graph) explainSlice(slice *collections.Slice, svc *collections.ServiceInfo, port collections.ServicePort, cp transforms.ClusterPolicy,
	class collections.ProxyClass, shard *collections.ServiceEndpoints, want func(string) bool, verdict func(string) *EndpointVerdict,
) {
	key := slice.Key
	produced := g.SliceEndpoints.GetKey(key)
	// What the transform left out, by slice endpoint and address, and their details (a slice of
	// many bad addresses is looked up once each, not scanned per address).
	type at struct {
		i    int
		addr string
	}
	leftAt := map[at][]collections.LeftOut{}
	leftDetails := map[string]bool{}
	if produced != nil {
		for _, l := range produced.Left {
			leftAt[at{l.Endpoint, l.Address}] = append(leftAt[at{l.Endpoint, l.Address}], l)
			leftDetails[l.Detail] = true
		}
	}
	var problems []collections.Problem
	if op := g.Problems.GetKey("EndpointSlice/" + key); op != nil {
		problems = op.Problems
	}
	for i, se := range slice.Endpoints {
		for _, addr := range se.Addresses {
			if !want(addr) {
				if ip, err := netip.ParseAddr(addr); err != nil || !want(ip.String()) {
					continue
				}
			}
			ip, err := netip.ParseAddr(addr)
			name := addr
			if err == nil {
				name = ip.String()
			}
			v := verdict(name)
			v.fact("EndpointSlice %s endpoint %d (%s): %s", key, i, addr, conditions(se.Conditions))
			if slice.MCS {
				v.exclude("slice " + key + " belongs to a multi-cluster service (" + collections.LabelMCSServiceName + "): ignored, as by istiod")
				continue
			}
			if slice.AddressType == discovery.AddressTypeFQDN {
				v.exclude("slice " + key + " has addressType FQDN: ignored, as by istiod")
				continue
			}
			// What the slice transform left out, and by which rule, as it recorded it.
			left := false
			for _, l := range leftAt[at{i, addr}] {
				left = true
				if l.Reason == collections.ReasonPodPending {
					v.exclude(l.Detail)
				} else {
					v.exclude(fmt.Sprintf("skipped as invalid: %s (%s)", l.Detail, l.Reason))
				}
			}
			if left {
				continue
			}
			if se.Pod != "" {
				v.fact("targetRef Pod %s found", se.Pod)
			} else {
				v.fact("no Pod targetRef: the Pod is looked up by its IP in %s", slice.Namespace)
			}
			var mine []collections.Endpoint
			if produced != nil {
				for _, e := range produced.Endpoints {
					if e.Address == name {
						mine = append(mine, e)
					}
				}
			}
			if len(mine) == 0 {
				// The slice's own problems (its ports), not those of an address of it.
				var why []string
				for _, pr := range problems {
					if !leftDetails[pr.Detail] {
						why = append(why, pr.Detail)
					}
				}
				if len(why) == 0 {
					why = []string{"its ports: " + slicePortNames(slice)}
				}
				v.exclude("slice " + key + " gives no endpoint for it: " + strings.Join(why, "; "))
				continue
			}
			var onPort *collections.Endpoint
			for i := range mine {
				if mine[i].PortName == port.Name {
					onPort = &mine[i]
				}
			}
			if onPort == nil {
				v.exclude(fmt.Sprintf("the slice has no port named %q (service port %d); its ports: %s", port.Name, port.Port, slicePortNames(slice)))
				continue
			}
			e := *onPort
			v.fact("health %s (from the conditions%s)", e.Health, persistent(svc))
			if e.Pod != "" {
				v.fact("workload %s, labels %v, locality %q", e.Pod, e.Meta.PodLabels.Map(), e.Meta.Locality.String())
			}
			if shard != nil && !slices.ContainsFunc(shard.Endpoints, func(o *collections.Endpoint) bool { return o.Key() == e.Key() && o.Slice == e.Slice }) {
				v.exclude("another slice of the service has the same address and port name; the healthiest copy, then the lowest slice name, is kept")
				continue
			}
			judge(v, e, svc, port, cp, class, verdict)
		}
	}
}

// judge applies PlanCLA's rules to one endpoint, then the network split horizon: an
// endpoint reached through a gateway is not sent itself; the gateway is.
func judge(v *EndpointVerdict, e collections.Endpoint, svc *collections.ServiceInfo, port collections.ServicePort, cp transforms.ClusterPolicy,
	class collections.ProxyClass, verdict func(string) *EndpointVerdict,
) {
	if v.Reason != "" {
		return
	}
	v.loc = &e.Meta.Locality
	if r := exclusionReason(transforms.Exclude(svc, port, cp, class, e), e, port, cp, class); r != "" {
		v.exclude(r)
		return
	}
	v.tls = tlsOf(cp, e)
	if cp.LB.Networks == nil {
		return
	}
	direct, gws := transforms.NetworkRoute(e, cp.LB.Networks, class.Network)
	switch {
	case direct:
	case len(gws) == 0:
		v.exclude(fmt.Sprintf("left out by the network split horizon: on network %q, the proxy on %q, and without mTLS (%s) no gateway may carry it", e.Meta.Network, class.Network, v.tls.why))
	default:
		var addrs []string
		for _, gw := range gws {
			addrs = append(addrs, fmt.Sprintf("%s:%d", gw.Addr, gw.Port))
			gv := verdict(gw.Addr)
			gv.fact("the gateway of network %q (cluster %s) for %s", gw.Network, orNone(gw.Cluster), e.Address)
		}
		v.exclude(fmt.Sprintf("left out by the network split horizon: on network %q, the proxy on %q; reached through the gateway %s instead", e.Meta.Network, class.Network, strings.Join(addrs, ", ")))
	}
}

// tlsVerdict is the tlsMode metadata the rules give an endpoint (EndpointTLS.Value), and why.
type tlsVerdict struct {
	value, why string
}

// tlsOf words EndpointTLS's decision for one endpoint: the DestinationRule's TLS mode for the
// cluster, where it sets one; else the endpoint's own tlsMode, and for "istio" the
// PeerAuthentication mode of its workload's port (istiod's mtlsChecker.checkMtlsEnabled).
func tlsOf(cp transforms.ClusterPolicy, e collections.Endpoint) *tlsVerdict {
	t := &tlsVerdict{value: cp.EndpointTLS().Value(&e)}
	switch cp.TLS {
	case transforms.TLSIstioMutual:
		t.why = fmt.Sprintf("the DestinationRule %s sets tls mode ISTIO_MUTUAL for the cluster, and its tlsMode is %q", cp.Rule, e.Meta.TLSMode)
	case transforms.TLSOff:
		t.why = fmt.Sprintf("the DestinationRule %s sets a tls mode other than ISTIO_MUTUAL for the cluster", cp.Rule)
	default:
		if e.Meta.TLSMode != collections.TLSModeIstio {
			t.why = fmt.Sprintf("its tlsMode is %q (%s label, \"disabled\" without it), and no DestinationRule sets a tls mode", e.Meta.TLSMode, collections.LabelTLSMode)
			break
		}
		m := cp.Peer.ModeFor(e.Meta.Namespace, e.Meta.Label, e.Port)
		t.why = fmt.Sprintf("its tlsMode is \"istio\", no DestinationRule sets a tls mode, and the PeerAuthentication mode of %s port %d is %s", orNone(e.Meta.Namespace), e.Port, m)
	}
	return t
}

// fact words the decision, checked against the tlsMode the CLA holds.
func (t *tlsVerdict) fact(sent string) string {
	f := "no tlsMode metadata (clients send plaintext): " + t.why
	if t.value != "" {
		f = "tlsMode " + t.value + " (clients send mTLS): " + t.why
	}
	if sent != t.value {
		// The CLA is what is served; explain's rules disagree with it (a defect).
		f += fmt.Sprintf("; explain's rules give tlsMode %q, but the CLA has it as %q", t.value, sent)
	}
	return f
}

// distributeReason words the one locality rule that removes endpoints (the plan's distribute, transforms/locality.go):
// the first distribute entry whose from matches the proxy's locality sends nothing to a locality
// none of its to patterns matches.
func distributeReason(cp transforms.ClusterPolicy, proxy collections.Locality, loc *collections.Locality) string {
	if loc == nil || !cp.PostProcess() || cp.Setting == nil {
		return ""
	}
	for _, d := range cp.Setting.Distribute {
		if !transforms.LocalityMatch(proxy, d.From) {
			continue
		}
		for to := range d.To {
			if transforms.LocalityMatch(*loc, to) {
				return ""
			}
		}
		return fmt.Sprintf("left out by the DestinationRule's localityLbSetting distribute: from %q (the proxy is in %q) no weight goes to %q",
			d.From, proxy.String(), loc.String())
	}
	return ""
}

// exclusionReason words a rule of transforms.Exclude for one endpoint.
func exclusionReason(x transforms.Exclusion, e collections.Endpoint, port collections.ServicePort, cp transforms.ClusterPolicy, class collections.ProxyClass) string {
	switch x {
	case transforms.ExcludedPort:
		return fmt.Sprintf("its port is named %q, not %q (service port %d)", e.PortName, port.Name, port.Port)
	case transforms.ExcludedNode:
		return fmt.Sprintf("internalTrafficPolicy Local: it runs on node %q, the proxy on %q", e.Meta.NodeName, class.NodeName)
	case transforms.ExcludedCluster:
		return fmt.Sprintf("the service is local to each cluster: it is in cluster %q, the proxy in %q", e.Meta.ClusterID, class.ClusterID)
	case transforms.ExcludedTerminating:
		return "terminating: never sent"
	case transforms.ExcludedUnhealthy:
		return "not ready: UNHEALTHY endpoints are not sent where the DestinationRule's outlierDetection sets minHealthPercent > 0 (istiod's supportsUnhealthyEndpoints)"
	case transforms.ExcludedDraining:
		return "not ready but serving and terminating: DRAINING endpoints are sent only for persistent-session services"
	case transforms.ExcludedSubset:
		return fmt.Sprintf("its labels %v do not match the subset's %v", e.Meta.PodLabels.Map(), cp.SubsetLabels)
	}
	return ""
}

func conditions(c discovery.EndpointConditions) string {
	b := func(p *bool) string {
		if p == nil {
			return "unset"
		}
		return fmt.Sprint(*p)
	}
	return "ready=" + b(c.Ready) + " serving=" + b(c.Serving) + " terminating=" + b(c.Terminating)
}

func slicePortNames(s *collections.Slice) string {
	var names []string
	for _, p := range s.Ports {
		n := ""
		if p.Name != nil {
			n = *p.Name
		}
		names = append(names, fmt.Sprintf("%q", n))
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func persistent(svc *collections.ServiceInfo) string {
	if svc.SupportsDrainingEndpoints() {
		return "; a persistent-session service"
	}
	return ""
}

func registryKind(svc *collections.ServiceInfo) string {
	if svc.Registry == collections.RegistryKubernetes {
		return "Service"
	}
	return "ServiceEntry host"
}

func sourceOf(e collections.Endpoint) string {
	if e.Slice != "" {
		return "slice " + e.Slice
	}
	if e.Pod != "" {
		return "workload " + e.Pod
	}
	return "registry"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
