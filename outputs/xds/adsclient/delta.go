package adsclient

import (
	"context"
	"fmt"

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
	receiver[*discovery.DeltaDiscoveryResponse]
	node     *core.Node
	s        discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	cancel   context.CancelFunc
	sentNode bool
}

// OpenDelta starts a delta ADS stream as node.
func OpenDelta(ctx context.Context, cc *grpc.ClientConn, node Node) (*DeltaStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("opening delta ADS stream: %w", err)
	}
	return &DeltaStream{receiver: receive(s.Recv), node: node.Proto(), s: s, cancel: cancel}, nil
}

// Close ends the stream.
func (s *DeltaStream) Close() { s.cancel() }

// Send sends a request; the node goes with the first one.
func (s *DeltaStream) Send(req *discovery.DeltaDiscoveryRequest) error {
	if !s.sentNode {
		req.Node = s.node
		s.sentNode = true
	}
	return s.sent(s.s.Send(req))
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
