package xds

import (
	"container/list"
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/mem"
)

// The send budget bounds the bytes of the responses the server has handed to gRPC and not yet
// seen written to their connections, or is about to encode: a reconnect storm of a thousand
// proxies, each first answered with megabytes, is served a budget's worth at a time instead of
// being encoded all at once. A response is decided (which resources it carries: no bytes are
// built), then waits for its size, then is encoded and handed to gRPC; gRPC frees its buffers
// once written (or once the stream is gone), which gives the bytes back.
//
// Responses wait in order of arrival. Small ones (a changed endpoint's CLA) have a lane of their
// own, so that a flip reaches the connected proxies while the large first answers of a herd wait
// for the rest. The large lane also bounds how many responses it has in flight at once: the
// herd is served a few proxies at a time, each to the end of its answer (the next part of an
// answer goes before a new answer), so that proxies complete one after another rather than all
// at the end, and the few goroutines at work leave the cores to the flips. A response larger than
// its lane's whole budget is let through alone, once the lane is empty: the budget delays it,
// never refuses it.
type sendBudget struct {
	small, large *budgetLane
	// smallMax is the largest response of the small lane.
	smallMax int
	metrics  *Metrics
	// taken is the bytes taken in both lanes, peak the most ever taken at once; smallHolders the
	// small responses in flight.
	taken, peak, smallHolders atomic.Int64
}

// budgetLane is one lane of the budget: bytes and slots taken, and the waiters in order of
// arrival, those resuming an answer first.
type budgetLane struct {
	name     string
	capacity int64
	// slots bounds the responses in flight at once (0: no bound).
	slots   int
	metrics *Metrics
	budget  *sendBudget

	mu       sync.Mutex
	taken    int64
	holders  int
	resuming list.List // of *budgetWaiter: the next parts of answers under way
	waiters  list.List // of *budgetWaiter
}

type budgetWaiter struct {
	n     int64
	ready chan struct{}
}

// Default budget figures: the whole budget without a memory limit to derive it from, the share
// of it kept for small responses, and the largest small response.
const (
	DefaultSendBudget  = 1 << 30
	smallLaneShare     = 8
	smallResponseBytes = 64 << 10
)

// DefaultLargeResponses is the default bound on large responses in flight at once: 4 per CPU.
func DefaultLargeResponses() int { return 4 * runtime.GOMAXPROCS(0) }

func newSendBudget(total int64, largeResponses int, m *Metrics) *sendBudget {
	if total <= 0 {
		total = DefaultSendBudget
	}
	small := max(total/smallLaneShare, 4*smallResponseBytes)
	b := &sendBudget{smallMax: smallResponseBytes, metrics: m}
	b.small = &budgetLane{name: "small", capacity: small, metrics: m, budget: b}
	b.large = &budgetLane{name: "large", capacity: max(total-small, 4*smallResponseBytes), slots: max(largeResponses, 0), metrics: m, budget: b}
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

// acquire takes n bytes and a slot of lane l, waiting in order of arrival until they fit (the
// next part of an answer under way, resuming, before the others); it fails only when ctx ends
// first.
func (l *budgetLane) acquire(ctx context.Context, n int64, resuming bool) error {
	l.mu.Lock()
	if l.resuming.Len() == 0 && (resuming || l.waiters.Len() == 0) && l.fits(n) {
		l.take(n)
		l.mu.Unlock()
		return nil
	}
	queue := &l.waiters
	if resuming {
		queue = &l.resuming
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	e := queue.PushBack(w)
	l.metrics.WaitingStreams.Inc()
	l.mu.Unlock()
	start := time.Now()
	select {
	case <-w.ready:
		l.metrics.BudgetWait.Observe(time.Since(start).Seconds())
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		select {
		case <-w.ready:
			// Granted meanwhile: give it back.
			l.mu.Unlock()
			l.release(n)
		default:
			queue.Remove(e)
			l.metrics.WaitingStreams.Dec()
			l.grant()
			l.mu.Unlock()
		}
		return ctx.Err()
	}
}

// fits reports whether n more bytes and a slot fit (l.mu held); anything fits an empty lane. The
// large lane takes no new response while small ones are under way (a flip going out to every
// proxy): those before it finish, and the cores go to the small ones.
func (l *budgetLane) fits(n int64) bool {
	if l == l.budget.large && l.budget.smallHolders.Load() > 0 && l.holders > 0 {
		return false
	}
	return l.holders == 0 || (l.taken+n <= l.capacity && (l.slots == 0 || l.holders < l.slots))
}

func (l *budgetLane) take(n int64) {
	l.taken += n
	l.holders++
	if l == l.budget.small {
		l.budget.smallHolders.Add(1)
	}
	l.metrics.InFlight.Add(float64(n))
	t := l.budget.taken.Add(n)
	for p := l.budget.peak.Load(); t > p && !l.budget.peak.CompareAndSwap(p, t); p = l.budget.peak.Load() {
	}
}

// release gives n bytes and a slot back and lets the waiters that now fit in, in order.
func (l *budgetLane) release(n int64) {
	l.mu.Lock()
	l.taken -= n
	l.holders--
	l.budget.taken.Add(-n)
	l.metrics.InFlight.Sub(float64(n))
	l.grant()
	l.mu.Unlock()
	if l == l.budget.small && l.budget.smallHolders.Add(-1) == 0 {
		// The small responses are done: the large lane may go on.
		large := l.budget.large
		large.mu.Lock()
		large.grant()
		large.mu.Unlock()
	}
}

// grant lets in the first waiters while they fit, those resuming first (l.mu held).
func (l *budgetLane) grant() {
	for _, q := range []*list.List{&l.resuming, &l.waiters} {
		for e := q.Front(); e != nil; e = q.Front() {
			w := e.Value.(*budgetWaiter)
			if !l.fits(w.n) {
				return
			}
			q.Remove(e)
			l.metrics.WaitingStreams.Dec()
			l.take(w.n)
			close(w.ready)
		}
	}
}

func (l *budgetLane) used() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.taken
}

// releasingPool is the pool a response's framing buffer goes back to: gRPC puts it there once
// every piece of the response has been written (or dropped with its stream), and the response's
// bytes go back to the budget with it.
type releasingPool struct {
	lane *budgetLane
	n    int64
	// written is closed once the response is written; timer stalls the stream meanwhile.
	written chan struct{}
	timer   *time.Timer
	once    sync.Once
}

func (p *releasingPool) Get(size int) *[]byte { return framingBuffers.Get(size) }

func (p *releasingPool) Put(b *[]byte) {
	framingBuffers.Put(b)
	p.done()
}

// abandon gives the response's bytes back without its buffer: its stream has ended, and gRPC
// drops what it still holds of it.
func (p *releasingPool) abandon() { p.done() }

func (p *releasingPool) done() {
	p.once.Do(func() {
		if p.timer != nil {
			p.timer.Stop()
		}
		p.lane.release(p.n)
		close(p.written)
	})
}

var _ mem.BufferPool = (*releasingPool)(nil)

// SendBudget is the bytes of responses in flight now, the most ever in flight at once, and the
// budget.
func (s *Server) SendBudget() (inFlight, peak, capacity int64) {
	return s.budget.inFlight(), s.budget.peak.Load(), s.budget.capacity()
}

// Streams is the number of open streams.
func (s *Server) Streams() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.conns)
}

// Drain ends every open stream, spread evenly over d (at once when d is 0), each with
// UNAVAILABLE: its client reconnects, and where the connection has been told to go (GOAWAY) it
// does so on a new connection, to another replica. It returns once every stream has been told,
// or ctx ends.
func (s *Server) Drain(ctx context.Context, d time.Duration) {
	s.mu.RLock()
	conns := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.RUnlock()
	slices.SortFunc(conns, func(a, b *conn) int { return int(connSeq(a.id) - connSeq(b.id)) })
	if ok, _ := s.logs.disconnects.allow(time.Now()); ok {
		s.log.Info("draining xDS streams", zap.Int("streams", len(conns)), zap.Duration("over", d))
	}
	var step time.Duration
	if len(conns) > 0 {
		step = d / time.Duration(len(conns))
	}
	for i, c := range conns {
		if i > 0 && step > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(step):
			}
		}
		c.drainOnce.Do(func() { close(c.draining) })
	}
}
