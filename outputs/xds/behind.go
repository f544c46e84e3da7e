package xds

import (
	"cmp"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/krteds/krteds/outputs/xds/xdsdebug"
)

// How far a stream's client is behind what it subscribes to, and why. A subscription is behind
// from the first change (or request) it has not answered until the client acknowledges a
// response that left nothing to send; the reason is read from where the stream stands (its
// response waiting for the budget, unread, unacknowledged; a response of another type first;
// the names being computed; the client's rejection). All of it is the stream's goroutine's.

// lag is how far a subscription's client is behind.
type lag struct {
	// since is when the oldest change or request no response has taken yet came (unix ns; 0:
	// none).
	since int64
	// sending is what the response decided and not yet acknowledged delivers (zero: none).
	sending delivery
	// rejectedSince: the client rejected a response, and is behind since what it delivered
	// (unix ns; 0: it did not, or acknowledged one since).
	rejectedSince int64
	// currentAsOf: the client acknowledged a response that left nothing to send, decided after
	// every change the stream had been told of by then (unix ns). A version computed earlier
	// for an input change was delivered to it then, or before.
	currentAsOf int64
	// created is when the subscription was made: a change made before is not this client's to
	// measure (as kube-proxy measures only the changes made after it started).
	created int64
	// stale is the report of a lag past the threshold (zero: none).
	stale staleReport
}

// delivery is what a response delivers of its subscription's lag.
type delivery struct {
	// since is the oldest change it answers (unix ns; 0: none); complete: nothing was left
	// to send after it, as of takenAt (when its stream took its inbox).
	since    int64
	complete bool
	takenAt  int64
	// handed is when it went to gRPC (unix ns; 0: not yet); causes are the input changes it
	// delivers.
	handed int64
	causes []timedCause
	// names are the names it sends or removes (sorted items' ids, then removed), for Holders.
	items   []item
	removed int
}

// staleReport is a lag reported past the threshold: since when, the reason and the names it
// counts in the gauge now, and the reason it crossed the threshold with.
type staleReport struct {
	since   int64
	reason  string
	names   int
	crossed string
}

// carries reports whether the response sends a name (its items are sorted by id).
func (d *delivery) carries(id nameID) bool {
	_, ok := slices.BinarySearchFunc(d.items, id, func(it item, id nameID) int { return cmp.Compare(it.id, id) })
	return ok
}

func newLag(now int64) lag { return lag{currentAsOf: now, created: now} }

// marked records changes to send (ids; none: every name).
func (l *lag) marked(ids map[nameID]int64) {
	if l.since != 0 {
		return
	}
	l.since = time.Now().UnixNano()
	for _, at := range ids {
		if at > 0 && at < l.since {
			l.since = at
		}
	}
}

// asked records a request to answer.
func (l *lag) asked(now int64) {
	if l.since == 0 {
		l.since = now
	}
}

// settled records that nothing is left to send and no response was due: the client holds what
// it subscribes to (a resume holding current versions, a change that changed nothing).
func (l *lag) settled() { l.since = 0 }

// planned records a decided response; more: something is left to send after it.
func (l *lag) planned(r *response, more bool, takenAt int64) {
	l.sending = delivery{since: l.since, complete: !more, takenAt: takenAt, items: r.items, removed: len(r.removed), causes: r.causes}
	if !more {
		l.since = 0
	}
}

// acked records the ACK of the response sent, returning what it delivered and the input
// changes it is the first to deliver to this client: a change computed before the client was
// last current reached it then (its resource was computed again for another reason since); a
// change made before the subscription (a client coming back after a move) is not measured.
func (l *lag) acked() (delivery, []timedCause) {
	d := l.sending
	l.sending, l.rejectedSince = delivery{}, 0
	var fresh []timedCause
	for _, c := range d.causes {
		if c.computed >= l.currentAsOf && (c.Trigger == 0 || c.Trigger >= l.created) && (c.Trigger != 0 || c.Seen >= l.created) {
			fresh = append(fresh, c)
		}
	}
	if d.complete && l.since == 0 {
		l.currentAsOf = max(l.currentAsOf, d.takenAt)
	}
	return d, fresh
}

// nacked records the rejection of the response sent: the client keeps what it held before.
func (l *lag) nacked(now int64) delivery {
	d := l.sending
	l.sending = delivery{}
	if l.rejectedSince == 0 {
		l.rejectedSince = d.since
		if l.rejectedSince == 0 {
			l.rejectedSince = now
		}
	}
	return d
}

// behindSince is when the client's lag began (unix ns; 0: it holds what it subscribes to).
func (l *lag) behindSince() int64 {
	out := int64(0)
	for _, t := range []int64{l.since, l.sending.since, l.rejectedSince} {
		if t != 0 && (out == 0 || t < out) {
			out = t
		}
	}
	return out
}

// behind is how the subscription's client is behind now (nil: it is not), on its stream's
// goroutine.
func (st *stream) behind(t typ, sb *subscription) *xdsdebug.Behind {
	since := sb.lag.behindSince()
	if since == 0 {
		return nil
	}
	b := &xdsdebug.Behind{Since: time.Unix(0, since), Names: sb.behindNames()}
	b.Reason, b.Lane = st.waitsOn(t, sb)
	return b
}

// behindNames is how many names a behind subscription has yet to deliver: those to look at
// (every name, when all are), and those of the response awaiting its ACK.
func (sb *subscription) behindNames() int {
	n := len(sb.dirty) + len(sb.sweep) + len(sb.deferred)
	if sb.dirtyAll {
		n = sb.subs.len()
	}
	if sb.inflight {
		n += len(sb.lag.sending.items) + sb.lag.sending.removed
	}
	return n
}

// waitsOn is what a behind subscription waits on, and the lane of the budget it waits for.
func (st *stream) waitsOn(t typ, sb *subscription) (reason, lane string) {
	if sb.lag.rejectedSince != 0 && !sb.inflight {
		return xdsdebug.WaitRejected, ""
	}
	if r := st.out.resp; r != nil && r.other == "" && r.t == t {
		switch {
		case st.out.holds() && !st.out.isGranted():
			return xdsdebug.WaitBudget, st.out.ticket.lane.name
		case st.out.handedOver() && st.out.parked:
			return xdsdebug.WaitNotReading, ""
		case st.out.handedOver():
			return xdsdebug.WaitWriting, ""
		}
	}
	switch {
	case sb.inflight:
		return xdsdebug.WaitNotAcked, ""
	case st.out.waitsToPay():
		return xdsdebug.WaitRate, ""
	case st.out.resp != nil:
		return xdsdebug.WaitQueued, ""
	case st.view == nil || !st.srv.synced.Load():
		return xdsdebug.WaitSync, ""
	case len(sb.deferred) > 0 && len(sb.dirty) == 0 && len(sb.sweep) == 0 && !sb.dirtyAll:
		return xdsdebug.WaitClusters, ""
	}
	return xdsdebug.WaitComputing, ""
}

// staleTick is how often a stream past the threshold looks at its reason again.
const staleTick = time.Second

// audit reports the subscriptions behind for longer than the threshold (the gauge by reason, one
// log line for the stream as it crosses it) and those that caught up (the histogram of how long
// they were stale), and returns when it must look again (zero: nothing is behind).
func (st *stream) audit(now time.Time) time.Time {
	threshold := st.srv.limits.StaleAfter
	if threshold <= 0 {
		return time.Time{}
	}
	var next time.Time
	var crossed []string
	at := now.UnixNano()
	for t, sb := range st.subs {
		if sb == nil {
			continue
		}
		since := sb.lag.behindSince()
		rep := &sb.lag.stale
		if rep.since != 0 && rep.since != since {
			st.srv.metrics.staleEnded(*rep, at)
			*rep = staleReport{}
		}
		if since == 0 {
			continue
		}
		due := time.Unix(0, since).Add(threshold)
		if now.Before(due) {
			if next.IsZero() || due.Before(next) {
				next = due
			}
			continue
		}
		reason, _ := st.waitsOn(typ(t), sb)
		if rep.since == 0 {
			crossed = append(crossed, typ(t).short()+" "+reason)
		}
		crossedWith := rep.crossed
		if rep.since == 0 {
			crossedWith = reason
		}
		st.srv.metrics.staleNow(rep, staleReport{since: since, reason: reason, names: sb.behindNames(), crossed: crossedWith})
		if tick := now.Add(staleTick); next.IsZero() || tick.Before(next) {
			next = tick
		}
	}
	if len(crossed) > 0 {
		st.srv.logStale(st, crossed, threshold)
	}
	return next
}

// armAudit sets the stream's audit timer to fire at next (zero: not at all).
func (st *stream) armAudit(next time.Time) {
	if next.Equal(st.auditAt) {
		return
	}
	st.auditAt = next
	if next.IsZero() {
		if st.auditTimer != nil {
			st.auditTimer.Stop()
		}
		return
	}
	if st.auditTimer == nil {
		st.auditTimer = time.NewTimer(time.Until(next))
		return
	}
	st.auditTimer.Reset(time.Until(next))
}

// auditDue fires when the stream must look at its lag again (nil: it need not).
func (st *stream) auditDue() <-chan time.Time {
	if st.auditAt.IsZero() {
		return nil
	}
	return st.auditTimer.C
}

// forgetStale takes the stream's reports out of the gauge as it ends.
func (st *stream) forgetStale() {
	for _, sb := range st.subs {
		if sb != nil && sb.lag.stale.since != 0 {
			st.srv.metrics.staleEnded(sb.lag.stale, time.Now().UnixNano())
			sb.lag.stale = staleReport{}
		}
	}
}

// delivered tells Options.Delivered of a change that reached the stream's client (or that it
// rejected: reason).
func (s *Server) delivered(st *stream, c timedCause, handed int64, done time.Time, reason string) {
	if s.onDelivered == nil {
		return
	}
	d := Delivery{Cause: c.Cause, Computed: time.Unix(0, c.computed), Done: done, ConnID: st.id, Error: reason}
	if handed > 0 {
		d.Handed = time.Unix(0, handed)
	}
	if p := st.connectedProxy(); p != nil {
		d.NodeID = p.ID
	}
	s.onDelivered(d)
}

// logStale logs that a stream crossed the threshold, with each type's reason; past a few lines
// a second, the lines are counted and the count logged with the next.
func (s *Server) logStale(st *stream, crossed []string, threshold time.Duration) {
	p := st.connectedProxy()
	node := ""
	if p != nil {
		node = p.ID
	}
	if ok, n := s.logs.stale.allow(time.Now()); ok {
		s.log.Warn("proxy behind for longer than the stale threshold", zap.String("proxy", node), zap.String("conn", st.id),
			zap.Duration("threshold", threshold), zap.Strings("waiting", crossed), zap.Int("alsoBehindUnlogged", n))
	}
}
