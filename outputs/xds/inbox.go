package xds

import (
	"sync"

	"github.com/krteds/krteds/collections"
)

// inbox is how other goroutines reach a stream: they leave marks (names of a type to look at
// again, coalesced), a new view, or a question about its state, and wake it; the stream's
// goroutine takes them all at its next turn. Nothing here waits for the stream: a change of the
// source reaches a thousand streams without waiting on any of them. Its lock guards only what
// is left in it.
type inbox struct {
	wake chan struct{} // capacity 1

	mu   sync.Mutex
	ids  [numTypes]map[nameID]int64
	all  [numTypes]bool
	view *collections.View
	// viewSet: view was left (nil included).
	viewSet bool
	asks    []ask
	// closed: the stream has ended; questions are answered at once, unasked.
	closed bool
	// spare are maps of marks the stream gave back emptied (recycle), one a type: the next marks
	// of the type fill one rather than growing a new map.
	spare [numTypes]map[nameID]int64
	// quiet are the types whose marks do not wake the stream (a bit each): it could not act on
	// them before an event of its own (the ACK of the response of the type it awaits), and
	// takes them at its turn after that event.
	quiet uint8
}

// ask is a question for the stream's goroutine: f runs there (with the stream's state), then
// done is closed.
type ask struct {
	f    func()
	done chan struct{}
}

func newInbox() inbox { return inbox{wake: make(chan struct{}, 1)} }

// kick wakes the stream.
func (in *inbox) kick() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// mark leaves names (nil: all) of a type to look at again, for an input change at at (unix ns).
func (in *inbox) mark(t typ, ids []nameID, at int64) {
	in.mu.Lock()
	if ids == nil || t.fullState() {
		in.all[t] = true
	}
	if len(ids) > 0 && in.ids[t] == nil {
		if m := in.spare[t]; m != nil {
			in.ids[t], in.spare[t] = m, nil
		} else {
			in.ids[t] = make(map[nameID]int64, len(ids))
		}
	}
	for _, id := range ids {
		// The earliest change not yet taken: the first the client has not been sent.
		if old, ok := in.ids[t][id]; !ok || old == 0 || (at != 0 && at < old) {
			in.ids[t][id] = at
		}
	}
	quiet := in.quiet&(1<<t) != 0
	in.mu.Unlock()
	if !quiet {
		in.kick()
	}
}

// maxRecycled bounds the marks a map the stream gives back held: a map does not shrink, and one
// that held a first answer's names would be walked whole at every change after.
const maxRecycled = 256

// recycle gives back a map of marks of type t that held at most maxRecycled marks, emptied here,
// for the inbox's next marks of the type.
func (in *inbox) recycle(t typ, m map[nameID]int64, peak int) {
	if m == nil || peak > maxRecycled {
		return
	}
	clear(m)
	in.mu.Lock()
	if in.spare[t] == nil {
		in.spare[t] = m
	}
	in.mu.Unlock()
}

// setQuiet sets the types whose marks do not wake the stream (a bit each), on the stream's
// goroutine, which takes every mark left at its next turn. A type made loud again whose marks
// were left quietly since the stream last took its inbox (during the turn that ends now: the
// names it found being computed were announced while it ran) wakes the stream: nothing else
// would, and the marks would wait for an unrelated event.
func (in *inbox) setQuiet(types uint8) {
	in.mu.Lock()
	loud := in.quiet &^ types
	in.quiet = types
	left := false
	for t := range numTypes {
		if loud&(1<<t) != 0 && (len(in.ids[t]) > 0 || in.all[t]) {
			left = true
		}
	}
	in.mu.Unlock()
	if left {
		in.kick()
	}
}

// setView leaves the stream's new view.
func (in *inbox) setView(v *collections.View) {
	in.mu.Lock()
	in.view, in.viewSet = v, true
	in.mu.Unlock()
	in.kick()
}

// question runs f on the stream's goroutine and waits for it; false if the stream has ended (f
// did not run).
func (in *inbox) question(f func()) bool {
	ran := false
	a := ask{f: func() { f(); ran = true }, done: make(chan struct{})}
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return false
	}
	in.asks = append(in.asks, a)
	in.mu.Unlock()
	in.kick()
	<-a.done
	return ran // written before done was closed
}

// taken is what the stream takes from its inbox at a turn.
type taken struct {
	ids     [numTypes]map[nameID]int64
	all     [numTypes]bool
	view    *collections.View
	viewSet bool
	asks    []ask
}

// take empties the inbox.
func (in *inbox) take() taken {
	in.mu.Lock()
	defer in.mu.Unlock()
	t := taken{ids: in.ids, all: in.all, view: in.view, viewSet: in.viewSet, asks: in.asks}
	in.ids, in.all, in.view, in.viewSet, in.asks = [numTypes]map[nameID]int64{}, [numTypes]bool{}, nil, false, nil
	return t
}

// close ends the inbox: the questions left are released unanswered, and later ones are not
// asked.
func (in *inbox) close() {
	in.mu.Lock()
	in.closed = true
	asks := in.asks
	in.asks = nil
	in.mu.Unlock()
	for _, a := range asks {
		close(a.done)
	}
}
