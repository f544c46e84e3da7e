package e2e

import (
	"context"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/krteds/krteds/outputs/xds/adsclient"
)

// TestSIGTERMDrainsAsAReplicaShould: on SIGTERM the binary is not ready at once, ends its
// streams (UNAVAILABLE) spread over --drain-duration rather than all at once, and exits 0.
func TestSIGTERMDrainsAsAReplicaShould(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	_, xdsAddr, debugAddr, serve, done := serveExample(t, bin, "--drain-duration", "2s")
	waitFor(t, "/ready", answers(debugAddr, http.StatusOK))
	cc, err := adsclient.Dial(xdsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	const n = 5
	var streams []*adsclient.Stream
	for i := 0; i < n; i++ {
		s, err := adsclient.Open(context.Background(), cc, adsclient.Node{ID: fmt.Sprintf("sidecar~10.10.0.%d~p%d.shop~shop.svc.cluster.local", 50+i, i), Namespace: "shop"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_ = s.Request(adsclient.TypeCLA, "outbound|9080||reviews.shop.svc.cluster.local")
		if _, err := s.Recv(20 * time.Second); err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	start := time.Now()
	if err := serve.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Not ready at once: before the first stream has even been ended.
	waitFor(t, "/ready to say 503", answers(debugAddr, http.StatusServiceUnavailable))
	var ended []time.Duration
	for i, s := range streams {
		_, err := s.Recv(20 * time.Second)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("stream %d after SIGTERM: %v, want Unavailable", i, err)
		}
		ended = append(ended, time.Since(start))
	}
	if spread := ended[n-1] - ended[0]; spread < time.Second {
		t.Fatalf("five streams ended within %v (%v): want them spread over the 2 s drain", spread, ended)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("krteds serve exited with %v after SIGTERM", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("krteds serve did not exit after the drain")
	}
}
