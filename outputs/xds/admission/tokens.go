package admission

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TokenAuthenticator checks a bearer token (a Kubernetes service-account JWT) and returns the
// identity it proves.
type TokenAuthenticator interface {
	Authenticate(ctx context.Context, token string) (Identity, error)
}

// bearerToken reads "authorization: Bearer <token>" from the stream's metadata.
func bearerToken(ctx context.Context) string {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ""
	}
	for _, v := range md.Get("authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok {
			return strings.TrimSpace(t)
		}
	}
	return ""
}

// Authenticate finds the identity of a stream's client on a TLS connection: its client
// certificate, else its bearer token, checked by tokens (nil: certificates only). tlsConn is
// false on the plaintext port, which authenticates nobody (its clients are trusted by where it
// listens).
func Authenticate(ctx context.Context, tokens TokenAuthenticator) (id *Identity, tlsConn bool, err error) {
	idn, tlsConn, certErr := PeerIdentity(ctx)
	if !tlsConn {
		return nil, false, nil
	}
	if certErr == nil {
		return &idn, true, nil
	}
	if tok := bearerToken(ctx); tok != "" && tokens != nil {
		idn, err := tokens.Authenticate(ctx, tok)
		if err != nil {
			return nil, true, fmt.Errorf("bearer token: %w", err)
		}
		return &idn, true, nil
	}
	return nil, true, certErr
}

// KubeTokenReview authenticates service-account tokens with the Kubernetes TokenReview API.
type KubeTokenReview struct {
	Client      kubernetes.Interface
	Audiences   []string
	TrustDomain string
}

// Authenticate implements TokenAuthenticator.
func (k KubeTokenReview) Authenticate(ctx context.Context, token string) (Identity, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tr, err := k.Client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: k.Audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return Identity{}, fmt.Errorf("TokenReview: %w", err)
	}
	if !tr.Status.Authenticated {
		return Identity{}, RejectedToken{"token not authenticated: " + tr.Status.Error}
	}
	// An authenticator that ignores audiences answers with none: the token is then not shown to
	// be meant for krteds.
	if len(k.Audiences) > 0 && !slices.ContainsFunc(tr.Status.Audiences, func(a string) bool { return slices.Contains(k.Audiences, a) }) {
		return Identity{}, RejectedToken{fmt.Sprintf("token not valid for audiences %v (the TokenReview answers %v)", k.Audiences, tr.Status.Audiences)}
	}
	// system:serviceaccount:<namespace>:<name>
	parts := strings.Split(tr.Status.User.Username, ":")
	if len(parts) != 4 || parts[0] != "system" || parts[1] != "serviceaccount" {
		return Identity{}, RejectedToken{fmt.Sprintf("%q is not a service account", tr.Status.User.Username)}
	}
	return Identity{TrustDomain: k.TrustDomain, Namespace: parts[2], ServiceAccount: parts[3]}, nil
}

// Bounds of the token cache.
const (
	// maxCachedTokens bounds the accepted tokens kept, maxRefusedTokens the refused ones, apart:
	// made-up tokens never push an accepted one out. Past a bound the expired answers go, then
	// one answer each time.
	maxCachedTokens  = 16384
	maxRefusedTokens = 4096
	// maxTokenTTL bounds how long an accepted token is trusted without asking again: a token
	// whose Pod is deleted stops working within it.
	maxTokenTTL = 5 * time.Minute
	// rejectedTokenTTL is how long a refused token is refused without asking again.
	rejectedTokenTTL = 30 * time.Second
	// MaxConcurrentReviews bounds the TokenReviews in flight, whatever clients send;
	// maxReviewWait how long a stream waits for one of them (the API server may be slow).
	MaxConcurrentReviews = 16
	maxReviewWait        = 10 * time.Second
)

// RejectedToken is an authenticator's definite answer that a token proves nothing (as opposed
// to a failure to ask): the cache remembers it for a while.
type RejectedToken struct{ Reason string }

func (e RejectedToken) Error() string { return e.Reason }

// tokenCache remembers an authenticator's answers: an accepted token until it expires (its
// "exp" claim, read once the authenticator has accepted it) or maxTokenTTL, a refused one for
// rejectedTokenTTL. A token that is not even shaped as a live JWT is refused without asking.
// TokenReviews in flight are bounded, and so is the wait for one.
type tokenCache struct {
	next       TokenAuthenticator
	now        func() time.Time
	sem        chan struct{}
	reviewWait time.Duration

	mu       sync.Mutex
	accepted answers
	refused  answers
	reviews  int // answers asked of next (tests)
}

type tokenAnswer struct {
	id    Identity
	err   error
	until time.Time
}

// answers are cached answers, bounded.
type answers struct {
	max int
	m   map[[32]byte]tokenAnswer
}

// put keeps an answer, making room when full: the expired answers go, else one other.
func (a *answers) put(key [32]byte, ans tokenAnswer, now time.Time) {
	if len(a.m) >= a.max {
		for k, old := range a.m {
			if !now.Before(old.until) {
				delete(a.m, k)
			}
		}
		for k := range a.m {
			if len(a.m) < a.max {
				break
			}
			delete(a.m, k)
		}
	}
	a.m[key] = ans
}

// NewTokenCache wraps an authenticator with a bounded cache of its answers.
func NewTokenCache(next TokenAuthenticator) TokenAuthenticator {
	return &tokenCache{next: next, now: time.Now, sem: make(chan struct{}, MaxConcurrentReviews), reviewWait: maxReviewWait,
		accepted: answers{max: maxCachedTokens, m: map[[32]byte]tokenAnswer{}},
		refused:  answers{max: maxRefusedTokens, m: map[[32]byte]tokenAnswer{}}}
}

// Authenticate implements TokenAuthenticator.
func (c *tokenCache) Authenticate(ctx context.Context, token string) (Identity, error) {
	now := c.now()
	exp, shapeErr := jwtExpiry(token, now)
	if shapeErr != nil {
		return Identity{}, shapeErr
	}
	key := sha256.Sum256([]byte(token))
	c.mu.Lock()
	a, ok := c.accepted.m[key]
	if !ok {
		a, ok = c.refused.m[key]
	}
	c.mu.Unlock()
	if ok && now.Before(a.until) {
		return a.id, a.err
	}
	wait := time.NewTimer(c.reviewWait)
	defer wait.Stop()
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return Identity{}, fmt.Errorf("waiting to review the token: %w", ctx.Err())
	case <-wait.C:
		return Identity{}, fmt.Errorf("waiting to review the token: %d reviews in flight for %v", MaxConcurrentReviews, c.reviewWait)
	}
	id, err := c.next.Authenticate(ctx, token)
	<-c.sem
	var rejected RejectedToken
	switch {
	case err == nil:
		a = tokenAnswer{id: id, until: now.Add(maxTokenTTL)}
		if !exp.IsZero() && exp.Before(a.until) {
			a.until = exp
		}
	case errors.As(err, &rejected):
		a = tokenAnswer{err: err, until: now.Add(rejectedTokenTTL)}
	default:
		return Identity{}, err // asking failed: ask again next time
	}
	c.mu.Lock()
	c.reviews++
	if a.err == nil {
		c.accepted.put(key, a, now)
	} else {
		c.refused.put(key, a, now)
	}
	c.mu.Unlock()
	return a.id, a.err
}

// jwtExpiry reads the expiry of a token shaped as a JWT (three base64url parts, the second a
// JSON object), without checking its signature: only an authenticator that accepted it makes
// the expiry mean anything. A token of another shape, or expired, is refused (a zero time: the
// token has no expiry).
func jwtExpiry(token string, now time.Time) (time.Time, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || len(token) > 16<<10 {
		return time.Time{}, RejectedToken{"the bearer token is not a JWT"}
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, RejectedToken{"the bearer token is not a JWT: its claims are not base64url"}
	}
	var claims struct {
		Exp *float64 `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return time.Time{}, RejectedToken{"the bearer token is not a JWT: its claims are not a JSON object"}
	}
	if claims.Exp == nil {
		return time.Time{}, nil
	}
	exp := time.Unix(int64(*claims.Exp), 0)
	if !now.Before(exp) {
		return time.Time{}, RejectedToken{"the bearer token has expired"}
	}
	return exp, nil
}
