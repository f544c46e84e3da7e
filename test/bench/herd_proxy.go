package bench

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/krteds/krteds/outputs/xds/adsclient"
)

// herdProxy is one proxy of a herd: it keeps its stream up as Envoy does (run), asks for its
// window of the clusters, and holds one version per cluster (hold).
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

// pos is the position of cluster idx in the proxy's subscriptions (-1: not one of them).
func (p *herdProxy) pos(idx int) int {
	k := (idx - p.start + len(p.h.Clusters)) % len(p.h.Clusters)
	if k >= len(p.subs) {
		return -1
	}
	return k
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

// hashVersion is a state-of-the-world proxy's version of a CLA it received: the hash of its body
// krteds versions resources by.
func hashVersion(body []byte) uint64 { return xxhash.Sum64(body) }

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
			p.h.Responses.Add(1)
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
		p.h.Responses.Add(1)
		p.h.Resources.Add(int64(len(resp.Resources)))
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
	if v != 0 && p.h.watching.Load() > 0 {
		if x, ok := p.h.watches.Load(idx); ok {
			if w := x.(*herdWatch); w.tracked[p.p] && v == w.want.Load() {
				w.arrive(p.p)
			}
		}
	}
	if becameComplete {
		p.h.complete.Add(1)
		p.h.completed.Wake()
	}
}
