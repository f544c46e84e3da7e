package xds

import (
	"time"
)

// parkAfter is how long a response handed to gRPC may go without its client reading any of it
// before it gives back its place in the send budget (its bytes stay counted until written).
const parkAfter = 200 * time.Millisecond

// outbound is the response a stream has in hand, from its decision until gRPC has written it:
// it waits for its place in the send budget (its ticket), then it is encoded and handed to gRPC,
// which gives its pieces back as it writes them. While it is handed over, a timer checks that
// the client reads: one that reads nothing of it for parkAfter gives back its place, for the
// send timeout ends the stream. It is owned by the stream's goroutine.
type outbound struct {
	resp   *response
	ticket *ticket
	// pool is the handed-over response's (nil before): its pieces come back to it.
	pool  *releasingPool
	timer *time.Timer
	// seen is the progress at the last check, at lastProgress.
	seen         int64
	lastProgress time.Time
	parked       bool
	// payTimer runs until the stream's turn of the stream rate (nil: it owes nothing).
	payTimer *time.Timer
}

// waitUntil holds the stream's next responses until t (its turn of the stream rate).
func (o *outbound) waitUntil(t time.Time) {
	if d := time.Until(t); d > 0 {
		o.payTimer = time.NewTimer(d)
	}
}

// waitsToPay reports whether the stream's responses wait for its turn of the stream rate.
func (o *outbound) waitsToPay() bool { return o.payTimer != nil }

// paid fires at the stream's turn of the stream rate (nil: it waits for none).
func (o *outbound) paid() <-chan time.Time {
	if o.payTimer == nil {
		return nil
	}
	return o.payTimer.C
}

// take puts a decided response in hand and asks for its place: the next part of an answer under
// way goes ahead of new answers.
func (o *outbound) take(st *stream, r *response) {
	n := encodedSize(r, st.delta)
	o.resp = r
	o.ticket = st.srv.budget.lane(n).requestPart(int64(n), st.caller, part{holder: st.id, resuming: r.resuming, delivers: r.delivers, more: r.more, sotw: !st.delta}, st.evict)
}

// holds reports whether a response is in hand and not handed over yet.
func (o *outbound) holds() bool { return o.resp != nil && o.pool == nil }

// handedOver reports whether a response is with gRPC and not written yet.
func (o *outbound) handedOver() bool { return o.pool != nil }

// isGranted reports whether the response in hand has its place.
func (o *outbound) isGranted() bool {
	select {
	case <-o.ticket.ready:
		return true
	default:
		return false
	}
}

// granted fires once the response in hand gets its place (nil: none waits).
func (o *outbound) granted() <-chan struct{} {
	if !o.holds() {
		return nil
	}
	return o.ticket.ready
}

// handOver records that the response went to gRPC through pool, and starts checking that its
// client reads it.
func (o *outbound) handOver(pool *releasingPool, sendTimeout time.Duration) {
	o.pool, o.seen, o.lastProgress, o.parked = pool, 0, time.Now(), false
	every := parkAfter
	if sendTimeout > 0 {
		every = min(every, sendTimeout)
	}
	if o.timer == nil {
		o.timer = time.NewTimer(every)
	} else {
		o.timer.Reset(every)
	}
}

// written fires once the handed-over response is written (nil: none is handed over).
func (o *outbound) written() <-chan struct{} {
	if o.pool == nil {
		return nil
	}
	return o.pool.written
}

// isWritten reports whether a response was handed over and has been written since.
func (o *outbound) isWritten() bool {
	if o.pool == nil {
		return false
	}
	select {
	case <-o.pool.written:
		return true
	default:
		return false
	}
}

// wrote records that the response was written: the stream may decide its next one.
func (o *outbound) wrote() {
	o.timer.Stop()
	o.resp, o.ticket, o.pool = nil, nil, nil
}

// tick fires when the client's reading is due a check (nil: nothing is handed over).
func (o *outbound) tick() <-chan time.Time {
	if o.pool == nil || o.timer == nil {
		return nil
	}
	return o.timer.C
}

// check looks at what the client read since the last check: nothing for parkAfter parks the
// response, nothing for the send timeout (not negative) stalls the stream.
func (o *outbound) check(sendTimeout time.Duration) error {
	now := time.Now()
	if p := o.pool.progress.Load(); p != o.seen {
		o.seen, o.lastProgress = p, now
	}
	idle := now.Sub(o.lastProgress)
	if sendTimeout > 0 && idle >= sendTimeout {
		return errStalled
	}
	if idle >= parkAfter && !o.parked {
		o.parked = true
		o.ticket.park()
	}
	next := parkAfter
	if sendTimeout > 0 {
		next = min(next, sendTimeout-idle)
	}
	o.timer.Reset(next)
	return nil
}

// abandon gives back what the stream holds of the budget as it ends: a place asked for or
// granted, or a response gRPC drops with the stream.
func (o *outbound) abandon() {
	if o.timer != nil {
		o.timer.Stop()
	}
	switch {
	case o.pool != nil:
		o.pool.abandon()
	case o.ticket != nil:
		o.ticket.release()
	}
	o.resp, o.ticket, o.pool = nil, nil, nil
}
