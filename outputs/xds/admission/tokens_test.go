package admission

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingTokens accepts the tokens it maps to a namespace (as service account "sa"), refuses
// the others, and counts the reviews asked of it.
type countingTokens struct {
	accept  map[string]string
	reviews atomic.Int64
}

func (c *countingTokens) Authenticate(_ context.Context, token string) (Identity, error) {
	c.reviews.Add(1)
	ns, ok := c.accept[token]
	if !ok {
		return Identity{}, RejectedToken{"unknown token"}
	}
	return Identity{TrustDomain: "cluster.local", Namespace: ns, ServiceAccount: "sa"}, nil
}

// jwtWith is a token shaped as a JWT with these claims (its signature is not one).
func jwtWith(claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(claims)) + ".c2ln"
}

// TestTokenCacheExpiry: an accepted token is trusted until its expiry or maxTokenTTL, whichever
// comes first; a refused one is refused without asking for rejectedTokenTTL; a failure to ask
// is not remembered.
func TestTokenCacheExpiry(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tokens := &countingTokens{accept: map[string]string{}}
	c := NewTokenCache(tokens).(*tokenCache)
	c.now = func() time.Time { return now }
	soon := jwtWith(fmt.Sprintf(`{"exp":%d}`, now.Add(time.Minute).Unix()))
	late := jwtWith(fmt.Sprintf(`{"exp":%d}`, now.Add(24*time.Hour).Unix()))
	tokens.accept[soon], tokens.accept[late] = "ns1", "ns1"
	refused := jwtWith(`{}`)
	ask := func(tok string) error { _, err := c.Authenticate(context.Background(), tok); return err }
	for _, tok := range []string{soon, late, refused} {
		_ = ask(tok)
		_ = ask(tok)
	}
	if n := tokens.reviews.Load(); n != 3 {
		t.Fatalf("%d reviews for three tokens asked twice, want 3", n)
	}
	now = now.Add(2 * time.Minute) // soon has expired; refused is asked again
	if err := ask(soon); err == nil {
		t.Error("an expired token is accepted from the cache")
	}
	_ = ask(late)
	_ = ask(refused)
	if n := tokens.reviews.Load(); n != 4 {
		t.Fatalf("%d reviews, want 4 (the refused token asked again, the long-lived one not)", n)
	}
	now = now.Add(maxTokenTTL)
	_ = ask(late)
	if n := tokens.reviews.Load(); n != 5 {
		t.Fatalf("%d reviews, want 5: a long-lived token is asked again after %v", n, maxTokenTTL)
	}
}

// TestRefusedTokensDoNotPushAcceptedOnesOut: twenty thousand made-up tokens, each refused,
// leave an accepted token in the cache: it is not reviewed again.
func TestRefusedTokensDoNotPushAcceptedOnesOut(t *testing.T) {
	tokens := &countingTokens{accept: map[string]string{}}
	c := NewTokenCache(tokens).(*tokenCache)
	good := jwtWith(fmt.Sprintf(`{"exp":%d}`, time.Now().Add(time.Hour).Unix()))
	tokens.accept[good] = "ns1"
	ask := func(tok string) error { _, err := c.Authenticate(context.Background(), tok); return err }
	if err := ask(good); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20000; i++ {
		if err := ask(jwtWith(fmt.Sprintf(`{"sub":"made-up-%d"}`, i))); err == nil {
			t.Fatal("a made-up token was accepted")
		}
	}
	before := tokens.reviews.Load()
	if err := ask(good); err != nil {
		t.Fatal(err)
	}
	if n := tokens.reviews.Load() - before; n != 0 {
		t.Fatalf("the accepted token was reviewed again after 20 000 refused ones (%d reviews)", n)
	}
	if len(c.refused.m) > maxRefusedTokens || len(c.accepted.m) != 1 {
		t.Fatalf("%d refused and %d accepted answers kept", len(c.refused.m), len(c.accepted.m))
	}
}

// slowTokens answers once released.
type slowTokens struct{ release chan struct{} }

func (s slowTokens) Authenticate(ctx context.Context, _ string) (Identity, error) {
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return Identity{}, RejectedToken{"slow"}
}

// TestReviewWaitsAreBounded: with every review place taken by a slow API server, a stream
// waiting for one gives up after the wait, with an error that is not remembered.
func TestReviewWaitsAreBounded(t *testing.T) {
	slow := slowTokens{release: make(chan struct{})}
	c := NewTokenCache(slow).(*tokenCache)
	c.reviewWait = 50 * time.Millisecond
	done := make(chan struct{})
	for i := 0; i < MaxConcurrentReviews; i++ {
		go func() {
			_, _ = c.Authenticate(context.Background(), jwtWith(fmt.Sprintf(`{"sub":"%d"}`, i)))
			done <- struct{}{}
		}()
	}
	// Each of the 16 takes a place: the 17th then waits, and gives up.
	deadline := time.Now().Add(10 * time.Second)
	for len(c.sem) < MaxConcurrentReviews {
		if time.Now().After(deadline) {
			t.Fatal("the slow reviews never took their places")
		}
		time.Sleep(time.Millisecond) // polled: taking a place signals nothing
	}
	_, err := c.Authenticate(context.Background(), jwtWith(`{"sub":"late"}`))
	if err == nil || !strings.Contains(err.Error(), "reviews in flight") {
		t.Fatalf("a review waiting behind %d slow ones: %v, want it to give up", MaxConcurrentReviews, err)
	}
	close(slow.release)
	for i := 0; i < MaxConcurrentReviews; i++ {
		<-done
	}
	if _, ok := c.refused.m[sha256.Sum256([]byte(jwtWith(`{"sub":"late"}`)))]; ok {
		t.Fatal("giving up is remembered as a refusal")
	}
}
