package xds

import (
	"math"
	"slices"
	"time"

	"github.com/krteds/krteds/collections"
)

// Planning a subscription's next response: which names are looked at (those marked, a part of
// a sweep of every name, or every name), what each resolves to for the stream, what changed,
// what is removed, and where a response too large is cut. Nothing here is sent or encoded.

// lookup is what a plan asks of its stream.
type lookup interface {
	// resolve is the resource of a name of type t for the stream (its view, and its form of the
	// type), or with wait nil for one being computed (a mark follows).
	resolve(t typ, id nameID) (r *collections.Resource, wait bool)
	// list is every resource of type t the stream's view sees, for a wildcard subscription.
	list(t typ) []*collections.Resource
	// leaving reports whether the emptied CLA r of a name must wait for the clusters response
	// that removes its cluster.
	leaving(id nameID, r *collections.Resource, held sub) bool
}

// draft is a response a subscription planned: the resources to send, the names removed, and
// whether the answer goes on in a next part; unchanged, when none is planned, says it is because
// nothing changed.
type draft struct {
	items     []item
	removed   []nameID
	more      bool
	unchanged bool
}

// planning is one plan's working state.
type planning struct {
	sb    *subscription
	look  lookup
	limit int
	// listsAll: a state-of-the-world list of clusters or listeners lists what it looked at,
	// changed or not; any other response lists what changed and what is forced.
	listsAll bool
	// current are the names looked at that resolved to a resource, each with the input change
	// behind it (unix ns, 0 if none); changed indexes those whose version differs from the one
	// the client holds (or forced). Slices, not maps: a plan usually looks at a few names.
	current []item
	changed []int
	// looked are the names looked at through the marks, when a sweep is under way (it skips
	// them).
	looked  []nameID
	removed []nameID
	pending map[nameID]int64
	size    int
}

// plan decides the next response of the subscription, if one is due. It looks only at the
// dirty names unless every name must be looked at (a state-of-the-world list of clusters or
// listeners always is); names still being computed stay dirty. Where the type's response may be
// split, it looks only until the response reaches limit: a look at every name (a stream's first
// answer) is a sweep, its names taken a part at a time, after the names marked since.
func (sb *subscription) plan(limit int, look lookup) (draft, bool) {
	splittable := sb.t.splittable(sb.delta)
	full := sb.force || sb.dirtyAll || (sb.t.fullState() && !sb.delta)
	if full && splittable && !sb.wildcard {
		sb.sweep = sb.sweep[:0]
		sb.eachExplicit(func(id nameID) { sb.sweep = append(sb.sweep, id) })
		sb.dirtyAll, full = false, false
	}
	if !splittable {
		limit = math.MaxInt
	}
	p := &planning{sb: sb, look: look, limit: limit, listsAll: !sb.delta && sb.t.fullState()}
	if full {
		if !p.lookAll() {
			return draft{}, false
		}
	} else {
		p.lookDue()
	}
	sb.dirtyAll = false
	if len(p.changed) == 0 && len(p.removed) == 0 && !sb.force {
		return draft{unchanged: true}, false
	}
	if sb.st.Responses == 0 && len(p.current) == 0 && len(p.pending) > 0 {
		return draft{}, false // the first answer waits for real content rather than saying nothing
	}
	items := p.items()
	cut := sb.part(items, limit)
	return draft{items: cut, removed: p.removed, more: len(cut) < len(items) || len(sb.sweep) > 0 || p.size > limit}, true
}

// lookAt resolves one name the client holds as held, at the input change at (unix ns), and
// files it: pending, removed, held back for its cluster's removal, or current (and changed or
// forced).
func (p *planning) lookAt(id nameID, held sub, at int64) {
	sb := p.sb
	r, wait := p.look.resolve(sb.t, id)
	switch {
	case wait:
		if p.pending == nil {
			p.pending = map[nameID]int64{}
		}
		p.pending[id] = at
	case r == nil:
		if held.version != 0 {
			p.removed = append(p.removed, id)
		}
	case sb.t == tEndpoint && r.Endpoints == 0 && p.look.leaving(id, r, held):
		if sb.deferred == nil {
			sb.deferred = map[nameID]int64{}
		}
		sb.deferred[id] = at
	default:
		differs := held.version != r.Version || held.forced
		if differs {
			p.changed = append(p.changed, len(p.current))
		}
		p.current = append(p.current, item{id: id, res: r, at: at})
		if p.listsAll || differs {
			p.size += itemSize(r, sb.delta)
		}
	}
}

// lookAll looks at every name: those asked for, and under a wildcard every name the view lists
// (what the client holds through it and is listed no more is removed). A complete list of
// clusters or listeners waits until every part of it is computed (false).
func (p *planning) lookAll() bool {
	sb := p.sb
	sb.eachExplicit(func(id nameID) {
		held, _ := sb.subs.get(id)
		p.lookAt(id, held, sb.dirty[id])
	})
	if sb.wildcard {
		explicit := make(map[nameID]bool, len(p.current))
		for _, it := range p.current {
			explicit[it.id] = true
		}
		listed := map[nameID]bool{}
		for _, r := range p.look.list(sb.t) {
			id, known := sb.x.names.lookup(r.Name)
			if !known || !sb.holds(id) {
				id = sb.hold(r.Name)
			}
			listed[id] = true
			if explicit[id] {
				continue
			}
			explicit[id] = true // listed once
			if held, _ := sb.subs.get(id); held.version != r.Version || held.forced {
				p.changed = append(p.changed, len(p.current))
			}
			p.current = append(p.current, item{id: id, res: r, at: sb.dirty[id]})
		}
		sb.subs.each(func(id nameID, held sub) {
			if !held.explicit && !listed[id] {
				if held.version != 0 {
					p.removed = append(p.removed, id)
				} else {
					sb.drop(id)
				}
			}
		})
	}
	if sb.t.fullState() && len(p.pending) > 0 {
		sb.dirtyAll = true
		return false
	}
	sb.dirty, sb.dirtyPeak = p.pending, len(p.pending)
	return true
}

// planPresize bounds the room a plan makes at once for the names marked.
const planPresize = 1024

// lookDue looks at the names marked, then at the sweep, until the response is full; the names
// still being computed stay marked.
func (p *planning) lookDue() {
	sb := p.sb
	sb.dirtyPeak = max(sb.dirtyPeak, len(sb.dirty))
	// Sized for the names marked (a response folding many changes carries as many), up to a
	// bound: a response is cut at limit whatever is marked.
	n := min(len(sb.dirty), planPresize)
	p.current, p.changed = make([]item, 0, n), make([]int, 0, n)
	sweeping := len(sb.sweep) > 0
	if sweeping {
		p.looked = make([]nameID, 0, n)
	}
	for id, at := range sb.dirty {
		if p.size > p.limit {
			break
		}
		delete(sb.dirty, id)
		if held, ok := sb.subs.get(id); ok && (held.explicit || sb.wildcard) {
			if sweeping {
				p.looked = append(p.looked, id)
			}
			p.lookAt(id, held, at)
		}
	}
	var looked map[nameID]bool // the names looked at through the marks, for the sweep to skip
	if len(sb.sweep) > 0 && len(p.looked) > 0 {
		looked = make(map[nameID]bool, len(p.looked))
		for _, id := range p.looked {
			looked[id] = true
		}
	}
	for p.size <= p.limit && len(sb.sweep) > 0 {
		id := sb.sweep[len(sb.sweep)-1]
		sb.sweep = sb.sweep[:len(sb.sweep)-1]
		if _, marked := sb.dirty[id]; marked {
			continue // marked since: looked at with those
		}
		if looked[id] {
			continue
		}
		if held, ok := sb.subs.get(id); ok && held.explicit {
			p.lookAt(id, held, 0)
		}
	}
	if len(sb.sweep) == 0 {
		sb.sweep = nil
	}
	for id, at := range p.pending {
		if sb.dirty == nil {
			sb.dirty = map[nameID]int64{}
		}
		sb.dirty[id] = at
	}
	if len(sb.dirty) == 0 {
		// A map does not shrink: one that held a first answer's names would be walked whole
		// at every change after. A small one serves the inbox again.
		sb.owner.inbox.recycle(sb.t, sb.dirty, sb.dirtyPeak)
		sb.dirty, sb.dirtyPeak = nil, 0
	}
}

// items are the resources the response carries: every current one for a full list, else those
// changed or forced.
func (p *planning) items() []item {
	if p.listsAll || len(p.changed) == len(p.current) {
		return p.current // every one changed (changed indexes them in order)
	}
	items := make([]item, 0, len(p.changed))
	for _, i := range p.changed {
		items = append(items, p.current[i])
	}
	return items
}

// part bounds a response to limit bytes where its type may be split: the items past the bound
// (in name order, at least one sent) stay marked, for the next response.
func (sb *subscription) part(items []item, limit int) []item {
	if !sb.t.splittable(sb.delta) || len(items) < 2 {
		return items
	}
	slices.SortFunc(items, byID)
	size := 0
	for i, it := range items {
		size += itemSize(it.res, sb.delta)
		if size <= limit || i == 0 {
			continue
		}
		if sb.dirty == nil {
			sb.dirty = make(map[nameID]int64, len(items)-i)
		}
		for _, rest := range items[i:] {
			sb.dirty[rest.id] = rest.at
		}
		return items[:i]
	}
	return items
}

func byID(a, b item) int { return int(a.id) - int(b.id) }

// record records a planned response as sent with this nonce and version: the versions the
// client now holds (each item's update says it held an older one), the forced marks it clears,
// the names it removed through the wildcard forgotten (one asked for stays, held in no
// version), and an answer now awaiting its ACK.
func (sb *subscription) record(d *draft, nonce, version string, now time.Time) {
	sb.force = false
	sb.subs.holdVersions(len(d.items), func(i int) (nameID, uint64) { return d.items[i].id, d.items[i].res.Version },
		func(i int, old uint64) { d.items[i].update = old != 0 && old != d.items[i].res.Version })
	for _, id := range d.removed {
		if held, _ := sb.subs.get(id); held.explicit {
			held.version, held.forced = 0, false
			sb.subs.set(id, held)
		} else {
			sb.drop(id)
		}
	}
	sb.subs.compact()
	sb.sent(nonce, version, now, d.more)
}

// sent records that a response of the subscription went out with this nonce and version: it
// awaits its ACK.
func (sb *subscription) sent(nonce, version string, now time.Time, more bool) {
	sb.force = false
	sb.more, sb.inflight = more, true
	sb.st.SentNonce, sb.st.SentVersion, sb.st.SentTime = nonce, version, now
	sb.st.Responses++
}
