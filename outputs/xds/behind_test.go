package xds

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/outputs/xds/xdsdebug"
	"github.com/krteds/krteds/test/fixtures"
)

// TestLag: how a subscription's lag moves with marks, plans, ACKs and NACKs, and which input
// changes an ACK is the first to deliver.
func TestLag(t *testing.T) {
	c1 := timedCause{Cause: collections.Cause{Kind: "EndpointSlice", Name: "a", Version: "1"}, computed: 100}
	c2 := timedCause{Cause: collections.Cause{Kind: "EndpointSlice", Name: "b", Version: "1"}, computed: 300}
	var l lag
	if l.behindSince() != 0 {
		t.Fatal("a new lag is behind")
	}
	l.marked(map[nameID]int64{1: 50, 2: 40})
	l.marked(map[nameID]int64{3: 10}) // a later mark does not move the start
	if got := l.behindSince(); got != 40 {
		t.Fatalf("behind since %d, want the earliest mark 40", got)
	}
	// A first part leaves the rest behind since the same time.
	l.planned(&response{causes: []timedCause{c1}}, true, 200)
	if l.since != 40 || l.sending.since != 40 || l.sending.complete {
		t.Fatalf("after a part: %+v", l)
	}
	d, fresh := l.acked()
	if len(fresh) != 1 || d.since != 40 || l.currentAsOf != 0 || l.behindSince() != 40 {
		t.Fatalf("after a part's ACK: fresh %v, lag %+v", fresh, l)
	}
	// The last part: the client is current as of its plan once it acknowledges it.
	l.planned(&response{causes: []timedCause{c2}}, false, 400)
	if l.since != 0 || l.behindSince() != 40 {
		t.Fatalf("after the last part: %+v", l)
	}
	if _, fresh := l.acked(); len(fresh) != 1 || l.currentAsOf != 400 || l.behindSince() != 0 {
		t.Fatalf("after the last ACK: fresh %v, lag %+v", fresh, l)
	}
	// The same change carried again by a version computed before the client was current (a Pod
	// gone while its slice stays) is not its programming; a change computed after is.
	l.marked(map[nameID]int64{1: 500})
	l.planned(&response{causes: []timedCause{c1, {Cause: c2.Cause, computed: 450}}}, false, 600)
	if _, fresh := l.acked(); len(fresh) != 1 || fresh[0].computed != 450 {
		t.Fatalf("fresh %v: want only the change computed after the client was current", fresh)
	}
	// A rejection keeps the client behind since what it rejected, until an ACK.
	l.marked(map[nameID]int64{1: 700})
	l.planned(&response{}, false, 800)
	l.nacked(900)
	if l.behindSince() != 700 || l.rejectedSince != 700 {
		t.Fatalf("after a NACK: %+v", l)
	}
	l.marked(map[nameID]int64{1: 1000})
	l.planned(&response{}, false, 1100)
	l.acked()
	if l.behindSince() != 0 {
		t.Fatalf("after the next ACK: %+v", l)
	}
	// Nothing to send after all (a resume holding current versions) ends the lag.
	l.asked(1200)
	l.settled()
	if l.behindSince() != 0 {
		t.Fatalf("settled: %+v", l)
	}
}

// setCaused gives a resource a new version computed for an input change, and says so.
func (f *fakeSource) setCaused(typeURL, name string, c collections.Cause) *collections.Resource {
	f.mu.Lock()
	f.version++
	body := fmt.Appendf(nil, "%s#%d", name, f.version)
	r := &collections.Resource{Name: name, TypeURL: typeURL, Version: f.version<<8 | 1, Body: body, Cause: c}
	if f.res[typeURL] == nil {
		f.res[typeURL] = map[string]*collections.Resource{}
	}
	f.res[typeURL][name] = r
	f.mu.Unlock()
	f.notify(collections.Change{TypeURL: typeURL, Names: []string{name}, Causes: []collections.Cause{c}})
	return r
}

// connOf is the connection id of the stream of a node id.
func connOf(t *testing.T, fs *fakeServer, nodeID string) string {
	t.Helper()
	var id string
	fixtures.Polling("a stream's identification signals nothing").Await(t, 10*time.Second, "the stream of "+nodeID, func() (bool, string) {
		for _, p := range fs.srv.Proxies() {
			if p.NodeID == nodeID {
				id = p.ConnID
				return true, ""
			}
		}
		return false, "not identified"
	})
	return id
}

func typeStatus(t *testing.T, fs *fakeServer, conn string, ty typ) xdsdebug.TypeStatus {
	t.Helper()
	cs, ok := fs.srv.Status(conn, false)
	if !ok {
		t.Fatalf("stream %s ended", conn)
	}
	return cs.Types[ty.url()]
}

// TestAClientThatStopsReadingIsReportedStale: a client that reads nothing of its answer is
// reported behind, then stale past the threshold with that reason (in its status, the gauge and
// one log line); once it reads and acknowledges, it is not behind, the gauge is back to zero,
// and how long it was stale is observed.
func TestAClientThatStopsReadingIsReportedStale(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	const threshold = 600 * time.Millisecond
	fs := startFake(t, func(o *Options) {
		o.Log = zap.New(core)
		o.Limits = Limits{StreamRate: -1, ResponseBytes: 256 << 10, SendTimeout: time.Minute, StaleAfter: threshold}
	})
	names := fs.src.setBig(tEndpoint.url(), 60, 8<<10) // 480 KB, past the client's window
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := discovery.NewAggregatedDiscoveryServiceClient(silentConn(t, fs)).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := sidecarNode(7)
	asked := time.Now()
	if err := s.Send(&discovery.DeltaDiscoveryRequest{Node: node.Proto(), TypeUrl: tEndpoint.url(), ResourceNamesSubscribe: names}); err != nil {
		t.Fatal(err)
	}
	conn := connOf(t, fs, node.ID)
	var b *xdsdebug.Behind
	fixtures.Polling("the status is asked, not told").Await(t, 10*time.Second, "the client reported stale", func() (bool, string) {
		b = typeStatus(t, fs, conn, tEndpoint).Behind
		return b != nil && b.Stale, fmt.Sprintf("behind %+v", b)
	})
	if b.Reason != xdsdebug.WaitNotReading || b.Names != len(names) {
		t.Fatalf("stale as %+v, want %s with %d names", b, xdsdebug.WaitNotReading, len(names))
	}
	if took := time.Since(asked); took > threshold+2*staleTick {
		t.Errorf("reported stale %v after the request, the threshold is %v", took, threshold)
	}
	if got := testutil.ToFloat64(fs.srv.metrics.StaleResources.WithLabelValues(xdsdebug.WaitNotReading)); got != float64(len(names)) {
		t.Errorf("krteds_xds_stale_resources{reason=%q} = %v, want %d", xdsdebug.WaitNotReading, got, len(names))
	}
	if lines := logs.FilterMessageSnippet("behind for longer than the stale threshold").All(); len(lines) != 1 ||
		!strings.Contains(fmt.Sprint(lines[0].ContextMap()["waiting"]), "ClusterLoadAssignment "+xdsdebug.WaitNotReading) {
		t.Errorf("log lines %v", lines)
	}
	// It reads and acknowledges every part.
	held := 0
	for held < len(names) {
		resp, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		held += len(resp.Resources)
		if err := s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: tEndpoint.url(), ResponseNonce: resp.Nonce}); err != nil {
			t.Fatal(err)
		}
	}
	fixtures.Polling("the status is asked, not told").Await(t, 10*time.Second, "the client caught up", func() (bool, string) {
		b = typeStatus(t, fs, conn, tEndpoint).Behind
		return b == nil, fmt.Sprintf("behind %+v", b)
	})
	if got := testutil.ToFloat64(fs.srv.metrics.StaleResources.WithLabelValues(xdsdebug.WaitNotReading)); got != 0 {
		t.Errorf("the gauge is %v once the client caught up", got)
	}
	if n := histogramCount(t, fs.srv.metrics.StaleDuration, xdsdebug.WaitNotReading); n != 1 {
		t.Errorf("%d stale periods observed, want 1", n)
	}
}

// histogramCount is the sample count of a histogram vector's series of labels.
func histogramCount(t *testing.T, h *prometheus.HistogramVec, labels ...string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.WithLabelValues(labels...).(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// deliveries collects what Options.Delivered is told.
type deliveries struct {
	mu  sync.Mutex
	all []Delivery
	new *fixtures.Waker
}

func (d *deliveries) add(x Delivery) {
	d.mu.Lock()
	d.all = append(d.all, x)
	d.mu.Unlock()
	d.new.Wake()
}

func (d *deliveries) await(t *testing.T, n int) []Delivery {
	t.Helper()
	var out []Delivery
	d.new.Await(t, 10*time.Second, fmt.Sprint(n, " deliveries"), func() (bool, string) {
		d.mu.Lock()
		defer d.mu.Unlock()
		out = append([]Delivery(nil), d.all...)
		return len(out) >= n, fmt.Sprint(out)
	})
	return out
}

// TestRejectionsAndProgrammingAreReported: a change the client acknowledges is observed once in
// the network programming latency, each stage in order; the same change carried again by a
// later version is not observed again; a rejected change is reported with the client's error
// and the client is behind as rejected until it acknowledges a later answer.
func TestRejectionsAndProgrammingAreReported(t *testing.T) {
	got := &deliveries{new: fixtures.NewWaker()}
	fs := startFake(t, func(o *Options) { o.Delivered = got.add })
	const name = "outbound|80||a.ns1.svc.cluster.local"
	fs.src.set(tEndpoint.url(), name)
	node := sidecarNode(3)
	s := subscribedDelta(t, fs, node, name)
	ack := func() *discovery.DeltaDiscoveryResponse {
		t.Helper()
		resp := recvDelta(t, s)
		if err := s.Ack(resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	ack()
	trigger := time.Now() // after the subscription: a change made before it is not its client's to measure
	c1 := collections.Cause{Kind: "EndpointSlice", Name: "ns1/a-1", Version: "10", Trigger: trigger.UnixNano(), Seen: time.Now().UnixNano(),
		TriggerFrom: collections.TriggerStamped}
	fs.src.setCaused(tEndpoint.url(), name, c1)
	ack()
	d := got.await(t, 1)[0]
	if d.Cause != c1 || d.Error != "" || d.NodeID != node.ID || !(d.Computed.UnixNano() >= c1.Seen && !d.Handed.Before(d.Computed) && !d.Done.Before(d.Handed)) {
		t.Fatalf("delivery %+v: want %v, stages in order", d, c1)
	}
	total := histogramCount(t, fs.srv.metrics.NetworkProgramming, StageTotal, "EndpointSlice")
	for _, stage := range []string{StageCluster, StageCompute, StageSend, StageProxy} {
		if n := histogramCount(t, fs.srv.metrics.NetworkProgramming, stage, "EndpointSlice"); n != 1 || total != 1 {
			t.Errorf("stage %s observed %d times, total %d: want once", stage, n, total)
		}
	}
	// The same change again, in a version computed for another reason: not observed again.
	fs.src.setCaused(tEndpoint.url(), name, c1)
	ack()
	c2 := c1
	c2.Version, c2.Seen = "11", time.Now().UnixNano()
	fs.src.setCaused(tEndpoint.url(), name, c2)
	resp, err := s.Recv(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Nack(resp, "bad endpoint"); err != nil {
		t.Fatal(err)
	}
	ds := got.await(t, 2)
	if len(ds) != 2 || ds[1].Cause != c2 || ds[1].Error != "bad endpoint" {
		t.Fatalf("deliveries %+v: want c1 acknowledged once, then c2 rejected", ds)
	}
	if n := histogramCount(t, fs.srv.metrics.NetworkProgramming, StageTotal, "EndpointSlice"); n != 1 {
		t.Errorf("observed %d times, want once: a change carried again, or rejected, is not programmed", n)
	}
	st := typeStatus(t, fs, connOf(t, fs, node.ID), tEndpoint)
	if st.Behind == nil || st.Behind.Reason != xdsdebug.WaitRejected || st.LastError != "bad endpoint" {
		t.Fatalf("after the NACK: %+v", st)
	}
	c3 := c2
	c3.Version, c3.Seen = "12", time.Now().UnixNano()
	fs.src.setCaused(tEndpoint.url(), name, c3)
	ack()
	got.await(t, 3)
	st = typeStatus(t, fs, connOf(t, fs, node.ID), tEndpoint)
	if st.Behind != nil || st.LastError != "" {
		t.Fatalf("after a later ACK: %+v", st)
	}
}

// TestASupersededChangeIsProgrammedWithItsSuccessor: changes a client is sent together (the
// later computed before the earlier was sent) are each observed once, as kube-proxy observes
// every trigger time a sync programs; a change already delivered is not observed again.
func TestASupersededChangeIsProgrammedWithItsSuccessor(t *testing.T) {
	got := &deliveries{new: fixtures.NewWaker()}
	fs := startFake(t, func(o *Options) { o.Delivered = got.add })
	const name = "outbound|80||a.ns1.svc.cluster.local"
	fs.src.set(tEndpoint.url(), name)
	s := subscribedDelta(t, fs, sidecarNode(5), name)
	recv := func() *discovery.DeltaDiscoveryResponse { t.Helper(); return recvDelta(t, s) }
	if err := s.Ack(recv()); err != nil {
		t.Fatal(err)
	}
	var last *collections.Resource
	change := func(v string) collections.Cause {
		now := time.Now().UnixNano()
		c := collections.Cause{Kind: "EndpointSlice", Name: "ns1/a-1", Version: v, Trigger: now, Seen: now, TriggerFrom: collections.TriggerStamped}
		last = fs.src.setCaused(tEndpoint.url(), name, c)
		return c
	}
	c0 := change("10")
	r0 := recv() // not acknowledged yet: the next changes wait for it, and are sent together
	c1, c2 := change("11"), change("12")
	// The barrier: both changes are in the stream's marks (the server had the chance to send).
	fixtures.Polling("a stream's marks signal nothing").Await(t, 10*time.Second, "both changes marked", func() (bool, string) {
		st := typeStatus(t, fs, connOf(t, fs, sidecarNode(5).ID), tEndpoint)
		return st.Behind != nil, fmt.Sprintf("%+v", st)
	})
	if err := s.Ack(r0); err != nil {
		t.Fatal(err)
	}
	r := recv()
	if len(r.Resources) != 1 || !bytes.Equal(r.Resources[0].Resource.GetValue(), last.Body) {
		t.Fatalf("after the ACK: %v, want the version of %v", r.Resources, c2)
	}
	if err := s.Ack(r); err != nil {
		t.Fatal(err)
	}
	ds := got.await(t, 3)
	var causes []collections.Cause
	for _, d := range ds {
		causes = append(causes, d.Cause)
	}
	if len(ds) != 3 || !slices.Contains(causes, c0) || !slices.Contains(causes, c1) || !slices.Contains(causes, c2) {
		t.Fatalf("delivered %v: want %v, %v and %v, each once", causes, c0, c1, c2)
	}
	if n := histogramCount(t, fs.srv.metrics.NetworkProgramming, StageTotal, "EndpointSlice"); n != 3 {
		t.Errorf("observed %d times, want 3: every change once, the superseded one too", n)
	}
}

// TestAResumeIsNotBehind: a delta stream coming back holding current versions (as after a
// restart) is sent nothing and is not behind: nothing is reported stale.
func TestAResumeIsNotBehind(t *testing.T) {
	fs := startFake(t)
	var names []string
	initial := map[string]string{}
	for i := range 20 {
		n := fmt.Sprintf("outbound|80||s%d.ns1.svc.cluster.local", i)
		r := fs.src.set(tEndpoint.url(), n)
		names = append(names, n)
		initial[n] = r.VersionString()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node := sidecarNode(4)
	s, err := adsclient.OpenDelta(ctx, fs.cc, node)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: tEndpoint.url(), ResourceNamesSubscribe: names, InitialResourceVersions: initial}); err != nil {
		t.Fatal(err)
	}
	// Its first answer says nothing changed; the answer to a type krteds serves nothing of goes
	// after everything due before it.
	resp, err := s.Recv(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Resources)+len(resp.RemovedResources) != 0 {
		t.Fatalf("a resume holding current versions was sent %d resources, %d removed", len(resp.Resources), len(resp.RemovedResources))
	}
	if err := s.Ack(resp); err != nil {
		t.Fatal(err)
	}
	const barrier = "type.googleapis.com/krteds.test.Barrier"
	if err := s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: barrier}); err != nil {
		t.Fatal(err)
	}
	if resp, err := s.Recv(10 * time.Second); err != nil || resp.TypeUrl != barrier {
		t.Fatalf("after the first answer: %v, %v", resp, err)
	}
	st := typeStatus(t, fs, connOf(t, fs, node.ID), tEndpoint)
	if st.Behind != nil {
		t.Fatalf("a resumed stream is behind: %+v", st.Behind)
	}
	if sl := fs.srv.Debug().Staleness(xdsdebug.Everything, false); len(sl.Behind) != 0 {
		t.Fatalf("staleness lists %+v", sl.Behind)
	}
}

// subscribedDelta opens a delta stream of node to the fake server, subscribed to CLAs of names;
// it ends with the test.
func subscribedDelta(t *testing.T, fs *fakeServer, node adsclient.Node, names ...string) *adsclient.DeltaStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := adsclient.OpenDelta(ctx, fs.cc, node)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Subscribe(tEndpoint.url(), names, nil); err != nil {
		t.Fatal(err)
	}
	return s
}

// recvDelta is the stream's next response (within 10 s).
func recvDelta(t *testing.T, s *adsclient.DeltaStream) *discovery.DeltaDiscoveryResponse {
	t.Helper()
	resp, err := s.Recv(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
