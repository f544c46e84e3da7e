package xds

import (
	"net"
	"slices"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	status "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TypeDebugSyncz is istiod's xDS debug type istioctl proxy-status --xds-address asks for: one
// envoy.service.status.v3.ClientConfig per connected proxy, its sync state per type.
const TypeDebugSyncz = "istio.io/debug/syncz"

// debugResources answers an xDS debug type on stream c, as istiod's StatusGen does: a client on a
// loopback connection sees every proxy; an authenticated client (the TLS port) the proxies of its
// own namespace; any other client nothing.
func (s *Server) debugResources(c *conn, typeURL string) []*discovery.Resource {
	if typeURL != TypeDebugSyncz {
		return nil
	}
	namespace := ""
	switch {
	case c.loopback:
	case c.identity != nil:
		namespace = c.identity.Namespace
	default:
		return nil
	}
	var out []*discovery.Resource
	for _, st := range s.Status() {
		if st.Proxy == nil || st.ConnID == c.id || (namespace != "" && st.Proxy.Namespace != namespace) {
			continue
		}
		cc := &status.ClientConfig{Node: &core.Node{Id: st.Proxy.ID, Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			"CLUSTER_ID": structpb.NewStringValue(orDefault(st.Proxy.ClusterID, s.clusterID)),
			"NAMESPACE":  structpb.NewStringValue(st.Proxy.Namespace),
		}}}}
		urls := make([]string, 0, len(st.Types))
		for u := range st.Types {
			urls = append(urls, u)
		}
		slices.Sort(urls)
		for _, u := range urls {
			ts := st.Types[u]
			gc := &status.ClientConfig_GenericXdsConfig{TypeUrl: u, ConfigStatus: syncStatus(ts)}
			if !ts.SentTime.IsZero() {
				gc.LastUpdated = timestamppb.New(ts.SentTime)
			}
			cc.GenericXdsConfigs = append(cc.GenericXdsConfigs, gc)
		}
		a, err := anypb.New(cc)
		if err != nil {
			continue
		}
		out = append(out, &discovery.Resource{Name: st.Proxy.ID, Resource: a})
	}
	return out
}

// syncStatus is istiod's debugSyncStatus.
func syncStatus(t TypeStatus) status.ConfigStatus {
	switch {
	case t.LastError != "":
		return status.ConfigStatus_ERROR
	case t.SentNonce == "":
		return status.ConfigStatus_NOT_SENT
	case t.AckedNonce == t.SentNonce:
		return status.ConfigStatus_SYNCED
	}
	return status.ConfigStatus_STALE
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

// loopbackEnds reports whether both ends of a connection are loopback addresses.
func loopbackEnds(remote, local net.Addr) bool {
	is := func(a net.Addr) bool {
		if a == nil {
			return false
		}
		host, _, err := net.SplitHostPort(a.String())
		if err != nil {
			host = a.String()
		}
		ip := net.ParseIP(strings.Trim(host, "[]"))
		return ip != nil && ip.IsLoopback()
	}
	return is(remote) && is(local)
}
