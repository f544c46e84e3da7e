package lrs

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/krteds/krteds/outputs/xds/admission"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
)

// fakeSent says what each node id was sent.
type fakeSent map[string][]string

func (f fakeSent) SentTo(nodeID string, _ *admission.Identity, names []string) map[string]bool {
	out := map[string]bool{}
	for _, n := range names {
		if slices.Contains(f[nodeID], n) {
			out[n] = true
		}
	}
	return out
}

// lrsServer serves load reports on loopback, bound to sent.
func lrsServer(t *testing.T, sent Sent) (*grpc.ClientConn, *LoadReports) {
	t.Helper()
	l := New(time.Second, prometheus.NewRegistry(), nil)
	l.Bind(sent, nil, "")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	lrs.RegisterLoadReportingServiceServer(gs, l)
	go func() { _ = gs.Serve(lis) }()
	cc, err := adsclient.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		gs.Stop()
	})
	return cc, l
}

func node2() adsclient.Node { return node(2) }

func node(i int) adsclient.Node {
	return adsclient.Node{ID: fmt.Sprintf("sidecar~10.1.0.%d~p%d.ns1~ns1.svc.cluster.local", i, i), Namespace: "ns1"}
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
	node := node(1)
	cc, l := lrsServer(t, fakeSent{node.ID: {known}, node2().ID: {others}})
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
	s, err = openLRS(sctx, t, cc, node.Proto())
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
	var names []string
	for i := 0; i < 80; i++ {
		names = append(names, fmt.Sprintf("outbound|80||s%d.ns1.svc.cluster.local", i))
	}
	node := node(1)
	cc, l := lrsServer(t, fakeSent{node.ID: names})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := openLRS(ctx, t, cc, node.Proto())
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

// TestLoadReportsAreAuthenticated: on the authenticated port an LRS stream is authenticated as
// it opens and may report only as a proxy of its identity's namespace.
func TestLoadReportsAreAuthenticated(t *testing.T) {
	ca, err := fixtures.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue("", true)
	if err != nil {
		t.Fatal(err)
	}
	l := New(time.Second, nil, nil)
	const tok = "token-of-ns1"
	l.Bind(fakeSent{}, tokens{tok: "ns1"}, "cluster.local")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: ca.Pool(),
		ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12})))
	lrs.RegisterLoadReportingServiceServer(gs, l)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := openLRS(ctx, t, cc, node(1).Proto()); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no token: %v, want Unauthenticated", err)
	}
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	other := adsclient.Node{ID: "sidecar~10.1.0.2~x.ns2~ns2.svc.cluster.local", Namespace: "ns2"}
	if _, err := openLRS(authed, t, cc, other.Proto()); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a proxy of another namespace: %v, want PermissionDenied", err)
	}
	if _, err := openLRS(authed, t, cc, node(1).Proto()); err != nil {
		t.Errorf("its own namespace's proxy: %v", err)
	}
}

// tokens accept each token as a service account of its namespace.
type tokens map[string]string

func (tk tokens) Authenticate(_ context.Context, token string) (admission.Identity, error) {
	ns, ok := tk[token]
	if !ok {
		return admission.Identity{}, admission.RejectedToken{Reason: "unknown token"}
	}
	return admission.Identity{TrustDomain: "cluster.local", Namespace: ns, ServiceAccount: "sa"}, nil
}
