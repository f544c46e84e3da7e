package xds

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/krteds/krteds/collections"
)

func collectionOf(members ...string) *collections.LEDSCollection {
	c := &collections.LEDSCollection{Name: "c/*"}
	for _, m := range members {
		name, version, _ := strings.Cut(m, "@")
		var v uint64
		_, _ = fmt.Sscan(version, &v)
		c.Members = append(c.Members, &collections.Resource{Name: name, Version: v})
	}
	return c
}

// diffCollection sends what the client does not hold in the current version (update: it held
// an older one) and removes what it holds and the collection no longer lists, whatever the
// order of the two lists.
func TestDiffCollection(t *testing.T) {
	for _, c := range []struct {
		name         string
		old, cur     *collections.LEDSCollection
		sent, remove []string
	}{
		{"first", nil, collectionOf("a@1", "b@1"), []string{"a@1 new", "b@1 new"}, nil},
		{"gone", collectionOf("a@1", "b@1"), nil, nil, []string{"a", "b"}},
		{"same", collectionOf("a@1", "b@1"), collectionOf("a@1", "b@1"), nil, nil},
		{"one changed", collectionOf("a@1", "b@1", "c@1"), collectionOf("a@1", "b@2", "c@1"), []string{"b@2 update"}, nil},
		{"inserted", collectionOf("a@1", "c@1"), collectionOf("a@1", "b@1", "c@1"), []string{"b@1 new"}, nil},
		{"removed", collectionOf("a@1", "b@1", "c@1"), collectionOf("a@1", "c@2"), []string{"c@2 update"}, []string{"b"}},
		{"reordered", collectionOf("a@1", "b@1", "c@1"), collectionOf("c@1", "a@1", "d@1"), []string{"d@1 new"}, []string{"b"}},
		{"appended", collectionOf("a@1"), collectionOf("a@1", "b@1"), []string{"b@1 new"}, nil},
		{"truncated", collectionOf("a@1", "b@1"), collectionOf("a@1"), nil, []string{"b"}},
	} {
		var sent, removed []string
		diffCollection(c.old, c.cur, func(m *collections.Resource, update bool) {
			s := fmt.Sprintf("%s@%d", m.Name, m.Version)
			if update {
				s += " update"
			} else {
				s += " new"
			}
			sent = append(sent, s)
		}, func(name string) { removed = append(removed, name) })
		slices.Sort(removed)
		if !slices.Equal(sent, c.sent) || !slices.Equal(removed, c.remove) {
			t.Errorf("%s: sent %q removed %q, want %q and %q", c.name, sent, removed, c.sent, c.remove)
		}
	}
}
