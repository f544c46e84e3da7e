package e2e

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/krteds/krteds/cmd/krteds/app"
	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/lrs"
)

// TestLoadReportsFromGRPCClient: with LRS on, krteds' clusters name krteds as their LRS server;
// grpc-go's xDS client then reports the load of its RPCs to krteds, which counts them per
// cluster and locality: the successes and errors the client had, exactly.
func TestLoadReportsFromGRPCClient(t *testing.T) {
	port := startBackends(t, "127.0.0.2", "127.0.0.3", "127.0.0.4")
	cfg := collections.DefaultConfig()
	cfg.LRS = true
	m := startKrtedsWith(t, 80, app.Options{Config: cfg, Objects: manifests(t, port), LRSInterval: 100 * time.Millisecond})
	a := m.App
	cc := m.dial("xds:///echo.default.svc.cluster.local:80")

	// Every RPC waits for the channel to be ready, so each one goes through the cluster's picker
	// and is counted by the client's load store.
	const ok, failed = 20, 7
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < ok; i++ {
		if err := cc.Invoke(ctx, "/krteds.test.Whoami/Whoami", new(emptypb.Empty), new(wrapperspb.StringValue), grpc.WaitForReady(true)); err != nil {
			t.Fatalf("RPC %d: %v", i, err)
		}
	}
	for i := 0; i < failed; i++ {
		if err := cc.Invoke(ctx, "/krteds.test.Whoami/NoSuchMethod", new(emptypb.Empty), new(wrapperspb.StringValue), grpc.WaitForReady(true)); err == nil {
			t.Fatal("an RPC to a method the backends lack succeeded")
		}
	}

	const cluster = "outbound|80||echo.default.svc.cluster.local"
	totals := func(lz lrs.Loadz) (got [2]uint64) {
		for loc, l := range lz.Clusters[cluster].Localities {
			if loc != "r1/z1/" {
				t.Errorf("load reported for locality %q; the endpoints are in r1/z1", loc)
			}
			got[0] += l.Successful
			got[1] += l.Errors
		}
		return got
	}
	// Each report the client sends (every 100 ms) wakes the wait.
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	if !a.LoadReports.WaitFor(wctx, func(lz lrs.Loadz) bool { got := totals(lz); return got[0] >= ok && got[1] >= failed }) {
		t.Fatalf("reported successes/errors %v, want [%d %d]", totals(a.LoadReports.Loadz()), ok, failed)
	}
	if got := totals(a.LoadReports.Loadz()); got != [2]uint64{ok, failed} {
		t.Fatalf("reported successes/errors %v, want [%d %d]", got, ok, failed)
	}
	// The same counts as metrics.
	mfs, err := a.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "krteds_lrs_requests_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["cluster"] == cluster {
				sums[labels["result"]] += mt.GetCounter().GetValue()
			}
		}
	}
	if sums["success"] != ok || sums["error"] != failed {
		t.Errorf("krteds_lrs_requests_total for %s: %v, want success %d error %d", cluster, sums, ok, failed)
	}
}
