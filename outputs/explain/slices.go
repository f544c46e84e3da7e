package explain

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	discovery "k8s.io/api/discovery/v1"

	"github.com/krteds/krteds/collections"
)

// slicesOf lists the EndpointSlices labelled for the Service, by name.
func (c *cluster) slicesOf() []*collections.Slice {
	var out []*collections.Slice
	for _, s := range c.g.Inputs.EndpointSlices.List() {
		if s.Namespace == c.svc.Namespace && s.Service == c.svc.Name {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *collections.Slice) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// slice words what the slice transform and the merge recorded of each address of one slice,
// then what the plan decided of the endpoint on the cluster's port.
func (c *cluster) slice(slice *collections.Slice) {
	produced := c.g.SliceEndpoints.GetKey(slice.Key)
	left := map[sliceAddr][]collections.LeftOut{}
	if produced != nil {
		for _, l := range produced.Left {
			left[sliceAddr{l.Endpoint, l.Address}] = append(left[sliceAddr{l.Endpoint, l.Address}], l)
		}
	}
	for i, se := range slice.Endpoints {
		for _, addr := range se.Addresses {
			name := addr
			if ip, err := netip.ParseAddr(addr); err == nil {
				name = ip.String()
			}
			if !c.want(addr) && !c.want(name) {
				continue
			}
			v := c.verdict(name)
			v.fact("EndpointSlice %s endpoint %d (%s): %s", slice.Key, i, addr, conditions(se.Conditions))
			c.sliceAddress(v, slice, produced, i, addr, name, left[sliceAddr{i, addr}])
		}
	}
}

type sliceAddr struct {
	i    int
	addr string
}

// sliceAddress words one address of a slice: ignored with the slice, left out by the slice
// transform, on no port of the cluster, a copy the merge dropped, or judged by the plan.
func (c *cluster) sliceAddress(v *EndpointVerdict, slice *collections.Slice, produced *collections.SliceEndpoints, i int, addr, name string, left []collections.LeftOut) {
	switch {
	case produced == nil:
		v.exclude("slice " + slice.Key + " gives no endpoint: it is not computed yet, or its problems say why (" + slice.Key + " at /debug/push_status)")
		return
	case produced.Ignored != "":
		v.exclude("slice " + slice.Key + " " + ignoredWords(produced.Ignored) + ": ignored, as by istiod")
		return
	}
	for _, l := range left {
		if l.Reason == collections.ReasonPodPending {
			v.exclude(l.Detail)
		} else {
			v.exclude(fmt.Sprintf("skipped as invalid: %s (%s)", l.Detail, l.Reason))
		}
	}
	if len(left) > 0 {
		return
	}
	if pod := slice.Endpoints[i].Pod; pod != "" {
		v.fact("targetRef Pod %s found", pod)
	} else {
		v.fact("no Pod targetRef: the Pod is looked up by its IP in %s", slice.Namespace)
	}
	var onPort *collections.Endpoint
	anyPort := false
	for j := range produced.Endpoints {
		if e := &produced.Endpoints[j]; e.Address == name {
			anyPort = true
			if e.PortName == c.port.Name {
				onPort = e
			}
		}
	}
	switch {
	case !anyPort:
		v.exclude("slice " + slice.Key + " gives no endpoint for it: " + leftPortsWords(slice, produced))
		return
	case onPort == nil:
		v.exclude(c.noPort(slice, produced))
		return
	}
	e := onPort
	v.fact("health %s (from the conditions%s)", e.Health, persistent(c.svc))
	if e.Pod != "" {
		v.fact("workload %s, labels %v, locality %q", e.Pod, e.Meta.PodLabels.Map(), e.Meta.Locality.String())
	}
	if c.shard != nil {
		for _, d := range c.shard.Dropped {
			if d.Address == name && d.PortName == e.PortName && d.Slice == e.Slice {
				v.fact("this copy of %s port %q is dropped for %s (%s), over this one (%s): the healthiest copy, then the lowest slice name, is kept",
					name, e.PortName, orOther(d.KeptSlice), d.KeptHealth, d.Health)
				return
			}
		}
	}
	c.judge(v, e)
}

// noPort says why a slice gives no endpoint on the cluster's port for an address: the port was
// left out (and why), or the slice has none of its name.
func (c *cluster) noPort(slice *collections.Slice, produced *collections.SliceEndpoints) string {
	for _, lp := range produced.LeftPorts {
		if lp.Name == c.port.Name {
			return fmt.Sprintf("the slice's port %d named %q gives no endpoint: %s", lp.Index, lp.Name, portWords(lp.Reason))
		}
	}
	return fmt.Sprintf("the slice has no port named %q (service port %d); its ports: %s", c.port.Name, c.port.Port, slicePortNames(slice))
}

// leftPortsWords says why a slice's ports give no endpoint: each port left out and why.
func leftPortsWords(slice *collections.Slice, produced *collections.SliceEndpoints) string {
	if len(produced.LeftPorts) == 0 {
		return "its ports: " + slicePortNames(slice)
	}
	var out []string
	for _, lp := range produced.LeftPorts {
		out = append(out, fmt.Sprintf("port %d %q: %s", lp.Index, lp.Name, portWords(lp.Reason)))
	}
	return strings.Join(out, "; ")
}

func ignoredWords(reason string) string {
	switch reason {
	case collections.ReasonMCSSlice:
		return "belongs to a multi-cluster service (" + collections.LabelMCSServiceName + ")"
	case collections.ReasonFQDNSlice:
		return "has addressType FQDN"
	}
	return "is ignored (" + reason + ")"
}

func portWords(reason string) string {
	switch reason {
	case collections.ReasonNilPort:
		return "it has no number"
	case collections.ReasonInvalidPort:
		return "its number is out of range"
	case collections.ReasonUDPPort:
		return "it is UDP, which gets no cluster"
	case collections.ReasonUnknownPortName:
		return "the Service has no port of its name"
	}
	return reason
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
