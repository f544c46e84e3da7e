package xds

import (
	"context"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// MaxStreamsPerConnection bounds the streams of one client connection open at once (an Envoy
// or a gRPC client opens one ADS stream, and one LRS stream with load reporting); a client
// opening more waits for one to close.
const MaxStreamsPerConnection = 128

// receiveWindow is the HTTP/2 flow-control window krteds opens to each client, for each stream and
// for the connection: a state-of-the-world ACK repeats every name the client subscribes to (ten
// thousand clusters: 700 KB), and with gRPC's default window (64 KiB, grown by bandwidth-delay
// pings) each such ACK waited on window updates round trip after round trip (the large SotW herd:
// 75 s, 67 s with this window). It also bounds what one connection may have sent unread: gRPC's
// pings could grow the window to 16 MiB.
const receiveWindow = 1 << 20

// NewGRPCServer returns a gRPC server that serves ADS (state of the world and delta) from s, over
// creds (nil: plaintext). Its codec is krteds' own, whatever opts say: responses are sent as
// krteds encodes them (wire.go), which no other codec can marshal; and it knows its connections,
// to close the one of a client that stops reading (its credentials are creds, whatever opts say).
func NewGRPCServer(_ context.Context, s *Server, creds credentials.TransportCredentials, opts ...grpc.ServerOption) *grpc.Server {
	opts = append([]grpc.ServerOption{
		grpc.MaxConcurrentStreams(MaxStreamsPerConnection),
		grpc.InitialWindowSize(receiveWindow), grpc.InitialConnWindowSize(receiveWindow),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    30 * time.Second,
			Timeout: 10 * time.Second,
			// Rebalance clients across replicas, as istiod does.
			MaxConnectionAge:      30 * time.Minute,
			MaxConnectionAgeGrace: time.Minute,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 15 * time.Second, PermitWithoutStream: true}),
	}, opts...)
	opts = append(opts, grpc.Creds(tracking(creds, s.clientConns)), grpc.StatsHandler(s.clientConns), grpc.ForceServerCodecV2(newWireCodec(s.names))) // last: they win
	gs := grpc.NewServer(opts...)
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, s)
	if s.loadReports != nil {
		lrs.RegisterLoadReportingServiceServer(gs, s.loadReports)
	}
	return gs
}
