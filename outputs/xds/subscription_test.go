package xds

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/krteds/krteds/collections"
)

// The subscription alone, rule by rule: requests applied to it, and the responses it plans
// against a source of resources by name, without a stream, a server or gRPC.

// subSource is what a subscription's plans resolve names against.
type subSource struct {
	names   *nameTable
	res     map[string]*collections.Resource
	pending map[string]bool
	leave   map[string]bool
}

func (f *subSource) resolve(_ typ, id nameID) (*collections.Resource, bool) {
	n := f.names.name(id)
	if f.pending[n] {
		return nil, true
	}
	return f.res[n], false
}

func (f *subSource) list(typ) []*collections.Resource {
	var out []*collections.Resource
	for _, r := range f.res {
		out = append(out, r)
	}
	return out
}

func (f *subSource) leaving(id nameID, _ *collections.Resource, _ sub) bool {
	return f.leave[f.names.name(id)]
}

// subRig is one subscription of a stream of its own, and its source.
type subRig struct {
	t     testing.TB
	sb    *subscription
	src   *subSource
	nonce int
	first bool
}

func newSubRig(t testing.TB, ty typ, delta bool) *subRig {
	s := &Server{limits: Limits{}.WithDefaults()}
	s.names = newNameTable(0)
	s.index = newSubscriberIndex(s.names, func(string, string) string { return "" })
	st := &stream{srv: s, delta: delta, caller: "test"}
	s.index.addStream(st)
	return &subRig{t: t, sb: newSubscription(ty, st, s.index, newVersionTable()), first: true,
		src: &subSource{names: s.names, res: map[string]*collections.Resource{}, pending: map[string]bool{}, leave: map[string]bool{}}}
}

// sibling is a subscription of the same type on a new stream of r's server.
func (r *subRig) sibling() *subRig {
	s := r.sb.owner.srv
	st := &stream{srv: s, delta: r.sb.delta, caller: "test"}
	s.index.addStream(st)
	return &subRig{t: r.t, sb: newSubscription(r.sb.t, st, s.index, r.sb.subs.vt), first: true, src: r.src}
}

// set gives a resource a version (made from v).
func (r *subRig) set(name, v string) {
	r.src.res[name] = &collections.Resource{Name: name, TypeURL: r.sb.t.url(), Version: uint64(len(v))<<32 | uint64(v[0]), Body: []byte(name + "#" + v)}
}

// sotw applies a state-of-the-world request of names answering nonce ("" for none).
func (r *subRig) sotw(nonce string, nack bool, names ...string) (reply, error) {
	req := request{typeURL: r.sb.t.url(), nonce: nonce, list: &sotwRequest{n: len(names), hash: rawListHash(names), list: names, read: true}}
	if nack {
		req.errorDetail = &rpcstatus.Status{Message: "rejected"}
	}
	defer func() { r.first = false }()
	return r.sb.apply(req, r.first)
}

// delta applies a delta request.
func (r *subRig) delta(nonce string, subscribe, unsubscribe []string, initial map[string]string) (reply, error) {
	req := request{delta: true, typeURL: r.sb.t.url(), nonce: nonce, subscribe: subscribe, unsubscribe: unsubscribe, initial: initial}
	defer func() { r.first = false }()
	return r.sb.apply(req, r.first)
}

// plan plans the next response up to limit bytes and records it as sent; it returns the names
// sent (sorted), the names removed, whether more follows, and its nonce ("" if none is due).
func (r *subRig) plan(limit int) (sent, removed []string, more bool, nonce string) {
	if !r.sb.due() {
		return nil, nil, false, ""
	}
	d, ok := r.sb.plan(limit, r.src)
	if !ok {
		return nil, nil, false, ""
	}
	for _, it := range d.items {
		sent = append(sent, it.res.Name)
	}
	for _, id := range d.removed {
		removed = append(removed, r.src.names.name(id))
	}
	r.nonce++
	nonce = fmt.Sprint(r.nonce)
	r.sb.record(&d, nonce, "v"+nonce, time.Now())
	slices.Sort(sent)
	slices.Sort(removed)
	return sent, removed, d.more, nonce
}

// held is what the client holds: name → version.
func (r *subRig) held() map[string]uint64 {
	out := map[string]uint64{}
	r.sb.subs.each(func(id nameID, s sub) { out[r.src.names.name(id)] = s.version })
	return out
}

func (r *subRig) expect(what string, got, want []string) {
	r.t.Helper()
	if !slices.Equal(got, want) {
		r.t.Fatalf("%s: %q, want %q", what, got, want)
	}
}

// TestSubscriptionNonces: what a request's nonce says. The first request of a type subscribes
// whatever nonce it carries; without a nonce it is a new request; an older nonce is stale (a
// state-of-the-world one changes nothing, a delta one applies its changes); the latest ACKs or,
// with an error, NACKs, keeping the error clipped.
func TestSubscriptionNonces(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delta bool
	}{{"sotw", false}, {"delta", true}} {
		r := newSubRig(t, tEndpoint, tc.delta)
		r.set("a", "1")
		r.set("b", "1")
		req := func(nonce string, nack bool, names ...string) reply {
			var got reply
			var err error
			if tc.delta {
				got, err = r.delta(nonce, names, nil, nil)
				if nack {
					got, err = r.sb.apply(request{delta: true, typeURL: r.sb.t.url(), nonce: nonce, errorDetail: &rpcstatus.Status{Message: strings.Repeat("e", 1000)}}, false)
				}
			} else {
				got, err = r.sotw(nonce, nack, names...)
			}
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		if got := req("an-old-streams-nonce", false, "a"); got != replyNone {
			t.Fatalf("%s: a first request with a nonce: %v, want a new subscription", tc.name, got)
		}
		sent, _, _, n1 := r.plan(1 << 20)
		r.expect(tc.name+": first answer", sent, []string{"a"})
		if _, _, _, n := r.plan(1 << 20); n != "" {
			t.Fatalf("%s: a second response while the first awaits its ACK", tc.name)
		}
		if got := req(n1, false, "a", "b"); got != replyACK || r.sb.st.AckedNonce != n1 {
			t.Fatalf("%s: the latest nonce: %v (acked %q), want an ACK of %s", tc.name, got, r.sb.st.AckedNonce, n1)
		}
		sent, _, _, n2 := r.plan(1 << 20)
		r.expect(tc.name+": a name added", sent, []string{"b"})
		if got := req(n1, false, "a", "b"); got != replyStale {
			t.Fatalf("%s: an older nonce: %v, want stale", tc.name, got)
		}
		if got := req(n2, true, "a", "b"); got != replyNACK || r.sb.st.NACKs != 1 || len(r.sb.st.LastError) > 2*maxClientText {
			t.Fatalf("%s: an error with the latest nonce: %v (%d NACKs, %d bytes of error)", tc.name, got, r.sb.st.NACKs, len(r.sb.st.LastError))
		}
		if _, _, _, n := r.plan(1 << 20); n != "" {
			t.Fatalf("%s: a NACK is answered before the content changes", tc.name)
		}
		r.set("a", "22")
		r.sb.mark(map[nameID]int64{r.id("a"): 0}, false)
		sent, _, _, _ = r.plan(1 << 20)
		r.expect(tc.name+": after a NACK, a change", sent, []string{"a"})
	}
}

func (r *subRig) id(name string) nameID {
	id, ok := r.src.names.lookup(name)
	if !ok {
		r.t.Fatalf("%q is not interned", name)
	}
	return id
}

// TestSubscriptionStateOfTheWorldLists: a list is the subscription: names added are looked at,
// names left out are released; an empty first list of clusters is the legacy wildcard, "*" a
// wildcard, and an empty list keeps one; the same list again (every ACK) changes nothing and is
// told by its hash.
func TestSubscriptionStateOfTheWorldLists(t *testing.T) {
	r := newSubRig(t, tCluster, false)
	r.set("c1", "1")
	r.set("c2", "1")
	if _, err := r.sotw("", false); err != nil {
		t.Fatal(err)
	}
	if !r.sb.wildcard {
		t.Fatal("an empty first request of clusters is not a wildcard")
	}
	sent, _, _, n := r.plan(1 << 20)
	r.expect("every cluster", sent, []string{"c1", "c2"})
	if _, err := r.sotw(n, false); err != nil || !r.sb.wildcard {
		t.Fatalf("an empty list after the wildcard: wildcard %v, %v", r.sb.wildcard, err)
	}
	delete(r.src.res, "c2")
	r.sb.mark(nil, true)
	sent, removed, _, n := r.plan(1 << 20)
	r.expect("the list without a cluster gone", sent, []string{"c1"})
	r.expect("removed (the list's absence says it on the wire)", removed, []string{"c2"})
	if _, ok := r.held()["c2"]; ok {
		t.Fatal("a cluster gone is still held through the wildcard")
	}

	e := newSubRig(t, tEndpoint, false)
	e.set("a", "1")
	e.set("b", "1")
	if _, err := e.sotw("", false, "a", "b"); err != nil {
		t.Fatal(err)
	}
	sent, _, _, n = e.plan(1 << 20)
	e.expect("endpoints asked for", sent, []string{"a", "b"})
	hash := e.sb.listHash
	if _, err := e.sotw(n, false, "a", "b"); err != nil || e.sb.listHash != hash {
		t.Fatal("an ACK repeating the list changed it")
	}
	if _, err := e.sotw(n, false, "b"); err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(e.held())); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("after a list without a: holds %v", got)
	}
	if _, err := e.sotw(n, false, strings.Repeat("n", MaxNameBytes+1)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a name too long: %v", err)
	}
}

// TestSubscriptionDelta: initial versions say what a client coming back holds, and only what
// differs is sent; "*" subscribes to everything and its removal drops what only it held; an
// unsubscribed name is forgotten; removals are sent as such.
func TestSubscriptionDelta(t *testing.T) {
	r := newSubRig(t, tCluster, true)
	r.set("c1", "1")
	r.set("c2", "1")
	r.set("c3", "1")
	current := r.src.res["c1"].VersionString()
	if _, err := r.delta("", []string{"*"}, nil, map[string]string{"c1": current, "c2": "5"}); err != nil {
		t.Fatal(err)
	}
	sent, _, _, n := r.plan(1 << 20)
	r.expect("a resume holding c1", sent, []string{"c2", "c3"})
	if _, err := r.delta(n, []string{"c1"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, _, n := r.plan(1 << 20); n != "" {
		t.Fatal("subscribing explicitly to a name held through the wildcard sends it again")
	}
	if _, err := r.delta("", nil, []string{"*"}, nil); err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(r.held())); !slices.Equal(got, []string{"c1"}) {
		t.Fatalf("after \"*\" is unsubscribed: holds %v, want only the explicit c1", got)
	}
	delete(r.src.res, "c1")
	r.sb.mark(map[nameID]int64{r.id("c1"): 0}, false)
	_, removed, _, _ := r.plan(1 << 20)
	r.expect("a delta removal", removed, []string{"c1"})
	if _, err := r.delta("", nil, []string{"c1"}, nil); err != nil {
		t.Fatal(err)
	}
	if len(r.held()) != 0 {
		t.Fatalf("unsubscribed, yet holds %v", r.held())
	}
	names := make([]string, MaxSubscriptions+1)
	for i := range names {
		names[i] = fmt.Sprint(i)
	}
	if _, err := r.delta("", names, nil, nil); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("more names than MaxSubscriptions: %v", err)
	}
}

// TestSubscriptionPlans: the first answer is sent even empty, but waits for real content rather
// than saying nothing; an answer past the limit goes in parts, each at most the limit (one
// resource at least), every name in one of them; a full list of clusters waits for every
// cluster being computed; an emptied CLA whose cluster is leaving is held back until released.
func TestSubscriptionPlans(t *testing.T) {
	r := newSubRig(t, tEndpoint, true)
	if _, err := r.delta("", []string{"a"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	r.src.pending["a"] = true
	if _, _, _, n := r.plan(1 << 20); n != "" {
		t.Fatal("a first answer of nothing but pending names")
	}
	delete(r.src.pending, "a")
	r.sb.mark(map[nameID]int64{r.id("a"): 0}, false)
	sent, _, _, n := r.plan(1 << 20)
	if n == "" || len(sent) != 0 {
		t.Fatalf("a first answer of a name that does not exist: %v %q", sent, n)
	}

	var names []string
	for i := 0; i < 30; i++ {
		names = append(names, fmt.Sprintf("n%02d", i))
		r.set(names[i], strings.Repeat("v", 1000))
	}
	if _, err := r.delta(n, names, nil, nil); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for part := 0; ; part++ {
		sent, _, more, n := r.plan(5000)
		if n == "" {
			t.Fatalf("part %d: nothing, with %d of 30 sent", part, len(got))
		}
		if len(sent) > 5 {
			t.Fatalf("part %d: %d resources of 1 KB in a part of 5 000 bytes", part, len(sent))
		}
		for _, s := range sent {
			got[s] = true
		}
		if _, err := r.delta(n, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		if !more {
			break
		}
	}
	if len(got) != 30 {
		t.Fatalf("the parts sent %d of 30 names", len(got))
	}

	c := newSubRig(t, tCluster, false)
	c.set("c1", "1")
	c.src.pending["c2"] = true
	if _, err := c.sotw("", false, "c1", "c2"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, n := c.plan(1 << 20); n != "" {
		t.Fatal("a list of clusters went out with one still computed")
	}

	e := newSubRig(t, tEndpoint, true)
	e.src.res["gone"] = &collections.Resource{Name: "gone", TypeURL: tEndpoint.url(), Version: 9, Endpoints: 0}
	e.src.leave["gone"] = true
	if _, err := e.delta("", []string{"gone"}, nil, map[string]string{"gone": "1"}); err != nil {
		t.Fatal(err)
	}
	sent, _, _, n = e.plan(1 << 20)
	if len(sent) != 0 {
		t.Fatalf("an emptied CLA of a cluster leaving was sent: %v", sent)
	}
	_, _ = e.delta(n, nil, nil, nil)
	delete(e.src.leave, "gone")
	if !e.sb.releaseDeferred() {
		t.Fatal("nothing was held back")
	}
	sent, _, _, _ = e.plan(1 << 20)
	e.expect("once released", sent, []string{"gone"})
}

// TestSubscriptionForcedMarks: after a clusters response, a state-of-the-world client's next
// request of endpoints is answered with every CLA it asks for, changed or not, in as many parts
// as it takes; on delta the CLAs of the clusters sent are owed the same way; a forced CLA
// pending when the answer went is sent once computed.
func TestSubscriptionForcedMarks(t *testing.T) {
	r := newSubRig(t, tEndpoint, false)
	var names []string
	for i := 0; i < 20; i++ {
		names = append(names, fmt.Sprintf("n%02d", i))
		r.set(names[i], strings.Repeat("v", 1000))
	}
	if _, err := r.sotw("", false, names...); err != nil {
		t.Fatal(err)
	}
	n := ""
	for more := true; more; {
		_, _, more, n = r.plan(5000)
		_, _ = r.sotw(n, false, names...)
	}
	r.sb.forceNext = true // a clusters response went out
	r.src.pending["n07"] = true
	if _, err := r.sotw(n, false, names...); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for more := true; more; {
		var sent []string
		sent, _, more, n = r.plan(5000)
		for _, s := range sent {
			got[s] = true
		}
		_, _ = r.sotw(n, false, names...)
	}
	if len(got) != 19 || got["n07"] {
		t.Fatalf("the forced answer sent %d names (n07 pending: %v), want the 19 computed", len(got), got["n07"])
	}
	delete(r.src.pending, "n07")
	r.sb.mark(map[nameID]int64{r.id("n07"): 0}, false)
	sent, _, _, _ := r.plan(5000)
	r.expect("the pending CLA, unchanged, once computed", sent, []string{"n07"})

	d := newSubRig(t, tEndpoint, true)
	d.set("x", "1")
	d.set("y", "1")
	if _, err := d.delta("", []string{"x", "y"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	_, _, _, n = d.plan(1 << 20)
	_, _ = d.delta(n, nil, nil, nil)
	d.sb.forceResend([]nameID{d.id("x")})
	sent, _, _, _ = d.plan(1 << 20)
	d.expect("delta: the CLA of the cluster sent", sent, []string{"x"})
}

// TestResumingIsPerType: the next part of an answer goes ahead of new answers in the send
// budget; a response of another type decided between two parts is a new answer, not the next
// part.
func TestResumingIsPerType(t *testing.T) {
	src := newFakeSource()
	s := NewServer(src, Options{ClusterID: "Kubernetes", Limits: Limits{StreamRate: -1, ResponseBytes: 64 << 10}})
	s.synced.Store(true)
	names := src.setBig(tEndpoint.url(), 20, 8<<10) // 160 KB: three parts
	src.set(tCluster.url(), "c")
	st := newStream(s, true, "", true)
	if err := s.register(st); err != nil {
		t.Fatal(err)
	}
	defer st.end()
	// The test's goroutine is the stream's: its loop does not run.
	if err := st.handle(deltaRequestOf(&discovery.DeltaDiscoveryRequest{Node: sidecarNode(1).Proto(), TypeUrl: tEndpoint.url(), ResourceNamesSubscribe: names})); err != nil {
		t.Fatal(err)
	}
	first := st.next(tEndpoint)
	if first == nil || !first.more || first.resuming {
		t.Fatalf("the first part: %+v, want more to follow and not resuming", first)
	}
	if err := st.handle(deltaRequestOf(&discovery.DeltaDiscoveryRequest{TypeUrl: tCluster.url(), ResourceNamesSubscribe: []string{"c"}})); err != nil {
		t.Fatal(err)
	}
	if r := st.next(tCluster); r == nil || r.resuming {
		t.Fatalf("a clusters answer decided between two parts of endpoints: %+v, want a new answer", r)
	}
	if err := st.handle(deltaRequestOf(&discovery.DeltaDiscoveryRequest{TypeUrl: tEndpoint.url(), ResponseNonce: first.nonce})); err != nil {
		t.Fatal(err)
	}
	if r := st.next(tEndpoint); r == nil || !r.resuming {
		t.Fatalf("the second part of endpoints: %+v, want it resuming", r)
	}
}

// BenchmarkFirstSubscription applies a stream's first request of 10 000 endpoint names (a proxy
// of a herd asking for every cluster), each time on a new stream of a server where another stream
// holds the same names already.
func BenchmarkFirstSubscription(b *testing.B) {
	names := bigSotwRequest(10000).ResourceNames
	for _, delta := range []bool{false, true} {
		b.Run(map[bool]string{false: "sotw", true: "delta"}[delta], func(b *testing.B) {
			held := newSubRig(b, tEndpoint, delta)
			if _, err := held.sotw("", false, names...); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				r := held.sibling()
				var err error
				if delta {
					_, err = r.delta("", names, nil, nil)
				} else {
					_, err = r.sotw("", false, names...)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFoldedPlan plans and records a delta response folding 50 changed CLAs of the 1 002 a
// stream holds (a proxy behind a stream of changes, as in a default mesh under churn), then
// applies its ACK: the stream's own work for a folded response, without encoding or gRPC.
func BenchmarkFoldedPlan(b *testing.B) {
	r := newSubRig(b, tEndpoint, true)
	names := make([]string, 1002)
	for i := range names {
		names[i] = fmt.Sprintf("outbound|80||svc-%05d.bench.svc.cluster.local", i)
		r.set(names[i], "a")
	}
	if _, err := r.delta("", names, nil, nil); err != nil {
		b.Fatal(err)
	}
	for more := true; more; {
		var n string
		_, _, more, n = r.plan(1 << 20)
		if _, err := r.delta(n, nil, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
	versions := [2]map[string]*collections.Resource{{}, {}}
	for i, v := range []string{"b", "c"} {
		for _, name := range names {
			r.set(name, v)
			versions[i][name] = r.src.res[name]
		}
	}
	ids := make([]nameID, len(names))
	for i, name := range names {
		ids[i] = r.id(name)
	}
	const folded = 50
	flip := make([]int, len(names)) // each visit of a name changes its version
	b.ReportAllocs()
	k := 0
	for b.Loop() {
		marks := make(map[nameID]int64, folded)
		for j := 0; j < folded; j++ {
			i := (k*folded + j) % len(names)
			r.src.res[names[i]] = versions[flip[i]][names[i]]
			flip[i] ^= 1
			marks[ids[i]] = 1
		}
		k++
		r.sb.mark(marks, false)
		d, ok := r.sb.plan(1<<20, r.src)
		if !ok || len(d.items) != folded {
			b.Fatalf("planned %d items (%v), want %d", len(d.items), ok, folded)
		}
		r.sb.record(&d, "n", "v", time.Time{})
		if _, err := r.delta("n", nil, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}
