package xds

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestEveryTypeHasItsLabels: every served type has a type URL, a short name and an istiod type
// label, all distinct, and a push of each is counted under its own istiod label (LEDS pushes
// were counted under an empty one).
func TestEveryTypeHasItsLabels(t *testing.T) {
	seen := map[string]typ{}
	for ty := range numTypes {
		for _, v := range []string{typeURLs[ty], shortNames[ty], istioTypes[ty]} {
			if v == "" {
				t.Errorf("type %d has an empty label", ty)
				continue
			}
			if o, dup := seen[v]; dup {
				t.Errorf("types %d and %d share the label %q", o, ty, v)
			}
			seen[v] = typ(ty)
		}
	}
	m := NewMetrics(prometheus.NewRegistry())
	for ty := range numTypes {
		m.pushed(typ(ty), 10, 0.001)
		if got := testutil.ToFloat64(m.Istio.Pushes.WithLabelValues(istioTypes[ty])); got != 1 {
			t.Errorf("%s: pilot_xds_pushes{type=%q} = %v after one push, want 1", typ(ty).short(), istioTypes[ty], got)
		}
	}
	if got := testutil.ToFloat64(m.Istio.Pushes.WithLabelValues("")); got != 0 {
		t.Errorf("pilot_xds_pushes{type=\"\"} = %v, want 0", got)
	}
}

// TestToldStampsOnlyTheNameLookedUp: a change time recorded for a name whose id was let go and
// handed to another name meanwhile does not stamp that other name.
func TestToldStampsOnlyTheNameLookedUp(t *testing.T) {
	nt := newNameTable(0)
	a := nt.acquire("a")
	nt.release(a) // the last stream holding "a" left after onChange looked it up
	b := nt.acquire("b")
	if a != b {
		t.Fatalf("the table did not reuse the id (a=%d, b=%d): the test needs it to", a, b)
	}
	nt.setTold([]nameID{a}, []string{"a"}, tEndpoint, 42)
	if got := nt.told(b, tEndpoint); got != 0 {
		t.Fatalf("\"b\" was stamped with the change of \"a\": %d", got)
	}
	nt.setTold([]nameID{b}, []string{"b"}, tEndpoint, 43)
	if got := nt.told(b, tEndpoint); got != 43 {
		t.Fatalf("\"b\" told at %d, want 43", got)
	}
}

// TestToldStampsABatch: one call stamps every name of a change's batch whose id still stands for
// it, and skips, within the same batch, an id handed to another name since.
func TestToldStampsABatch(t *testing.T) {
	nt := newNameTable(0)
	gone := nt.acquire("gone")
	nt.release(gone)
	reused := nt.acquire("reused") // takes gone's id
	kept := nt.acquire("kept")
	if gone != reused {
		t.Fatalf("the table did not reuse the id (gone=%d, reused=%d): the test needs it to", gone, reused)
	}
	nt.setTold([]nameID{gone, kept}, []string{"gone", "kept"}, tEndpoint, 44)
	if got := nt.told(reused, tEndpoint); got != 0 {
		t.Errorf("\"reused\" was stamped with the change of \"gone\": %d", got)
	}
	if got := nt.told(kept, tEndpoint); got != 44 {
		t.Errorf("\"kept\" told at %d, want 44", got)
	}
}
