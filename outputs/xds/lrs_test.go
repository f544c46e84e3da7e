package xds

import (
	"context"
	"fmt"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/krteds/krteds/outputs/xds/adsclient"
)

// lrsServer is the fake source's server with load reporting.
func lrsServer(t *testing.T, opts ...func(*Options)) (*fakeServer, *LoadReports) {
	t.Helper()
	l := NewLoadReports(time.Second, prometheus.NewRegistry(), nil)
	return startFake(t, append([]func(*Options){func(o *Options) { o.LoadReports = l }}, opts...)...), l
}

// sentCLA opens an ADS stream as node and has it sent the CLAs of names.
func sentCLA(t *testing.T, fs *fakeServer, node adsclient.Node, names ...string) {
	t.Helper()
	s, err := adsclient.Open(context.Background(), fs.cc, node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Request(tEndpoint.url(), names...); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Recv(10 * time.Second); err != nil || len(r.Resources) != len(names) {
		t.Fatalf("the proxy was not sent %v: %v", names, err)
	}
}

// openLRS opens a load reporting stream as node, and reads its first answer.
func openLRS(ctx context.Context, t *testing.T, cc *grpc.ClientConn, node *core.Node) (lrs.LoadReportingService_StreamLoadStatsClient, error) {
	t.Helper()
	s, err := lrs.NewLoadReportingServiceClient(cc).StreamLoadStats(ctx)
	if err != nil {
		return nil, err
	}
	// A send failing with io.EOF means the server ended the stream: Recv says how.
	_ = s.Send(&lrs.LoadStatsRequest{Node: node})
	resp, err := s.Recv()
	if err != nil {
		return nil, err
	}
	if !resp.SendAllClusters || resp.LoadReportingInterval.AsDuration() != time.Second {
		t.Fatalf("first answer %v: want every cluster, every second", resp)
	}
	return s, nil
}

// TestLoadReportsBoundWhatClientsSend: a client's reports count only for the clusters krteds
// sent that proxy (not another proxy's, not a made-up subset of a served port), with 64
// localities and 16 drop categories each; what a stream reported leaves with it, in-progress
// counts and series alike; a stream without a node is refused.
func TestLoadReportsBoundWhatClientsSend(t *testing.T) {
	const known, others = "outbound|80||a.ns1.svc.cluster.local", "outbound|80||b.ns1.svc.cluster.local"
	fs, l := lrsServer(t)
	fs.src.set(tEndpoint.url(), known)
	fs.src.set(tEndpoint.url(), others)
	node := sidecarNode(1)
	sentCLA(t, fs, node, known)
	sentCLA(t, fs, sidecarNode(2), others)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// No node: refused.
	s, err := lrs.NewLoadReportingServiceClient(fs.cc).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Send(&lrs.LoadStatsRequest{})
	if _, err := s.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a stream without a node: %v, want InvalidArgument", err)
	}

	sctx, scancel := context.WithCancel(ctx)
	s, err = openLRS(sctx, t, fs.cc, node.Proto())
	if err != nil {
		t.Fatal(err)
	}
	var locs []*endpoint.UpstreamLocalityStats
	for i := 0; i < 100; i++ {
		locs = append(locs, &endpoint.UpstreamLocalityStats{Locality: &core.Locality{Region: fmt.Sprintf("r%d", i)},
			TotalSuccessfulRequests: 1, TotalRequestsInProgress: 2})
	}
	var drops []*endpoint.ClusterStats_DroppedRequests
	for i := 0; i < 20; i++ {
		drops = append(drops, &endpoint.ClusterStats_DroppedRequests{Category: fmt.Sprintf("c%d", i), DroppedCount: 1})
	}
	stats := []*endpoint.ClusterStats{
		{ClusterName: known, UpstreamLocalityStats: locs, DroppedRequests: drops, TotalDroppedRequests: 25},
		{ClusterName: "outbound|80||made-up.example"},
		{ClusterName: others, UpstreamLocalityStats: locs}, // another proxy's
	}
	for i := 0; i < 1000; i++ { // subsets no DestinationRule defines, of a port krteds serves
		stats = append(stats, &endpoint.ClusterStats{ClusterName: fmt.Sprintf("outbound|80|made-up-%d|a.ns1.svc.cluster.local", i), UpstreamLocalityStats: locs[:1]})
	}
	if err := s.Send(&lrs.LoadStatsRequest{ClusterStats: stats}); err != nil {
		t.Fatal(err)
	}
	if !l.WaitFor(ctx, func(lz Loadz) bool { return len(lz.Reporters) == 1 && lz.Reporters[0].Reports > 0 }) {
		t.Fatal("the report was never counted")
	}
	lz := l.Loadz()
	c := lz.Clusters[known]
	if len(lz.Clusters) != 1 || len(c.Localities) != maxLoadLocalities+1 || c.Localities[otherLabel].Successful != 100-maxLoadLocalities {
		t.Errorf("kept %d clusters, %d localities (other: %+v); want 1, %d", len(lz.Clusters), len(c.Localities), c.Localities[otherLabel], maxLoadLocalities+1)
	}
	if len(c.Dropped) != maxDropCategories+1 || c.Dropped[otherLabel] != 20-maxDropCategories+5 {
		t.Errorf("drops %v: want %d categories, other = %d (the 5 uncategorized land there too)", c.Dropped, maxDropCategories+1, 20-maxDropCategories+5)
	}
	if got := testutil.ToFloat64(l.rejected.WithLabelValues(rejectNotSent)); got != 1002 {
		t.Errorf("rejected stats %v, want 1002 (made up, another proxy's, 1000 made-up subsets)", got)
	}
	if got := testutil.ToFloat64(l.inProgress.WithLabelValues(known, "r0//")); got != 2 {
		t.Errorf("in progress %v, want 2", got)
	}
	if n := testutil.CollectAndCount(l.requests); n != 2*(maxLoadLocalities+1) {
		t.Errorf("%d request series, want %d", n, 2*(maxLoadLocalities+1))
	}
	// The stream ends: nothing it reported is kept.
	scancel()
	if !l.WaitFor(ctx, func(lz Loadz) bool { return len(lz.Reporters) == 0 }) {
		t.Fatal("the stream never ended")
	}
	for name, m := range map[string]prometheus.Collector{"requests": l.requests, "issued": l.issued, "in progress": l.inProgress, "dropped": l.dropped} {
		if n := testutil.CollectAndCount(m); n != 0 {
			t.Errorf("%d %s series left after the stream ended", n, name)
		}
	}
	if lz := l.Loadz(); len(lz.Clusters) != 0 {
		t.Errorf("totals of %d clusters left after the stream ended", len(lz.Clusters))
	}
}

// TestLoadReportsBoundedPerStream: one stream reporting every locality of many clusters it was
// sent adds at most maxStreamSeries series; the rest is counted as rejected.
func TestLoadReportsBoundedPerStream(t *testing.T) {
	fs, l := lrsServer(t)
	var names []string
	for i := 0; i < 80; i++ {
		names = append(names, fmt.Sprintf("outbound|80||s%d.ns1.svc.cluster.local", i))
		fs.src.set(tEndpoint.url(), names[i])
	}
	node := sidecarNode(1)
	sentCLA(t, fs, node, names...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := openLRS(ctx, t, fs.cc, node.Proto())
	if err != nil {
		t.Fatal(err)
	}
	var stats []*endpoint.ClusterStats
	for _, n := range names {
		cs := &endpoint.ClusterStats{ClusterName: n}
		for j := 0; j < maxLoadLocalities; j++ {
			cs.UpstreamLocalityStats = append(cs.UpstreamLocalityStats, &endpoint.UpstreamLocalityStats{Locality: &core.Locality{Zone: fmt.Sprint(j)}, TotalIssuedRequests: 1})
		}
		stats = append(stats, cs)
	}
	if err := s.Send(&lrs.LoadStatsRequest{ClusterStats: stats}); err != nil {
		t.Fatal(err)
	}
	if !l.WaitFor(ctx, func(lz Loadz) bool { return len(lz.Reporters) == 1 && lz.Reporters[0].Reports > 0 }) {
		t.Fatal("the report was never counted")
	}
	if n := testutil.CollectAndCount(l.issued); n != maxStreamSeries {
		t.Errorf("%d series from one stream, want %d", n, maxStreamSeries)
	}
	if got := testutil.ToFloat64(l.rejected.WithLabelValues(rejectStreamBound)); got != float64(80*maxLoadLocalities-maxStreamSeries) {
		t.Errorf("%v locality stats rejected, want %d", got, 80*maxLoadLocalities-maxStreamSeries)
	}
}
