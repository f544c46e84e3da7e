package collections

import (
	"encoding/json"
	"hash/maphash"
	"maps"
	"math/bits"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"weak"
)

// Labels is an immutable label set. Sets with the same content are one shared set while any
// holder keeps them (the pods of one ReplicaSet hold their labels once), and are freed when no
// holder is left. The zero value is the empty set.
type Labels struct{ s *labelSet }

type labelSet struct {
	m map[string]string
}

// interned holds the shared sets by a hash of their content (colliding sets share a bucket).
var interned struct {
	mu sync.Mutex
	m  map[uint64][]weak.Pointer[labelSet]
}

// labelSeed keys labelsHash per process: whoever writes Pods cannot choose label sets that share
// a bucket (each would be compared with all the others when interned).
var labelSeed = maphash.MakeSeed()

// labelsHash is a hash of a set's pairs that does not depend on the map's order.
func labelsHash(m map[string]string) uint64 {
	var h uint64
	for k, v := range m {
		// Each pair mixed on its own (the key's hash rotated, so that k=v and v=k differ),
		// the pairs added.
		kh, vh := maphash.String(labelSeed, k), maphash.String(labelSeed, v)
		h += (bits.RotateLeft64(kh, 23) ^ vh) * 0x9e3779b97f4a7c15
	}
	return h
}

// InternLabels returns the shared set holding m's labels (m is copied, not kept).
func InternLabels(m map[string]string) Labels {
	if len(m) == 0 {
		return Labels{}
	}
	h := labelsHash(m)
	interned.mu.Lock()
	defer interned.mu.Unlock()
	bucket := interned.m[h]
	for _, wp := range bucket {
		if s := wp.Value(); s != nil && maps.Equal(s.m, m) {
			return Labels{s}
		}
	}
	s := &labelSet{m: maps.Clone(m)}
	wp := weak.Make(s)
	if interned.m == nil {
		interned.m = map[uint64][]weak.Pointer[labelSet]{}
	}
	interned.m[h] = append(bucket, wp)
	runtime.AddCleanup(s, forgetLabels, internEntry{h, wp})
	return Labels{s}
}

type internEntry struct {
	hash uint64
	wp   weak.Pointer[labelSet]
}

// forgetLabels drops a collected set's entry.
func forgetLabels(e internEntry) {
	interned.mu.Lock()
	defer interned.mu.Unlock()
	bucket := slices.DeleteFunc(interned.m[e.hash], func(wp weak.Pointer[labelSet]) bool { return wp == e.wp })
	if len(bucket) == 0 {
		delete(interned.m, e.hash)
	} else {
		interned.m[e.hash] = bucket
	}
}

// CanonicalLabels is an unambiguous rendering of a label set: its pairs sorted by key, each part
// prefixed with its length ("" for no labels). ParseCanonicalLabels reverses it.
func CanonicalLabels(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	var b strings.Builder
	for _, k := range keys {
		v := m[k]
		b.WriteString(strconv.Itoa(len(k)))
		b.WriteByte(':')
		b.WriteString(k)
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.WriteString(v)
	}
	return b.String()
}

// ParseCanonicalLabels is the label set CanonicalLabels rendered (nil for "" or a malformed
// rendering).
func ParseCanonicalLabels(s string) map[string]string {
	if s == "" {
		return nil
	}
	out := map[string]string{}
	part := func() (string, bool) {
		i := strings.IndexByte(s, ':')
		if i <= 0 {
			return "", false
		}
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 || n > len(s)-i-1 {
			return "", false
		}
		v := s[i+1 : i+1+n]
		s = s[i+1+n:]
		return v, true
	}
	for s != "" {
		k, ok := part()
		if !ok {
			return nil
		}
		v, ok := part()
		if !ok {
			return nil
		}
		out[k] = v
	}
	return out
}

// Get returns the value of label k.
func (l Labels) Get(k string) (string, bool) {
	if l.s == nil {
		return "", false
	}
	v, ok := l.s.m[k]
	return v, ok
}

// Value returns the value of label k, "" when absent.
func (l Labels) Value(k string) string {
	v, _ := l.Get(k)
	return v
}

// Len is the number of labels.
func (l Labels) Len() int {
	if l.s == nil {
		return 0
	}
	return len(l.s.m)
}

// Map is the set as a map, shared by every holder: it must not be modified.
func (l Labels) Map() map[string]string {
	if l.s == nil {
		return nil
	}
	return l.s.m
}

// Equal compares the two sets' content (interned sets compare by identity first).
func (l Labels) Equal(o Labels) bool {
	return l.s == o.s || maps.Equal(l.Map(), o.Map())
}

// MarshalJSON renders the set as a JSON object.
func (l Labels) MarshalJSON() ([]byte, error) { return json.Marshal(l.Map()) }
