package scale

import (
	"testing"
	"time"
)

// TestJudgePartialCLAs holds the judge to its rule: a CLA is partial when it lacks an address the
// slices held ready (its Pod present) throughout from lagBehind before its arrival to lagAhead
// after; lacking one that joined or left within that window is a client trailing, or krteds
// running ahead of the rig's informers.
func TestJudgePartialCLAs(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	// 1, 2, 3 ready for long; 4 leaves 300 ms after the CLA arrives at 10 s, 5 joins 2 s before.
	states := []*state{
		{seq: 0, at: at(0), set: []uint32{1, 2, 3, 4}},
		{seq: 1, at: at(8 * time.Second), set: []uint32{1, 2, 3, 4, 5}},
		{seq: 2, at: at(10*time.Second + 300*time.Millisecond), set: []uint32{1, 2, 3, 5, 6}},
	}
	for _, tc := range []struct {
		name    string
		set     []uint32
		partial bool
	}{
		{"the newest state", []uint32{1, 2, 3, 5, 6}, false},
		{"ahead on a removal, behind on two joins", []uint32{1, 2, 3}, false},
		{"more than the slices", []uint32{1, 2, 3, 4, 5, 6, 7}, false},
		{"lacking one ready throughout", []uint32{1, 3, 4, 5}, true},
		{"as many as the slices, lacking one ready throughout", []uint32{1, 3, 4, 5, 7}, true},
		{"empty", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTruth()
			tr.svcs["s"] = &svcTruth{name: "s", states: states}
			tr.suspects = []suspect{{svc: "s", at: at(10 * time.Second), healthy: len(tc.set), set: tc.set, missing: lacking(states[1].set, tc.set, 8)}}
			vs := tr.violations(at(time.Minute))
			if got := len(vs) > 0; got != tc.partial {
				t.Fatalf("judged partial: %v, want %v (%+v)", got, tc.partial, vs)
			}
		})
	}
}
