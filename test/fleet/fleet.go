// Package fleet is the simulated proxies the benchmarks and the scale rig connect to krteds: real
// ADS clients over gRPC, delta or state of the world, that subscribe to CLAs and ACK every
// response, keep their stream up as Envoy does and move between the servers (replicas) they know
// when it breaks. What a proxy keeps of what it receives is its user's (a Holder): the fleet
// decodes each response once, with the resources' bodies or (delta) without, and hands it over.
package fleet

import (
	"context"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/krteds/krteds/outputs/xds/adsclient"
)

// Options shape a fleet.
type Options struct {
	// Addrs are the servers, one per replica: a proxy starts on its home one and, when its
	// stream breaks, connects to the next (to the same one when there is one), as a Service sends
	// a new connection to another ready endpoint. SetAddr moves a replica's address.
	Addrs []string
	// Bodies: delta responses are decoded with their resources' bodies. Without, a response is
	// decoded without them (a proxy that keeps only names and versions never reads them), and a
	// resource's body is nil. State-of-the-world responses carry their bodies always: a resource
	// is named and versioned only by its body.
	Bodies bool
	// Backoff is how a proxy waits before it opens a stream again; nil: a proxy whose stream
	// breaks stops (its holder is told).
	Backoff *Backoff
	// InTurn: each proxy opens its first stream once the proxy before has sent its subscription
	// (or failed to), the proxies connecting one after the other; else all at once.
	InTurn bool
}

// Backoff is how long a proxy waits after its stream broke.
type Backoff struct {
	Base, Max time.Duration
	// Envoy: as Envoy waits, half the backoff plus a random part of it, the backoff doubled after
	// each wait and back to Base once a stream was served (got a response). Else a random part
	// of it, back to Base once a stream opened (sent its subscription), doubled after one that
	// did not.
	Envoy bool
}

// EnvoyBackoff is Envoy's: 0.5 s doubled up to 8 s, with jitter.
var EnvoyBackoff = &Backoff{Base: 500 * time.Millisecond, Max: 8 * time.Second, Envoy: true}

// QuickBackoff is a short jittered pause (up to 50 ms) that grows up to 2 s while streams keep
// failing to open: a proxy moving to another replica, back on it at once.
var QuickBackoff = &Backoff{Base: 50 * time.Millisecond, Max: 2 * time.Second}

// next is the wait after a stream that opened (sent its subscription) and got a response or not;
// d is the proxy's backoff state.
func (b *Backoff) next(d *time.Duration, opened, got bool) time.Duration {
	if *d == 0 {
		*d = b.Base
	}
	if b.Envoy {
		if got {
			*d = b.Base // it was served: the next failure is a new one
		}
		wait := *d/2 + time.Duration(rand.Int64N(int64(*d)))
		*d = min(2**d, b.Max)
		return wait
	}
	if opened {
		*d = b.Base
	} else {
		*d = min(2**d, b.Max)
	}
	return time.Duration(rand.Int64N(int64(*d)))
}

// Fleet is the proxies, each with a connection to every server, and what they received all
// together.
type Fleet struct {
	opts    Options
	addrs   []atomic.Pointer[string]
	proxies []*Proxy
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	// Bytes, Responses and Resources count what the proxies received, all together; Retries the
	// streams they opened again after one broke.
	Bytes, Responses, Resources, Retries atomic.Int64
	// refused counts the streams the servers refused (RESOURCE_EXHAUSTED) or broke, by code.
	refused sync.Map // codes.Code → *atomic.Int64
}

// New makes a fleet of no proxies yet.
func New(opts Options) *Fleet {
	f := &Fleet{opts: opts, addrs: make([]atomic.Pointer[string], len(opts.Addrs))}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	for i, a := range opts.Addrs {
		f.SetAddr(i, a)
	}
	return f
}

// EnvoyWindow is Envoy's default HTTP/2 stream and connection receive window (256 MiB).
const EnvoyWindow = 256 << 20

// Spec is one proxy.
type Spec struct {
	Node adsclient.Node
	// Delta: the proxy speaks incremental ADS (as Istio's sidecars do by default); else state of
	// the world, where every ACK repeats the whole subscription.
	Delta bool
	// Subs are the CLAs it subscribes to.
	Subs []string
	// Home is the replica it starts on.
	Home   int
	Holder Holder
}

// Add makes a proxy, connected (lazily) to every server; Start starts it.
func (f *Fleet) Add(s Spec) (*Proxy, error) {
	p := &Proxy{f: f, i: len(f.proxies), spec: s, cur: s.Home, target: -1, last: -1, subs: s.Subs, turn: make(chan struct{}), ended: make(chan struct{})}
	p.node = s.Node.Proto()
	if !s.Delta {
		p.names = encodeNames(s.Subs)
	}
	for i := range f.addrs {
		cc, err := adsclient.Dial("passthrough:///replica-"+strconv.Itoa(i),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec{skipBodies: !f.opts.Bodies, n: &f.Bytes}), grpc.MaxCallRecvMsgSize(64<<20)),
			grpc.WithContextDialer(f.dialer(i)),
			// Envoy's HTTP/2 receive windows (Http2ProtocolOptions' defaults, which Istio's
			// bootstrap keeps for its ADS cluster), not grpc-go's 64 KiB grown by pings: a
			// megabyte's first answer is read as Envoy reads it.
			grpc.WithInitialWindowSize(EnvoyWindow), grpc.WithInitialConnWindowSize(EnvoyWindow),
			grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 5 * time.Second,
				Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second}}))
		if err != nil {
			p.close()
			return nil, err
		}
		p.conns = append(p.conns, cc)
	}
	f.proxies = append(f.proxies, p)
	return p, nil
}

// Start starts every proxy added.
func (f *Fleet) Start() {
	for _, p := range f.proxies {
		f.wg.Add(1)
		go p.run()
	}
}

// Proxies are the proxies, in the order added.
func (f *Fleet) Proxies() []*Proxy { return f.proxies }

// SetAddr moves replica i to another address: each proxy connects there when its stream breaks.
func (f *Fleet) SetAddr(i int, addr string) { f.addrs[i].Store(&addr) }

// dialer connects to replica i's current address.
func (f *Fleet) dialer(i int) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", *f.addrs[i].Load())
	}
}

// Close ends every stream and waits for the proxies to stop.
func (f *Fleet) Close() {
	f.cancel()
	f.wg.Wait()
	for _, p := range f.proxies {
		p.close()
	}
}

// Refused is the number of streams ended with a code.
func (f *Fleet) Refused(c codes.Code) int64 {
	if v, ok := f.refused.Load(c); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// broke counts a stream's end.
func (f *Fleet) broke(err error) {
	v, _ := f.refused.LoadOrStore(status.Code(err), new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}
