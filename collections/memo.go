package collections

import "sync"

// NewMemo makes a bounded cache named name (as /debug/memz shows it): at most maxEntries values,
// and, with size, at most maxBytes of them (0: no byte bound).
func NewMemo[K comparable, V any](name string, maxEntries, maxBytes int, size func(V) int) *Memo[K, V] {
	return &Memo[K, V]{name: name, maxEntries: maxEntries, maxBytes: maxBytes, size: size}
}

// Memo is a bounded cache, emptied when full: at maxEntries entries, or (with size) when its
// values would hold more than maxBytes. The values must be worth keeping only while asked for.
type Memo[K comparable, V any] struct {
	name                 string
	maxEntries, maxBytes int
	size                 func(V) int

	mu     sync.Mutex
	m      map[K]V
	bytes  int
	resets int
}

// Get is the value of k, built (outside the lock) and kept when build says so.
func (m *Memo[K, V]) Get(k K, build func() (V, bool)) (V, bool) {
	m.mu.Lock()
	v, ok := m.m[k]
	m.mu.Unlock()
	if ok {
		return v, true
	}
	v, ok = build()
	if !ok {
		return v, false
	}
	n := 0
	if m.size != nil {
		n = m.size(v)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if o, ok := m.m[k]; ok {
		return o, true // made meanwhile
	}
	if m.m == nil || len(m.m) >= m.maxEntries || (m.maxBytes > 0 && m.bytes+n > m.maxBytes) {
		if m.m != nil {
			m.resets++
		}
		m.m, m.bytes = map[K]V{}, 0
	}
	m.m[k] = v
	m.bytes += n
	return v, true
}

// MemoStats is one bounded cache, as /debug/memz shows it.
type MemoStats struct {
	Name       string `json:"name"`
	Entries    int    `json:"entries"`
	MaxEntries int    `json:"maxEntries"`
	Bytes      int    `json:"bytes,omitempty"`
	MaxBytes   int    `json:"maxBytes,omitempty"`
	// Resets counts the times it was emptied because it was full.
	Resets int `json:"resets"`
}

// Stats are what the memo holds against its bounds.
func (m *Memo[K, V]) Stats() MemoStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return MemoStats{Name: m.name, Entries: len(m.m), MaxEntries: m.maxEntries, Bytes: m.bytes, MaxBytes: m.maxBytes, Resets: m.resets}
}
