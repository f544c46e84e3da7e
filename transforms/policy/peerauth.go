package policy

import (
	"fmt"
	"maps"
	"slices"

	securityapi "istio.io/api/security/v1beta1"
	securityclient "istio.io/client-go/pkg/apis/security/v1"
	"istio.io/istio/pkg/config/validation"
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// KindPeerAuthentication is the Problem kind of PeerAuthentications.
const KindPeerAuthentication = "PeerAuthentication"

// PeerAuthentications converts PeerAuthentications; invalid ones are reported and ignored.
func PeerAuthentications() transforms.Checked[*securityclient.PeerAuthentication, collections.PeerAuthentication] {
	return transforms.Checked[*securityclient.PeerAuthentication, collections.PeerAuthentication]{Fn: func(_ krt.HandlerContext, pa *securityclient.PeerAuthentication) (*collections.ObjectProblems, *collections.PeerAuthentication) {
		return ConvertPeerAuthentication(pa)
	}}
}

// PeerAuthnNamespace is the extractor of the index of PeerAuthentications by namespace.
func PeerAuthnNamespace(p collections.PeerAuthentication) []string { return []string{p.Namespace} }

// ConvertPeerAuthentication copies the selector and the mTLS modes out of a PeerAuthentication.
// One that istiod's validation (pkg/config/validation ValidatePeerAuthentication, used as is)
// rejects at admission (port-level modes without a selector, a port out of range, an empty or
// wildcard selector label), or whose mode is none of the four the CRD's schema allows, is
// reported as ReasonInvalidPeerAuthentication and ignored as a whole (nil).
func ConvertPeerAuthentication(pa *securityclient.PeerAuthentication) (*collections.ObjectProblems, *collections.PeerAuthentication) {
	if pa == nil {
		return nil, nil
	}
	spec := &pa.Spec
	pr, ok := transforms.Validated(KindPeerAuthentication, pa.ObjectMeta, spec, validation.ValidatePeerAuthentication, collections.ReasonInvalidPeerAuthentication)
	if !ok {
		return pr.Result(), nil
	}
	mode, err := mtlsModeOf(spec.GetMtls())
	if err != nil {
		pr.Add(collections.ReasonInvalidPeerAuthentication, "mtls: "+err.Error())
		return pr.Result(), nil
	}
	out := &collections.PeerAuthentication{
		Name:         pa.Name,
		Namespace:    pa.Namespace,
		CreationTime: pa.CreationTimestamp.Time,
		Mode:         mode,
	}
	// An empty selector is no selector (istiod's ComposePeerAuthentication and
	// addPeerAuthentication both test len(MatchLabels) == 0).
	if sel := spec.GetSelector().GetMatchLabels(); len(sel) > 0 {
		out.Selector = maps.Clone(sel)
	}
	for _, port := range slices.Sorted(maps.Keys(spec.GetPortLevelMtls())) {
		m, err := mtlsModeOf(spec.PortLevelMtls[port])
		if err != nil {
			pr.Add(collections.ReasonInvalidPeerAuthentication, fmt.Sprintf("portLevelMtls[%d]: %v", port, err))
			return pr.Result(), nil
		}
		if out.PortModes == nil {
			out.PortModes = make(map[uint32]collections.MTLSMode, len(spec.PortLevelMtls))
		}
		out.PortModes[port] = m
	}
	return nil, out
}

// mtlsModeOf is the mode a mutual TLS setting gives (MTLSUnset when it is absent).
func mtlsModeOf(m *securityapi.PeerAuthentication_MutualTLS) (collections.MTLSMode, error) {
	switch mode := m.GetMode(); mode {
	case securityapi.PeerAuthentication_MutualTLS_UNSET:
		return collections.MTLSUnset, nil
	case securityapi.PeerAuthentication_MutualTLS_DISABLE:
		return collections.MTLSDisable, nil
	case securityapi.PeerAuthentication_MutualTLS_PERMISSIVE:
		return collections.MTLSPermissive, nil
	case securityapi.PeerAuthentication_MutualTLS_STRICT:
		return collections.MTLSStrict, nil
	default:
		return 0, fmt.Errorf("mode %d is not one of UNSET, DISABLE, PERMISSIVE, STRICT", mode)
	}
}

// PeerAuthnInputs are the PeerAuthentications a transform reads to decide its endpoints' mTLS.
type PeerAuthnInputs struct {
	// RootNamespace is istiod's root namespace: its policies without a selector are mesh-wide.
	RootNamespace string
	// ByNamespace are the policies grouped by namespace (an index of them by PeerAuthnNamespace,
	// as a collection); nil: none are read.
	ByNamespace krt.Collection[krt.IndexObject[string, collections.PeerAuthentication]]
}

// Fetch reads the PeerAuthentications that may decide the mTLS of these endpoints and resolves
// them (nil when there are none). Only an endpoint whose tlsMode is "istio" consults them
// (istiod's mtlsChecker.checkMtlsEnabled): a service without one reads none, so that no policy
// change recomputes it. Otherwise it reads, by key, the policies of the root namespace and of the
// namespaces of those endpoints: one dependency per service, whatever the number of policies. A
// policy change then recomputes the services with such endpoints in its namespace, and every one
// for a policy of the root namespace, as istiod's push does (a partial push of the policy's
// namespace's services; a full one for a root-namespace policy).
func (in PeerAuthnInputs) Fetch(ctx krt.HandlerContext, eps []*collections.Endpoint) *PeerAuthn {
	if in.ByNamespace == nil {
		return nil
	}
	var namespaces []string
	for _, e := range eps {
		if ns := e.Meta.Namespace; consultsPeerAuthn(e) && !slices.Contains(namespaces, ns) {
			namespaces = append(namespaces, ns)
		}
	}
	if len(namespaces) == 0 {
		return nil
	}
	if !slices.Contains(namespaces, in.RootNamespace) {
		namespaces = append(namespaces, in.RootNamespace)
	}
	var policies []collections.PeerAuthentication
	for _, group := range krt.Fetch(ctx, in.ByNamespace, krt.FilterKeys(namespaces...)) {
		policies = append(policies, group.Objects...)
	}
	if len(policies) == 0 {
		return nil
	}
	return NewPeerAuthn(in.RootNamespace, policies)
}

// consultsPeerAuthn reports whether PeerAuthentications may decide an endpoint's mTLS: its
// tlsMode is "istio" and it belongs to a workload's namespace. (An endpoint without a namespace
// is a network gateway's, which istiod sends with tlsMode istio whatever the policies say; every
// workload's endpoint has its namespace.)
func consultsPeerAuthn(e *collections.Endpoint) bool {
	return e.Meta.TLSMode == collections.TLSModeIstio && e.Meta.Namespace != ""
}
