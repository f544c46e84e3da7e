// Package adsclient is a small ADS client: it connects as a given proxy, sends discovery
// requests and returns the responses. krteds endpoints uses it, and so do the protocol tests.
package adsclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Type URLs.
const (
	TypeCLA      = resourcev3.EndpointType
	TypeCluster  = resourcev3.ClusterType
	TypeListener = resourcev3.ListenerType
	TypeRoute    = resourcev3.RouteType
)

// Node describes the proxy the client connects as.
type Node struct {
	ID        string
	Namespace string
	Labels    map[string]string
	Generator string
	ClusterID string
	Network   string
	NodeName  string
	Locality  *core.Locality
	// IstioVersion is sent as ISTIO_VERSION.
	IstioVersion string
}

// Proto renders the node as Envoy sends it.
func (n Node) Proto() *core.Node {
	fields := map[string]any{}
	for k, v := range map[string]string{"NAMESPACE": n.Namespace, "GENERATOR": n.Generator, "CLUSTER_ID": n.ClusterID,
		"NETWORK": n.Network, "NODE_NAME": n.NodeName, "ISTIO_VERSION": n.IstioVersion} {
		if v != "" {
			fields[k] = v
		}
	}
	if len(n.Labels) > 0 {
		l := map[string]any{}
		for k, v := range n.Labels {
			l[k] = v
		}
		fields["LABELS"] = l
	}
	md, _ := structpb.NewStruct(fields)
	return &core.Node{Id: n.ID, Metadata: md, Locality: n.Locality}
}

// Dial connects to an ADS server over plaintext gRPC.
func Dial(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", addr, err)
	}
	return cc, nil
}

// receiver reads a stream's responses on its own goroutine, so callers can wait with a timeout.
type receiver[T any] struct {
	resps chan T
	// done is closed once the stream has ended, *err saying how.
	done chan struct{}
	err  *error
}

func receive[T any](recv func() (T, error)) receiver[T] {
	r := receiver[T]{resps: make(chan T, 1024), done: make(chan struct{}), err: new(error)}
	go func() {
		for {
			m, err := recv()
			if err != nil {
				*r.err = err
				close(r.done)
				close(r.resps)
				return
			}
			r.resps <- m
		}
	}()
	return r
}

// Recv waits up to timeout for the next response.
func (r receiver[T]) Recv(timeout time.Duration) (T, error) {
	var zero T
	select {
	case m, ok := <-r.resps:
		if !ok {
			return zero, *r.err
		}
		return m, nil
	case <-time.After(timeout):
		return zero, ErrTimeout
	}
}

// sent is what a send's error says: a send fails with io.EOF when the server has ended the
// stream, and the stream's status is then what ended it.
func (r receiver[T]) sent(err error) error {
	if !errors.Is(err, io.EOF) {
		return err
	}
	select {
	case <-r.done:
		return *r.err
	case <-time.After(10 * time.Second):
		return err
	}
}

// stream is what both variants of ADS stream share: responses read on their own goroutine, the
// node sent with the first request, and how the stream ends.
type stream[Req, Resp any] struct {
	receiver[Resp]
	node     *core.Node
	send     func(Req) error
	setNode  func(Req, *core.Node)
	cancel   context.CancelFunc
	sentNode bool
}

// open starts a stream of either variant as node.
func open[Req, Resp any](ctx context.Context, node Node, what string,
	start func(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[Req, Resp], error), setNode func(*Req, *core.Node),
) (stream[*Req, *Resp], error) {
	ctx, cancel := context.WithCancel(ctx)
	s, err := start(ctx)
	if err != nil {
		cancel()
		return stream[*Req, *Resp]{}, fmt.Errorf("opening %s: %w", what, err)
	}
	return stream[*Req, *Resp]{receiver: receive(s.Recv), node: node.Proto(), send: s.Send, setNode: setNode, cancel: cancel}, nil
}

// Close ends the stream.
func (s *stream[Req, Resp]) Close() { s.cancel() }

// Send sends a request; the node goes with the first one.
func (s *stream[Req, Resp]) Send(req Req) error {
	if !s.sentNode {
		s.setNode(req, s.node)
		s.sentNode = true
	}
	return s.sent(s.send(req))
}

// Stream is one state-of-the-world ADS stream.
type Stream struct {
	stream[*discovery.DiscoveryRequest, *discovery.DiscoveryResponse]
}

// Open starts a SotW ADS stream as node.
func Open(ctx context.Context, cc *grpc.ClientConn, node Node) (*Stream, error) {
	s, err := open(ctx, node, "ADS stream", discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources,
		func(r *discovery.DiscoveryRequest, n *core.Node) { r.Node = n })
	if err != nil {
		return nil, err
	}
	return &Stream{s}, nil
}

// Request subscribes to names of typeURL (an initial request, no nonce).
func (s *Stream) Request(typeURL string, names ...string) error {
	return s.Send(&discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names})
}

// Ack acknowledges resp, keeping names subscribed.
func (s *Stream) Ack(resp *discovery.DiscoveryResponse, names ...string) error {
	return s.Send(&discovery.DiscoveryRequest{TypeUrl: resp.TypeUrl, VersionInfo: resp.VersionInfo,
		ResponseNonce: resp.Nonce, ResourceNames: names})
}

// Nack rejects resp with a message, keeping names subscribed and the previous version.
func (s *Stream) Nack(resp *discovery.DiscoveryResponse, prevVersion, msg string, names ...string) error {
	return s.Send(&discovery.DiscoveryRequest{TypeUrl: resp.TypeUrl, VersionInfo: prevVersion,
		ResponseNonce: resp.Nonce, ResourceNames: names, ErrorDetail: statusProto(msg)})
}

// ErrTimeout is returned when no response arrives in time.
var ErrTimeout = errors.New("no response in time")

// CLAs decodes the ClusterLoadAssignments of a response.
func CLAs(resp *discovery.DiscoveryResponse) ([]*endpoint.ClusterLoadAssignment, error) {
	var out []*endpoint.ClusterLoadAssignment
	for _, a := range resp.Resources {
		cla := &endpoint.ClusterLoadAssignment{}
		if err := a.UnmarshalTo(cla); err != nil {
			return nil, fmt.Errorf("decoding ClusterLoadAssignment: %w", err)
		}
		out = append(out, cla)
	}
	return out, nil
}

// Decode unmarshals every resource of a response into new messages made by mk.
func Decode[T proto.Message](resp *discovery.DiscoveryResponse, mk func() T) ([]T, error) {
	var out []T
	for _, a := range resp.Resources {
		m := mk()
		if err := a.UnmarshalTo(m); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", a.TypeUrl, err)
		}
		out = append(out, m)
	}
	return out, nil
}
