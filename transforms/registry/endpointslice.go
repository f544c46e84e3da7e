package registry

import (
	"fmt"
	"net/netip"
	"strconv"

	"github.com/cespare/xxhash/v2"
	"istio.io/istio/pkg/kube/krt"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// SliceInputs are the collections the EndpointSlice transform reads.
type SliceInputs struct {
	Services  krt.Collection[*collections.ServiceInfo]
	Workloads WorkloadInputs
}

// ipBuckets is the number of keys of the ready-by-IP index. Pods are indexed by a hash of each
// IP, many to a key, so that the index holds one set per bucket rather than one set (a few
// hundred bytes) per IP; a lookup reads its bucket and keeps the pods with that IP. A change of
// any ready pod in a bucket re-evaluates the few transforms that looked an IP up in it.
const ipBuckets = 1024

var ipBucketKeys = func() (k [ipBuckets]string) {
	for i := range k {
		k[i] = strconv.Itoa(i)
	}
	return k
}()

// IPBucket is the ready-by-IP index key of an IP.
func IPBucket(ip string) string { return ipBucketKeys[xxhash.Sum64String(ip)%ipBuckets] }

// SliceEndpointsOf builds the endpoints of one EndpointSlice: one per (endpoint, address, slice
// port). It Fetches the owning ServiceInfo (health rules depend on it), the targetRef Pods (an
// endpoint whose Pod does not exist yet is left out; krt recomputes it when the Pod arrives) and
// their nodes, and, for entries without a Pod targetRef, the ready Pod with that IP in the
// slice's namespace. Slices from multi-cluster services and FQDN slices give no endpoint (they
// say so: Ignored). Every address and port left out is recorded with its rule.
func SliceEndpointsOf(cfg collections.Config, in SliceInputs) transforms.Checked[*collections.Slice, collections.SliceEndpoints] {
	return transforms.Checked[*collections.Slice, collections.SliceEndpoints]{Reads: append([]any{in.Services}, in.Workloads.Reads()...), Fn: func(ctx krt.HandlerContext, slice *collections.Slice) (*collections.ObjectProblems, *collections.SliceEndpoints) {
		if slice.MCS {
			return nil, &collections.SliceEndpoints{Namespace: slice.Namespace, Name: slice.Name, Service: slice.Service, Ignored: collections.ReasonMCSSlice,
				Cause: slice.Cause()}
		}
		pr := &transforms.Problems{Kind: "EndpointSlice", Object: slice.Key}
		svcName := slice.Service
		if svcName == "" {
			pr.Add(collections.ReasonSliceNoServiceName, "label "+collections.LabelServiceName+" is missing; slice ignored")
			return pr.Result(), nil
		}
		if slice.AddressType == discovery.AddressTypeFQDN {
			return nil, &collections.SliceEndpoints{Namespace: slice.Namespace, Name: slice.Name, Service: svcName, Ignored: collections.ReasonFQDNSlice,
				Cause: slice.Cause()}
		}
		svc := transforms.Deref(krt.FetchOne(ctx, in.Services, krt.FilterKey(slice.Namespace+"/"+svcName)))

		out := &collections.SliceEndpoints{Namespace: slice.Namespace, Name: slice.Name, Service: svcName, Cause: slice.Cause()}
		ports := slicePorts(slice, svc, pr, out)
		out.Endpoints = make([]collections.Endpoint, 0, len(slice.Endpoints)*len(ports))
		workloads := FetchWorkloads(ctx, cfg, in.Workloads, targetPods(slice))
		var registryMeta *collections.EndpointMeta
		var addrBuf [64]byte
		for i := range slice.Endpoints {
			e := &slice.Endpoints[i]
			health := EndpointHealth(svc, e.Conditions)
			pending := false
			for _, addr := range e.Addresses {
				ip, err := netip.ParseAddr(addr)
				if err != nil {
					leave(out, pr, i, addr, collections.ReasonInvalidAddress, fmt.Sprintf("endpoint %d: address %q is not an IP address", i, addr))
					continue
				}
				if reason, detail := addressProblem(slice.AddressType, ip); reason != "" {
					leave(out, pr, i, addr, reason, fmt.Sprintf("endpoint %d: address %q %s; skipped", i, addr, detail))
					continue
				}
				if canonical := ip.AppendTo(addrBuf[:0]); string(canonical) != addr {
					addr = string(canonical) // else the slice's own string is kept
				}
				var meta *collections.EndpointMeta
				var podKey string
				if e.Pod != "" {
					w := workloads.Get(e.Pod)
					if w == nil {
						// The Pod has not arrived yet: leave the endpoint out; this transform is
						// recomputed when it does.
						pending = true
						out.Left = append(out.Left, collections.LeftOut{Endpoint: i, Address: addr, Reason: collections.ReasonPodPending,
							Detail: "targetRef Pod " + e.Pod + " is not in the Pod collection: withheld until it appears"})
						continue
					}
					meta, podKey = w.Meta, w.Key
				} else {
					if e.OtherKind != "" {
						pr.Add(collections.ReasonTargetRefKind, fmt.Sprintf("endpoint %d: targetRef kind %q is not Pod; looking the address up instead", i, e.OtherKind))
					}
					if w := ReadyWorkloadWithIP(ctx, cfg, in.Workloads, slice.Namespace, addr); w != nil {
						meta, podKey = w.Meta, w.Key
					} else {
						if registryMeta == nil {
							registryMeta = RegistryOnlyMeta(cfg, FetchSystemNetwork(ctx, in.Workloads.SystemNetwork))
						}
						meta = registryMeta
					}
				}
				for _, p := range ports {
					out.Endpoints = append(out.Endpoints, collections.Endpoint{
						Address:  addr,
						Port:     p.port,
						PortName: p.name,
						Health:   health,
						Slice:    slice.Name,
						Pod:      podKey,
						Meta:     meta,
					})
				}
			}
			if pending {
				out.PendingPods++
			}
		}
		out.Cause = sliceCause(slice, workloads)
		return pr.Result(), out
	}}
}

// addressProblem is what Kubernetes' EndpointSlice validation (pkg/apis/discovery/validation,
// validateEndpoints) finds wrong with a parsed address of a slice of that address type, which
// net/netip accepts: a zone (net.ParseIP rejects one); an IPv4-mapped IPv6 address, rejected in
// IPv6 slices (IsValidIP, IsIPv6String) and, with strict IP validation (the default since
// Kubernetes 1.36), in IPv4 slices; an address of the other family.
func addressProblem(t discovery.AddressType, ip netip.Addr) (reason, detail string) {
	switch {
	case ip.Zone() != "":
		return collections.ReasonZonedAddress, "has a zone"
	case ip.Is4In6():
		return collections.ReasonMappedAddress, "is an IPv4-mapped IPv6 address"
	case t == discovery.AddressTypeIPv4 && !ip.Is4():
		return collections.ReasonAddressFamily, "is not an IPv4 address (addressType IPv4)"
	case t == discovery.AddressTypeIPv6 && !ip.Is6():
		return collections.ReasonAddressFamily, "is not an IPv6 address (addressType IPv6)"
	}
	return "", ""
}

// targetPods lists the keys of the Pods the slice's endpoints name: they are fetched in one go,
// one dependency for the whole slice, which krt re-evaluates when any of those Pods changes.
func targetPods(slice *collections.Slice) []string {
	keys := make([]string, 0, len(slice.Endpoints))
	for i := range slice.Endpoints {
		if k := slice.Endpoints[i].Pod; k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}

type slicePort struct {
	name string
	port uint32
}

// slicePorts returns the usable ports of a slice: a port without a number or outside 1..65535 is
// skipped, and so is a port whose name the Service (when known) does not have; each is recorded
// in se.
func slicePorts(slice *collections.Slice, svc *collections.ServiceInfo, pr *transforms.Problems, se *collections.SliceEndpoints) []slicePort {
	out := make([]slicePort, 0, len(slice.Ports))
	for i, p := range slice.Ports {
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		skip := func(reason, detail string) {
			se.LeftPorts = append(se.LeftPorts, collections.LeftPort{Index: i, Name: name, Reason: reason})
			if detail != "" {
				pr.Add(reason, detail)
			}
		}
		switch {
		case p.Port == nil:
			skip(collections.ReasonNilPort, fmt.Sprintf("port %d (%q) has no number; skipped", i, name))
		case *p.Port < 1 || *p.Port > 65535:
			skip(collections.ReasonInvalidPort, fmt.Sprintf("port %d (%q) number %d is out of range; skipped", i, name, *p.Port))
		case p.Protocol != nil && *p.Protocol == corev1.ProtocolUDP:
			skip(collections.ReasonUDPPort, "") // UDP ports get no cluster; their endpoints are never served
		case svc != nil && !hasPortName(svc, name):
			skip(collections.ReasonUnknownPortName, fmt.Sprintf("port %q is not a port of service %s; skipped", name, svc.ResourceName()))
		default:
			out = append(out, slicePort{name: name, port: uint32(*p.Port)})
		}
	}
	return out
}

func hasPortName(svc *collections.ServiceInfo, name string) bool {
	_, ok := svc.PortByName(name)
	return ok
}

// EndpointHealth classifies a slice endpoint as istiod's endpointHealthStatus does:
//   - ready nil or true → Healthy;
//   - else, for a Service with a persistent-session label, serving (nil = true) and terminating
//     (nil = true) → Draining;
//   - else, when the Service is known and terminating (nil = true) → Terminating;
//   - else UnHealthy.
//
// A nil Service (slice seen without its Service) gives UnHealthy for every not-ready endpoint;
// krteds recomputes the endpoint when the Service appears.
func EndpointHealth(svc *collections.ServiceInfo, c discovery.EndpointConditions) collections.HealthStatus {
	if c.Ready == nil || *c.Ready {
		return collections.Healthy
	}
	serving := c.Serving == nil || *c.Serving
	terminating := c.Terminating == nil || *c.Terminating
	if svc != nil && svc.SupportsDrainingEndpoints() && serving && terminating {
		return collections.Draining
	}
	if svc != nil && terminating {
		return collections.Terminating
	}
	return collections.UnHealthy
}

// SliceService is the index extractor from a slice's endpoints to its Service key.
func SliceService(s collections.SliceEndpoints) []string { return []string{s.ServiceKey()} }

// ClusterShard merges the endpoints of one service's slices in one cluster into its shard:
// de-duplicated by (address, port name), healthiest copy first, then lowest slice name, in a
// stable order.
func ClusterShard(cfg collections.Config, slices krt.Collection[collections.SliceEndpoints], bySvc krt.Index[string, collections.SliceEndpoints]) transforms.Single[*collections.ServiceInfo, collections.ServiceEndpoints] {
	return transforms.Single[*collections.ServiceInfo, collections.ServiceEndpoints]{Reads: []any{slices}, Fn: func(ctx krt.HandlerContext, svc *collections.ServiceInfo) *collections.ServiceEndpoints {
		all, cause := serviceSliceEndpoints(ctx, bySvc, svc)
		eps, dropped := collections.MergeRecorded(all)
		return &collections.ServiceEndpoints{Hostname: svc.Hostname, Namespace: svc.Namespace, Name: svc.Name,
			ClusterID: cfg.ClusterID, Endpoints: eps, Dropped: dropped, Cause: cause}
	}}
}

// serviceSliceEndpoints fetches the endpoints of a service's slices, in a new array of the
// caller's own (to append to and merge in place), and the latest of the slices' causes.
func serviceSliceEndpoints(ctx krt.HandlerContext, bySvc krt.Index[string, collections.SliceEndpoints], svc *collections.ServiceInfo) ([]*collections.Endpoint, collections.Cause) {
	ofService := bySvc.Fetch(ctx, svc.ResourceName())
	n := 0
	var cause collections.Cause
	for _, s := range ofService {
		n += len(s.Endpoints)
		cause = cause.Later(s.Cause)
	}
	all := make([]*collections.Endpoint, 0, n)
	for _, s := range ofService {
		all = collections.AppendRefs(all, s.Endpoints)
	}
	return all, cause
}

// leave records that the slice's endpoint i gives no endpoint for addr, and reports it as a
// problem of the slice.
func leave(out *collections.SliceEndpoints, pr *transforms.Problems, i int, addr, reason, detail string) {
	out.Left = append(out.Left, collections.LeftOut{Endpoint: i, Address: addr, Reason: reason, Detail: detail})
	pr.Add(reason, detail)
}

// sliceCause is the latest input change of a slice's endpoints: the slice's version, or a Pod
// it names seen later (a Pod that arrived late, or became ready or not after the slice was
// written). A slice of another writer than the EndpointSlice controller, never stamped, takes the
// latest change of readiness of its Pods that krteds could have seen by the slice's version, as
// the controller would have stamped it (a version the controller wrote unstamped was no Pod's
// change: a slice made anew for endpoints moved, a Service's change); one whose stamp is its
// previous version's has no trigger of its own.
func sliceCause(slice *collections.Slice, workloads Workloads) collections.Cause {
	c := slice.Cause()
	var ready int64
	for _, w := range workloads {
		if t := w.Cause.Trigger; t > ready && (slice.Seen == 0 || t <= slice.Seen) {
			ready = t
		}
	}
	if c.Trigger == 0 && slice.Stamped == 0 && !slice.Controlled && ready != 0 {
		c.Trigger, c.TriggerFrom = ready, collections.TriggerReady
	}
	for _, w := range workloads {
		c = c.Later(w.Cause)
	}
	return c
}
