package xds

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The send budget bounds the bytes of the responses the server has handed to gRPC and not yet
// seen written to their connections, or is about to encode: a reconnect storm of a thousand
// proxies, each first answered with megabytes, is served a budget's worth at a time instead of
// being encoded all at once. A response is decided (which resources it carries: no bytes are
// built), then waits for its place (a ticket), then is encoded and handed to gRPC; gRPC frees its
// buffers as it writes them (or once the stream is gone), which gives the bytes back.
//
// Small responses (a changed endpoint's CLA) have a lane of their own, so that a flip reaches the
// connected proxies while the large first answers of a herd wait for the rest. The large lane
// also bounds how many responses it has at work at once: the herd is served a few proxies at a
// time, each to the end of its answer (the next part of an answer goes before a new answer), so
// that proxies complete one after another rather than all at the end, and the few goroutines at
// work leave the cores to the flips. It takes no new response while small ones are at work.
//
// An answer in parts keeps its claim on the large lane between its parts: a part written, its
// client's ACK and the next part's plan take a round trip, during which a new answer would take
// the place; with clients reading as fast as they are written to, every proxy of a herd then
// had its answer started and all completed together at the end. A new answer starts only while
// the answers at work and those claimed are fewer than inProgress (half again the places for a
// delta client's answer, three times for a state-of-the-world one's). A claim lasts
// claimLease from the part's write: a client slow to ACK loses it (its next part still goes
// ahead of new answers), so a client that never ACKs holds nobody's place for longer.
//
// Places are shared, not first-come. Waiters are served in turn by caller (an identity, or a
// connection on the plaintext port), so one caller's many streams do not push another's back.
// A response whose client reads nothing of it for a while is parked: it gives back its place (its
// bytes stay counted until written), and no longer holds the large lane closed. When parked
// responses hold so many bytes that a waiter cannot fit, the one parked longest is evicted: its
// stream is ended as a stalled one, and its connection closed, which gives its bytes back.
type sendBudget struct {
	small, large *budgetLane
	// smallMax is the largest response of the small lane.
	smallMax int
	metrics  *Metrics
	// taken is the bytes taken in both lanes, peak the most ever taken at once; smallAtWork the
	// small responses in flight and not parked.
	taken, peak, smallAtWork atomic.Int64
}

// budgetLane is one lane of the budget: bytes and places taken, the tickets waiting (in turn by
// caller, those resuming an answer first), and the parked ones.
type budgetLane struct {
	name     string
	capacity int64
	// slots bounds the responses at work at once (0: no bound).
	slots   int
	metrics *Metrics
	budget  *sendBudget

	mu       sync.Mutex
	taken    int64
	atWork   int
	resuming fairQueue
	waiting  fairQueue
	// claims are the answers in parts between two parts, by holder (its stream), each until
	// its expiry; claimOrder the same in order of expiry (an entry whose holder claimed again
	// since, or resumed, is stale); claimLease how long a claim lasts; claimTimer wakes the lane
	// as the first claim left expires.
	claims     map[string]time.Time
	claimOrder []claim
	claimLease time.Duration
	claimTimer *time.Timer
	// parked are the granted tickets whose client stopped reading, oldest first.
	parked []*ticket
}

// claim is an answer's claim on its next part's place: its holder, until when.
type claim struct {
	holder string
	until  time.Time
}

// claimLease is how long an answer in parts keeps its place between two parts: the round trip
// of a delta client reading as fast as it is written to fits in it; a state-of-the-world ACK,
// which repeats every name the client subscribes to (ten thousand: 700 KB), does not, and held a
// place idle (with a second's lease the large SotW herd took 132 s instead of 63–81).
const claimLease = 100 * time.Millisecond

// ticket is one response's place in the budget, from its request to its release.
type ticket struct {
	lane   *budgetLane
	n      int64
	caller string
	// holder is the stream the response goes to, and more says that a next part of its answer
	// follows it (the lane keeps that part's claim once this one is written).
	holder   string
	more     bool
	resuming bool
	// sotw: the response goes to a state-of-the-world client (inProgress).
	sotw bool
	// delivers: the response carries changes to names its client holds, not an answer to a
	// request or a look at every name (delivery).
	delivers bool
	// ready is closed once the place is granted.
	ready chan struct{}
	// evict ends the ticket's stream (set by the stream; called without the lane's lock).
	evict func()
	asked time.Time

	// Under the lane's lock.
	granted, parked, released, evicting bool
}

// Default budget figures: the whole budget without a memory limit to derive it from, the share
// of it kept for small responses, and the largest small response.
const (
	DefaultSendBudget  = 1 << 30
	smallLaneShare     = 8
	smallResponseBytes = 64 << 10
)

// DefaultLargeResponses is the default bound on large responses at work at once: 4 per CPU.
func DefaultLargeResponses() int { return 4 * runtime.GOMAXPROCS(0) }

func newSendBudget(total int64, largeResponses int, m *Metrics) *sendBudget {
	if total <= 0 {
		total = DefaultSendBudget
	}
	small := max(total/smallLaneShare, 4*smallResponseBytes)
	b := &sendBudget{smallMax: smallResponseBytes, metrics: m}
	b.small = &budgetLane{name: "small", capacity: small, metrics: m, budget: b}
	b.large = &budgetLane{name: "large", capacity: max(total-small, 4*smallResponseBytes), slots: max(largeResponses, 0), metrics: m, budget: b, claimLease: claimLease}
	m.SendBudget.Set(float64(b.small.capacity + b.large.capacity))
	return b
}

// lane is the lane of a response of n bytes.
func (b *sendBudget) lane(n int) *budgetLane {
	if n <= b.smallMax {
		return b.small
	}
	return b.large
}

// capacity is the budget of both lanes.
func (b *sendBudget) capacity() int64 { return b.small.capacity + b.large.capacity }

// inFlight is the bytes taken in both lanes.
func (b *sendBudget) inFlight() int64 { return b.taken.Load() }

// request asks for n bytes and a place for a response of caller's: the ticket is granted at once
// when it fits and nobody waits before it, else it waits its turn (ready is closed then).
func (l *budgetLane) request(n int64, caller string, resuming, delivers bool, evict func()) *ticket {
	return l.requestPart(n, caller, part{resuming: resuming, delivers: delivers}, evict)
}

// part is what the budget knows of a response to a stream: holder is the stream (the lane keeps
// its answer's claim between parts); resuming: it is the next part of an answer; delivers: it
// carries changes to names its client holds, not an answer to a request or a look at every name;
// more: a next part follows it; sotw: its client is a state-of-the-world one, whose ACK repeats
// every name it subscribes to.
type part struct {
	holder                         string
	resuming, delivers, more, sotw bool
}

// requestPart is request for a response to a stream (p). A resuming part takes its answer's
// claim, whichever lane it goes to (a last part may be small).
func (l *budgetLane) requestPart(n int64, caller string, p part, evict func()) *ticket {
	resuming, holder := p.resuming, p.holder
	if large := l.budget.large; resuming && holder != "" && l != large {
		large.unclaim(holder)
	}
	t := &ticket{lane: l, n: n, caller: caller, holder: holder, more: p.more, resuming: resuming, delivers: p.delivers, sotw: p.sotw,
		ready: make(chan struct{}), evict: evict, asked: time.Now()}
	l.mu.Lock()
	if resuming && holder != "" {
		delete(l.claims, holder)
	}
	if l.resuming.empty() && (resuming || l.waiting.empty()) && l.fits(t) {
		l.grantLocked(t)
		l.mu.Unlock()
		return t
	}
	if resuming {
		l.resuming.push(t)
	} else {
		l.waiting.push(t)
	}
	l.metrics.WaitingStreams.Inc()
	victim := l.victimLocked()
	l.mu.Unlock()
	victim.evictNow()
	return t
}

// fits reports whether t's bytes and a place fit (l.mu held); a new answer needs fewer answers
// at work or claimed than inProgress, and then anything fits a lane that holds nothing. The
// large lane takes no new answer while small responses are at work (a flip going out to every
// proxy): those before it finish, and the cores go to the small ones. A large delivery (the
// changes of a client far behind, folded) is let in as its places allow: it is a flip too, many
// of them, and under a steady stream of changes small responses are always at work — holding
// deliveries to one at a time then starved every client behind.
func (l *budgetLane) fits(t *ticket) bool {
	if l.slots > 0 && !t.resuming && !t.delivers && l.atWork+l.liveClaimsLocked() >= l.inProgress(t.sotw) {
		return false // a new answer: as many answers at work or between their parts as allowed
	}
	if l.taken == 0 {
		return true
	}
	if l == l.budget.large && !t.delivers && l.budget.smallAtWork.Load() > 0 && l.atWork > 0 {
		return false
	}
	return l.taken+t.n <= l.capacity && (l.slots == 0 || l.atWork < l.slots)
}

// inProgress bounds the answers at work or between two parts when a new answer starts, so that
// the places an answer leaves idle for its client's round trip carry others' parts: half again
// the places for a delta client's answer, whose round trip is short (the medium herd took
// 608–624 ms with exactly the places, 523–570 with half again, 580–669 with three times); three
// times for a state-of-the-world client's, whose ACK repeats every name it subscribes to (700 KB
// for ten thousand clusters: the large SotW herd took 62–67 s with half again, its places idle,
// 54–57 s with three times).
func (l *budgetLane) inProgress(sotw bool) int {
	if sotw {
		return 3 * l.slots
	}
	return l.slots + l.slots/2
}

// liveClaimsLocked is the number of claims not yet expired, dropping the expired ones (l.mu held).
func (l *budgetLane) liveClaimsLocked() int {
	now := time.Now()
	for len(l.claimOrder) > 0 && !l.claimOrder[0].until.After(now) {
		c := l.claimOrder[0]
		l.claimOrder = l.claimOrder[1:]
		if until, ok := l.claims[c.holder]; ok && until.Equal(c.until) {
			delete(l.claims, c.holder)
		}
	}
	if len(l.claims) == 0 {
		l.claimOrder = nil // no stale entries kept once nothing is claimed
	}
	return len(l.claims)
}

// claimLocked keeps the place of the next part of holder's answer for the lease, and wakes the
// lane as the first claim left expires (l.mu held).
func (l *budgetLane) claimLocked(holder string) {
	if l.claims == nil {
		l.claims = map[string]time.Time{}
	}
	until := time.Now().Add(l.claimLease)
	l.claims[holder] = until
	l.claimOrder = append(l.claimOrder, claim{holder: holder, until: until})
	l.armClaimTimerLocked()
}

// armClaimTimerLocked wakes the lane when the first claim left expires, if any (l.mu held).
func (l *budgetLane) armClaimTimerLocked() {
	if l.liveClaimsLocked() == 0 || l.claimTimer != nil {
		return
	}
	l.claimTimer = time.AfterFunc(time.Until(l.claimOrder[0].until), func() {
		l.mu.Lock()
		l.claimTimer = nil
		victim := l.grantWaitersLocked()
		l.armClaimTimerLocked()
		l.mu.Unlock()
		victim.evictNow()
	})
}

// grantLocked gives t its bytes and place (l.mu held).
func (l *budgetLane) grantLocked(t *ticket) {
	t.granted = true
	l.taken += t.n
	l.atWork++
	if l == l.budget.small {
		l.budget.smallAtWork.Add(1)
	}
	l.metrics.InFlight.Add(float64(t.n))
	total := l.budget.taken.Add(t.n)
	for p := l.budget.peak.Load(); total > p && !l.budget.peak.CompareAndSwap(p, total); p = l.budget.peak.Load() {
	}
	close(t.ready)
}

// grantWaitersLocked lets in the waiters that now fit, in turn, those resuming first (l.mu
// held). It returns a parked ticket to evict when parked responses hold the bytes the first
// waiter needs.
func (l *budgetLane) grantWaitersLocked() *ticket {
	for _, q := range []*fairQueue{&l.resuming, &l.waiting} {
		for t := q.peek(); t != nil; t = q.peek() {
			if !l.fits(t) {
				return l.victimLocked()
			}
			q.pop()
			l.metrics.WaitingStreams.Dec()
			l.metrics.BudgetWait.Observe(time.Since(t.asked).Seconds())
			l.grantLocked(t)
		}
	}
	return nil
}

// victimLocked is the parked ticket to evict so that the first waiter can fit: the one parked
// longest, when the parked bytes are what keeps the waiter out (l.mu held).
func (l *budgetLane) victimLocked() *ticket {
	t := l.resuming.peek()
	if t == nil {
		t = l.waiting.peek()
	}
	if t == nil || len(l.parked) == 0 || l.taken+t.n <= l.capacity {
		return nil
	}
	for _, p := range l.parked {
		if !p.evicting {
			p.evicting = true
			return p
		}
	}
	return nil
}

// evictNow ends the stream of a ticket chosen to be evicted (nil: none).
func (t *ticket) evictNow() {
	if t != nil && t.evict != nil {
		t.evict()
	}
}

// park gives back the ticket's place while its client reads nothing; its bytes stay taken.
func (t *ticket) park() {
	l := t.lane
	l.mu.Lock()
	if !t.granted || t.parked || t.released {
		l.mu.Unlock()
		return
	}
	t.parked = true
	l.atWork--
	l.parked = append(l.parked, t)
	small := l == l.budget.small
	victim := l.grantWaitersLocked()
	l.mu.Unlock()
	victim.evictNow()
	if small && l.budget.smallAtWork.Add(-1) == 0 {
		l.budget.large.wake()
	}
}

// release gives the ticket's bytes and place back (written, or its stream gone), or takes it
// out of the queue if it still waits.
func (t *ticket) release() {
	l := t.lane
	l.mu.Lock()
	if t.released {
		l.mu.Unlock()
		return
	}
	t.released = true
	if !t.granted {
		if (t.resuming && l.resuming.remove(t)) || l.waiting.remove(t) {
			l.metrics.WaitingStreams.Dec()
		}
		l.mu.Unlock()
		return
	}
	l.taken -= t.n
	l.budget.taken.Add(-t.n)
	l.metrics.InFlight.Sub(float64(t.n))
	wasAtWork := !t.parked
	if t.more && t.holder != "" && l.slots > 0 {
		l.claimLocked(t.holder) // its next part's place, for the round trip to it
	}
	if wasAtWork {
		l.atWork--
	} else {
		for i, p := range l.parked {
			if p == t {
				l.parked = append(l.parked[:i], l.parked[i+1:]...)
				break
			}
		}
	}
	victim := l.grantWaitersLocked()
	l.mu.Unlock()
	victim.evictNow()
	if wasAtWork && l == l.budget.small && l.budget.smallAtWork.Add(-1) == 0 {
		l.budget.large.wake()
	}
}

// unclaim forgets the claim of holder's answer (its stream has ended, or its next part went to
// the small lane), letting in the waiters that then fit.
func (l *budgetLane) unclaim(holder string) {
	l.mu.Lock()
	if _, ok := l.claims[holder]; !ok {
		l.mu.Unlock()
		return
	}
	delete(l.claims, holder)
	victim := l.grantWaitersLocked()
	l.mu.Unlock()
	victim.evictNow()
}

// wake lets in the waiters that now fit.
func (l *budgetLane) wake() {
	l.mu.Lock()
	victim := l.grantWaitersLocked()
	l.mu.Unlock()
	victim.evictNow()
}

func (l *budgetLane) used() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.taken
}
