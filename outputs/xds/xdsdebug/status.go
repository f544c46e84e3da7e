package xdsdebug

import (
	"maps"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// SyncStatus is one proxy's row of /debug/syncz, in istiod's shape: *_sent/*_acked are nonces.
type SyncStatus struct {
	ClusterID            string                    `json:"cluster_id,omitempty"`
	ProxyID              string                    `json:"proxy,omitempty"`
	ProxyType            string                    `json:"proxy_type,omitempty"`
	ProxyVersion         string                    `json:"proxy_version,omitempty"`
	IstioVersion         string                    `json:"istio_version,omitempty"`
	ClusterSent          string                    `json:"cluster_sent,omitempty"`
	ClusterAcked         string                    `json:"cluster_acked,omitempty"`
	ListenerSent         string                    `json:"listener_sent,omitempty"`
	ListenerAcked        string                    `json:"listener_acked,omitempty"`
	RouteSent            string                    `json:"route_sent,omitempty"`
	RouteAcked           string                    `json:"route_acked,omitempty"`
	EndpointSent         string                    `json:"endpoint_sent,omitempty"`
	EndpointAcked        string                    `json:"endpoint_acked,omitempty"`
	ExtensionConfigSent  string                    `json:"extensionconfig_sent,omitempty"`
	ExtensionConfigAcked string                    `json:"extensionconfig_acked,omitempty"`
	Resources            map[string]ResourceStatus `json:"resources,omitempty"`
}

// ResourceStatus is the per-type detail of a SyncStatus.
type ResourceStatus struct {
	Sent      string `json:"sent,omitempty"`
	Acked     string `json:"acked,omitempty"`
	SentTime  string `json:"sentTime,omitempty"`
	LastError string `json:"lastError,omitempty"`
}

// Syncz lists every connected proxy's sync state, optionally only those in namespace.
func (d *Debug) Syncz(namespace string) []SyncStatus {
	out := []SyncStatus{}
	scope := Everything
	if namespace != "" {
		scope = Scope{Namespace: namespace}
	}
	for _, c := range d.Statuses(scope, false) {
		ss := SyncStatus{ClusterID: c.Proxy.ClusterID, ProxyID: c.Proxy.ID, ProxyType: c.Proxy.Type, IstioVersion: "krteds",
			Resources: map[string]ResourceStatus{}}
		if ss.ClusterID == "" {
			ss.ClusterID = d.clusterID
		}
		for t, st := range c.Types {
			rs := ResourceStatus{Sent: st.SentNonce, Acked: st.AckedNonce, LastError: st.LastError}
			if !st.SentTime.IsZero() {
				rs.SentTime = st.SentTime.UTC().Format("2006-01-02T15:04:05.000Z")
			}
			ss.Resources[t] = rs
			switch t {
			case resourcev3.ClusterType:
				ss.ClusterSent, ss.ClusterAcked = st.SentNonce, st.AckedNonce
			case resourcev3.ListenerType:
				ss.ListenerSent, ss.ListenerAcked = st.SentNonce, st.AckedNonce
			case resourcev3.RouteType:
				ss.RouteSent, ss.RouteAcked = st.SentNonce, st.AckedNonce
			case resourcev3.EndpointType:
				ss.EndpointSent, ss.EndpointAcked = st.SentNonce, st.AckedNonce
			}
		}
		out = append(out, ss)
	}
	return out
}

// AdsClient is one connection of /debug/adsz, in istiod's shape.
type AdsClient struct {
	ConnectionID string              `json:"connectionId"`
	ConnectedAt  string              `json:"connectedAt"`
	Address      string              `json:"address"`
	Labels       map[string]string   `json:"labels,omitempty"`
	Metadata     map[string]string   `json:"metadata,omitempty"`
	Locality     string              `json:"locality,omitempty"`
	Watches      map[string][]string `json:"watches,omitempty"`
	// Peer is the address the stream comes from.
	Peer string `json:"peer,omitempty"`
	// Class and View are what krteds computes for the connection.
	Class string `json:"class,omitempty"`
	View  string `json:"view,omitempty"`
}

// AdsClients is /debug/adsz.
type AdsClients struct {
	Total     int         `json:"totalClients"`
	Connected []AdsClient `json:"clients,omitempty"`
}

// Adsz lists the connections and what each watches.
func (d *Debug) Adsz() AdsClients {
	return adsz(d.Statuses(Everything, true))
}

// AdszOf is /debug/adsz?proxyID=: the one connection FindProxy found.
func AdszOf(c ConnStatus) AdsClients {
	return adsz([]ConnStatus{c})
}

func adsz(conns []ConnStatus) AdsClients {
	out := AdsClients{}
	for _, c := range conns {
		if c.Proxy == nil {
			continue
		}
		a := AdsClient{
			ConnectionID: c.ConnID,
			ConnectedAt:  c.ConnectedAt.UTC().Format("2006-01-02T15:04:05.000Z"),
			Address:      c.Proxy.IP,
			Peer:         c.Peer,
			Metadata: map[string]string{"NAMESPACE": c.Proxy.Namespace, "CLUSTER_ID": c.Proxy.ClusterID, "NETWORK": c.Proxy.Network,
				"NODE_NAME": c.Proxy.NodeName, "GENERATOR": c.Proxy.Generator},
			Watches: c.Watches,
		}
		maps.DeleteFunc(a.Metadata, func(_, v string) bool { return v == "" })
		if c.View != nil {
			a.Class = c.View.ClassKey
			a.View = c.View.Key
		}
		if loc := c.Proxy.Locality; !loc.IsEmpty() {
			a.Locality = loc.String()
		}
		a.Labels = c.Proxy.Labels
		out.Connected = append(out.Connected, a)
	}
	out.Total = len(out.Connected)
	return out
}
