package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/krteds/krteds/outputs/xds/adsclient"
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
	// Resources counts the resources received, all proxies together.
	Resources atomic.Int64
	// Refused counts the streams the server refused (RESOURCE_EXHAUSTED) or broke, by code.
	refused sync.Map // codes.Code → *atomic.Int64

	mu       sync.Mutex
	cond     *sync.Cond
	complete int
	watch    atomic.Pointer[herdWatch]
	cancel   context.CancelFunc
	ctx      context.Context
}

type herdProxy struct {
	h    *Herd
	p    int
	node adsclient.Node
	cc   *grpc.ClientConn
	// subs are the clusters it asks for: Clusters[start], Clusters[start+1], … (wrapping).
	start int
	subs  []string

	mu   sync.Mutex
	held []uint64 // by position in subs
	n    int      // clusters held
	// completeAt is when the proxy first held every cluster (zero before).
	completeAt time.Time
}

// herdWatch follows one cluster's change to the proxies that were complete when it changed:
// each has it once it holds the version the server computed for the change (want).
type herdWatch struct {
	idx     int
	want    atomic.Uint64
	tracked []bool
	arrived []atomic.Int64 // unix ns, 0 until
	pending atomic.Int64
	done    chan struct{}
}

// countingCodec is a client codec that counts the bytes of the responses received, decoding
// delta responses without their bodies.
type countingCodec struct {
	versionsCodec
	n *atomic.Int64
}

func (c countingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c.n.Add(int64(data.Len()))
	return c.versionsCodec.Unmarshal(data, v)
}

// Marshal sends a pre-encoded request as it is.
func (c countingCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*encodedRequest); ok {
		return mem.BufferSlice{mem.SliceBuffer(r.b)}, nil
	}
	return c.versionsCodec.Marshal(v)
}

// encodedRequest is a DiscoveryRequest encoded by the proxy itself: a state-of-the-world proxy
// repeats its whole list of names with every ACK, and encodes it once.
type encodedRequest struct{ b []byte }

// Field numbers of envoy.service.discovery.v3.DiscoveryRequest.
const (
	reqVersion = 1
	reqNode    = 2
	reqNames   = 3
	reqTypeURL = 4
	reqNonce   = 5
)

// sotwRequest encodes a request of the CLAs of names (encoded: the names' fields), answering a
// response (version, nonce), with the node on the first request.
func sotwRequest(node *core.Node, names []byte, version, nonce string) (*encodedRequest, error) {
	b := make([]byte, 0, len(names)+256)
	if node != nil {
		nb, err := proto.Marshal(node)
		if err != nil {
			return nil, err
		}
		b = protowire.AppendTag(b, reqNode, protowire.BytesType)
		b = protowire.AppendBytes(b, nb)
	}
	for _, f := range []struct {
		num protowire.Number
		v   string
	}{{reqVersion, version}, {reqTypeURL, adsclient.TypeCLA}, {reqNonce, nonce}} {
		if f.v != "" {
			b = protowire.AppendTag(b, f.num, protowire.BytesType)
			b = protowire.AppendString(b, f.v)
		}
	}
	return &encodedRequest{b: append(b, names...)}, nil
}

// NewHerd makes n proxies of the mesh of size s, each asking for per of its clusters (0: all): a
// window of them, the proxies' windows spread over the mesh as Size.Subscriptions spreads them.
func NewHerd(s Size, n, per int, delta bool) *Herd {
	h := &Herd{Delta: delta}
	h.cond = sync.NewCond(&h.mu)
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

// pos is the position of cluster idx in the proxy's subscriptions (-1: not one of them).
func (p *herdProxy) pos(idx int) int {
	k := (idx - p.start + len(p.h.Clusters)) % len(p.h.Clusters)
	if k >= len(p.subs) {
		return -1
	}
	return k
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

// hashVersion is a state-of-the-world proxy's version of a CLA it received: the hash of its body
// krteds versions resources by.
func hashVersion(body []byte) uint64 { return xxhash.Sum64(body) }

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
func (h *Herd) Complete() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.complete
}

// WaitComplete blocks until n proxies hold every cluster, or the timeout passes.
func (h *Herd) WaitComplete(n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	t := time.AfterFunc(timeout, func() { h.mu.Lock(); h.cond.Broadcast(); h.mu.Unlock() })
	defer t.Stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.complete < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d proxies hold every cluster after %v", h.complete, n, timeout)
		}
		h.cond.Wait()
	}
	return nil
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

// Watch starts following a change of cluster idx to every proxy complete now that asks for it;
// Want then says which version the change made, and done is closed once each holds it.
func (h *Herd) Watch(idx int) *herdWatch {
	w := &herdWatch{idx: idx, tracked: make([]bool, len(h.proxies)), arrived: make([]atomic.Int64, len(h.proxies)), done: make(chan struct{})}
	for i, p := range h.proxies {
		if p.pos(idx) < 0 {
			continue
		}
		p.mu.Lock()
		if !p.completeAt.IsZero() {
			w.tracked[i] = true
			w.pending.Add(1)
		}
		p.mu.Unlock()
	}
	if w.pending.Load() == 0 {
		close(w.done)
	}
	h.watch.Store(w)
	return w
}

// Want sets the version the change made; the proxies that hold it already have it now.
func (h *Herd) Want(w *herdWatch, version uint64) {
	w.want.Store(version)
	for i, p := range h.proxies {
		if !w.tracked[i] {
			continue
		}
		p.mu.Lock()
		v := p.held[p.pos(w.idx)]
		p.mu.Unlock()
		if v == version {
			w.arrive(i)
		}
	}
}

// arrive records that proxy i holds the change (once).
func (w *herdWatch) arrive(i int) {
	if w.arrived[i].CompareAndSwap(0, time.Now().UnixNano()) && w.pending.Add(-1) == 0 {
		close(w.done)
	}
}

// Tracked is the number of proxies a watch follows.
func (w *herdWatch) Tracked() int {
	n := 0
	for _, t := range w.tracked {
		if t {
			n++
		}
	}
	return n
}

// Latency is when the last tracked proxy received the change, after at.
func (w *herdWatch) Latency(at time.Time) time.Duration {
	var last int64
	for i := range w.arrived {
		if a := w.arrived[i].Load(); w.tracked[i] && a > last {
			last = a
		}
	}
	return time.Unix(0, last).Sub(at)
}

// Missing lists the tracked proxies that do not hold the change.
func (w *herdWatch) Missing() []int {
	var out []int
	for i := range w.arrived {
		if w.tracked[i] && w.arrived[i].Load() == 0 {
			out = append(out, i)
		}
	}
	return out
}

// run keeps the proxy connected until the herd closes.
func (p *herdProxy) run() {
	backoff := 500 * time.Millisecond
	for p.h.ctx.Err() == nil {
		got, err := p.stream()
		if p.h.ctx.Err() != nil {
			return
		}
		code := status.Code(err)
		v, _ := p.h.refused.LoadOrStore(code, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		p.h.Retries.Add(1)
		if got {
			backoff = 500 * time.Millisecond // it was served: the next failure is a new one
		}
		wait := backoff/2 + time.Duration(rand.Int64N(int64(backoff)))
		select {
		case <-p.h.ctx.Done():
			return
		case <-time.After(wait):
		}
		backoff = min(2*backoff, 8*time.Second)
	}
}

// stream runs one stream until it breaks; got says whether anything was received on it.
func (p *herdProxy) stream() (got bool, err error) {
	ctx, cancel := context.WithCancel(p.h.ctx)
	defer cancel()
	if p.h.Delta {
		s, err := adsclient.OpenDelta(ctx, p.cc, p.node)
		if err != nil {
			return false, err
		}
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: adsclient.TypeCLA, ResourceNamesSubscribe: p.subs}
		p.mu.Lock()
		if p.n > 0 {
			req.InitialResourceVersions = make(map[string]string, p.n)
			for k, v := range p.held {
				if v != 0 {
					req.InitialResourceVersions[p.subs[k]] = strconv.FormatUint(v, 16)
				}
			}
		}
		p.mu.Unlock()
		if err := s.Send(req); err != nil {
			return false, err
		}
		for {
			resp, err := s.Recv(time.Hour)
			if err != nil {
				return got, err
			}
			got = true
			p.h.Resources.Add(int64(len(resp.Resources)))
			for _, r := range resp.Resources {
				v, _ := strconv.ParseUint(r.Version, 16, 64)
				p.hold(r.Name, v)
			}
			for _, name := range resp.RemovedResources {
				p.hold(name, 0)
			}
			if err := s.Ack(resp); err != nil {
				return got, err
			}
		}
	}
	s, err := discovery.NewAggregatedDiscoveryServiceClient(p.cc).StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	var names []byte
	for _, n := range p.subs {
		names = protowire.AppendTag(names, reqNames, protowire.BytesType)
		names = protowire.AppendString(names, n)
	}
	req, err := sotwRequest(p.node.Proto(), names, "", "")
	if err != nil {
		return false, err
	}
	if err := s.SendMsg(req); err != nil {
		return false, err
	}
	for {
		resp, err := s.Recv()
		if err != nil {
			return got, err
		}
		got = true
		for _, a := range resp.Resources {
			p.hold(claName(a.Value), hashVersion(a.Value))
		}
		ack, err := sotwRequest(nil, names, resp.VersionInfo, resp.Nonce)
		if err != nil {
			return got, err
		}
		if err := s.SendMsg(ack); err != nil {
			return got, err
		}
	}
}

// hold records the version the proxy holds of a cluster (0: none).
func (p *herdProxy) hold(name string, v uint64) {
	idx, ok := p.h.index[name]
	if !ok {
		return
	}
	k := p.pos(idx)
	if k < 0 {
		return
	}
	p.mu.Lock()
	was := p.held[k]
	p.held[k] = v
	switch {
	case was == 0 && v != 0:
		p.n++
	case was != 0 && v == 0:
		p.n--
	}
	becameComplete := p.n == len(p.held) && p.completeAt.IsZero()
	if becameComplete {
		p.completeAt = time.Now()
	}
	p.mu.Unlock()
	if w := p.h.watch.Load(); w != nil && w.idx == idx && w.tracked[p.p] && v != 0 && v == w.want.Load() {
		w.arrive(p.p)
	}
	if becameComplete {
		p.h.mu.Lock()
		p.h.complete++
		p.h.cond.Broadcast()
		p.h.mu.Unlock()
	}
}
