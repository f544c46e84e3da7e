package admission

import (
	"context"
	"encoding/base64"
	"fmt"
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
