package scale

import (
	"fmt"
	"slices"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/fleet"
	"github.com/krteds/krteds/test/scale/rig"
)

// clients are the rig's ADS clients (test/fleet), half delta and half state of the world, each
// subscribed to every service's cluster (a default mesh has no Sidecar scoping), decoding every
// CLA's healthy endpoints. Each knows every replica's address: it starts on its home replica and,
// when its stream breaks, moves to the next one, as a Service would send a new connection to
// another ready endpoint. What each holds is the judge's (truth).
type clients struct {
	r       *judged
	fl      *fleet.Fleet
	svcs    []string
	names   []string // the clusters, in svcs order
	svcOf   map[string]string
	clients []*client
}

// client is one proxy's holder: it records what it receives in the truth.
type client struct {
	c     *clients
	p     *fleet.Proxy
	i     int
	track *tracked
	// responses counts the responses received (the proxy goroutine's own): one in checkEvery
	// has its first CLA decoded in full as well; errs are the decoding errors (under track's
	// truth's lock: they are few).
	responses int
	errs      []error
	// held is what a delta client said it held when its stream opened, by service (the proxy
	// goroutine's own, from Held to Opened).
	held map[string]string
}

// checkEvery is how often a client decodes a response's first CLA in full too: every response
// was 65 % of the rig's CPU in a medium rollout (a delta response there is one 500-endpoint CLA).
const checkEvery = 100

func (r *judged) startFleet() *clients {
	r.T.Helper()
	addrs := make([]string, len(r.Replicas))
	for i, rep := range r.Replicas {
		addrs[i] = rep.XDS
	}
	f := &clients{r: r, svcOf: map[string]string{}, fl: fleet.New(fleet.Options{Addrs: addrs, Bodies: true, Backoff: fleet.QuickBackoff})}
	f.svcs = r.truth.services()
	for _, s := range f.svcs {
		f.names = append(f.names, rig.ClusterName(s))
		f.svcOf[rig.ClusterName(s)] = s
	}
	for i := 0; i < r.Size.Proxies; i++ {
		region, zone := r.Size.ZoneOf(i)
		c := &client{c: f, i: i, track: r.truth.track(i)}
		p, err := f.fl.Add(fleet.Spec{Delta: i%2 == 0, Home: i % len(r.Replicas), Subs: f.names, Holder: c,
			Node: adsclient.Node{ID: fmt.Sprintf("sidecar~10.200.%d.%d~proxy-%d.%s~%s.svc.cluster.local", i/250, i%250, i, rig.Namespace, rig.Namespace),
				Namespace: rig.Namespace, Locality: &core.Locality{Region: region, Zone: zone}, IstioVersion: "1.28.0"}})
		if err != nil {
			r.T.Fatal(err)
		}
		c.p = p
		f.clients = append(f.clients, c)
	}
	f.fl.Start()
	r.T.Cleanup(f.fl.Close)
	return f
}

// Held is the versions the client holds (a delta client says them when it resumes).
func (c *client) Held() map[string]string {
	c.held = c.c.r.truth.heldVersions(c.track)
	out := make(map[string]string, len(c.held))
	for svc, v := range c.held {
		out[rig.ClusterName(svc)] = v
	}
	return out
}

// Opened tells the truth the stream is open, with the versions a delta client said it held.
func (c *client) Opened(held map[string]string) {
	if held == nil {
		c.held = nil // a state-of-the-world client says none
	}
	c.c.r.truth.resumed(c.track, c.held, time.Now())
}

// Broke is called under the proxy's lock: once rebalance sees the move taken, the truth knows of
// it.
func (c *client) Broke(b fleet.Break) {
	reason := ""
	if b.Err != nil {
		reason = b.Err.Error()
	}
	c.c.r.truth.broke(c.track, b.From, b.To, !b.Opened, b.Planned, reason, b.At)
}

// Received decodes each CLA's healthy endpoints, and records them with its version.
func (c *client) Received(r *fleet.Response) {
	c.responses++
	check := c.responses%checkEvery == 1
	for k := range r.Len() {
		name, version, body := r.Resource(k)
		_, set, err := fleet.DecodeCLA(body)
		if err == nil && k == 0 && check {
			err = checkDecode(body, set)
		}
		if err != nil {
			c.fail(fmt.Errorf("decoding %s: %w", name, err))
			continue
		}
		if svc, ok := c.c.svcOf[name]; ok {
			c.c.r.truth.received(c.track, svc, version, set, r.At)
		}
	}
	for _, name := range r.Removed() {
		if svc, ok := c.c.svcOf[name]; ok {
			c.c.r.truth.received(c.track, svc, "", nil, r.At)
		}
	}
}

func (c *client) fail(err error) {
	tr := c.c.r.truth
	tr.mu.Lock()
	defer tr.mu.Unlock()
	c.errs = append(c.errs, err)
}

// checkDecode decodes a CLA in full, as a client's xDS library would, and checks that the lean
// decoder read the same healthy addresses from it: the clients do so for the first CLA of one
// response in checkEvery (the first of each client among them), so malformed responses still
// fail the run.
func checkDecode(b []byte, set []uint32) error {
	cla := &endpoint.ClusterLoadAssignment{}
	if err := proto.Unmarshal(b, cla); err != nil {
		return err
	}
	if full := fleet.HealthyOf(cla); !slices.Equal(full, set) {
		return fmt.Errorf("%s: the lean decoder read %d healthy endpoints, the full decode %d", cla.ClusterName, len(set), len(full))
	}
	return nil
}

// rebalance moves every client back to its home replica, and returns once every move has been
// taken (its break recorded), so that waiting for the clients to be back waits for these.
func (f *clients) rebalance() {
	for _, c := range f.clients {
		c.p.MoveTo(c.p.Home())
	}
	fixtures.Polling("a client takes its move in its own goroutine, which signals nothing").
		Await(f.r.T, time.Minute, "every client to take its move home", func() (bool, string) {
			for _, c := range f.clients {
				if c.p.Moving() {
					return false, fmt.Sprintf("client %d has not taken its move to krteds-%d", c.i, c.p.Home())
				}
			}
			return true, ""
		})
}

// on is the clients on replica i now.
func (f *clients) on(i int) []*client {
	var out []*client
	for _, c := range f.clients {
		if c.p.Replica() == i {
			out = append(out, c)
		}
	}
	return out
}

// errors is every decoding error a client met.
func (f *clients) errors() []error {
	tr := f.r.truth
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []error
	for _, c := range f.clients {
		out = append(out, c.errs...)
	}
	return out
}

// sameVersions checks that every client holds, for every service, the same version: replicas
// give identical versions for identical state, and delta and state-of-the-world clients alike
// (a version is a hash of the resource's bytes). It returns the services where they differ.
func (f *clients) sameVersions() (differ []string, byReplica map[int]int) {
	byReplica = map[int]int{}
	for _, c := range f.clients {
		byReplica[c.p.Replica()]++
	}
	tr := f.r.truth
	tr.mu.Lock()
	defer tr.mu.Unlock()
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
