package policy

import (
	"strconv"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// PeerAuthn is istiod's resolution of PeerAuthentications for endpoints
// (pilot/pkg/model/authentication.go addPeerAuthentication and getConfigsForWorkload,
// pilot/pkg/security/authn/policy_applier.go ComposePeerAuthentication and
// GetMutualTLSModeForPort), over the policies of the root namespace and of some workload
// namespaces. A nil PeerAuthn has no policy: every mode is PERMISSIVE.
type PeerAuthn struct {
	rootNamespace string
	// mesh is the root namespace's oldest policy without a selector.
	mesh *collections.PeerAuthentication
	// namespaces are the other namespaces' policies.
	namespaces map[string]*peerNamespace
}

// peerNamespace is one namespace's policies: the oldest without a selector (namespace-wide), and
// those with one, oldest first.
type peerNamespace struct {
	wide      *collections.PeerAuthentication
	workloads []collections.PeerAuthentication
}

// NewPeerAuthn resolves policies (in any order) as istiod does: in the root namespace, the
// oldest policy without a selector is mesh-wide and those with one are ignored; in any other
// namespace, the oldest without a selector is namespace-wide, and those with one are
// workload-wide, the oldest whose selector picks a workload deciding for it. Among policies of
// one level the oldest wins, then the lowest name (istiod's sortConfigByCreationTime).
func NewPeerAuthn(rootNamespace string, policies []collections.PeerAuthentication) *PeerAuthn {
	p := &PeerAuthn{rootNamespace: rootNamespace}
	for i := range policies {
		pa := &policies[i]
		if pa.Namespace == rootNamespace {
			if pa.Selector == nil && (p.mesh == nil || pa.Older(*p.mesh)) {
				p.mesh = pa
			}
			continue
		}
		if p.namespaces == nil {
			p.namespaces = map[string]*peerNamespace{}
		}
		ns := p.namespaces[pa.Namespace]
		if ns == nil {
			ns = &peerNamespace{}
			p.namespaces[pa.Namespace] = ns
		}
		if pa.Selector == nil {
			if ns.wide == nil || pa.Older(*ns.wide) {
				ns.wide = pa
			}
			continue
		}
		// Insertion in age order: a namespace has few.
		at := len(ns.workloads)
		for at > 0 && pa.Older(ns.workloads[at-1]) {
			at--
		}
		ns.workloads = append(ns.workloads, collections.PeerAuthentication{})
		copy(ns.workloads[at+1:], ns.workloads[at:])
		ns.workloads[at] = *pa
	}
	return p
}

// PeerMTLS is the mTLS mode the PeerAuthentications give one workload port, and where it comes
// from.
type PeerMTLS struct {
	// Mode is never MTLSUnset: PERMISSIVE when no policy sets one.
	Mode collections.MTLSMode
	// Policy is the policy whose mode applies (nil for the default), at Scope.
	Policy *collections.PeerAuthentication
	Scope  PeerScope
	// Port is the port of a ScopePort mode.
	Port uint32
}

// PeerScope is how the deciding PeerAuthentication applies to a workload.
type PeerScope uint8

const (
	ScopeDefault PeerScope = iota
	ScopeMesh
	ScopeNamespace
	ScopeWorkload
	// ScopePort: the workload policy's portLevelMtls entry for the port.
	ScopePort
)

// String says where the mode comes from, in words.
func (m PeerMTLS) String() string {
	if m.Policy == nil {
		return m.Mode.String() + ", the default (no PeerAuthentication sets a mode)"
	}
	what := [...]string{ScopeMesh: "mesh-wide", ScopeNamespace: "namespace-wide", ScopeWorkload: "selecting the workload"}
	scope := "portLevelMtls of port " + strconv.FormatUint(uint64(m.Port), 10)
	if m.Scope != ScopePort && int(m.Scope) < len(what) {
		scope = what[m.Scope]
	}
	return m.Mode.String() + " from PeerAuthentication " + m.Policy.ResourceName() + " (" + scope + ")"
}

// ModeFor is ComposePeerAuthentication's mode for a workload of the namespace with these
// (augmented) labels, on its port (the endpoint's target port, as GetMutualTLSModeForPort is
// given ep.EndpointPort): PERMISSIVE, replaced by the mesh-wide policy's mode, then the
// namespace-wide one's, then the oldest selecting workload policy's, each only where it is not
// UNSET; that policy's portLevelMtls entry for the port replaces it, an UNSET entry inheriting.
func (p *PeerAuthn) ModeFor(namespace string, label func(string) (string, bool), port uint32) PeerMTLS {
	out := PeerMTLS{Mode: collections.MTLSPermissive}
	if p == nil {
		return out
	}
	set := func(pa *collections.PeerAuthentication, mode collections.MTLSMode, scope PeerScope) {
		if mode != collections.MTLSUnset {
			out = PeerMTLS{Mode: mode, Policy: pa, Scope: scope}
		}
	}
	if p.mesh != nil {
		set(p.mesh, p.mesh.Mode, ScopeMesh)
	}
	ns := p.namespaces[namespace]
	if ns == nil || namespace == p.rootNamespace {
		return out
	}
	if ns.wide != nil {
		set(ns.wide, ns.wide.Mode, ScopeNamespace)
	}
	for i := range ns.workloads {
		w := &ns.workloads[i]
		if !transforms.SubsetMatch(label, w.Selector) {
			continue
		}
		set(w, w.Mode, ScopeWorkload)
		if m, ok := w.PortModes[port]; ok && m != collections.MTLSUnset {
			set(w, m, ScopePort)
			out.Port = port
		}
		break
	}
	return out
}

// Disables reports whether the PeerAuthentications disable mTLS on an endpoint (its workload's
// namespace, labels and target port). Endpoints that do not consult them (consultsPeerAuthn)
// never are.
func (p *PeerAuthn) Disables(e *collections.Endpoint) bool {
	m, consulted := p.modeOf(e)
	return consulted && m.Mode == collections.MTLSDisable
}

// modeOf is the PeerAuthentication mode of an endpoint's workload and port, when the endpoint
// consults them.
func (p *PeerAuthn) modeOf(e *collections.Endpoint) (PeerMTLS, bool) {
	if p == nil || !consultsPeerAuthn(e) {
		return PeerMTLS{}, false
	}
	return p.ModeFor(e.Meta.Namespace, e.Meta.Label, e.Port), true
}

// EndpointTLS decides the tlsMode metadata of each endpoint of one cluster, as istiod's
// mtlsChecker.checkMtlsEnabled and util.AppendLbEndpointMetadata do
// (pilot/pkg/xds/endpoints/mtls_checker.go, pilot/pkg/networking/util/util.go): the
// DestinationRule's TLS mode for the cluster, where it sets one, decides alone; else an endpoint
// has mTLS when its tlsMode is "istio" and its PeerAuthentications do not DISABLE it.
type EndpointTLS struct {
	// Mode is the DestinationRule's TLS mode for the cluster (TLSByEndpoint when none sets one).
	Mode TLSMetadata
	// Peer resolves the PeerAuthentications of the service's endpoints (nil: none).
	Peer *PeerAuthn
}

// Value is the tlsMode metadata an endpoint carries, "" for none.
func (t EndpointTLS) Value(e *collections.Endpoint) string { return t.Decide(e).Value }

// TLSDecision is an endpoint's tlsMode metadata and what decided it: the DestinationRule's TLS
// mode for the cluster (Rule, TLSIstioMutual or TLSOff), else the endpoint's own tlsMode and,
// for "istio", the PeerAuthentication mode of its workload's port (Peer, when consulted).
type TLSDecision struct {
	Value     string
	Rule      TLSMetadata
	Peer      PeerMTLS
	Consulted bool
}

// Decide is how the endpoint's tlsMode metadata is decided.
func (t EndpointTLS) Decide(e *collections.Endpoint) TLSDecision {
	d := TLSDecision{Rule: t.Mode}
	switch t.Mode {
	case TLSByEndpoint:
		if e.Meta.TLSMode != collections.TLSModeIstio {
			break
		}
		d.Peer, d.Consulted = t.Peer.modeOf(e)
		if !d.Consulted || d.Peer.Mode != collections.MTLSDisable {
			d.Value = collections.TLSModeIstio
		}
	case TLSIstioMutual:
		if m := e.Meta.TLSMode; m != "" && m != collections.TLSModeDisabled {
			d.Value = m
		}
	}
	return d
}

// TLSMetadata says which endpoints of a cluster carry the filter metadata
// envoy.transport_socket_match {tlsMode: <value>}, as istiod's mtlsChecker.checkMtlsEnabled and
// util.AppendLbEndpointMetadata decide it (pilot/pkg/xds/endpoints/mtls_checker.go,
// pilot/pkg/networking/util/util.go): an endpoint whose mTLS is off has its TLSMode blanked, and
// the metadata is written for a TLSMode that is neither "" nor "disabled".
type TLSMetadata uint8

const (
	// TLSByEndpoint: no DestinationRule TLS mode applies to the cluster; mTLS is on for an
	// endpoint whose tlsMode is "istio" unless its PeerAuthentications DISABLE it, and it then
	// carries tlsMode: istio. Any other value carries nothing.
	TLSByEndpoint TLSMetadata = iota
	// TLSIstioMutual: the rule's mode is ISTIO_MUTUAL; mTLS is on for every endpoint, and each
	// carries its own tlsMode value unless that is "" or "disabled".
	TLSIstioMutual
	// TLSOff: the rule sets another mode (DISABLE, SIMPLE, MUTUAL); no endpoint carries it.
	TLSOff
)

// TLSMetadataFor is the TLS metadata rule for a DestinationRule TLS mode ("" = none applies).
func TLSMetadataFor(drMode string) TLSMetadata {
	switch drMode {
	case "":
		return TLSByEndpoint
	case collections.ClientTLSIstioMutual:
		return TLSIstioMutual
	}
	return TLSOff
}
