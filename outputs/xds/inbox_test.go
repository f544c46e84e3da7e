package xds

import "testing"

// woken reports whether the inbox has woken its stream (and takes the wake).
func woken(in *inbox) bool {
	select {
	case <-in.wake:
		return true
	default:
		return false
	}
}

// TestQuietTypesDoNotWakeTheStream: a mark of a type the stream has made quiet is left without
// waking it, and taken at its next turn with the rest; a mark of another type, a question's kick
// and a new view still wake it; once the stream makes the type loud again its marks wake it.
func TestQuietTypesDoNotWakeTheStream(t *testing.T) {
	in := newInbox()
	in.setQuiet(1 << tEndpoint)
	in.mark(tEndpoint, []nameID{1, 2}, 100)
	in.mark(tEndpoint, []nameID{2}, 50)
	if woken(&in) {
		t.Fatal("a mark of a quiet type woke the stream")
	}
	in.mark(tCluster, []nameID{3}, 0)
	if !woken(&in) {
		t.Fatal("a mark of another type did not wake the stream")
	}
	got := in.take()
	if len(got.ids[tEndpoint]) != 2 || got.ids[tEndpoint][2] != 50 || got.ids[tEndpoint][1] != 100 {
		t.Fatalf("the quiet marks taken: %v, want names 1 at 100 and 2 at its earliest change, 50", got.ids[tEndpoint])
	}
	in.setView(nil)
	if !woken(&in) {
		t.Fatal("a new view did not wake a stream with a quiet type")
	}
	// Marks left quietly and not taken wake the stream as their type is made loud again; a type
	// left quiet, or one made loud with nothing left, does not.
	in.setQuiet(1<<tEndpoint | 1<<tCluster)
	in.mark(tEndpoint, []nameID{5}, 0)
	in.setQuiet(1 << tEndpoint)
	if woken(&in) {
		t.Fatal("made loud with no marks of its own, a type woke the stream for another's quiet marks")
	}
	in.setQuiet(0)
	if !woken(&in) {
		t.Fatal("a type made loud again did not wake the stream for the marks it left quietly")
	}
	in.take()
	in.setQuiet(1 << tEndpoint)
	in.setQuiet(0)
	if woken(&in) {
		t.Fatal("a type made loud again with no marks left woke the stream")
	}
	in.mark(tEndpoint, []nameID{4}, 0)
	if !woken(&in) {
		t.Fatal("a mark of a type no longer quiet did not wake the stream")
	}
}

// TestQuietOnlyWhileAwaitingAnACKBehind: a type is quiet while its response awaits the ACK and
// the client is already behind (the stale audit then reports it whether or not the marks are
// taken), not before its first response is sent nor once it is ACKed.
func TestQuietOnlyWhileAwaitingAnACKBehind(t *testing.T) {
	st := &stream{delta: true}
	sb := &subscription{t: tEndpoint, owner: st}
	st.subs[tEndpoint] = sb
	if q := st.quietTypes(); q != 0 {
		t.Fatalf("quiet %b with nothing in flight", q)
	}
	sb.inflight = true
	if q := st.quietTypes(); q != 0 {
		t.Fatalf("quiet %b in flight with nothing behind: a mark must start the lag", q)
	}
	sb.lag.sending.since = 1
	if q := st.quietTypes(); q != 1<<tEndpoint {
		t.Fatalf("quiet %b, want the endpoints' bit while awaiting their ACK behind", q)
	}
	sb.inflight = false
	if q := st.quietTypes(); q != 0 {
		t.Fatalf("quiet %b after the ACK", q)
	}
}

// TestRecycledMarksAreEmptyAndBounded: a map of marks given back small comes back empty for the
// next marks of its type; one that held more than maxRecycled marks is not kept (a map does not
// shrink, and would be walked whole at every change after).
func TestRecycledMarksAreEmptyAndBounded(t *testing.T) {
	in := newInbox()
	small := map[nameID]int64{1: 1, 2: 2}
	in.recycle(tEndpoint, small, len(small))
	in.mark(tEndpoint, []nameID{7}, 0)
	got := in.take().ids[tEndpoint]
	if len(got) != 1 || len(small) != 1 {
		t.Fatalf("marks after a recycle: %v (the recycled map holds %v), want name 7 alone in it", got, small)
	}
	if _, ok := small[7]; !ok {
		t.Fatal("the recycled map was not reused")
	}
	big := map[nameID]int64{}
	for i := range maxRecycled + 1 {
		big[nameID(i)] = 0
	}
	in.recycle(tEndpoint, big, len(big))
	in.mark(tEndpoint, []nameID{1 << 20}, 0)
	if _, reused := big[1<<20]; reused || len(big) != maxRecycled+1 {
		t.Fatal("a map past maxRecycled marks was reused")
	}
}
