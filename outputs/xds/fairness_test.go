package xds

import (
	"context"
	"fmt"
	"net"
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

// slowConn reads at most rate bytes a second: a client on a slow link.
type slowConn struct {
	net.Conn
	rate  int
	start time.Time
	read  int
}

func (c *slowConn) Read(p []byte) (int, error) {
	if len(p) > 1024 {
		p = p[:1024]
	}
	if ahead := time.Duration(c.read)*time.Second/time.Duration(c.rate) - time.Since(c.start); ahead > 0 {
		time.Sleep(ahead) // the link's pace, not a test's wait
	}
	n, err := c.Conn.Read(p)
	c.read += n
	return n, err
}

// smallBuffers accepts connections whose send buffer is small, so that what the server writes
// waits for its client to read rather than for the kernel to buffer it.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(8 << 10)
	}
	return c, err
}

// TestSlowReadersAreNotCut: the send timeout counts time without progress, not a response's
// whole write time: a client reading a 256 KB answer at 32 KB/s, 8 s in all, is not cut by a
// send timeout of 2 s, and gets the whole answer.
func TestSlowReadersAreNotCut(t *testing.T) {
	src := newFakeSource()
	srv := NewServer(src, Options{ClusterID: "Kubernetes", Limits: Limits{StreamRate: -1, SendTimeout: 2 * time.Second}})
	stop := make(chan struct{})
	srv.Start(stop)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := NewGRPCServer(context.Background(), srv, nil)
	go func() { _ = gs.Serve(smallBuffers{lis}) }()
	t.Cleanup(func() { gs.Stop(); close(stop) })
	names := src.setBig(tEndpoint.url(), 32, 8<<10)
	cc, err := adsclient.Dial(lis.Addr().String(), grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		_ = c.(*net.TCPConn).SetReadBuffer(8 << 10)
		return &slowConn{Conn: c, rate: 32 << 10, start: time.Now()}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	s, err := adsclient.OpenDelta(context.Background(), cc, sidecarNode(1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_ = s.Subscribe(tEndpoint.url(), names, nil)
	r, err := s.Recv(time.Minute)
	if err != nil || len(r.Resources) != len(names) {
		t.Fatalf("a slow reader got %d of %d CLAs: %v (streams cut: %v)", len(r.GetResources()), len(names), err, testutil.ToFloat64(srv.metrics.Stalled))
	}
}

// TestDrainEndsStreamsWaitingOnAWrite: streams whose clients read nothing of their answers (a
// write under way) are ended by a drain each at its turn, spread over its time, not all at the
// end.
func TestDrainEndsStreamsWaitingOnAWrite(t *testing.T) {
	fs := startFake(t, func(o *Options) { o.Limits = Limits{StreamRate: -1, SendTimeout: time.Minute} })
	names := fs.src.setBig(tEndpoint.url(), 40, 8<<10) // 320 KB: past the windows
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < 5; i++ {
		neverRead(ctx, t, silentConn(t, fs), 100+i, tEndpoint.url(), names)
	}
	awaitHolding(t, fs, 5*(320<<10)) // each stream's answer
	start := time.Now()
	go fs.srv.Drain(context.Background(), 400*time.Millisecond)
	var ended []time.Duration
	fixtures.PollingEvery(time.Millisecond, "a stream's end is its handler returning, which nothing signals").Await(t, 10*time.Second,
		"the drain to end the five streams", func() (bool, string) {
			for n := fs.srv.Streams(); len(ended) < 5-n; {
				ended = append(ended, time.Since(start))
			}
			return len(ended) == 5, fmt.Sprintf("%d ended at %v", len(ended), ended)
		})
	if spread := ended[4] - ended[0]; spread < 250*time.Millisecond {
		t.Fatalf("the streams ended within %v of each other (%v), want them spread over the drain", spread, ended)
	}
}
