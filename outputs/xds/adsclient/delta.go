package adsclient

import (
	"context"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

func statusProto(msg string) *rpcstatus.Status {
	return &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: msg}
}

// DeltaStream is one incremental ADS stream.
type DeltaStream struct {
	stream[*discovery.DeltaDiscoveryRequest, *discovery.DeltaDiscoveryResponse]
}

// OpenDelta starts a delta ADS stream as node.
func OpenDelta(ctx context.Context, cc *grpc.ClientConn, node Node) (*DeltaStream, error) {
	s, err := open(ctx, node, "delta ADS stream", discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources,
		func(r *discovery.DeltaDiscoveryRequest, n *core.Node) { r.Node = n })
	if err != nil {
		return nil, err
	}
	return &DeltaStream{s}, nil
}

// Subscribe changes the subscription of typeURL.
func (s *DeltaStream) Subscribe(typeURL string, subscribe, unsubscribe []string) error {
	return s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeURL,
		ResourceNamesSubscribe: subscribe, ResourceNamesUnsubscribe: unsubscribe})
}

// Ack acknowledges resp.
func (s *DeltaStream) Ack(resp *discovery.DeltaDiscoveryResponse) error {
	return s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce})
}

// Nack rejects resp.
func (s *DeltaStream) Nack(resp *discovery.DeltaDiscoveryResponse, msg string) error {
	return s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce, ErrorDetail: statusProto(msg)})
}
