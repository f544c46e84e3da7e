package history

import (
	"strings"
	"time"

	"github.com/krteds/krteds/collections"
)

// diff records in c the endpoints added, removed and changed in health from before to after,
// both in the order the merge leaves them (collections.CompareEndpoints): one walk, no map. A
// list out of that order is diffed by key instead.
func diff(before, after []*collections.Endpoint, c *Change) {
	if !sorted(before) || !sorted(after) {
		diffByKey(before, after, c)
		return
	}
	i, j := 0, 0
	for i < len(before) || j < len(after) {
		switch {
		case j == len(after):
			c.note(&c.Removed, before[i], 0)
			i++
		case i == len(before):
			c.note(&c.Added, after[j], 0)
			j++
		default:
			a, b := before[i], after[j]
			if a == b {
				i, j = i+1, j+1
				continue
			}
			switch k := compareKeys(a, b); {
			case k < 0:
				c.note(&c.Removed, a, 0)
				i++
			case k > 0:
				c.note(&c.Added, b, 0)
				j++
			default:
				c.changed(a, b)
				i, j = i+1, j+1
			}
		}
	}
}

// compareKeys orders endpoints by their key (address, then port name), as the merge does.
func compareKeys(a, b *collections.Endpoint) int {
	if a.Address != b.Address {
		if c := collections.CompareAddresses(a.Address, b.Address); c != 0 {
			return c
		}
	}
	return strings.Compare(a.PortName, b.PortName)
}

func sorted(eps []*collections.Endpoint) bool {
	for i := 1; i < len(eps); i++ {
		if compareKeys(eps[i-1], eps[i]) >= 0 {
			return false
		}
	}
	return true
}

// diffByKey is diff for lists in any order.
func diffByKey(before, after []*collections.Endpoint, c *Change) {
	old := make(map[string]*collections.Endpoint, len(before))
	for _, e := range before {
		old[e.Address+"|"+e.PortName] = e
	}
	for _, e := range after {
		k := e.Address + "|" + e.PortName
		if o := old[k]; o == nil {
			c.note(&c.Added, e, 0)
		} else {
			c.changed(o, e)
		}
		delete(old, k)
	}
	for _, e := range before {
		if old[e.Address+"|"+e.PortName] != nil {
			c.note(&c.Removed, e, 0)
		}
	}
}

// changed records an endpoint of the same key in both lists: its change of health, or another
// change (its port, its metadata) counted.
func (c *Change) changed(a, b *collections.Endpoint) {
	switch {
	case a.Health != b.Health:
		c.note(&c.Health, b, a.Health)
	case a != b && !a.Equals(*b):
		c.Updated++
	}
}

// note lists an endpoint in one of the change's lists, or counts it past maxListed.
func (c *Change) note(list *[]Endpoint, e *collections.Endpoint, from collections.HealthStatus) {
	if len(*list) >= maxListed {
		c.Unlisted++
		return
	}
	*list = append(*list, Endpoint{Address: e.Address, Port: e.Port, PortName: e.PortName, Pod: e.Pod, Slice: e.Slice, Health: e.Health, From: from})
}

// podEnds remembers the last maxPods Pods seen going away, oldest first out.
type podEnds struct {
	byKey map[string]*PodEnd
	order []string
}

// podChanged records a Pod seen being deleted, or gone.
func (s *Store) podChanged(old, cur *collections.Pod, now time.Time) {
	switch {
	case cur == nil && old != nil:
		s.mu.Lock()
		s.pods.end(old.Key).Gone = now
		s.mu.Unlock()
	case cur != nil && cur.Deleting && (old == nil || !old.Deleting):
		s.mu.Lock()
		s.pods.end(cur.Key).Deleting = now
		s.mu.Unlock()
	case cur != nil && old == nil:
		// A Pod of the same name again (a StatefulSet's): the going of the one before is past.
		s.mu.Lock()
		delete(s.pods.byKey, cur.Key)
		s.mu.Unlock()
	}
}

// end is the record of a Pod's going, made if need be.
func (p *podEnds) end(key string) *PodEnd {
	if e := p.byKey[key]; e != nil {
		return e
	}
	if len(p.order) >= maxPods {
		delete(p.byKey, p.order[0])
		p.order = p.order[1:]
	}
	e := &PodEnd{}
	p.byKey[key] = e
	p.order = append(p.order, key)
	return e
}
