package serving

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
)

// TestStreamChurnLeavesNothingBehind connects, subscribes and disconnects 5000 streams (50 at a
// time, bounded in time) and requires goroutines, connections, connected proxies and heap to
// return to their baseline.
func TestStreamChurnLeavesNothingBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("5000 streams")
	}
	r := newRig(t, mesh()...)
	// Warm up once so lazily started goroutines (gRPC transport, krt handlers) are in the baseline.
	warm := r.Open(sidecar("10.9.9.9", "ns1"))
	_ = warm.Request(adsclient.TypeCLA, fooCluster)
	recv(t, warm)
	warm.Close()
	waitQuiet(t, r)
	baseG, baseHeap := goroutines(), fixtures.LiveHeap()

	const total, parallel = 5000, 50
	deadline := time.Now().Add(2 * time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, total)
	sem := make(chan struct{}, parallel)
	for i := 0; i < total && time.Now().Before(deadline); i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			s, err := adsclient.Open(context.Background(), r.Conn(), sidecar(fmt.Sprintf("10.8.%d.%d", i/250, i%250), "ns1"))
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			if err := s.Request(adsclient.TypeCLA, fooCluster); err != nil {
				errs <- err
				return
			}
			if _, err := s.Recv(wait); err != nil {
				errs <- fmt.Errorf("stream %d: %w", i, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitQuiet(t, r)
	fixtures.Polling("the runtime signals no goroutine's end").Await(t, wait, "the goroutines back to their baseline", func() (bool, string) {
		g := runtime.NumGoroutine()
		return g <= baseG+10, fmt.Sprintf("%d goroutines, %d before the churn", g, baseG)
	})
	if h := fixtures.LiveHeap(); h > baseHeap+8<<20 {
		t.Fatalf("heap: %d MB after churn, %d MB before", h>>20, baseHeap>>20)
	}
}

// TestStalledClientDoesNotGrowMemory keeps a stream that never reads while its cluster changes
// a thousand times: the server holds at most one response for it.
func TestStalledClientDoesNotGrowMemory(t *testing.T) {
	r := newRig(t, mesh()...)
	stalled := r.Open(sidecar("10.9.0.5", "ns1"))
	_ = stalled.Request(adsclient.TypeCLA, fooCluster)
	// The first response is sent (the server's status says so), and never read.
	fixtures.Polling("the stream counts its responses in its own goroutine, which signals nothing").
		Await(t, wait, "the first response", func() (bool, string) {
			st := r.Srv.Statuses()
			return len(st) == 1 && st[0].Types[adsclient.TypeCLA].Responses == 1, fmt.Sprintf("%+v", st)
		})
	before := fixtures.LiveHeap()
	for i := 0; i < 1000; i++ {
		c := fixtures.Ready
		if i%2 == 0 {
			c = fixtures.NotReady
		}
		r.In.Apply(fooSlice(fixtures.Ready, fixtures.Ready, c), false)
	}
	// The barrier: a last state none of the others had, so its change cannot be folded into an
	// earlier, equal one when the graph batches the writes.
	last := time.Now()
	r.In.Apply(fooSlice(fixtures.NotReady, fixtures.Ready, fixtures.Ready), false)
	waitTold(t, r, adsclient.TypeCLA, fooCluster, last)
	if after := fixtures.LiveHeap(); after > before+4<<20 {
		t.Fatalf("heap grew by %d MB while a client stalled", (after-before)>>20)
	}
	st := r.Srv.Statuses()
	if len(st) != 1 || st[0].Types[adsclient.TypeCLA].Responses != 1 {
		t.Fatalf("a client that never ACKs must have been sent exactly one response: %+v", st)
	}
}

// waitQuiet waits until the server holds no stream and the graph no proxy.
func waitQuiet(t *testing.T, r *rig) {
	t.Helper()
	fixtures.Polling("the server drops a stream from its table after telling the graph; nothing signals the drop").
		Await(t, 30*time.Second, "every connection gone", func() (bool, string) {
			n, c, p := len(r.Srv.Statuses()), len(r.ConnectedProxies.List()), len(r.Proxies.List())
			return n == 0 && c == 0 && p == 0, fmt.Sprintf("%d streams, %d connected proxies, %d proxies", n, c, p)
		})
}

// goroutines counts the goroutines after half a second: the time lets those of streams just
// closed end, which nothing signals (the baseline of TestStreamChurnLeavesNothingBehind).
func goroutines() int {
	time.Sleep(500 * time.Millisecond)
	return runtime.NumGoroutine()
}
