package xds

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/adsclient"
)

// finishesWhileResolved is a source one of whose names, once armed, finishes being computed as
// a stream resolves it: its change is announced during the stream's turn, between the plan that
// found it being computed and the stream's next wait.
type finishesWhileResolved struct {
	*fakeSource
	typeURL, name string
	armed         atomic.Bool
}

func (f *finishesWhileResolved) Resolve(v *collections.View, typeURL, name string) (*collections.Resource, bool) {
	r, pending := f.fakeSource.Resolve(v, typeURL, name)
	if pending && typeURL == f.typeURL && name == f.name && f.armed.CompareAndSwap(true, false) {
		f.fakeSource.setPending(typeURL, name, false) // announced now, synchronously
	}
	return r, pending
}

// TestAChangeAnnouncedDuringATurnWakesTheStream: a type is quiet while its response awaits the
// ACK, and stays so until the end of the ACK's turn. A change announced during that turn (here:
// a name the turn found being computed, computed while the turn runs; under load, any change
// landing after the turn took its inbox) is left without waking the stream. The turn leaves the
// type loud again, and that mark must not be lost: the stream is sent the name at once, not at
// the next unrelated event (none may come: the mark is not yet part of the stream's lag, so no
// stale audit is armed for it).
func TestAChangeAnnouncedDuringATurnWakesTheStream(t *testing.T) {
	fake := newFakeSource()
	url := tEndpoint.url()
	src := &finishesWhileResolved{fakeSource: fake, typeURL: url, name: "x"}
	// No stale audit: its periodic turn would take the lost mark, seconds late.
	fs := startFakeOn(t, src, fake, func(o *Options) { o.Limits.StaleAfter = -1 })
	fake.set(url, "a")
	fake.set(url, "x")
	s, err := adsclient.OpenDelta(context.Background(), fs.cc, sidecarNode(1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_ = s.Subscribe(url, []string{"a", "x"}, nil)
	first := recvDeltaType(t, s, url)
	if len(first.Resources) != 2 {
		t.Fatalf("the first answer carries %d CLAs, want 2", len(first.Resources))
	}
	// Not yet ACKed: x changes and is being computed again.
	fake.setPending(url, "x", true)
	want := fake.set(url, "x")
	src.armed.Store(true)
	_ = s.Ack(first)
	r := recvDeltaType(t, s, url)
	var names []string
	for _, res := range r.Resources {
		names = append(names, res.Name)
		if res.Name == "x" && string(res.Resource.GetValue()) != string(want.Body) {
			t.Fatalf("x sent as %q, want its newest version %q", res.Resource.GetValue(), want.Body)
		}
	}
	if !slices.Equal(names, []string{"x"}) {
		t.Fatalf("after the ACK the CLAs %v came, want x alone", names)
	}
	if src.armed.Load() {
		t.Fatal("x was never resolved while being computed: the test did not test the turn it means to")
	}
}
