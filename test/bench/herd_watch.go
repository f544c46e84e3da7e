package bench

import (
	"sync/atomic"
	"time"
)

// herdWatch follows one cluster's change to the proxies that were complete when it changed:
// each has it once it holds the version the server computed for the change (want).
type herdWatch struct {
	idx     int
	want    atomic.Uint64
	tracked []bool
	arrived []atomic.Int64 // unix ns, 0 until
	pending atomic.Int64
	done    chan struct{}
}

// Watch starts following a change of cluster idx to every proxy complete now that asks for it;
// Want then says which version the change made, and done is closed once each holds it. A watch
// of the same cluster before replaces it; Unwatch ends it.
func (h *Herd) Watch(idx int) *herdWatch {
	w := &herdWatch{idx: idx, tracked: make([]bool, len(h.proxies)), arrived: make([]atomic.Int64, len(h.proxies)), done: make(chan struct{})}
	for i, p := range h.proxies {
		if p.pos(idx) < 0 {
			continue
		}
		p.mu.Lock()
		if !p.completeAt.IsZero() {
			w.tracked[i] = true
			w.pending.Add(1)
		}
		p.mu.Unlock()
	}
	if w.pending.Load() == 0 {
		close(w.done)
	}
	if _, replaced := h.watches.Swap(idx, w); !replaced {
		h.watching.Add(1)
	}
	return w
}

// Unwatch stops following w (if it is still its cluster's watch).
func (h *Herd) Unwatch(w *herdWatch) {
	if h.watches.CompareAndDelete(w.idx, w) {
		h.watching.Add(-1)
	}
}

// Want sets the version the change made; the proxies that hold it already have it now.
func (h *Herd) Want(w *herdWatch, version uint64) {
	w.want.Store(version)
	for i, p := range h.proxies {
		if !w.tracked[i] {
			continue
		}
		p.mu.Lock()
		v := p.held[p.pos(w.idx)]
		p.mu.Unlock()
		if v == version {
			w.arrive(i)
		}
	}
}

// arrive records that proxy i holds the change (once).
func (w *herdWatch) arrive(i int) {
	if w.arrived[i].CompareAndSwap(0, time.Now().UnixNano()) && w.pending.Add(-1) == 0 {
		close(w.done)
	}
}

// Tracked is the number of proxies a watch follows.
func (w *herdWatch) Tracked() int {
	n := 0
	for _, t := range w.tracked {
		if t {
			n++
		}
	}
	return n
}

// Latency is when the last tracked proxy received the change, after at.
func (w *herdWatch) Latency(at time.Time) time.Duration {
	var last int64
	for i := range w.arrived {
		if a := w.arrived[i].Load(); w.tracked[i] && a > last {
			last = a
		}
	}
	return time.Unix(0, last).Sub(at)
}

// Missing lists the tracked proxies that do not hold the change.
func (w *herdWatch) Missing() []int {
	var out []int
	for i := range w.arrived {
		if w.tracked[i] && w.arrived[i].Load() == 0 {
			out = append(out, i)
		}
	}
	return out
}
