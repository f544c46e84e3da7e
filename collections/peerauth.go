package collections

import (
	"maps"
	"time"
)

// ReasonInvalidPeerAuthentication: istiod's validation (or the CRD's schema) would reject the
// PeerAuthentication at admission, so krteds ignores all of it.
const ReasonInvalidPeerAuthentication = "invalid_peer_authentication"

// MTLSMode is a PeerAuthentication's mutual TLS mode (security.istio.io PeerAuthentication
// mtls.mode), with the proto's numbering.
type MTLSMode uint8

const (
	// MTLSUnset inherits the mode of the level above (PERMISSIVE above the mesh level).
	MTLSUnset MTLSMode = iota
	// MTLSDisable accepts plaintext only: clients must not send mTLS.
	MTLSDisable
	// MTLSPermissive accepts plaintext and mTLS.
	MTLSPermissive
	// MTLSStrict accepts mTLS only.
	MTLSStrict
)

func (m MTLSMode) String() string {
	switch m {
	case MTLSUnset:
		return "UNSET"
	case MTLSDisable:
		return "DISABLE"
	case MTLSPermissive:
		return "PERMISSIVE"
	case MTLSStrict:
		return "STRICT"
	}
	return "UNKNOWN"
}

// PeerAuthentication is the part of an Istio PeerAuthentication that decides endpoints' mTLS,
// copied out of the proto so that comparing two versions is cheap.
type PeerAuthentication struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// CreationTime orders the policies of one level as istiod does: the oldest wins, then the
	// lowest name.
	CreationTime time.Time `json:"creationTime"`
	// Selector is spec.selector.matchLabels; nil for a policy without a selector or with an
	// empty one, which is namespace-wide (mesh-wide in the root namespace).
	Selector map[string]string `json:"selector,omitempty"`
	// Mode is spec.mtls.mode (MTLSUnset when mtls is absent).
	Mode MTLSMode `json:"mode"`
	// PortModes is spec.portLevelMtls by workload (target) port; only a policy with a selector
	// has it.
	PortModes map[uint32]MTLSMode `json:"portModes,omitempty"`
}

// ResourceName is "<namespace>/<name>".
func (p PeerAuthentication) ResourceName() string { return p.Namespace + "/" + p.Name }

// Equals compares every field.
func (p PeerAuthentication) Equals(o PeerAuthentication) bool {
	return p.Name == o.Name &&
		p.Namespace == o.Namespace &&
		p.CreationTime.Equal(o.CreationTime) &&
		maps.Equal(p.Selector, o.Selector) &&
		p.Mode == o.Mode &&
		maps.Equal(p.PortModes, o.PortModes)
}

// Older reports whether p wins over o among the policies of one level: created earlier, then
// the lower name, then the lower namespace (istiod's configCompareByCreationTime).
func (p PeerAuthentication) Older(o PeerAuthentication) bool {
	if c := p.CreationTime.Compare(o.CreationTime); c != 0 {
		return c < 0
	}
	if p.Name != o.Name {
		return p.Name < o.Name
	}
	return p.Namespace < o.Namespace
}
