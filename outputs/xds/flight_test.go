package xds

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
)

// TestEveryResponseGivesItsBudgetBack: the framing of every response, the smallest included, is
// a buffer gRPC gives back once written (or dropped); the bytes go back to the budget then, and
// not before.
func TestEveryResponseGivesItsBudgetBack(t *testing.T) {
	b := newSendBudget(1<<20, 0, NewMetrics(prometheus.NewRegistry()))
	big := make([]byte, 300<<10)
	for name, r := range map[string]*response{
		"empty": {t: tEndpoint, version: "v", nonce: "1"},
		"tiny":  {t: tEndpoint, version: "v", nonce: "2", items: []item{{res: &collections.Resource{Name: "a", TypeURL: tEndpoint.url(), Body: []byte{1}}}}},
		"large": {t: tEndpoint, version: "v", nonce: "3", items: []item{{res: &collections.Resource{Name: "b", TypeURL: tEndpoint.url(), Body: big}}}},
	} {
		for _, delta := range []bool{false, true} {
			n := encodedSize(r, delta)
			lane := b.lane(n)
			if err := lane.acquire(context.Background(), int64(n), false); err != nil {
				t.Fatal(err)
			}
			c := newConn("c", delta, "")
			pool := c.handOver(lane, n, -1)
			var w *wireMessage
			if delta {
				w = encodeDelta(r, pool)
			} else {
				w = encodeSotw(r, pool)
			}
			if got := b.inFlight(); got != int64(n) {
				t.Fatalf("%s: %d bytes in flight before it is written, want %d", name, got, n)
			}
			w.data.Free() // what gRPC does once it has written the response
			select {
			case <-pool.written:
			default:
				t.Fatalf("%s (delta %v): written and freed, but not given back", name, delta)
			}
			if got := b.inFlight(); got != 0 {
				t.Fatalf("%s (delta %v): %d bytes still in flight", name, delta, got)
			}
		}
	}
}

// TestBudgetLanes: a lane lets responses in while they fit, in order of arrival; one larger than
// the lane goes alone; a small response is not held back by large ones waiting; a waiter whose
// stream ends leaves the queue.
func TestBudgetLanes(t *testing.T) {
	b := newSendBudget(8<<20, 0, NewMetrics(prometheus.NewRegistry()))
	large := b.large
	ctx := context.Background()
	if err := large.acquire(ctx, large.capacity-10, false); err != nil {
		t.Fatal(err)
	}
	var order []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	started := make(chan struct{})
	for i := 1; i <= 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 1 {
				close(started)
			}
			// Each fills the lane: they can only go one after another.
			if err := large.acquire(ctx, large.capacity-5, false); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			large.release(large.capacity - 5)
		}()
		<-started
		// Each waiter queues before the next starts.
		waiters(t, large, i)
	}
	// The small lane is free while the large one has a queue.
	small := b.lane(1000)
	if small != b.small {
		t.Fatal("a 1 000-byte response is not in the small lane")
	}
	if err := small.acquire(ctx, 1000, false); err != nil {
		t.Fatal(err)
	}
	small.release(1000)
	// A waiter whose stream ends leaves the queue.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- large.acquire(cctx, 100, false) }()
	waiters(t, large, 4)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled waiter was granted")
	}
	large.release(large.capacity - 10)
	wg.Wait()
	if len(order) != 3 || order[0] != 1 || order[1] != 2 || order[2] != 3 {
		t.Fatalf("granted in order %v, want [1 2 3]", order)
	}
	// Larger than the lane: alone, once it is empty.
	if err := large.acquire(ctx, 2*large.capacity, false); err != nil {
		t.Fatal(err)
	}
	large.release(2 * large.capacity)
	if got := b.inFlight(); got != 0 {
		t.Fatalf("%d bytes left in flight", got)
	}
}

// TestConnectionsAreForgottenWhenTheyEnd: the server knows its clients' connections (to close a
// stalled one) only while they are open.
func TestConnectionsAreForgottenWhenTheyEnd(t *testing.T) {
	fs := startFake(t)
	fs.src.set(tEndpoint.url(), "e0")
	var ccs []*grpc.ClientConn
	for i := 0; i < 5; i++ {
		cc, err := adsclient.Dial(fs.addr)
		if err != nil {
			t.Fatal(err)
		}
		s, err := adsclient.Open(context.Background(), cc, sidecarNode(i))
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Request(tEndpoint.url(), "e0")
		if _, err := s.Recv(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		ccs = append(ccs, cc)
	}
	// The fake's own connection is not open: it has made no call.
	if n := fs.srv.clientConns.size(); n != 5 {
		t.Fatalf("%d connections known, want 5", n)
	}
	for _, cc := range ccs {
		_ = cc.Close()
	}
	fixtures.Polling("a connection is forgotten when gRPC reports its end, which tests cannot hear").
		Await(t, 10*time.Second, "no connection known after the five closed", func() (bool, string) {
			n := fs.srv.clientConns.size()
			return n == 0, fmt.Sprintf("%d connections known", n)
		})
}

// waiters waits until a lane has n responses waiting for it.
func waiters(t *testing.T, l *budgetLane, n int) {
	t.Helper()
	fixtures.PollingEvery(time.Millisecond, "a response starting to wait for the budget signals nothing").
		Await(t, 10*time.Second, fmt.Sprintf("%d waiters", n), func() (bool, string) {
			l.mu.Lock()
			got := l.waiters.Len()
			l.mu.Unlock()
			return got == n, fmt.Sprintf("%d waiters", got)
		})
}

// TestDrainEndsStreamsSpreadOverItsTime: once the server closes, a new stream is refused; Drain
// ends the open streams one after another over its time, each with UNAVAILABLE.
func TestDrainEndsStreamsSpreadOverItsTime(t *testing.T) {
	fs := startFake(t)
	fs.src.set(tEndpoint.url(), "e0")
	var streams []*adsclient.Stream
	for i := 0; i < 5; i++ {
		s, err := adsclient.Open(context.Background(), fs.cc, sidecarNode(i))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_ = s.Request(tEndpoint.url(), "e0")
		if _, err := s.Recv(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	fs.srv.Close()
	if fs.srv.Serving() {
		t.Fatal("a closed server says it is serving")
	}
	late, err := adsclient.Open(context.Background(), fs.cc, sidecarNode(9))
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	_ = late.Request(tEndpoint.url(), "e0")
	if _, err := late.Recv(10 * time.Second); status.Code(err) != codes.Unavailable {
		t.Fatalf("a stream opened after Close: %v, want Unavailable", err)
	}
	start := time.Now()
	go fs.srv.Drain(context.Background(), 400*time.Millisecond)
	var ended []time.Duration
	for i, s := range streams {
		_, err := s.Recv(10 * time.Second)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("stream %d: %v, want Unavailable", i, err)
		}
		ended = append(ended, time.Since(start))
	}
	// Five streams over 400 ms: the last ends at least 4 steps (320 ms) after the first.
	if spread := ended[len(ended)-1] - ended[0]; spread < 300*time.Millisecond {
		t.Fatalf("the streams ended within %v of each other (%v), want them spread over the drain", spread, ended)
	}
}
