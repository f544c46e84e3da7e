package xds

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
)

// setBig gives the fake source n resources of a type, each of size bytes.
func (f *fakeSource) setBig(typeURL string, n, size int) []string {
	var names []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("big-%03d", i)
		body := make([]byte, size)
		copy(body, name+"#")
		f.mu.Lock()
		f.version++
		body[size-1] = byte(f.version)
		if f.res[typeURL] == nil {
			f.res[typeURL] = map[string]*collections.Resource{}
		}
		f.res[typeURL][name] = &collections.Resource{Name: name, TypeURL: typeURL, Version: uint64(i+1)<<32 | f.version, Body: body}
		f.mu.Unlock()
		names = append(names, name)
	}
	f.notify(collections.Change{TypeURL: typeURL, Names: names})
	return names
}

// deltaFollower subscribes to names of a type over delta and ACKs every response, counting the
// responses and the largest; done is closed once it holds every name at the source's version.
type deltaFollower struct {
	s         *adsclient.DeltaStream
	held      map[string]string
	responses int
	largest   int
	done      chan struct{}
	err       error
}

func follow(ctx context.Context, t *testing.T, fs *fakeServer, i int, typeURL string, names []string, initial map[string]string) *deltaFollower {
	t.Helper()
	s, err := adsclient.OpenDelta(ctx, fs.cc, sidecarNode(i))
	if err != nil {
		t.Fatal(err)
	}
	f := &deltaFollower{s: s, held: map[string]string{}, done: make(chan struct{})}
	for n, v := range initial {
		f.held[n] = v
	}
	if err := s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: names, InitialResourceVersions: initial}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, n := range names {
		r, _ := fs.src.current(typeURL, n)
		want[n] = r.VersionString()
	}
	go func() {
		defer s.Close()
		for {
			if len(f.held) == len(want) {
				complete := true
				for n, v := range want {
					if f.held[n] != v {
						complete = false
						break
					}
				}
				if complete {
					close(f.done)
					return
				}
			}
			resp, err := s.Recv(time.Minute)
			if err != nil {
				f.err = err
				close(f.done)
				return
			}
			f.responses++
			size := 0
			for _, r := range resp.Resources {
				f.held[r.Name] = r.Version
				size += len(r.Resource.GetValue())
			}
			f.largest = max(f.largest, size)
			if err := s.Ack(resp); err != nil {
				f.err = err
				close(f.done)
				return
			}
		}
	}()
	return f
}

// TestLargeAnswersGoInParts: an answer larger than the response bound goes out in parts, each
// within the bound (and acknowledged before the next); the client ends up holding everything.
// A state-of-the-world list of clusters is never split.
func TestLargeAnswersGoInParts(t *testing.T) {
	fs := startFake(t, func(o *Options) { o.Limits = Limits{StreamRate: -1, ResponseBytes: 256 << 10} })
	names := fs.src.setBig(tEndpoint.url(), 100, 20<<10) // 2 MB
	f := follow(context.Background(), t, fs, 1, tEndpoint.url(), names, nil)
	<-f.done
	if f.err != nil {
		t.Fatal(f.err)
	}
	if f.responses < 8 || f.largest > 256<<10 {
		t.Fatalf("2 MB of CLAs in %d responses, the largest of %d bytes; want at least 8 of at most 256 KB", f.responses, f.largest)
	}
	// State of the world: endpoints in parts, clusters whole.
	clusters := fs.src.setBig(tCluster.url(), 40, 20<<10) // 800 KB
	s, err := adsclient.Open(context.Background(), fs.cc, sidecarNode(2))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_ = s.Request(tCluster.url())
	cds, err := s.Recv(10 * time.Second)
	if err != nil || len(cds.Resources) != len(clusters) {
		t.Fatalf("the clusters, whole: %d of %d (%v)", len(cds.GetResources()), len(clusters), err)
	}
	_ = s.Ack(cds)
	_ = s.Request(tEndpoint.url(), names...)
	got := map[string]bool{}
	for parts := 0; len(got) < len(names); parts++ {
		r, err := s.Recv(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if parts > 0 && r.TypeUrl == tEndpoint.url() && len(r.Resources) > 13 {
			t.Fatalf("a part of %d CLAs of 20 KB, over 256 KB", len(r.Resources))
		}
		for _, a := range r.Resources {
			got[fakeName(t, a.Value)] = true
		}
		_ = s.Ack(r, names...)
	}
}

// TestNewStreamsPastTheRateRetry: past the stream rate a new stream is told to retry, except a
// delta stream coming back with versions that are current, which is let in.
func TestNewStreamsPastTheRateRetry(t *testing.T) {
	fs := startFake(t, func(o *Options) { o.Limits = Limits{StreamRate: 0.001} }) // one, then none
	names := fs.src.setBig(tEndpoint.url(), 10, 100)
	open := func(i int, initial map[string]string) error {
		f := follow(context.Background(), t, fs, i, tEndpoint.url(), names, initial)
		<-f.done
		return f.err
	}
	if err := open(1, nil); err != nil {
		t.Fatalf("the first stream: %v", err)
	}
	if err := open(2, nil); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a stream past the rate: %v, want ResourceExhausted", err)
	}
	current := map[string]string{}
	for _, n := range names {
		r, _ := fs.src.current(tEndpoint.url(), n)
		current[n] = r.VersionString()
	}
	if err := open(3, current); err != nil {
		t.Fatalf("a delta stream holding the current versions: %v", err)
	}
	stale := map[string]string{}
	for _, n := range names {
		stale[n] = "1"
	}
	if err := open(4, stale); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a delta stream holding old versions: %v, want ResourceExhausted", err)
	}
}

// TestBudgetHoldsWithClientsThatNeverRead: clients that never read their answer, and a herd of
// readers asking for everything at once: the bytes in flight never pass the budget, each reader
// completes (the stalled clients are disconnected once the send timeout passes), and the budget
// is whole again once everyone is gone.
func TestBudgetHoldsWithClientsThatNeverRead(t *testing.T) {
	const budget = 4 << 20
	fs := startFake(t, func(o *Options) {
		o.Limits = Limits{StreamRate: -1, SendBudget: budget, ResponseBytes: 512 << 10, SendTimeout: 2 * time.Second}
	})
	names := fs.src.setBig(tEndpoint.url(), 200, 50<<10) // 10 MB an answer
	var peak atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			if n := fs.srv.budget.inFlight(); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Twenty clients that ask and never read, each on a connection of its own with a fixed
	// flow-control window: each holds a part the window cannot take.
	for i := 0; i < 20; i++ {
		cc, err := adsclient.Dial(fs.addr, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		// A raw stream: the ADS client would read on its own goroutine.
		s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&discovery.DeltaDiscoveryRequest{Node: sidecarNode(100 + i).Proto(), TypeUrl: tEndpoint.url(), ResourceNamesSubscribe: names}); err != nil {
			t.Fatal(err)
		}
	}
	var readers []*deltaFollower
	for i := 0; i < 30; i++ {
		readers = append(readers, follow(ctx, t, fs, i, tEndpoint.url(), names, nil))
	}
	for i, f := range readers {
		select {
		case <-f.done:
		case <-time.After(2 * time.Minute):
			t.Fatalf("reader %d never completed (%d responses)", i, f.responses)
		}
		if f.err != nil {
			t.Fatalf("reader %d: %v", i, f.err)
		}
	}
	close(stop)
	sampler.Wait()
	capacity := fs.srv.budget.capacity()
	stalled := testutil.ToFloat64(fs.srv.metrics.Stalled)
	t.Logf("peak in flight %d KB of a %d KB budget; %v streams stalled", peak.Load()>>10, capacity>>10, stalled)
	if stalled == 0 {
		t.Fatal("no client that never reads was disconnected: the test did not fill the budget")
	}
	if peak.Load() > capacity {
		t.Fatalf("%d bytes in flight, over the budget of %d", peak.Load(), capacity)
	}
	cancel()
	waitStreams(t, fs, 0)
	if n := fs.srv.budget.inFlight(); n != 0 {
		t.Fatalf("%d bytes in flight once every stream is gone", n)
	}
}

// TestTheResumeExemptionCoversWhatIsCurrent: past the stream rate, a delta stream is let in as
// resumed only when what it subscribes to is, in the main, what it holds current: one current
// version among made-up names and every other name is not a resume. One let in as resumed pays
// its place of the rate once it subscribes to more: its answers wait for it.
func TestTheResumeExemptionCoversWhatIsCurrent(t *testing.T) {
	fs := startFake(t, func(o *Options) { o.Limits = Limits{StreamRate: 0.001} }) // one, then none
	names := fs.src.setBig(tEndpoint.url(), 10, 100)
	current := map[string]string{}
	for _, n := range names {
		r, _ := fs.src.current(tEndpoint.url(), n)
		current[n] = r.VersionString()
	}
	open := func(i int, subscribe []string, initial map[string]string) (*adsclient.DeltaStream, error) {
		s, err := adsclient.OpenDelta(context.Background(), fs.cc, sidecarNode(i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		_ = s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: tEndpoint.url(), ResourceNamesSubscribe: subscribe, InitialResourceVersions: initial})
		_, err = s.Recv(10 * time.Second)
		return s, err
	}
	if _, err := open(1, names, nil); err != nil {
		t.Fatalf("the first stream: %v", err)
	}
	madeUp := append(madeUp("made-up", 500, 40), names...)
	for i := 0; i < 30; i++ {
		one := map[string]string{names[0]: current[names[0]]}
		if _, err := open(100+i, madeUp, one); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("stream %d, one current version among 510 names: %v, want ResourceExhausted", i, err)
		}
	}
	s, err := open(2, names, current)
	if err != nil {
		t.Fatalf("a resume holding every version current: %v", err)
	}
	paid := testutil.ToFloat64(fs.srv.metrics.Throttled)
	if err := s.Subscribe(tEndpoint.url(), madeUp[:500], nil); err != nil {
		t.Fatal(err)
	}
	fixtures.Polling("the stream's payment is counted by a metric, which signals nothing").Await(t, 10*time.Second,
		"the resumed stream to pay for more names", func() (bool, string) {
			n := testutil.ToFloat64(fs.srv.metrics.Throttled)
			return n > paid, fmt.Sprintf("%v throttled", n)
		})
	if r, err := s.Recv(100 * time.Millisecond); err == nil {
		t.Fatalf("a resumed stream subscribing to 500 more names was answered at once, past the rate: %d resources", len(r.Resources))
	}
}
