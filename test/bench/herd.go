package bench

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"

	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
)

// Herd is a fleet of ADS proxies that connect at once, each asking for the same clusters, and
// that behave as Envoy does when their stream breaks or is refused: they back off (0.5 s, doubled
// up to 8 s, with jitter) and connect again, a delta proxy telling the server the versions it
// holds (initial_resource_versions). Each proxy keeps, per cluster, only the version it holds
// (8 bytes): delta proxies decode responses without the CLA bodies, state-of-the-world ones read
// each body's name and hash it. Bytes counts what the proxies received, all together.
type Herd struct {
	Delta bool
	// Clusters are the mesh's clusters; each proxy asks for a window of them (all by default).
	Clusters []string
	index    map[string]int
	proxies  []*herdProxy
	addr     atomic.Pointer[string]
	Bytes    atomic.Int64
	Retries  atomic.Int64
	// Resources and Responses count the resources and the responses received, all proxies
	// together.
	Resources, Responses atomic.Int64
	// Refused counts the streams the server refused (RESOURCE_EXHAUSTED) or broke, by code.
	refused sync.Map // codes.Code → *atomic.Int64

	// complete counts the proxies that hold every cluster; completed wakes WaitComplete as it
	// grows.
	complete  atomic.Int64
	completed *fixtures.Waker
	// watches are the changes followed now, by cluster (one each; a new one replaces it).
	watches  sync.Map // int → *herdWatch
	watching atomic.Int64
	cancel   context.CancelFunc
	ctx      context.Context
}

// NewHerd makes n proxies of the mesh of size s, each asking for per of its clusters (0: all): a
// window of them, the proxies' windows spread over the mesh as Size.Subscriptions spreads them.
func NewHerd(s Size, n, per int, delta bool) *Herd {
	h := &Herd{Delta: delta, completed: fixtures.NewWaker()}
	for i := 0; i < s.Services; i++ {
		h.Clusters = append(h.Clusters, ClusterName(i))
	}
	h.index = make(map[string]int, len(h.Clusters))
	for i, c := range h.Clusters {
		h.index[c] = i
	}
	if per <= 0 || per > len(h.Clusters) {
		per = len(h.Clusters)
	}
	f := &Fleet{}
	for p := 0; p < n; p++ {
		hp := &herdProxy{h: h, p: p, start: p * per % len(h.Clusters), held: make([]uint64, per),
			node: adsclient.Node{ID: f.NodeID(p), Namespace: meshNamespace, Locality: s.ProxyLocality(p)}}
		for k := 0; k < per; k++ {
			hp.subs = append(hp.subs, h.Clusters[(hp.start+k)%len(h.Clusters)])
		}
		h.proxies = append(h.proxies, hp)
	}
	return h
}

// Start connects every proxy to addr at once.
func (h *Herd) Start(addr string) error {
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.SetAddr(addr)
	for _, p := range h.proxies {
		cc, err := adsclient.Dial("passthrough:///herd", grpc.WithDefaultCallOptions(grpc.ForceCodecV2(countingCodec{n: &h.Bytes}), grpc.MaxCallRecvMsgSize(64<<20)),
			grpc.WithContextDialer(h.dialer),
			grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 5 * time.Second,
				Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second}}))
		if err != nil {
			h.Close()
			return err
		}
		p.cc = cc
	}
	for _, p := range h.proxies {
		go p.run()
	}
	return nil
}

// SetAddr moves the proxies to another server: each connects there when its stream breaks.
func (h *Herd) SetAddr(addr string) { h.addr.Store(&addr) }

// dialer connects to the herd's current server.
func (h *Herd) dialer(ctx context.Context, _ string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", *h.addr.Load())
}

// Close ends every stream.
func (h *Herd) Close() {
	if h.cancel != nil {
		h.cancel()
	}
	for _, p := range h.proxies {
		if p.cc != nil {
			_ = p.cc.Close()
		}
	}
}

// Complete is the number of proxies that hold every cluster.
func (h *Herd) Complete() int { return int(h.complete.Load()) }

// WaitComplete blocks until n proxies hold every cluster, or the timeout passes.
func (h *Herd) WaitComplete(n int, timeout time.Duration) error {
	return h.completed.Wait(timeout, fmt.Sprintf("%d proxies holding every cluster", n), func() (bool, string) {
		c := h.Complete()
		return c >= n, fmt.Sprintf("%d hold every cluster", c)
	})
}

// LastComplete is when the last proxy became complete.
func (h *Herd) LastComplete() time.Time {
	var last time.Time
	for _, p := range h.proxies {
		p.mu.Lock()
		if p.completeAt.After(last) {
			last = p.completeAt
		}
		p.mu.Unlock()
	}
	return last
}

// Refused is the number of streams ended with a code.
func (h *Herd) Refused(c codes.Code) int64 {
	if v, ok := h.refused.Load(c); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}
