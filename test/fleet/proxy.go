package fleet

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/krteds/krteds/outputs/xds/adsclient"
)

// Holder is what a proxy keeps of what it receives, its user's own. The fleet calls it from the
// proxy's goroutine, one call at a time.
type Holder interface {
	// Held is the versions the proxy holds, by name: a delta proxy says them with the first
	// request of a stream (initial_resource_versions), as Envoy does. nil: none.
	Held() map[string]string
	// Opened: a stream's subscription was sent, saying it held held.
	Opened(held map[string]string)
	// Received is one response, before its ACK; r is the fleet's, not to be kept.
	Received(r *Response)
	// Broke: a stream ended. It is called under the lock Moving reads: once a move is taken,
	// the holder knows of it.
	Broke(b Break)
}

// Break is a stream's end, and where the proxy goes next.
type Break struct {
	// From and To are the replicas it was on and goes to.
	From, To int
	// Opened: the stream got as far as sending its subscription. Planned: MoveTo moved it.
	Opened, Planned bool
	Err             error
	At              time.Time
}

// Response is one response a proxy received.
type Response struct {
	At    time.Time
	delta *discovery.DeltaDiscoveryResponse
	sotw  *sotwResponse
}

// Len is the number of resources it carries.
func (r *Response) Len() int {
	if r.delta != nil {
		return len(r.delta.Resources)
	}
	return len(r.sotw.values)
}

// Resource is its k-th resource: its name, version and body (nil when the fleet skips bodies). A
// state-of-the-world response names and versions nothing: the name is the CLA's own, read from its
// body, and the version the hash of the body (hex), which krteds versions resources by.
func (r *Response) Resource(k int) (name, version string, body []byte) {
	if r.delta != nil {
		res := r.delta.Resources[k]
		return res.Name, res.Version, res.Resource.GetValue()
	}
	b := r.sotw.values[k]
	return CLAName(b), strconv.FormatUint(xxhash.Sum64(b), 16), b
}

// Removed is the names a delta response removes.
func (r *Response) Removed() []string {
	if r.delta != nil {
		return r.delta.RemovedResources
	}
	return nil
}

// Proxy is one proxy of a fleet.
type Proxy struct {
	f    *Fleet
	i    int
	spec Spec
	node *core.Node
	// conns are one per replica; last the replica of the last stream (-1: none yet).
	conns []*grpc.ClientConn
	last  int
	// turn is closed once the first stream sent its subscription, or failed (Options.InTurn).
	turn     chan struct{}
	turnOnce sync.Once
	// ended is closed when the proxy stops: its fleet closed, or, without a backoff, its stream
	// broke.
	ended chan struct{}
	// version is the version of the last state-of-the-world response; resp the response being
	// handed to the holder (the run goroutine's own).
	version string
	resp    Response

	mu     sync.Mutex
	cur    int
	target int // the replica to move to on the next break (-1: the next one)
	cancel context.CancelFunc

	// sendMu orders the sends on the stream: the ACKs, and Subscribe from another goroutine.
	sendMu sync.Mutex
	subs   []string
	names  []byte          // SotW: subs, encoded
	send   func(any) error // the open stream's (nil: none)
}

// Ended is closed once the proxy has stopped and opens no more streams.
func (p *Proxy) Ended() <-chan struct{} { return p.ended }

// Index is the proxy's position in its fleet.
func (p *Proxy) Index() int { return p.i }

// Home is the replica the proxy started on.
func (p *Proxy) Home() int { return p.spec.Home }

// Delta says whether the proxy speaks delta ADS.
func (p *Proxy) Delta() bool { return p.spec.Delta }

// Replica is the replica the proxy is on (or moves to next).
func (p *Proxy) Replica() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}

// MoveTo makes the proxy move to replica i now (rebalancing, as a new connection would land).
func (p *Proxy) MoveTo(i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == i {
		return
	}
	p.target = i
	if p.cancel != nil {
		p.cancel()
	}
}

// Moving reports whether a MoveTo is not taken yet.
func (p *Proxy) Moving() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target >= 0
}

// Subscribe adds names to the proxy's subscription: a delta proxy subscribes to them, a
// state-of-the-world one asks again for its whole list.
func (p *Proxy) Subscribe(names ...string) error {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	p.subs = append(p.subs, names...)
	var req any = &discovery.DeltaDiscoveryRequest{TypeUrl: adsclient.TypeCLA, ResourceNamesSubscribe: names}
	if !p.spec.Delta {
		p.names = encodeNames(p.subs)
		req = sotwRequest(nil, p.names, adsclient.TypeCLA, "", "")
	}
	if p.send == nil {
		return nil // the next stream asks for them
	}
	return p.send(req)
}

func (p *Proxy) close() {
	for _, cc := range p.conns {
		_ = cc.Close()
	}
}

var errMoved = errors.New("moved")

// run keeps the proxy connected until the fleet closes: when its stream breaks it moves to the
// next replica (or where MoveTo said) and, after its backoff, opens another.
func (p *Proxy) run() {
	f := p.f
	defer f.wg.Done()
	defer close(p.ended)
	defer p.turnOnce.Do(func() { close(p.turn) })
	if f.opts.InTurn && p.i > 0 {
		select {
		case <-f.proxies[p.i-1].turn:
		case <-f.ctx.Done():
			return
		}
	}
	var backoff time.Duration
	for f.ctx.Err() == nil {
		opened, got, err := p.stream()
		p.turnOnce.Do(func() { close(p.turn) })
		if f.ctx.Err() != nil {
			return
		}
		now := time.Now()
		f.broke(err)
		p.mu.Lock()
		from := p.cur
		planned := p.target >= 0
		if planned {
			p.cur, p.target = p.target, -1
		} else {
			p.cur = (p.cur + 1) % len(p.conns)
		}
		p.spec.Holder.Broke(Break{From: from, To: p.cur, Opened: opened, Planned: planned, Err: err, At: now})
		p.mu.Unlock()
		if f.opts.Backoff == nil {
			return
		}
		f.Retries.Add(1)
		select {
		case <-f.ctx.Done():
			return
		case <-time.After(f.opts.Backoff.next(&backoff, opened, got)):
		}
	}
}

// stream runs one stream on the current replica until it breaks; opened is whether it got as far
// as sending its subscription, got whether it received anything.
func (p *Proxy) stream() (opened, got bool, err error) {
	ctx, cancel := context.WithCancel(p.f.ctx)
	defer cancel()
	p.mu.Lock()
	rep := p.cur
	p.cancel = cancel
	if p.target >= 0 {
		// Moved while it was between streams.
		p.mu.Unlock()
		return false, false, errMoved
	}
	p.mu.Unlock()
	cc := p.conns[rep]
	if rep != p.last {
		cc.ResetConnectBackoff() // a replica restarted is reached at once
		p.last = rep
	}
	ads := discovery.NewAggregatedDiscoveryServiceClient(cc)
	defer func() {
		p.sendMu.Lock()
		p.send = nil
		p.sendMu.Unlock()
	}()
	if p.spec.Delta {
		s, err := ads.DeltaAggregatedResources(ctx)
		if err != nil {
			return false, false, err
		}
		return p.delta(s)
	}
	s, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		return false, false, err
	}
	return p.sotw(s)
}

// open sends a stream's first request (first(subs, names)) and makes the stream Subscribe's.
func (p *Proxy) open(s grpc.ClientStream, first func(subs []string, names []byte) any) error {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	if err := s.SendMsg(first(p.subs, p.names)); err != nil {
		return err
	}
	p.send = s.SendMsg
	return nil
}

// ended is what a send's error says: a send fails with io.EOF when the server has ended the
// stream, and the stream's status is then what ended it.
func ended[T any](err error, recv func() (T, error)) error {
	if !errors.Is(err, io.EOF) {
		return err
	}
	for {
		if _, err := recv(); err != nil {
			return err
		}
	}
}

// exchange sends a stream's first request, saying the proxy holds held, then hands each
// response (recv's, wrapped) to the holder and ACKs it (ack(resp, names)), until the stream
// breaks; done, if not nil, is called with each response once it is ACKed.
func exchange[Resp any](p *Proxy, s grpc.ClientStream, recv func() (*Resp, error), first func(subs []string, names []byte) any, held map[string]string,
	wrap func(*Resp) Response, ack func(resp *Resp, names []byte) any, done func(*Resp),
) (opened, got bool, err error) {
	h := p.spec.Holder
	if err := p.open(s, first); err != nil {
		return false, false, ended(err, recv)
	}
	p.turnOnce.Do(func() { close(p.turn) })
	h.Opened(held)
	for {
		resp, err := recv()
		if err != nil {
			return true, got, err
		}
		got = true
		p.resp = wrap(resp)
		p.resp.At = time.Now()
		p.f.Responses.Add(1)
		p.f.Resources.Add(int64(p.resp.Len()))
		h.Received(&p.resp)
		p.resp = Response{}
		p.sendMu.Lock()
		err = s.SendMsg(ack(resp, p.names))
		p.sendMu.Unlock()
		if done != nil {
			done(resp)
		}
		if err != nil {
			return true, got, ended(err, recv)
		}
	}
}

func (p *Proxy) delta(s grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]) (opened, got bool, err error) {
	held := p.spec.Holder.Held()
	return exchange(p, s, s.Recv, func(subs []string, _ []byte) any {
		return &discovery.DeltaDiscoveryRequest{Node: p.node, TypeUrl: adsclient.TypeCLA, ResourceNamesSubscribe: subs, InitialResourceVersions: held}
	}, held, func(r *discovery.DeltaDiscoveryResponse) Response { return Response{delta: r} },
		func(r *discovery.DeltaDiscoveryResponse, _ []byte) any {
			return &discovery.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce}
		}, nil)
}

func (p *Proxy) sotw(s grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse]) (opened, got bool, err error) {
	node, err := proto.Marshal(p.node)
	if err != nil {
		return false, false, err
	}
	// Responses are read by the proxies' codec, their bodies left in place (sotwResponse).
	recv := func() (*sotwResponse, error) {
		r := &sotwResponse{}
		if err := s.RecvMsg(r); err != nil {
			r.release()
			return nil, err
		}
		return r, nil
	}
	// As Envoy does: the version it last accepted, no nonce, every name; each ACK repeats them.
	return exchange(p, s, recv, func(_ []string, names []byte) any {
		return sotwRequest(node, names, adsclient.TypeCLA, p.version, "")
	}, nil, func(r *sotwResponse) Response { return Response{sotw: r} },
		func(r *sotwResponse, names []byte) any {
			p.version = r.version
			return sotwRequest(nil, names, r.typeURL, r.version, r.nonce)
		}, (*sotwResponse).release)
}
