package history

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/xdsdebug"
)

func ep(addr string, h collections.HealthStatus) *collections.Endpoint {
	return &collections.Endpoint{Address: addr, Port: 8080, PortName: "http", Health: h, Pod: "shop/" + addr}
}

func shard(cause collections.Cause, eps ...*collections.Endpoint) *collections.ServiceEndpoints {
	return &collections.ServiceEndpoints{Namespace: "shop", Name: "reviews", Endpoints: eps, Cause: cause}
}

func sliceCause(version string, trigger, seen int64) collections.Cause {
	return collections.Cause{Kind: "EndpointSlice", Name: "shop/reviews-a", Version: version, Trigger: trigger, Seen: seen}
}

func claSet(cause collections.Cause, versions map[string]uint64) collections.ResourceSet {
	set := collections.ResourceSet{Key: "c", Name: "outbound|9080||reviews.shop.svc.cluster.local", TypeURL: "t", Service: "shop/reviews",
		ByClass: map[string]*collections.Resource{}}
	for class, v := range versions {
		r := &collections.Resource{Version: v, Cause: cause}
		if class == "" {
			set.Shared = r
		} else {
			set.ByClass[class] = r
		}
	}
	return set
}

// TestDiffTable: the endpoints added, removed and changed in health, in one walk over the
// merge's order and by key over any order alike, the lists bounded.
func TestDiffTable(t *testing.T) {
	a1, b1, c1 := ep("10.0.0.1", collections.Healthy), ep("10.0.0.2", collections.Healthy), ep("10.0.0.3", collections.Healthy)
	b2 := ep("10.0.0.2", collections.UnHealthy)
	many := func(n int) []*collections.Endpoint {
		var out []*collections.Endpoint
		for i := range n {
			out = append(out, ep(fmt.Sprintf("10.1.0.%d", i+1), collections.Healthy))
		}
		return out
	}
	for _, tc := range []struct {
		name                          string
		before, after                 []*collections.Endpoint
		added, removed, health, extra int
	}{
		{"nothing", []*collections.Endpoint{a1, b1}, []*collections.Endpoint{a1, b1}, 0, 0, 0, 0},
		{"one added", []*collections.Endpoint{a1}, []*collections.Endpoint{a1, b1}, 1, 0, 0, 0},
		{"one removed", []*collections.Endpoint{a1, b1, c1}, []*collections.Endpoint{a1, c1}, 0, 1, 0, 0},
		{"health", []*collections.Endpoint{a1, b1, c1}, []*collections.Endpoint{a1, b2, c1}, 0, 0, 1, 0},
		{"out of order", []*collections.Endpoint{c1, a1, b1}, []*collections.Endpoint{b2, a1}, 0, 1, 1, 0},
		{"first sight, bounded", nil, many(20), maxListed, 0, 0, 20 - maxListed},
		{"all gone, bounded", many(10), nil, 0, maxListed, 0, 10 - maxListed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Change
			diff(tc.before, tc.after, &c)
			if len(c.Added) != tc.added || len(c.Removed) != tc.removed || len(c.Health) != tc.health || c.Unlisted != tc.extra {
				t.Fatalf("added %v removed %v health %v unlisted %d", c.Added, c.Removed, c.Health, c.Unlisted)
			}
			for _, h := range c.Health {
				if h.From != collections.Healthy || h.Health != collections.UnHealthy {
					t.Errorf("health change %+v", h)
				}
			}
		})
	}
}

// TestRecordIsBounded: a service keeps its last changes only, and the deliveries of a change
// that fell out of the record are not counted anywhere.
func TestRecordIsBounded(t *testing.T) {
	s := New(4)
	now := time.Now()
	var prev *collections.ServiceEndpoints
	for i := range 10 {
		h := collections.Healthy
		if i%2 == 1 {
			h = collections.UnHealthy
		}
		cur := shard(sliceCause(fmt.Sprint(i), int64(i+1), int64(i+2)), ep("10.0.0.1", h))
		s.endpointsChanged(prev, cur, now)
		prev = cur
	}
	changes := s.Changes("shop/reviews")
	if len(changes) != 4 || changes[0].Seq != 7 || changes[3].Seq != 10 {
		t.Fatalf("kept %d changes from %d", len(changes), changes[0].Seq)
	}
	s.Delivered(sliceCause("2", 3, 4), "p1", now, now, "")
	s.Delivered(sliceCause("9", 10, 11), "p1", now, now, "")
	if n := len(s.byCause); n != 4 {
		t.Errorf("%d causes indexed, want the 4 kept", n)
	}
	if got := s.Changes("shop/reviews")[3].Delivery.Acked; got != 1 {
		t.Errorf("the latest change was acknowledged %d times, want 1", got)
	}
	s.endpointsChanged(prev, nil, now)
	if svc, n := s.Size(); svc != 0 || n != 0 || len(s.byCause) != 0 {
		t.Errorf("a service gone leaves %d services, %d changes, %d causes", svc, n, len(s.byCause))
	}
}

// TestCLAsJoinTheirChange: the CLA versions of a change are recorded with it whichever is seen
// first; a CLA computed again without its endpoints changing is a change of its own; the same
// versions again are none.
func TestCLAsJoinTheirChange(t *testing.T) {
	now := time.Now()
	c1 := sliceCause("1", 10, 20)
	c2 := sliceCause("2", 30, 40)
	s := New(0)
	s.endpointsChanged(nil, shard(c1, ep("10.0.0.1", collections.Healthy)), now)
	s.clasComputed(claSet(c1, map[string]uint64{"a": 1, "b": 2}))
	// The CLA of the next change is seen before its endpoints.
	s.clasComputed(claSet(c2, map[string]uint64{"a": 3, "b": 4}))
	s.endpointsChanged(shard(c1, ep("10.0.0.1", collections.Healthy)), shard(c2, ep("10.0.0.1", collections.UnHealthy)), now)
	s.clasComputed(claSet(c2, map[string]uint64{"a": 3, "b": 4})) // again: nothing
	s.clasComputed(claSet(c2, map[string]uint64{"a": 5, "b": 4})) // a policy changed
	changes := s.Changes("shop/reviews")
	if len(changes) != 3 {
		t.Fatalf("%d changes: %+v", len(changes), changes)
	}
	name := "outbound|9080||reviews.shop.svc.cluster.local"
	if v := changes[0].CLAs[name]; v["a"] != 1 || v["b"] != 2 {
		t.Errorf("change 1 CLAs %v", v)
	}
	if v := changes[1].CLAs[name]; v["a"] != 3 || len(changes[1].Health) != 1 || changes[1].Again {
		t.Errorf("change 2: CLAs %v health %v again %v", v, changes[1].Health, changes[1].Again)
	}
	if v := changes[2].CLAs[name]; v["a"] != 5 || !changes[2].Again {
		t.Errorf("change 3: CLAs %v again %v", v, changes[2].Again)
	}
	if got := changesSince(changes, name, 3); got != 1 {
		t.Errorf("a proxy holding version 3 is %d changes behind, want 1", got)
	}
	if got := changesSince(changes, name, 99); got != -1 {
		t.Errorf("a version out of the record gives %d, want -1", got)
	}
}

// TestTimelineOfAPodGone: a Pod gone while its slice still lists it: the change that withheld
// its endpoint is a computation again without a new slice version, and the timeline says when
// the slice's change was made, seen, and when the Pod was seen being deleted and gone, in order;
// a proxy holding the version before is listed behind with its reason.
func TestTimelineOfAPodGone(t *testing.T) {
	s, c1, pod, at := twoEndpoints()
	deleting := *pod
	deleting.Deleting = true
	s.podChanged(pod, &deleting, at(time.Second))
	s.podChanged(&deleting, nil, at(2*time.Second))
	s.endpointsChanged(shard(c1, ep("10.0.0.1", collections.Healthy), ep("10.0.0.2", collections.Healthy)),
		shard(c1, ep("10.0.0.1", collections.Healthy)), at(2*time.Second+time.Millisecond))
	s.clasComputed(claSet(c1, map[string]uint64{"": 101}))
	s.Delivered(c1, "p1", at(30*time.Millisecond), at(40*time.Millisecond), "")
	name := "outbound|9080||reviews.shop.svc.cluster.local"
	holders := []xdsdebug.Holding{
		{ConnID: "c1", NodeID: "p1", Sent: 101, Acked: true, Current: 101},
		{ConnID: "c2", NodeID: "p2", Sent: 100, Acked: true, Current: 101,
			Behind: &xdsdebug.Behind{Since: at(2 * time.Second), Reason: xdsdebug.WaitNotReading}},
	}
	tl := s.Timeline("shop/reviews", name, "10.0.0.2", "c2", holders)
	var texts []string
	for i, e := range tl.Events {
		texts = append(texts, e.Text)
		if i > 0 && e.At.Before(tl.Events[i-1].At) {
			t.Errorf("event %d before the one it follows: %v", i, tl.Events)
		}
	}
	want := []string{"EndpointSlice shop/reviews-a: the Pod or Service change behind it (its trigger time)", "resourceVersion 7 seen by krteds", "change 1 computed: 10.0.0.2:8080",
		"acknowledged by 1 proxy ", "Pod shop/10.0.0.2 seen being deleted", "Pod shop/10.0.0.2 seen gone",
		"change 2 computed again without a new EndpointSlice version", "10.0.0.2:8080 (Pod shop/10.0.0.2) removed"}
	joined := strings.Join(texts, "\n")
	for _, w := range want {
		if !strings.Contains(joined, w) {
			t.Errorf("the timeline lacks %q:\n%s", w, joined)
		}
	}
	p := tl.Proxies
	if p.Subscribed != 2 || p.Current != 1 || len(p.Behind) != 1 || p.Behind[0].Changes != 1 || p.Asked == nil || p.Asked.NodeID != "p2" {
		t.Errorf("proxies %+v", p)
	}
	if text := tl.Text(); !strings.Contains(text, "proxy p2 (c2) holds CLA 64, current is 65 (1 changes behind)") || !strings.Contains(text, "client_not_reading") {
		t.Errorf("the text says:\n%s", text)
	}
}

// TestRejectionsAreBounded: the rejections of a change are counted, a few kept with their error.
func TestRejectionsAreBounded(t *testing.T) {
	c := sliceCause("1", 1, 2)
	s := New(0)
	s.endpointsChanged(nil, shard(c, ep("10.0.0.1", collections.Healthy)), time.Now())
	for i := range 10 {
		s.Delivered(c, fmt.Sprint("p", i), time.Now(), time.Now(), "bad CLA")
	}
	d := s.Changes("shop/reviews")[0].Delivery
	if d.Rejected != 10 || len(d.Rejections) != maxRejections || d.Rejections[0].Error != "bad CLA" {
		t.Fatalf("%+v", d)
	}
}

// TestPodEndsAreBounded: the Pods whose going is remembered are the latest maxPods; a Pod of
// the same name coming back forgets the going of the one before.
func TestPodEndsAreBounded(t *testing.T) {
	s := New(0)
	now := time.Now()
	for i := range maxPods + 10 {
		s.podChanged(&collections.Pod{Key: fmt.Sprint("ns/p", i)}, nil, now)
	}
	if _, ok := s.PodEnd("ns/p0"); ok {
		t.Error("the oldest Pod's going is still remembered")
	}
	if _, ok := s.PodEnd(fmt.Sprint("ns/p", maxPods+9)); !ok {
		t.Error("the latest Pod's going is forgotten")
	}
	s.podChanged(nil, &collections.Pod{Key: fmt.Sprint("ns/p", maxPods+9)}, now)
	if _, ok := s.PodEnd(fmt.Sprint("ns/p", maxPods+9)); ok {
		t.Error("a Pod back under its name is still said gone")
	}
}

// twoEndpoints is a store whose service shop/reviews has 10.0.0.1 and 10.0.0.2 (its Pod is
// returned) from slice version 7, made a minute ago (at gives times from then), CLA version 100.
func twoEndpoints() (*Store, collections.Cause, *collections.Pod, func(time.Duration) time.Time) {
	t0 := time.Now().Add(-time.Minute)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	c1 := sliceCause("7", at(0).UnixNano(), at(10*time.Millisecond).UnixNano())
	s := New(0)
	s.endpointsChanged(nil, shard(c1, ep("10.0.0.1", collections.Healthy), ep("10.0.0.2", collections.Healthy)), at(20*time.Millisecond))
	s.clasComputed(claSet(c1, map[string]uint64{"": 100}))
	return s, c1, &collections.Pod{Key: "shop/10.0.0.2"}, at
}

// TestTimelineTellsAPodGoneBeforeWhatItCaused: the handler of the Pods may see a deletion after the
// handler of the endpoints recorded the recomputation it caused; the timeline still tells the
// Pod gone first. A removal more than a second before the Pod went was not its doing.
func TestTimelineTellsAPodGoneBeforeWhatItCaused(t *testing.T) {
	for _, c := range []struct {
		name      string
		goneAfter time.Duration // the Pod handler's stamp, after the recomputation
		first     string
	}{
		{"stamped 3 ms after the recomputation", 3 * time.Millisecond, "Pod shop/10.0.0.2 seen gone"},
		{"stamped 5 s after", 5 * time.Second, "change 2 computed again"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, c1, pod, at := twoEndpoints()
			recomputed := at(2 * time.Second)
			s.endpointsChanged(shard(c1, ep("10.0.0.1", collections.Healthy), ep("10.0.0.2", collections.Healthy)),
				shard(c1, ep("10.0.0.1", collections.Healthy)), recomputed)
			s.podChanged(pod, nil, recomputed.Add(c.goneAfter))
			tl := s.Timeline("shop/reviews", "outbound|9080||reviews.shop.svc.cluster.local", "10.0.0.2", "", nil)
			gone, again := -1, -1
			for i, e := range tl.Events {
				switch {
				case strings.Contains(e.Text, "seen gone"):
					gone = i
				case strings.Contains(e.Text, "computed again"):
					again = i
				}
			}
			if gone < 0 || again < 0 {
				t.Fatalf("events %v", tl.Events)
			}
			if first := tl.Events[min(gone, again)].Text; !strings.Contains(first, c.first) {
				t.Errorf("first of the two: %q, want %q", first, c.first)
			}
		})
	}
}
