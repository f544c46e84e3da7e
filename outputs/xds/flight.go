package xds

import (
	"container/list"
	"context"
	"sync"
	"time"

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
// for the rest. A response larger than its lane's whole budget is let through alone, once the
// lane is empty: the budget delays it, never refuses it.
type sendBudget struct {
	small, large *budgetLane
	// smallMax is the largest response of the small lane.
	smallMax int
	metrics  *Metrics
}

// budgetLane is one lane of the budget: bytes taken, and the waiters in order of arrival.
type budgetLane struct {
	name     string
	capacity int64
	metrics  *Metrics

	mu      sync.Mutex
	taken   int64
	waiters list.List // of *budgetWaiter
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

func newSendBudget(total int64, m *Metrics) *sendBudget {
	if total <= 0 {
		total = DefaultSendBudget
	}
	small := max(total/smallLaneShare, 4*smallResponseBytes)
	b := &sendBudget{
		small:    &budgetLane{name: "small", capacity: small, metrics: m},
		large:    &budgetLane{name: "large", capacity: max(total-small, 4*smallResponseBytes), metrics: m},
		smallMax: smallResponseBytes,
		metrics:  m,
	}
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
func (b *sendBudget) inFlight() int64 { return b.small.used() + b.large.used() }

// acquire takes n bytes of lane l, waiting in order of arrival until they fit; it fails only
// when ctx ends first.
func (l *budgetLane) acquire(ctx context.Context, n int64) error {
	l.mu.Lock()
	if l.waiters.Len() == 0 && l.fits(n) {
		l.take(n)
		l.mu.Unlock()
		return nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	e := l.waiters.PushBack(w)
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
			l.waiters.Remove(e)
			l.metrics.WaitingStreams.Dec()
			l.grant()
			l.mu.Unlock()
		}
		return ctx.Err()
	}
}

// fits reports whether n more bytes fit (l.mu held); anything fits an empty lane.
func (l *budgetLane) fits(n int64) bool { return l.taken == 0 || l.taken+n <= l.capacity }

func (l *budgetLane) take(n int64) {
	l.taken += n
	l.metrics.InFlight.Add(float64(n))
}

// release gives n bytes back and lets the waiters that now fit in, in order.
func (l *budgetLane) release(n int64) {
	l.mu.Lock()
	l.taken -= n
	l.metrics.InFlight.Sub(float64(n))
	l.grant()
	l.mu.Unlock()
}

// grant lets in the first waiters while they fit (l.mu held).
func (l *budgetLane) grant() {
	for e := l.waiters.Front(); e != nil; e = l.waiters.Front() {
		w := e.Value.(*budgetWaiter)
		if !l.fits(w.n) {
			return
		}
		l.waiters.Remove(e)
		l.metrics.WaitingStreams.Dec()
		l.take(w.n)
		close(w.ready)
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
