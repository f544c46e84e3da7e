package xds

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
)

// TestEveryResponseGivesItsBudgetBack: every response, the smallest included, is pieces gRPC
// gives back once written (or dropped); the bytes go back to the budget with the last, and not
// before; a large one comes back in pieces, each progress.
func TestEveryResponseGivesItsBudgetBack(t *testing.T) {
	b := newSendBudget(1<<20, 0, NewMetrics(prometheus.NewRegistry()))
	big := make([]byte, 300<<10)
	for name, r := range map[string]*response{
		"empty": {t: tEndpoint, version: "v", nonce: "1"},
		"tiny":  {t: tEndpoint, version: "v", nonce: "2", items: []item{{res: &collections.Resource{Name: "a", TypeURL: tEndpoint.url(), Body: []byte{1}}}}},
		"large": {t: tEndpoint, version: "v", nonce: "3", items: []item{{res: &collections.Resource{Name: "b", TypeURL: tEndpoint.url(), Body: big}}}},
	} {
		for _, delta := range []bool{false, true} {
			n := encodedSize(r, delta)
			tk := b.lane(n).request(int64(n), "c", false, false, nil)
			pool := newReleasingPool(tk)
			var w *wireMessage
			if delta {
				w = encodeDelta(r, pool)
			} else {
				w = encodeSotw(r, pool)
			}
			if got := w.data.Len(); got != n {
				t.Fatalf("%s (delta %v): %d bytes encoded, %d counted", name, delta, got, n)
			}
			if got := b.inFlight(); got != int64(n) {
				t.Fatalf("%s: %d bytes in flight before it is written, want %d", name, got, n)
			}
			w.data.Free() // what gRPC does once it has written the response
			select {
			case <-pool.written:
			default:
				t.Fatalf("%s (delta %v): written and freed, but not given back", name, delta)
			}
			if got := b.inFlight(); got != 0 {
				t.Fatalf("%s (delta %v): %d bytes still in flight", name, delta, got)
			}
			if name == "large" && pool.progress.Load() < int64(len(big)/wirePiece) {
				t.Fatalf("%s (delta %v): %d pieces came back, want one every %d bytes", name, delta, pool.progress.Load(), wirePiece)
			}
		}
	}
}

// TestBudgetLanes: a lane lets responses in while they fit, one caller's in order of arrival;
// one larger than the lane goes alone; a small response is not held back by large ones waiting;
// a waiter whose stream ends leaves the queue.
func TestBudgetLanes(t *testing.T) {
	b := newSendBudget(8<<20, 0, NewMetrics(prometheus.NewRegistry()))
	large := b.large
	first := large.request(large.capacity-10, "c", false, false, nil)
	granted(t, first, true)
	// Each fills the lane: they can only go one after another.
	var waiting []*ticket
	for i := 0; i < 3; i++ {
		waiting = append(waiting, large.request(large.capacity-5, "c", false, false, nil))
		granted(t, waiting[i], false)
	}
	// The small lane is free while the large one has a queue.
	small := b.lane(1000)
	if small != b.small {
		t.Fatal("a 1 000-byte response is not in the small lane")
	}
	s := small.request(1000, "c", false, false, nil)
	granted(t, s, true)
	s.release()
	// A waiter whose stream ends leaves the queue.
	gone := large.request(100, "c", false, false, nil)
	gone.release()
	first.release()
	for i, w := range waiting {
		granted(t, w, true)
		for _, later := range waiting[i+1:] {
			granted(t, later, false)
		}
		w.release()
	}
	granted(t, gone, false)
	// Larger than the lane: alone, once it is empty.
	huge := large.request(2*large.capacity, "c", false, false, nil)
	granted(t, huge, true)
	huge.release()
	if got := b.inFlight(); got != 0 {
		t.Fatalf("%d bytes left in flight", got)
	}
}

// TestBudgetServesCallersInTurn: when places are short, waiters are served one caller after
// another, not in order of arrival: a caller queueing many responses does not push another's
// back; the next part of an answer goes ahead of new answers.
func TestBudgetServesCallersInTurn(t *testing.T) {
	b := newSendBudget(64<<20, 1, NewMetrics(prometheus.NewRegistry())) // one large response at work
	large := b.large
	busy := large.request(100<<10, "a", false, false, nil)
	var order []string
	var tickets []*ticket
	for _, c := range []string{"a", "a", "a", "b", "a", "c"} {
		tickets = append(tickets, large.request(100<<10, c, false, false, nil))
	}
	resuming := large.request(100<<10, "a", true, false, nil)
	busy.release()
	for range len(tickets) + 1 {
		var next *ticket
		for _, tk := range append([]*ticket{resuming}, tickets...) {
			if isGranted(tk) && !tk.released {
				next = tk
			}
		}
		if next == nil {
			t.Fatalf("nothing granted after %v", order)
		}
		if next == resuming {
			order = append(order, "a-resuming")
		} else {
			order = append(order, next.caller)
		}
		next.release()
	}
	want := []string{"a-resuming", "a", "b", "c", "a", "a", "a"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("granted in order %v, want %v", order, want)
	}
}

// TestParkedResponsesGiveBackTheirPlace: a response whose client reads nothing gives back its
// place (its bytes stay taken) and no longer keeps the large lane closed as a small one; when
// parked bytes keep a waiter out, the one parked longest is evicted.
func TestParkedResponsesGiveBackTheirPlace(t *testing.T) {
	b := newSendBudget(8<<20, 1, NewMetrics(prometheus.NewRegistry()))
	large := b.large
	evicted := make(chan struct{}, 1)
	unread := large.request(200<<10, "a", false, false, func() { evicted <- struct{}{} })
	next := large.request(200<<10, "b", false, false, nil)
	granted(t, next, false)
	unread.park()
	granted(t, next, true)
	if got := b.inFlight(); got != 400<<10 {
		t.Fatalf("%d bytes in flight, want the parked response's and the next", got)
	}
	next.release()
	// A small response at work keeps the large lane from taking a new one while it has one at
	// work; parked, it does not.
	b2 := newSendBudget(8<<20, 2, NewMetrics(prometheus.NewRegistry()))
	atWork := b2.large.request(200<<10, "a", false, false, nil)
	s := b2.small.request(10<<10, "a", false, false, nil)
	behind := b2.large.request(200<<10, "c", false, false, nil)
	granted(t, behind, false)
	s.park()
	granted(t, behind, true)
	for _, tk := range []*ticket{atWork, s, behind} {
		tk.release()
	}
	if got := b2.inFlight(); got != 0 {
		t.Fatalf("%d bytes left in flight", got)
	}
	// Parked bytes that keep a waiter out: the one parked longest is evicted, and its bytes come
	// back once its stream ends.
	full := large.request(large.capacity-(300<<10), "d", false, false, func() { t.Error("the newer parked response was evicted") })
	full.park()
	waiter := large.request(200<<10, "e", false, false, nil)
	select {
	case <-evicted:
	default:
		t.Fatal("parked responses hold the bytes a waiter needs, and none was evicted")
	}
	granted(t, waiter, false)
	unread.release() // its stream ended: gRPC dropped it
	granted(t, waiter, true)
	waiter.release()
	full.release()
	if got := b.inFlight(); got != 0 {
		t.Fatalf("%d bytes left in flight", got)
	}
}

// TestLargeDeliveriesAreNotHeldBehindSmallOnes: while small responses are always at work (a
// steady stream of changes), the large lane still takes a new answer only once its last one is
// done, but takes large deliveries — the folded changes of clients far behind — up to its
// places; a delivery queued behind a held answer goes once the answer does.
func TestLargeDeliveriesAreNotHeldBehindSmallOnes(t *testing.T) {
	b := newSendBudget(64<<20, 3, NewMetrics(prometheus.NewRegistry()))
	small := b.small.request(10<<10, "flip", false, false, nil)
	granted(t, small, true)
	first := b.large.request(200<<10, "a", false, true, nil)
	granted(t, first, true) // the lane held nothing
	second := b.large.request(200<<10, "b", false, true, nil)
	granted(t, second, true)
	third := b.large.request(200<<10, "c", false, true, nil)
	granted(t, third, true)
	fourth := b.large.request(200<<10, "d", false, true, nil)
	granted(t, fourth, false) // three places
	first.release()
	granted(t, fourth, true)
	// An answer (a first request's) waits while small ones are at work and the lane has one.
	answer := b.large.request(200<<10, "e", false, false, nil)
	granted(t, answer, false)
	for _, tk := range []*ticket{second, third} {
		tk.release()
	}
	granted(t, answer, false)
	fourth.release()
	granted(t, answer, true) // the lane emptied
	later := b.large.request(200<<10, "f", false, true, nil)
	granted(t, later, true)
	for _, tk := range []*ticket{answer, later, small} {
		tk.release()
	}
	if got := b.inFlight(); got != 0 {
		t.Fatalf("%d bytes left in flight", got)
	}
}

func isGranted(tk *ticket) bool {
	select {
	case <-tk.ready:
		return true
	default:
		return false
	}
}

func granted(t *testing.T, tk *ticket, want bool) {
	t.Helper()
	if got := isGranted(tk); got != want {
		t.Fatalf("a ticket of %d bytes of %s: granted %v, want %v", tk.n, tk.caller, got, want)
	}
}

// TestConnectionsAreForgottenWhenTheyEnd: the server knows its clients' connections (to close a
// stalled one) only while they are open.
func TestConnectionsAreForgottenWhenTheyEnd(t *testing.T) {
	fs := startFake(t)
	fs.src.set(tEndpoint.url(), "e0")
	var ccs []*grpc.ClientConn
	for i := 0; i < 5; i++ {
		cc, err := adsclient.Dial(fs.addr)
		if err != nil {
			t.Fatal(err)
		}
		s, err := adsclient.Open(context.Background(), cc, sidecarNode(i))
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Request(tEndpoint.url(), "e0")
		if _, err := s.Recv(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		ccs = append(ccs, cc)
	}
	// The fake's own connection is not open: it has made no call.
	if n := fs.srv.clientConns.size(); n != 5 {
		t.Fatalf("%d connections known, want 5", n)
	}
	for _, cc := range ccs {
		_ = cc.Close()
	}
	fixtures.Polling("a connection is forgotten when gRPC reports its end, which tests cannot hear").
		Await(t, 10*time.Second, "no connection known after the five closed", func() (bool, string) {
			n := fs.srv.clientConns.size()
			return n == 0, fmt.Sprintf("%d connections known", n)
		})
}

// TestDrainEndsStreamsSpreadOverItsTime: once the server closes, a new stream is refused; Drain
// ends the open streams one after another over its time, each with UNAVAILABLE.
func TestDrainEndsStreamsSpreadOverItsTime(t *testing.T) {
	fs := startFake(t)
	fs.src.set(tEndpoint.url(), "e0")
	var streams []*adsclient.Stream
	for i := 0; i < 5; i++ {
		s, err := adsclient.Open(context.Background(), fs.cc, sidecarNode(i))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_ = s.Request(tEndpoint.url(), "e0")
		if _, err := s.Recv(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	fs.srv.Close()
	if fs.srv.Serving() {
		t.Fatal("a closed server says it is serving")
	}
	late, err := adsclient.Open(context.Background(), fs.cc, sidecarNode(9))
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	_ = late.Request(tEndpoint.url(), "e0")
	if _, err := late.Recv(10 * time.Second); status.Code(err) != codes.Unavailable {
		t.Fatalf("a stream opened after Close: %v, want Unavailable", err)
	}
	start := time.Now()
	go fs.srv.Drain(context.Background(), 400*time.Millisecond)
	var ended []time.Duration
	for i, s := range streams {
		_, err := s.Recv(10 * time.Second)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("stream %d: %v, want Unavailable", i, err)
		}
		ended = append(ended, time.Since(start))
	}
	// Five streams over 400 ms: the last ends at least 4 steps (320 ms) after the first.
	if spread := ended[len(ended)-1] - ended[0]; spread < 300*time.Millisecond {
		t.Fatalf("the streams ended within %v of each other (%v), want them spread over the drain", spread, ended)
	}
}

// TestOnlyChangesAreDeliveries: a response is a delivery (let in the large lane beside small
// ones) only if each resource is a newer version of one its client holds; a name newly
// subscribed or a forced resend of the version held makes it an answer.
func TestOnlyChangesAreDeliveries(t *testing.T) {
	for _, c := range []struct {
		name  string
		items []item
		want  bool
	}{
		{"changes only", []item{{id: 1, update: true}, {id: 2, update: true}}, true},
		{"removals only", nil, true},
		{"a name newly subscribed among changes", []item{{id: 1, update: true}, {id: 2}}, false},
		{"a forced resend", []item{{id: 3}}, false},
	} {
		if got := onlyUpdates(&response{items: c.items}); got != c.want {
			t.Errorf("%s: delivery %v, want %v", c.name, got, c.want)
		}
	}
}

// TestAnAnswerInPartsKeepsItsPlace: between two parts of an answer (the part written, its ACK,
// the next part decided) the large lane keeps the answer's place: a new answer waits and the
// next part is let in at once, so that a herd's proxies complete one after another rather than
// all together at the end; a delivery nothing waits before is not held by the claim. A claim lasts its lease (a
// client slow to ACK holds nobody's place for longer): past it, a new answer is let in with no
// other event. A stream's end gives its claim back.
func TestAnAnswerInPartsKeepsItsPlace(t *testing.T) {
	newLarge := func(lease time.Duration) *budgetLane {
		b := newSendBudget(64<<20, 1, NewMetrics(prometheus.NewRegistry()))
		b.large.claimLease = lease
		return b.large
	}
	// claimed starts answers on l until as many are in progress as it lets start (one at work
	// per place, each written and keeping its claim), the first by holder s1.
	claimed := func(l *budgetLane) {
		t.Helper()
		for i := range l.inProgress(false) {
			p := l.requestPart(200<<10, "a", part{holder: fmt.Sprint("s", i+1), more: true}, nil)
			granted(t, p, true)
			p.release() // written; its client's ACK and the next part's plan follow
		}
	}
	large := newLarge(time.Hour)
	claimed(large)
	delivery := large.requestPart(200<<10, "c", part{holder: "d", delivers: true}, nil)
	granted(t, delivery, true)
	delivery.release()
	fresh := large.requestPart(200<<10, "b", part{holder: "new", more: true}, nil)
	granted(t, fresh, false)
	last := large.requestPart(200<<10, "a", part{holder: "s1", resuming: true}, nil)
	granted(t, last, true)
	last.release() // the answer's last part: no claim left
	granted(t, fresh, true)
	fresh.release()

	// A state-of-the-world client's answer starts past a delta one's bound, up to its own: its
	// client's ACK repeats every name, and the places idle longer between its parts.
	mixed := newLarge(time.Hour)
	claimed(mixed)
	if mixed.inProgress(true) <= mixed.inProgress(false) {
		t.Fatalf("state of the world may have %d answers in progress, delta %d", mixed.inProgress(true), mixed.inProgress(false))
	}
	for i := mixed.inProgress(false); i < mixed.inProgress(true); i++ {
		p := mixed.requestPart(200<<10, "e", part{holder: fmt.Sprint("w", i), more: true, sotw: true}, nil)
		granted(t, p, true)
		p.release()
	}
	over := mixed.requestPart(200<<10, "e", part{holder: "w-over", more: true, sotw: true}, nil)
	granted(t, over, false)
	mixed.unclaim("s1")
	granted(t, over, true)

	// More answers may be in progress than there are places: the places one leaves idle between
	// its parts carry another's.
	b := newSendBudget(64<<20, 2, NewMetrics(prometheus.NewRegistry()))
	b.large.claimLease = time.Hour
	n := b.large.inProgress(false)
	if n <= b.large.slots {
		t.Fatalf("%d answers in progress on %d places", n, b.large.slots)
	}
	var started []*ticket
	for i := range n + 1 {
		s := fmt.Sprint("s", i)
		started = append(started, b.large.requestPart(200<<10, s, part{holder: s, more: true}, nil))
	}
	for i, tk := range started[:n] {
		if i >= b.large.slots {
			granted(t, tk, false) // the places are at work
			started[i-b.large.slots].release()
		}
		granted(t, tk, true)
	}
	for _, tk := range started[n-b.large.slots : n] {
		tk.release()
	}
	granted(t, started[n], false)
	b.large.unclaim("s0")
	granted(t, started[n], true)

	// A claim nobody takes lapses: the waiter is let in by the lease's end alone.
	lapsing := newLarge(20 * time.Millisecond)
	claimed(lapsing)
	waiter := lapsing.requestPart(200<<10, "b", part{holder: "new"}, nil)
	select {
	case <-waiter.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("a claim nobody took still held the place 10 s after its lease")
	}
	waiter.release()

	// A last part small enough for the small lane gives the large lane's claim back.
	smallLast := newSendBudget(64<<20, 1, NewMetrics(prometheus.NewRegistry()))
	smallLast.large.claimLease = time.Hour
	claimed(smallLast.large)
	waiter = smallLast.large.requestPart(200<<10, "b", part{holder: "new"}, nil)
	granted(t, waiter, false)
	tail := smallLast.small.requestPart(10<<10, "a", part{holder: "s1", resuming: true}, nil)
	granted(t, tail, true)
	granted(t, waiter, true)
	tail.release()
	waiter.release()

	// A stream that ends between its parts gives its claim back.
	ending := newLarge(time.Hour)
	claimed(ending)
	waiter = ending.requestPart(200<<10, "b", part{holder: "new"}, nil)
	granted(t, waiter, false)
	ending.unclaim("s1")
	granted(t, waiter, true)
	waiter.release()
	for i := 2; i <= ending.inProgress(false); i++ {
		ending.unclaim(fmt.Sprint("s", i))
	}
	if n := ending.liveClaimsLocked(); n != 0 || ending.taken != 0 {
		t.Fatalf("%d claims and %d bytes left", n, ending.taken)
	}
}

// TestAClientThatNeverACKsHoldsNoPlace: with one large place, clients that read the first part
// of their answers and never ACK them keep those answers' claims only for the lease, however many
// they are; another client's answer, in parts too, then goes out whole.
func TestAClientThatNeverACKsHoldsNoPlace(t *testing.T) {
	fs := startFake(t, func(o *Options) { o.Limits = Limits{StreamRate: -1, ResponseBytes: 128 << 10, LargeResponses: 1} })
	names := fs.src.setBig(tEndpoint.url(), 300, 1<<10) // 300 KB of CLAs: three parts of the large lane
	// As many clients as answers may be in progress read the first part of theirs and never ACK it.
	for i := range fs.srv.budget.large.inProgress(false) {
		mute, err := adsclient.OpenDelta(context.Background(), fs.cc, sidecarNode(10+i))
		if err != nil {
			t.Fatal(err)
		}
		defer mute.Close()
		_ = mute.Subscribe(tEndpoint.url(), names, nil)
		if r := recvDeltaType(t, mute, tEndpoint.url()); len(r.Resources) == len(names) {
			t.Fatalf("the first answer came whole (%d CLAs): the test needs it in parts", len(r.Resources))
		}
	}
	// Another client asks for the same.
	other, err := adsclient.OpenDelta(context.Background(), fs.cc, sidecarNode(2))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_ = other.Subscribe(tEndpoint.url(), names, nil)
	if parts := recvDeltaCLAs(t, other, names, "another client's answer beside ones that never ACK"); parts < 2 {
		t.Fatalf("the other answer in %d parts: the test wants several", parts)
	}
}
