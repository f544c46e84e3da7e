package scale

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
)

// fleet is the ADS clients, half delta and half state of the world, each subscribed to every
// service's cluster (a default mesh has no Sidecar scoping). Each knows every replica's address:
// it starts on its home replica and, when its stream breaks, moves to the next one, as a Service
// would send a new connection to another ready endpoint.
type fleet struct {
	r       *rig
	svcs    []string
	names   []string // the clusters, in svcs order
	svcOf   map[string]string
	clients []*client
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// client is one proxy of the fleet.
type client struct {
	f     *fleet
	i     int
	delta bool
	home  int
	node  adsclient.Node
	track *tracked
	conns []*grpc.ClientConn // per replica

	mu      sync.Mutex
	cur     int
	target  int // the replica to move to on the next break (-1: the next one)
	cancel  context.CancelFunc
	errs    []error
	version string // SotW: the version of the last response
	// responses counts the responses received (the run goroutine's own): one in checkEvery
	// has its first CLA decoded in full as well.
	responses int
}

// checkEvery is how often a client decodes a response's first CLA in full too: every response
// was 65 % of the rig's CPU in a medium rollout (a delta response there is one 500-endpoint CLA).
const checkEvery = 100

// checking reports whether this response's first CLA is decoded in full too.
func (c *client) checking() bool {
	c.responses++
	return c.responses%checkEvery == 1
}

func (r *rig) startFleet() *fleet {
	r.t.Helper()
	f := &fleet{r: r, svcOf: map[string]string{}}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.svcs = r.truth.services()
	for _, s := range f.svcs {
		f.names = append(f.names, clusterName(s))
		f.svcOf[clusterName(s)] = s
	}
	for i := 0; i < r.sz.proxies; i++ {
		region, zone := r.sz.zoneOf(i)
		c := &client{f: f, i: i, delta: i%2 == 0, home: i % len(r.replicas), target: -1,
			node: adsclient.Node{ID: fmt.Sprintf("sidecar~10.200.%d.%d~proxy-%d.%s~%s.svc.cluster.local", i/250, i%250, i, namespace, namespace),
				Namespace: namespace, Locality: &core.Locality{Region: region, Zone: zone}, IstioVersion: "1.28.0"},
			track: r.truth.track(i)}
		c.cur = c.home
		for _, rep := range r.replicas {
			cc, err := adsclient.Dial(rep.xds, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
			if err != nil {
				r.t.Fatal(err)
			}
			c.conns = append(c.conns, cc)
		}
		f.clients = append(f.clients, c)
	}
	for _, c := range f.clients {
		f.wg.Add(1)
		go c.run()
	}
	r.t.Cleanup(f.stop)
	return f
}

func (f *fleet) stop() {
	f.cancel()
	f.wg.Wait()
	for _, c := range f.clients {
		for _, cc := range c.conns {
			_ = cc.Close()
		}
	}
}

// run keeps the client's stream up: on a break it moves to the next replica (or where the rig
// told it to), after a short jittered pause that grows while streams keep failing to open.
func (c *client) run() {
	defer c.f.wg.Done()
	pause := 50 * time.Millisecond
	first := true
	for c.f.ctx.Err() == nil {
		opened, err := c.stream(first)
		first = false
		if c.f.ctx.Err() != nil {
			return
		}
		now := time.Now()
		c.mu.Lock()
		from := c.cur
		planned := c.target >= 0
		if planned {
			c.cur, c.target = c.target, -1
		} else {
			c.cur = (c.cur + 1) % len(c.conns)
		}
		to := c.cur
		reason := ""
		if err != nil {
			reason = err.Error()
		}
		// Under the client's lock: once rebalance sees the move taken, the truth knows of it.
		c.f.r.truth.broke(c.track, from, to, !opened, planned, reason, now)
		c.mu.Unlock()
		if opened {
			pause = 50 * time.Millisecond
		} else {
			pause = min(2*pause, 2*time.Second)
		}
		select {
		case <-time.After(time.Duration(rand.Int64N(int64(pause)))):
		case <-c.f.ctx.Done():
			return
		}
	}
}

// moveTo makes the client move to replica i now (rebalancing, as a new connection would land).
func (c *client) moveTo(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == i {
		return
	}
	c.target = i
	if c.cancel != nil {
		c.cancel()
	}
}

func (c *client) replica() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// stream runs one stream on the current replica until it breaks; opened is whether it got as
// far as sending its subscription.
func (c *client) stream(first bool) (opened bool, err error) {
	ctx, cancel := context.WithCancel(c.f.ctx)
	defer cancel()
	c.mu.Lock()
	rep := c.cur
	c.cancel = cancel
	if c.target >= 0 {
		// Moved while it was between streams.
		c.mu.Unlock()
		return false, errors.New("moved")
	}
	c.mu.Unlock()
	cc := c.conns[rep]
	cc.ResetConnectBackoff()
	if c.delta {
		return c.runDelta(ctx, cc, first)
	}
	return c.runSotW(ctx, cc, first)
}

func (c *client) resumed(held map[string]string) {
	c.f.r.truth.resumed(c.track, held, time.Now())
}

func (c *client) runDelta(ctx context.Context, cc *grpc.ClientConn, first bool) (bool, error) {
	ds, err := adsclient.OpenDelta(ctx, cc, c.node)
	if err != nil {
		return false, err
	}
	defer ds.Close()
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: adsclient.TypeCLA, ResourceNamesSubscribe: c.f.names}
	var held map[string]string
	if !first {
		// As Envoy does: the versions it holds go with the first request of the new stream.
		held = c.f.r.truth.heldVersions(c.track)
		req.InitialResourceVersions = make(map[string]string, len(held))
		for svc, v := range held {
			req.InitialResourceVersions[clusterName(svc)] = v
		}
	}
	if err := ds.Send(req); err != nil {
		return false, err
	}
	c.resumed(held)
	for {
		resp, err := ds.Recv(time.Hour)
		if err != nil {
			return true, err
		}
		now := time.Now()
		check := c.checking()
		for k, res := range resp.Resources {
			svc, ok := c.f.svcOf[res.Name]
			if !ok {
				continue
			}
			_, set, err := decodeCLA(res.Resource.GetValue())
			if err == nil && k == 0 && check {
				err = c.checkDecode(res.Resource.GetValue(), set)
			}
			if err != nil {
				c.fail(fmt.Errorf("decoding %s: %w", res.Name, err))
				continue
			}
			c.f.r.truth.received(c.track, svc, res.Version, set, now)
		}
		for _, name := range resp.RemovedResources {
			if svc, ok := c.f.svcOf[name]; ok {
				c.f.r.truth.received(c.track, svc, "", nil, now)
			}
		}
		if err := ds.Ack(resp); err != nil {
			return true, err
		}
	}
}

func (c *client) runSotW(ctx context.Context, cc *grpc.ClientConn, first bool) (bool, error) {
	st, err := adsclient.Open(ctx, cc, c.node)
	if err != nil {
		return false, err
	}
	defer st.Close()
	c.mu.Lock()
	version := c.version
	c.mu.Unlock()
	// As Envoy does: the version it last accepted, no nonce, every name.
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: adsclient.TypeCLA, VersionInfo: version, ResourceNames: c.f.names}); err != nil {
		return false, err
	}
	c.resumed(nil)
	for {
		resp, err := st.Recv(time.Hour)
		if err != nil {
			return true, err
		}
		now := time.Now()
		check := c.checking()
		for k, a := range resp.Resources {
			name, set, err := decodeCLA(a.Value)
			if err == nil && k == 0 && check {
				err = c.checkDecode(a.Value, set)
			}
			if err != nil {
				c.fail(fmt.Errorf("decoding a ClusterLoadAssignment: %w", err))
				continue
			}
			svc, ok := c.f.svcOf[name]
			if !ok {
				continue
			}
			c.f.r.truth.received(c.track, svc, strconv.FormatUint(xxhash.Sum64(a.Value), 16), set, now)
		}
		c.mu.Lock()
		c.version = resp.VersionInfo
		c.mu.Unlock()
		if err := st.Ack(resp, c.f.names...); err != nil {
			return true, err
		}
	}
}

func (c *client) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, err)
}

// checkDecode decodes a CLA in full, as a client's xDS library would, and checks that the lean
// decoder read the same healthy addresses from it: the fleet does so for the first CLA of one
// response in checkEvery (the first of each client among them), so malformed responses still
// fail the run.
func (c *client) checkDecode(b []byte, set []uint32) error {
	cla := &endpoint.ClusterLoadAssignment{}
	if err := proto.Unmarshal(b, cla); err != nil {
		return err
	}
	if full := healthyOf(cla); !slices.Equal(full, set) {
		return fmt.Errorf("%s: the lean decoder read %d healthy endpoints, the full decode %d", cla.ClusterName, len(set), len(full))
	}
	return nil
}

// healthyOf is the addresses of a CLA's endpoints a client sends traffic to (HEALTHY, or
// UNKNOWN, which Envoy treats as healthy), sorted.
func healthyOf(cla *endpoint.ClusterLoadAssignment) []uint32 {
	var out []uint32
	for _, l := range cla.Endpoints {
		for _, e := range l.LbEndpoints {
			if h := e.HealthStatus; h != core.HealthStatus_HEALTHY && h != core.HealthStatus_UNKNOWN {
				continue
			}
			if ip, ok := ipv4(e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()); ok {
				out = append(out, ip)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// rebalance moves every client back to its home replica, and returns once every move has been
// taken (its break recorded), so that waiting for the clients to be back waits for these.
func (f *fleet) rebalance() {
	for _, c := range f.clients {
		c.moveTo(c.home)
	}
	fixtures.Polling("a client takes its move in its own goroutine, which signals nothing").
		Await(f.r.t, time.Minute, "every client to take its move home", func() (bool, string) {
			for _, c := range f.clients {
				c.mu.Lock()
				taken := c.target < 0
				c.mu.Unlock()
				if !taken {
					return false, fmt.Sprintf("client %d has not taken its move to krteds-%d", c.i, c.home)
				}
			}
			return true, ""
		})
}

// on is the clients on replica i now.
func (f *fleet) on(i int) []*client {
	var out []*client
	for _, c := range f.clients {
		if c.replica() == i {
			out = append(out, c)
		}
	}
	return out
}

// errors is every decoding error a client met.
func (f *fleet) errors() []error {
	var out []error
	for _, c := range f.clients {
		c.mu.Lock()
		out = append(out, c.errs...)
		c.mu.Unlock()
	}
	return out
}

// sameVersions checks that every client holds, for every service, the same version: replicas
// give identical versions for identical state, and delta and state-of-the-world clients alike
// (a version is a hash of the resource's bytes). It returns the services where they differ.
func (f *fleet) sameVersions() (differ []string, byReplica map[int]int) {
	tr := f.r.truth
	tr.mu.Lock()
	defer tr.mu.Unlock()
	byReplica = map[int]int{}
	for _, c := range f.clients {
		byReplica[c.replica()]++
	}
	for _, svc := range f.svcs {
		v := ""
		for _, c := range f.clients {
			h := c.track.held[svc]
			if h == nil {
				differ = append(differ, svc)
				break
			}
			if v == "" {
				v = h.version
			} else if h.version != v {
				differ = append(differ, svc)
				break
			}
		}
	}
	return differ, byReplica
}
