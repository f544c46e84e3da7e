package xds

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestLoadReportsBoundWhatClientsSend: a client's reports cannot make krteds keep more than the
// clusters it serves, 64 localities and 16 drop categories each; in-progress counts leave with
// the stream; a stream without a node is refused.
func TestLoadReportsBoundWhatClientsSend(t *testing.T) {
	const known = "outbound|80||a.ns.svc.cluster.local"
	reg := prometheus.NewRegistry()
	l := NewLoadReports(time.Second, func(c string) bool { return c == known }, reg, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	lrs.RegisterLoadReportingServiceServer(gs, l)
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// No node: refused.
	s, err := lrs.NewLoadReportingServiceClient(cc).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Send(&lrs.LoadStatsRequest{})
	if _, err := s.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a stream without a node: %v, want InvalidArgument", err)
	}

	sctx, scancel := context.WithCancel(ctx)
	s, err = lrs.NewLoadReportingServiceClient(cc).StreamLoadStats(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&lrs.LoadStatsRequest{Node: &core.Node{Id: "sidecar~10.0.0.1~c.ns~ns.svc.cluster.local"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv()
	if err != nil || !resp.SendAllClusters || resp.LoadReportingInterval.AsDuration() != time.Second {
		t.Fatalf("first answer %v, %v: want every cluster, every second", resp, err)
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
	if err := s.Send(&lrs.LoadStatsRequest{ClusterStats: []*endpoint.ClusterStats{
		{ClusterName: known, UpstreamLocalityStats: locs, DroppedRequests: drops, TotalDroppedRequests: 25},
		{ClusterName: "outbound|80||made-up.example"},
	}}); err != nil {
		t.Fatal(err)
	}
	if !l.WaitFor(ctx, func(lz Loadz) bool { return len(lz.Clusters) > 0 }) {
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
	if got := testutil.ToFloat64(l.rejected.WithLabelValues("unknown_cluster")); got != 1 {
		t.Errorf("rejected stats %v, want 1", got)
	}
	if got := testutil.ToFloat64(l.inProgress.WithLabelValues(known, "r0//")); got != 2 {
		t.Errorf("in progress %v, want 2", got)
	}
	// The stream ends: what it had in progress is no longer counted.
	scancel()
	if !l.WaitFor(ctx, func(lz Loadz) bool { return len(lz.Reporters) == 0 }) {
		t.Fatal("the stream never ended")
	}
	if got := testutil.ToFloat64(l.inProgress.WithLabelValues(known, "r0//")); got != 0 {
		t.Errorf("in progress after the stream ended: %v, want 0", got)
	}
}
