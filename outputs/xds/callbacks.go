package xds

import (
	"context"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
)

var _ serverv3.Callbacks = (*Server)(nil)

// OnStreamOpen implements serverv3.Callbacks.
func (s *Server) OnStreamOpen(ctx context.Context, id int64, _ string) error {
	s.openConn(ctx, false, id)
	return nil
}

// OnStreamClosed implements serverv3.Callbacks.
func (s *Server) OnStreamClosed(id int64, _ *core.Node) { s.closeConn(false, id) }

// OnStreamRequest implements serverv3.Callbacks.
func (s *Server) OnStreamRequest(id int64, req *discovery.DiscoveryRequest) error {
	return s.onRequest(false, id, req, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail())
}

// OnStreamResponse implements serverv3.Callbacks.
func (s *Server) OnStreamResponse(_ context.Context, id int64, req *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	s.onResponse(false, id, req.GetTypeUrl(), resp.GetNonce())
}

// OnDeltaStreamOpen implements serverv3.Callbacks.
func (s *Server) OnDeltaStreamOpen(ctx context.Context, id int64, _ string) error {
	s.openConn(ctx, true, id)
	return nil
}

// OnDeltaStreamClosed implements serverv3.Callbacks.
func (s *Server) OnDeltaStreamClosed(id int64, _ *core.Node) { s.closeConn(true, id) }

// OnStreamDeltaRequest implements serverv3.Callbacks.
func (s *Server) OnStreamDeltaRequest(id int64, req *discovery.DeltaDiscoveryRequest) error {
	return s.onRequest(true, id, req, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail())
}

// OnStreamDeltaResponse implements serverv3.Callbacks.
func (s *Server) OnStreamDeltaResponse(id int64, req *discovery.DeltaDiscoveryRequest, resp *discovery.DeltaDiscoveryResponse) {
	s.onResponse(true, id, req.GetTypeUrl(), resp.GetNonce())
}

// OnFetchRequest implements serverv3.Callbacks.
func (s *Server) OnFetchRequest(context.Context, *discovery.DiscoveryRequest) error { return nil }

// OnFetchResponse implements serverv3.Callbacks.
func (s *Server) OnFetchResponse(*discovery.DiscoveryRequest, *discovery.DiscoveryResponse) {}
