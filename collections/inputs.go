package collections

import (
	"sync/atomic"
	"time"

	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	securityclient "istio.io/client-go/pkg/apis/security/v1"
	"istio.io/istio/pkg/kube/krt"
	corev1 "k8s.io/api/core/v1"
)

// Inputs are the Kubernetes collections the EDS graph reads. They come from informers over a
// cluster, from a folder of manifests, or from static collections (package sources).
type Inputs struct {
	Namespaces     krt.Collection[*corev1.Namespace]
	Nodes          krt.Collection[*corev1.Node]
	Pods           krt.Collection[*Pod]
	Services       krt.Collection[*corev1.Service]
	EndpointSlices krt.Collection[*Slice]
	// DestinationRules and Sidecars (networking.istio.io) stay empty where their CRDs are not
	// installed.
	DestinationRules krt.Collection[*networkingclient.DestinationRule]
	Sidecars         krt.Collection[*networkingclient.Sidecar]
	// ServiceEntries and WorkloadEntries (networking.istio.io) stay empty likewise.
	ServiceEntries  krt.Collection[*networkingclient.ServiceEntry]
	WorkloadEntries krt.Collection[*networkingclient.WorkloadEntry]
	// PeerAuthentications (security.istio.io) stay empty likewise.
	PeerAuthentications krt.Collection[*securityclient.PeerAuthentication]
	// RemoteClusters (optional) are the other clusters of the mesh: their endpoints join this
	// cluster's, one shard per cluster. Nil: a single-cluster mesh, which pays nothing for it.
	RemoteClusters krt.Collection[*Cluster]
	// Clock (optional) is marked by the source whenever it writes a change.
	Clock *InputClock
}

// Input collection names, as they appear in /debug/krt and /debug/krtz, whichever source (informers,
// manifests, static) feeds them.
const (
	NameNamespaces      = "input/Namespaces"
	NameNodes           = "input/Nodes"
	NamePods            = "input/Pods"
	NameServices        = "input/Services"
	NameEndpointSlices  = "input/EndpointSlices"
	NameDestRules       = "input/DestinationRules"
	NameSidecars        = "input/Sidecars"
	NameServiceEntries  = "input/ServiceEntries"
	NameWorkloadEntries = "input/WorkloadEntries"
	NamePeerAuthns      = "input/PeerAuthentications"
	NameRemoteClusters  = "input/RemoteClusters"
)

// InputClock records when an input last changed, at the moment the source writes the change and
// before any collection sees it, so that outputs can tell how long a change took to reach a
// client. Nil-safe.
type InputClock struct{ last atomic.Int64 }

// Mark records that an input changes now.
func (c *InputClock) Mark() {
	if c != nil {
		c.last.Store(time.Now().UnixNano())
	}
}

// Last is when an input last changed (zero if never).
func (c *InputClock) Last() time.Time {
	if c == nil {
		return time.Time{}
	}
	if n := c.last.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Change says which xDS resources changed: resources of one type by name (for every proxy), or
// every resource of some connections (the proxies' views changed). At is the last input change
// before it.
type Change struct {
	TypeURL string
	Names   []string
	// Causes are, when known, the input change each name's new version was computed for
	// (Causes[i] for Names[i]); nil: none known.
	Causes []Cause
	Conns  []string
	At     time.Time
}

// CauseOf looks up the input change of a name's new version (nil without Causes).
func (c Change) CauseOf() func(name string) Cause {
	if len(c.Causes) == 0 {
		return nil
	}
	by := make(map[string]Cause, len(c.Causes))
	for i, n := range c.Names {
		if i < len(c.Causes) && !c.Causes[i].IsZero() {
			by[n] = c.Causes[i]
		}
	}
	return func(name string) Cause { return by[name] }
}
