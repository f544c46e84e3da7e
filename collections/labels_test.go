package collections

import (
	"runtime"
	"testing"
)

func TestLabelsInterned(t *testing.T) {
	a := InternLabels(map[string]string{"app": "foo", "version": "v1"})
	b := InternLabels(map[string]string{"version": "v1", "app": "foo"})
	if a.s != b.s {
		t.Fatal("equal label sets are not shared")
	}
	// Keys and values are length-prefixed: no two different sets render alike.
	c := InternLabels(map[string]string{"a": "b:c"})
	d := InternLabels(map[string]string{"a": "b", "c": ""})
	if c.s == d.s || c.Equal(d) {
		t.Fatal("different sets were merged")
	}
	if (Labels{}).Len() != 0 || InternLabels(nil) != (Labels{}) || a.Value("app") != "foo" || a.Len() != 2 {
		t.Fatal("accessors")
	}
	src := map[string]string{"k": "v"}
	e := InternLabels(src)
	src["k"] = "changed"
	if e.Value("k") != "v" {
		t.Fatal("the set shares the caller's map")
	}
}

// A set no holder keeps is freed, and its entry goes with it.
func TestLabelsFreed(t *testing.T) {
	m := map[string]string{"only": "here"}
	present := func() bool {
		interned.mu.Lock()
		defer interned.mu.Unlock()
		return len(interned.m[labelsHash(m)]) > 0
	}
	l := InternLabels(m)
	if !present() {
		t.Fatal("no entry for a live set")
	}
	runtime.KeepAlive(l)
	l = Labels{}
	for i := 0; i < 20 && present(); i++ {
		runtime.GC()
		runtime.Gosched()
	}
	if present() {
		t.Fatal("the entry outlived its set")
	}
	// Interning the same content again makes a new, live set.
	if again := InternLabels(m); again.Value("only") != "here" || !present() {
		t.Fatal("re-interned set")
	}
}

func TestCanonicalLabelsRoundTrip(t *testing.T) {
	for _, m := range []map[string]string{
		{"app": "foo", "version": "v1"},
		{"a": "b:c", "": "", "12:x": "3:y"},
		{"unicode ✓": "~|,="},
	} {
		got := ParseCanonicalLabels(CanonicalLabels(m))
		if len(got) != len(m) {
			t.Fatalf("%v: round trip gave %v", m, got)
		}
		for k, v := range m {
			if w, ok := got[k]; !ok || w != v {
				t.Fatalf("%v: round trip gave %v", m, got)
			}
		}
	}
	if ParseCanonicalLabels("") != nil || ParseCanonicalLabels("9:ab") != nil || ParseCanonicalLabels("x:a1:b") != nil {
		t.Fatal("empty or malformed renderings parse to nil")
	}
}

// BenchmarkInternLabels interns a pod's labels whose set is already held (every pod of a
// ReplicaSet after the first); the map literal's own allocations are included.
func BenchmarkInternLabels(b *testing.B) {
	held := InternLabels(map[string]string{"app": "svc-00042", "version": "v1", "pod-template-hash": "5d9f7", "security.istio.io/tlsMode": "istio"})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if InternLabels(map[string]string{"app": "svc-00042", "version": "v1", "pod-template-hash": "5d9f7", "security.istio.io/tlsMode": "istio"}) != held {
			b.Fatal("not shared")
		}
	}
}
