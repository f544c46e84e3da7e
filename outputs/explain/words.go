package explain

import (
	"fmt"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/eds"
	"github.com/krteds/krteds/transforms/policy"
)

// exclusion words a rule of the plan that left an endpoint out.
func (c *cluster) exclusion(x eds.Exclusion, e *collections.Endpoint) string {
	switch x {
	case eds.ExcludedPort:
		return fmt.Sprintf("its port is named %q, not %q (service port %d)", e.PortName, c.port.Name, c.port.Port)
	case eds.ExcludedNode:
		return fmt.Sprintf("internalTrafficPolicy Local: it runs on node %q, the proxy on %q", e.Meta.NodeName, c.class.NodeName)
	case eds.ExcludedCluster:
		return fmt.Sprintf("the service is local to each cluster: it is in cluster %q, the proxy in %q", e.Meta.ClusterID, c.class.ClusterID)
	case eds.ExcludedTerminating:
		return "terminating: never sent"
	case eds.ExcludedUnhealthy:
		return "not ready: UNHEALTHY endpoints are not sent where the DestinationRule's outlierDetection sets minHealthPercent > 0 (istiod's supportsUnhealthyEndpoints)"
	case eds.ExcludedDraining:
		return "not ready but serving and terminating: DRAINING endpoints are sent only for persistent-session services"
	case eds.ExcludedDrainingLabel:
		return fmt.Sprintf("draining: its label %s=%q (istiod's PILOT_DRAINING_LABEL); DRAINING endpoints are sent only for persistent-session services",
			eds.DrainingLabel, e.Meta.LabelValue(eds.DrainingLabel))
	case eds.ExcludedSubset:
		return fmt.Sprintf("its labels %v do not match the subset's %v", e.Meta.PodLabels.Map(), c.cp.SubsetLabels)
	case eds.ExcludedNetwork:
		d := c.cp.Decide(e)
		return fmt.Sprintf("left out by the network split horizon: on network %q, the proxy on %q, and without mTLS (%s) no gateway may carry it",
			e.Meta.Network, c.class.Network, tlsWhy(c.cp, e, d))
	case eds.ExcludedDistribute:
		return fmt.Sprintf("left out by the DestinationRule's localityLbSetting distribute: from %q (the proxy is in %q) no weight goes to %q",
			c.trace.Distribute, c.class.Locality.String(), e.Meta.Locality.String())
	}
	return fmt.Sprintf("left out by rule %d", x)
}

// hashKeyFact words a sent endpoint's ring-hash key under its service's setting.
func hashKeyFact(setting, key string) string {
	switch {
	case key == "" && setting == collections.HashKeyPodName:
		return fmt.Sprintf("no hash_key (clients hash its address): the service's %s is %q and no Pod backs it", collections.AnnotationEndpointHashKey, setting)
	case key == "":
		return fmt.Sprintf("no hash_key (clients hash its address): the service's %s names the Pod annotation %q, which its Pod does not have", collections.AnnotationEndpointHashKey, setting)
	case setting == collections.HashKeyPodName:
		return fmt.Sprintf("hash_key %q, its Pod's name (the service's %s is %q): ring hash and maglev place it by that, whatever its address", key, collections.AnnotationEndpointHashKey, setting)
	}
	return fmt.Sprintf("hash_key %q, its Pod's annotation %s (the service's %s): ring hash and maglev place it by that, whatever its address", key, setting, collections.AnnotationEndpointHashKey)
}

// tlsFact words the tlsMode decision of a sent endpoint.
func (c *cluster) tlsFact(e *collections.Endpoint, sent string) string {
	d := c.cp.Decide(e)
	f := "no tlsMode metadata (clients send plaintext): " + tlsWhy(c.cp, e, d)
	if d.Value != "" {
		f = "tlsMode " + d.Value + " (clients send mTLS): " + tlsWhy(c.cp, e, d)
	}
	return f
}

// tlsWhy words what decided an endpoint's tlsMode (policy.EndpointTLS.Decide).
func tlsWhy(cp eds.ClusterPolicy, e *collections.Endpoint, d policy.TLSDecision) string {
	switch {
	case d.Rule == policy.TLSIstioMutual:
		return fmt.Sprintf("the DestinationRule %s sets tls mode ISTIO_MUTUAL for the cluster, and its tlsMode is %q", cp.Rule, e.Meta.TLSMode)
	case d.Rule == policy.TLSOff:
		return fmt.Sprintf("the DestinationRule %s sets a tls mode other than ISTIO_MUTUAL for the cluster", cp.Rule)
	case !d.Consulted:
		return fmt.Sprintf("its tlsMode is %q (%s label, \"disabled\" without it), and no DestinationRule sets a tls mode", e.Meta.TLSMode, collections.LabelTLSMode)
	}
	return fmt.Sprintf("its tlsMode is \"istio\", no DestinationRule sets a tls mode, and the PeerAuthentication mode of %s port %d is %s",
		orNone(e.Meta.Namespace), e.Port, d.Peer)
}

// checkServed reads the CLA the proxy is served for the cluster and says where it differs from
// the plan explained (it is being recomputed: ask again).
func (c *cluster) checkServed(name string) error {
	r, pending := c.served.Resolve(&c.p.View, transforms.TypeCLA, name)
	if r == nil {
		if pending {
			return fmt.Errorf("the CLA of %s for this proxy is still being computed; ask again", name)
		}
		return nil
	}
	cla := &endpoint.ClusterLoadAssignment{}
	if err := proto.Unmarshal(r.Body, cla); err != nil {
		return fmt.Errorf("decoding the CLA of %s: %w", name, err)
	}
	served := map[string]bool{}
	for _, l := range cla.Endpoints {
		for _, e := range l.LbEndpoints {
			served[e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()] = true
		}
	}
	for i := range c.ex.Endpoints {
		if v := &c.ex.Endpoints[i]; v.Sent != served[v.Address] {
			v.fact("the CLA the proxy is served now says otherwise (sent: %v): it is being recomputed; ask again", served[v.Address])
		}
	}
	return nil
}

func healthName(h collections.HealthStatus) string {
	switch h {
	case collections.Healthy:
		return "HEALTHY"
	case collections.UnHealthy:
		return "UNHEALTHY"
	case collections.Draining:
		return "DRAINING"
	}
	return "UNKNOWN"
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

func orOther(slice string) string {
	if slice == "" {
		return "a copy of no slice"
	}
	return "the copy of slice " + slice
}
