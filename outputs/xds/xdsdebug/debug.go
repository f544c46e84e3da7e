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
	// Holders is, for each stream subscribed to a name of a type, what its client holds of it.
	Holders(typeURL, name string) []Holding
}

// Holding is what one stream's client holds of a name: the version it was last sent (0: none),
// whether it acknowledged it, the version it would be sent now, and where its type stands.
type Holding struct {
	ConnID    string `json:"connectionId"`
	NodeID    string `json:"nodeId"`
	Namespace string `json:"namespace"`
	// Sent is the version of the name the client was last sent (0: none); Acked, whether it
	// acknowledged the response carrying it; Current, what it would be sent now (0: nothing).
	Sent    uint64 `json:"sent,omitempty"`
	Acked   bool   `json:"acked"`
	Current uint64 `json:"current,omitempty"`
	// The type's exchange: when the last response was sent and acknowledged, the last
	// rejection's error, and how the client is behind (nil: it is not).
	SentTime  time.Time `json:"sentTime,omitzero"`
	AckedTime time.Time `json:"ackedTime,omitzero"`
	LastError string    `json:"lastError,omitempty"`
	Behind    *Behind   `json:"behind,omitempty"`
}

// Holders is Streams.Holders, of the streams the scope sees, ordered by connection id.
func (d *Debug) Holders(scope Scope, typeURL, name string) []Holding {
	var out []Holding
	for _, h := range d.streams.Holders(typeURL, name) {
		if scope.Sees(h.Namespace) {
			out = append(out, h)
		}
	}
	slices.SortFunc(out, func(a, b Holding) int { return strings.Compare(a.ConnID, b.ConnID) })
	return out
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
	AckedTime    time.Time `json:"ackedTime,omitempty"`
	LastError    string    `json:"lastError,omitempty"`
	NACKs        int       `json:"nacks,omitempty"`
	Responses    int       `json:"responses,omitempty"`
	Subscribed   int       `json:"subscribed"`
	// Behind is set while the client does not hold the latest of what it subscribes to.
	Behind *Behind `json:"behind,omitempty"`
}

// Behind is how a stream's client is behind on one type: since when (the oldest change or
// request it has not acknowledged the answer to), how many names it waits for, and why.
type Behind struct {
	Since  time.Time `json:"since"`
	Names  int       `json:"names"`
	Reason string    `json:"reason"`
	// Lane is the send budget's lane a response waits for (Reason WaitBudget).
	Lane string `json:"lane,omitempty"`
	// Stale: behind for longer than the server's stale threshold.
	Stale bool `json:"stale,omitempty"`
}

// Why a client is behind.
const (
	// WaitBudget: the next response waits for its place in the send budget.
	WaitBudget = "waiting_for_the_send_budget"
	// WaitNotReading: the client reads nothing of the response handed to it.
	WaitNotReading = "client_not_reading"
	// WaitWriting: the response is being written to the client, which reads it.
	WaitWriting = "being_written"
	// WaitNotAcked: the client was sent a response and has not acknowledged it.
	WaitNotAcked = "not_acknowledged"
	// WaitRate: the stream waits for its turn of the stream rate.
	WaitRate = "waiting_for_the_stream_rate"
	// WaitQueued: a response of another type goes first.
	WaitQueued = "queued_behind_another_type"
	// WaitSync: krteds has not synced its inputs, or not computed the proxy's view yet.
	WaitSync = "waiting_for_sync"
	// WaitClusters: emptied CLAs wait for the clusters response that removes their clusters.
	WaitClusters = "waiting_for_clusters"
	// WaitComputing: what the client subscribes to is being computed.
	WaitComputing = "being_computed"
	// WaitRejected: the client rejected the last response, and keeps what it held.
	WaitRejected = "rejected"
)

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
