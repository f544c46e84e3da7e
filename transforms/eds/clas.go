package eds

import (
	"fmt"
	"maps"

	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/policy"
	"github.com/krteds/krteds/transforms/registry"
)

// CLAInputs are what the per-service CLA transform reads.
type CLAInputs struct {
	// RootNamespace is istiod's root namespace (mesh-wide DestinationRules).
	RootNamespace string
	Services      krt.Collection[*collections.ServiceInfo]
	Policies      krt.Collection[collections.ServicePolicy]
	Classes       krt.Collection[collections.ProxyClass]
	// Gateways are the network gateways: with any, endpoints of other networks are reached
	// through them, and a CLA depends on the proxy's network.
	Gateways krt.Singleton[collections.NetworkGateways]
	// LEDSThreshold: CLAs with more endpoints also get their LEDS form (Config.LEDSThreshold).
	LEDSThreshold int
	// PeerAuthn are the PeerAuthentications, which decide the mTLS of endpoints whose cluster's
	// DestinationRule sets no TLS mode.
	PeerAuthn policy.PeerAuthnInputs
}

// DependsOnProxy reports whether a service's CLAs differ between proxies.
func DependsOnProxy(svc *collections.ServiceInfo, lb LBPolicy) bool {
	return svc.NodeLocal || svc.ClusterLocal || (lb.Failover && len(lb.FailoverPriority) > 0)
}

// clusterClassKey is the key of the CLA of clusterName for a projected class.
func clusterClassKey(clusterName string, projected collections.ProxyClass) string {
	if k := transforms.ProjectionKey(projected); k != "" {
		return clusterName + "~" + k
	}
	return clusterName
}

// NeedsClasses reports whether a service's CLAs may differ between proxies: a DestinationRule
// may apply (which one depends on the proxy's namespace), or its own settings read the proxy.
func NeedsClasses(svc *collections.ServiceInfo, sp *collections.ServicePolicy) bool {
	return DependsOnNamespace(sp) || DependsOnProxy(svc, PolicyFor(svc))
}

// ServiceCLAs builds every ClusterLoadAssignment of one service, marshalled once: per cluster
// (non-UDP port, each subset of the DestinationRules that may apply, and, under the name
// outbound|<port>|*|<host>, any subset no rule defines), one set holding the CLA
// for each distinct projection of the connected proxy classes, and which class gets which. A
// service whose CLAs do not depend on the proxy gets one shared CLA per cluster and does not read
// the classes at all, so proxies connecting and leaving never recompute it.
func ServiceCLAs(in CLAInputs) transforms.Many[collections.ServiceEndpoints, collections.ResourceSet] {
	reads := []any{in.Services, in.Policies, in.Classes}
	if in.Gateways != nil {
		reads = append(reads, in.Gateways)
	}
	if in.PeerAuthn.ByNamespace != nil {
		reads = append(reads, in.PeerAuthn.ByNamespace)
	}
	return transforms.Many[collections.ServiceEndpoints, collections.ResourceSet]{Reads: reads, Fn: func(ctx krt.HandlerContext, se collections.ServiceEndpoints) []collections.ResourceSet {
		svc := transforms.Deref(krt.FetchOne(ctx, in.Services, krt.FilterKey(se.ResourceName())))
		if svc == nil || svc.Resolution.IsDNS() {
			// Envoy resolves a DNS service's endpoints itself: its cluster carries them (CDS).
			return nil
		}
		sp := krt.FetchOne(ctx, in.Policies, krt.FilterKey(se.ResourceName()))
		var gateways *collections.NetworkGateways
		if in.Gateways != nil {
			gateways = krt.FetchOne(ctx, in.Gateways.AsCollection())
		}
		// The CLA depends on the proxy's network only if an endpoint is on a network with gateways.
		horizon := NewSplitHorizon(gateways, se.Endpoints)
		// The PeerAuthentications of the endpoints' workloads: the same for every proxy (they
		// depend on the endpoint, not on the proxy), so they add nothing to the projection.
		peer := in.PeerAuthn.Fetch(ctx, se.Endpoints)
		perClass := NeedsClasses(svc, sp) || (horizon != nil && horizon.Crosses)
		classes := []collections.ProxyClass{{}}
		if perClass {
			classes = krt.Fetch(ctx, in.Classes)
		}
		// The port's cluster first, then the rules' subsets, then the set of every subset no rule
		// defines (UnknownSubset).
		subsets := append(append([]string{""}, sp.Subsets()...), UnknownSubset)
		var out []collections.ResourceSet
		for _, port := range registry.ClusterPorts(svc) {
			// CLAs by key, shared by the port's clusters: the unknown-subset CLA of a class is
			// built under the port cluster's name and is that cluster's CLA unless the rule sets a
			// TLS mode (RelabelCLA names it for the cluster asked for).
			built := map[string]*collections.Resource{}
			var base collections.ResourceSet
			vis := svc.PortVisibility(port.Port) // shared by the port's sets
			for _, subset := range subsets {
				name := transforms.ClusterName(port.Port, subset, svc.Hostname)
				claName := name
				if subset == UnknownSubset {
					claName = base.Name
				}
				set := collections.ResourceSet{Key: policy.SetKey(svc, name), Name: name, TypeURL: transforms.TypeCLA, Service: se.ResourceName(), Visibility: vis}
				for _, c := range classes {
					cp := CLAPolicy(svc, sp, in.RootNamespace, c, port.Port, subset, peer, horizon)
					projected := Project(svc, cp, c)
					// A shared host's namespaces have CLAs (and LEDS collections) of their own.
					key := policy.SetKey(svc, CLAKey(claName, cp, projected))
					r, ok := built[key]
					if !ok {
						var problem *collections.Problem
						r, problem = buildCLA(claName, key, svc, port, se, cp, projected, in.LEDSThreshold)
						built[key] = r
						if problem != nil {
							set.Problems = append(set.Problems, *problem)
						}
					}
					if r == nil {
						continue
					}
					if !perClass {
						set.Shared = r
						break
					}
					if set.ByClass == nil {
						set.ByClass = make(map[string]*collections.Resource, len(classes))
					}
					set.ByClass[c.Key()] = r
				}
				switch subset {
				case "":
					base = set
				case UnknownSubset:
					if maps.EqualFunc(set.ByClass, base.ByClass, func(a, b *collections.Resource) bool { return a == b }) {
						set.ByClass = base.ByClass // the same CLAs: hold the map once
					}
				}
				out = append(out, set)
			}
		}
		return out
	}}
}

// CLAPolicy is the policy the CLA of one cluster of svc (a port, maybe a subset) is planned
// under for proxies of a class: the cluster's policy for the class's namespace, with the
// endpoints' PeerAuthentications and the network split horizon (nil: one network). ServiceCLAs
// plans every CLA under it, and krteds explain plans the CLA it explains under it too.
func CLAPolicy(svc *collections.ServiceInfo, sp *collections.ServicePolicy, rootNamespace string, class collections.ProxyClass,
	port int32, subset string, peer *policy.PeerAuthn, horizon *SplitHorizon,
) ClusterPolicy {
	cp := ClusterPolicyFor(svc, sp, rootNamespace, policy.ClassRuleProxy(class), port, subset)
	cp.Peer = peer
	horizon.Apply(&cp)
	return cp
}

// buildCLA plans, encodes and versions one CLA (key is its CLAKey). It is nil, with the
// problem, when it cannot be encoded; a CLA over the size clients accept is kept, with the
// problem. With more endpoints than a positive ledsThreshold, the CLA also carries its LEDS
// form, unless the policy's locality load balancing rewrites the message (those CLAs are sent
// whole).
func buildCLA(name, key string, svc *collections.ServiceInfo, port collections.ServicePort, se collections.ServiceEndpoints,
	cp ClusterPolicy, projected collections.ProxyClass, ledsThreshold int,
) (*collections.Resource, *collections.Problem) {
	plan := PlanCLA(name, svc, port, se.Endpoints, cp, projected, nil)
	r := transforms.Versioned(name, transforms.TypeCLA, plan.Encode())
	r.Cause = se.Cause
	for _, g := range plan.Groups {
		r.Endpoints += len(g.Endpoints)
	}
	if ledsThreshold > 0 && r.Endpoints > ledsThreshold && !cp.PostProcess() {
		form, err := plan.EncodeLEDS(key)
		if err != nil {
			return r, &collections.Problem{Kind: "Service", Object: se.ResourceName(), Reason: collections.ReasonMarshalFailed, Detail: err.Error()}
		}
		r.LEDS = form
	}
	if len(r.Body) > transforms.MaxResourceBytes {
		return r, &collections.Problem{Kind: "Service", Object: se.ResourceName(), Reason: collections.ReasonResourceTooLarge, Subject: name,
			Detail: fmt.Sprintf("ClusterLoadAssignment %s is %d bytes, over the 4 MiB default gRPC message limit of xDS clients", name, len(r.Body))}
	}
	return r, nil
}
