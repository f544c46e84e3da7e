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
	warm := r.open(sidecar("10.9.9.9", "ns1"))
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
			s, err := adsclient.Open(context.Background(), r.cc, sidecar(fmt.Sprintf("10.8.%d.%d", i/250, i%250), "ns1"))
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
	if g := goroutines(); g > baseG+10 {
		t.Fatalf("goroutines: %d after churn, %d before", g, baseG)
	}
	if h := fixtures.LiveHeap(); h > baseHeap+8<<20 {
		t.Fatalf("heap: %d MB after churn, %d MB before", h>>20, baseHeap>>20)
	}
}

// TestStalledClientDoesNotGrowMemory keeps a stream that never reads while its cluster changes
// a thousand times: the server holds at most one response for it.
func TestStalledClientDoesNotGrowMemory(t *testing.T) {
	r := newRig(t, mesh()...)
	stalled := r.open(sidecar("10.9.0.5", "ns1"))
	_ = stalled.Request(adsclient.TypeCLA, fooCluster)
	// The first response is sent (the server's status says so), and never read.
	deadline := time.Now().Add(wait)
	for len(r.srv.Status()) != 1 || r.srv.Status()[0].Types[adsclient.TypeCLA].Responses != 1 {
		if time.Now().After(deadline) {
			t.Fatal("no first response")
		}
		time.Sleep(time.Millisecond)
	}
	before := fixtures.LiveHeap()
	for i := 0; i < 1000; i++ {
		c := fixtures.Ready
		if i%2 == 0 {
			c = fixtures.NotReady
		}
		r.in.Apply(fooSlice(fixtures.Ready, fixtures.Ready, c), false)
	}
	// The barrier: a last state none of the others had, so its change cannot be folded into an
	// earlier, equal one when the graph batches the writes.
	last := time.Now()
	r.in.Apply(fooSlice(fixtures.NotReady, fixtures.Ready, fixtures.Ready), false)
	waitTold(t, r, adsclient.TypeCLA, fooCluster, last)
	if after := fixtures.LiveHeap(); after > before+4<<20 {
		t.Fatalf("heap grew by %d MB while a client stalled", (after-before)>>20)
	}
	st := r.srv.Status()
	if len(st) != 1 || st[0].Types[adsclient.TypeCLA].Responses != 1 {
		t.Fatalf("a client that never ACKs must have been sent exactly one response: %+v", st)
	}
}

func waitQuiet(t *testing.T, r *rig) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := len(r.srv.Status())
		if n == 0 && len(r.g.ConnectedProxies.List()) == 0 && len(r.g.Proxies.List()) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still open", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func goroutines() int {
	var n int
	for i := 0; i < 50; i++ {
		n = runtime.NumGoroutine()
		time.Sleep(10 * time.Millisecond)
	}
	return n
}
