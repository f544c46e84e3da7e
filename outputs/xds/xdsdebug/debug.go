package xdsdebug

import (
	"net/http"
	"slices"
	"strings"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/krteds/krteds/collections"
)

// Streams is what the ADS server tells the debug answers: which proxies its streams serve, one
// stream's state, and the resources a view is sent.
type Streams interface {
	// Proxies lists the streams whose client has identified itself (cheap: no stream is asked).
	Proxies() []Proxy
	// Status is one stream's state, with the names it watches when watches is set; ok is false
	// once the stream has ended.
	Status(connID string, watches bool) (st ConnStatus, ok bool)
	// Resolve and List are the server's source's: what a proxy of view v is sent.
	Resolve(v *collections.View, typeURL, name string) (r *collections.Resource, pending bool)
	List(v *collections.View, typeURL string) []*collections.Resource
}

// Proxy is one identified stream, as Streams.Proxies lists it.
type Proxy struct {
	ConnID, NodeID, Namespace string
}

// ConnStatus is the protocol state of one stream, for /debug/syncz and /debug/adsz.
type ConnStatus struct {
	ConnID      string    `json:"connectionId"`
	Delta       bool      `json:"delta"`
	Peer        string    `json:"peer,omitempty"`
	ConnectedAt time.Time `json:"connectedAt"`
	// IstioVersion is the client's ISTIO_VERSION as the pilot_xds metric labels it ("other"
	// past the distinct versions counted).
	IstioVersion string                      `json:"istioVersion,omitempty"`
	Proxy        *collections.ConnectedProxy `json:"proxy,omitempty"`
	View         *collections.View           `json:"view,omitempty"`
	// Watches are the names of each type the stream subscribes to ("*" for the wildcard), when
	// asked for.
	Watches map[string][]string   `json:"watches"`
	Types   map[string]TypeStatus `json:"resources"`
}

// TypeStatus is the protocol state of one type on one stream.
type TypeStatus struct {
	SentVersion  string    `json:"sentVersion,omitempty"`
	SentNonce    string    `json:"sentNonce,omitempty"`
	SentTime     time.Time `json:"sentTime,omitempty"`
	AckedVersion string    `json:"ackedVersion,omitempty"`
	AckedNonce   string    `json:"ackedNonce,omitempty"`
	LastError    string    `json:"lastError,omitempty"`
	NACKs        int       `json:"nacks,omitempty"`
	Responses    int       `json:"responses,omitempty"`
	Subscribed   int       `json:"subscribed"`
}

// Options configure the debug answers.
type Options struct {
	// ClusterID is the cluster the server runs in, for proxies that name none.
	ClusterID string
	// SystemNamespace: its identities see every proxy.
	SystemNamespace string
	// ControlPlaneID is sent with istio.io/debug/syncz (istiod's JSON of component, instance ID
	// and build); "" for none.
	ControlPlaneID string
	// Pages are the debug pages istio.io/debug reads (nil: none).
	Pages http.Handler
}

// Debug answers the debug questions about an ADS server's streams.
type Debug struct {
	streams                    Streams
	clusterID, systemNamespace string
	controlPlane               *core.ControlPlane
	pages                      http.Handler
}

// New makes the debug answers of the streams of an ADS server.
func New(streams Streams, o Options) *Debug {
	d := &Debug{streams: streams, clusterID: o.ClusterID, systemNamespace: o.SystemNamespace, pages: o.Pages}
	if o.ControlPlaneID != "" {
		d.controlPlane = &core.ControlPlane{Identifier: o.ControlPlaneID}
	}
	return d
}

// Statuses is the state of every identified stream the scope sees, ordered by connection id.
func (d *Debug) Statuses(scope Scope, watches bool) []ConnStatus {
	var out []ConnStatus
	for _, p := range d.streams.Proxies() {
		if !scope.Sees(p.Namespace) {
			continue
		}
		if st, ok := d.streams.Status(p.ConnID, watches); ok {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b ConnStatus) int { return strings.Compare(a.ConnID, b.ConnID) })
	return out
}
