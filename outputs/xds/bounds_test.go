package xds

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/outputs/xds/xdsdebug"
	"github.com/krteds/krteds/test/fixtures"
)

func metricsBytes(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.Len()
}

func sidecarNode(i int) adsclient.Node {
	return adsclient.Node{ID: fmt.Sprintf("sidecar~10.1.%d.%d~p%d.ns1~ns1.svc.cluster.local", i/250, i%250, i), Namespace: "ns1"}
}

// TestMadeUpTypeURLsLeaveNothingBehind: 100 streams each ask for 1 000 resource types krteds
// does not serve; once they are gone, the heap and the metrics are back where they were. (Such a
// request is answered with an empty response while few are queued, and otherwise dropped.)
func TestMadeUpTypeURLsLeaveNothingBehind(t *testing.T) {
	reg := prometheus.NewRegistry()
	fs := startFake(t, func(o *Options) { o.Metrics = NewMetrics(reg) })
	fs.src.set(tEndpoint.url(), "e0")
	// Warm up: one stream, so that lazily made state (gRPC transport, pools) is in the baseline.
	warm, err := adsclient.Open(context.Background(), fs.cc, sidecarNode(0))
	if err != nil {
		t.Fatal(err)
	}
	_ = warm.Request(tEndpoint.url(), "e0")
	if _, err := warm.Recv(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	warm.Close()
	waitStreams(t, fs, 0)
	baseHeap, baseMetrics := fixtures.LiveHeap(), metricsBytes(t, reg)

	const streams, types = 100, 1000
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i := 0; i < streams; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s, err := adsclient.Open(context.Background(), fs.cc, sidecarNode(i+1))
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			for j := 0; j < types; j++ {
				if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: fmt.Sprintf("type.googleapis.com/made.up.T%d_%d", i, j),
					ResourceNames: []string{strings.Repeat("x", 100)}}); err != nil {
					errs <- err
					return
				}
			}
			// A known type after them: its answer proves they were all handled (requests are
			// handled in order); empty answers to some of them may come first.
			if err := s.Request(tEndpoint.url(), "e0"); err != nil {
				errs <- err
				return
			}
			for {
				r, err := s.Recv(20 * time.Second)
				if err != nil {
					errs <- fmt.Errorf("stream %d: %w", i, err)
					return
				}
				if r.TypeUrl == tEndpoint.url() {
					return
				}
				if len(r.Resources) != 0 {
					errs <- fmt.Errorf("an unknown type got resources")
					return
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(fs.srv.metrics.UnknownTypes); got != streams*types {
		t.Fatalf("unknown-type requests counted: %v, want %d", got, streams*types)
	}
	waitStreams(t, fs, 0)
	heapAfter, metricsAfter := fixtures.LiveHeap(), metricsBytes(t, reg)
	t.Logf("heap %d → %d KB, /metrics %d → %d bytes", baseHeap>>10, heapAfter>>10, baseMetrics, metricsAfter)
	if float64(heapAfter) > float64(baseHeap)*1.1+512<<10 {
		t.Errorf("heap grew from %d to %d KB", baseHeap>>10, heapAfter>>10)
	}
	if float64(metricsAfter) > float64(baseMetrics)*1.1 {
		t.Errorf("/metrics grew from %d to %d bytes", baseMetrics, metricsAfter)
	}
	if fs.srv.Subscriptions() != 0 {
		t.Errorf("%d names still interned", fs.srv.Subscriptions())
	}
}

func waitStreams(t *testing.T, fs *fakeServer, n int) {
	t.Helper()
	fixtures.Polling("a stream's end is its handler returning, which nothing signals").
		Await(t, 20*time.Second, fmt.Sprintf("%d streams open", n), func() (bool, string) {
			st, c := fs.srv.Streams(), fs.src.connected()
			return st == n && c == n, fmt.Sprintf("%d streams, %d proxies connected", st, c)
		})
}

// countingCore counts the bytes of every log entry.
type countingCore struct {
	zapcore.LevelEnabler
	mu    *sync.Mutex
	bytes *int
	lines *int
	enc   zapcore.Encoder
}

func (c countingCore) With([]zapcore.Field) zapcore.Core { return c }
func (c countingCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	return ce.AddCore(e, c)
}
func (c countingCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	b, err := c.enc.EncodeEntry(e, fields)
	if err != nil {
		return err
	}
	c.mu.Lock()
	*c.bytes += b.Len()
	*c.lines++
	c.mu.Unlock()
	return nil
}
func (c countingCore) Sync() error { return nil }

// TestHostileClientsGetBoundedLogs: 50 streams with a 1 MB node id, and one stream NACKing a
// thousand responses with 1 MB error details, write a bounded amount of log; the status a
// refused client gets is bounded too, and NACKs of responses the server never sent are not
// counted.
func TestHostileClientsGetBoundedLogs(t *testing.T) {
	var mu sync.Mutex
	var logBytes, logLines int
	core := countingCore{LevelEnabler: zapcore.DebugLevel, mu: &mu, bytes: &logBytes, lines: &logLines,
		enc: zapcore.NewConsoleEncoder(zap.NewProductionEncoderConfig())}
	fs := startFake(t, func(o *Options) { o.Log = zap.New(core) })
	for i := 0; i < 20; i++ {
		fs.src.set(tEndpoint.url(), "e0")
	}
	huge := strings.Repeat("x", 1<<20)
	for i := 0; i < 50; i++ {
		s, err := adsclient.Open(context.Background(), fs.cc, adsclient.Node{ID: "sidecar~10.0.0.1~" + huge + "~ns1.svc.cluster.local", Namespace: "ns1"})
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Request(tEndpoint.url(), "e0")
		_, err = s.Recv(10 * time.Second)
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("a 1 MB node id: %v", err)
		}
		if msg := status.Convert(err).Message(); len(msg) > 2*maxClientText {
			t.Fatalf("the refusal echoes %d bytes of the client's input", len(msg))
		}
		s.Close()
	}
	mu.Lock()
	nodeBytes := logBytes
	mu.Unlock()
	t.Logf("50 refused 1 MB node ids: %d bytes of log", nodeBytes)
	if nodeBytes > 50*2*1024 {
		t.Errorf("50 refused 1 MB node ids wrote %d bytes of log", nodeBytes)
	}

	s, err := adsclient.Open(context.Background(), fs.cc, sidecarNode(1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_ = s.Request(tEndpoint.url(), "e0")
	resp, err := s.Recv(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	before := logBytes
	for i := 0; i < 1000; i++ {
		_ = s.Nack(resp, "", huge, "e0")
		fs.src.set(tEndpoint.url(), "e0")
		if resp, err = s.Recv(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// NACKs answering a response the server never sent are not rejections.
	for i := 0; i < 100; i++ {
		_ = s.Send(&discovery.DiscoveryRequest{TypeUrl: tEndpoint.url(), ResourceNames: []string{"e0"}, ResponseNonce: "no-such-nonce",
			ErrorDetail: statusOf("bogus")})
	}
	_ = s.Ack(resp, "e0")
	mu.Lock()
	nackBytes := logBytes - before
	mu.Unlock()
	t.Logf("1000 NACKs of 1 MB: %d bytes of log", nackBytes)
	if nackBytes > 20*1024 {
		t.Errorf("1000 NACKs with 1 MB details wrote %d bytes of log", nackBytes)
	}
	st := fs.srv.Debug().Statuses(xdsdebug.Everything, false)
	for _, c := range st {
		if ts := c.Types[tEndpoint.url()]; ts.NACKs != 0 && ts.NACKs != 1000 {
			t.Errorf("NACKs counted: %d, want 1000", ts.NACKs)
		}
		if ts := c.Types[tEndpoint.url()]; len(ts.LastError) > 2*maxClientText {
			t.Errorf("the last error keeps %d bytes", len(ts.LastError))
		}
	}
}

// TestClosedStreamsLeaveNoIndexBehind: streams of both protocols that held resources (and, for
// delta, declared versions of their own on connecting) leave the server's name, version and
// subscriber tables empty once they are gone, and their slots free for the next streams.
func TestClosedStreamsLeaveNoIndexBehind(t *testing.T) {
	fs := startFake(t)
	var names []string
	for i := 0; i < 20; i++ {
		names = append(names, fmt.Sprintf("e%d", i))
		fs.src.set(tEndpoint.url(), names[i])
	}
	for round := 0; round < 2; round++ {
		var sotw []*adsclient.Stream
		var delta []*adsclient.DeltaStream
		for i := 0; i < 10; i++ {
			s, err := adsclient.Open(context.Background(), fs.cc, sidecarNode(i))
			if err != nil {
				t.Fatal(err)
			}
			sotw = append(sotw, s)
			if err := s.Request(tEndpoint.url(), names[i:i+10]...); err != nil {
				t.Fatal(err)
			}
			d, err := adsclient.OpenDelta(context.Background(), fs.cc, sidecarNode(100+i))
			if err != nil {
				t.Fatal(err)
			}
			delta = append(delta, d)
			initial := map[string]string{names[i]: "1f", "unknown-" + names[i]: "2e"}
			if err := d.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: tEndpoint.url(), ResourceNamesSubscribe: names[i : i+10],
				InitialResourceVersions: initial}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range sotw {
			r, err := sotw[i].Recv(10 * time.Second)
			if err != nil || len(r.Resources) != 10 {
				t.Fatalf("stream %d: %d resources, %v", i, len(r.GetResources()), err)
			}
			if err := sotw[i].Ack(r, names[i:i+10]...); err != nil {
				t.Fatal(err)
			}
			dr, err := delta[i].Recv(10 * time.Second)
			if err != nil || len(dr.Resources) != 10 {
				t.Fatalf("delta stream %d: %d resources, %v", i, len(dr.GetResources()), err)
			}
		}
		x := fs.srv.index
		x.mu.RLock()
		streams := len(x.slots) - len(x.free)
		x.mu.RUnlock()
		if held := fs.srv.versions.size(); streams != 20 || held == 0 {
			t.Fatalf("round %d: %d streams in slots, %d versions held", round, streams, held)
		}
		for i := range sotw {
			sotw[i].Close()
			delta[i].Close()
		}
		waitStreams(t, fs, 0)
		x.mu.RLock()
		for ty, sets := range x.subscribers {
			for id, set := range sets {
				if len(set) != 0 {
					t.Errorf("round %d: type %d name %d still has subscribers %v", round, ty, id, set)
				}
			}
		}
		if len(x.free) != len(x.slots) || len(x.slots) > 21 {
			t.Errorf("round %d: %d slots, %d free", round, len(x.slots), len(x.free))
		}
		x.mu.RUnlock()
		if n, v := fs.srv.Subscriptions(), fs.srv.versions.size(); n != 0 || v != 0 {
			t.Errorf("round %d: %d names and %d versions still interned", round, n, v)
		}
	}
}

// TestManyClientsGetBoundedLogs: five hundred streams refused, and five hundred connecting and
// leaving, write a few dozen lines, not one each: the lines are limited across streams, each
// saying how many it stands for.
func TestManyClientsGetBoundedLogs(t *testing.T) {
	var mu sync.Mutex
	var logBytes, logLines int
	core := countingCore{LevelEnabler: zapcore.DebugLevel, mu: &mu, bytes: &logBytes, lines: &logLines,
		enc: zapcore.NewConsoleEncoder(zap.NewProductionEncoderConfig())}
	fs := startFake(t, func(o *Options) { o.Log = zap.New(core) })
	fs.src.set(tEndpoint.url(), "e0")
	start := time.Now()
	for i := 0; i < 500; i++ {
		bad, err := adsclient.Open(context.Background(), fs.cc, adsclient.Node{ID: fmt.Sprintf("not-a-node-id-%d", i), Namespace: "ns1"})
		if err != nil {
			t.Fatal(err)
		}
		_ = bad.Request(tEndpoint.url(), "e0")
		if _, err := bad.Recv(10 * time.Second); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("a malformed node id: %v", err)
		}
		bad.Close()
		good, err := adsclient.Open(context.Background(), fs.cc, sidecarNode(i))
		if err != nil {
			t.Fatal(err)
		}
		_ = good.Request(tEndpoint.url(), "e0")
		if _, err := good.Recv(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		good.Close()
	}
	waitStreams(t, fs, 0)
	elapsed := time.Since(start)
	mu.Lock()
	lines := logLines
	mu.Unlock()
	// Three kinds of line (refused, connected, disconnected), each 20 at once then one a second.
	limit := 3 * (20 + int(elapsed.Seconds()) + 1)
	t.Logf("1 500 stream events in %v: %d log lines (limit %d)", elapsed.Round(time.Millisecond), lines, limit)
	if lines > limit {
		t.Fatalf("1 500 stream events wrote %d log lines in %v, want at most %d", lines, elapsed, limit)
	}
}
