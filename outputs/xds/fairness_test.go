package xds

import (
	"context"
	"fmt"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"

	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
)

// Clients that never read must not make other clients wait: a response not being read gives
// back its place in the budget (its bytes stay counted), and places go round the callers.

// silentConn is a client connection whose flow-control windows are the smallest gRPC allows
// (64 KiB): a client that never reads holds a response larger than that unwritten.
func silentConn(t *testing.T, fs *fakeServer) *grpc.ClientConn {
	t.Helper()
	cc, err := adsclient.Dial(fs.addr, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// neverRead opens a delta stream on cc that subscribes to names of a type and never reads.
func neverRead(ctx context.Context, t *testing.T, cc *grpc.ClientConn, i int, typeURL string, names []string) {
	t.Helper()
	s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&discovery.DeltaDiscoveryRequest{Node: sidecarNode(i).Proto(), TypeUrl: typeURL, ResourceNamesSubscribe: names}); err != nil {
		t.Fatal(err)
	}
}

// awaitHolding waits until the responses handed to gRPC and not written hold at least bytes:
// the silent clients hold them.
func awaitHolding(t *testing.T, fs *fakeServer, bytes int64) {
	t.Helper()
	fixtures.Polling("the send budget signals nothing a test can wait on").Await(t, 30*time.Second, "the silent clients' answers in flight",
		func() (bool, string) {
			n := fs.srv.budget.inFlight()
			return n >= bytes, fmt.Sprintf("%d bytes in flight, want %d", n, bytes)
		})
}

// TestSilentClientsDoNotHoldUpOthers: forty clients ask for large answers and never read them;
// a proxy that reads gets its whole first answer while they still hold theirs (before any of
// them is cut by the send timeout). With places held first-come until the timeout, it waited
// for five rounds of it.
func TestSilentClientsDoNotHoldUpOthers(t *testing.T) {
	fs := startFake(t, func(o *Options) {
		o.Limits = Limits{StreamRate: -1, ResponseBytes: 256 << 10, SendTimeout: 20 * time.Second}
	})
	names := fs.src.setBig(tEndpoint.url(), 60, 8<<10) // 480 KB an answer, in parts of 256 KB
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < 40; i++ {
		neverRead(ctx, t, silentConn(t, fs), 100+i, tEndpoint.url(), names)
	}
	awaitHolding(t, fs, 8*(200<<10)) // at least the eight places of the large lane
	f := follow(ctx, t, fs, 1, tEndpoint.url(), names, nil)
	<-f.done
	if f.err != nil {
		t.Fatal(f.err)
	}
	if n := testutil.ToFloat64(fs.srv.metrics.Stalled); n != 0 {
		t.Fatalf("the reader completed only once %v silent streams had been cut by the send timeout", n)
	}
}

// TestAnUnreadSmallAnswerDoesNotCloseTheLargeLane: one client holds an unread large answer;
// another reads a first small answer and then nothing, so that its second small answer passes
// its stream's flow-control window and stays unwritten; a reader's large answer still goes out
// before either is cut by the send timeout.
func TestAnUnreadSmallAnswerDoesNotCloseTheLargeLane(t *testing.T) {
	fs := startFake(t, func(o *Options) {
		o.Limits = Limits{StreamRate: -1, ResponseBytes: 256 << 10, SendTimeout: 20 * time.Second}
	})
	large := fs.src.setBig(tEndpoint.url(), 60, 8<<10)
	first := fs.src.setBig(tCluster.url(), 3, 8<<10) // 24 KB: the small lane, written whole
	second := fs.src.setBig(tRoute.url(), 6, 8<<10)  // 48 KB more: past the window of 64 KiB
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	neverRead(ctx, t, silentConn(t, fs), 100, tEndpoint.url(), large)
	awaitHolding(t, fs, 200<<10) // a part of about 254 KB
	s, err := discovery.NewAggregatedDiscoveryServiceClient(silentConn(t, fs)).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Send(&discovery.DeltaDiscoveryRequest{Node: sidecarNode(101).Proto(), TypeUrl: tCluster.url(), ResourceNamesSubscribe: first})
	_ = s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: tRoute.url(), ResourceNamesSubscribe: second})
	awaitHolding(t, fs, 290<<10) // and about 49 KB
	f := follow(ctx, t, fs, 1, tEndpoint.url(), large, nil)
	<-f.done
	if f.err != nil {
		t.Fatal(f.err)
	}
	if n := testutil.ToFloat64(fs.srv.metrics.Stalled); n != 0 {
		t.Fatalf("the reader completed only once %v silent streams had been cut by the send timeout", n)
	}
}

// TestEverySendGoesThroughTheStallTimer: a client reads its first answer, then nothing: its
// LEDS answer and the answer to a request of a type krteds serves no resources of, due together,
// stay unwritten, and the stream is cut by the send timeout as any client that stops reading (the
// second answer waits for the first to be written, under the same timer, instead of blocking
// the stream in gRPC's flow control).
func TestEverySendGoesThroughTheStallTimer(t *testing.T) {
	fs := startFake(t, func(o *Options) {
		o.Limits = Limits{StreamRate: -1, SendBudget: 1 << 20, SendTimeout: time.Second, ResponseBytes: 700 << 10}
	})
	blocking := fs.src.setBig(tRoute.url(), 85, 8<<10) // 700 KB: the large lane, unread
	eds := fs.src.setBig(tEndpoint.url(), 10, 8<<10)   // 80 KB: it must wait for the lane
	const glob = "xdstp://krteds/envoy.config.endpoint.v3.LbEndpoint/c/c1/r~z~~p0/*"
	members := make([]string, 5000)
	for i := range members {
		members[i] = fmt.Sprintf("10.1.%d.%d:8080@1", i/250, i%250)
	}
	fs.src.setCollection(glob, members...) // about 150 KB: more than the window
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	neverRead(ctx, t, silentConn(t, fs), 100, tRoute.url(), blocking)
	awaitHolding(t, fs, 600<<10)
	s, err := discovery.NewAggregatedDiscoveryServiceClient(silentConn(t, fs)).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Send(&discovery.DeltaDiscoveryRequest{Node: sidecarNode(1).Proto(), TypeUrl: tEndpoint.url(), ResourceNamesSubscribe: eds})
	fixtures.Polling("a response waiting for the budget is counted by a metric, which signals nothing").Await(t, 10*time.Second,
		"the endpoints to wait for the budget", func() (bool, string) {
			n := testutil.ToFloat64(fs.srv.metrics.WaitingStreams)
			return n >= 1, fmt.Sprintf("%v responses waiting", n)
		})
	// While it waits, the LEDS subscription and a request of an unknown type come.
	_ = s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeLbEndpoint, ResourceNamesSubscribe: []string{glob}})
	_ = s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: "type.googleapis.com/some.Unknown"})
	if r, err := s.Recv(); err != nil || r.TypeUrl != tEndpoint.url() {
		t.Fatalf("the first answer: %v (%v)", r.GetTypeUrl(), err)
	}
	// It reads nothing more: both streams are cut.
	fixtures.Polling("a stream's end is its handler returning, which nothing signals").Await(t, 30*time.Second, "both silent streams to be cut",
		func() (bool, string) {
			n := testutil.ToFloat64(fs.srv.metrics.Stalled)
			return n >= 2 && fs.srv.Streams() == 0, fmt.Sprintf("%v streams cut, %d open, %d bytes in flight", n, fs.srv.Streams(), fs.srv.budget.inFlight())
		})
}
