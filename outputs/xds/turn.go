package xds

import (
	"time"

	"github.com/krteds/krteds/collections"
)

// turn takes what the inbox holds, then sends what is due: the response in hand once its place
// is granted, else the next one decided. One response is in hand at a time, until written.
func (st *stream) turn(v variant) error {
	st.takeInbox()
	if st.evicted.Load() {
		return errStalled
	}
	if st.out.isWritten() {
		st.out.wrote()
	}
	for !st.out.handedOver() && !st.out.waitsToPay() {
		if st.out.holds() {
			if !st.out.isGranted() {
				return nil
			}
			if err := st.send(v); err != nil {
				return err
			}
			continue
		}
		r := st.nextResponse()
		if r == nil {
			return nil
		}
		st.out.take(st, r)
	}
	return nil
}

// takeInbox applies what other goroutines left: a new view, marks, questions.
func (st *stream) takeInbox() {
	in := st.inbox.take()
	if in.viewSet {
		st.setView(in.view)
	}
	for t := range numTypes {
		if sb := st.subs[t]; sb != nil {
			sb.mark(in.ids[t], in.all[t])
		}
	}
	st.takenAt = time.Now().UnixNano()
	for _, a := range in.asks {
		a.f()
		close(a.done)
	}
}

// setView sets the stream's view; every name is looked at again, unless it is the view the
// stream has.
func (st *stream) setView(v *collections.View) {
	if st.view != nil && v != nil && st.view.Equals(*v) {
		return
	}
	st.view = v
	for _, sb := range st.subs {
		if sb != nil {
			sb.dirtyAll = true
		}
	}
}

// nextResponse decides the next response: the first type with one due, in type order; then the
// answers to unknown types, last: one proves to a client that everything due before its request
// has been sent.
func (st *stream) nextResponse() *response {
	for t := range numTypes {
		if r := st.next(typ(t)); r != nil {
			return r
		}
	}
	return st.nextAnswer()
}

// send encodes the response in hand, its place granted, and hands it to gRPC.
func (st *stream) send(v variant) error {
	r := st.out.resp
	pool := newReleasingPool(st.out.ticket)
	var m *wireMessage
	if st.delta {
		m = encodeDelta(r, pool)
	} else {
		m = encodeSotw(r, pool)
	}
	st.out.handOver(pool, st.srv.limits.SendTimeout)
	start := time.Now()
	if err := v.send(m); err != nil {
		if r.other == "" {
			st.srv.metrics.pushFailed(r.t)
		}
		return err
	}
	st.srv.pushed(r, start)
	if sb := st.subs[r.t]; r.other == "" && sb != nil {
		sb.lag.sending.handed = start.UnixNano()
	}
	return nil
}
