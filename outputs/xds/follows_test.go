package xds

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
)

// TestFollowersChangeWithWhatTheyFollow: a name whose resource follows another's
// (Source.Follows; for krteds, the cluster of an unknown subset follows the port's
// unknown-subset set) is looked at again when a change names what it follows, and the index of
// followers is emptied with the last subscriber.
func TestFollowersChangeWithWhatTheyFollow(t *testing.T) {
	fs := startFake(t)
	fs.src.follows = map[string]string{"follower": "leader"} // before any stream: read without a lock
	eds := tEndpoint.url()
	fs.src.set(eds, "follower")
	quiet := func(body string) {
		// A new version of the follower whose only announcement is the leader's change.
		fs.src.mu.Lock()
		fs.src.res[eds]["follower"] = &collections.Resource{Name: "follower", TypeURL: eds, Version: xxhash.Sum64String(body) | 1, Body: []byte(body)}
		fs.src.mu.Unlock()
	}
	s, err := adsclient.Open(context.Background(), fs.cc, sidecarNode(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Request(eds, "follower"); err != nil {
		t.Fatal(err)
	}
	first, err := s.Recv(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ack(first, "follower"); err != nil {
		t.Fatal(err)
	}
	quiet("second")
	fs.src.notify(collections.Change{TypeURL: eds, Names: []string{"leader"}})
	second, err := s.Recv(10 * time.Second)
	if err != nil {
		t.Fatal("the follower was not sent again when what it follows changed:", err)
	}
	if len(second.Resources) != 1 || string(second.Resources[0].Value) != "second" {
		t.Fatalf("got %v, want the follower's new version", second.Resources)
	}
	if err := s.Ack(second, "follower"); err != nil {
		t.Fatal(err)
	}
	// A change of another name is not the follower's.
	quiet("third")
	fs.src.notify(collections.Change{TypeURL: eds, Names: []string{"other"}})
	if r, err := s.Recv(300 * time.Millisecond); err == nil {
		t.Fatalf("a change of an unrelated name sent %v", r.Resources)
	}

	// Unsubscribing forgets the follower.
	if err := s.Ack(second); err != nil {
		t.Fatal(err)
	}
	fixtures.Polling("the index changing signals nothing").
		Await(t, 10*time.Second, "no follower indexed after the last subscriber left", func() (bool, string) {
			fs.srv.index.mu.RLock()
			n := len(fs.srv.index.followers[tEndpoint])
			fs.srv.index.mu.RUnlock()
			return n == 0, fmt.Sprintf("%d followers indexed", n)
		})
}
