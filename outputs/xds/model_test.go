package xds

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
)

// The model-based test of the watch layer: random interleavings of subscribe, unsubscribe,
// ACK, NACK, stale nonces, reconnects and source changes, on state-of-the-world and delta
// streams. After each step a probe proves the server has handled everything before it, and the
// streams are checked against a model of what each client holds:
//   - a type without a response awaiting ACK holds, for every name it subscribes to (or, on a
//     wildcard, every name that exists), the latest version, or the version it rejected last;
//   - names that no longer exist are gone (delta removals, full state-of-the-world lists);
//   - no response comes while the previous one of its type awaits an ACK;
//   - no response repeats what the client holds, except a stream's first of a type, the one
//     answer to an endpoints request that follows a clusters response (Envoy warming clusters),
//     and on delta the CLAs of the clusters a clusters response sent (some endpoint names are
//     cluster names).

// modelTypes are the types the model drives; RouteConfiguration is the probe.
var modelTypes = []typ{tCluster, tEndpoint, tListener}

// modelNames are the resource names of each modelled type.
var modelNames = map[typ][]string{
	tCluster:  {"c0", "c1", "c2", "c3"},
	tEndpoint: {"e0", "e1", "e2", "e3", "c0", "c1"},
	tListener: {"l0", "l1", "l2"},
}

type clientType struct {
	subscribed map[string]bool
	wildcard   bool
	// sent is what the server has sent (the versions it knows the client was given); held is what
	// the client accepted (it differs after a NACK).
	sent map[string]uint64
	held map[string]uint64
	// last is the latest response; awaiting: it is neither ACKed nor NACKed.
	lastNonce   string
	oldNonce    string
	lastVersion string
	lastNames   []string
	awaiting    bool
	responses   int
	// armed: a clusters response came; the next endpoints request gets an answer even if nothing
	// changed (forced), as Envoy needs to warm the clusters.
	armed, forced bool
	// owed are the CLAs the client needs again, changed or not: on state of the world those it
	// asks for after a clusters response, on delta those of the clusters sent since.
	owed    map[string]bool
	started bool
}

type modelClient struct {
	t     *testing.T
	delta bool
	node  adsclient.Node
	sotw  *adsclient.Stream
	dstr  *adsclient.DeltaStream
	types map[typ]*clientType
	probe int
	// probeNonce is the nonce of the last probe response.
	probeNonce string
	reconnects int
}

func (c *modelClient) typ(t typ) *clientType {
	ct := c.types[t]
	if ct == nil {
		ct = &clientType{subscribed: map[string]bool{}, sent: map[string]uint64{}, held: map[string]uint64{}}
		c.types[t] = ct
	}
	return ct
}

func (c *modelClient) open(fs *fakeServer) {
	var err error
	if c.delta {
		c.dstr, err = adsclient.OpenDelta(context.Background(), fs.cc, c.node)
	} else {
		c.sotw, err = adsclient.Open(context.Background(), fs.cc, c.node)
	}
	if err != nil {
		c.t.Fatal(err)
	}
	c.probeNonce = ""
}

func (c *modelClient) close() {
	if c.sotw != nil {
		c.sotw.Close()
	}
	if c.dstr != nil {
		c.dstr.Close()
	}
}

func (c *modelClient) names(ct *clientType) []string {
	out := slices.Sorted(maps.Keys(ct.subscribed))
	if ct.wildcard {
		out = append([]string{"*"}, out...)
	}
	return out
}

// sendSotw sends a state-of-the-world request for t with the subscription and a nonce.
func (c *modelClient) sendSotw(t typ, nonce string, nack bool) {
	ct := c.typ(t)
	req := &discovery.DiscoveryRequest{TypeUrl: t.url(), ResourceNames: c.names(ct), ResponseNonce: nonce, VersionInfo: ct.lastVersion}
	if ct.wildcard && len(ct.subscribed) == 0 && t.legacyWildcard() {
		req.ResourceNames = nil
	}
	if nack {
		req.ErrorDetail = statusOf("rejected by the model")
	}
	if t == tEndpoint && ct.armed && (nonce == "" || nonce == ct.lastNonce) {
		ct.armed, ct.forced = false, true
		// Every CLA it asks for is owed, changed or not, until a response sends it.
		for n := range ct.subscribed {
			ct.owe(n)
		}
	}
	if err := c.sotw.Send(req); err != nil {
		c.t.Fatal(err)
	}
}

// received applies a response to the model and checks it.
func (c *modelClient) received(fs *fakeServer, t typ, version, nonce string, res map[string]uint64, removed []string, step string) {
	ct := c.typ(t)
	if modelLog {
		c.t.Logf("%p %s <- %s nonce %s %v removed %v (sent before %v)", c, step, t.short(), nonce, res, removed, ct.sent)
	}
	if ct.awaiting {
		c.t.Fatalf("%s: client %p: %s response %s while the previous one awaits its ACK", step, c, t.short(), nonce)
	}
	next := maps.Clone(ct.sent)
	if !c.delta && t.fullState() {
		next = maps.Clone(res)
	} else {
		maps.Copy(next, res)
		for _, n := range removed {
			delete(next, n)
		}
	}
	allowed := ct.responses == 0 || ct.forced
	for n := range res {
		if ct.owed[n] {
			allowed = true
			delete(ct.owed, n)
		}
	}
	if maps.Equal(next, ct.sent) && !allowed {
		c.t.Fatalf("%s: client %p: %s response %s repeats what the client was sent: %v", step, c, t.short(), nonce, res)
	}
	ct.forced = false
	ct.sent = next
	ct.responses++
	ct.oldNonce, ct.lastNonce, ct.lastVersion = ct.lastNonce, nonce, version
	ct.awaiting = true
	if t == tCluster && !c.delta {
		c.typ(tEndpoint).armed = true
	}
	if t == tCluster && c.delta {
		eds := c.typ(tEndpoint)
		for n := range res {
			eds.owe(n)
		}
	}
}

// owe records that the client needs the resource of a name again.
func (ct *clientType) owe(name string) {
	if ct.owed == nil {
		ct.owed = map[string]bool{}
	}
	ct.owed[name] = true
}

// ack accepts the last response.
func (c *modelClient) ack(t typ) {
	ct := c.typ(t)
	if !ct.awaiting {
		return
	}
	ct.held = maps.Clone(ct.sent)
	if c.delta {
		_ = c.dstr.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: t.url(), ResponseNonce: ct.lastNonce})
	} else {
		c.sendSotw(t, ct.lastNonce, false)
	}
	ct.awaiting = false
}

// nack rejects the last response: the client keeps what it held.
func (c *modelClient) nack(t typ) {
	ct := c.typ(t)
	if !ct.awaiting {
		return
	}
	if c.delta {
		_ = c.dstr.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: t.url(), ResponseNonce: ct.lastNonce, ErrorDetail: statusOf("rejected")})
	} else {
		c.sendSotw(t, ct.lastNonce, true)
	}
	ct.awaiting = false
}

// subscribe adds (or with remove, drops) a name.
func (c *modelClient) subscribe(t typ, name string, remove bool) {
	ct := c.typ(t)
	if remove && (!ct.started || (t.legacyWildcard() && !ct.wildcard && len(ct.subscribed) == 1 && ct.subscribed[name])) {
		// A first request without names, or (clusters and listeners) a request of a stream
		// that subscribed to none, asks for everything: a different client.
		return
	}
	if remove {
		delete(ct.subscribed, name)
		delete(ct.owed, name)
		if !ct.wildcard {
			delete(ct.held, name)
			delete(ct.sent, name)
		}
	} else {
		ct.subscribed[name] = true
	}
	if c.delta {
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: t.url()}
		ct.started = true
		if remove {
			req.ResourceNamesUnsubscribe = []string{name}
		} else {
			req.ResourceNamesSubscribe = []string{name}
		}
		if err := c.dstr.Send(req); err != nil {
			c.t.Fatal(err)
		}
		return
	}
	// A state-of-the-world request carries the latest nonce: it also accepts the last response.
	if ct.awaiting {
		ct.held = maps.Clone(ct.sent)
		ct.awaiting = false
	}
	ct.started = true
	c.sendSotw(t, ct.lastNonce, false)
}

// stale sends a request answering an older response, with a changed subscription on delta.
func (c *modelClient) stale(t typ, name string) {
	ct := c.typ(t)
	if ct.oldNonce == "" || ct.oldNonce == ct.lastNonce {
		return
	}
	if c.delta {
		ct.subscribed[name] = true
		_ = c.dstr.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: t.url(), ResponseNonce: ct.oldNonce, ResourceNamesSubscribe: []string{name}})
		return
	}
	// Ignored by the server: the model does not change.
	req := &discovery.DiscoveryRequest{TypeUrl: t.url(), ResourceNames: append(c.names(ct), name), ResponseNonce: ct.oldNonce}
	_ = c.sotw.Send(req)
}

// reconnect opens a new stream and subscribes again to what the client had. Every other time,
// its first requests carry the previous stream's nonce and version, as an Envoy before 1.29 sends
// them (envoyproxy/envoy#30155): a new stream's first request subscribes whatever its nonce.
func (c *modelClient) reconnect(fs *fakeServer) {
	c.close()
	c.open(fs)
	c.reconnects++
	stale := c.reconnects%2 == 0
	for _, t := range modelTypes {
		ct := c.types[t]
		if ct == nil || !ct.started {
			continue
		}
		prevNonce, prevVersion := ct.lastNonce, ct.lastVersion
		if !stale {
			prevNonce, prevVersion = "", ""
		}
		ct.awaiting, ct.responses, ct.lastNonce, ct.oldNonce, ct.lastVersion = false, 0, "", "", ""
		// A delta client tells the new stream what it holds; a state-of-the-world one cannot.
		ct.sent = map[string]uint64{}
		if c.delta {
			ct.sent = maps.Clone(ct.held)
		}
		if c.delta {
			req := &discovery.DeltaDiscoveryRequest{TypeUrl: t.url(), ResourceNamesSubscribe: slices.Sorted(maps.Keys(ct.subscribed)),
				InitialResourceVersions: map[string]string{}}
			if ct.wildcard {
				req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, "*")
			}
			for n, v := range ct.held {
				req.InitialResourceVersions[n] = strconv.FormatUint(v, 16)
			}
			req.ResponseNonce = prevNonce
			if err := c.dstr.Send(req); err != nil {
				c.t.Fatal(err)
			}
		} else {
			ct.lastVersion = prevVersion
			c.sendSotw(t, prevNonce, false)
			ct.lastVersion = ""
		}
	}
}

// barrier subscribes to a new probe route and reads every response until the probe's answer:
// the server handles a stream's requests in order and answers the types in order, so nothing
// due before the probe is still unsent after its answer.
func (c *modelClient) barrier(fs *fakeServer, step string) {
	c.probe++
	name := fmt.Sprintf("probe-%d", c.probe)
	fs.src.set(tRoute.url(), name)
	prev := fmt.Sprintf("probe-%d", c.probe-1)
	if c.delta {
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: tRoute.url(), ResourceNamesSubscribe: []string{name}, ResponseNonce: c.probeNonce}
		if c.probe > 1 {
			req.ResourceNamesUnsubscribe = []string{prev}
		}
		if err := c.dstr.Send(req); err != nil {
			c.t.Fatal(err)
		}
	} else if err := c.sotw.Send(&discovery.DiscoveryRequest{TypeUrl: tRoute.url(), ResourceNames: []string{name}, ResponseNonce: c.probeNonce}); err != nil {
		c.t.Fatal(err)
	}
	for {
		t, version, nonce, res, removed := c.recv(step)
		if t == tRoute {
			if _, ok := res[name]; ok {
				c.probeNonce = nonce
				return
			}
			c.t.Fatalf("%s: a probe response without the probe: %v", step, res)
		}
		c.received(fs, t, version, nonce, res, removed, step)
	}
}

func (c *modelClient) recv(step string) (typ, string, string, map[string]uint64, []string) {
	const wait = 20 * time.Second
	if c.delta {
		r, err := c.dstr.Recv(wait)
		if err != nil {
			c.t.Fatalf("%s: waiting for a delta response: %v", step, err)
		}
		t, _ := typeOf(r.TypeUrl)
		res := map[string]uint64{}
		for _, x := range r.Resources {
			v, _ := parseVersion(x.Version)
			res[x.Name] = v
		}
		return t, r.SystemVersionInfo, r.Nonce, res, r.RemovedResources
	}
	r, err := c.sotw.Recv(wait)
	if err != nil {
		c.t.Fatalf("%s: waiting for a response: %v", step, err)
	}
	t, _ := typeOf(r.TypeUrl)
	res := map[string]uint64{}
	for _, a := range r.Resources {
		// The fake's bodies start with the name; the version is the body's hash.
		name, _, _ := strings.Cut(string(a.Value), "#")
		res[name] = fakeVersion(a.Value)
	}
	return t, r.VersionInfo, r.Nonce, res, nil
}

// check compares what the server has sent each client with the source: a type whose last
// response is answered has been sent the latest version of every name it wants, and nothing that
// no longer exists (where the protocol can say so).
func (c *modelClient) check(fs *fakeServer, step string) {
	for _, t := range modelTypes {
		ct := c.types[t]
		if ct == nil || !ct.started || ct.awaiting {
			continue
		}
		want := map[string]bool{}
		for n := range ct.subscribed {
			want[n] = true
		}
		if ct.wildcard {
			for _, r := range fs.src.List(fakeView, t.url()) {
				want[r.Name] = true
			}
		}
		for n := range want {
			r, pending := fs.src.current(t.url(), n)
			if pending {
				continue
			}
			if t == tEndpoint && c.leaving(fs, n) {
				continue
			}
			if r == nil {
				if v, ok := ct.sent[n]; ok && (c.delta || t.fullState()) {
					c.t.Fatalf("%s: client %p: %s %s no longer exists but the client still has %x", step, c, t.short(), n, v)
				}
				continue
			}
			if got := ct.sent[n]; got != r.Version {
				c.t.Fatalf("%s: client %p: %s %s: the client was sent %x, the source has %x", step, c, t.short(), n, got, r.Version)
			}
		}
	}
}

// leaving reports whether the CLA of a name may be waiting for a clusters response: the client
// holds the cluster, and the source no longer has it (its removal is on its way), or it has not
// acknowledged the clusters yet (a removal may be in that response, or wait for the ACK). Every
// CLA of the fake is empty, and an emptied CLA waits for the clusters response that removes its
// cluster, as istiod orders them.
func (c *modelClient) leaving(fs *fakeServer, name string) bool {
	cds := c.types[tCluster]
	if cds == nil {
		return false
	}
	if _, held := cds.sent[name]; !held {
		return false
	}
	cr, _ := fs.src.current(tCluster.url(), name)
	return cr == nil || cds.awaiting
}

func fakeVersion(body []byte) uint64 {
	return xxhash.Sum64(body) | 1
}

var modelLog = os.Getenv("KRTEDS_MODEL_LOG") != ""

// TestWatchModel runs the model over random steps, for state-of-the-world and delta streams.
func TestWatchModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("KRTEDS_MODEL_SEED"), 10, 64); err == nil {
		seed = v
	}
	steps := 400
	if testing.Short() {
		steps = 100
	}
	if os.Getenv("KRTEDS_STARVE") != "" {
		fixtures.Starve(t, 4, 1e5)
	}
	t.Logf("seed %d (set KRTEDS_MODEL_SEED to replay)", seed)
	r := rand.New(rand.NewPCG(seed, 11))
	fs := startFake(t)
	for typ, names := range modelNames {
		for _, n := range names[:len(names)-1] {
			fs.src.set(typ.url(), n)
		}
	}
	var clients []*modelClient
	for i := 0; i < 4; i++ {
		c := &modelClient{t: t, delta: i%2 == 1, types: map[typ]*clientType{},
			node: adsclient.Node{ID: fmt.Sprintf("sidecar~10.0.0.%d~p%d.ns1~ns1.svc.cluster.local", i+1, i), Namespace: "ns1"}}
		c.open(fs)
		defer c.close()
		clients = append(clients, c)
		// Client 0 and 1 want every cluster.
		if i < 2 {
			ct := c.typ(tCluster)
			ct.wildcard, ct.started = true, true
			if c.delta {
				_ = c.dstr.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: tCluster.url()})
			} else {
				c.sendSotw(tCluster, "", false)
			}
		}
		c.barrier(fs, "setup")
	}
	for step := 0; step < steps; step++ {
		c := clients[r.IntN(len(clients))]
		ty := modelTypes[r.IntN(len(modelTypes))]
		names := modelNames[ty]
		name := names[r.IntN(len(names))]
		var what string
		switch a := r.IntN(100); {
		case a < 20:
			what = "subscribe " + name
			c.subscribe(ty, name, false)
		case a < 27:
			what = "unsubscribe " + name
			c.subscribe(ty, name, true)
		case a < 47:
			what = "ack"
			c.ack(ty)
		case a < 52:
			what = "nack"
			c.nack(ty)
		case a < 56:
			what = "stale nonce, subscribing " + name
			c.stale(ty, name)
		case a < 58:
			what = "reconnect"
			c.reconnect(fs)
		case a < 85:
			what = "source changes " + name
			fs.src.set(ty.url(), name)
		case a < 90 && ty != tEndpoint:
			what = "source removes " + name
			fs.src.remove(ty.url(), name)
		case a < 95 && ty == tEndpoint:
			what = "source computes " + name + " anew"
			fs.src.setPending(ty.url(), name, true)
		default:
			what = "source finishes " + name
			fs.src.setPending(ty.url(), name, false)
		}
		label := fmt.Sprintf("step %d (%s %s on %s client %p)", step, what, ty.short(), map[bool]string{true: "delta", false: "sotw"}[c.delta], c)
		if modelLog {
			t.Log(label)
		}
		for _, cl := range clients {
			cl.barrier(fs, label)
			cl.check(fs, label)
		}
	}
}

func statusOf(msg string) *rpcstatus.Status { return &rpcstatus.Status{Code: 3, Message: msg} }
