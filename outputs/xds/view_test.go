package xds

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/adsclient"
)

// lateView is a source whose view of a connection is computed after Connect returns, as the
// graph computes it, and which can make the server's first read of the view a stale one: the
// read that Connect's stream makes starts before the view exists and returns after the change
// naming the connection has been handled (or, where that change cannot be handled meanwhile,
// after a bound).
type lateView struct {
	*fakeSource
	mu       sync.Mutex
	computed map[string]bool
	handled  map[string]chan struct{}
}

func (l *lateView) Connect(p collections.ConnectedProxy) {
	l.fakeSource.Connect(p)
	done := make(chan struct{})
	l.mu.Lock()
	l.handled[p.ConnID] = done
	l.mu.Unlock()
	go func() {
		l.mu.Lock()
		l.computed[p.ConnID] = true
		l.mu.Unlock()
		l.notify(collections.Change{Conns: []string{p.ConnID}}) // returns once the server has handled it
		close(done)
	}()
}

func (l *lateView) View(id string) *collections.View {
	l.mu.Lock()
	stale, done := !l.computed[id], l.handled[id]
	l.mu.Unlock()
	if !stale {
		return l.fakeSource.View(id)
	}
	select {
	case <-done:
	case <-time.After(200 * time.Millisecond): // the change cannot be handled while this read is under way
	}
	return nil
}

// TestAStaleFirstReadOfTheViewIsNotKept: the change naming a new connection may be handled while
// the stream's own first read of its view is under way; the view that change set stays, and the
// stream is answered.
func TestAStaleFirstReadOfTheViewIsNotKept(t *testing.T) {
	fake := newFakeSource()
	src := &lateView{fakeSource: fake, computed: map[string]bool{}, handled: map[string]chan struct{}{}}
	fs := startFakeOn(t, src, fake)
	fake.set(tEndpoint.url(), "e1")
	for i := range 3 {
		s, err := adsclient.Open(context.Background(), fs.cc, sidecarNode(i))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Request(tEndpoint.url(), "e1"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(10 * time.Second); err != nil {
			t.Fatalf("stream %d: no answer: %v", i, err)
		}
		s.Close()
	}
}
