package rigs

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/source"
	"github.com/krteds/krteds/outputs/xds"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
)

// Serving is the serving layer's rig: a Graph served by krteds' xDS server over ADS on a loopback
// port, until Close, or the test's end for a graph that stops with the test.
type Serving struct {
	*Graph
	Srv  *xds.Server
	GRPC *grpc.Server
	// Addr is the ADS address.
	Addr string

	tb        testing.TB
	cc        *grpc.ClientConn
	closeOnce sync.Once
}

// ServeOptions configure the server.
type ServeOptions struct {
	// Metrics are the server's metrics (nil: unregistered ones).
	Metrics *xds.Metrics
	// Limits are the server's limits (zero: its defaults).
	Limits xds.Limits
	// TrustDomain is the trust domain authenticated clients must be of ("": krteds serve's
	// default, collections.DefaultTrustDomain).
	TrustDomain string
}

// Serve serves g over ADS on a loopback port.
func Serve(tb testing.TB, g *Graph, o ServeOptions) *Serving {
	tb.Helper()
	if o.TrustDomain == "" {
		o.TrustDomain = collections.DefaultTrustDomain
	}
	srv := xds.NewServer(toldSource{Source: g.Served, waker: g.waker}, xds.Options{ClusterID: "Kubernetes", TrustDomain: o.TrustDomain,
		Metrics: o.Metrics, Limits: o.Limits})
	srv.Start(g.Stop)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	gs := xds.NewGRPCServer(context.Background(), srv, nil)
	go func() { _ = gs.Serve(lis) }()
	s := &Serving{Graph: g, Srv: srv, GRPC: gs, Addr: lis.Addr().String(), tb: tb}
	if g.owned {
		tb.Cleanup(s.Close)
	}
	return s
}

// toldSource is the graph as the server's source, waking the graph's waits each time the server
// has taken one of its changes (LastChange and the streams' views are then up to date).
type toldSource struct {
	*source.Source
	waker *fixtures.Waker
}

func (s toldSource) Subscribe(f func(collections.Change)) {
	s.Source.Subscribe(func(ch collections.Change) {
		f(ch)
		s.waker.Wake()
	})
}

// Close stops serving: the client connection, then the gRPC server.
func (s *Serving) Close() {
	s.closeOnce.Do(func() {
		if s.cc != nil {
			_ = s.cc.Close()
		}
		s.GRPC.Stop()
	})
}

// Conn is a client connection to the server, made on first use.
func (s *Serving) Conn() *grpc.ClientConn {
	s.tb.Helper()
	if s.cc == nil {
		cc, err := adsclient.Dial(s.Addr)
		if err != nil {
			s.tb.Fatal(err)
		}
		s.cc = cc
	}
	return s.cc
}

// Open opens a state-of-the-world ADS stream as n on Conn, closed with the rig's test.
func (s *Serving) Open(n adsclient.Node) *adsclient.Stream {
	s.tb.Helper()
	st, err := adsclient.Open(context.Background(), s.Conn(), n)
	if err != nil {
		s.tb.Fatal(err)
	}
	s.tb.Cleanup(st.Close)
	return st
}

// OpenDelta opens a delta ADS stream as n on Conn, closed with the rig's test.
func (s *Serving) OpenDelta(n adsclient.Node) *adsclient.DeltaStream {
	s.tb.Helper()
	st, err := adsclient.OpenDelta(context.Background(), s.Conn(), n)
	if err != nil {
		s.tb.Fatal(err)
	}
	s.tb.Cleanup(st.Close)
	return st
}
