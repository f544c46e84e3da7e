package bench

import (
	"math/bits"
	"net"
	"strconv"
	"sync"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
)

// The floor: the least a delta xDS server can do over grpc-go with the churn's deliveries, to
// tell what a response costs on this machine whatever the server (KRTEDS_HERD_FLOOR=1 serves
// the herd's proxies from it instead of krteds' xDS server; the graph, the changes and the
// proxies are the same). Per stream it keeps what changed since its last response and the nonce
// awaiting an ACK; a change marks the streams subscribed to the CLA and wakes each; a stream
// that holds no response in flight sends one with every CLA marked, each encoded once per change
// and shared. It has none of krteds' bounds, accounting, metrics or debugging: a stream is two
// goroutines (its reader and itself) over gRPC's two per connection, as in any grpc-go server.
// It serves CLAs only, to delta clients only.
type floorServer struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer

	mu sync.RWMutex
	// res is each CLA's encoded delta Resource (by name); subs the streams subscribed to it.
	res  map[string][]byte
	subs map[string][]*floorStream
	// first bounds first answers in flight (each released at its ACK), as krteds' send budget
	// does, so that the herd's megabytes are not all queued in gRPC at once.
	first chan struct{}
}

type floorStream struct {
	mu      sync.Mutex
	pending map[string]struct{}
	wake    chan struct{}
}

// serveFloor serves the CLAs of clas on l from a floorServer until the process ends.
func serveFloor(clas krt.Collection[collections.ResourceSet], l net.Listener) {
	f := &floorServer{res: map[string][]byte{}, subs: map[string][]*floorStream{}, first: make(chan struct{}, 64)}
	// Every CLA encoded before a proxy is served.
	clas.RegisterBatch(f.changed, true).WaitUntilSynced(nil)
	gs := grpc.NewServer(grpc.InitialWindowSize(1<<20), grpc.InitialConnWindowSize(1<<20), grpc.MaxConcurrentStreams(128),
		grpc.ForceServerCodecV2(floorCodec{}))
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, f)
	go func() { _ = gs.Serve(l) }()
}

// changed encodes each changed CLA once and marks it in every stream subscribed to it.
func (f *floorServer) changed(evs []krt.Event[collections.ResourceSet]) {
	for _, ev := range evs {
		set := ev.Latest()
		if ev.New == nil {
			continue
		}
		r := set.Shared
		for _, c := range set.ByClass {
			if r == nil {
				r = c // a CLA that depends on the proxy: the floor sends every proxy one of them
			}
		}
		if r == nil {
			// A CLA that depends on the proxy is computed for the classes of connected proxies,
			// and krteds' server has none here: the floor sends the cluster with no endpoints
			// (the churn changes no such cluster).
			body := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), set.Name)
			r = &collections.Resource{Name: set.Name, TypeURL: set.TypeURL, Version: 1, Body: body}
		}
		enc := encodeFloorResource(r)
		f.mu.Lock()
		f.res[set.Key] = enc
		streams := f.subs[set.Key]
		f.mu.Unlock()
		for _, st := range streams {
			st.mark(set.Key)
		}
	}
}

func (st *floorStream) mark(name string) {
	st.mu.Lock()
	st.pending[name] = struct{}{}
	st.mu.Unlock()
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// take empties the stream's pending names.
func (st *floorStream) take() map[string]struct{} {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.pending) == 0 {
		return nil
	}
	p := st.pending
	st.pending = make(map[string]struct{}, len(p))
	return p
}

// encodeFloorResource is a delta Resource: version (1), the CLA as an Any (2), name (3).
func encodeFloorResource(r *collections.Resource) []byte {
	var anyb []byte
	anyb = protowire.AppendTag(anyb, 1, protowire.BytesType)
	anyb = protowire.AppendString(anyb, r.TypeURL)
	anyb = protowire.AppendTag(anyb, 2, protowire.BytesType)
	anyb = protowire.AppendBytes(anyb, r.Body)
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, strconv.FormatUint(r.Version, 16))
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, anyb)
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	return protowire.AppendString(b, r.Name)
}

const floorCLAType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"

func (f *floorServer) DeltaAggregatedResources(s discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	st := &floorStream{pending: map[string]struct{}{}, wake: make(chan struct{}, 1)}
	var subscribed []string
	defer func() { f.unsubscribe(st, subscribed) }()
	reqs := make(chan *discovery.DeltaDiscoveryRequest)
	errc := make(chan error, 1)
	go func() {
		for {
			r, err := s.Recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case reqs <- r:
			case <-s.Context().Done():
				return
			}
		}
	}()
	var (
		inflight   string // the nonce awaiting its ACK
		holdsFirst bool
		n          uint64
	)
	defer func() {
		if holdsFirst { // a stream that ends before its first answer's ACK gives its place back
			<-f.first
		}
	}()
	for {
		select {
		case r := <-reqs:
			if r.TypeUrl != floorCLAType {
				return status.Errorf(codes.InvalidArgument, "the floor serves CLAs only, not %q", r.TypeUrl)
			}
			if r.ResponseNonce != "" && r.ResponseNonce == inflight {
				inflight = ""
				if holdsFirst {
					holdsFirst = false
					<-f.first
				}
			}
			if len(r.ResourceNamesSubscribe) > 0 {
				f.subscribe(st, r.ResourceNamesSubscribe)
				subscribed = append(subscribed, r.ResourceNamesSubscribe...)
			}
		case <-st.wake:
		case err := <-errc:
			return err
		case <-s.Context().Done():
			return nil
		}
		if inflight != "" {
			continue
		}
		names := st.take()
		if len(names) == 0 {
			continue
		}
		if n == 0 { // a first answer: a place among those in flight, until its ACK
			select {
			case f.first <- struct{}{}:
			case <-s.Context().Done():
				return nil
			}
			holdsFirst = true
		}
		n++
		inflight = strconv.FormatUint(n, 10)
		if err := s.SendMsg(f.response(names, inflight)); err != nil {
			return err
		}
	}
}

// response encodes a DeltaDiscoveryResponse of the named CLAs: resources (2), type (4), nonce (5),
// in a buffer of gRPC's pool that goes back to it once gRPC has written it.
func (f *floorServer) response(names map[string]struct{}, nonce string) *floorMessage {
	f.mu.RLock()
	defer f.mu.RUnlock()
	size := 2*protowire.SizeTag(4) + protowire.SizeBytes(len(floorCLAType)) + protowire.SizeBytes(len(nonce))
	for name := range names {
		if r := f.res[name]; r != nil {
			size += protowire.SizeTag(2) + protowire.SizeBytes(len(r))
		}
	}
	buf := floorBuffers.Get(size)
	b := (*buf)[:0]
	for name := range names {
		if r := f.res[name]; r != nil {
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendBytes(b, r)
		}
	}
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendString(b, floorCLAType)
	b = protowire.AppendTag(b, 5, protowire.BytesType)
	*buf = protowire.AppendString(b, nonce)
	return &floorMessage{buf: mem.NewBuffer(buf, floorBuffers)}
}

// floorBuffers keeps written responses' buffers for the next, by power-of-two size class, and
// does not clear them (gRPC's pool does: 22 % of the floor's CPU with responses of 90 KB).
var floorBuffers = &floorPool{}

type floorPool struct{ classes [32]sync.Pool }

func (p *floorPool) Get(n int) *[]byte {
	c := bits.Len(uint(n))
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<c)
	return &b
}

func (p *floorPool) Put(b *[]byte) {
	if c := bits.Len(uint(cap(*b))) - 1; c >= 0 && cap(*b) == 1<<c {
		p.classes[c].Put(b)
	}
}

func (f *floorServer) subscribe(st *floorStream, names []string) {
	f.mu.Lock()
	for _, name := range names {
		f.subs[name] = append(f.subs[name], st)
	}
	f.mu.Unlock()
	f.mu.RLock()
	defer f.mu.RUnlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, name := range names {
		if f.res[name] != nil {
			st.pending[name] = struct{}{}
		}
	}
}

func (f *floorServer) unsubscribe(st *floorStream, names []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, name := range names {
		ss := f.subs[name]
		for i, x := range ss {
			if x == st {
				ss[i] = ss[len(ss)-1]
				f.subs[name] = ss[:len(ss)-1]
				break
			}
		}
	}
}

// floorMessage is a response as encoded: gRPC sends its buffer as it is, and frees it once written.
type floorMessage struct{ buf mem.Buffer }

type floorCodec struct{}

func (floorCodec) Name() string { return "proto" }

func (floorCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*floorMessage); ok {
		return mem.BufferSlice{m.buf}, nil
	}
	return encoding.GetCodecV2("proto").Marshal(v)
}

func (floorCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return encoding.GetCodecV2("proto").Unmarshal(data, v)
}
